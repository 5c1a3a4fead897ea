"""The recalled scopes' statistics kept beside the index: counted once per scope (or loaded from
the files saved beside it, `search.stats_file`), then brought up to date by every commit and
every `refresh`, and saved when it is time.

The statistics themselves are `search.stats.ScopeStatistics`; this module counts documents
into them (each analysed once and kept, `_tokens_of`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from memoryd.errors import StorageError
from memoryd.models import to_utc
from memoryd.search.doc import SearchDoc
from memoryd.search.engine import (
    _TANTIVY_ERRORS,
    REINDEX_HINT,
    _check_meta,
    _count,
    _stored_doc,
    _values,
    _write_meta,
)
from memoryd.search.overlay import slug_key
from memoryd.search.reader import IndexReader
from memoryd.search.stats import Counts, Entry, Snapshot, StatsView, Tokens, TurnTest
from memoryd.search.stats_file import Loaded, index_opstamp
from memoryd.search.words import base_forms
from memoryd.text import segment

logger = logging.getLogger(__name__)

_Changed = tuple[list[SearchDoc], list[SearchDoc]] | None
"""What a write replaced or deleted (as it was) and what it wrote; None: it removed all."""

_TOKENS_KEPT = 8_000_000
"""At most this many analysed tokens are kept for `local_bm25` (about 70 MB)."""

_SAVE_SHARE = 0.05
"""At most this share of the writer's time goes to saving statistics (`_flush_stats`)."""

_DELTA_SHARE = 4
"""A scope's frames are folded into its file once they outgrow a quarter of it (a loader
decodes every frame's entries, and only the file's it ranks): when the writes pause
(`save_statistics`), or at once if they would outgrow the whole file."""

_DELTA_MIN_BYTES = 1 << 20
"""Nor before they reach this size (a small scope's file is cheap to load with its frames)."""


class Kept(NamedTuple):
    """How a commit keeps one scope's saved statistics current (`_keep_saved`): the `frame`
    of its change appended after `prev` (the scope's change before it; `fresh`: the frames
    there are all in the file already), or (None) the whole file saved again."""

    prev: int
    frame: bytes | None
    fresh: bool = False
    borrowed: bool = False
    """Tallied only to be rewritten: forgotten once saved (a CLI writer keeps no tallies)."""
    fold: bool = False
    """The frames outgrow their share of the file: the whole file is saved again when the
    writes pause (`_fold`), the frame keeping it current until then."""


def _text(doc: SearchDoc) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """What a saved entry keeps of a memory's words (for `_removes_text`)."""
    return doc.title, doc.body, tuple(doc.tags), tuple(doc.triggers)


def _scopes_of(changed: _Changed) -> set[str] | None:
    """The scopes whose memories a commit changes (None: every scope, a clear)."""
    return None if changed is None else {doc.scope_hash for docs in changed for doc in docs}


