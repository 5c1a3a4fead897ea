"""The graph neighbourhood stage: memories mentioning entities related to the linked ones."""

from __future__ import annotations

from collections.abc import Mapping

from memoryd.models import Predicate

PREDICATE_WEIGHTS: Mapping[str, float] = {
    Predicate.PREFERS: 1.0,
    Predicate.USES: 0.9,
    Predicate.WORKS_ON: 0.9,
    Predicate.RUNS_ON: 0.8,
    Predicate.BELONGS_TO: 0.8,
    Predicate.SUPERSEDES: 0.8,
    Predicate.SUPERSEDED_BY: 0.6,
    Predicate.CONFLICTS_WITH: 0.6,
    Predicate.LOCATED_AT: 0.6,
    Predicate.CITES: 0.5,
    Predicate.MENTIONS: 0.5,
}
