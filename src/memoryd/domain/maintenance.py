"""Keeping the stores true to the vault: reindex, consistency and audit checks, and
indexing the captures the hook queued in `inbox/`."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from memoryd.audit import AuditEvent
from memoryd.domain.core import (
    BULK_BATCH,
    CREATING_EVENTS,
    PROGRESS_STEP,
    ServiceCore,
    copy_message,
    iter_batches,
)
from memoryd.domain.writes import search_doc
from memoryd.enrichment import (
    content_fingerprint,
)
from memoryd.errors import (
    BrokenMemoryFile,
    MemorydError,
    NotFound,
    StorageError,
)
from memoryd.governance.decay import decay_moves, restore
from memoryd.graph.store import (
    GraphStore,
)
from memoryd.journal import IntentItem
from memoryd.models import (
    AuditRecord,
    AuditVerification,
    Memory,
    MemoryType,
    ReindexReport,
    ScopeInfo,
    utcnow,
)
from memoryd.private import swap_dir
from memoryd.scope import resolve_scope
from memoryd.search.index import SearchIndex
from memoryd.vault import FORGOTTEN_DIR, file_slug

logger = logging.getLogger(__name__)


def _count(items: list[str], one: str, many: str) -> str:
    return f"1 {one}" if len(items) == 1 else f"{len(items)} {many}"


def _shown(items: list[str]) -> str:
    return ", ".join(items[:10]) + (f" and {len(items) - 10} more" if len(items) > 10 else "")


def _log_warning(message: str) -> None:
    logger.warning("%s", message)


class Maintenance(ServiceCore):
    """Rebuild, verify, and index queued captures."""

    drain_sealed: Callable[[], int]
    """Provided by `domain.sensitivity.Sensitivity`: the sensitive scopes' sealed captures."""

    # -- audit ----------------------------------------------------------------------------
    def audit_records(
        self,
        *,
        scope: Path | str | None = None,
        since: datetime | None = None,
        event_type: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        self.gate.flush()  # the read events kept in memory belong in what is read
        return self.audit.read(
            scope_hash=self.scope_hash_of(scope), since=since, event_type=event_type, limit=limit
        )

    def audit_verify(self) -> AuditVerification:
        """The chain verifies, and it holds what the stores hold: every memory in the vault
        or the graph has the line that created it (`record`, `capture`, or `adopt` when
        reindex took in a file written by hand). A log deleted together with its head anchor
        chains perfectly from nothing; only this comparison notices it.

        Memories on their way in are not missing: captures waiting in the inbox and writes
        whose intent is still open (read before the log, so a write that finishes meanwhile
        has its line in it).
        """
        from memoryd.inbox import Inbox

        self.gate.flush()
        self.audit.settle()
        witness, missing_witness = self._audit_witness()  # before the log: it may only lag
        result = self.audit.verify(witness, witnessed_by="governance.db's audit witness")
        if missing_witness and result.problem is None:
            result = result.model_copy(
                update={
                    "ok": False,
                    "problem": "governance.db holds no audit witness (its row was deleted):"
                    " the end of the log cannot be checked; restore governance.db from a backup",
                }
            )
        graph = self.graph.memory_slugs()
        held = graph | self._vault_slugs(graph)
        on_the_way = Inbox(self.home).requested_slugs() | self.journal.slugs_in_flight()
        logged = self.audit.targets(CREATING_EVENTS)
        missing = sorted(held - logged - on_the_way)
        unaudited = self._unaudited_decay(on_the_way)
        if not missing and not unaudited:
            return result
        gaps = [] if result.problem is None else [result.problem]
        if missing:
            gaps.append(
                _count(
                    missing,
                    "memory in the vault or graph has",
                    "memories in the vault or graph have",
                )
                + f" no record or capture line in the audit log: {_shown(missing)} (lines were"
                " deleted, or the log was replaced; restore audit/ from a backup, or run"
                " `memoryd reindex` to adopt memory files written by hand)"
            )
        if unaudited:
            gaps.append(
                _count(unaudited, "decay move in the vault has", "decay moves in the vault have")
                + f" no decay event in the audit log: {_shown(unaudited)} (lines were deleted, or"
                " the log was replaced; restore audit/ from a backup)"
            )
        return result.model_copy(
            update={"ok": False, "problem": "; ".join(gaps), "missing": missing + unaudited}
        )

    def _audit_witness(self) -> tuple[tuple[int, str] | None, bool]:
        """The audit chain end governance.db witnessed (None when not seeded yet, or in a
        read-only view of a database from before the witness), and whether its row is gone.

        head.json alone cannot catch the last lines cut with head.json rewritten to match;
        the witness, written in another store on every append, can: whatever the cut lines
        recorded (a grant, an update, a recall), the chain no longer holds the seq and hash
        governance.db saw written."""
        try:
            found = self.governance.audit_witness()
        except StorageError as exc:
            logger.info("no audit witness to check the log's end against: %s", exc.message)
            return None, False
        if found is None:
            return None, True
        return (None if found[0] < 0 else found), False

    def _unaudited_decay(self, on_the_way: set[str]) -> list[str]:
        """The memories whose decay state a ledger line sets (`scopes/<hash>/decay.jsonl`)
        that no `decay` audit event names with that move: a sweep logs each batch's moves
        in one event, so this is what ties the ledger to the log."""
        moved = {
            (slug, entry.to_state.value)
            for scope_hash in self.vault.ledger_scopes()
            for slug, entry in self.vault.decay_ledger(scope_hash).items()
            if slug not in on_the_way
        }
        if not moved:
            return []
        return sorted(
            {slug for slug, _ in moved - decay_moves(self.audit.read(event_type="decay"))}
        )

    # -- rebuild --------------------------------------------------------------------------
    def iter_vault(
        self,
        warn: Callable[[str], None],
        *,
        on_copy: Callable[[Path, Path, str], None] | None = None,
        encrypted: bool = False,
    ) -> Iterator[Memory]:
        """Every readable memory in the vault, streamed; broken files are reported, skipped.

        A memory is its frontmatter slug, and its file is `<slug>.md`. A second file holding
        the same slug (a copy: `cp a.md b.md`) is skipped and reported, to `on_copy(copy,
        original, slug)` when given, else to `warn`; the file named after the slug is the
        original wherever the copy sorts. A lone file whose name differs from its slug (a
        renamed file) is indexed under its slug with a note. `encrypted`: the sensitive
        scopes' files too, opened with their keys (a missing key is reported per file).
        """
        seen: dict[str, Path] = {}

        def copied(path: Path, original: Path, slug: str) -> None:
            if on_copy is not None:
                on_copy(path, original, slug)
            else:
                warn(copy_message(path, original, slug))

        for path in self.vault.iter_files(encrypted=encrypted):
            try:
                memory = self.vault.read(path)
            except MemorydError as exc:
                warn(f"skipped {exc}")
                continue
            slug = memory.meta.slug
            if slug in seen:
                copied(path, seen[slug], slug)
                continue
            if file_slug(path) != slug:
                named = self.vault.find(slug)
                if named is not None and named != path:
                    copied(path, named, slug)  # the file named after the slug comes later
                    continue
                warn(f"note: {path} holds slug {slug} (file name differs)")
            seen[slug] = path
            yield memory

    def refill_search_index(self) -> int:
        """Index every vault memory into an empty search index, streamed in batches."""
        self._require_writable("refill the search index")
        batch: list[Memory] = []
        count = 0
        for memory in self.iter_vault(_log_warning, encrypted=True):
            if memory.meta.forgotten_at is not None:
                continue  # forgotten by decay: only `restore` brings it back
            batch.append(memory)
            if len(batch) >= BULK_BATCH:
                self.index.upsert([search_doc(m) for m in batch])
                count, batch = count + len(batch), []
        if batch:
            self.index.upsert([search_doc(m) for m in batch])
        return count + len(batch)

    def load_vault(self, warn: Callable[[str], None]) -> list[Memory]:
        return list(self.iter_vault(warn))

    def reindex(
        self,
        warn: Callable[[str], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReindexReport:
        """Rebuild the graph and the search index from the vault alone.

        Both are built beside the live ones and swapped in only when complete, so an
        interrupted reindex leaves the previous graph and index usable. The vault is
        streamed in batches, so memory stays flat however large it is.
        """
        self.status_speakers.clear()
        self._require_writable("reindex")
        started = time.perf_counter()
        skipped: list[str] = []

        def note(message: str) -> None:
            skipped.append(message)
            if warn is not None:
                warn(message)  # the caller shows it: logging it as well printed it twice
            else:
                logger.warning("%s", message)

        graph_dir, index_dir = self.home / "graph", self.index.directory
        graph_new, index_new = self.home / "graph.rebuild", self.home / "search.rebuild"
        for stale in (graph_new, index_new):
            shutil.rmtree(stale, ignore_errors=True)
        # Only one engine buffer pool at a time: the live graph closes while the new one builds.
        self.graph.close()
        indexed = read = 0
        total = sum(1 for _ in self.vault.iter_files(encrypted=True)) if progress else 0
        indexed_scopes: dict[str, tuple[str, MemoryType]] = {}
        index_closed = False
        try:
            fresh = self._graph_factory(graph_new)
            fresh_index = SearchIndex.open(index_new)
            try:
                for info in self.vault.scopes():
                    fresh.upsert_scope(info.scope_hash, info.path, info.sensitive, info.aliases)
                linked: list[Memory] = []
                batch: list[Memory] = []
                for memory in self.iter_vault(note, encrypted=True):
                    read += 1
                    if progress is not None and read % PROGRESS_STEP == 0:
                        progress(read, max(total, read))
                    if memory.meta.forgotten_at is not None:
                        continue  # forgotten by decay: only `restore` brings it back
                    indexed_scopes[memory.meta.slug] = (memory.meta.scope_hash, memory.meta.type)
                    batch.append(memory)
                    if (
                        memory.meta.supersedes
                        or memory.meta.supersede_decisions
                        or memory.meta.promoted_from
                    ):
                        linked.append(memory)
                    if len(batch) >= BULK_BATCH:
                        fresh.upsert_memories(batch, link_memories=False, new=True)
                        fresh_index.upsert([search_doc(m) for m in batch])
                        indexed += len(batch)
                        batch = []
                if batch:
                    fresh.upsert_memories(batch, link_memories=False, new=True)
                    fresh_index.upsert([search_doc(m) for m in batch])
                    indexed += len(batch)
                if progress is not None:
                    progress(max(total, read), max(total, read))
                for links in iter_batches(linked, BULK_BATCH):
                    fresh.link_memories(links)
                self._replay_entity_events(fresh)
            finally:
                fresh.close()
                fresh_index.close()
            self.index.close()
            index_closed = True
            self.graph.replace_with(graph_new)
            swap_dir(index_new, index_dir)
        finally:
            self.graph = self._graph_factory(graph_dir)
            if index_closed:
                old, self.index = self.index, SearchIndex.open(index_dir)
                self.index.keeps_saved = old.keeps_saved
                self.index.commit_delay_s = old.commit_delay_s
                self.index_epoch += 1
        self.forget_entities()
        if self.vectors is not None:
            # The daemon's own worker embeds them in rounds: its writer must not wait.
            rebuilt = self.vectors.rebuild(self.index, later=self.embeds_in_background)
            logger.info(
                "reindex embedded %d memories (%d passages)", rebuilt.embedded, rebuilt.passages
            )
        # A memory file no audit line created (written by hand, or copied from a backup) is
        # adopted: the log says when it was taken in, and `audit verify` accepts it.
        logged = self.audit.targets(CREATING_EVENTS)
        adopted = [
            AuditEvent(
                actor=self.actor,
                event_type="adopt",
                scope_hash=scope_hash,
                target_id=slug,
                details={"type": type_.value},
            )
            for slug, (scope_hash, type_) in indexed_scopes.items()
            if slug not in logged
        ]
        self.audit.append_many(
            [
                *adopted,
                AuditEvent(
                    actor=self.actor,
                    event_type="reindex",
                    details={"indexed": indexed, "skipped": len(skipped), "adopted": len(adopted)},
                ),
            ]
        )
        return ReindexReport(
            indexed=indexed, skipped=skipped, seconds=time.perf_counter() - started
        )

    def _replay_entity_events(self, graph: GraphStore) -> None:
        """Merges and aliases live in the audit log; a rebuilt graph gets them back. Those
        logged before an `entity_delete` of their entity are not replayed: they belonged to
        the deleted entity, not to a newer one with the same id."""
        events = ("entity_merge", "entity_alias", "entity_delete")
        records = [r for r in self.audit.read() if r.event_type in events and r.target_id]
        deleted = {r.target_id: i for i, r in enumerate(records) if r.event_type == events[2]}
        for i, rec in enumerate(records):
            target, details = str(rec.target_id), json.loads(rec.details)
            named = [target, details.get("drop")]
            if rec.event_type == "entity_delete" or any(i < deleted.get(n, -1) for n in named):
                continue
            if rec.event_type == "entity_alias":
                if graph.get_entity(target) is not None:
                    graph.add_entity_aliases(target, [details["alias"]])
            elif graph.get_entity(details["drop"]) and graph.get_entity(target):
                graph.merge_entities(target, details["drop"])

    def consistency(
        self, vault_slugs: set[str] | None = None
    ) -> tuple[set[str], set[str], set[str]]:
        """Slugs only in the vault, only in the graph, only in the search index.

        `vault_slugs` are the slugs the vault holds, when the caller has read them already.
        """
        graph = self.graph.memory_slugs()
        vault = self._vault_slugs(graph) if vault_slugs is None else vault_slugs
        index = self.index.slugs()
        # The on-disk index holds nothing of a sensitive memory; the graph its skeleton.
        withheld = {file_slug(p) for p in self.vault.iter_encrypted()}
        return vault - graph, graph - vault, index ^ (graph - withheld)

    def _vault_slugs(self, known: set[str]) -> set[str]:
        """The slugs of the vault's memory files: a file named after a known slug holds it,
        any other is read for its frontmatter slug (copies and renamed files)."""
        slugs: set[str] = set()
        for path in self.vault.iter_encrypted():
            if path.parent.name != FORGOTTEN_DIR:  # sealed under its slug (the AAD binds it)
                slugs.add(file_slug(path))
        for path in self.vault.iter_files():
            if path.stem in known:
                slugs.add(path.stem)
                continue
            try:
                memory = self.vault.read(path)
                if memory.meta.forgotten_at is None:  # decay's forgotten: in the vault only
                    slugs.add(memory.meta.slug)
            except MemorydError:
                slugs.add(path.stem)  # broken: reported by the vault check
        return slugs

    # -- captures (`memoryd capture` → inbox/) ---------------------------------------------
    def drain_inbox(self) -> int:
        """Index the session memories `memoryd capture` queued in `inbox/`; returns how many.

        A capture never opens the graph (DESIGN.md §2): it writes the vault file and drops a
        request. Each request is indexed — search index, graph, then one `capture` audit line
        — and removed, and the memory is queued for enrichment (`enrich_pending`: extraction
        and the LLM summary come afterwards). A request whose file is already indexed
        unchanged is only removed, so draining twice, or after a crash, indexes nothing twice;
        a request a capture replaced while it was being indexed stays for the next drain. Not
        run by `open_service` (start-up stays cheap): the CLI's embedded commands and the
        daemon call it.
        """
        from memoryd.inbox import Inbox

        self._require_writable("index the inbox")
        inbox = Inbox(self.home)
        scopes: dict[str, ScopeInfo | None] = {}
        indexed = 0
        for pending in inbox.pending():
            request = pending.request
            try:
                path = Path(request.path)
                if self._index_capture(request.slug, path, request.scope_path, scopes):
                    indexed += 1
            except MemorydError as exc:
                logger.warning("capture %s stays in the inbox: %s", request.slug, exc)
                continue
            inbox.done(pending)
        indexed += self.drain_sealed()
        if indexed:
            logger.info("indexed %d captured session(s) from the inbox", indexed)
        return indexed

    def _index_capture(
        self,
        slug: str,
        path: Path,
        scope_path: str | None,
        scopes: dict[str, ScopeInfo | None],
    ) -> bool:
        """Index one captured file; False when there was nothing (new) to index."""
        if not path.is_file():
            found = self.vault.find(slug)
            if found is None:
                logger.warning("capture %s: %s is gone; request dropped", slug, path)
                return False
            path = found
        try:
            memory = self.vault.read(path)
        except (BrokenMemoryFile, NotFound) as exc:
            logger.warning("capture %s not indexed: %s", slug, exc)
            return False
        if memory.meta.slug != slug:
            logger.warning("capture %s not indexed: %s holds %s", slug, path, memory.meta.slug)
            return False
        if memory.meta.forgotten_at is not None:
            # The agent resumed a session decay had forgotten: it is in use again.
            logger.info("capture %s: a forgotten session was resumed; restoring it", slug)
            restore(self.governance_stores(), slug, self.clock())
            self.governance.enqueue_enrichment(slug, content_fingerprint(memory), utcnow())
            return True
        first_in_scope = memory.meta.scope_hash not in scopes
        scope = self._capture_scope(memory.meta.scope_hash, scope_path, scopes)
        if scope is not None and scope.sensitive:
            logger.warning("capture %s not indexed: its scope is sensitive", slug)
            return False
        row = self.graph.get_memory(slug)
        unchanged = (
            row is not None
            and row.fingerprint == memory.fingerprint
            and row.title == memory.meta.title
            and row.updated_at == memory.meta.updated_at
            and row.path == str(path)
        )
        queued = self.governance.enqueue_enrichment(slug, content_fingerprint(memory), utcnow())
        # The graph's fingerprint sees only the start of the body, which is the enrichment's
        # summary once it has one: the queue's, over the whole content, tells a change too.
        if unchanged and queued != "changed":
            return False
        if scope is not None and first_in_scope:
            self._ensure_scope(scope)
        # The request stays in the inbox until this returns, so a failure is retried by the
        # next drain; a crash leaves the intent, which `recover` settles before that drain.
        item = IntentItem(
            slug=slug,
            path=str(path),
            event_type="capture",
            scope_hash=memory.meta.scope_hash,
            details={
                "type": memory.meta.type.value,
                "source": memory.meta.source,
                "update": row is not None,
            },
        )
        intent = self._begin_write("capture", [item])
        try:
            self.index.upsert([search_doc(memory)])
            self.graph.upsert_memories([memory])
            self.audit.append_many([self._intended_event(intent, item)])
        finally:
            self.journal.end(intent)
        return True

    def _capture_scope(
        self, scope_hash: str, scope_path: str | None, scopes: dict[str, ScopeInfo | None]
    ) -> ScopeInfo | None:
        """The scope of a capture: resolved from its path when that is still here, else as
        stored; the stored `sensitive` flag always wins."""
        if scope_hash in scopes:
            return scopes[scope_hash]
        stored = self.vault.read_scope(scope_hash)
        info: ScopeInfo | None = None
        if scope_path and Path(scope_path).is_dir():
            try:
                info = resolve_scope(scope_path)
            except MemorydError:
                info = None
            if info is not None and info.scope_hash != scope_hash:
                info = None
        info = info or stored
        if info is not None and stored is not None:
            info.sensitive = stored.sensitive
        scopes[scope_hash] = info
        return info