class IndexTallies(IndexReader):
    """The index's scope statistics: counting, keeping up to date, saving."""

    def refresh(self, changed: Collection[str] | None = None) -> None:
        """Search what is committed on disk now (another process writes this index).

        `changed` names the memories the writer's commits since our last refresh wrote,
        deleted or moved (its `changes_since`): the statistics then take those out as they
        counted them and put in what the index holds of them now, instead of counting every
        recalled scope again on the next recall (a background worker committing once a
        second made every recall a recount). None: every tally is counted afresh."""
        self._require_open()
        with self._stats_lock, self._errors("reloading the reader"):
            before = index_opstamp(self._directory) if self._files else None
            self._index.reload()
            self._overlay = self._overlay.reload(REINDEX_HINT)
            if self._files:
                after = index_opstamp(self._directory)
                self._opstamp = before if before == after else None
                if self._files.identity is None:
                    self._files.identity = _check_meta(self._directory)
            if changed is None:
                self._stats.forget()
            elif changed:
                self._recount(changed)

    def _recount(self, slugs: Collection[str]) -> None:
        """Bring the tallies up to the index for `slugs` (the caller holds the lock)."""
        held = self._stats.entries_of(slugs)
        if held is None:  # two memories share a slug key: count afresh
            self._stats.forget()
            return
        cuts: dict[str, str] = {}
        now = self._stored(self._index.searcher(), list(slugs), cuts)
        wanted = [doc for doc in now.values() if self._stats.wants(doc.scope_hash)]
        self._stats.apply(held, [self._entry(doc, cuts) for doc in wanted])

    def statistics(
        self,
        scope_hashes: Sequence[str] | None = None,
        *,
        include_forgotten: bool = False,
        is_turn: TurnTest | None = None,
    ) -> Snapshot:
        """The statistics `local_bm25` ranks `scope_hashes` with (every scope when None), as
        they stand now: kept up to date by each write, they equal a recount."""
        self._require_current()
        scopes = None if scope_hashes is None else _values(scope_hashes)
        with self._stats_lock, self._errors("counting"):
            self._tallied(scopes, include_forgotten, is_turn)
            return self._stats.snapshot(scopes, include_forgotten, is_turn)

    def load_statistics(self, scope_hashes: Sequence[str], *, is_turn: TurnTest | None) -> None:
        """Tally `scope_hashes` now (from their saved files, else counted), as a recall there
        would: a recall reader loads its daemon's scopes before it reports ready."""
        self._require_current()
        scopes = _values(scope_hashes)
        if scopes:
            with self._stats_lock, self._errors("counting"):
                self._tallied(scopes, False, is_turn)

    def tallied_scopes(self) -> list[str]:
        """The scopes whose statistics this process keeps (recalled here, or written to)."""
        with self._stats_lock:
            return self._stats.tallied()

    def _tokens_of(
        self, title: str, body: str, cuts: Mapping[str, str] | None = None
    ) -> tuple[Tokens, Tokens]:
        """A title's and body's tokens as the index analyses them. Kept by their text (so an
        edit, or another process's write, never serves stale tokens) up to `_TOKENS_KEPT`
        tokens: recalls meet the same memories again, and a rewrite meets its old version.
        `cuts`: text → its segmentation as a stored document holds it (`_learn_cuts`)."""
        key = (title, body)
        known = self._counts.get(key)
        if known is None:
            known = (self._analysed(title, cuts), self._analysed(body, cuts))
            size = len(known[0]) + len(known[1])
            if self._tokens_kept + size <= _TOKENS_KEPT:
                self._counts[key] = known
                self._tokens_kept += size
        return known

    def _analysed(self, text: str, cuts: Mapping[str, str] | None = None) -> Tokens:
        cut = cuts.get(text) if cuts else None
        segmented = segment(text) if cut is None else cut
        forms = self._written_forms.get(segmented)  # as the write under way indexed it
        analysed = self._analyzer.analyze(base_forms(segmented) if forms is None else forms)
        return tuple(map(sys.intern, analysed))

    def tokens(self, title: str, body: str) -> tuple[Tokens, Tokens]:
        """A title's and body's tokens as the statistics count them (`analysis_version`
        names the analysis that made them)."""
        return self._tokens_of(title, body)

    def learn_tokens(self, known: Iterable[tuple[str, str, Tokens, Tokens]]) -> None:
        """Take (title, body, their tokens) analysed earlier under this `analysis_version`,
        so counting them does not analyse them again (a granted scope's snapshot keeps them)."""
        for title, body, title_tokens, body_tokens in known:
            key = (title, body)
            size = len(title_tokens) + len(body_tokens)
            if key in self._counts or self._tokens_kept + size > _TOKENS_KEPT:
                continue
            self._counts[key] = (title_tokens, body_tokens)
            self._tokens_kept += size

    def tally(self, scope_hash: str, docs: Iterable[SearchDoc], is_turn: TurnTest | None) -> None:
        """Count a scope's recall statistics from `docs`, every live memory of it just
        written, instead of reading them back on the first recall (a granted scope's
        in-memory index is built whole, then recalled at once)."""
        with self._stats_lock:
            self._stats.missing([scope_hash], is_turn)  # registers the turn test
            self._stats.load((self._entry(doc) for doc in docs), [scope_hash])

    def _entry(self, doc: SearchDoc, cuts: Mapping[str, str] | None = None) -> Entry:
        """What the scope statistics count of a memory (`cuts`: as for `_tokens_of`)."""
        title, body = self._tokens_of(doc.title, doc.body, cuts)
        return Entry(
            doc.slug,
            doc.scope_hash,
            doc.type,
            not doc.decay_state.visible_by_default,
            to_utc(doc.created_at),
            title,
            body,
            doc.body,
            slug_key(doc.slug),
            doc.title,
            doc.decay_state,
            tuple(doc.tags),
            tuple(doc.triggers),
        )

    def _tallied(
        self, scopes: list[str] | None, include_forgotten: bool, is_turn: TurnTest | None
    ) -> StatsView:
        """The searched scopes' statistics (`ScopeStatistics`), counting the scopes no recall
        has met yet from their live memories, hidden ones included (the caller holds the
        statistics' lock, so no commit lands between the count and its registration)."""
        missing = self._stats.missing(scopes, is_turn)
        files, stamp = self._files, self._opstamp
        if missing and files is not None and stamp is not None:
            for scope in list(missing):
                if self._adopt_loaded(scope, files.load(scope, stamp)):
                    missing.remove(scope)
                    # An older format's file is read once, then saved in this one.
                    if (
                        files.outdated(scope)
                        and files.fresh_at(stamp, self._overlay.digest)
                        and (saved := self._stats.saved(scope)) is not None
                    ):
                        files.save(scope, stamp, *saved)
        if missing is None or missing:
            searcher = self._index.searcher()
            every = self._visible(missing, include_forgotten=True)
            total = _count(searcher, every)
            hits = searcher.search(every, limit=total, count=False).hits if total else []
            # Chinese text is counted as the documents store its segmentation: a count cuts
            # nothing again, and an English recall never loads jieba's dictionary.
            cuts: dict[str, str] = {}
            self._stats.load(
                (
                    self._entry(
                        _stored_doc(searcher.doc(address), self._overlay.states, cuts), cuts
                    )
                    for _, address in hits
                ),
                missing,
            )
            if (
                files is not None
                and stamp is not None
                and files.fresh_at(stamp, self._overlay.digest)
            ):
                for scope in self._stats.tallied() if missing is None else missing:
                    if (saved := self._stats.saved(scope)) is not None:
                        files.save(scope, stamp, *saved)
        return self._stats.view(scopes, include_forgotten, is_turn)

    def _save_stats(
        self, prior: int | None, stamp: int, changed: _Changed, kept: Mapping[str, Kept]
    ) -> None:
        """Record a commit (from opstamp `prior` to `stamp`) beside the index, keep the saved
        statistics of the scopes it changed current as `_keep_saved` planned, and save the
        tallied scopes it changed when it is time (the caller holds the statistics' lock;
        the overlay is saved). Statistics that may have missed another process's commits are
        not saved: the files only ever hold what a count would find."""
        files = self._files
        if files is None:
            return
        held, self._opstamp = self._opstamp, stamp
        scopes = _scopes_of(changed)
        if prior is not None and stamp <= prior:
            kept = {}  # a commit whose opstamp is not new cannot be told from the last one
        files.drop(None if scopes is None else scopes - kept.keys())  # again: a reader's
        for scope, keep in kept.items():  # frames before the manifest that names them
            if keep.frame is not None:
                files.append(scope, keep.prev, stamp, keep.frame, keep.fresh)
        try:
            if files.identity is None:  # an index from before identities: give it one
                files.identity = _write_meta(self._directory)
            files.committed(prior, stamp, self._overlay.digest, scopes)
        except OSError as exc:
            logger.warning("search index %s: cannot record the commit: %s", self._directory, exc)
            return
        if held is None or held != prior:
            self._stats.forget()  # another process committed before us: count afresh
            self._unsaved.clear()
            self._folding.clear()
            self._borrowed.clear()
            return
        rewrite = [scope for scope, keep in kept.items() if keep.frame is None]
        if rewrite and files.fresh_at(stamp, self._overlay.digest):
            for scope in rewrite:
                self._save_whole(scope, stamp, writer=True)
                if kept[scope].borrowed:
                    self._stats.drop(scope)
        tallied = set(self._stats.tallied())
        folding = {scope for scope, keep in kept.items() if keep.fold}
        self._folding = (self._folding - kept.keys()) | folding
        self._borrowed = (self._borrowed | {s for s in folding if kept[s].borrowed}) & self._folding
        self._unsaved = (
            (self._unsaved | (tallied if scopes is None else tallied & scopes)) & tallied
        ) - kept.keys()
        self._flush_stats(force=False)

    def _adopt_scopes(self, scopes: Collection[str]) -> None:
        """Tally `scopes` from their saved files where they are not tallied yet and their
        files are current (a long-lived writer's decay sweep, `keeps_saved`)."""
        files, stamp = self._files, self._opstamp
        if files is None or stamp is None:
            return
        with self._stats_lock:
            for scope in sorted(scopes):
                if not self._stats.wants(scope):
                    self._adopt_loaded(scope, files.load(scope, stamp))

    def _adopt_loaded(self, scope: str, loaded: Loaded | None) -> bool:
        """Tally `scope` from what `StatsFiles.load` found (False: nothing usable)."""
        if loaded is None:
            return False
        try:
            return self._stats.adopt(scope, *loaded)
        except (LookupError, ValueError, TypeError):  # a saved entry that does not decode
            return False

    def _keep_saved(self, prior: int | None, changed: _Changed) -> dict[str, Kept]:
        """How the commit under way keeps current the saved statistics of the scopes it
        changes (the caller holds the write lock; the reader shows commit `prior`): every
        writer does, tallied or not, so a write from a CLI process leaves the next process
        a file to load rather than a scope to count. A scope whose saved file and frames
        reach its last change gets a frame (the slugs removed, the entries written); one
        whose frames outgrow a quarter of the file is tallied from them too and saved whole
        when the writes pause (`_fold`: an import's batches each append); one whose frames
        would outgrow the whole file, or that loses words (a memory deleted or written over
        with other text: nothing of it may stay beside the index), is tallied and saved
        whole after the commit; one that holds no memory yet
        gets an empty file to start the chain. The others (no file, a broken chain, documents
        read without their text) are dropped, for the next recall to count."""
        files = self._files
        if files is None or changed is None or prior is None or self._opstamp != prior:
            return {}
        lasts = files.last_changes(prior)
        if lasts is None:
            return {}
        removed, added = changed
        light = {doc.scope_hash for doc in removed if doc.slug in self._lightened}
        kept: dict[str, Kept] = {}
        for scope in sorted((_scopes_of(changed) or set()) - light):
            last = lasts(scope)
            chain = files.chain(scope)
            if chain is None and self._holds_none(scope):
                files.save(scope, prior, *_EMPTY, writer=True)
                chain = files.chain(scope)
            if chain is None or chain.end < last:
                continue
            gone = [doc for doc in removed if doc.scope_hash == scope]
            written = [doc for doc in added if doc.scope_hash == scope]
            frame = b""
            if not _removes_text(gone, written):
                change = ([doc.slug for doc in gone], [self._written_entry(d) for d in written])
                frame = files.frame(change)
            fresh = chain.end == chain.base
            frames = len(frame) + (0 if fresh else chain.delta_size)
            fold = frames > max(chain.base_size // _DELTA_SHARE, _DELTA_MIN_BYTES)
            if not frame or fold:
                borrowed = not self._stats.wants(scope)
                if borrowed:
                    with self._stats_lock:
                        if not self._adopt_loaded(scope, files.load(scope, prior)):
                            continue
                borrowed = borrowed and not self.keeps_saved
                if frame and frames <= max(chain.base_size, _DELTA_MIN_BYTES):
                    # The frame keeps the file current until it is saved, when writes pause.
                    kept[scope] = Kept(last, frame, fresh=fresh, borrowed=borrowed, fold=True)
                    continue
                files.drop([scope])  # words that leave: gone from the disk before the commit
                kept[scope] = Kept(last, None, borrowed=borrowed)
                continue
            kept[scope] = Kept(last, frame, fresh=fresh)
        return kept

    def _holds_none(self, scope: str) -> bool:
        """Whether the index (as our reader shows it) holds no memory of `scope`."""
        return not _count(self._index.searcher(), self._visible([scope], include_forgotten=True))

    def save_statistics(self) -> None:
        """Save the tallies the files are behind on, when saving is due (`_flush_stats`): a
        long-lived writer calls it now and then, so the last writes of a burst are saved
        before the process ends."""
        with self._stats_lock:
            if not self._closed:
                self._flush_stats(force=False)
                if self.generation == self._paused_at:  # no commit since the last call
                    self._fold()
                self._paused_at = self.generation

    def _fold(self) -> None:
        """Save again whole the files whose frames outgrew their share (`Kept.fold`): an
        import's batches each append a frame, and the file is saved once they pause (a
        bulk write would otherwise save the scope's whole file every few batches). The
        caller holds the statistics' lock."""
        files, stamp = self._files, self._opstamp
        if files is None or stamp is None:
            return
        fresh = files.fresh_at(stamp, self._overlay.digest)
        for scope in sorted(self._folding):  # (a manifest not ours to trust: nothing saved)
            if fresh:
                self._save_whole(scope, stamp, writer=True)
            if scope in self._borrowed:
                self._stats.drop(scope)
        self._folding.clear()
        self._borrowed.clear()

    def _flush_stats(self, force: bool) -> None:
        """Save the tallies the files are behind on: when `force`d (closing), or when saving
        has had no more than `_SAVE_SHARE` of the time since the last save (saving a large
        scope costs as much as a small write, so each write saving would double it). The
        caller holds the statistics' lock. A process that opens the index before the save
        counts those scopes afresh (and saves them). Closing folds the frames too (`_fold`)."""
        if force:
            self._fold()
        files, stamp = self._files, self._opstamp
        if files is None or stamp is None or not self._unsaved:
            return
        started = time.monotonic()
        if not force and started < self._save_next:
            return
        if not files.fresh_at(stamp, self._overlay.digest):
            self._unsaved.clear()  # the manifest is not ours to trust: nothing is saved
            return
        for scope in sorted(self._unsaved):
            self._save_whole(scope, stamp, writer=self._writer is not None)
        self._unsaved.clear()
        self._save_next = time.monotonic() + (time.monotonic() - started) / _SAVE_SHARE

    def _save_whole(self, scope: str, stamp: int, *, writer: bool) -> None:
        """Save the file of a tallied scope at `stamp`, then hold its entries as saved there
        (`ScopeStatistics.rebase`): a writer saves a scope it keeps again and again."""
        files = self._files
        if files is not None and (saved := self._stats.saved(scope)) is not None:
            rows = files.save(scope, stamp, *saved, writer=writer)
            if rows is not None and self._writer is not None:
                self._stats.rebase(scope, rows)

    def _entries_for_stats(self, changed: _Changed) -> tuple[list[Entry], list[Entry]]:
        """The written and removed documents of tallied scopes, analysed (before the commit,
        outside the statistics' lock; a scope tallied meanwhile is analysed under it)."""
        if changed is None:
            return [], []
        removed, added = changed
        return (
            [self._entry(doc) for doc in removed if self._stats.wants(doc.scope_hash)],
            [self._written_entry(doc) for doc in added if self._stats.wants(doc.scope_hash)],
        )

    def _written_entry(self, doc: SearchDoc) -> Entry:
        """`_entry` of a document the write under way indexes, made once for the saved
        statistics' frame and the tallies both (the caller holds the write lock)."""
        known = self._written_entries.get(doc.slug)
        if known is not None and known[0] is doc:
            return known[1]
        entry = self._entry(doc, self._written_cuts)
        self._written_entries[doc.slug] = (doc, entry)
        return entry

    def _apply_stats(
        self,
        changed: _Changed,
        removed: list[Entry],
        added: list[Entry],
    ) -> None:
        """Reload the reader and bring the statistics to the commit just made (the caller
        holds the statistics' lock)."""
        try:
            with self._errors("reloading the reader"):
                self._index.reload()
        except StorageError:
            self._stats.forget()
            raise
        if changed is None:
            self._stats.emptied()
            return
        try:
            # Documents of scopes counted since `_entries_for_stats` (so before this commit).
            late: list[list[Entry]] = []
            lightened, self._lightened = self._lightened, set()
            if any(d.slug in lightened and self._stats.wants(d.scope_hash) for d in changed[0]):
                # A scope counted since `_entries_for_stats` lost documents read without
                # their text (`_light_doc`): its words cannot be subtracted; count afresh.
                self._stats.forget()
                return
            for docs, early in zip(changed, (removed, added), strict=True):
                seen = {entry.slug for entry in early}
                late.append(
                    [
                        self._entry(doc)
                        for doc in docs
                        if doc.slug not in seen and self._stats.wants(doc.scope_hash)
                    ]
                )
            self._stats.apply([*removed, *late[0]], [*added, *late[1]])
        except _TANTIVY_ERRORS:
            # The write is committed; statistics that missed part of it are counted afresh.
            logger.exception("search index %s: updating the statistics failed", self._directory)
            self._stats.forget()


_EMPTY: tuple[Counts, Counts, list[tuple[int, Entry | str]], None] = (Counts(), Counts(), [], None)
"""A scope with no memory, to save (`_keep_saved`)."""


def _removes_text(gone: Sequence[SearchDoc], written: Sequence[SearchDoc]) -> bool:
    """Whether a commit that replaces or deletes `gone` and writes `written` (one scope's)
    leaves words of a memory that no live memory holds any more."""
    if not gone:  # (an import writes new memories only)
        return False
    now = {doc.slug: _text(doc) for doc in written}
    return any(now.get(doc.slug) != _text(doc) for doc in gone)
