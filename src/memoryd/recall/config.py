"""Which recall stages run, and the score below which a hit is not worth injecting."""

from __future__ import annotations

from dataclasses import dataclass, field

STAGES = frozenset({"text", "expansion", "entity", "graph", "kind", "context", "vector", "current"})
"""The switchable stages: `text` (BM25), `expansion` (words for the instances of a kind the
question asks for, in the text stage), `entity` (query → entity → memory), `graph` (one more
hop through related entities), `kind` (entities of a kind the query names), `context`
(conversation turns next to a text hit), `vector` (when an embedding index is configured),
`current` (of near-tied memories about the same thing, the newer first)."""
DEFAULT_STAGES = STAGES - {"current"}
"""`current` is off by default: on DevMemBench it moved no knowledge-update question's newest
session up (their scores are not near-tied) and cost 0.02 MRR elsewhere (see bench/devmem.py)."""


INJECT_MIN_SCORE = 0.2
"""The relevance (`RecallHit.score`, 0 to 1) below which `inject` adds nothing to an agent's
prompt: under 0.2 a memory holds less than about a fifth of the query's weighted words,
which on coding sessions is what an unanswerable question's best hit looks like."""


@dataclass(frozen=True)
class RecallConfig:
    """What a recall runs; the benches turn stages off one at a time (the ablation)."""

    stages: frozenset[str] = field(default_factory=lambda: DEFAULT_STAGES)
    min_score: float = INJECT_MIN_SCORE

    def __post_init__(self) -> None:
        unknown = self.stages - STAGES
        if unknown:
            from memoryd.errors import InvalidInput

            raise InvalidInput(
                f"unknown recall stage(s) {', '.join(sorted(unknown))}: "
                f"use {', '.join(sorted(STAGES))}"
            )
