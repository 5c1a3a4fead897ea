"""Which recall stages run, and the score below which a hit is not worth injecting."""

from __future__ import annotations

from dataclasses import dataclass, field

STAGES = frozenset(
    {"answer", "text", "expansion", "entity", "graph", "kind", "context", "vector", "current"}
)
"""The switchable stages: `text` (BM25), `expansion` (words for the instances of a kind the
question asks for, in the text stage), `entity` (query → entity → memory), `graph` (one more
hop through related entities), `kind` (entities of a kind the query names), `context`
(conversation turns next to a text hit), `vector` (when an embedding index is configured),
`current` (for a question about what is current, of close memories about the same thing
the newer first), `answer` (for a question asking for a typed value — a version, a port, an
address — the memories stating none score less, `recall.answer`)."""
DEFAULT_STAGES = STAGES - {"graph"}
"""Every stage but `graph` runs by default; `current` only reorders for a question asking what
is current (`adjustment.asks_for_current`).

`graph` (one more hop, through the relations between entities) is opt-in
(`RecallConfig(stages=DEFAULT_STAGES | {"graph"})`): a stage runs by default only where it
shows a gain (DESIGN §6), and switched on this one changed no question on any set measured:
bench/RESULTS.md."""


INJECT_MIN_SCORE = 0.12
"""The relevance (`RecallHit.score`, 0 to 1) below which `inject` adds nothing to an agent's
prompt. A score is the idf-weighted, saturated share of the query a memory holds, times how
much the query names (`text.query_confidence`): a memory holding once each word of a query
that names two rare things scores about 0.2, one holding half of it about 0.1. The value
trades staying silent on a question no memory answers against injecting for one a memory
answers; it, and the alternatives tried and dropped, were measured:
bench/RESULTS.md."""


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
