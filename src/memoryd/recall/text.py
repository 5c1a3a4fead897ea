"""The text stage: scope-local BM25F over the memories' title, body and (for conversation
turns) the neighbouring turns (`SearchIndex.local_bm25`), with words for the instances of a
kind the question asks for ("what sports" → surfing, hiking) at a lower weight."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from memoryd.extraction.pipeline import load_everyday_nouns

TEXT_CONTEXT_BOOST = 0.15
"""The weight in recall's text stage of a conversation turn's context (its nearest turns'
text): a reply matches on what it answers, well below what it says itself."""
QUERY_PRIOR = 2.0
"""How much a query must name before its best match can be trusted, in units of a word the
scope holds once (`query_confidence`)."""


def query_confidence(mass: float) -> float:
    """How far a full match of this query is evidence that a memory answers it, 0 to 1: the
    query's weight (`LocalRanking.mass`, the sum of its words' scope-local idf in units of
    a word held once) against that weight plus `QUERY_PRIOR`. A question naming two rare
    things is matched by chance far less often than one naming a single common word, so
    the same share of it means more (measured: bench/RESULTS.md)."""
    return mass / (mass + QUERY_PRIOR) if mass > 0 else 0.0


KIND_QUESTION = re.compile(
    r"\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?([\w-]+)(?:\s+([\w-]+))?",
    re.IGNORECASE,
)
NOT_A_KIND = frozenset(
    {
        *("do", "does", "did", "has", "have", "had", "is", "are", "was", "were", "can"),
        *("could", "will", "would", "should", "kind", "kinds", "type", "types", "sort"),
        *("sorts", "of", "the", "a", "an"),
    }
)
KIND_EXPANSION_WEIGHT = 0.3
"""The weight, in recall's text stage, of each word for an instance of the kind a question
asks for (`asked_kind`), against 1 for the query's own words."""


def asked_kind(query: str, kinds: Mapping[str, Sequence[str]]) -> str | None:
    """The kind of everyday thing a question asks instances of, if `kinds` knows it: "What
    sports does John like?" → sport, "Which board games …" → board game. The noun after
    "what" or "which" (past "kind of"); a capitalised one is a name, not a kind. The word
    after it is the kind only when the first is a modifier ("what outdoor activities"), not a
    noun: in "What file holds the config?" the noun is "file" and "holds" its verb."""
    match = KIND_QUESTION.search(query)
    if match is None:
        return None
    first, second = match.group(1), match.group(2)
    if first[:1].isupper() or first.lower() in NOT_A_KIND:
        return None
    firsts = _singulars(first.lower())
    candidates: list[str] = []
    if second:
        seconds = _singulars(second.lower())
        candidates += [f"{a} {b}" for b in seconds for a in firsts]
        if second.lower() not in NOT_A_KIND and first.lower() not in load_everyday_nouns():
            candidates += seconds
    candidates += firsts
    return next((c for c in candidates if c in kinds), None)


def _singulars(word: str) -> list[str]:
    """`word`, then what it is with a plural ending taken off ("games" → game)."""
    forms = [word]
    for ending, replacement in (("ies", "y"), ("s", ""), ("es", "")):
        if word.endswith(ending) and len(word) > len(ending) + 1:
            forms.append(word[: -len(ending)] + replacement)
    return forms
