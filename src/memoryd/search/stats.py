"""Scope-local ranking statistics, kept up to date write by write.

Recall ranks a scope on statistics over that scope's live memories alone (DESIGN §6): how many
there are, their titles' and bodies' mean length, in how many each word occurs, and the
length of each conversation turn's context (its nearest turns). Counting them means reading
every memory of the scope, so they are counted once per scope, on the
first recall there (or loaded as `stats_file` saved them), and from then on every write adds
what it writes and takes away what it replaces or deletes. A replaced or deleted memory
therefore never counts, and the tallies always equal a recount of the live memories (a test
checks it on random writes).
"""

from __future__ import annotations

import bisect
import itertools
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

from memoryd.models import DecayState, MemoryType
from memoryd.search.overlay import slug_key

Tokens = tuple[str, ...]
TurnTest = Callable[[MemoryType, str], bool]
"""Whether a memory is a conversation turn, from its type and body (recall's `is_turn`)."""


_MAX_TESTS = 4


class Entry(NamedTuple):
    """What the statistics need of one memory (its title and body as the index analyses
    them), and the rest of what the index stores of it: recall ranks a tallied scope's
    candidates on the entries kept here, without reading the documents back."""

    slug: str
    scope_hash: str
    type: MemoryType
    hidden: bool
    """Soft-forgotten or forgotten: counted only when a recall includes them."""
    at: datetime
    title: Tokens
    body: Tokens
    text: str
    """The body as written (for `TurnTest`)."""
    key: int
    """The slug's key (`SearchIndex` stores it as a fast field of every document)."""
    written_title: str
    state: DecayState
    tags: tuple[str, ...]
    triggers: tuple[str, ...]


class SavedRows(Protocol):
    """Entries saved beside the index (`stats_file`), decoded one at a time when asked."""

    def entry(self, key: int) -> Entry: ...

    def raw(self, key: int) -> bytes:
        """The entry as saved (to save it again without decoding it)."""
        ...

    def turn(self, key: int) -> Turn | None:
        """The entry as the turn lines need it, when it is a session memory."""
        ...


Held = Entry | str | None
"""What a tally keeps of a slug key: the entry; the slug of one still saved in the tally's
`rows` (a first recall decodes only the entries it ranks); None when two memories share it."""


def _slug(held: Entry | str) -> str:
    return held if isinstance(held, str) else held.slug


class Counts:
    """Live memories of one scope and one visibility: how many, their title and body tokens,
    and how many hold each token (in title or body)."""

    __slots__ = ("bodies", "df", "docs", "titles")

    def __init__(self) -> None:
        self.docs = 0
        self.titles = 0
        self.bodies = 0
        self.df: dict[str, int] = {}

    def add_all(self, entries: Sequence[Entry]) -> None:
        """`change(entry, +1)` for each of `entries`, the words counted in one pass (a saved
        file's frames hold thousands of entries)."""
        self.docs += len(entries)
        self.titles += sum(len(e.title) for e in entries)
        self.bodies += sum(len(e.body) for e in entries)
        held: Counter[str] = Counter()
        for entry in entries:
            held.update({*entry.title, *entry.body})
        df = self.df
        for token, count in held.items():
            df[token] = df.get(token, 0) + count

    def change(self, entry: Entry, sign: int) -> None:
        self.docs += sign
        self.titles += sign * len(entry.title)
        self.bodies += sign * len(entry.body)
        df = self.df
        for token in {*entry.title, *entry.body}:
            held = df.get(token, 0) + sign
            if held:
                df[token] = held
            else:
                del df[token]


class Turn(NamedTuple):
    """A session memory as the turn lines need it when a saved file is loaded: its body's
    length, not its tokens (`TurnLine` fetches those when a recall asks for its context)."""

    slug: str
    key: int
    at: datetime
    hidden: bool
    text: str
    """The body as written (for `TurnTest`)."""
    length: int
    """How many tokens its body holds."""


