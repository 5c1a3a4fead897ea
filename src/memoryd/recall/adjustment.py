"""Adjustment after fusion: long-term types, titles, decay, recency and supersedes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from memoryd.graph.store import SupersedeRow
from memoryd.models import DecayState
from memoryd.recall.candidates import Candidate, MemoryFacts, rank_key

LONG_TERM_BONUS = 1.15
TITLE_BONUS = 2.0
"""For a memory whose title names all the query asks about: titles name the subject (or the
speaker of a conversation turn), so a question naming it is about that memory before others
that merely use the words. A title naming part of the query gets that share of the bonus
(`MemoryFacts.title_share`)."""
DIM_PENALTY = 0.9
SUPERSEDED_PENALTY = 0.6
"""The stale side of a supersede edge about the query's subject keeps this much of its score
(and its calibrated relevance): bounded, so a wrong edge never throws a memory off the page;
the successor is put above it by position (`supersede_order`), not by crushing its score."""
RECENCY_BONUS = 0.1
RECENCY_HALF_LIFE_DAYS = 180.0


def adjust(
    candidates: dict[str, Candidate],
    facts: Mapping[str, MemoryFacts],
    edges: Mapping[str, SupersedeRow],
    now: datetime | None = None,
    *,
    about: Mapping[str, str] | None = None,
) -> list[Candidate]:
    """Apply the ranking rules of DESIGN.md §6 and return candidates best first.

    Long-term types and recent memories are favoured, dim ones slightly demoted, and a
    superseded memory about the query's subject (`about`: older → why its edge counts here,
    `edges_about`) loses `SUPERSEDED_PENALTY`, then ranks just below its successor
    (`supersede_order`); an edge about something else only says so. A memory's age is
    counted back from `now`, by default from the newest candidate rather than the wall
    clock: the same data ranks the same whenever it is asked (and "recent" means recent in
    that project's life).
    A whole session (`Candidate.whole_session`) is not favoured for being recent: it is one
    episode of a project's history, no staler for being older, and for a question about
    what is current `current_first` decides by what the sessions say; conversation turns
    keep their recency (both measured: bench/RESULTS.md).
    """
    if now is None:
        now = max((facts[slug].created_at for slug in candidates), default=None)
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
        if cand.whole_session:
            continue
        age = 0.0 if now is None else (now - info.created_at).total_seconds()
        age_days = max(age / 86400, 0.0)
        cand.scale("recency", 1 + RECENCY_BONUS * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS))
    for older, edge in edges.items():
        if older not in candidates:
            continue
        old = candidates[older]
        old.superseded_by = edge.newer
        why = (about or {}).get(older)
        if why is None or edge.newer not in candidates:
            old.explain(
                f"superseded by {edge.newer}, {_edge_words(edge)}; not about this query's"
                " subject: kept in place",
                first=True,
            )
            continue
        old.stale = True
        old.scale("superseded", SUPERSEDED_PENALTY)
        old.demotion *= SUPERSEDED_PENALTY
        old.explain(f"superseded by {edge.newer} ({why}), {_edge_words(edge)}", first=True)
        candidates[edge.newer].explain(f"supersedes {older} ({why})", first=True)
    ranked = sorted(candidates.values(), key=lambda c: rank_key(c.score, c.slug))
    supersede_order(ranked, {o: edges[o].newer for o in about or {} if o in edges})
    return ranked


def _edge_words(edge: SupersedeRow) -> str:
    """The edge's rule and evidence sentence as an explanation shows them."""
    rule = edge.judge or f"decided by {edge.decided_by}"
    about = f" on {edge.entity_id.split(':', 2)[-1]}" if edge.entity_id else ""
    reason = " ".join((edge.reason or "").split())
    if len(reason) > EVIDENCE_SHOWN:
        reason = reason[: EVIDENCE_SHOWN - 1] + "…"
    return f"{rule}{about}" + (f': "{reason}"' if reason else "")


EVIDENCE_SHOWN = 160
"""Characters of an edge's evidence sentence an explanation shows."""


def supersede_order(ranked: list[Candidate], newer_of: Mapping[str, str]) -> None:
    """Put each successor just above the memory it supersedes when it ranks below it, in
    place: an ordering, so a right edge puts what is current first without crushing the stale
    memory's score, and the successor passes only the memories ranked between the two (the
    edges passed here are about the query's subject, so it holds evidence of its own). A
    lifted successor takes the score of the memory it passed, to keep scores in order."""
    for _ in range(len(newer_of) + 1):
        moved = False
        at = {cand.slug: i for i, cand in enumerate(ranked)}
        for older, newer in sorted(newer_of.items(), key=lambda kv: at.get(kv[0], -1)):
            if older not in at or newer not in at or at[newer] < at[older]:
                continue
            lifted = ranked.pop(at[newer])
            old = ranked[at[older]]
            if old.score > lifted.score:
                lifted.factors["supersedes"] = round(
                    old.score / lifted.score if lifted.score else 1.0, 4
                )
                lifted.score = old.score
            ranked.insert(at[older], lifted)
            moved = True
            break
        if not moved:
            return


def edges_about(
    pool: Mapping[str, Candidate],
    edges: Mapping[str, SupersedeRow],
    named: Mapping[str, str],
    shares: Mapping[str, float],
    *,
    current: bool = False,
) -> dict[str, str]:
    """older → why its supersede edge is about the query's subject, for the edges that are.

    An edge reorders only memories about what the query asks, each with evidence of its own:
    the successor holds at least `CURRENT_COVER` of the query weight the superseded memory
    holds, or the query names the entity the edge is about (`named`: entity id → the words
    naming it, "k8s" for Kubernetes) and the successor mentions it too. Otherwise a wrong edge
    (between two unrelated decisions) would bury the memory that answers under one that says
    nothing of the query. Sharing an entity the query names is not enough: a scope's hub (the
    platform every record mentions) would let wrong edges through.

    A question asking what is current (`current`, `asks_for_current`) asks for the end of
    the chain: there the successor needs only evidence of its own, a word of the query the
    superseded memory matches too ("what CI tool runs the deployment pipelines now": the
    record that replaced Concourse says "deployment pipelines", not "CI/CD")."""

    def weight(words: frozenset[str]) -> float:
        return sum(shares.get(word, 0.0) for word in words)

    about: dict[str, str] = {}
    for older, edge in edges.items():
        old, new = pool.get(older), pool.get(edge.newer)
        if old is None or new is None:
            continue
        held = weight(old.matched)
        if edge.entity_id in named and edge.entity_id in new.entities:
            about[older] = f"the query names {named[edge.entity_id]}"
        elif held > 0 and weight(old.matched & new.matched) >= CURRENT_COVER * held:
            about[older] = "both match the query"
        elif current and weight(old.matched & new.matched) > 0:
            about[older] = "the question asks what is current; both match it"
    return about


CURRENT_MARGIN = 0.4
"""How close (as a share of the higher score) a newer memory's score must be to an older one's
for it to go first when the question asks what is current (`current_first`)."""
CURRENT_COVER = 0.5
"""How much of the query weight the older memory holds the newer must hold too (by the words'
scope-local shares) to be about the same thing."""
_PRESENT = re.compile(
    r"\b(?:current|currently|now|still|latest|last|final|anymore|nowadays|presently|today)\b"
    r"|现在|目前|当前|最新|仍然|还在",
    re.IGNORECASE,
)


def asks_for_current(query: str) -> bool:
    """Whether a question asks how things stand now or last stood ("What ORM do we currently
    use?", "Does the alembic/ directory still exist?", "the final status", "as of the last
    session"), not how they were or when they changed."""
    return _PRESENT.search(query) is not None


def current_first(
    ranked: list[Candidate], facts: Mapping[str, MemoryFacts], shares: Mapping[str, float]
) -> None:
    """Put the newer of two close memories about the same thing first, in place.

    When a decision changes, the new session repeats the old one's words: both match, the
    older often better (it explained more). Before supersede judging links them, a newer
    memory within `CURRENT_MARGIN` of the older's score that holds at least `CURRENT_COVER`
    of the query weight the older holds is what is current, so it ranks first. The pipeline
    runs this only for a question that asks what is current (`asks_for_current`): for "when
    was X added" the older memory is the answer (measured: bench/RESULTS.md)."""

    def weight(words: frozenset[str]) -> float:
        return sum(shares.get(word, 0.0) for word in words)

    for i in range(len(ranked)):
        best = i
        for j in range(i + 1, len(ranked)):
            older, newer = ranked[best], ranked[j]
            if newer.score < (1 - CURRENT_MARGIN) * ranked[i].score:
                break
            held = weight(older.matched)
            if (
                held > 0
                and weight(older.matched & newer.matched) >= CURRENT_COVER * held
                and facts[newer.slug].created_at > facts[older.slug].created_at
                and not newer.stale
            ):
                best = j
        if best != i:
            moved = ranked.pop(best)
            moved.explain(f"newer than {ranked[i].slug}", first=False)
            ranked.insert(i, moved)
