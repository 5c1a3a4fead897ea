"""Session turns by time: the turns just before and after a memory (`near_in_time`, recall's
neighbours) and a scope's visible turns in a span (`_session_entries`, the one tantivy read
`search.sessions.SessionView` makes besides `doc_at`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from memoryd.models import MemoryType, to_utc
from memoryd.search.engine import (
    _HIDDEN,
    SLUG_KEY_FIELD,
    _count,
    _hides,
    _memory_type,
    _stored,
    tantivy,
)
from memoryd.search.reader import IndexReader
from memoryd.search.sessions import CONTEXT_TYPE, from_nanos, nanos

_TIE_SLACK = 4
"""Turns read beyond those wanted on each side of `near_in_time`, so an instant cut at the
edge of the read rarely needs reading whole."""


class NeighbourTurns(IndexReader):
    """Reads of session turns ordered by the fast `created_at` field."""

    def _session_entries(
        self, searcher: tantivy.Searcher, scope_hash: str, span: tuple[datetime, datetime]
    ) -> list[tuple[int, tantivy.DocAddress]]:
        """The visible session memories of a scope in `span` (ends included), as (created_at
        in nanoseconds, address), oldest first: documents are read only when needed."""
        Query, Occur = tantivy.Query, tantivy.Occur
        start, end = span
        query = Query.boolean_query(
            [
                (Occur.Must, self._term("scope_hash", scope_hash)),
                (Occur.Must, self._term("type", CONTEXT_TYPE.value)),
                (
                    Occur.Must,
                    Query.range_query(
                        self._schema, "created_at", tantivy.FieldType.Date, start, end
                    ),
                ),
                *((Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN),
            ]
        )
        total = _count(searcher, query)
        if not total:
            return []
        hits = searcher.search(
            query,
            limit=total,
            count=False,
            order_by_field="created_at",
            order=tantivy.Order.Asc,
        ).hits
        overlay = self._overlay
        if overlay.hidden_keys:
            keys = searcher.fast_field_values(SLUG_KEY_FIELD, [address for _, address in hits])
            hits = [
                hit
                for hit, key in zip(hits, keys, strict=True)
                if not _hides(overlay, searcher, hit[1], key)
            ]
        return [(int(key), address) for key, address in hits]

    def near_in_time(
        self,
        *,
        scope_hash: str,
        type: MemoryType,
        at: datetime,
        window: timedelta,
        exclude: str,
        per_side: int = 1,
    ) -> tuple[list[str], list[str]]:
        """The memories of this scope and type written just before and just after `at`,
        nearest first on each side: a range query per side ordered by the fast `created_at`
        field, so each reads about `per_side` documents however long the episode.

        Turns of one instant stand in slug order around `exclude` (as `SessionView` places
        them): the engine returns ties in the order they were written, which a rebuilt index
        or a granted view does not repeat, so an instant the answer reaches into is read
        whole whenever the first read may have cut it."""
        self._require_current()
        at = to_utc(at)
        here = (nanos(at), exclude)
        with self._errors("searching by time"):
            searcher = self._index.searcher()
            sides = [
                self._turns_beside(
                    searcher, scope_hash, type, (at - window, at), here, per_side, backwards=side
                )
                for side in (True, False)
            ]
        return sides[0], sides[1]

    def _turns_beside(
        self,
        searcher: tantivy.Searcher,
        scope_hash: str,
        type: MemoryType,
        span: tuple[datetime, datetime],
        here: tuple[int, str],
        per_side: int,
        *,
        backwards: bool,
    ) -> list[str]:
        """Up to `per_side` slugs of visible memories on one side of `here` (created_at in
        nanoseconds, slug), nearest first; `span` is the window before `here` (backwards)."""
        at = from_nanos(here[0])
        width = at - span[0]
        # Backwards (at - width, at]; forwards [at, at + width]: ties with `at` fall on the
        # side their slug puts them.
        lower, upper = (at - width, at) if backwards else (at, at + width)
        include_lower, include_upper = (False, True) if backwards else (True, True)
        order = tantivy.Order.Desc if backwards else tantivy.Order.Asc
        limit = per_side + _TIE_SLACK
        hidden = self._overlay.hidden_slugs

        def query(low: datetime, high: datetime, inc_low: bool, inc_high: bool) -> tantivy.Query:
            Query, Occur = tantivy.Query, tantivy.Occur
            return Query.boolean_query(
                [
                    (Occur.Must, self._term("scope_hash", scope_hash)),
                    (Occur.Must, self._term("type", _memory_type(type))),
                    (
                        Occur.Must,
                        Query.range_query(
                            self._schema,
                            "created_at",
                            tantivy.FieldType.Date,
                            low,
                            high,
                            include_lower=inc_low,
                            include_upper=inc_high,
                        ),
                    ),
                    *((Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN),
                ]
            )

        def read(q: tantivy.Query, size: int) -> list[tuple[int, str]]:
            found = searcher.search(
                q, limit=size, count=False, order_by_field="created_at", order=order
            ).hits
            return [
                (int(key), str(_stored(searcher.doc(address), "slug"))) for key, address in found
            ]

        def beside(turn: tuple[int, str]) -> bool:
            # A turn decay hid after it was indexed (`DecayOverlay`) is read, and not taken.
            return (turn < here if backwards else turn > here) and turn[1] not in hidden

        taken: list[tuple[int, str]] = []
        while True:
            turns = read(query(lower, upper, include_lower, include_upper), limit)
            more = len(turns) == limit
            if more:  # the farthest instant read may hold more turns than were returned
                edge = turns[-1][0]
                nearer = [t for t in turns if t[0] != edge]
                if len(taken) + sum(map(beside, nearer)) >= per_side:
                    turns, more = nearer, False
                else:
                    instant = from_nanos(edge)
                    whole = query(instant, instant, True, True)
                    turns = nearer + read(whole, _count(searcher, whole))
                    # Go on past the edge instant if this side still lacks turns.
                    if backwards:
                        upper, include_upper = instant, False
                    else:
                        lower, include_lower = instant, False
            taken += sorted((t for t in turns if beside(t)), reverse=backwards)
            if len(taken) >= per_side or not more:
                return [slug for _, slug in taken[:per_side]]
