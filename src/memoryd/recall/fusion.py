"""Fusion: the stages' rankings combined by weighted reciprocal rank."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memoryd.recall.candidates import Calibration, Candidate, rank_key
from memoryd.recall.conversation import ASKING_PENALTY
from memoryd.recall.vectors import MINILM, dense_evidence

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
EVIDENCE_WEIGHTS: Mapping[str, float] = {"entity": 1.0, "graph": 0.5, "kind": 1.0}
"""How much each graph stage's evidence counts against text on the relevance scale. A stage's
evidence for a memory is already bounded by the share of the query the words that led to it
carry in the scope (`Corpus.share`), times the entity's specificity
(`entity_weight`) and the links' confidence: a hub entity, a generic kind word common in the
scope or a weak link adds little, and no stage adds more than the query words it stands for
(a 2-hop path counts half).

The kind stage counts for memories that state one thing — a conversation turn or a long-term
note — and for a whole session only where an entity of the asked kind entered the scope
(`pipeline.kind_stage`): a session transcript names entities of every kind in passing,
so mentioning "a database" says nothing about whether it answers "which database" (measured:
bench/RESULTS.md)."""


def evidence_fusion(
    candidates: Mapping[str, Candidate],
    stages: Sequence[str],
    dense: Calibration | None = None,
) -> dict[str, float]:
    """Text relevance (scope-local BM25 as a share of the query, plus the share neighbouring
    turns lend; a turn that only asks at `ASKING_PENALTY`), plus each graph stage's bounded
    evidence (`EVIDENCE_WEIGHTS`), plus the optional vector stage's calibrated cosine
    (`recall.vectors.dense_evidence`), never its rank.

    Each candidate's `relevance` (what its calibrated score starts from) counts a graph
    stage's evidence only for the query words its text lacks (`Candidate.novel`): a memory
    saying "PostgreSQL" that also mentions the entity PostgreSQL holds that word once. The
    dense evidence speaks for the whole memory, so it counts in full where its embedder's
    `dense` calibration says its cosine means relevance (`Calibration.in_relevance`)."""
    fused: dict[str, float] = {}
    for slug, cand in candidates.items():
        if cand.whole_session and not cand.entered_kind:
            cand.drop_stage("kind")
        asking = ASKING_PENALTY if cand.shape is not None and cand.shape.asks else 1.0
        parts: dict[str, float] = {
            stage: cand.stage_scores[stage] * asking
            for stage in ("bm25", "context")
            if stage in cand.stage_scores
        }
        relevance = sum(parts.values())
        if cand.text_evidence is not None and "bm25" in parts:
            # The text ranks with light words ("use"), but they are no evidence of an answer.
            relevance += (cand.text_evidence - cand.stage_scores["bm25"]) * asking
        for stage, weight in EVIDENCE_WEIGHTS.items():
            if stage in stages and stage in cand.stage_scores:
                parts[stage] = weight * min(1.0, cand.stage_scores[stage])
                relevance += weight * min(1.0, cand.novel.get(stage, 0.0))
        cand.relevance = min(1.0, relevance)
        if asking != 1.0:
            cand.factors["asking"] = asking
        for stage, part in parts.items():
            cand.factors[stage] = round(part, 4)
        fused[slug] = sum(parts.values())
    if "vector" in stages:
        # The cosine, calibrated, not the dense rank: a rank says nothing about whether
        # anything fits, and the fused score must still say it (`recall.vectors`).
        calibration = dense or MINILM
        for slug, cand in candidates.items():
            if "vector" in cand.stage_scores and (calibration.turns or cand.shape is None):
                value = dense_evidence(cand.stage_scores["vector"], calibration)
                fused[slug] = fused.get(slug, 0.0) + value
                if calibration.in_relevance:
                    cand.relevance = min(1.0, cand.relevance + value)
                cand.factors["vector"] = round(value, 4)
    return fused


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
    return [slug for _, slug in sorted(scored, key=lambda item: rank_key(*item))]
