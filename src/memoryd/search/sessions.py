"""Session-neighbour upkeep: each session memory is indexed with its neighbouring turns' text.

A reply is about what the turn before it said, so the search index (`memoryd.search.index`)
gives every session memory a `context` field: the bodies of its nearest visible turns of the
same scope within `CONTEXT_WINDOW`. `SessionView` works out, for one write, which contexts
change and what they become. It reads the index only through `TurnReads` (two methods of
`SearchIndex`), so tantivy's calls stay there; recall is the one reader of the field.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from memoryd.models import MemoryType, to_utc
from memoryd.search.doc import SearchDoc

if TYPE_CHECKING:
    from memoryd.search.engine import tantivy

CONTEXT_WINDOW = timedelta(minutes=30)
"""Session memories of one scope at most this far apart in time are neighbouring turns."""
CONTEXT_TYPE = MemoryType.SESSION


class TurnReads(Protocol):
    """The two reads the view makes of the index (`SearchIndex` has them): tantivy's queries
    stay in the index."""

    def doc_at(self, searcher: tantivy.Searcher, address: tantivy.DocAddress) -> SearchDoc: ...

    def _session_entries(
        self, searcher: tantivy.Searcher, scope_hash: str, span: tuple[datetime, datetime]
    ) -> list[tuple[int, tantivy.DocAddress]]: ...


def _position(doc: SearchDoc) -> tuple[datetime, str]:
    """Where a memory stands among its scope's session turns: by time, then slug."""
    return (to_utc(doc.created_at), doc.slug)


def _gives_context(doc: SearchDoc) -> bool:
    """Whether a memory's text may stand in its neighbours' context: a visible session turn
    (a soft-forgotten turn's words must not keep its neighbours findable)."""
    return doc.type is CONTEXT_TYPE and doc.decay_state.visible_by_default


