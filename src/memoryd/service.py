"""MemoryService: the one facade the CLI, HTTP API, MCP server and notebooks call.

It is the only place that coordinates more than one store. The order of a write is fixed:
vault file (the source of truth) → graph → search index → audit line. If a later step fails,
the earlier ones are undone, so nothing is left half-written. A crash cannot undo anything, so
each write first records an intent in the journal (`memoryd.journal`) and `recover`, run when
the stores are opened, settles the writes a crash cut short.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import secrets
import shutil
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Self

from pydantic import ValidationError

from memoryd.audit import AuditEvent, AuditLog
from memoryd.enrichment import (
    EnrichmentJob,
    EnrichmentPolicy,
    LLMResult,
    content_fingerprint,
    run_llm_stage,
)
from memoryd.errors import (
    BrokenMemoryFile,
    Conflict,
    InvalidInput,
    MemorydError,
    NotFound,
    PolicyDenied,
    StorageError,
)
from memoryd.extraction.apply import ENTITY_TYPES, apply_extraction, merge_extractions
from memoryd.extraction.pipeline import Extractor, KnownEntity, load_hyponyms
from memoryd.governance.analyze import (
    AnalysisJob,
    AnalysisMode,
    Candidate,
    SessionText,
    refusal,
    retry_later,
    run_analysis,
    score_heuristic,
)
from memoryd.governance.promotions import Review, ReviewPolicy
from memoryd.governance.store import EnrichmentState, GovernanceStore, Proposed
from memoryd.graph.sandbox import CypherLimits, CypherSandbox
from memoryd.graph.store import (
    CypherResult,
    EntityContext,
    EntityRow,
    GraphStore,
    RelationRow,
    SupersedeRow,
)
from memoryd.journal import Intent, IntentItem, Journal, remove_temp_files
from memoryd.llm.base import LLMProvider
from memoryd.memfile import memory_lock, split_summary, with_summary
from memoryd.models import (
    CJK,
    AuditRecord,
    AuditVerification,
    DecayState,
    DuraAnalysis,
    EntityDeletion,
    Extraction,
    Frontmatter,
    Memory,
    MemoryDraft,
    MemorySummary,
    MemoryType,
    Predicate,
    Promotion,
    PromotionProposal,
    PromotionStatus,
    RecallHit,
    RecallResult,
    ReindexReport,
    RelationRef,
    ScopeInfo,
    SearchHit,
    check_query,
    describe_validation,
    entity_id,
    to_utc,
    utcnow,
)
from memoryd.protocol import MemoryAPI
from memoryd.recall import EntityMatcher, RecallConfig, RecallPipeline, VectorStage
from memoryd.redact import redact
from memoryd.scope import resolve_scope
from memoryd.search.index import SearchDoc, SearchIndex
from memoryd.vault import Vault, render

logger = logging.getLogger(__name__)

BULK_BATCH = 5000
MAX_BODY_CHARS = 1_000_000
FILE_LOCK_TIMEOUT_S = 5.0
"""How long the daemon waits for a memory file the hook is rewriting (milliseconds, usually)."""
GraphFactory = Callable[[Path], GraphStore]
CREATING_EVENTS = ("record", "capture", "adopt")
"""The audit events that bring a memory into the stores; `audit verify` wants one for each."""


_CJK_CHAR = re.compile(f"[{CJK}]")


def slugify(title: str, when: datetime) -> str:
    """`2026-05-18-use-solid-instead-of-react-3f9a1c`: date, readable words, a random tail.

    Latin letters lose their accents; kana, CJK ideographs and Hangul stay as they are
    (`2026-06-15-数据库迁移到-postgres-1c2297`): a slug should say what the memory is about."""
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


def search_doc(memory: Memory) -> SearchDoc:
    meta = memory.meta
    return SearchDoc(
        slug=meta.slug,
        scope_hash=meta.scope_hash,
        type=meta.type,
        decay_state=meta.decay_state,
        title=meta.title,
        body="" if memory.sensitive else memory.body,
        tags=meta.tags,
        triggers=meta.triggers,
        created_at=meta.created_at,
    )


class MemoryService(MemoryAPI):
    """Record, read, search and rebuild memories. Construct it with `wiring.open_service`."""

    def __init__(
        self,
        *,
        home: Path,
        vault: Vault,
        graph: GraphStore,
        index: SearchIndex,
        audit: AuditLog,
        governance: GovernanceStore,
        graph_factory: GraphFactory,
        actor: str = "cli",
        on_close: Callable[[], None] | None = None,
        extractor: Extractor | None = None,
        llm: LLMProvider | None = None,
        read_only: bool = False,
        enrichment: EnrichmentPolicy | None = None,
        cypher_limits: CypherLimits | None = None,
        review: ReviewPolicy | None = None,
    ) -> None:
        self.home = home
        self.read_only = read_only
        self.vault = vault
        self.graph = graph
        self.index = index
        self.audit = audit
        self.governance = governance
        self.journal = Journal(home)
        """Intents of writes under way; `recover` settles those a crash left."""
        self.actor = actor
        self._graph_factory = graph_factory
        self._on_close = on_close
        self.extractor = extractor
        self.llm = llm
        self.enrichment = enrichment or EnrichmentPolicy()
        self.vector_stage: VectorStage | None = None
        self.recall_config = RecallConfig()
        """The recall stages that run (`DEFAULT_STAGES`) and the relevance threshold."""
        self._matcher: EntityMatcher | None = None
        self._recall_pending: dict[str, tuple[int, datetime]] = {}
        """Recalls counted here but not yet in the graph: slug → (how many, last at)."""
        self._triggers_pending: Counter[tuple[str, str | None, date]] = Counter()
        """Trigger hits not yet in trigger_stats: (trigger, scope_hash, day) → hits."""
        self._recall_dirty: dict[str, tuple[int, datetime, DecayState]] = {}
        """Counts in the graph but not yet in the memory files."""
        self._merges: dict[str, str] | None = None
        self.entities_version = 0
        """Bumped whenever the entities may have changed (recall readers rebuild their matcher)."""
        self.index_epoch = 0
        """Bumped when `index` is replaced by another SearchIndex (reindex)."""
        self.cypher_limits = cypher_limits or CypherLimits()
        self._sandbox: CypherSandbox | None = None
        self._sandbox_lock = threading.Lock()
        self.review = Review(
            governance,
            review or ReviewPolicy(),
            write=self._record_in_scope,
            exists=self._memory_exists,
            audit=lambda event: self.audit.append_many([event]),
        )
        """The promotions queue and its decisions (`governance.promotions`)."""

    def close(self) -> None:
        try:
            if self._sandbox is not None:
                self._sandbox.close()
            try:
                self.flush_recall_stats()
            except MemorydError:
                logger.exception("could not save recall stats")
            for closer in (self.index.close, self.graph.close, self.governance.close):
                try:
                    closer()
                except MemorydError:
                    logger.exception("error while closing %s", closer)
        finally:
            if self._on_close is not None:
                self._on_close()
                self._on_close = None

    def __enter__(self) -> Self:
        return self

    def _require_writable(self, action: str) -> None:
        """Refuse a write before any store is touched: a read-only service (a notebook with
        no daemon) must leave the data dir exactly as it found it."""
        if self.read_only:
            raise PolicyDenied(
                f"cannot {action}: this memoryd service is read-only",
                hint="start `memoryd serve` and write through it (or the CLI)",
            )

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- scopes ---------------------------------------------------------------------------
    def scope_show(self, path: Path | str | None = None) -> ScopeInfo:
        """The scope a directory belongs to (git toplevel, else the directory itself)."""
        info = resolve_scope(path)
        stored = self.vault.read_scope(info.scope_hash)
        if stored is not None:
            info.sensitive = stored.sensitive
        return info

    def _ensure_scope(self, info: ScopeInfo) -> None:
        self.vault.write_scope(info)
        self.graph.upsert_scope(info.scope_hash, info.path, info.sensitive, info.aliases)

    def scope_hash_of(self, scope: Path | str | None) -> str | None:
        """A scope given as a path, or as a 12-hex scope hash already; None means all scopes."""
        if scope is None:
            return None
        text = str(scope)
        if re.fullmatch(r"[0-9a-f]{12}", text) and not Path(text).exists():
            return text
        return resolve_scope(scope, with_remote=False).scope_hash

    # -- writes ---------------------------------------------------------------------------
    def _prepare(self, draft: MemoryDraft, scope: ScopeInfo, now: datetime) -> Memory:
        # Every path that records a memory passes here: secrets and control characters
        # never reach the vault, the graph or the index.
        title = redact(draft.title).strip()
        if not title:
            raise InvalidInput("title is empty", hint="give the memory a short title with --title")
        body = redact(draft.body).strip()
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
                slug=draft.slug or slugify(title, created),
                type=draft.type,
                scope_hash=scope.scope_hash,
                source=draft.source,
                created_at=created,
                updated_at=None,
                tags=[redact(tag) for tag in draft.tags],
                triggers=[redact(trigger) for trigger in draft.triggers],
                category=redact(draft.category) if draft.category else draft.category,
                ttl_days=ttl,
                supersedes=draft.supersedes,
                promoted_from=draft.promoted_from,
            )
        except ValidationError as exc:
            raise InvalidInput(f"invalid memory: {describe_validation(exc.errors())}") from exc
        return Memory(meta=meta, body=body, sensitive=scope.sensitive)

    def _check_links(self, memory: Memory) -> None:
        for slug in (*memory.meta.supersedes, *(filter(None, [memory.meta.promoted_from]))):
            if self.graph.get_memory(slug) is None:
                raise NotFound(f"memory {slug} (named in supersedes/promoted_from) does not exist")

    def record(self, draft: MemoryDraft) -> Memory:
        """Write one memory: vault file, graph, search index and audit line, all durable."""
        return self.record_many([draft], bulk=False)[0]

    def record_many(self, drafts: Sequence[MemoryDraft], *, bulk: bool = True) -> list[Memory]:
        """The bulk path (import, benchmarks): batches graph and index writes, one fsync pass.

        Duplicates (same body in the same scope) are refused unless `allow_duplicate`.
        """
        self._require_writable("record memories")
        now = utcnow()
        scopes: dict[str, ScopeInfo] = {}
        memories: list[Memory] = []
        for draft in drafts:
            key = str(draft.scope_path or Path.cwd())
            if key not in scopes:
                scopes[key] = resolve_scope(draft.scope_path)
            memories.append(self._prepare(draft, scopes[key], now))
        self._refuse_duplicates(memories, drafts)
        if not bulk:
            for memory in memories:
                self._check_links(memory)
        self._extract(memories)
        for info in {s.scope_hash: s for s in scopes.values()}.values():
            self._ensure_scope(info)
        written: list[Memory] = []
        for batch in iter_batches(memories, BULK_BATCH):
            self._write_batch(batch, sync_each=not bulk)
            written.extend(batch)
        return written

    def _record_in_scope(self, draft: MemoryDraft, scope_hash: str) -> Memory:
        """Record one memory into a scope known by its hash (a promotion's), not by a path."""
        self._require_writable("record a memory")
        scope = self.vault.read_scope(scope_hash)
        if scope is None:
            raise NotFound(
                f"scope {scope_hash} has no scope.json in the vault",
                hint="run `memoryd reindex`, or record the memory from its project directory",
            )
        memory = self._prepare(draft, scope, utcnow())
        self._refuse_duplicates([memory], [draft])
        self._check_links(memory)
        self._extract([memory])
        self._ensure_scope(scope)
        self._write_batch([memory], sync_each=True)
        return memory

    def _memory_exists(self, slug: str) -> bool:
        """In the graph and on disk: what a PROMOTED_FROM or SUPERSEDES edge can point at."""
        row = self.graph.get_memory(slug)
        if row is None:
            return False
        return bool(row.path and Path(row.path).is_file()) or self.vault.find(slug) is not None

    def _known_entities(self) -> list[KnownEntity]:
        matcher = self._entity_matcher()
        return [
            KnownEntity(id=e.id, name=e.name, type=e.type, aliases=e.aliases)
            for e in matcher.entities.values()
            if e.type in ENTITY_TYPES
        ]

    def _extract(self, memories: Sequence[Memory]) -> None:
        """Fill observations and relations from the text (spaCy rules, then the LLM if set).

        Sensitive memories are never sent to an LLM. Results land in the frontmatter, so
        `reindex` rebuilds the same graph without extracting again.
        """
        if self.extractor is None or not memories:
            return
        known = self._known_entities()
        for memory in memories:
            if memory.sensitive:
                continue
            found = self.extractor.extract(memory.body, title=memory.meta.title, known=known)
            if self.llm is not None:
                from memoryd.llm.extract import extract_with_llm

                try:
                    refined = extract_with_llm(
                        self.llm,
                        f"{memory.meta.title}\n\n{memory.body}",
                        known_entities=[k.name for k in known],
                        spacy_hint=found,
                    )
                    found = merge_extractions(found, refined)
                except MemorydError as exc:
                    logger.warning("LLM extraction failed for %s: %s", memory.slug, exc)
            apply_extraction(memory, found, self._merged_into())

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

    def _write_batch(self, batch: list[Memory], *, sync_each: bool) -> None:
        """Write one batch; on failure undo what was written, newest step first.

        A write intent names the batch before its first step and is removed after its audit
        lines: a crash in between leaves it for `recover` to settle on the next start.
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
        intent = self._begin_write("record", items)
        paths: list[Path] = []
        try:
            if sync_each:
                for memory in batch:
                    paths.append(self.vault.write(memory))
            else:
                # File creation is syscall-bound and releases the GIL: a few threads triple
                # bulk throughput; one sync at the end makes the batch durable.
                with ThreadPoolExecutor(max_workers=4) as pool:
                    futures = [pool.submit(self.vault.write, m, sync=False) for m in batch]
                    for future in futures:
                        try:
                            paths.append(future.result())
                        except MemorydError:
                            for other in futures:
                                if other is not future and other.exception() is None:
                                    paths.append(other.result())
                            raise
                self.vault.sync_all()
            self.graph.upsert_memories(batch, new=True)
            try:
                self.index.upsert([search_doc(m) for m in batch])
                self.audit.append_many([self._intended_event(intent, i) for i in items])
            except MemorydError:
                slugs = [m.meta.slug for m in batch]
                self.index.delete(slugs)
                self.graph.delete_memories(slugs)
                raise
        except MemorydError:
            for path in paths:
                self.vault.remove(path)
            self.journal.end(intent)  # undone: nothing is left to settle
            raise
        self.journal.end(intent)
        if any(m.meta.observations or m.meta.relations for m in batch):
            # New entities are in the graph now: the next recall links queries to them.
            self.forget_entities()

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
        for intent in intents:
            logged = {
                (r.event_type, r.target_id) for r in self.audit.records_after(intent.audit_seq)
            }
            events: list[AuditEvent] = []
            for item in intent.items:
                if intent.op == "entity":
                    self._apply_entity_event(item)
                    outcome = "forward"
                else:
                    outcome = self._settle_item(intent.op, item)
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
            self.audit.append_many(events)
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

    def _settle_item(self, op: str, item: IntentItem) -> str:
        """Bring the graph and the search index to what the vault holds for one memory of an
        unfinished write: "forward" when the write's file landed, "back" when it did not."""
        path = Path(item.path)
        for written in {path, Path(item.old_path or item.path)}:
            remove_temp_files(written)  # an atomic write killed before its rename
        landed = self._landed(item)
        if landed is not None:
            if item.old_path and item.old_path != item.path:
                self.vault.remove(Path(item.old_path))  # the move finishes
            self._resync(item.slug, landed)
            return "forward"
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
        self._resync(item.slug, current)
        return "back"

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

    def _resync(self, slug: str, memory: Memory | None) -> None:
        """The graph and the search index hold `memory` for `slug` (None: nothing)."""
        if memory is None:
            self.index.delete([slug])
            self.graph.delete_memories([slug])
            return
        self.graph.upsert_memories([memory])
        self.index.upsert([search_doc(memory)])

    # -- reads ----------------------------------------------------------------------------
    def get(self, slug: str) -> Memory:
        """The memory with this slug, read from its vault file (the source of truth)."""
        row = self.graph.get_memory(slug)
        path = Path(row.path) if row is not None and row.path else self.vault.find(slug)
        if path is None:
            raise NotFound(f"no memory with slug {slug!r}", hint="`memoryd list` shows the slugs")
        memory = self.vault.read(path)
        if memory.meta.slug != slug:
            raise BrokenMemoryFile(
                f"{path}: its frontmatter says slug {memory.meta.slug!r}, expected {slug!r}"
            )
        return memory

    def list_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]:
        return self.graph.list_memories(
            scope_hash=self.scope_hash_of(scope),
            type=type,
            decay_state=state,
            limit=limit,
            offset=offset,
        )

    def count_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
    ) -> int:
        """How many memories `list_memories` would list without a limit."""
        return self.graph.count_memories(
            scope_hash=self.scope_hash_of(scope), type=type, decay_state=state
        )

    def search(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
    ) -> list[SearchHit]:
        """BM25 full text over title, body, tags and triggers (Chinese jieba-segmented)."""
        check_query(query)
        if k < 1:
            raise InvalidInput(f"k must be at least 1 (got {k})")
        scope_hash = self.scope_hash_of(scope)
        return self.index.search(
            query,
            scope_hashes=[scope_hash] if scope_hash else None,
            types=types,
            include_forgotten=include_forgotten,
            limit=k,
        )

    def entities(
        self, *, type: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[EntityRow]:
        return self.graph.list_entities(type=type, query=query, limit=limit)

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """A user's read-only Cypher, run in the sandbox (`memoryd.graph.sandbox`): a process
        with its own memory cap over a copy of the graph, so no query can take the writer's
        memory or change the engine's settings. memoryd's own queries use `graph.cypher`."""
        return self.cypher_sandbox().run(
            self.graph, query, params, limit=limit, timeout_ms=timeout_ms
        )

    def cypher_sandbox(self) -> CypherSandbox:
        """The sandbox for user Cypher, made on first use (a worker starts on first query)."""
        with self._sandbox_lock:
            if self._sandbox is None:
                # A read-only service (a notebook) leaves the data dir as it found it.
                workdir = None if self.read_only else self.home / "tmp"
                self._sandbox = CypherSandbox(workdir, self.cypher_limits)
            return self._sandbox

    # -- recall ---------------------------------------------------------------------------
    def forget_entities(self) -> None:
        """Drop what is cached about entities: the next recall rebuilds it from the graph."""
        self._matcher = None
        self.entities_version += 1

    def reopen_index(self) -> None:
        """Open the search index afresh (a recall reader after the daemon's reindex)."""
        directory = self.index.directory
        self.index.close()
        self.index = SearchIndex.open(directory)
        self.index_epoch += 1

    def _entity_matcher(self) -> EntityMatcher:
        """Built from the graph's entities once, rebuilt after writes that touch entities."""
        matcher = self._matcher
        if matcher is None:
            from memoryd.extraction.linking import normalise_name
            from memoryd.extraction.pipeline import load_lexicon, load_places

            catalogue = self.graph.entity_catalogue()
            ids = {e.id: e for e in catalogue}
            kinds: dict[str, str] = {}
            # The lexicon's aliases (Postgres → PostgreSQL, USA → United States) name graph
            # entities too, and its kinds (database, city) let a query ask for a kind.
            for entry in (*load_lexicon(), *load_places()):
                known = ids.get(entity_id(entry.type, entry.name))
                if known is None:
                    continue
                if entry.aliases:
                    known.aliases = [*known.aliases, *entry.aliases]
                if entry.kind:
                    kinds[known.id] = entry.kind
            matcher = EntityMatcher(catalogue, normalise_name, kinds)
            self._matcher = matcher
        return matcher

    def recall(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
        track: bool = True,
    ) -> RecallResult:
        """What memoryd knows about `query`: BM25 and entity traversal fused, then adjusted.

        Each hit explains itself (stages, matched terms, graph paths). With `track`, hits
        count as recalls: recall_count, last_recalled_at, trigger_stats, and a dim or
        soft-forgotten memory comes back to alive. A read-only service never tracks.
        """
        check_query(query)
        if k < 1:
            raise InvalidInput(f"k must be at least 1 (got {k})")
        pipeline = RecallPipeline(
            index=self.index,
            graph=self.graph,
            matcher=self._entity_matcher,
            config=self.recall_config,
            vector_stage=self.vector_stage,
        )
        outcome = pipeline.run(
            query,
            scope_hash=self.scope_hash_of(scope),
            types=types,
            k=k,
            include_forgotten=include_forgotten,
        )
        hits = outcome.hits
        if track and hits and not self.read_only:
            self._track_recalls([(hits, query)])
        return RecallResult(
            query=query, hits=hits, entities=outcome.entities, stages=outcome.stages
        )

    @staticmethod
    def prepare_recall() -> None:
        """Load the data every recall reads (the kinds of everyday things, `load_hyponyms`)
        now, so the first recall a daemon or reader answers is not the slow one."""
        load_hyponyms()

    # -- entities -------------------------------------------------------------------------
    def resolve_entity(self, name_or_id: str) -> EntityRow:
        """An entity by id (`entity:library:React`), name or alias."""
        entity = self.graph.get_entity(name_or_id)
        if entity is not None:
            return entity
        matcher = self._entity_matcher()
        from memoryd.extraction.linking import normalise_name

        ids = sorted(matcher.by_key.get(normalise_name(name_or_id), ()))
        ids = [self._merged_into().get(i, i) for i in ids]
        if not ids:
            raise NotFound(
                f"no entity named {name_or_id!r}", hint="`memoryd entity list` shows the entities"
            )
        found = [e for e in (self.graph.get_entity(i) for i in dict.fromkeys(ids)) if e]
        if len(found) > 1:
            raise InvalidInput(
                f"{name_or_id!r} names several entities: {', '.join(e.id for e in found)}",
                hint="pass the full entity id",
            )
        if not found:
            raise NotFound(f"no entity named {name_or_id!r}")
        return found[0]

    def entity_context(self, name_or_id: str, *, limit: int = 20) -> EntityContext:
        """An entity with its relations, neighbours and the memories about it, current first."""
        entity = self.resolve_entity(name_or_id)
        mentions = self.graph.mentioning([entity.id])
        rows = self.graph.memory_rows([slug for _, slug, _ in mentions])
        superseded = self.graph.superseded_by(list(rows))
        memories = sorted(
            rows.values(), key=lambda r: (r.slug in superseded, -r.created_at.timestamp())
        )[:limit]
        return EntityContext(
            entity=entity,
            relations=self.graph.neighbourhood(entity.id, depth=1).rows,
            memories=[
                MemorySummary(
                    slug=r.slug,
                    type=r.type,
                    title=r.title,
                    scope_hash=r.scope_hash,
                    source=r.source,
                    created_at=r.created_at,
                    updated_at=r.updated_at,
                    decay_state=r.decay_state,
                    tags=r.tags,
                    recall_count=r.recall_count,
                )
                for r in memories
            ],
            superseded=sorted(s for s in superseded if s in rows),
        )

    def neighbors(self, name_or_id: str, *, depth: int = 2) -> CypherResult:
        """Entities within `depth` hops of an entity (fan-out capped at hubs)."""
        if not 1 <= depth <= 3:
            raise InvalidInput(f"depth must be 1, 2 or 3 (got {depth})")
        return self.graph.neighbourhood(self.resolve_entity(name_or_id).id, depth=depth)

    def supersedes_chain(self, slug: str) -> list[SupersedeRow]:
        if self.graph.get_memory(slug) is None:
            raise NotFound(f"no memory with slug {slug!r}")
        return self.graph.supersedes_chain(slug)

    def alias_entity(self, name_or_id: str, alias: str) -> EntityRow:
        """Teach the graph another name for an entity; audit-logged so reindex replays it."""
        self._require_writable("add an entity alias")
        alias = alias.strip()
        if not alias:
            raise InvalidInput("alias is empty")
        entity = self.resolve_entity(name_or_id)
        self._entity_write("entity_alias", entity.id, {"alias": alias})
        self.forget_entities()
        return self.resolve_entity(entity.id)

    def merge_entities(self, keep: str, drop: str) -> EntityRow:
        """Merge `drop` into `keep`: edges move, the name becomes an alias; reindex replays it."""
        self._require_writable("merge entities")
        kept, dropped = self.resolve_entity(keep), self.resolve_entity(drop)
        if kept.id == dropped.id:
            raise InvalidInput(f"cannot merge {kept.id} into itself")
        self._entity_write("entity_merge", kept.id, {"drop": dropped.id})
        self.forget_entities()
        self._merges = None
        return self.resolve_entity(kept.id)

    def _merged_into(self) -> dict[str, str]:
        """dropped entity id → the id it was merged into (following chains)."""
        merges = self._merges
        if merges is None:
            merges = {}
            for rec in self.audit.read(event_type="entity_merge"):
                drop = json.loads(rec.details).get("drop")
                if drop and rec.target_id:
                    merges[drop] = rec.target_id
            for drop in list(merges):
                seen = {drop}
                while merges[drop] in merges and merges[drop] not in seen:
                    seen.add(merges[drop])
                    merges[drop] = merges[merges[drop]]
            self._merges = merges
        return merges

    def _entity_write(self, event_type: str, entity_id: str, details: dict[str, Any]) -> None:
        """A change to an entity (merge, alias, delete): the graph, then its audit line, which
        `reindex` replays. Under a write intent, so a crash between the two is rolled
        forward on the next start (`_apply_entity_event` is idempotent)."""
        item = IntentItem(slug=entity_id, path="", event_type=event_type, details=details)
        intent = self._begin_write("entity", [item])
        try:
            self._apply_entity_event(item)
        except MemorydError:
            self.journal.end(intent)  # one graph transaction: a failed one changed nothing
            raise
        self.audit.append_many([self._intended_event(intent, item)])
        self.journal.end(intent)

    def _apply_entity_event(self, item: IntentItem) -> None:
        """Make the graph hold an entity event; nothing when it already does."""
        target, details = item.slug, item.details
        if self.graph.get_entity(target) is None:
            return  # deleted, or merged away since
        if item.event_type == "entity_alias":
            self.graph.add_entity_aliases(target, [str(details["alias"])])
        elif item.event_type == "entity_merge":
            if self.graph.get_entity(str(details["drop"])) is not None:
                self.graph.merge_entities(target, str(details["drop"]))
        elif item.event_type == "entity_delete":
            self.graph.delete_entity(target)
        else:
            raise StorageError(f"the write journal names an unknown entity event {item.event_type}")

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

    def _track_recalls(self, recalls: Sequence[tuple[Sequence[RecallHit], str]]) -> None:
        """Count recalls (hits, query) in memory until `flush_recall_counts`: a graph write
        and a SQLite commit per recall would cost more than the recall. A decayed memory
        that is recalled comes back to alive at once. Memories archived since they were
        ranked are dropped by the flush."""
        now = utcnow()
        revived: list[str] = []
        for hits, query in recalls:
            lowered = query.lower()
            for hit in hits:
                before = self._recall_pending.get(hit.slug, (0, now))[0]
                self._recall_pending[hit.slug] = (before + 1, now)
                for trigger in hit.triggers:
                    if trigger.lower() in lowered:
                        self._triggers_pending[(trigger, hit.scope_hash, now.date())] += 1
                if hit.decay_state is not DecayState.ALIVE:
                    revived.append(hit.slug)
        if revived:
            # Only memories still in the graph: an archived one must not come back.
            self._reindex_search(list(self._write_recall_counts(revived)))

    def flush_recall_counts(self) -> int:
        """Add the recalls counted since the last flush to the graph and their trigger hits
        to trigger_stats; the files follow in `flush_recall_stats`.
        Returns how many memories were updated."""
        triggers, self._triggers_pending = self._triggers_pending, Counter()
        self.governance.add_trigger_hits(triggers)
        return len(self._write_recall_counts(None))

    def _write_recall_counts(self, slugs: Sequence[str] | None) -> dict[str, int]:
        """The pending counts of `slugs` (None: all) into the graph; the new counts of the
        memories it still holds."""
        if slugs is None:
            batch, self._recall_pending = self._recall_pending, {}
        else:
            batch = {s: self._recall_pending.pop(s) for s in slugs if s in self._recall_pending}
        counted = self.graph.record_recalls(batch)
        for slug, count in counted.items():
            self._recall_dirty[slug] = (count, batch[slug][1], DecayState.ALIVE)
        return counted

    def _reindex_search(self, slugs: Sequence[str]) -> None:
        """Refresh the search index entries of memories whose decay state changed."""
        docs = []
        rows = self.graph.memory_rows(slugs)
        for slug in slugs:
            row = rows.get(slug)
            path = Path(row.path) if row is not None and row.path else self.vault.find(slug)
            if path is None:
                continue
            try:
                memory = self.vault.read(path)
            except MemorydError as exc:  # recall must not fail on one hand-broken file
                logger.warning("search entry of %s not refreshed: %s", slug, exc)
                continue
            if slug in self._recall_dirty:
                count, at, state = self._recall_dirty[slug]
                memory.meta.recall_count, memory.meta.last_recalled_at = count, at
                memory.meta.decay_state = state
            docs.append(search_doc(memory))
        self.index.upsert(docs)

    def flush_recall_stats(self) -> int:
        """Write pending recall counts into the memory files, the source of truth.

        Recall only touches the graph on the hot path; the files are rewritten here (at
        close, and by the daemon periodically) so `reindex` keeps the counts.
        """
        self.flush_recall_counts()
        pending, self._recall_dirty = self._recall_dirty, {}
        rows = self.graph.memory_rows(list(pending)) if pending else {}
        for slug, (count, at, state) in pending.items():
            row = rows.get(slug)
            path = Path(row.path) if row is not None and row.path else self.vault.find(slug)
            if path is None:
                continue
            try:
                # Under the file lock: a re-capture of a session rewrites the same file.
                with self._file_lock(slug):
                    memory = self.vault.read(path)
                    memory.meta.recall_count = max(memory.meta.recall_count, count)
                    memory.meta.last_recalled_at = at
                    memory.meta.decay_state = state
                    self.vault.write(memory, sync=False)
            except StorageError as exc:  # kept for the next flush
                logger.warning("recall stats of %s not saved yet: %s", slug, exc)
                self._recall_dirty.setdefault(slug, (count, at, state))
            except MemorydError as exc:
                logger.warning("recall stats not saved for %s: %s", slug, exc)
        if pending:
            self.vault.sync_all()
        return len(pending)

    # -- audit ----------------------------------------------------------------------------
    def audit_records(
        self,
        *,
        scope: Path | str | None = None,
        since: datetime | None = None,
        event_type: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
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

        result = self.audit.verify()
        graph = self.graph.memory_slugs()
        held = graph | self._vault_slugs(graph)
        on_the_way = Inbox(self.home).requested_slugs() | self.journal.slugs_in_flight()
        logged = self.audit.targets(CREATING_EVENTS)
        missing = sorted(held - logged - on_the_way)
        if not missing:
            return result
        shown = ", ".join(missing[:10]) + (
            f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        )
        gap = (
            f"{len(missing)} memor{'y' if len(missing) == 1 else 'ies'} in the vault or graph "
            f"{'has' if len(missing) == 1 else 'have'} no record or capture line in the audit "
            f"log: {shown} (lines were deleted, or the log was replaced; restore audit/ from a "
            "backup, or run `memoryd reindex` to adopt memory files written by hand)"
        )
        return result.model_copy(
            update={
                "ok": False,
                "problem": gap if result.problem is None else f"{result.problem}; {gap}",
                "missing": missing,
            }
        )

    # -- rebuild --------------------------------------------------------------------------
    def iter_vault(
        self,
        warn: Callable[[str], None],
        *,
        on_copy: Callable[[Path, Path, str], None] | None = None,
    ) -> Iterator[Memory]:
        """Every readable memory in the vault, streamed; broken files are reported, skipped.

        A memory is its frontmatter slug, and its file is `<slug>.md`. A second file holding
        the same slug (a copy: `cp a.md b.md`) is skipped and reported, to `on_copy(copy,
        original, slug)` when given, else to `warn`; the file named after the slug is the
        original wherever the copy sorts. A lone file whose name differs from its slug (a
        renamed file) is indexed under its slug with a note.
        """
        seen: dict[str, Path] = {}

        def copied(path: Path, original: Path, slug: str) -> None:
            if on_copy is not None:
                on_copy(path, original, slug)
            else:
                warn(copy_message(path, original, slug))

        for path in self.vault.iter_files():
            try:
                memory = self.vault.read(path)
            except MemorydError as exc:
                warn(f"skipped {exc}")
                continue
            slug = memory.meta.slug
            if slug in seen:
                copied(path, seen[slug], slug)
                continue
            if path.stem != slug:
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
        for memory in self.iter_vault(lambda message: logger.warning("%s", message)):
            batch.append(memory)
            if len(batch) >= BULK_BATCH:
                self.index.upsert([search_doc(m) for m in batch])
                count, batch = count + len(batch), []
        if batch:
            self.index.upsert([search_doc(m) for m in batch])
        return count + len(batch)

    def load_vault(self, warn: Callable[[str], None]) -> list[Memory]:
        return list(self.iter_vault(warn))

    def reindex(self, warn: Callable[[str], None] | None = None) -> ReindexReport:
        """Rebuild the graph and the search index from the vault alone.

        Both are built beside the live ones and swapped in only when complete, so an
        interrupted reindex leaves the previous graph and index usable. The vault is
        streamed in batches, so memory stays flat however large it is.
        """
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
        indexed = 0
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
                for memory in self.iter_vault(note):
                    indexed_scopes[memory.meta.slug] = (memory.meta.scope_hash, memory.meta.type)
                    batch.append(memory)
                    if memory.meta.supersedes or memory.meta.promoted_from:
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
                for links in iter_batches(linked, BULK_BATCH):
                    fresh.link_memories(links)
                self._replay_entity_events(fresh)
            finally:
                fresh.close()
                fresh_index.close()
            self.index.close()
            index_closed = True
            _swap_dir(graph_new, graph_dir)
            _swap_dir(index_new, index_dir)
        finally:
            self.graph = self._graph_factory(graph_dir)
            if index_closed:
                self.index = SearchIndex.open(index_dir)
                self.index_epoch += 1
        self.forget_entities()
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

    def consistency(
        self, vault_slugs: set[str] | None = None
    ) -> tuple[set[str], set[str], set[str]]:
        """Slugs only in the vault, only in the graph, only in the search index.

        `vault_slugs` are the slugs the vault holds, when the caller has read them already.
        """
        graph = self.graph.memory_slugs()
        vault = self._vault_slugs(graph) if vault_slugs is None else vault_slugs
        index = self.index.slugs()
        return vault - graph, graph - vault, index ^ graph

    def _vault_slugs(self, known: set[str]) -> set[str]:
        """The slugs of the vault's memory files: a file named after a known slug holds it,
        any other is read for its frontmatter slug (copies and renamed files)."""
        slugs: set[str] = set()
        for path in self.vault.iter_files():
            if path.stem in known:
                slugs.add(path.stem)
                continue
            try:
                slugs.add(self.vault.read(path).meta.slug)
            except MemorydError:
                slugs.add(path.stem)  # broken: reported by the vault check
        return slugs

    # -- edits (HTTP PATCH and DELETE) ----------------------------------------------------
    def update_keywords(
        self,
        slug: str,
        tags: Sequence[str] | None = None,
        triggers: Sequence[str] | None = None,
    ) -> Memory:
        """Replace a memory's tags and/or triggers (None keeps them).

        The vault file is rewritten atomically first, then the graph, the search index and the
        audit log follow; if a later step fails the earlier ones are undone.
        """
        self._require_writable("update a memory")
        if tags is None and triggers is None:
            raise InvalidInput("nothing to update", hint="give new tags, triggers or both")
        with self._file_lock(slug):  # the capture hook rewrites session files too
            old = self.get(slug)
            changes: dict[str, Any] = {}
            if tags is not None:
                changes["tags"] = [redact(tag) for tag in tags]
            if triggers is not None:
                changes["triggers"] = [redact(trigger) for trigger in triggers]
            new = self._edited(old, changes, old.path)
            details = {f"{field}_count": len(value) for field, value in changes.items()}
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
            old = self.get(slug)
            assert old.path is not None  # read from a file
            target = self.vault.scope_dir(old.meta.scope_hash) / FORGOTTEN_DIR / old.path.name
            if old.meta.decay_state is DecayState.FORGOTTEN and old.path == target:
                return old
            new = self._edited(old, {"decay_state": DecayState.FORGOTTEN}, target)
            self._replace_everywhere(
                old, new, event_type="archive", details={"from": old.meta.decay_state.value}
            )
        return new

    def _edited(self, old: Memory, changes: dict[str, Any], path: Path | None) -> Memory:
        try:
            meta = Frontmatter.model_validate(
                {**old.meta.model_dump(), **changes, "updated_at": utcnow()}
            )
        except ValueError as exc:
            raise InvalidInput(f"invalid change to {old.slug}: {exc}") from exc
        return Memory(meta=meta, body=old.body, path=path, sensitive=old.sensitive)

    def _replace_everywhere(
        self, old: Memory, new: Memory, *, event_type: str, details: dict[str, Any]
    ) -> None:
        """Write `new` over `old` in the vault, graph, index and audit log, in that order,
        under a write intent (see `_write_batch`)."""
        if old.path is None or new.path is None:
            raise StorageError(f"memory {old.slug} has no file path")
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
            self.graph.upsert_memories([new])
            self.index.upsert([search_doc(new)])
            self.audit.append_many([self._intended_event(intent, intent.items[0])])
        except MemorydError:
            try:
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

    # -- enrichment (captured sessions: extraction and the LLM summary, afterwards) -------
    def enrich_pending(self, limit: int | None = None, *, use_llm: bool = True) -> int:
        """Enrich queued captured sessions in this thread; returns how many were processed.

        Each runs the spaCy rules and, with `use_llm` and a provider configured, the LLM
        stage (refined extraction and a `## Summary` section), then is written like any edit.
        Embedded commands pass `use_llm=False`: they run the rules and leave the LLM work
        pending for the daemon, whose worker runs the same steps with the LLM call outside
        its writer thread (`prepare_enrichment`, `run_llm_stage`, `apply_enrichment`).
        """
        self._require_writable("enrich captured sessions")
        done = 0
        for slug in self.enrichment_due(limit or 1_000_000, use_llm=use_llm):
            try:
                job = self.prepare_enrichment(slug, use_llm=use_llm)
                if job is None:
                    continue
                result = None
                if job.use_llm and self.llm is not None:
                    result = run_llm_stage(self.llm, job)
                self.apply_enrichment(job, result)
            except MemorydError as exc:  # one memory must not hold up the others
                logger.warning("enrichment of %s stays queued: %s", slug, exc)
                continue
            done += 1
        return done

    def enrichment_due(self, limit: int, *, use_llm: bool = True) -> list[str]:
        """Slugs of queued sessions due now, longest waiting first. Without the LLM stage
        (`use_llm=False` while a provider is configured) only those the rules have not seen:
        the rest wait for the daemon."""
        rules_only = self.llm is not None and not use_llm
        rows = self.governance.due_enrichments(utcnow(), limit, rules_only=rules_only)
        return [row.slug for row in rows]

    def enrichment_counts(self) -> dict[EnrichmentState, int]:
        """Queued sessions by state: pending, done, failed (for `doctor`)."""
        return self.governance.enrichment_counts()

    def prepare_enrichment(self, slug: str, *, use_llm: bool = True) -> EnrichmentJob | None:
        """Read a queued memory and run the spaCy rules on it; None when it is not pending.

        Writes nothing (the daemon runs it as a read). The job is about the content the file
        holds now, which `apply_enrichment` checks again before writing.
        """
        row = self.governance.enrichment(slug)
        if row is None or row.state != "pending":
            return None
        graph_row = self.graph.get_memory(slug)
        path = Path(graph_row.path) if graph_row and graph_row.path else self.vault.find(slug)
        if path is None or not path.is_file():
            path = self.vault.find(slug)
        if path is None:
            return EnrichmentJob(
                slug, row.fingerprint, skip="its file is gone", skip_state="failed"
            )
        try:
            memory = self.vault.read(path)
        except MemorydError as exc:
            return EnrichmentJob(slug, row.fingerprint, skip=exc.message, skip_state="failed")
        scope = self.vault.read_scope(memory.meta.scope_hash)
        if memory.sensitive or (scope is not None and scope.sensitive):
            # No extraction either: nothing of a sensitive memory leaves its file in plain text.
            return EnrichmentJob(slug, row.fingerprint, skip="its scope is sensitive")
        text = split_summary(memory.body)[1]
        known = self._known_entities() if self.extractor is not None else []
        rules = (
            self.extractor.extract(text, title=memory.meta.title, known=known)
            if self.extractor is not None
            else Extraction()
        )
        session, candidates = self._dura_input(memory, scope, rules)
        return EnrichmentJob(
            slug,
            content_fingerprint(memory),
            title=memory.meta.title,
            text=text,
            known=tuple(k.name for k in known),
            rules=rules,
            use_llm=use_llm and self.llm is not None,
            session=session,
            heuristic=score_heuristic(session, candidates) if session is not None else None,
            candidates=candidates,
        )

    def _dura_input(
        self, memory: Memory, scope: ScopeInfo | None, rules: Extraction
    ) -> tuple[SessionText | None, tuple[Candidate, ...]]:
        """What DURA scoring reads: the session without its summary, the entities extracted
        from it, and the scope's long-term memories that name them (supersede candidates).
        None when `analyze.refusal` says the memory may not be scored."""
        if refusal(memory, scope) is not None:
            return None, ()
        entities = tuple(dict.fromkeys(e.name for e in rules.entities))
        session = SessionText(
            slug=memory.slug,
            title=memory.meta.title,
            text=split_summary(memory.body)[1],
            fingerprint=content_fingerprint(memory),
            scope_hash=memory.meta.scope_hash,
            entities=entities,
        )
        query = " ".join(entities[:6])
        if not query:
            return session, ()
        hits = self.search(
            query,
            scope=memory.meta.scope_hash,
            types=[t for t in MemoryType if t.long_term],
            k=8,
        )
        return session, tuple(Candidate(h.slug, h.title) for h in hits if h.slug != memory.slug)

    def apply_enrichment(self, job: EnrichmentJob, result: LLMResult | None = None) -> str:
        """Write what a job found and settle its queue row; returns what happened.

        Under the memory's file lock (the hook takes it too) the file is read again: if its
        content is no longer the job's, nothing is written and the memory is queued again
        for the new content. Otherwise the proposals go into the frontmatter and the summary
        to the top of the body, then the graph, the search index and an `enrich` audit line
        follow, all undone if one fails. The rules' part is written even when the LLM failed;
        the row then stays pending (with a growing wait) until `max_attempts`, then `failed`.
        """
        self._require_writable("enrich a memory")
        now = utcnow()
        if job.skip is not None:
            logger.info("enrichment of %s skipped: %s", job.slug, job.skip)
            self._settle(job, job.skip_state, rules_done=True, attempts=0, error=job.skip)
            return job.skip_state
        with self._file_lock(job.slug):
            row = self.governance.enrichment(job.slug)
            path = self.vault.find(job.slug)
            if row is None or path is None:
                return "gone"
            old = self.vault.read(path)
            current = content_fingerprint(old)
            if current != job.fingerprint:
                self.governance.enqueue_enrichment(job.slug, current, now)
                logger.info("%s changed while it was enriched: queued again", job.slug)
                return "requeued"
            if row.fingerprint != job.fingerprint:
                # The file changed before it was drained: the job is about what it holds now.
                self.governance.enqueue_enrichment(job.slug, job.fingerprint, now)
                row = self.governance.enrichment(job.slug) or row
            self._write_enrichment(old, job, result, self._dura_of(job, result, row.attempts))
        if result is None:
            # The LLM stage did not run: done, unless a provider is configured (the daemon
            # runs it later; embedded commands only run the rules).
            state: EnrichmentState = "pending" if self.llm is not None else "done"
            self._settle(job, state, rules_done=True, attempts=row.attempts, error=None)
            return state
        if result.error is None:
            self._settle(job, "done", rules_done=True, attempts=row.attempts, error=None)
            return "done"
        attempts = row.attempts + 1
        failed = attempts >= self.enrichment.max_attempts
        error = f"{result.error.code}: {result.error.message}"
        logger.warning(
            "LLM enrichment of %s failed (attempt %d of %d): %s",
            job.slug,
            attempts,
            self.enrichment.max_attempts,
            error,
        )
        self._settle(
            job,
            "failed" if failed else "pending",
            rules_done=True,
            attempts=attempts,
            error=error,
            wait=self.enrichment.backoff(attempts),
        )
        return "failed" if failed else "retry"

    def _dura_of(
        self, job: EnrichmentJob, result: LLMResult | None, attempts: int
    ) -> PromotionProposal | None:
        """The DURA proposal to write: the LLM's; heuristic-v1's when no LLM is configured
        or when this was the LLM's last allowed attempt; None while the LLM is still owed."""
        if result is not None and result.dura is not None:
            return result.dura
        if self.llm is None:
            return job.heuristic
        last = result is not None and attempts + 1 >= self.enrichment.max_attempts
        return job.heuristic if last else None

    def _write_enrichment(
        self,
        old: Memory,
        job: EnrichmentJob,
        result: LLMResult | None,
        dura: PromotionProposal | None = None,
    ) -> None:
        """Proposals into the frontmatter, the summary atop the body, the DURA score; vault,
        graph, index, audit, then the promotion when the score reaches the threshold. Called
        under the file lock; a memory it would not change is left alone."""
        found = job.rules
        if result is not None and result.refined is not None:
            found = merge_extractions(found, result.refined)
        new = Memory(
            meta=old.meta.model_copy(deep=True),
            body=old.body,
            path=old.path,
            sensitive=old.sensitive,
        )
        apply_extraction(new, found, self._merged_into())
        if result is not None and result.summary_section:
            new.body = with_summary(result.summary_section, old.body)
        if dura is not None:
            new.meta.dura_score = dura.dura
        if (
            new.body == old.body
            and new.meta.observations == old.meta.observations
            and new.meta.relations == old.meta.relations
            and new.meta.dura_score == old.meta.dura_score
        ):
            if dura is not None:
                self._propose(dura)
            return
        new.meta.updated_at = utcnow()
        details: dict[str, Any] = {
            "stages": found.stages,
            "observations": len(new.meta.observations),
            "relations": len(new.meta.relations),
            "summary": new.body != old.body,
        }
        if job.use_llm and self.llm is not None:
            details["llm"] = f"{self.llm.name}/{self.llm.model}"
        if dura is not None:
            details["dura"] = {"mean": round(dura.dura.mean, 3), "by": dura.dura.by}
        self._replace_everywhere(old, new, event_type="enrich", details=details)
        self.forget_entities()  # new entities: the next recall links queries to them
        if dura is not None:
            self._propose(dura)

    def _propose(self, proposal: PromotionProposal) -> tuple[int, Proposed] | None:
        """Queue the promotion when the score reaches the threshold, after the score is in
        the file; a `propose` audit event names it. None: below the threshold."""
        queued = self.review.propose(proposal)
        if queued is None:
            return None
        promotion_id, what = queued
        if what != "decided":
            self.audit.append_many(
                [
                    AuditEvent(
                        actor=self.actor,
                        event_type="propose",
                        scope_hash=proposal.scope_hash,
                        target_id=proposal.source_slug,
                        details={
                            "promotion": promotion_id,
                            "queue": what,
                            "mean": round(proposal.dura.mean, 3),
                            "by": proposal.dura.by,
                        },
                    )
                ]
            )
        return queued

    # -- DURA scoring and the promotions queue (governance.analyze, .promotions) ----------
    def analyze_session(self, slug: str, *, mode: AnalysisMode = "auto") -> DuraAnalysis:
        """Score one session memory again (`memoryd analyze-session`): prepare, score (the
        LLM with `llm`, heuristic-v1 with `heuristic`, `auto`: the LLM when one is
        configured), write. The daemon runs the three steps apart (the LLM off its writer)."""
        job = self.prepare_analysis(slug, mode=mode)
        return self.apply_analysis(job, run_analysis(self.llm, job))

    def prepare_analysis(self, slug: str, *, mode: AnalysisMode = "auto") -> AnalysisJob:
        """Read the memory and everything scoring needs (a read)."""
        if mode == "llm" and self.llm is None:
            # The request is what cannot be met here (a 422, exit 2), not a broken config.
            raise InvalidInput(
                "--llm: no LLM is configured",
                hint="set provider under [llm] in config.toml, or score with --heuristic",
            )
        memory = self.get(slug)
        if memory.meta.type is not MemoryType.SESSION:
            raise InvalidInput(
                f"{slug} is a {memory.meta.type.value}: only session memories are scored",
                hint="`memoryd list --type session` lists them",
            )
        scope = self.vault.read_scope(memory.meta.scope_hash)
        rules = (
            self.extractor.extract(
                split_summary(memory.body)[1],
                title=memory.meta.title,
                known=self._known_entities(),
            )
            if self.extractor is not None
            else Extraction()
        )
        session, candidates = self._dura_input(memory, scope, rules)
        if session is None:
            raise PolicyDenied(f"{slug} is not scored: {refusal(memory, scope)}")
        return AnalysisJob(
            slug=slug,
            fingerprint=session.fingerprint,
            session=session,
            candidates=candidates,
            use_llm=mode == "llm" or (mode == "auto" and self.llm is not None),
            heuristic=score_heuristic(session, candidates),
        )

    def apply_analysis(
        self, job: AnalysisJob, outcome: PromotionProposal | MemorydError
    ) -> DuraAnalysis:
        """Write the score into the memory's frontmatter (an `analyze` audit event) and queue
        the promotion when its mean reaches the threshold. A failed LLM call leaves the
        memory queued with backoff, like enrichment, and is raised with when it is retried."""
        self._require_writable("score a session")
        if isinstance(outcome, MemorydError):
            raise retry_later(
                self.governance,
                job,
                outcome,
                max_attempts=self.enrichment.max_attempts,
                backoff=self.enrichment.backoff,
            )
        with self._file_lock(job.slug):
            old = self.get(job.slug)
            if content_fingerprint(old) != job.fingerprint:
                raise Conflict(
                    f"{job.slug} changed while it was scored; nothing was written",
                    hint="run `memoryd analyze-session` again",
                )
            if old.meta.dura_score != outcome.dura:
                new = self._edited(old, {"dura_score": outcome.dura}, old.path)
                details = {"mean": round(outcome.dura.mean, 3), "by": outcome.dura.by}
                self._replace_everywhere(old, new, event_type="analyze", details=details)
        queued = self._propose(outcome)
        return DuraAnalysis(
            slug=job.slug,
            dura=outcome.dura,
            threshold=self.review.policy.dura_threshold,
            proposal=outcome,
            promotion_id=queued[0] if queued else None,
            queue=queued[1] if queued else None,
        )

    def list_promotions(
        self,
        *,
        status: PromotionStatus | None = "pending",
        scope: Path | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        """The promotions queue, newest first, with its evidence (None status: all)."""
        return self.review.list(
            status=status, scope_hash=self.scope_hash_of(scope), limit=limit, offset=offset
        )

    def get_promotion(self, promotion_id: int) -> Promotion:
        return self.review.get(promotion_id)

    def promote(
        self,
        promotion_id: int,
        *,
        type: MemoryType | None = None,
        title: str | None = None,
        body: str | None = None,
        agent: bool = False,
    ) -> Promotion:
        """Approve: write the long-term memory (see `governance.promotions.Review.promote`)."""
        self._require_writable("promote a session memory")
        return self.review.promote(
            promotion_id, actor=self.actor, agent=agent, type=type, title=title, body=body
        )

    def reject(
        self, promotion_id: int, *, reason: str | None = None, agent: bool = False
    ) -> Promotion:
        """Reject a pending promotion; the reason is kept in the queue."""
        self._require_writable("reject a promotion")
        return self.review.reject(promotion_id, actor=self.actor, agent=agent, reason=reason)

    def _settle(
        self,
        job: EnrichmentJob,
        state: EnrichmentState,
        *,
        rules_done: bool,
        attempts: int,
        error: str | None,
        wait: float = 0.0,
    ) -> None:
        now = utcnow()
        recorded = self.governance.record_enrichment(
            job.slug,
            job.fingerprint,
            state=state,
            rules_done=rules_done,
            attempts=attempts,
            last_error=error,
            next_attempt_at=now + timedelta(seconds=wait),
            now=now,
        )
        if not recorded:
            logger.info("%s was queued again meanwhile: its new content is enriched next", job.slug)

    @contextlib.contextmanager
    def _file_lock(self, slug: str) -> Iterator[None]:
        """The memory file's lock, shared with the capture hook, as a bounded wait."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(memory_lock(self.home, slug, timeout_s=FILE_LOCK_TIMEOUT_S))
            except OSError as exc:  # TimeoutError included
                raise StorageError(
                    f"cannot lock the memory file of {slug}: {exc}",
                    hint="another process holds it; the work is retried later",
                ) from exc
            yield

    # -- for the daemon: reads on many threads, their writes on one ----------------------
    def count_recalls(self, results: Sequence[RecallResult]) -> None:
        """Count recalls made with `track=False` as `recall` would have counted them.

        The daemon ranks recalls concurrently on reader threads and counts them afterwards, in
        batches, on its single writer thread; each recall counts on top of the ones before.
        """
        self._require_writable("count recalls")
        self._track_recalls([(r.hits, r.query) for r in results if r.hits])

    def relations(
        self,
        *,
        entity: str | None = None,
        predicate: Predicate | None = None,
        include_closed: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RelationRow]:
        """RELATES edges, newest first: all, or those touching one entity (id, name or alias).

        Closed relations (`superseded_at` set) are history and only listed on request.
        """
        where = []
        params: dict[str, Any] = {"skip": offset, "take": limit}
        if entity is not None:
            where.append("(a.id = $entity OR b.id = $entity)")
            params["entity"] = self.resolve_entity(entity).id
        if predicate is not None:
            where.append("r.predicate = $predicate")
            params["predicate"] = predicate.value
        if not include_closed:
            where.append("r.superseded_at IS NULL")
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        result = self.graph.cypher(
            f"MATCH (a)-[r:RELATES]->(b) {clause} RETURN coalesce(a.id, a.slug), label(a),"
            " r.predicate, coalesce(b.id, b.slug), label(b), r.confidence, r.source_memory,"
            " r.created_at, r.valid_from, r.superseded_at, r.label"
            " ORDER BY r.created_at DESC, r.source_memory, r.predicate SKIP $skip LIMIT $take",
            params,
            limit=limit,
        )
        keys = list(RelationRow.model_fields)  # the RETURN order above
        rows = []
        for row in result.rows:
            data = dict(zip(keys, row, strict=True))
            data["subject_kind"] = str(data["subject_kind"]).lower()
            data["object_kind"] = str(data["object_kind"]).lower()
            rows.append(RelationRow.model_validate(data))
        return rows

    def entity_supersedes(self, name_or_id: str) -> list[SupersedeRow]:
        """The supersedes chain of an entity: SUPERSEDES edges decided about it, or between
        memories that mention it, oldest decision first."""
        eid = self.resolve_entity(name_or_id).id
        result = self.graph.cypher(
            "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory)"
            " OPTIONAL MATCH (n)-[:MENTIONS]->(en:Entity {id: $id})"
            " OPTIONAL MATCH (o)-[:MENTIONS]->(eo:Entity {id: $id})"
            " WITH n, r, o, en, eo WHERE r.entity_id = $id OR en IS NOT NULL OR eo IS NOT NULL"
            " RETURN DISTINCT n.slug, o.slug, r.entity_id, r.confidence, r.decided_at,"
            " r.decided_by, r.reason ORDER BY r.decided_at, n.slug, o.slug",
            {"id": eid},
            limit=10_000,
        )
        keys = list(SupersedeRow.model_fields)  # the RETURN order above
        return [SupersedeRow.model_validate(dict(zip(keys, r, strict=True))) for r in result.rows]

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
        Written and audit-logged like `record`."""
        self._require_writable("record graph facts")
        info = resolve_scope(draft.scope_path)
        memory = self._prepare(draft, info, utcnow())
        memory.meta.observations = list(dict.fromkeys(entity_ids))
        memory.meta.relations = list(relations)
        self._refuse_duplicates([memory], [draft])
        self._ensure_scope(info)
        self._write_batch([memory], sync_each=True)
        self.forget_entities()
        return memory

    def delete_entity(self, name_or_id: str) -> EntityDeletion:
        """Take an entity out of the graph; no memory is erased (memoryd keeps history).

        Every memory whose frontmatter names it (or an entity merged into it) is rewritten
        without it: the id leaves `observations`, the relations involving it leave
        `relations`. A `fact` that stated only things about it (its observations, or
        relations with it: what the MCP memory tools write) is archived as well. Then the node
        goes and an `entity_delete` audit line is written. The vault no longer names the
        entity, so `reindex` does not bring it back; a later memory naming it does.
        """
        entity = self.resolve_entity(name_or_id)
        ids = {entity.id} | {d for d, k in self._merged_into().items() if k == entity.id}
        rows = self.graph.cypher(
            "MATCH (m:Memory)-[:MENTIONS]->(:Entity {id: $id}) RETURN m.slug AS slug UNION"
            " MATCH (:Entity {id: $id})-[r:RELATES]-() RETURN r.source_memory AS slug",
            {"id": entity.id},
            limit=10_000_000,
        ).rows
        result = EntityDeletion(entity_id=entity.id, name=entity.name)
        for slug in sorted({r[0] for r in rows if r[0]}):
            with self._file_lock(slug):
                try:
                    old = self.get(slug)
                except (NotFound, BrokenMemoryFile) as exc:
                    logger.warning("%s keeps no link to %s in its file: %s", slug, entity.id, exc)
                    continue
                gone = [r for r in old.meta.relations if r.subject in ids or r.object in ids]
                observations = [o for o in old.meta.observations if o not in ids]
                if not gone and len(observations) == len(old.meta.observations):
                    continue
                relations = [r for r in old.meta.relations if r not in gone]
                ends = ids | {e for r in gone for e in (r.subject, r.object) if e}
                only_about = (
                    old.meta.type is MemoryType.FACT
                    and not relations
                    and set(old.meta.observations) <= ends
                )
                changes: dict[str, Any] = {"observations": observations, "relations": relations}
                path = old.path
                if only_about:
                    changes["decay_state"] = DecayState.FORGOTTEN
                    path = self._forgotten_path(old)
                    result.archived.append(slug)
                else:
                    result.unlinked.append(slug)
                self._replace_everywhere(
                    old,
                    self._edited(old, changes, path),
                    event_type="archive" if only_about else "update",
                    details={"entity_delete": entity.id},
                )
        self._entity_write(
            "entity_delete",
            entity.id,
            {
                "name": entity.name,
                "archived": len(result.archived),
                "unlinked": len(result.unlinked),
            },
        )
        self.forget_entities()
        return result

    def close_relations(self, slug: str, relations: Sequence[RelationRef]) -> Memory:
        """Close relations a memory asserts (memoryd closes relations, it never drops them):
        `superseded_at` is set in the frontmatter, so the graph keeps them as history and
        `reindex` rebuilds them closed. A relation matches on subject, predicate, object and
        label. A `fact` left with no open relation and naming only their endpoints existed to
        state them (the MCP `create_relations` writes such facts): it is archived as well.
        Closing relations that are closed already changes nothing.
        """
        if not relations:
            raise InvalidInput("no relation to close", hint="name at least one relation")
        with self._file_lock(slug):  # the capture hook rewrites session files too
            old = self.get(slug)
            merged = self._merged_into()

            def key(rel: RelationRef) -> tuple[str | None, str, str, str | None]:
                subject = merged.get(rel.subject, rel.subject) if rel.subject else None
                return subject, rel.predicate.value, merged.get(rel.object, rel.object), rel.label

            wanted = {key(r) for r in relations}
            if not any(key(r) in wanted for r in old.meta.relations):
                raise NotFound(
                    f"memory {slug} asserts none of these relations",
                    hint="GET /v1/relations?entity=NAME lists relations and their source memory",
                )
            now = utcnow()
            closed = [
                r.model_copy(update={"superseded_at": now})
                if key(r) in wanted and r.superseded_at is None
                else r
                for r in old.meta.relations
            ]
            count = sum(a is not b for a, b in zip(closed, old.meta.relations, strict=True))
            if not count:
                return old
            ends = {e for r in closed for e in (r.subject, r.object) if e}
            archive = (
                old.meta.type is MemoryType.FACT
                and all(r.superseded_at is not None for r in closed)
                and set(old.meta.observations) <= ends
            )
            changes: dict[str, Any] = {"relations": closed}
            path = old.path
            if archive:
                changes["decay_state"] = DecayState.FORGOTTEN
                path = self._forgotten_path(old)
            new = self._edited(old, changes, path)
            self._replace_everywhere(
                old,
                new,
                event_type="archive" if archive else "relation_close",
                details={"closed": count},
            )
            return new

    def _forgotten_path(self, memory: Memory) -> Path:
        """Where `archive` moves a memory's file."""
        from memoryd.vault import FORGOTTEN_DIR

        if memory.path is None:
            raise StorageError(f"memory {memory.slug} has no file path")
        return self.vault.scope_dir(memory.meta.scope_hash) / FORGOTTEN_DIR / memory.path.name


def copy_message(copy: Path, original: Path, slug: str) -> str:
    """What to say about a second file holding a memory's slug, and what to do about it."""
    return (
        f"skipped {copy}: it holds slug {slug}, which {original} holds (a copied file); "
        f"delete {copy.name}, or give it its own slug and a file name to match"
    )


def _swap_dir(new: Path, live: Path) -> None:
    """Put a rebuilt directory in place of the live one (rename is atomic per step)."""
    old = live.with_name(live.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        live.rename(old)
    new.rename(live)
    shutil.rmtree(old, ignore_errors=True)


def iter_batches(items: list[Memory], size: int) -> Iterable[list[Memory]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
