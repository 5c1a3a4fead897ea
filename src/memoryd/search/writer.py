"""Writing the index: every write is one commit under the write lock (a `record`'s documents may
wait for the next one: `upsert` with `then`, `commit`), read and segmented before the first
change, with the session neighbours whose context changes rewritten
(`search.sessions.SessionView`), the decay overlay and the scope statistics brought to the
commit (`search.tallies`), and the changed slugs remembered for reader processes
(`changes_since`).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from memoryd.errors import StorageError
from memoryd.models import DecayState, typed, utcnow
from memoryd.search.doc import SearchDoc
from memoryd.search.engine import _TANTIVY_ERRORS, _Cuts, _document, _values, tantivy
from memoryd.search.neighbours import NeighbourTurns
from memoryd.search.overlay import DecayOverlay
from memoryd.search.retries import CommitRetries
from memoryd.search.sessions import CONTEXT_TYPE, SessionView
from memoryd.search.stats_file import index_opstamp
from memoryd.search.tallies import IndexTallies, _Changed, _scopes_of
from memoryd.search.words import base_forms
from memoryd.text import segment

logger = logging.getLogger(__name__)

# tantivy splits the writer heap between its indexing threads and wants at least 15 MB each.
_WRITER_HEAP_BYTES = 64_000_000

_WRITER_MAX_THREADS = 4

_MERGE_NICENESS = 10
"""How far below the writing thread tantivy's merge threads run (`_lower_merges`): enough that a
merge yields the cores to requests, not so far that a loaded machine starves it and a
close waits (`wait_merging_threads`)."""

_MERGE_THREAD_PREFIX = "merge_thread_"

_MAX_DELAYS = 10
"""A steady stream of records is committed at least this many `commit_delay_s` after the first
waiting one (the timer otherwise waits for the stream to pause)."""

_CHANGES_KEPT = 4096
"""Past this many changed memories a reader counts its tallies afresh (`changes_since`)."""


class Placed(NamedTuple):
    """Where a session memory that decay moves or deletes stands, and its state before, as
    the graph has it (`SearchIndex.set_decay_states`)."""

    scope_hash: str
    decay_state: DecayState
    created_at: datetime


def _placed_doc(slug: str, place: Placed) -> SearchDoc:
    """A session memory that decay moves or deletes, unread: what the graph says of it
    (`Placed`)."""
    return typed(
        SearchDoc,
        slug=slug,
        scope_hash=place.scope_hash,
        type=CONTEXT_TYPE,
        decay_state=place.decay_state,
        title="",
        body="",
        tags=[],
        triggers=[],
        created_at=place.created_at,
        withheld=False,
    )


def _commit_slugs(
    changed: _Changed, before: DecayOverlay, after: DecayOverlay | None
) -> frozenset[str] | None:
    """The slugs one commit wrote, deleted or moved to another decay state; None when it
    removed everything or changed too many to name."""
    if changed is None:
        return None
    slugs = {doc.slug for docs in changed for doc in docs}
    if after is not None:
        old, new = before.states, after.states
        slugs.update(slug for slug in old.keys() | new.keys() if old.get(slug) != new.get(slug))
    return frozenset(slugs) if len(slugs) <= _CHANGES_KEPT else None


class IndexWriting(IndexTallies, NeighbourTurns, CommitRetries):
    """The writes of a `SearchIndex`: upsert, decay states, delete, clear."""

    def changes_since(self, generation: int) -> frozenset[str] | None:
        """The slugs the commits made through this object after `generation` wrote, deleted
        or moved (for `refresh`); None when that is unknown (too long ago, too many, a clear
        or a reindex)."""
        current, commits = self.generation, list(self._commits)
        if generation >= current:
            return frozenset()
        if not commits or commits[0][0] > generation + 1:
            return None
        changed: set[str] = set()
        for made, slugs in commits:
            if made <= generation:
                continue
            if slugs is None:
                return None
            changed |= slugs
            if len(changed) > _CHANGES_KEPT:
                return None
        return frozenset(changed)

    def upsert(self, docs: Sequence[SearchDoc], *, then: Callable[[], None] | None = None) -> None:
        """Index `docs`, replacing any document with the same slug (within one call the last
        document of a slug wins), in one commit with the documents waiting for one.

        With `then` they may wait for a later commit instead (group commit: each commit adds
        a segment, and tantivy's merges rewrite a whole small index every ~8 segments,
        bench/RESULTS.md): the next read of this index, `commit` (before another process
        reads it from disk), another write, `close`, or the timer, whichever comes first. The
        timer commits once no such write came for `commit_delay_s`, and at the latest
        `_MAX_DELAYS` times that after the first waiting document: a burst of records shares
        one commit, made when it pauses. `then` runs once a commit holds them (a record ends
        its journal intent there: a crash before leaves the intent, and recovery indexes the
        memory again).
        """
        if then is None or self.commit_delay_s <= 0:
            self._commit_waiting(docs)
            if then is not None:
                then()
            return
        self._require_open()
        with self._waiting_lock:
            if self._waiting_since is None:
                self._waiting_since = utcnow()
            self._waiting.update((doc.slug, doc) for doc in docs)
            self._then.append(then)
            self._last_wait = time.monotonic()
            if self._timer is None:
                self._first_wait = self._last_wait
                self._arm(self.commit_delay_s)

    def _arm(self, delay: float) -> None:
        """Start the commit timer (the caller holds the waiting lock)."""
        self._timer = threading.Timer(delay, self._commit_on_time)
        self._timer.name = "memoryd-index-commit"
        self._timer.daemon = True
        self._timer.start()

    def commit(self) -> None:
        """Commit the documents waiting for a commit (`upsert` with `then`), then run their
        `then`s; a read of this index does it first. On failure they keep waiting (the next
        read, write or `close` tries again) and the error is raised."""
        if self._waiting or self._committing:
            self._commit_waiting(())

    def _commit_on_time(self) -> None:
        """The timer's commit (on its own thread). On failure the documents keep waiting
        and the timer tries again later (`_note_failure`), unless a read, a write or `close`
        commits them first."""
        with self._waiting_lock:
            due = min(
                self._last_wait + self.commit_delay_s,
                self._first_wait + self.commit_delay_s * _MAX_DELAYS,
            )
            wait = due - time.monotonic()
            if self._waiting and wait > 0:
                self._arm(wait)  # writes came since: wait for them to pause
                return
        try:
            if not self._closed:
                self.commit()
        except Exception as exc:  # noted, logged and retried by `_commit_waiting`
            logger.debug("search index %s: the timer's commit failed: %s", self, exc)

    def _commit_waiting(self, docs: Sequence[SearchDoc]) -> None:
        """Commit `docs` and the waiting documents (older: `docs` win a slug) in one commit."""
        with self._commit_lock:
            with self._waiting_lock:
                self._committing = True  # before they leave `_waiting`: a read waits for them
                waiting, self._waiting = self._waiting, {}
                since, self._waiting_since = self._waiting_since, None
                self._in_commit = (len(waiting), since)
                thens, self._then = self._then, []
                timer, self._timer = self._timer, None
            try:
                if timer is not None:
                    timer.cancel()
                try:
                    self._upsert_now([*waiting.values(), *docs])
                except BaseException as exc:
                    with self._waiting_lock:
                        self._waiting = {**waiting, **self._waiting}
                        self._then[:0] = thens
                        if waiting:  # older than any written since: theirs is the oldest wait
                            self._waiting_since = since
                            if isinstance(exc, Exception):
                                self._note_failure(exc)
                    raise
                self._note_success(len(waiting))
            finally:
                with self._waiting_lock:
                    self._committing = False
                    self._in_commit = (0, None)
        for then in thens:
            try:
                then()
            except Exception:
                # Committed: a write whose `then` failed (its journal end) is settled by
                # recovery, which finds it complete.
                logger.exception("search index %s: after a commit", self)

    def _upsert_now(self, docs: Sequence[SearchDoc]) -> None:
        if not docs:
            return
        latest = {doc.slug: doc for doc in docs}
        withheld = [slug for slug, doc in latest.items() if doc.withheld]
        if withheld:
            self._delete_now(withheld)
            latest = {slug: doc for slug, doc in latest.items() if slug not in withheld}
            if not latest:
                return

        def plan(searcher: tantivy.Searcher) -> tuple[dict[str, SearchDoc], list[SearchDoc]]:
            # Deleting a slug that is not indexed still costs at commit, in every segment (bulk
            # indexing in 1,000-document batches was slower, bench/RESULTS.md), so only
            # indexed slugs are deleted.
            indexed = [slug for slug in latest if searcher.doc_freq("slug", slug)]
            return latest, list(self._stored(searcher, indexed).values())

        self._replace(f"indexing {len(latest)} document(s)", plan)

    def set_decay_states(
        self,
        states: Mapping[str, DecayState],
        gone: Sequence[str] = (),
        placed: Mapping[str, Placed] | None = None,
    ) -> None:
        """Move indexed memories to new decay states (slug → state) and delete the `gone`
        ones (unknown slugs are ignored), in one commit: what a whole decay sweep changes.

        A moved memory's document stays as it is: its new state goes into the index's
        `DecayOverlay`, which every read applies. Only the session turns whose context loses
        a memory that goes soft-forgotten or is deleted are written again (the turns of a
        session mostly fade together, so these are few).

        `placed` says where moved and gone memories stand and what state they leave (as
        the graph has it): those of scopes whose statistics are not tallied are then not
        read at all, the session view hiding them by their addresses (a 100k first sweep
        moves 24.7k and deletes 75k; reading them back was a sixth of its index write)."""
        gone = _values(gone)
        if not states and not gone:
            return
        self.commit()
        removed = set(gone)
        moving = {slug: state for slug, state in states.items() if slug not in removed}
        places = placed or {}

        def write(writer: tantivy.IndexWriter) -> _Changed:
            self._index.reload()
            searcher = self._index.searcher()
            overlay = self._overlay
            self._lightened = set()
            # The segmentations the documents read store: none of them is cut again.
            known = _Cuts()
            self._cuts = known.stored
            try:
                if self.keeps_saved:
                    # Their scopes' saved statistics are kept (`keeps_saved`): those moved
                    # are read whole, so their words can be taken out and put back.
                    self._adopt_scopes({place.scope_hash for place in places.values()})
                unread = {
                    slug: place
                    for slug in [*moving, *gone]
                    if (place := places.get(slug)) is not None
                    and not self._stats.wants(place.scope_hash)
                }
                found = self._stored_with_addresses(
                    searcher, [s for s in [*moving, *gone] if s not in unread], light=removed
                )
                before = [doc for doc, _ in found.values()]
                before.extend(_placed_doc(slug, place) for slug, place in unread.items())
                self._lightened.update(unread)
                # What a session view no longer sees: the deleted memories and those going
                # soft-forgotten.
                hiding = removed | {
                    slug for slug, state in moving.items() if not state.visible_by_default
                }
                hidden_at = self._addresses(searcher, [s for s in unread if s in hiding])
                read = {(a.segment_ord, a.doc): doc for doc, a in found.values()}
                view = SessionView(
                    self,
                    searcher,
                    {},
                    gone=hiding,
                    around=[doc for doc in before if doc.slug in hiding],
                    read=read,
                    hidden_at=hidden_at,
                )
                rewrite = [
                    doc.model_copy(update={"decay_state": moving[doc.slug]})
                    if doc.slug in moving
                    else doc
                    for doc in view.neighbours_of([d for d in before if d.slug in hiding])
                ]
                cut = functools.lru_cache(maxsize=None)(known.cut)  # each body cut once
                with self._errors("preparing documents"):
                    documents = [_document(doc, view.context_parts(doc), cut) for doc in rewrite]
                rewritten = [doc.slug for doc in rewrite]
                self._delete_slugs(writer, [*gone, *rewritten])
                if not gone and not rewritten:
                    # A commit of states alone: one operation, so that its opstamp is new
                    # (a fresh writer's empty commit repeats the last one's), as the saved
                    # statistics' frames need (`stats_file`).
                    writer.delete_documents_by_term("slug", "")
                for document in documents:
                    writer.add_document(document)
                # Only memories the index holds (not a sensitive scope's, which it withholds).
                held = {
                    slug: state
                    for slug, state in moving.items()
                    if slug in found or (slug in unread and searcher.doc_freq("slug", slug))
                }
                self._overlay_next = overlay.changed(held, [*gone, *rewritten])
                after = [
                    doc.model_copy(update={"decay_state": moving[doc.slug]})
                    for doc in before
                    if doc.slug in moving
                ]
                return before, after
            finally:
                self._cuts = None

        self._write(f"moving {len(states)} and deleting {len(gone)} decayed document(s)", write)
        with self._write_lock:
            self.touched.update(states)
            self.touched.update(gone)

    def _replace(
        self,
        action: str,
        plan: Callable[[tantivy.Searcher], tuple[dict[str, SearchDoc], list[SearchDoc]]],
    ) -> None:
        """Write the documents `plan` returns (slug → new document) in place of the indexed
        ones it returns (as they were), with the session neighbours whose context changes."""
        written: dict[str, SearchDoc] = {}

        def write(writer: tantivy.IndexWriter) -> _Changed:
            # Reloading first makes the reader see every commit made so far. Everything is
            # read and segmented (jieba) before the first change, so a failure leaves nothing
            # half-added for the next commit to pick up.
            self._index.reload()
            searcher = self._index.searcher()
            latest, moved = plan(searcher)
            written.update(latest)
            # A turn's neighbours change when it is written next to them (or moves, or hides).
            view = SessionView(self, searcher, latest, gone=set(), around=moved)
            rewrite = view.neighbours_of([*latest.values(), *moved])
            # Each text cut once: a turn's body is also its neighbours' context (an import of
            # 100k memories cut a session body three times), and the statistics count the
            # written memories from the same cuts (`_keep_saved`).
            cuts = self._written_cuts

            def cut(text: str) -> str:
                if (found := cuts.get(text)) is None:
                    found = cuts[text] = segment(text)
                return found

            # And each cut text put in its base forms once: the tags a bulk write repeats,
            # and the titles and bodies the statistics then count (`_analysed`).
            forms_of = self._written_forms

            def forms(text: str) -> str:
                if (found := forms_of.get(text)) is None:
                    found = forms_of[text] = base_forms(text)
                return found

            with self._errors("preparing documents"):
                documents = [
                    (doc.slug, _document(doc, view.context_parts(doc), cut, forms))
                    for doc in [*latest.values(), *rewrite]
                ]
            self._delete_slugs(writer, [doc.slug for doc in (*moved, *rewrite)])
            for _, document in documents:
                writer.add_document(document)
            self._overlay_next = self._overlay.changed({}, [*latest, *(d.slug for d in rewrite)])
            # The rewritten neighbours keep their title and body: only their context changed.
            return moved, list(latest.values())

        self._write(action, write)
        with self._write_lock:
            self.touched.update(written)

    def delete(self, slugs: Sequence[str]) -> None:
        """Remove the documents of `slugs`; unknown slugs are ignored."""
        self.commit()
        self._delete_now(slugs)

    def _delete_now(self, slugs: Sequence[str]) -> None:
        slugs = _values(slugs)
        if not slugs:
            return

        def write(writer: tantivy.IndexWriter) -> _Changed:
            # The turns next to a deleted one lose it from their context.
            self._index.reload()
            searcher = self._index.searcher()
            gone = set(slugs)
            deleted = list(self._stored(searcher, slugs).values())
            view = SessionView(self, searcher, {}, gone=gone, around=deleted)
            rewrite = view.neighbours_of(deleted)
            with self._errors("preparing documents"):
                documents = [(doc.slug, _document(doc, view.context(doc))) for doc in rewrite]
            self._delete_slugs(writer, [*slugs, *(doc.slug for doc in rewrite)])
            for _, document in documents:
                writer.add_document(document)
            self._overlay_next = self._overlay.changed({}, [*slugs, *(d.slug for d in rewrite)])
            return deleted, []

        self._write(f"deleting {len(slugs)} document(s)", write)
        with self._write_lock:
            self.touched.update(slugs)

    def _delete_slugs(self, writer: tantivy.IndexWriter, slugs: list[str]) -> None:
        """Delete the documents of `slugs` by one term-set query: a decay sweep deletes 100k,
        and one call per slug cost several times as much (bench/RESULTS.md)."""
        if slugs:
            writer.delete_documents_by_query(
                tantivy.Query.term_set_query(self._schema, "slug", slugs)
            )

    def take_touched(self) -> set[str]:
        """The slugs written or deleted since the last call (the vector store's work list):
        those of commits made, not of documents waiting for one (the vector worker, which asks
        every few seconds, would commit each record alone)."""
        with self._write_lock:
            touched, self.touched = self.touched, set()
        return touched

    def clear(self) -> None:
        """Remove every document (the schema and the files stay)."""
        self.commit()

        def write(writer: tantivy.IndexWriter) -> _Changed:
            writer.delete_all_documents()
            self._overlay_next = self._overlay.changed({}, self._overlay.states)
            return None

        self._write("clearing", write)

    def _write(
        self,
        action: str,
        operations: Callable[[tantivy.IndexWriter], _Changed],
    ) -> None:
        """Run `operations(writer)` and commit, or roll back so nothing of it lingers.

        `operations` returns the documents it replaces or deletes (as they were) and those it
        writes, for the statistics; None when it removed everything."""
        with self._write_lock:
            self._require_open()
            writer = self._get_writer()
            self._overlay_next = None
            self._written_cuts = {}
            self._written_forms = {}
            self._written_entries = {}
            try:
                changed = operations(writer)
                prior = index_opstamp(self._directory) if self._files else None
                kept = self._keep_saved(prior, changed)
                removed, added = self._entries_for_stats(changed)
                if self._files:
                    scopes = _scopes_of(changed)
                    # before the index forgets them
                    self._files.drop(None if scopes is None else scopes - kept.keys())
                with self._stats_lock:
                    stamp = writer.commit()
                    overlay, self._overlay_next = self._overlay_next, None
                    self._commits.append(
                        (self.generation + 1, _commit_slugs(changed, self._overlay, overlay))
                    )
                    self.generation += 1
                    if overlay is not None:
                        # Searches see the commit's states with its documents; the file
                        # follows (a failure to write it is raised: the write's intent stays,
                        # and its recovery writes the states again).
                        self._overlay = overlay
                    self._apply_stats(changed, removed, added)
                    if overlay is not None or self._overlay_unsaved:
                        self._overlay_unsaved = True
                        self._overlay.save()
                        self._overlay_unsaved = False
                    self._save_stats(prior, stamp, changed, kept)
                if self._lowered is not writer and _lower_merges():
                    # after a commit: a new writer's threads start on their own time
                    self._lowered = writer
            except _TANTIVY_ERRORS as exc:
                self._overlay_next = None
                self._rollback(writer)
                raise StorageError(
                    f"search index {self._directory}: {action} failed: {exc}",
                    hint=f"check the free disk space and the write access to {self._directory};"
                    " a record waiting for the index keeps its journal intent and is indexed"
                    " once the index can be written (`memoryd doctor`)",
                ) from exc
            finally:
                self._written_cuts = {}
                self._written_forms = {}
                self._written_entries = {}

    def open_writer(self) -> None:
        """Start the index writer now, on the calling thread: its indexing threads take this
        thread's OS priority for good, so the daemon starts it before a low-priority
        background write (`api.runner`) could."""
        with self._write_lock:
            self._require_open()
            self._get_writer()

    def _get_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            threads = max(1, min(_WRITER_MAX_THREADS, os.cpu_count() or 1))
            try:
                self._writer = self._index.writer(heap_size=_WRITER_HEAP_BYTES, num_threads=threads)
            except _TANTIVY_ERRORS as exc:
                if "LockBusy" in str(exc):
                    raise StorageError(
                        f"the search index at {self._directory} is being written by another "
                        "process",
                        hint="use `memoryd serve`, or wait for the other command to finish",
                    ) from exc
                raise StorageError(
                    f"cannot write the search index at {self._directory}: {exc}"
                ) from exc
        return self._writer

    def _rollback(self, writer: tantivy.IndexWriter) -> None:
        try:
            writer.rollback()
        except _TANTIVY_ERRORS:
            # The writer is unusable; drop it so the next write starts a fresh one.
            logger.exception("search index %s: rollback failed", self._directory)
            self._writer = None


def _lower_merges() -> bool:
    """Run tantivy's merge threads (which a writer starts) at low priority.

    tantivy-py exposes no merge policy, and its default one merges each level once it holds 8
    segments, every segment under ~16,800 documents (10,000 clipped, levels 1.68 times apart)
    being one level: with one commit per record, every 8th commit rewrote the whole of a 10k
    index (measured: bench/RESULTS.md). The merge then competes with the next
    requests; reniced, it takes the cores they leave. Linux only (a thread's id and name from
    /proc); elsewhere, or when refused, merges keep their priority. True when it found merge
    threads."""
    tasks = "/proc/self/task"
    try:
        ids = os.listdir(tasks)
    except OSError:
        return False
    found = False
    low = min(os.getpriority(os.PRIO_PROCESS, 0) + _MERGE_NICENESS, 19)
    for tid in ids:
        try:
            with open(f"{tasks}/{tid}/comm", encoding="utf-8") as comm:
                if not comm.read().startswith(_MERGE_THREAD_PREFIX):
                    continue
            found = True
            if os.getpriority(os.PRIO_PROCESS, int(tid)) < low:
                os.setpriority(os.PRIO_PROCESS, int(tid), low)
        except OSError:
            continue  # gone, or not ours to change
    return found