class TurnLine:
    """One scope's conversation turns in time order (then by slug), and the total length of
    their contexts: each turn's context is its nearest turn on either side, if that one is
    at most `window` away, so the total is the sum, over neighbouring turns that near, of both
    their lengths. A turn's tokens are kept when it is written, and fetched (`fetch`) when a
    loaded one is first asked for (a load decodes no turn's entry)."""

    __slots__ = ("_at", "_keys", "_lengths", "_tokens", "context_total", "fetch", "window")

    def __init__(self, window: timedelta, fetch: Callable[[str], Tokens] | None = None) -> None:
        self.window = window
        self.fetch = fetch
        self._keys: list[tuple[datetime, str]] = []
        self._lengths: dict[str, int] = {}
        self._tokens: dict[str, Tokens] = {}
        self._at: dict[str, datetime] = {}
        self.context_total = 0

    def __len__(self) -> int:
        return len(self._keys)

    def _pair(self, left: int, right: int) -> int:
        """What the neighbours at `left` and `right` add to each other's contexts."""
        if left < 0 or right >= len(self._keys):
            return 0
        (before, a), (after, b) = self._keys[left], self._keys[right]
        if after - before > self.window:
            return 0
        return self._lengths[a] + self._lengths[b]

    def add(self, slug: str, at: datetime, tokens: Tokens) -> None:
        key = (at, slug)
        where = bisect.bisect_left(self._keys, key)
        self.context_total -= self._pair(where - 1, where)
        self._keys.insert(where, key)
        self._tokens[slug] = tokens
        self._lengths[slug] = len(tokens)
        self._at[slug] = at
        self.context_total += self._pair(where - 1, where) + self._pair(where, where + 1)

    def fill(self, turns: Sequence[Turn]) -> None:
        """Fill an empty line with `turns`, in time order (then by slug)."""
        self._keys = [(t.at, t.slug) for t in turns]
        self._lengths = {t.slug: t.length for t in turns}
        self._tokens = {}
        self._at = {t.slug: t.at for t in turns}
        window = self.window  # `_pair` over each neighbouring pair, inlined (a load's cost)
        self.context_total = sum(
            a.length + b.length for a, b in itertools.pairwise(turns) if b.at - a.at <= window
        )

    def keep(self, slug: str, tokens: Tokens) -> None:
        """Hold the tokens of a turn of this line (one whose entry can no longer be fetched)."""
        if slug in self._lengths:
            self._tokens[slug] = tokens

    def remove(self, slug: str) -> None:
        at = self._at.pop(slug, None)
        if at is None:
            return
        where = bisect.bisect_left(self._keys, (at, slug))
        self.context_total -= self._pair(where - 1, where) + self._pair(where, where + 1)
        del self._keys[where]
        del self._lengths[slug]
        self._tokens.pop(slug, None)
        self.context_total += self._pair(where - 1, where)

    def slugs(self) -> list[str]:
        return [slug for _, slug in self._keys]

    def _tokens_of(self, slug: str) -> Tokens:
        tokens = self._tokens.get(slug)
        if tokens is None:
            if self.fetch is None:
                raise LookupError(f"no tokens held for the turn {slug}")
            tokens = self._tokens[slug] = self.fetch(slug)
        return tokens

    def context(self, slug: str) -> tuple[Tokens, ...]:
        """The tokens of the turns that make `slug`'s context (none when it is no turn here)."""
        at = self._at.get(slug)
        if at is None:
            return ()
        where = bisect.bisect_left(self._keys, (at, slug))
        near = []
        for other in (where - 1, where + 1):
            if 0 <= other < len(self._keys) and abs(self._keys[other][0] - at) <= self.window:
                near.append(self._tokens_of(self._keys[other][1]))
        return tuple(near)


@dataclass
class ScopeTally:
    """One scope's statistics: counts of its visible and of its hidden memories, and, per
    turn test, its turns (visible ones; and all of them, for recalls that include hidden)."""

    visible: Counts = field(default_factory=Counts)
    hidden: Counts = field(default_factory=Counts)
    lines: dict[TurnTest | None, tuple[TurnLine, TurnLine]] = field(default_factory=dict)
    keyed: dict[int, Held] = field(default_factory=dict)
    """Slug key → the live memory's entry (None: two slugs of this scope share the key)."""
    rows: SavedRows | None = None
    """Where the entries still saved are (`Held`)."""

    def held(self, key: int) -> Entry | None:
        """The entry kept for `key` (which `keyed` has), decoded if it was still saved."""
        held = self.keyed[key]
        if isinstance(held, str):
            if self.rows is None:
                raise LookupError(f"no saved entries to decode {held} from")
            held = self.keyed[key] = self.rows.entry(key)
        return held

    def body(self, slug: str) -> Tokens:
        """The body tokens of a turn of this scope (`TurnLine.fetch`)."""
        key = slug_key(slug)
        held = self.held(key) if key in self.keyed else None
        if held is None or held.slug != slug:
            raise LookupError(f"no entry held for the turn {slug}")
        return held.body


