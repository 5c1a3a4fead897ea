"""Writing memories: record (one, many, with graph facts), edit keywords, archive, and
settle the writes a crash cut short (`recover`)."""

from __future__ import annotations

import bisect
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memoryd.audit import AuditEvent
from memoryd.domain.core import (
    BULK_BATCH,
    ServiceCore,
    iter_batches,
)
from memoryd.errors import (
    BrokenMemoryFile,
    InvalidInput,
    MissingKey,
    NotFound,
    StorageError,
)
from memoryd.extraction.linking import KnownEntity
from memoryd.governance.decay import decay_moves
from memoryd.journal import IntentItem, remove_temp_files
from memoryd.models import (
    DecayState,
    GraphFact,
    Memory,
    MemoryDraft,
    Recorded,
    RelationRef,
    ScopeInfo,
    utcnow,
)
from memoryd.native import fewer_collections
from memoryd.redact.fields import one_batch
from memoryd.scope import resolve_scope
from memoryd.vault import fsync_dir, storage_error

logger = logging.getLogger(__name__)


class Ingest(ServiceCore):
    """Writes of new and edited memories."""

    judge_batch_unwritten: Callable[
        ..., tuple[list[Memory], list[tuple[str, str, dict[str, Any]]]] | None
    ]
    """Provided by `domain.superseding_batch.BatchJudging`."""

    def record(self, draft: MemoryDraft) -> Memory:
        """Write one memory: vault file, graph, search index and audit line, all durable.

        With fewer cyclic-GC passes: a full collection walks every object the service holds,
        so its cost grows with the scope, and the allocations of a record triggered one
        every few records."""
        with fewer_collections():
            return self.record_many([draft], bulk=False)[0]

    def record_many(self, drafts: Sequence[MemoryDraft], *, bulk: bool = True) -> list[Memory]:
        """The bulk path (import, benchmarks): batches graph and index writes, one fsync pass.

        Duplicates (same body in the same scope) are refused unless `allow_duplicate`.
        """
        self._require_writable("record memories")
        now = utcnow()
        scopes: dict[str, ScopeInfo] = {}
        memories: list[Memory] = []
        # A tag, source or entity id every draft repeats is redacted once: as the drafts are
        # prepared, and as extraction's entity names and relation labels are cleaned. With
        # fewer cyclic-GC passes: preparing and extracting allocate as much as the write.
        with fewer_collections(), one_batch():
            for draft in drafts:
                key = str(draft.scope_path or Path.cwd())
                if key not in scopes:
                    scopes[key] = resolve_scope(draft.scope_path)
                memories.append(self._prepare(draft, scopes[key], now))
            self._draw_free_slugs(memories, drafts)
            self._refuse_duplicates(memories, drafts)
            if not bulk:
                for memory in memories:
                    self._check_links(memory)
            batches = list(iter_batches(memories, BULK_BATCH))
            # More than one bulk batch: the worker extracts each batch after the first while
            # the one before it is written (`_write_extracting`), all against the entities
            # known now.
            ahead = bulk and len(batches) > 1 and self.extractor is not None
            known = self._known_entities() if ahead else None
            self._extract(batches[0] if ahead else memories, known, prepared=True)
        for info in {s.scope_hash: s for s in scopes.values()}.values():
            self._ensure_scope(info)
        if not bulk and len(memories) == 1:
            judged = self.judge_unwritten(memories[0])
            if judged is not None:  # its decisions are written with it
                memory, details = judged
                events = [(memory.slug, "supersede", details)] if details else []
                before = self.graph.recall_generation
                self._write_batch([memory], sync_each=True, events=events)
                self.judged_mentions.wrote(self.graph, memory, before)
                self._queue_sessions([memory])
                return [memory]
        elif len(memories) <= BULK_BATCH:  # one write: judged first, decisions written with it
            judged_batch = self.judge_batch_unwritten(memories, use_llm=not bulk)
            if judged_batch is not None:
                memories, events = judged_batch
                before = self.graph.recall_generation
                with fewer_collections():
                    self._write_batch(memories, sync_each=not bulk, events=events)
                self.judged_mentions.wrote_many(self.graph, memories, before)
                self._queue_sessions(memories)
                if events:
                    logger.info(
                        "%d memories recorded; %d of them supersede older ones",
                        len(memories),
                        len(events),
                    )
                return memories
        written: list[Memory] = []
        with fewer_collections():
            for number, batch in enumerate(batches, 1):
                if ahead and number < len(batches):
                    self._write_extracting(batch, batches[number], known)
                else:
                    self._write_batch(batch, sync_each=not bulk)
                written.extend(batch)
        self._queue_sessions(written)
        superseded = self._judge_written(written, use_llm=not bulk)
        if superseded:
            logger.info("%d memories recorded; they supersede %d", len(written), len(superseded))
            # The result shows the decisions judging wrote into the new memories' files.
            changed = {newer for newer, _ in superseded}
            written = [self._load(m.slug) if m.slug in changed else m for m in written]
        return written

    def _write_extracting(
        self, batch: list[Memory], following: list[Memory], known: list[KnownEntity] | None
    ) -> None:
        """Write a bulk batch while the worker process extracts the next one; this process
        joins that extraction once the write is done (extracting beside the write here
        slowed it more than it gained: the write's threads and the extraction share the
        GIL). Both end before this returns; the write's error comes first. An extraction
        that fails leaves the batches before it written, as a later failed write does."""
        failed: list[BaseException] = []
        written = threading.Event()

        def extract() -> None:
            try:
                with one_batch():
                    self._extract(following, known, written, prepared=True)
            except BaseException as exc:  # raised in the caller's thread, below
                failed.append(exc)

        beside = threading.Thread(target=extract, name="memoryd-extract-ahead")
        beside.start()
        try:
            self._write_batch(batch, sync_each=False)
        finally:
            written.set()
            beside.join()
        if failed:
            raise failed[0]

    # -- graph facts (the MCP memory-server tools) ----------------------------------------
    def record_graph_facts(
        self,
        draft: MemoryDraft,
        *,
        entity_ids: Sequence[str],
        relations: Sequence[RelationRef] = (),
    ) -> Memory:
        """Record a memory that states graph facts: its frontmatter names the entities it is
        about (`observations`) and the relations it asserts, so `reindex` rebuilds them.
        Written and audit-logged like `record`. Entity ids and relation labels come from
        agents (MCP create_entities, imports), so they are redacted like titles and bodies."""
        fact = GraphFact(draft=draft, entity_ids=list(entity_ids), relations=list(relations))
        return self._record_graph_facts([fact], sync_each=True)[0]

    def record_graph_facts_many(self, facts: Sequence[GraphFact]) -> list[Memory]:
        """`record_graph_facts` for many (`import mcp-memory`): every fact prepared and
        checked first, then written `BULK_BATCH` at a time with one fsync pass each."""
        return self._record_graph_facts(facts, sync_each=False)

    def record_graph_facts_brief(self, facts: Sequence[GraphFact]) -> list[Recorded]:
        """`record_graph_facts_many`, answering only slugs, scopes and supersedes."""
        return [Recorded.of(m) for m in self._record_graph_facts(facts, sync_each=False)]

    def _record_graph_facts(self, facts: Sequence[GraphFact], *, sync_each: bool) -> list[Memory]:
        self._require_writable("record graph facts")
        now = utcnow()
        scopes: dict[str, ScopeInfo] = {}
        memories: list[Memory] = []
        with one_batch():  # tags, source and entity ids the facts repeat: redacted once
            for fact in facts:
                key = str(fact.draft.scope_path or Path.cwd())
                if key not in scopes:
                    scopes[key] = resolve_scope(fact.draft.scope_path)
                memories.append(
                    self._prepare(
                        fact.draft,
                        scopes[key],
                        now,
                        observations=fact.entity_ids,
                        relations=fact.relations,
                    )
                )
        self._draw_free_slugs(memories, [fact.draft for fact in facts])
        self._refuse_duplicates(memories, [fact.draft for fact in facts])
        for info in {s.scope_hash: s for s in scopes.values()}.values():
            self._ensure_scope(info)
        with fewer_collections():
            for batch in iter_batches(memories, BULK_BATCH):
                self._write_batch(batch, sync_each=sync_each)
        self.forget_entities()
        # Judged as `record` and `record_many` judge (`import mcp-memory` too): the result
        # shows the decisions written.
        superseded = self._judge_written(memories, use_llm=sync_each)
        if superseded:
            changed = {newer for newer, _ in superseded}
            memories = [self._load(m.slug) if m.slug in changed else m for m in memories]
        return memories

    # -- edits (HTTP PATCH and DELETE) ----------------------------------------------------
    def update_keywords(
        self,
        slug: str,
        tags: Sequence[str] | None = None,
        triggers: Sequence[str] | None = None,
        *,
        title: str | None = None,
    ) -> Memory:
        """Replace a memory's title, tags and/or triggers (None keeps them; the slug stays).

        The vault file is rewritten atomically first, then the graph, the search index and the
        audit log follow; if a later step fails the earlier ones are undone.
        """
        self._require_writable("update a memory")
        if tags is None and triggers is None and title is None:
            raise InvalidInput("nothing to update", hint="give a new title, tags, triggers or all")
        with self._file_lock(slug):  # the capture hook rewrites session files too
            old = self._load(slug)
            # It answers with the memory's text: a sensitive one needs a grant, as a get does.
            self.gate.require(old.meta.scope_hash, slug, "update")
            changes: dict[str, Any] = {}
            if tags is not None:
                changes["tags"] = list(tags)
            if triggers is not None:
                changes["triggers"] = list(triggers)
            details: dict[str, Any] = {
                f"{field}_count": len(value) for field, value in changes.items()
            }
            if title is not None:
                changes["title"] = title
                details["title_changed"] = title != old.meta.title
            new = self._edited(old, changes, old.path)  # redacted as it is written
            self._replace_everywhere(old, new, event_type="update", details=details)
        return new

    def archive(self, slug: str) -> Memory:
        """Forget a memory but keep it: the file moves to `scopes/<hash>/forgotten/`, its
        decay_state becomes forgotten, and search and list hide it unless asked for.

        Archiving an archived memory changes nothing and returns it.
        """
        from memoryd.vault import FORGOTTEN_DIR

        self._require_writable("archive a memory")
        with self._file_lock(slug):
            old = self._load(slug)
            # It answers with the memory's text: a sensitive one needs a grant, as a get does.
            self.gate.require(old.meta.scope_hash, slug, "update")
            assert old.path is not None  # read from a file
            target = self.vault.scope_dir(old.meta.scope_hash) / FORGOTTEN_DIR / old.path.name
            if old.meta.decay_state is DecayState.FORGOTTEN and old.path == target:
                return old
            new = self._edited(old, {"decay_state": DecayState.FORGOTTEN}, target)
            self._replace_everywhere(
                old, new, event_type="archive", details={"from": old.meta.decay_state.value}
            )
        return new

    # -- recovery (on start: writes a crash cut short) ------------------------------------
    def recover(self) -> int:
        """Settle every write a crash left unfinished; returns how many memories it settled.

        Each intent left in the journal is a write that stopped somewhere between its vault
        file and its audit line. The vault is the source of truth: a file that landed is
        rolled forward (graph and search index brought to it, a move finished, its audit
        event written), one that did not is rolled back (graph and index brought back to
        what the vault holds). Each settled memory gets a `recover` audit line saying which;
        a write found complete (only its intent was left) gets none. Safe to run twice: a
        crash during recovery is settled by the next.
        """
        self._require_writable("recover unfinished writes")
        intents = self.journal.pending()
        if not intents:
            return 0
        self.audit.repair_torn_tail()
        settled = 0
        # The audit log after the oldest intent is read once (a decay sweep leaves dozens of
        # intents begun at the same seq), then only what each settled intent appends.
        records = self.audit.records_after(min(i.audit_seq for i in intents))
        seqs = [r.seq for r in records]
        for intent in intents:
            after = records[bisect.bisect_right(seqs, intent.audit_seq) :]
            logged = {(r.event_type, r.target_id) for r in after}
            # A sweep's `decay` events list their moves (`memoryd.governance.decay`).
            logged |= {("decay", slug) for slug, _ in decay_moves(after)}
            events: list[AuditEvent] = []
            remove_temp_files(
                [Path(p) for item in intent.items for p in {item.path, item.old_path} if p]
            )
            resync: dict[str, Memory | None] = {}
            for item in intent.items:
                if intent.op == "entity":
                    self._apply_entity_event(item)
                    outcome = "forward"
                elif intent.op == "decay":
                    outcome = self._settle_decay(item, resync)
                else:
                    outcome, resync[item.slug] = self._settle_item(intent.op, item)
                done = (item.event_type, item.slug) in logged
                if outcome == "forward" and done:
                    continue  # complete: only the intent was left behind
                if outcome == "forward":
                    events.append(self._intended_event(intent, item, recovered=True))
                if ("recover", item.slug) not in logged:
                    events.append(
                        AuditEvent(
                            actor=self.actor,
                            event_type="recover",
                            scope_hash=item.scope_hash,
                            target_id=item.slug,
                            details={
                                "op": intent.op,
                                "event": item.event_type,
                                "outcome": "rolled forward"
                                if outcome == "forward"
                                else "rolled back",
                                "intent": intent.id,
                            },
                        )
                    )
                settled += 1
            self._resync_many(resync)
            self.audit.append_many(events)
            appended = self.audit.records_after(seqs[-1] if seqs else intent.audit_seq)
            records.extend(appended)
            seqs.extend(r.seq for r in appended)
            self.journal.end(intent)
            logger.warning(
                "settled an unfinished %s of %d memor%s left by a crash: %s",
                intent.op,
                len(intent.items),
                "y" if len(intent.items) == 1 else "ies",
                ", ".join(i.slug for i in intent.items[:5]),
            )
        self.forget_entities()
        self._merges = None
        return settled

    def _settle_item(self, op: str, item: IntentItem) -> tuple[str, Memory | None]:
        """What the graph and the search index must hold for one memory of an unfinished
        write (the caller writes it, for the whole intent at once): "forward" when the
        write's file landed, "back" when it did not. Its temp files are gone already."""
        path = Path(item.path)
        landed = self._landed(item)
        if landed is not None:
            if item.old_path and item.old_path != item.path:
                self.vault.remove(Path(item.old_path))  # the move finishes
            # A memory the decay sweep forgot is held by neither graph nor index.
            return "forward", None if landed.meta.forgotten_at else landed
        current: Memory | None = None
        if op == "replace":
            old = Path(item.old_path or item.path)
            try:
                current = self.vault.read(old)
            except (NotFound, BrokenMemoryFile) as exc:
                logger.warning(
                    "%s: the file before the unfinished write is gone: %s", item.slug, exc
                )
        elif op == "record" and path.exists():
            self.vault.remove(path)  # cut short before its fsync (a power cut): not a memory
        return "back", current

    def _settle_decay(self, item: IntentItem, resync: dict[str, Memory | None]) -> str:
        """One memory of an unfinished decay sweep: "forward" when its ledger line landed
        (a rename it did not reach is finished), "back" when it did not (the sweep wrote
        nothing else of it). Graph and index are brought to what the vault then says; a
        sensitive memory whose key is not here gets its state in the graph directly (its
        skeleton holds nothing else the sweep changes, and the index nothing of it)."""
        entry = self.vault.decay_ledger(item.scope_hash or "").get(item.slug)
        landed = (
            entry is not None
            and entry.to_state.value == item.details.get("to")
            and entry.at == item.details.get("at")
        )
        path = Path(item.path)
        old = Path(item.old_path) if item.old_path else path
        if landed and old != path and old.exists() and not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    old.rename(path)
                except FileNotFoundError:
                    if not path.exists():
                        raise
                    # The sweep's renamer, outliving its killed parent, moved it meanwhile.
                fsync_dir(path.parent)
                fsync_dir(old.parent)
            except OSError as exc:
                raise storage_error(exc, path, "moving") from exc
        where = path if path.exists() else old
        try:
            memory = self.vault.read(where)
        except MissingKey:
            state = DecayState(item.details["to"] if landed else item.details["from"])
            if state is DecayState.FORGOTTEN:
                resync[item.slug] = None
            else:
                self.graph.set_decay_states({item.slug: state})
            return "forward" if landed else "back"
        except (NotFound, BrokenMemoryFile) as exc:
            logger.warning("unfinished decay of %s: %s", item.slug, exc)
            return "forward" if landed else "back"
        resync[item.slug] = None if memory.meta.forgotten_at is not None else memory
        return "forward" if landed else "back"

    def _landed(self, item: IntentItem) -> Memory | None:
        """The memory as the unfinished write meant it, when its file holds that."""
        path = Path(item.path)
        try:
            if item.sha256 is not None:
                raw = path.read_bytes()
                if hashlib.sha256(raw).hexdigest() != item.sha256:
                    return None
            memory = self.vault.read(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror}") from exc
        except (NotFound, BrokenMemoryFile) as exc:
            logger.warning("unfinished write of %s: %s", item.slug, exc)
            return None
        return memory if memory.meta.slug == item.slug else None
