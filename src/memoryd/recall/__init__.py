"""Hybrid recall: BM25 + entity traversal (+ vectors when configured), fused and adjusted.

One module per stage — `text`, `entities`, `graph` (neighbourhood), `kinds`, `conversation`
(context of conversation turns), `adjustment` (long-term, title, decay, recency, supersedes),
`fusion`, `explain` — and `pipeline`, which composes them over the stores. The ranking rules
are pure functions, testable without a database; `RecallConfig` switches stages.
"""

from __future__ import annotations

from memoryd.recall.adjustment import (
    DIM_PENALTY,
    LONG_TERM_BONUS,
    RECENCY_BONUS,
    RECENCY_HALF_LIFE_DAYS,
    SUPERSEDED_PENALTY,
    TITLE_BONUS,
    adjust,
)
from memoryd.recall.candidates import (
    Candidate,
    CandidatePool,
    MemoryFacts,
    NormaliseFn,
    TurnShape,
    VectorStage,
)
from memoryd.recall.config import STAGES, RecallConfig
from memoryd.recall.conversation import (
    ASKING_MAX_TOLD,
    ASKING_PENALTY,
    CONTEXT_SEEDS,
    CONTEXT_SPREAD,
    CONTEXT_WINDOW,
    LENGTH_EXPONENT,
    LENGTH_FACTOR_RANGE,
    turn_shapes,
)
from memoryd.recall.entities import EntityMatcher, entity_weight, named_words
from memoryd.recall.fusion import RRF_K, STAGE_WEIGHTS, TEXT_STAGES, ranking, rrf
from memoryd.recall.graph import PREDICATE_WEIGHTS
from memoryd.recall.kinds import (
    IMPLIED_KIND_WEIGHT,
    KIND_ENTITY_LIMIT,
    KIND_IMPLIED,
    KIND_WORDS,
    kind_words,
)
from memoryd.recall.pipeline import RecallOutcome, RecallPipeline
from memoryd.recall.text import (
    KIND_EXPANSION_WEIGHT,
    TEXT_CONTEXT_BOOST,
    asked_kind,
)

__all__ = [
    "ASKING_MAX_TOLD",
    "ASKING_PENALTY",
    "CONTEXT_SEEDS",
    "CONTEXT_SPREAD",
    "CONTEXT_WINDOW",
    "DIM_PENALTY",
    "IMPLIED_KIND_WEIGHT",
    "KIND_ENTITY_LIMIT",
    "KIND_EXPANSION_WEIGHT",
    "KIND_IMPLIED",
    "KIND_WORDS",
    "LENGTH_EXPONENT",
    "LENGTH_FACTOR_RANGE",
    "LONG_TERM_BONUS",
    "PREDICATE_WEIGHTS",
    "RECENCY_BONUS",
    "RECENCY_HALF_LIFE_DAYS",
    "RRF_K",
    "STAGES",
    "STAGE_WEIGHTS",
    "SUPERSEDED_PENALTY",
    "TEXT_CONTEXT_BOOST",
    "TEXT_STAGES",
    "TITLE_BONUS",
    "Candidate",
    "CandidatePool",
    "EntityMatcher",
    "MemoryFacts",
    "NormaliseFn",
    "RecallConfig",
    "RecallOutcome",
    "RecallPipeline",
    "TurnShape",
    "VectorStage",
    "adjust",
    "asked_kind",
    "entity_weight",
    "kind_words",
    "named_words",
    "ranking",
    "rrf",
    "turn_shapes",
]
