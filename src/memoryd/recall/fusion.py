"""Fusion: the stages' rankings combined by weighted reciprocal rank."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memoryd.recall.candidates import Candidate
from memoryd.recall.conversation import ASKING_PENALTY

RRF_K = 20
"""Reciprocal-rank-fusion constant; lower than the usual 60 because candidate lists are short."""

STAGE_WEIGHTS: Mapping[str, float] = {
    "bm25": 1.0,
    "entity": 0.4,
    "graph": 0.3,
    "kind": 1.0,
    "vector": 0.8,
    "context": 1.0,  # never fused alone: context scores rank within the bm25 ranking (`fuse`)
}
TEXT_STAGES = frozenset({"bm25", "context"})


def rrf(rankings: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Reciprocal rank fusion of each stage's ranking, weighted per stage."""
    fused: dict[str, float] = {}
    for stage, ranking in rankings.items():
        weight = STAGE_WEIGHTS.get(stage, 0.5)
        for rank, slug in enumerate(ranking):
            fused[slug] = fused.get(slug, 0.0) + weight / (RRF_K + rank + 1)
    return fused


def ranking(candidates: Mapping[str, Candidate], *stages: str) -> list[str]:
    """The candidates any of `stages` found, by the sum of those stages' scores; in the
    text ranking a turn that asks counts `ASKING_PENALTY` of its score."""
    asking = 1.0
    if TEXT_STAGES.intersection(stages):
        asking = ASKING_PENALTY
    scored = [
        (
            sum(c.stage_scores.get(stage, 0.0) for stage in stages)
            * (asking if c.shape is not None and c.shape.asks else 1.0),
            slug,
        )
        for slug, c in candidates.items()
        if any(stage in c.stage_scores for stage in stages)
    ]
    return [slug for _, slug in sorted(scored, key=lambda item: (-item[0], item[1]))]
