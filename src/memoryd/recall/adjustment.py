"""Adjustment after fusion: long-term types, titles, decay, recency and supersedes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from memoryd.models import DecayState
from memoryd.recall.candidates import Candidate, MemoryFacts

LONG_TERM_BONUS = 1.15
TITLE_BONUS = 2.0
"""For a memory whose title names all the query asks about: titles name the subject (or the
speaker of a conversation turn), so a question naming it is about that memory before others
that merely use the words. A title naming part of the query gets that share of the bonus
(`MemoryFacts.title_share`)."""
DIM_PENALTY = 0.9
SUPERSEDED_PENALTY = 0.6
RECENCY_BONUS = 0.1
RECENCY_HALF_LIFE_DAYS = 180.0


def adjust(
    candidates: dict[str, Candidate],
    facts: Mapping[str, MemoryFacts],
    superseded_by: Mapping[str, str],
    now: datetime,
) -> list[Candidate]:
    """Apply the ranking rules of DESIGN.md §6 and return candidates best first.

    Long-term types and recent memories are favoured, dim ones slightly demoted, and a
    superseded memory always ranks below its successor.
    """
    for slug, cand in candidates.items():
        info = facts[slug]
        if cand.shape is not None:
            cand.scale("length", cand.shape.length_factor)
        if info.type.long_term:
            cand.scale("long-term", LONG_TERM_BONUS)
        cand.scale("title", 1 + (TITLE_BONUS - 1) * info.title_share)
        if info.decay_state is DecayState.DIM:
            cand.scale("dim", DIM_PENALTY)
            cand.demotion *= DIM_PENALTY
        age_days = max((now - info.created_at).total_seconds() / 86400, 0.0)
        cand.scale("recency", 1 + RECENCY_BONUS * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS))
    for older, newer in superseded_by.items():
        if older not in candidates:
            continue
        old = candidates[older]
        old.superseded_by = newer
        old.scale("superseded", SUPERSEDED_PENALTY)
        old.demotion *= SUPERSEDED_PENALTY
        if newer in candidates:
            new = candidates[newer]
            if old.score >= new.score:
                old.scale("superseded", new.score * 0.95 / old.score if old.score else 1.0)
    return sorted(candidates.values(), key=lambda c: (-c.score, c.slug))


CURRENT_MARGIN = 0.2
"""How close (as a share of the higher score) two memories' scores must be for the newer to
go first when it holds every query word the older holds (`current_first`)."""


def current_first(ranked: list[Candidate], facts: Mapping[str, MemoryFacts]) -> None:
    """Put the newer of two near-tied memories about the same thing first, in place.

    When a decision changes, the new session repeats the old one's words: both match, the
    older often a little better (it explained more). Before supersede judging links them, a
    newer memory holding every query word the older one holds, within `CURRENT_MARGIN` of its
    score, is what is current, so it ranks first. Only candidates with text evidence move.
    """
    for i in range(len(ranked)):
        best = i
        for j in range(i + 1, len(ranked)):
            older, newer = ranked[best], ranked[j]
            if newer.score < (1 - CURRENT_MARGIN) * ranked[i].score:
                break
            if (
                older.matched
                and older.matched <= newer.matched
                and facts[newer.slug].created_at > facts[older.slug].created_at
                and newer.superseded_by is None
            ):
                best = j
        if best != i:
            moved = ranked.pop(best)
            moved.explain(f"newer than {ranked[i].slug}", first=False)
            ranked.insert(i, moved)
