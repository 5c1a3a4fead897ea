"""Which recall stages run, and the score below which a hit is not worth injecting."""

from __future__ import annotations

from dataclasses import dataclass, field

STAGES = frozenset({"text", "expansion", "entity", "graph", "kind", "context", "vector", "current"})
"""The switchable stages: `text` (BM25), `expansion` (words for the instances of a kind the
question asks for, in the text stage), `entity` (query → entity → memory), `graph` (one more
hop through related entities), `kind` (entities of a kind the query names), `context`
(conversation turns next to a text hit), `vector` (when an embedding index is configured),
`current` (for a question about what is current, of close memories about the same thing
the newer first)."""
DEFAULT_STAGES = STAGES
"""Every stage runs by default; `current` only reorders for a question asking what is current
(`adjustment.asks_for_current`)."""


INJECT_MIN_SCORE = 0.12
"""The relevance (`RecallHit.score`, 0 to 1) below which `inject` adds nothing to an agent's
prompt. A score is the idf-weighted, saturated share of the query a memory holds, times how
much the query names (`text.query_confidence`): a memory holding once each word of a query
that names two rare things scores about 0.2, one holding half of it about 0.1. Measured on
DevMemBench at 0.12 (silent on abstention questions / injects on answerable ones): record
0.60 / 0.91, capture 0.68 / 0.93, abstention AUC 0.91 / 0.93, since a project's own name no
longer counts as query content (before: 0.48 / 0.94 and 0.52 / 0.91, AUC 0.87 / 0.89). On
text evidence alone no threshold reaches silent 0.8 with injects 0.9 on the record path
(0.13: 0.76 / 0.89; capture 0.80 / 0.91): the threshold favours injecting for answerable
questions."""


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
