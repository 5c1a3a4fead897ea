"""Sync through memories.json: export this data dir, import another's (or
mcp-memory-service's) file, show the difference, and the body conflicts an import left.

An import checks the whole file first (`sync.document.load`: JSON, versions, every memory,
chunk hashes, the carried audit chain), then plans every change (`_plan`), and only then
writes; `dry_run` returns the same plan without writing. Memories keep their slugs,
created_at, supersedes chains, decay and recall state (the frontmatter travels whole);
entity merges and aliases are replayed through the audited entity writes; the remote audit
chain is appended as `import` events that reference its head, never spliced in.

Over 600 lines: export, import planning and applying, diff, conflicts and resolve share the
scope mapping and the local index of memories; split, each would rebuild them.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.audit import AuditEvent
from memoryd.domain.core import BULK_BATCH, ServiceCore, search_doc
from memoryd.errors import InvalidInput, MemorydError, NotFound
from memoryd.governance.analyze import sensitive
from memoryd.graph.store import EntityRow
from memoryd.journal import IntentItem
from memoryd.models import (
    DecayState,
    Memory,
    ScopeInfo,
)
from memoryd.redact import redact
from memoryd.scope import resolve_scope
from memoryd.sync import document
from memoryd.sync.base import SyncBase
from memoryd.sync.document import ExportParts, RemoteDocument, RemoteMemory
from memoryd.sync.export import Collector
from memoryd.sync.merge import differing_fields, digests, merge
from memoryd.sync.models import (
    ChangedMemory,
    ConflictEntry,
    ConflictStrategy,
    ExportReport,
    ImportReport,
    MappedBy,
    MemoryChange,
    ResolveResult,
    ScopeMapping,
    SkippedMemory,
    SyncDiff,
)
from memoryd.vault import ENCRYPTED_SUFFIX, FORGOTTEN_DIR, atomic_write, parse, render

logger = logging.getLogger(__name__)

CONFLICTS_DIR = "_conflicts"
IDENTITY = Path("profile") / "identity.md"
STRATEGIES = ("merge", "prefer-local", "prefer-remote")


@dataclass
class _Local:
    """This data dir's memories, found by slug and by (scope, content hash)."""

    by_slug: dict[str, Path] = field(default_factory=dict)
    by_hash: dict[tuple[str, str], str] = field(default_factory=dict)

    def scope_of(self, path: Path) -> str:
        """`scopes/<hash>/<type>s/<slug>.md` → hash."""
        return path.parent.parent.name


@dataclass
class _Plan:
    report: ImportReport
    scopes: list[ScopeInfo] = field(default_factory=list)
    """Scopes to create here."""
    adds: list[tuple[RemoteMemory, ScopeInfo]] = field(default_factory=list)
    """Memories to write as they are, read from the file again batch by batch."""
    updates: list[tuple[Memory, Memory]] = field(default_factory=list)
    """(local, merged)."""
    conflict_files: list[tuple[Path, str]] = field(default_factory=list)
    merges: list[tuple[str, str]] = field(default_factory=list)
    aliases: list[tuple[str, str]] = field(default_factory=list)
    identity: str | None = None
    identity_conflict: Path | None = None
    audit: list[dict[str, Any]] = field(default_factory=list)
    """The remote audit lines to append as `import` events (built batch by batch)."""
    mapping: dict[str, ScopeInfo] = field(default_factory=dict)
    base: dict[str, str] = field(default_factory=dict)