class SessionView:
    """The session turns as they stand once a write is done: the index, with the documents
    being written in place of their indexed versions and the deleted ones gone.

    Each session memory is indexed with the bodies of its nearest visible turn before and after
    it (`CONTEXT_WINDOW`) as its context. A write changes the context of the memories it writes
    and of their nearest neighbours (at their old place and their new one), so those are
    rewritten too: the index then holds the same contexts whatever order memories came in,
    and `reindex` rebuilds the same index.
    """

    def __init__(
        self,
        index: TurnReads,
        searcher: tantivy.Searcher,
        writing: Mapping[str, SearchDoc],
        gone: set[str],
        around: Sequence[SearchDoc] = (),
        read: Mapping[tuple[int, int], SearchDoc] | None = None,
        hidden_at: Collection[tuple[int, int]] = frozenset(),
    ) -> None:
        self._index = index
        self._searcher = searcher
        self._writing = writing
        self._hidden = gone | set(writing)  # in the index, but not as the index holds them
        self._by_scope: dict[str, list[tuple[tuple[datetime, str], SearchDoc]]] = {}
        for doc in writing.values():
            if _gives_context(doc):
                self._by_scope.setdefault(doc.scope_hash, []).append((_position(doc), doc))
        for turns in self._by_scope.values():
            turns.sort(key=lambda item: item[0])
        self._keys = {scope: [key for key, _ in turns] for scope, turns in self._by_scope.items()}
        # Where this write looks (its documents, where they stood before): each scope's
        # indexed turns up to two windows from there (a neighbour's neighbour) are listed once.
        self._focus: dict[str, list[datetime]] = {}
        for doc in [*writing.values(), *around]:
            if doc.type is CONTEXT_TYPE:
                self._focus.setdefault(doc.scope_hash, []).append(to_utc(doc.created_at))
        self._indexed: dict[str, tuple[list[tuple[int, tantivy.DocAddress]], list[int]]] = {}
        self._span: dict[str, tuple[datetime, datetime]] = {}
        self._read: dict[tuple[int, int], SearchDoc] = dict(read or {})
        """Indexed documents by address (segment, doc), as read: `read` seeds it."""
        self._hidden_at = hidden_at
        """Addresses of documents this write deletes unread (as `gone` hides the read ones)."""
        self._cache: dict[tuple[str, datetime, str, bool], SearchDoc | None] = {}
        self._open: dict[str, tuple[list[tuple[int, tantivy.DocAddress]], list[int]]] = {}
        """scope → (its listed entries, the times of those that may stay visible)."""

    def context(self, doc: SearchDoc) -> str:
        """The text `doc` is indexed with as its context ("" but for session memories)."""
        return "\n".join(self.context_parts(doc))

    def context_parts(self, doc: SearchDoc) -> list[str]:
        """The bodies `context` joins by newlines (a bulk write segments each body once)."""
        if doc.type is not CONTEXT_TYPE:
            return []
        near = [self.nearest(doc, backwards=side) for side in (True, False)]
        return [n.body for n in near if n is not None and n.body]

    def neighbours_of(self, docs: Sequence[SearchDoc]) -> list[SearchDoc]:
        """The indexed turns (not being written) whose context holds where `docs` stand."""
        by_scope: dict[str, list[SearchDoc]] = {}
        for doc in docs:
            if doc.type is CONTEXT_TYPE:
                by_scope.setdefault(doc.scope_hash, []).append(doc)
        found: dict[str, SearchDoc] = {}
        for scope_hash, turns in by_scope.items():
            # Only a turn the write leaves visible can be one: where none lies within the
            # window of a doc, its neighbours are being written (a decay sweep that moves a
            # whole vault has 100k docs and next to none of those).
            keys = self._open_keys(scope_hash, self._listed(scope_hash, turns))
            for doc in turns:
                at = nanos(doc.created_at)
                first = bisect.bisect_left(keys, at - _WINDOW_NANOS)
                if first == len(keys) or keys[first] > at + _WINDOW_NANOS:
                    continue
                for side in (False, True):
                    near = self.nearest(doc, backwards=side)
                    if near is not None and near.slug not in self._writing:
                        found.setdefault(near.slug, near)
        return sorted(found.values(), key=_position)

    def _listed(
        self, scope_hash: str, turns: Sequence[SearchDoc]
    ) -> list[tuple[int, tantivy.DocAddress]]:
        """The scope's indexed turns, listed over a span that covers all of `turns`."""
        times = [to_utc(doc.created_at) for doc in turns]
        self._entries(scope_hash, min(times))
        return self._entries(scope_hash, max(times))[0]

    def nearest(self, doc: SearchDoc, *, backwards: bool) -> SearchDoc | None:
        """The nearest visible session turn of `doc`'s scope before it (or after it)."""
        at, slug = _position(doc)
        key = (doc.scope_hash, at, slug, backwards)
        if key not in self._cache:
            self._cache[key] = self._side(doc, backwards=backwards)
        return self._cache[key]

    def _side(self, doc: SearchDoc, *, backwards: bool) -> SearchDoc | None:
        here = _position(doc)
        candidates = [self._written_side(doc.scope_hash, here, backwards)]
        candidates.append(self._indexed_side(doc.scope_hash, here, backwards))
        found = [c for c in candidates if c is not None]
        if not found:
            return None
        return (max if backwards else min)(found, key=_position)

    def _written_side(
        self, scope_hash: str, here: tuple[datetime, str], backwards: bool
    ) -> SearchDoc | None:
        turns = self._by_scope.get(scope_hash, [])
        keys = self._keys.get(scope_hash, [])
        if backwards:
            at = bisect.bisect_left(keys, here) - 1
            if at >= 0 and keys[at][0] >= here[0] - CONTEXT_WINDOW:
                return turns[at][1]
        else:
            at = bisect.bisect_right(keys, here)
            if at < len(turns) and keys[at][1] == here[1]:
                at += 1
            if at < len(turns) and keys[at][0] <= here[0] + CONTEXT_WINDOW:
                return turns[at][1]
        return None

    def _indexed_side(
        self, scope_hash: str, here: tuple[datetime, str], backwards: bool
    ) -> SearchDoc | None:
        entries, keys = self._entries(scope_hash, here[0])
        at = nanos(here[0])
        limit = at - _WINDOW_NANOS if backwards else at + _WINDOW_NANOS
        if not self._open_within(scope_hash, entries, at, limit):
            return None  # only turns this write hides: no need to walk them
        # Walk away from `here` one instant at a time (turns of one instant are ordered by
        # slug, which the engine's order does not follow).
        if backwards:
            stop = bisect.bisect_right(keys, at)
            while stop > 0 and keys[stop - 1] >= limit:
                start = bisect.bisect_left(keys, keys[stop - 1], hi=stop)
                usable = [
                    d for d in self._docs(scope_hash, entries, start, stop) if _position(d) < here
                ]
                if usable:
                    return max(usable, key=_position)
                stop = start
        else:
            start = bisect.bisect_left(keys, at)
            while start < len(keys) and keys[start] <= limit:
                stop = bisect.bisect_right(keys, keys[start], lo=start)
                usable = [
                    d for d in self._docs(scope_hash, entries, start, stop) if _position(d) > here
                ]
                if usable:
                    return min(usable, key=_position)
                start = stop
        return None

    def _entries(
        self, scope_hash: str, at: datetime
    ) -> tuple[list[tuple[int, tantivy.DocAddress]], list[int]]:
        """The scope's indexed session turns, listed (once) over a span that covers `at`, and
        their times."""
        span = self._span.get(scope_hash)
        if span is None or not span[0] <= at - CONTEXT_WINDOW <= at + CONTEXT_WINDOW <= span[1]:
            focus = [*self._focus.get(scope_hash, []), at]
            if span is not None:
                focus.extend(span)
            span = (min(focus) - 2 * CONTEXT_WINDOW, max(focus) + 2 * CONTEXT_WINDOW)
            self._span[scope_hash] = span
            entries = self._index._session_entries(self._searcher, scope_hash, span)
            self._indexed[scope_hash] = (entries, [key for key, _ in entries])
        return self._indexed[scope_hash]

    def _open_within(
        self,
        scope_hash: str,
        entries: list[tuple[int, tantivy.DocAddress]],
        at: int,
        limit: int,
    ) -> bool:
        """Whether a listed turn that may stay visible lies between `at` and `limit` (engine
        times, ends included, `limit` on either side)."""
        keys = self._open_keys(scope_hash, entries)
        low, high = (limit, at) if limit < at else (at, limit)
        return bisect.bisect_right(keys, high) > bisect.bisect_left(keys, low)

    def _open_keys(
        self, scope_hash: str, entries: list[tuple[int, tantivy.DocAddress]]
    ) -> list[int]:
        """The times of the scope's listed turns that may stay visible after this write: all
        but those read already (`read`) and found among the ones it hides, and those it
        deletes unread (`hidden_at`)."""
        kept = self._open.get(scope_hash)
        if kept is None or kept[0] is not entries:
            read, hidden, hidden_at = self._read, self._hidden, self._hidden_at
            keys = []
            for key, address in entries:
                at = (address.segment_ord, address.doc)
                if at in hidden_at:
                    continue
                doc = read.get(at)
                if doc is None or doc.slug not in hidden:
                    keys.append(key)
            kept = self._open[scope_hash] = (entries, keys)
        return kept[1]

    def _docs(
        self,
        scope_hash: str,
        entries: list[tuple[int, tantivy.DocAddress]],
        start: int,
        stop: int,
    ) -> list[SearchDoc]:
        """The indexed turns `entries[start:stop]` as they stand after this write."""
        docs = []
        for _, address in entries[start:stop]:
            cache_key = (address.segment_ord, address.doc)
            if cache_key in self._hidden_at:
                continue
            doc = self._read.get(cache_key)
            if doc is None:
                doc = self._read[cache_key] = self._index.doc_at(self._searcher, address)
            if doc.slug not in self._hidden:
                docs.append(doc)
        return docs


def nanos(at: datetime) -> int:
    """A time as the engine orders its date field: nanoseconds since the epoch (UTC)."""
    since = to_utc(at) - _EPOCH  # by its parts: dividing timedeltas is three times slower
    return ((since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds) * 1000


def from_nanos(value: int) -> datetime:
    """The time of an engine date key (`nanos`), to the microsecond."""
    return _EPOCH + timedelta(microseconds=value // 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WINDOW_NANOS = CONTEXT_WINDOW // timedelta(microseconds=1) * 1000
