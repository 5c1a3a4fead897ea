"""Writing memories, the path every job's writes take: a batch prepared (`_prepare`: slugs,
limits, links and duplicates checked) and written vault file → graph → search index →
audit line under one journal intent (`_write_batch`), and a memory rewritten everywhere it
lives (`_replace_everywhere`). The base of `domain.core.ServiceCore`, which holds the stores
these methods use.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import unicodedata
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memoryd.audit import AuditEvent, AuditLog
from memoryd.enrichment import content_fingerprint
from memoryd.errors import (
    Conflict,
    InvalidInput,
    MemorydError,
    NotFound,
    StorageError,
    describe_validation,
)
from memoryd.governance.store import GovernanceStore
from memoryd.governance.supersede_kept import MentionLists
from memoryd.graph.store import GraphStore
from memoryd.journal import Intent, IntentItem, Journal
from memoryd.models import (
    CJK,
    DecayState,
    Frontmatter,
    Memory,
    MemoryDraft,
    MemoryType,
    RelationRef,
    ScopeInfo,
    to_utc,
    utcnow,
)
from memoryd.redact import redact
from memoryd.redact.fields import clean_meta, clean_slug, clean_stored, redact_field
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.sensitive.files import opaque_slug
from memoryd.vault import Vault, render

logger = logging.getLogger(__name__)


MAX_BODY_CHARS = 1_000_000
ENRICH_BULK_LIMIT = 2000
"""An import of more session memories than this is not queued for DURA scoring as it lands
(each would be read, scored and rewritten by the next command or the daemon); `memoryd
analyze-session SLUG` scores the ones that matter."""

_CJK_CHAR = re.compile(f"[{CJK}]")


def slugify(title: str, when: datetime) -> str:
    """`2026-05-18-use-solid-instead-of-react-3f9a1c`: date, readable words, a random tail.

    Latin letters lose their accents; kana, CJK ideographs and Hangul stay as they are
    (`2026-06-15-数据库迁移到-postgres-1c2297`): a slug should say what the memory is about."""
    if title.isascii():  # NFKC and NFKD leave ASCII as it is: the loop below would too
        kept = title.lower()
    else:
        kept = "".join(
            char
            if _CJK_CHAR.match(char)
            else unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode() or " "
            for char in unicodedata.normalize("NFKC", title).lower()
        )
    words = re.findall(rf"[a-z0-9]+|[{CJK}]+", kept)
    stem = "-".join(words)[:48].strip("-")
    parts = [when.strftime("%Y-%m-%d"), stem, secrets.token_hex(3)]
    return "-".join(p for p in parts if p)


def search_doc(memory: Memory, *, in_memory: bool = False) -> SearchDoc:
    """The index document of a memory. A sensitive one is `withheld` (the on-disk index
    removes it) with no text, unless it is for an in-memory index under a grant."""
    meta = memory.meta
    if memory.sensitive and not in_memory:
        return SearchDoc(
            slug=meta.slug,
            scope_hash=meta.scope_hash,
            type=meta.type,
            decay_state=meta.decay_state,
            title="",
            body="",
            created_at=meta.created_at,
            withheld=True,
        )
    return SearchDoc(
        slug=meta.slug,
        scope_hash=meta.scope_hash,
        type=meta.type,
        decay_state=meta.decay_state,
        title=meta.title,
        body=memory.body,
        tags=meta.tags,
        triggers=meta.triggers,
        created_at=meta.created_at,
    )


class _EndOnceBoth:
    """Ends a write's journal intent once both its audit line is written and a commit of the
    search index holds its documents (`SearchIndex.upsert` with `then`), in either order;
    not when the write was undone (`undone`: its undo ends the intent)."""

    def __init__(self, journal: Journal, intent: Intent) -> None:
        self._journal, self._intent = journal, intent
        self._left = 2
        self._lock = threading.Lock()
        self.undone = False

    def done(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left or self.undone:
                return
        self._journal.end(self._intent)


class Writes:
    """The write path of `ServiceCore` (the stores are its attributes)."""

    vault: Vault
    graph: GraphStore
    index: SearchIndex
    audit: AuditLog
    governance: GovernanceStore
    journal: Journal
    actor: str
    _recall_pending: dict[str, tuple[int, datetime]]
    _recall_dirty: dict[str, tuple[int, datetime, DecayState]]
    """Set by `ServiceCore.__init__`."""
    forget_entities: Callable[[], None]
    """Provided by `ServiceCore`: a batch that writes entities drops their cache."""
    judged_mentions: MentionLists

    def _begin_write(self, op: str, items: list[IntentItem]) -> Intent:
        return self.journal.begin(
            op=op, actor=self.actor, audit_seq=self.audit.last_seq(), items=items
        )

    @staticmethod
    def _intended_event(intent: Intent, item: IntentItem, **extra: Any) -> AuditEvent:
        return AuditEvent(
            actor=intent.actor,
            event_type=item.event_type,
            scope_hash=item.scope_hash,
            target_id=item.slug,
            details={**item.details, **extra},
        )

    def _edited(self, old: Memory, changes: dict[str, Any], path: Path | None) -> Memory:
        try:
            meta = Frontmatter.model_validate(
                {**old.meta.model_dump(), **changes, "updated_at": utcnow()}
            )
        except ValueError as exc:
            raise InvalidInput(f"invalid change to {old.slug}: {exc}") from exc
        return Memory(meta=meta, body=old.body, path=path, sensitive=old.sensitive)

    def _carry_recalls(self, old: Memory, new: Memory) -> bool:
        """Give `new` the recalls counted since `old`'s file was written: the daemon counts
        them in memory and in the graph and writes the files later, so a rewrite from the
        file (an edit, enrichment, DURA scoring) would otherwise put the file's older count
        back into the graph and lose them. True when `new` took counts the file lacked."""
        slug = new.slug
        pending = self._recall_pending.pop(slug, None)
        if pending is not None:
            for counted, total in self.graph.record_recalls({slug: pending}).items():
                self._recall_dirty[counted] = (total, pending[1], DecayState.ALIVE)
        dirty = self._recall_dirty.get(slug)
        if dirty is None:
            return False
        count, at, state = dirty
        meta = new.meta
        meta.recall_count = max(meta.recall_count, count)
        if meta.last_recalled_at is None or meta.last_recalled_at < at:
            meta.last_recalled_at = at
        if meta.decay_state == old.meta.decay_state:  # the edit itself did not set one
            meta.decay_state = state
        return True

    def _replace_everywhere(
        self, old: Memory, new: Memory, *, event_type: str, details: dict[str, Any]
    ) -> None:
        """Write `new` over `old` in the vault, graph, index and audit log, in that order,
        under a write intent (see `_write_batch`)."""
        if old.path is None or new.path is None:
            raise StorageError(f"memory {old.slug} has no file path")
        # Edits, enrichment (the LLM's summary), supersede decisions, sync updates: every
        # rewrite is redacted like a new memory (`redact.fields`), before anything is written.
        clean_stored(new)
        counted = self._carry_recalls(old, new)
        data = render(new).encode("utf-8")
        intent = self._begin_write(
            "replace",
            [
                IntentItem(
                    slug=new.slug,
                    path=str(new.path),
                    event_type=event_type,
                    scope_hash=new.meta.scope_hash,
                    details=details,
                    old_path=str(old.path) if old.path != new.path else None,
                    sha256=hashlib.sha256(data).hexdigest(),
                )
            ],
        )
        try:
            self.vault.write(new)
        except MemorydError:
            self.journal.end(intent)  # an atomic write that failed changed nothing
            raise
        try:
            if new.path != old.path:
                self.vault.remove(old.path)
            before = self.graph.recall_generation
            self.graph.upsert_memories([new])
            self.judged_mentions.passed(self.graph, [old, new], before)
            self.index.upsert([search_doc(new)])
            self.audit.append_many([self._intended_event(intent, intent.items[0])])
            if counted:  # the file holds them now
                self._recall_dirty.pop(new.slug, None)
        except MemorydError:
            try:
                self._carry_recalls(old, old)  # the graph keeps the counts it held
                self.vault.write(old)
                if new.path != old.path:
                    self.vault.remove(new.path)
                self.graph.upsert_memories([old])
                self.index.upsert([search_doc(old)])
            except MemorydError:
                # The intent stays: the next start settles the write.
                logger.exception("could not undo the %s of %s", event_type, old.slug)
            else:
                self.journal.end(intent)
            raise
        self.journal.end(intent)
        if content_fingerprint(new) != content_fingerprint(old):
            self._queue_sessions([new])  # an edited session is scored again, once

    def _replace_many(
        self, edits: Sequence[tuple[Memory, Memory, dict[str, Any]]], *, event_type: str
    ) -> None:
        """`_replace_everywhere` for many memories that keep their files (a batch's supersede
        decisions): one write intent, each file written atomically, then one graph write, one
        index commit and the audit lines. On failure every file and row goes back to `old`.
        The caller holds each memory's file lock."""
        if len(edits) == 1:
            old, new, details = edits[0]
            self._replace_everywhere(old, new, event_type=event_type, details=details)
            return
        items: list[IntentItem] = []
        counted: list[bool] = []
        for old, new, details in edits:
            if old.path is None or new.path != old.path:
                raise StorageError(f"memory {old.slug} must keep its file to be rewritten here")
            clean_stored(new)
            counted.append(self._carry_recalls(old, new))
            items.append(
                IntentItem(
                    slug=new.slug,
                    path=str(new.path),
                    event_type=event_type,
                    scope_hash=new.meta.scope_hash,
                    details=details,
                    sha256=hashlib.sha256(render(new).encode("utf-8")).hexdigest(),
                )
            )
        intent = self._begin_write("replace", items)
        written: list[Memory] = []
        try:
            for old, new, _ in edits:
                self.vault.write(new, sync=False)
                written.append(old)
            self.vault.sync_all()  # one flush for the batch, before the graph sees it
            self.graph.upsert_memories([new for _, new, _ in edits])
            self.index.upsert([search_doc(new) for _, new, _ in edits])
            self.audit.append_many([self._intended_event(intent, item) for item in items])
        except MemorydError:
            try:
                olds = [old for old, _, _ in edits]
                for old in olds:
                    self._carry_recalls(old, old)  # the graph keeps the counts it held
                for old in written:
                    self.vault.write(old)
                self.graph.upsert_memories(olds)
                self.index.upsert([search_doc(old) for old in olds])
            except MemorydError:
                # The intent stays: the next start settles the write.
                logger.exception("could not undo the %s of %d memories", event_type, len(edits))
            else:
                self.journal.end(intent)
            raise
        for (_, new, _), carried in zip(edits, counted, strict=True):
            if carried:  # the file holds them now
                self._recall_dirty.pop(new.slug, None)
        self.journal.end(intent)
        self._queue_sessions(
            [new for old, new, _ in edits if content_fingerprint(new) != content_fingerprint(old)]
        )

    def _prepare(
        self,
        draft: MemoryDraft,
        scope: ScopeInfo,
        now: datetime,
        *,
        observations: Sequence[str] = (),
        relations: Sequence[RelationRef] = (),
    ) -> Memory:
        # Every path that records a memory passes here: secrets and control characters
        # never reach the vault, the graph or the index. A graph fact's entity ids and
        # relations come in here too, so its frontmatter is cleaned in one `clean_meta` pass.
        redacted = redact_field(draft.title)
        title = redacted.strip()
        if not title:
            raise InvalidInput("title is empty", hint="give the memory a short title with --title")
        # A body that is its title (an imported relation's) is redacted once.
        body = (redacted if draft.body == draft.title else redact(draft.body)).strip()
        if len(body) > MAX_BODY_CHARS:
            raise InvalidInput(
                f"body is {len(body)} characters; the limit is {MAX_BODY_CHARS}",
                hint="split it into several memories",
            )
        created = to_utc(draft.created_at) if draft.created_at else now
        ttl = draft.ttl_days if draft.ttl_days is not None else draft.type.default_ttl_days
        try:
            meta = Frontmatter(
                title=title,
                # A sensitive scope's slugs are opaque: a chosen or a title-made slug says
                # what the memory is about.
                slug=opaque_slug(created)
                if scope.sensitive
                else (draft.slug and clean_slug(draft.slug)) or slugify(title, created),
                type=draft.type,
                scope_hash=scope.scope_hash,
                source=draft.source,
                created_at=created,
                updated_at=None,
                tags=draft.tags,
                triggers=draft.triggers,
                category=draft.category,
                ttl_days=ttl,
                supersedes=draft.supersedes,
                promoted_from=draft.promoted_from,
                observations=list(dict.fromkeys(observations)),
                relations=list(relations),
            )
            meta = clean_meta(meta)  # tags, triggers, category, source, links, graph facts
        except ValidationError as exc:
            raise InvalidInput(f"invalid memory: {describe_validation(exc.errors())}") from exc
        return Memory(meta=meta, body=body, sensitive=scope.sensitive)

    def _draw_free_slugs(self, memories: list[Memory], drafts: Sequence[MemoryDraft]) -> None:
        """Draw again the random tail of a made slug that another memory of the batch, or a
        stored one, has: thousands of memories with one title (an import's repeated
        observations) share everything but six hex digits, and a batch that met two of them
        was refused whole. A slug the draft chose stays as it is (refused when taken)."""
        made = [m for m, d in zip(memories, drafts, strict=True) if not d.slug or m.sensitive]
        chosen = {id(m) for m in made} ^ {id(m) for m in memories}
        kept = {m.meta.slug for m in memories if id(m) in chosen}
        while made:
            slugs = sorted({m.meta.slug for m in made})
            # One slug (every `record`) by its key: kuzu scans the table for the UNWIND form.
            stored = {
                str(row[0])
                for row in self.graph.cypher(
                    "MATCH (m:Memory {slug: $slug}) RETURN m.slug"
                    if len(slugs) == 1
                    else "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) RETURN m.slug",
                    {"slug": slugs[0]} if len(slugs) == 1 else {"slugs": slugs},
                    limit=len(made) + 1,
                ).rows
            }
            again = []
            for memory in made:
                if memory.meta.slug in stored or memory.meta.slug in kept:
                    again.append(memory)
                else:
                    kept.add(memory.meta.slug)
            for memory in again:
                when = memory.meta.created_at
                memory.meta.slug = (
                    opaque_slug(when)
                    if memory.sensitive
                    else clean_slug(slugify(memory.meta.title, when))
                )
            made = again

    def _check_links(self, memory: Memory) -> None:
        for slug in (*memory.meta.supersedes, *(filter(None, [memory.meta.promoted_from]))):
            if self.graph.get_memory(slug) is None:
                raise NotFound(f"memory {slug} (named in supersedes/promoted_from) does not exist")

    def _refuse_duplicates(self, memories: list[Memory], drafts: Sequence[MemoryDraft]) -> None:
        wanted: dict[str, set[str]] = {}
        for memory, draft in zip(memories, drafts, strict=True):
            if not draft.allow_duplicate and memory.body:
                wanted.setdefault(memory.meta.scope_hash, set()).add(memory.fingerprint)
        seen: dict[tuple[str, str], str] = {
            (scope_hash, fp): slug
            for scope_hash, fps in wanted.items()
            for fp, slug in self.graph.find_fingerprints(scope_hash, sorted(fps)).items()
        }
        for memory, draft in zip(memories, drafts, strict=True):
            if draft.allow_duplicate or not memory.body:
                continue
            key = (memory.meta.scope_hash, memory.fingerprint)
            existing = seen.get(key)
            if existing is not None:
                raise Conflict(
                    f"the same body is already stored in this scope as {existing}",
                    hint="use `memoryd get` to read it, or pass --allow-duplicate",
                )
            seen[key] = memory.meta.slug

    def _write_batch(
        self,
        batch: list[Memory],
        *,
        sync_each: bool,
        events: Sequence[tuple[str, str, dict[str, Any]]] = (),
    ) -> None:
        """Write one batch; on failure undo what was written, newest step first.

        A write intent names the batch before its first step and is removed after its audit
        lines: a crash in between leaves it for `recover` to settle on the next start.
        `events`: (slug, event type, details) of more audit lines the write makes, after
        the batch's `record` lines (the supersede decisions judged before it).
        """
        for memory in batch:
            memory.path = self.vault.path_for(memory)
        items = [
            IntentItem(
                slug=m.meta.slug,
                path=str(m.path),
                event_type="record",
                scope_hash=m.meta.scope_hash,
                details={"type": m.meta.type.value, "source": m.meta.source},
            )
            for m in batch
        ]
        paths_of = {m.meta.slug: m for m in batch}
        items += [
            IntentItem(
                slug=slug,
                path=str(paths_of[slug].path),
                event_type=event_type,
                scope_hash=paths_of[slug].meta.scope_hash,
                details=details,
            )
            for slug, event_type, details in events
        ]
        intent = self._begin_write("record", items)
        # One memory (`record`): its document may wait for the index's next commit, shared
        # with the records around it; the intent ends once that commit and the audit line
        # are both done. A batch commits at once.
        ending = _EndOnceBoth(self.journal, intent) if sync_each and len(batch) == 1 else None
        paths: list[Path] = []
        try:
            if sync_each and len(batch) == 1:
                self._file_beside_graph(batch[0], paths)
            elif sync_each:
                for memory in batch:
                    paths.append(self.vault.write(memory))
                self.graph.upsert_memories(batch, new=True)
            else:
                self._write_bulk(batch, paths)
            try:
                if sync_each:
                    self.index.upsert(
                        [search_doc(m) for m in batch],
                        then=None if ending is None else ending.done,
                    )
                self.audit.append_many([self._intended_event(intent, i) for i in items])
            except MemorydError:
                if ending is not None:
                    ending.undone = True
                slugs = [m.meta.slug for m in batch]
                try:
                    self.index.delete(slugs)
                finally:  # an index that cannot commit (`search.retries`) fails this too
                    self.graph.delete_memories(slugs)
                raise
        except MemorydError:
            for path in paths:
                self.vault.remove(path)
            self.journal.end(intent)  # undone: nothing is left to settle
            raise
        if ending is None:
            self.journal.end(intent)
        else:
            ending.done()
        if any(m.meta.observations or m.meta.relations for m in batch):
            # New entities are in the graph now: the next recall links queries to them.
            self.forget_entities()

    def _file_beside_graph(self, memory: Memory, paths: list[Path]) -> None:
        """One memory's file written and synced beside its graph statements (the disk's
        waits were a `record`'s longest); rendered here, so the thread only waits on the
        disk. The intent is durable first and recovery brings the graph to the vault, so
        crashes settle as before (the graph may hold the row a moment before its file)."""
        data = self.vault.file_bytes(memory)
        self._beside_graph([memory], lambda: paths.append(self.vault.write(memory, data=data)))

    def _write_bulk(self, batch: list[Memory], paths: list[Path]) -> None:
        """A bulk batch's files and index documents written beside its graph statements."""
        indexing = threading.Event()
        slugs = [m.meta.slug for m in batch]

        def files_and_index() -> None:
            # Threads, no per-file fsync (`bulkfiles`); one sync makes the batch durable.
            self.vault.write_many(batch, paths)
            self.vault.sync_all()
            indexing.set()
            self.index.upsert([search_doc(m) for m in batch], then=None)

        def undo_index() -> None:  # a write that failed may have left part of the batch
            if indexing.is_set():
                self.index.delete(slugs)

        self._beside_graph(batch, files_and_index, undo_index)

    def _beside_graph(
        self,
        batch: list[Memory],
        work: Callable[[], object],
        undo: Callable[[], None] | None = None,
    ) -> None:
        """`work` in a thread while the batch's graph statements and commit run on the
        caller's thread: the engine runs those outside the GIL and they are most of a
        write's time; the graph stays on the caller's thread (its connections and a
        background job's courtesy are per thread). Either side's failure runs `undo` and
        the other side's is undone here (the graph's rows deleted); the error is raised and
        the caller removes the files the work wrote."""
        failed: list[Exception] = []

        def beside_work() -> None:
            try:
                work()
            except Exception as exc:  # raised in the caller's thread, below
                failed.append(exc)

        beside = threading.Thread(target=beside_work, name="memoryd-beside-graph")
        beside.start()
        try:
            self.graph.upsert_memories(batch, new=True)
        except MemorydError:
            beside.join()
            if undo is not None:
                undo()
            raise
        finally:
            beside.join()
        if failed:
            try:
                if undo is not None:
                    undo()
            finally:
                self.graph.delete_memories([m.meta.slug for m in batch])
            raise failed[0]

    def _queue_sessions(self, memories: Sequence[Memory]) -> None:
        """Session memories recorded by hand (`memoryd record --type session`, MCP
        `remember`) or edited are scored on DURA like captured ones: queued for the
        enrichment worker once per content (`enqueue_enrichments` keeps a content it has)."""
        sessions = [m for m in memories if m.meta.type is MemoryType.SESSION]
        if len(sessions) > ENRICH_BULK_LIMIT:
            logger.info(
                "%d session memories imported: too many to score now; run"
                " `memoryd analyze-session SLUG` for those that matter",
                len(sessions),
            )
            return
        if not sessions:
            return
        try:
            self.governance.enqueue_enrichments(
                [(m.slug, content_fingerprint(m)) for m in sessions], utcnow()
            )
        except MemorydError as exc:  # the memory is written; `analyze-session` scores it
            logger.warning("session memories not queued for DURA scoring: %s", exc)