class Syncing(ServiceCore):
    """memories.json export, import, diff and conflicts."""

    iter_vault: Callable[..., Iterator[Memory]]
    """Provided by `domain.maintenance.Maintenance`."""
    flush_recall_stats: Callable[..., int]
    """Provided by `domain.recalling.Recalling`."""
    alias_entity: Callable[[str, str], EntityRow]
    merge_entities: Callable[[str, str], EntityRow]
    """Provided by `domain.entities.Entities`."""

    # -- export -----------------------------------------------------------------------------
    def sync_export(
        self,
        out: Path,
        *,
        scope: Path | str | None = None,
        include_audit_chain: bool = False,
        include_embeddings: bool = False,
        chunk_size_mb: float = 5.0,
    ) -> ExportReport:
        """Write this data dir (or one scope) to `out`; the same state gives the same bytes.
        Sensitive memories are left out whole: no plaintext of them is ever exported."""
        if chunk_size_mb <= 0:
            raise InvalidInput(f"--chunk-size-mb must be above 0 (got {chunk_size_mb})")
        if include_embeddings and self.vectors is None:
            raise InvalidInput(
                "no embeddings are stored here, so --include-embeddings has nothing to export",
                hint="install the vectors extra (memoryd[vectors]) and run `memoryd reindex`",
            )
        out = Path(out)
        if not self.read_only:
            self.flush_recall_stats()  # the files carry the recall counts
        wanted = self.scope_hash_of(scope)
        scopes = {s.scope_hash: s for s in self.vault.scopes()}
        if wanted is not None and wanted not in scopes:
            raise NotFound(f"no scope {wanted} in this data dir", hint="`memoryd scope show`")
        last = self.audit.last_seq()
        head = self.audit.records_after(last - 1)[-1] if last else None
        base_store = SyncBase(self.home)
        collect = Collector(
            out=out,
            machine=document.machine_name(),
            chunk_bytes=int(chunk_size_mb * 1024 * 1024),
            base=base_store.load(),
            embedding=self._embedding if include_embeddings else None,
        )
        omitted = 0

        def memories() -> Iterator[dict[str, Any]]:
            nonlocal omitted
            for memory in self.iter_vault(lambda m: logger.warning("%s", m)):
                if wanted is not None and memory.meta.scope_hash != wanted:
                    continue
                if sensitive(memory, scopes.get(memory.meta.scope_hash)):
                    omitted += 1  # no plaintext of a sensitive memory leaves memoryd
                    continue
                yield collect.item(memory)

        identity = self._identity_snapshot()
        audit_chain = None
        if include_audit_chain:
            audit_chain = [r.model_dump(mode="json") for r in self.audit.read()]
        metadata: dict[str, Any] = {
            "source_machine": collect.machine,
            "export_timestamp": head.ts if head else "1970-01-01T00:00:00.000Z",
            "total_memories": 0,
            "database_path": str(self.home),
            "platform": platform.system(),
            "python_version": platform.python_version(),
            "include_embeddings": include_embeddings,
            "filter_tags": None,
            "exporter_version": document.EXPORTER_VERSION,
            "schema_compat": document.SCHEMA_COMPAT,
            "include_audit_chain": include_audit_chain,
            "audit_chain_head": {"seq": head.seq, "hash": head.this_hash} if head else None,
            "scope": wanted,
        }
        parts = ExportParts(
            metadata=metadata,
            memories=memories(),
            entities=collect.entity_rows(self.graph.entity_catalogue, self._merged_into()),
            relations=collect.sorted_rows(collect.relations),
            supersedes_chain=collect.sorted_rows(collect.supersedes),
            scopes=[
                document.scope_item(s)
                for h, s in sorted(scopes.items())
                if wanted is None or h == wanted
            ],
            identity_snapshot=identity,
            large_file_manifest=collect.manifest,
            audit_chain=audit_chain,
        )
        size, sha = document.write_document(out, parts)
        # Encrypted memory files (`.md.enc`) are never read here: they are left out too.
        omitted += sum(
            1
            for p in self.vault.scopes_dir.glob(f"*/*/*{ENCRYPTED_SUFFIX}")
            if wanted is None or p.parent.parent.name == wanted
        )
        collect.drop_stale_chunks()
        if not self.read_only:
            base_store.save(collect.base)
        return ExportReport(
            path=str(out),
            sha256=sha,
            bytes=size,
            memories=collect.memories,
            entities=collect.entities,
            relations=len(collect.relations),
            supersedes=len(collect.supersedes),
            audit_lines=len(audit_chain or []),
            chunks=sorted(set(collect.chunks)),
            omitted_sensitive=omitted,
            identity_snapshot=identity is not None,
        )

    def _identity_snapshot(self) -> dict[str, Any] | None:
        """profile/identity.md, when the profile has been written."""
        path = self.home / IDENTITY
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8")
        return {
            "path": str(IDENTITY),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "content": text,
        }

    def _embedding(self, slug: str) -> list[float] | None:
        assert self.vectors is not None
        matrix = self.vectors.store.vectors(slug)
        if matrix is None or len(matrix) == 0:
            return None
        return [round(float(v), 6) for v in matrix[0]]

    # -- import -----------------------------------------------------------------------------
    def sync_import(
        self,
        source: Path,
        *,
        conflict: ConflictStrategy = "merge",
        dry_run: bool = False,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
    ) -> ImportReport:
        """Import a memories.json file. Everything is checked and planned before the first
        write; `dry_run` returns that plan, which is exactly what a real import does.
        Importing the same file twice changes nothing the second time."""
        if conflict not in STRATEGIES:
            raise InvalidInput(
                f"unknown conflict strategy {conflict!r}",
                hint="merge, prefer-local or prefer-remote",
            )
        if not dry_run:
            self._require_writable("import memories")
        doc = document.load(Path(source))
        try:
            plan = self._plan(doc, conflict, dry_run, map_scope or {}, scope)
            if not dry_run:
                self._apply(plan, doc)
        finally:
            doc.close()
        return plan.report

    def _scope_mappings(
        self, doc: RemoteDocument, map_scope: Mapping[str, str], scope: Path | str | None
    ) -> tuple[dict[str, ScopeInfo], list[ScopeMapping], list[ScopeInfo]]:
        """remote scope hash → the local scope it lands in; every mapping is reported."""
        used = sorted({m.scope_hash for m in doc.memories})
        unknown = sorted(set(map_scope) - set(used) - set(doc.scopes))
        if unknown:
            raise InvalidInput(
                f"--map-scope names scope {unknown[0]}, which the file does not hold",
                hint="`memoryd sync diff-with-remote --from FILE --json` lists the file's scopes",
            )
        local = {s.scope_hash: s for s in self.vault.scopes()}
        by_alias: dict[str, ScopeInfo] = {}
        for info in local.values():
            for alias in info.aliases:
                by_alias.setdefault(alias, info)
        out: dict[str, ScopeInfo] = {}
        report: list[ScopeMapping] = []
        create: list[ScopeInfo] = []
        for remote_hash in used:
            remote = doc.scopes.get(remote_hash)
            target: ScopeInfo | None
            how: MappedBy
            if remote_hash in map_scope:
                target, how = self._scope_named(map_scope[remote_hash]), "--map-scope"
            elif remote_hash == document.FOREIGN_SCOPE:
                target, how = resolve_scope(scope), "--scope"
            elif remote_hash in local:
                target, how = local[remote_hash], "same hash"
            else:
                shared = next(
                    (by_alias[a] for a in (remote.aliases if remote else []) if a in by_alias),
                    None,
                )
                if shared is not None:
                    target, how = shared, "git remote"
                else:
                    target = remote or ScopeInfo(
                        scope_hash=remote_hash, path=f"(from {doc.source_machine})"
                    )
                    how = "new"
            stored = local.get(target.scope_hash)
            if stored is not None:
                target = stored
            elif all(c.scope_hash != target.scope_hash for c in create):
                create.append(target)
            out[remote_hash] = target
            report.append(
                ScopeMapping(
                    remote=remote_hash,
                    local=target.scope_hash,
                    how=how,
                    remote_path=remote.path if remote else None,
                    local_path=target.path,
                )
            )
        return out, report, create

    def _scope_named(self, value: str) -> ScopeInfo:
        """`--map-scope OLD=NEW`: NEW is a local scope hash, or a project path."""
        if re.fullmatch(r"[0-9a-f]{12}", value) and not Path(value).exists():
            info = self.vault.read_scope(value)
            if info is None:
                raise InvalidInput(
                    f"--map-scope: no local scope {value}",
                    hint="give the project's path instead of a hash",
                )
            return info
        return resolve_scope(value)

    def _local(self) -> _Local:
        """Where each local memory is, by slug and by (scope, content hash); the memories
        themselves are read again only when the file holds them too."""
        local = _Local()
        for memory in self.iter_vault(lambda m: logger.warning("%s", m)):
            assert memory.path is not None
            local.by_slug[memory.meta.slug] = memory.path
            key = (memory.meta.scope_hash, document.content_hash(memory.body))
            local.by_hash.setdefault(key, memory.meta.slug)
        return local

    def _remote_memory(self, doc: RemoteDocument, item: RemoteMemory, target: ScopeInfo) -> Memory:
        meta, body = item.open(doc)
        if meta.scope_hash != target.scope_hash:
            meta.scope_hash = target.scope_hash
        if item.foreign:
            meta = meta.model_copy()  # the document's own stays as read
            body = redact(body).strip()
        return Memory(meta=meta, body=body)

    def _match(self, local: _Local, item: RemoteMemory, target: ScopeInfo) -> str | None:
        """The local memory the file's memory is: same slug, else same content in its scope."""
        if item.slug in local.by_slug:
            return item.slug
        return local.by_hash.get((target.scope_hash, item.hash))

    def _plan(
        self,
        doc: RemoteDocument,
        strategy: ConflictStrategy,
        dry_run: bool,
        map_scope: Mapping[str, str],
        scope: Path | str | None,
    ) -> _Plan:
        mapping, mappings, create = self._scope_mappings(doc, map_scope, scope)
        report = ImportReport(
            source_machine=doc.source_machine,
            exporter_version=doc.exporter_version,
            remote_chain_head=doc.chain_head,
            strategy=strategy,
            dry_run=dry_run,
            scope_mappings=mappings,
        )
        plan = _Plan(report=report, scopes=create)
        local = self._local()
        base_packed = SyncBase(self.home).load()
        plan.base = dict(base_packed)
        taken: set[str] = set()
        for item in doc.memories:
            target = mapping[item.scope_hash]
            slug = item.slug
            if target.sensitive:
                report.skipped.append(
                    SkippedMemory(
                        slug=slug,
                        reason=f"local scope {target.scope_hash} is sensitive: plaintext is not"
                        " imported into it until encrypted sync lands",
                    )
                )
                continue
            found = self._match(local, item, target)
            if found is None or found in taken:
                if slug in local.by_slug or slug in taken:
                    report.skipped.append(
                        SkippedMemory(slug=slug, reason="the file holds this memory twice")
                    )
                    continue
                taken.add(slug)
                plan.adds.append((item, target))
                report.added.append(slug)
                continue
            taken.add(found)
            self._plan_update(
                plan, doc, local, found, self._remote_memory(doc, item, target), strategy
            )
        self._plan_entities(doc, plan)
        self._plan_identity(doc, plan)
        self._plan_audit(doc, plan, mapping)
        return plan

    def _plan_update(
        self,
        plan: _Plan,
        doc: RemoteDocument,
        local: _Local,
        slug: str,
        remote: Memory,
        strategy: ConflictStrategy,
    ) -> None:
        """Merge a memory both sides hold; a body both changed under `merge` waits in
        `_conflicts/`."""
        report = plan.report
        found = self.vault.read(local.by_slug[slug])
        remote = _as_slug(remote, slug)
        merged = merge(found, remote, SyncBase.unpack(plan.base.get(slug)), strategy)
        plan.base[slug] = SyncBase.pack(merged.base)
        if merged.body_conflict:
            path = self.home / CONFLICTS_DIR / f"{slug}.{doc.source_machine}.md"
            text = render(remote)
            report.conflicts.append(
                ConflictEntry(
                    slug=slug,
                    source=doc.source_machine,
                    path=str(path),
                    local_updated_at=found.meta.updated_at or found.meta.created_at,
                    remote_updated_at=remote.meta.updated_at or remote.meta.created_at,
                )
            )
            if not (path.is_file() and path.read_text(encoding="utf-8") == text):
                plan.conflict_files.append((path, text))
        real = [c for c in merged.changes if c.took != "conflict"]
        if real:
            plan.updates.append((found, merged.memory))
            report.updated.append(MemoryChange(slug=slug, fields=real))
        else:
            report.unchanged += 1

    def _plan_entities(self, doc: RemoteDocument, plan: _Plan) -> None:
        """Merges the remote made that this graph has not, then aliases it lacks. An entity
        exists after the import when the graph has it or a memory of the file names it."""

        def exists(eid: str) -> bool:
            return eid in doc.referenced or self.graph.get_entity(eid) is not None

        merged_here = self._merged_into()
        for entity in sorted(doc.entities, key=lambda e: str(e.get("id"))):
            keep = str(entity.get("id", ""))
            if not keep or not exists(keep):
                continue
            dropped_names: set[str] = set()
            for drop in entity.get("merged") or []:
                drop = str(drop)
                if merged_here.get(drop) == keep:
                    continue
                if exists(drop):
                    plan.merges.append((keep, drop))
                    plan.report.entities_merged.append(f"{keep} <- {drop}")
                    row = self.graph.get_entity(drop)
                    dropped_names.add(drop.split(":", 2)[-1])
                    dropped_names.update(row.aliases if row else [])
            row = self.graph.get_entity(keep)
            have = set(row.aliases if row else []) | dropped_names
            name = keep.split(":", 2)[-1]
            for alias in entity.get("aliases") or []:
                alias = str(alias).strip()
                if alias and alias not in have and alias != name:
                    have.add(alias)
                    plan.aliases.append((keep, alias))
                    plan.report.aliases_added.append(f"{keep} = {alias}")

    def _plan_identity(self, doc: RemoteDocument, plan: _Plan) -> None:
        if doc.identity is None:
            return
        path = self.home / IDENTITY
        if not path.is_file():
            plan.identity = doc.identity
            plan.report.identity_snapshot = "written"
            return
        if path.read_text(encoding="utf-8") == doc.identity:
            plan.report.identity_snapshot = "same"
            return
        plan.report.identity_snapshot = "conflict"
        target = self.home / CONFLICTS_DIR / f"identity.{doc.source_machine}.md"
        if not (target.is_file() and target.read_text(encoding="utf-8") == doc.identity):
            plan.identity_conflict = target
            plan.conflict_files.append((target, doc.identity))

    def _plan_audit(
        self, doc: RemoteDocument, plan: _Plan, mapping: Mapping[str, ScopeInfo]
    ) -> None:
        """The remote chain as `import` events referencing its head; those already
        imported (by remote hash) are not appended again."""
        if not doc.audit_chain:
            return
        imported: set[str] = set()
        for held in self.audit.read(event_type="import"):
            found = re.search(r'"remote_hash":\s*"([^"]+)"', held.details)
            if found:
                imported.add(found.group(1))
        plan.audit = [rec for rec in doc.audit_chain if rec["this_hash"] not in imported]
        plan.mapping = dict(mapping)
        plan.report.audit_events_imported = len(plan.audit)

    # -- applying the plan -----------------------------------------------------------------
    def _path_of(self, memory: Memory) -> Path:
        if memory.meta.decay_state is DecayState.FORGOTTEN:
            return (
                self.vault.scope_dir(memory.meta.scope_hash) / FORGOTTEN_DIR / f"{memory.slug}.md"
            )
        return self.vault.path_for(memory)

    def _apply(self, plan: _Plan, doc: RemoteDocument) -> None:
        for info in plan.scopes:
            self._ensure_scope(info)
        details = {"kind": "memory", "source": doc.source_machine, "remote_head": doc.chain_head}
        self._apply_adds(doc, plan, details)
        fields_of = {c.slug: [f.field for f in c.fields] for c in plan.report.updated}
        for old, merged in plan.updates:
            with self._file_lock(old.slug):
                merged.path = self._path_of(merged)
                fields = fields_of.get(old.slug, [])
                self._replace_everywhere(
                    old, merged, event_type="import", details={**details, "fields": fields}
                )
                if merged.meta.forgotten_at is not None:
                    self._resync_many({merged.slug: None})  # forgotten by decay: the vault only
        for path, text in plan.conflict_files:
            atomic_write(path, text.encode("utf-8"))
        if plan.adds or plan.updates:
            self.forget_entities()
        for keep, drop in plan.merges:
            if self.graph.get_entity(keep) is not None and self.graph.get_entity(drop) is not None:
                self.merge_entities(keep, drop)
        for keep, alias in plan.aliases:
            row = self.graph.get_entity(keep)
            if row is not None and alias not in row.aliases:
                self.alias_entity(keep, alias)
        if plan.identity is not None:
            atomic_write(self.home / IDENTITY, plan.identity.encode("utf-8"))
        for start in range(0, len(plan.audit), BULK_BATCH):
            chunk = plan.audit[start : start + BULK_BATCH]
            self.audit.append_many([self._remote_event(doc, plan, rec) for rec in chunk])
        SyncBase(self.home).save(plan.base)

    def _remote_event(self, doc: RemoteDocument, plan: _Plan, rec: dict[str, Any]) -> AuditEvent:
        """One remote audit line as an `import` event that names the remote chain head."""
        remote_scope = rec.get("scope_hash")
        target = plan.mapping.get(remote_scope) if remote_scope else None
        return AuditEvent(
            actor=self.actor,
            event_type="import",
            scope_hash=target.scope_hash if target else remote_scope,
            target_id=rec.get("target_id"),
            details={
                "kind": "remote_audit",
                "remote_seq": rec["seq"],
                "remote_event": rec["event_type"],
                "remote_actor": rec["actor"],
                "remote_ts": rec["ts"],
                "remote_hash": rec["this_hash"],
                "remote_head": doc.chain_head,
                "source": doc.source_machine,
            },
        )

    def _apply_adds(self, doc: RemoteDocument, plan: _Plan, details: dict[str, Any]) -> None:
        """New memories, read from the file again batch by batch, then their links."""
        linked: list[Memory] = []
        for start in range(0, len(plan.adds), BULK_BATCH):
            chunk = plan.adds[start : start + BULK_BATCH]
            batch = [self._remote_memory(doc, i, t) for i, t in chunk]
            for memory in batch:
                plan.base[memory.slug] = SyncBase.pack(digests(memory))
                meta = memory.meta
                if meta.forgotten_at is None and (
                    meta.supersedes or meta.supersede_decisions or meta.promoted_from
                ):
                    linked.append(memory)
            self._add_batch(batch, details)
        for start in range(0, len(linked), BULK_BATCH):
            self.graph.link_memories(linked[start : start + BULK_BATCH])

    def _add_batch(self, batch: list[Memory], details: dict[str, Any]) -> None:
        """Write imported memories as they are (slug, times, state): vault, graph, index,
        audit, under one write intent; on failure the earlier steps are undone."""
        for memory in batch:
            memory.path = self._path_of(memory)
        items = [
            IntentItem(
                slug=m.slug,
                path=str(m.path),
                event_type="import",
                scope_hash=m.meta.scope_hash,
                details={**details, "type": m.meta.type.value},
            )
            for m in batch
        ]
        intent = self._begin_write("record", items)
        written: list[Path] = []
        live = [m for m in batch if m.meta.forgotten_at is None]
        slugs = [m.slug for m in live]
        try:
            # File creation releases the GIL: a few threads, then one sync for the batch.
            with ThreadPoolExecutor(max_workers=4) as pool:
                futures = [pool.submit(self.vault.write, m, sync=False) for m in batch]
                for future in futures:
                    if future.exception() is None:
                        written.append(future.result())
                for future in futures:
                    future.result()  # the first failure, after every written path is known
            self.vault.sync_all()
            self.graph.upsert_memories(live, link_memories=False, new=True)
            try:
                self.index.upsert([search_doc(m) for m in live])
                self.audit.append_many([self._intended_event(intent, i) for i in items])
            except MemorydError:
                self.index.delete(slugs)
                self.graph.delete_memories(slugs)
                raise
        except MemorydError:
            for path in written:
                self.vault.remove(path)
            self.journal.end(intent)
            raise
        self.journal.end(intent)

    # -- diff, conflicts, resolve ----------------------------------------------------------
    def sync_diff(
        self,
        source: Path,
        *,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
    ) -> SyncDiff:
        """The file against this data dir: memories only there (added), only here in the
        scopes the file covers (removed), and those on both sides with the fields that differ."""
        doc = document.load(Path(source))
        try:
            return self._diff(doc, map_scope or {}, scope)
        finally:
            doc.close()

    def _diff(
        self, doc: RemoteDocument, map_scope: Mapping[str, str], scope: Path | str | None
    ) -> SyncDiff:
        mapping, mappings, _ = self._scope_mappings(doc, map_scope, scope)
        local = self._local()
        diff = SyncDiff(scope_mappings=mappings)
        matched: set[str] = set()
        for item in doc.memories:
            target = mapping[item.scope_hash]
            slug = self._match(local, item, target)
            if slug is None:
                diff.added.append(item.slug)
                continue
            matched.add(slug)
            remote = _as_slug(self._remote_memory(doc, item, target), slug)
            fields = differing_fields(self.vault.read(local.by_slug[slug]), remote)
            if fields:
                diff.changed.append(ChangedMemory(slug=slug, fields=fields))
        covered = {t.scope_hash for t in mapping.values()}
        diff.removed = sorted(
            slug
            for slug, path in local.by_slug.items()
            if slug not in matched and local.scope_of(path) in covered
        )
        return diff

    def sync_conflicts(self) -> list[ConflictEntry]:
        """Remote versions waiting in `_conflicts/` for `sync resolve`."""
        folder = self.home / CONFLICTS_DIR
        if not folder.is_dir():
            return []
        out: list[ConflictEntry] = []
        for path in sorted(folder.glob("*.md")):
            if path.name.startswith("identity."):
                out.append(ConflictEntry(slug="identity", source=path.name[9:-3], path=str(path)))
                continue
            try:
                remote = parse(path.read_text(encoding="utf-8"), path)
            except (OSError, MemorydError) as exc:
                logger.warning("unreadable conflict file %s: %s", path, exc)
                continue
            slug = remote.meta.slug
            source = path.name[len(slug) + 1 : -3] if path.name.startswith(slug + ".") else "?"
            local_at = None
            try:
                mine = self.get(slug)
                local_at = mine.meta.updated_at or mine.meta.created_at
            except NotFound:
                pass
            out.append(
                ConflictEntry(
                    slug=slug,
                    source=source,
                    path=str(path),
                    local_updated_at=local_at,
                    remote_updated_at=remote.meta.updated_at or remote.meta.created_at,
                )
            )
        return out

    def sync_resolve(self, slug: str, take: str) -> ResolveResult:
        """Close a memory's conflict: keep the local body (`local`), take the remote one
        (`remote`), or take the body of a file you wrote (a path)."""
        self._require_writable("resolve a sync conflict")
        open_ = [c for c in self.sync_conflicts() if c.slug == slug]
        if not open_:
            raise NotFound(f"no open sync conflict for {slug}", hint="`memoryd sync conflicts`")
        paths = [Path(c.path) for c in open_]
        if slug == "identity":
            body_source = (
                None if take == "local" else (paths[0] if take == "remote" else Path(take))
            )
            if take == "remote" and len(paths) > 1:
                raise InvalidInput(_several(slug, paths))
            if body_source is not None:
                atomic_write(self.home / IDENTITY, _read(body_source).encode("utf-8"))
            for path in paths:
                path.unlink(missing_ok=True)
            return ResolveResult(slug=slug, took=take, removed=[str(p) for p in paths])
        if take == "local":
            body = None
        elif take == "remote":
            if len(paths) > 1:
                raise InvalidInput(_several(slug, paths))
            body = parse(_read(paths[0]), paths[0]).body
        else:
            text = _read(Path(take))
            body = parse(text, Path(take)).body if text.startswith("---") else text.strip()
            if not body.strip():
                raise InvalidInput(f"{take} holds no body", hint="write the merged body into it")
        with self._file_lock(slug):
            old = self.get(slug)
            if body is not None and body != old.body:
                new = self._edited(old, {}, old.path)
                new.body = redact(body)
                self._replace_everywhere(
                    old, new, event_type="sync_resolve", details={"took": _took(take)}
                )
            else:
                self.audit.append_many(
                    [
                        AuditEvent(
                            actor=self.actor,
                            event_type="sync_resolve",
                            scope_hash=old.meta.scope_hash,
                            target_id=slug,
                            details={"took": _took(take)},
                        )
                    ]
                )
        for path in paths:
            path.unlink(missing_ok=True)
        return ResolveResult(slug=slug, took=_took(take), removed=[str(p) for p in paths])


def _as_slug(memory: Memory, slug: str) -> Memory:
    """The file's memory under the local slug it matched by content."""
    if memory.slug == slug:
        return memory
    return Memory(meta=memory.meta.model_copy(update={"slug": slug}), body=memory.body)


def _took(take: str) -> str:
    return take if take in ("local", "remote") else "file"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc


def _several(slug: str, paths: Sequence[Path]) -> str:
    names = ", ".join(str(p) for p in paths)
    return f"{slug} has conflicts from several machines ({names}): --take one of those files"
