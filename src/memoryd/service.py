"""MemoryService: the one facade the CLI, HTTP API, MCP server and notebooks call.

It is the only place that coordinates more than one store. The order of a write is fixed:
vault file (the source of truth) → graph → search index → audit line. If a later step fails,
the earlier ones are undone, so nothing is left half-written.
"""

from __future__ import annotations

import logging
import re
import secrets
import shutil
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.audit import AuditEvent, AuditLog
from memoryd.errors import (
    BrokenMemoryFile,
    Conflict,
    InvalidInput,
    MemorydError,
    NotFound,
)
from memoryd.governance.store import GovernanceStore
from memoryd.graph.store import CypherResult, EntityRow, GraphStore
from memoryd.models import (
    AuditRecord,
    AuditVerification,
    DecayState,
    Frontmatter,
    Memory,
    MemoryDraft,
    MemorySummary,
    MemoryType,
    ReindexReport,
    ScopeInfo,
    SearchHit,
    to_utc,
    utcnow,
)
from memoryd.scope import resolve_scope
from memoryd.search.index import SearchDoc, SearchIndex
from memoryd.vault import Vault

logger = logging.getLogger(__name__)

BULK_BATCH = 5000
MAX_BODY_CHARS = 1_000_000
GraphFactory = Callable[[Path], GraphStore]


def slugify(title: str, when: datetime) -> str:
    """`2026-05-18-use-solid-instead-of-react-3f9a1c`: date, readable words, a random tail."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_title.lower())
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


class MemoryService:
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
    ) -> None:
        self.home = home
        self.vault = vault
        self.graph = graph
        self.index = index
        self.audit = audit
        self.governance = governance
        self.actor = actor
        self._graph_factory = graph_factory
        self._on_close = on_close

    def close(self) -> None:
        try:
            for closer in (self.index.close, self.graph.close, self.governance.close):
                try:
                    closer()
                except MemorydError:
                    logger.exception("error while closing %s", closer)
        finally:
            if self._on_close is not None:
                self._on_close()
                self._on_close = None

    def __enter__(self) -> MemoryService:
        return self

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
        title = draft.title.strip()
        if not title:
            raise InvalidInput("title is empty", hint="give the memory a short title with --title")
        body = draft.body.strip()
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
                slug=slugify(title, created),
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
            )
        except ValueError as exc:
            raise InvalidInput(f"invalid memory: {exc}") from exc
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
        for info in {s.scope_hash: s for s in scopes.values()}.values():
            self._ensure_scope(info)
        written: list[Memory] = []
        for batch in iter_batches(memories, BULK_BATCH):
            self._write_batch(batch, sync_each=not bulk)
            written.extend(batch)
        return written

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
        """Write one batch; on failure undo what was written, newest step first."""
        paths: list[Path] = []
        try:
            for memory in batch:
                memory.path = self.vault.path_for(memory)
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
                self.audit.append_many(
                    [
                        AuditEvent(
                            actor=self.actor,
                            event_type="record",
                            scope_hash=m.meta.scope_hash,
                            target_id=m.meta.slug,
                            details={"type": m.meta.type.value, "source": m.meta.source},
                        )
                        for m in batch
                    ]
                )
            except MemorydError:
                slugs = [m.meta.slug for m in batch]
                self.index.delete(slugs)
                self.graph.delete_memories(slugs)
                raise
        except MemorydError:
            for path in paths:
                self.vault.remove(path)
            raise

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
        self, query: str, params: dict[str, Any] | None = None, *, limit: int = 1000
    ) -> CypherResult:
        """Read-only Cypher over the graph; write clauses are refused."""
        return self.graph.cypher(query, params, limit=limit)

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
        return self.audit.verify()

    # -- rebuild --------------------------------------------------------------------------
    def iter_vault(self, warn: Callable[[str], None]) -> Iterator[Memory]:
        """Every readable memory in the vault, streamed; broken files are reported, skipped."""
        seen: dict[str, Path] = {}
        for path in self.vault.iter_files():
            try:
                memory = self.vault.read(path)
            except MemorydError as exc:
                warn(f"skipped {exc}")
                continue
            slug = memory.meta.slug
            if slug in seen:
                warn(f"skipped {path}: slug {slug} is already used by {seen[slug]}")
                continue
            if path.stem != slug:
                warn(f"note: {path} holds slug {slug} (file name differs)")
            seen[slug] = path
            yield memory

    def load_vault(self, warn: Callable[[str], None]) -> list[Memory]:
        return list(self.iter_vault(warn))

    def reindex(self, warn: Callable[[str], None] | None = None) -> ReindexReport:
        """Rebuild the graph and the search index from the vault alone.

        Both are built beside the live ones and swapped in only when complete, so an
        interrupted reindex leaves the previous graph and index usable. The vault is
        streamed in batches, so memory stays flat however large it is.
        """
        started = time.perf_counter()
        skipped: list[str] = []

        def note(message: str) -> None:
            skipped.append(message)
            logger.warning("%s", message)
            if warn is not None:
                warn(message)

        graph_dir, index_dir = self.home / "graph", self.index.directory
        graph_new, index_new = self.home / "graph.rebuild", self.home / "search.rebuild"
        for stale in (graph_new, index_new):
            shutil.rmtree(stale, ignore_errors=True)
        # Only one engine buffer pool at a time: the live graph closes while the new one builds.
        self.graph.close()
        indexed = 0
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
        self.audit.append(
            actor=self.actor,
            event_type="reindex",
            scope_hash=None,
            target_id=None,
            details={"indexed": indexed, "skipped": len(skipped)},
        )
        return ReindexReport(indexed=indexed, skipped=skipped, seconds=time.perf_counter() - started)

    def consistency(self) -> tuple[set[str], set[str], set[str]]:
        """Slugs only in the vault, only in the graph, only in the search index."""
        vault = {p.stem for p in self.vault.iter_files()}
        graph = self.graph.memory_slugs()
        index = self.index.slugs()
        return vault - graph, graph - vault, index ^ graph

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
        if tags is None and triggers is None:
            raise InvalidInput("nothing to update", hint="give new tags, triggers or both")
        old = self.get(slug)
        changes: dict[str, Any] = {}
        if tags is not None:
            changes["tags"] = list(tags)
        if triggers is not None:
            changes["triggers"] = list(triggers)
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
        """Write `new` over `old` in the vault, graph, index and audit log, in that order."""
        assert old.path is not None and new.path is not None
        self.vault.write(new)
        try:
            if new.path != old.path:
                self.vault.remove(old.path)
            self.graph.upsert_memories([new])
            self.index.upsert([search_doc(new)])
            self.audit.append(
                actor=self.actor,
                event_type=event_type,
                scope_hash=new.meta.scope_hash,
                target_id=new.slug,
                details=details,
            )
        except MemorydError:
            try:
                self.vault.write(old)
                if new.path != old.path:
                    self.vault.remove(new.path)
                self.graph.upsert_memories([old])
                self.index.upsert([search_doc(old)])
            except MemorydError:
                logger.exception("could not undo the %s of %s", event_type, old.slug)
            raise


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