class StatsView(NamedTuple):
    """The statistics of the searched scopes at one moment."""

    docs: int
    mean_title: float
    mean_body: float
    mean_context: float
    df: Callable[[str], int]
    context: Callable[[str, str], tuple[Tokens, ...]]
    """(slug, scope) → the tokens of that turn's context."""
    scopes: tuple[str, ...] = ()
    """The searched scopes that hold memories."""
    scope_counts: Callable[[str, str], tuple[int, int]] = lambda scope, token: (0, 0)
    """(scope, token) → how many memories that scope holds, and how many hold the token."""
    entry: Callable[[int], Entry | None] = lambda key: None
    """Slug key → the entry of the live memory of the searched scopes (visible or hidden)
    with that key; None unless exactly one has it."""


class Snapshot(NamedTuple):
    """The statistics of some scopes, copied out: equal to a recount's, whatever the writes."""

    docs: int
    mean_title: float
    mean_body: float
    mean_context: float
    df: dict[str, int]
    contexts: dict[str, tuple[Tokens, ...]]
    """Each conversation turn's context (the tokens of its nearest turns)."""


class ScopeStatistics:
    """The tallies of the scopes recalled so far, updated by every write (not thread-safe: the
    index guards it with a lock)."""

    def __init__(self, window: timedelta) -> None:
        self._window = window
        self._scopes: dict[str, ScopeTally] = {}
        self._complete = False
        """Every scope of the index is tallied (a recall over all scopes counted them)."""
        self._tests: list[TurnTest | None] = []

    def forget(self) -> None:
        """Drop every tally (the index changed behind our back: another process wrote it)."""
        self._scopes = {}
        self._complete = False

    def emptied(self) -> None:
        """The index holds nothing now: every scope is tallied, as empty."""
        self._scopes = {}
        self._complete = True

    def missing(self, scopes: Sequence[str] | None, is_turn: TurnTest | None) -> list[str] | None:
        """The scopes that must be counted before `view` can answer: [] when none, None when
        all of them (a recall over every scope)."""
        if is_turn not in self._tests:
            # A turn test not seen yet: count every scope again, keeping lines for it too (and
            # for the few tests met last: recall passes one).
            self._tests = [*self._tests[-(_MAX_TESTS - 1) :], is_turn]
            self.forget()
        if scopes is None:
            return [] if self._complete else None
        if self._complete:
            return []
        return [scope for scope in dict.fromkeys(scopes) if scope not in self._scopes]

    def load(self, counted: Iterable[Entry], scopes: Sequence[str] | None) -> None:
        """Replace the tallies of `scopes` (all, when None) by a count of `counted`: every
        live memory of those scopes."""
        if scopes is None:
            self._scopes = {}
            self._complete = True
        else:
            for scope in scopes:
                self._scopes[scope] = self._new_tally()
        for entry in counted:
            tally = self._scopes.get(entry.scope_hash)
            if tally is None:
                if scopes is not None:
                    continue
                tally = self._scopes[entry.scope_hash] = self._new_tally()
            self._change(tally, entry, +1)

    def apply(self, removed: Iterable[Entry], added: Iterable[Entry]) -> None:
        """A committed write: `removed` are the memories it replaced or deleted, as they were;
        `added` the memories it wrote. Scopes not tallied yet are left to be counted."""
        for entry in removed:
            tally = self._scopes.get(entry.scope_hash)
            if tally is not None:
                self._change(tally, entry, -1)
        by_tally: dict[str, tuple[ScopeTally, list[Entry]]] = {}
        for entry in added:
            held = by_tally.get(entry.scope_hash)
            if held is None:
                tally = self._scopes.get(entry.scope_hash)
                if tally is None and self._complete:
                    tally = self._scopes[entry.scope_hash] = self._new_tally()
                if tally is None:
                    continue
                held = by_tally[entry.scope_hash] = (tally, [])
            held[1].append(entry)
        for tally, entries in by_tally.values():  # the words counted in one pass (a batch)
            tally.visible.add_all([e for e in entries if not e.hidden])
            tally.hidden.add_all([e for e in entries if e.hidden])
            for entry in entries:
                self._change(tally, entry, +1, counted=True)

    def entries_of(self, slugs: Iterable[str]) -> list[Entry] | None:
        """The tallied entries of `slugs` (a slug no tallied scope holds is absent); None
        when one of them cannot be told apart (two memories of a scope share its key)."""
        found: list[Entry] = []
        for slug in slugs:
            key = slug_key(slug)
            for tally in self._scopes.values():
                if key not in tally.keyed:
                    continue
                held = tally.held(key)
                if held is None:
                    return None
                if held.slug == slug:
                    found.append(held)
        return found

    def drop(self, scope: str) -> None:
        """Stop tallying `scope` (a writer that tallied it only to save it)."""
        self._scopes.pop(scope, None)
        self._complete = False

    def tallied(self) -> list[str]:
        """The scopes tallied now."""
        return list(self._scopes)

    def saved(
        self, scope: str
    ) -> tuple[Counts, Counts, list[tuple[int, Entry | str]], SavedRows | None] | None:
        """A tallied scope's counts and entries by slug key (`Held`), to save (`adopt` takes
        them back); None when it is not tallied or two of its memories share a slug key."""
        tally = self._scopes.get(scope)
        if tally is None:
            return None
        entries = [(key, held) for key, held in tally.keyed.items() if held is not None]
        if len(entries) != len(tally.keyed):
            return None
        return tally.visible, tally.hidden, entries, tally.rows

    def rebase(self, scope: str, rows: SavedRows) -> None:
        """Hold the entries of `scope` as just saved in `rows` (what `saved` gave), so the
        next save copies them instead of encoding each again (a bulk write saves a large
        scope more than once); they are decoded again when asked."""
        tally = self._scopes.get(scope)
        if tally is None:
            return
        keyed = tally.keyed
        for key, held in keyed.items():
            if isinstance(held, Entry):
                keyed[key] = held.slug
        tally.rows = rows

    def adopt(
        self,
        scope: str,
        visible: Counts,
        hidden: Counts,
        keyed: dict[int, Held],
        rows: SavedRows,
        turns: list[Turn],
        changes: Sequence[tuple[Sequence[str], Sequence[Entry]]] = (),
    ) -> bool:
        """Tally `scope` from saved counts and entries (`saved`) instead of counting it:
        `keyed` holds every entry by slug key (decoded when first asked), `turns` the
        session memories among them (the turn lines need their text and length); then apply
        the `changes` saved after them (each: the slugs a commit removed, the entries it
        wrote). False, tallying nothing, when a change removes a memory the tally does not
        hold as one (the saved statistics are not what the index held)."""
        tally = self._new_tally()
        tally.visible, tally.hidden, tally.keyed, tally.rows = visible, hidden, keyed, rows
        turns = sorted(turns, key=lambda t: (t.at, t.slug))
        for test, (shown, every) in tally.lines.items():
            chosen = [t for t in turns if test is None or test(MemoryType.SESSION, t.text)]
            every.fill(chosen)
            shown.fill([t for t in chosen if not t.hidden])
        for removed, added in changes:
            for slug in removed:
                key = slug_key(slug)
                held = tally.held(key) if key in keyed else None
                if held is None or held.slug != slug:
                    return False
                self._change(tally, held, -1)
            tally.visible.add_all([e for e in added if not e.hidden])
            tally.hidden.add_all([e for e in added if e.hidden])
            for entry in added:
                self._change(tally, entry, +1, counted=True)
        self._scopes[scope] = tally
        return True

    def wants(self, scope: str) -> bool:
        """Whether a write in `scope` changes a tally (its memories must then be analysed)."""
        return self._complete or scope in self._scopes

    def view(
        self, scopes: Sequence[str] | None, include_hidden: bool, is_turn: TurnTest | None
    ) -> StatsView:
        """The statistics over `scopes` (every scope when None); they must be tallied."""
        chosen = (
            list(self._scopes.values())
            if scopes is None
            else [self._scopes[s] for s in dict.fromkeys(scopes) if s in self._scopes]
        )
        counts = [t.visible for t in chosen]
        if include_hidden:
            counts += [t.hidden for t in chosen]
        docs = sum(c.docs for c in counts)
        lines = {
            scope: tally.lines[is_turn][1 if include_hidden else 0]
            for scope, tally in self._scopes.items()
            if scopes is None or scope in scopes
        }
        turns = sum(len(line) for line in lines.values())
        contexts = sum(line.context_total for line in lines.values())

        def df(token: str) -> int:
            return sum(c.df.get(token, 0) for c in counts)

        by_scope = {
            scope: [tally.visible, tally.hidden] if include_hidden else [tally.visible]
            for scope, tally in self._scopes.items()
            if scopes is None or scope in scopes
        }

        def scope_counts(scope: str, token: str) -> tuple[int, int]:
            held = by_scope.get(scope, [])
            return sum(c.docs for c in held), sum(c.df.get(token, 0) for c in held)

        def context(slug: str, scope: str) -> tuple[Tokens, ...]:
            line = lines.get(scope)
            return () if line is None else line.context(slug)

        def entry(key: int) -> Entry | None:
            found: Entry | None = None
            for tally in chosen:
                if key in tally.keyed:
                    if found is not None or tally.keyed[key] is None:
                        return None  # two memories share the key: the caller reads the hit
                    try:
                        found = tally.held(key)
                    except ValueError:  # a saved entry that does not decode: read the hit
                        return None
            return found

        return StatsView(
            docs,
            sum(c.titles for c in counts) / max(docs, 1),
            sum(c.bodies for c in counts) / max(docs, 1),
            contexts / max(turns, 1),
            df,
            context,
            tuple(sorted(s for s, held in by_scope.items() if any(c.docs for c in held))),
            scope_counts,
            entry,
        )

    def snapshot(
        self, scopes: Sequence[str] | None, include_hidden: bool, is_turn: TurnTest | None
    ) -> Snapshot:
        """`view`'s statistics, copied out whole (for checks: a recall needs only a few)."""
        view = self.view(scopes, include_hidden, is_turn)
        chosen = [
            (scope, tally)
            for scope, tally in self._scopes.items()
            if scopes is None or scope in scopes
        ]
        df: dict[str, int] = {}
        for _, tally in chosen:
            for counts in (tally.visible, tally.hidden) if include_hidden else (tally.visible,):
                for token, held in counts.df.items():
                    df[token] = df.get(token, 0) + held
        contexts = {
            slug: view.context(slug, scope)
            for scope, tally in chosen
            for slug in tally.lines[is_turn][1 if include_hidden else 0].slugs()
        }
        return Snapshot(view.docs, view.mean_title, view.mean_body, view.mean_context, df, contexts)

    def _new_tally(self) -> ScopeTally:
        """A tally whose turn lines fetch tokens through a weak reference to it: a strong one
        makes a cycle that only a collection frees, so a granted view's plaintext would
        outlive its grant in the daemon (the scrub frees on the last reference)."""
        tally = ScopeTally()
        tally_ref = weakref.ref(tally)

        def body(slug: str) -> Tokens:
            held = tally_ref()
            if held is None:
                raise LookupError(f"no tally left for the turn {slug}")
            return held.body(slug)

        for test in self._tests:
            tally.lines[test] = (TurnLine(self._window, body), TurnLine(self._window, body))
        return tally

    def _change(self, tally: ScopeTally, entry: Entry, sign: int, *, counted: bool = False) -> None:
        """Add (`sign` +1) or take away an entry: its counts (unless `counted` already), its
        slug key, its turn lines."""
        if not counted:
            (tally.hidden if entry.hidden else tally.visible).change(entry, sign)
        keyed = tally.keyed
        if sign > 0:
            held = keyed.get(entry.key, entry)
            same = held is not None and _slug(held) == entry.slug
            if not same and isinstance(held, str) and (saved := tally.held(entry.key)):
                # The key is given up: a loaded turn's lines keep its tokens, no longer fetched.
                for lines in tally.lines.values():
                    for line in lines:
                        line.keep(saved.slug, saved.body)
            keyed[entry.key] = entry if same else None
        elif (held := keyed.get(entry.key)) is not None and _slug(held) == entry.slug:
            del keyed[entry.key]
        if entry.type is not MemoryType.SESSION:
            return
        for test, (visible, every) in tally.lines.items():
            if sign < 0:
                visible.remove(entry.slug)
                every.remove(entry.slug)
            elif test is None or test(entry.type, entry.text):
                for line in (every,) if entry.hidden else (visible, every):
                    line.add(entry.slug, entry.at, entry.body)
