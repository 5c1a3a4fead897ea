"""Explanation: what each hit carries to say how it was found."""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.models import RecallHit, SearchHit
from memoryd.recall.candidates import Candidate
from memoryd.recall.corpus import Corpus
from memoryd.recall.fusion import STAGE_WEIGHTS
from memoryd.search.doc import SearchDoc


def explain_expansion(
    corpus: Corpus,
    kind: str,
    expansion: dict[str, float],
    ranked: Sequence[Candidate],
    stored: dict[str, SearchDoc],
) -> None:
    """Put first in each hit's paths the instances of the asked kind it holds (at most
    two, none the query named itself): `sport → surfing → memory`."""
    asked = set(corpus.words_held(corpus.query, expansion))
    for cand in ranked:
        held = corpus.words_held(stored[cand.slug].body, expansion)
        for word in reversed([w for w in held if w not in asked][:2]):
            cand.explain(f"{kind} → {word} → memory", first=True)


def calibrated(cand: Candidate) -> float:
    """The hit's relevance, 0 to 1, the same across queries and scopes: the idf-weighted
    share of the query its text holds (`LocalScore.relevance`), demoted as the ranking
    demoted it (superseded, dim). The fused score only orders hits; this says whether any
    is worth showing (`RecallConfig.min_score`)."""
    return cand.relevance * cand.demotion


def recall_hit(cand: Candidate, stored: SearchHit) -> RecallHit:
    return RecallHit(
        slug=stored.slug,
        type=stored.type,
        title=stored.title,
        scope_hash=stored.scope_hash,
        decay_state=stored.decay_state,
        created_at=stored.created_at,
        score=round(calibrated(cand), 6),
        snippet=stored.snippet,
        matched_terms=stored.matched_terms,
        triggers=stored.triggers,
        stages=sorted(cand.stage_scores, key=list(STAGE_WEIGHTS).index),
        paths=cand.paths,
        superseded_by=cand.superseded_by,
        factors=dict(cand.factors),
    )
