"""Sync through memories.json: export this data dir, import another's (or
mcp-memory-service's) file, show the difference, and the body conflicts an import left.

An import checks the whole file first (`sync.document.load`: JSON, versions, every memory,
chunk hashes, the carried audit chain), then plans every change (`domain.sync_planning`), and
only then writes; `dry_run` returns the same plan without writing. Memories keep their slugs,
created_at, supersedes chains, decay and recall state (the frontmatter travels whole);
entity merges and aliases are replayed through the audited entity writes; the remote audit
chain is appended as `import` events that reference its head, never spliced in. The export
is `domain.sync_exporting`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.audit import AuditEvent
from memoryd.domain.core import BULK_BATCH, SUPERSEDE_BULK_LIMIT
from memoryd.domain.sync_exporting import CONFLICTS_DIR, IDENTITY
from memoryd.domain.sync_planning import SyncPlanning, _as_slug, _Plan
from memoryd.domain.writes import search_doc
from memoryd.errors import InvalidInput, MemorydError, NotFound
from memoryd.journal import IntentItem
from memoryd.models import DecayState, Memory, ScopeInfo
from memoryd.native import fewer_collections
from memoryd.redact import redact
from memoryd.sensitive import envelope
from memoryd.sensitive.files import ScopeCipher
from memoryd.vault import ENCRYPTED_SUFFIX, FORGOTTEN_DIR, atomic_write, parse

if TYPE_CHECKING:  # the sync modules load when a sync command runs
    from memoryd.sync.document import RemoteDocument
    from memoryd.sync.models import (
        ConflictEntry,
        ConflictStrategy,
        ImportReport,
        ResolveResult,
        SyncDiff,
    )

logger = logging.getLogger(__name__)
STRATEGIES = ("merge", "prefer-local", "prefer-remote")


class Syncing(SyncPlanning):
    """memories.json export, import, diff and conflicts."""

    def sync_import(
        self,
        source: Path,
        *,
        conflict: ConflictStrategy = "merge",
        dry_run: bool = False,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
        passphrase: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportReport:
        """Import a memories.json file (`progress(done, total)` after each batch of new
        memories written). Everything is checked and planned before the first
        write; `dry_run` returns that plan, which is exactly what a real import does.
        Importing the same file twice changes nothing the second time.

        The file's sealed (sensitive) memories open only with `passphrase`, all of them
        before anything is written, and are sealed again under the local scope's key."""
        from memoryd.sync import document

        if conflict not in STRATEGIES:
            raise InvalidInput(
                f"unknown conflict strategy {conflict!r}",
                hint="merge, prefer-local or prefer-remote",
            )
        if not dry_run:
            self._require_writable("import memories")
        doc = document.load(Path(source))
        try:
            sealed, disputes = self._open_sealed(doc, passphrase)
            plan = self._plan(doc, conflict, dry_run, map_scope or {}, scope, sealed, disputes)
            if not dry_run:
                self._apply(plan, doc, progress)
        finally:
            doc.close()
        return plan.report

    def _conflict_body(self, path: Path, slug: str) -> str:
        """The body of a conflict file (a sealed one opened with its scope key: its memory
        was read under a grant by then)."""
        if not path.name.endswith(ENCRYPTED_SUFFIX):
            return parse(_read(path), path).body
        row = self.graph.get_memory(slug)
        if row is None:
            raise NotFound(f"no memory with slug {slug!r}", hint="`memoryd sync conflicts`")
        scope_hash = row.scope_hash
        self.gate.require(scope_hash, slug, "sync resolve")  # denied without a grant
        stem = path.name.removesuffix(ENCRYPTED_SUFFIX)
        opened = ScopeCipher(self.keys).open(path.read_bytes(), scope_hash, stem, path)
        return parse(opened.decode("utf-8"), path).body

    def _write_conflict(self, path: Path, text: str) -> None:
        """A remote version in `_conflicts/`: sealed under the scope key for a sensitive
        memory (its plaintext never lands on disk), as markdown otherwise."""
        data = text.encode("utf-8")
        if path.name.endswith(ENCRYPTED_SUFFIX):
            scope_hash = parse(text, path).meta.scope_hash
            stem = path.name.removesuffix(ENCRYPTED_SUFFIX)
            data = envelope.seal(data, self.keys.current(scope_hash), scope_hash, stem)
        atomic_write(path, data)

    def _path_of(self, memory: Memory) -> Path:
        if memory.meta.decay_state is DecayState.FORGOTTEN:
            name = f"{memory.slug}{ENCRYPTED_SUFFIX if memory.sensitive else '.md'}"
            return self.vault.scope_dir(memory.meta.scope_hash) / FORGOTTEN_DIR / name
        return self.vault.path_for(memory)

    def _apply(
        self,
        plan: _Plan,
        doc: RemoteDocument,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        from memoryd.sync.base import SyncBase

        self.status_speakers.clear()  # bodies change wholesale: read the status lines again
        for info in plan.mark:
            self._mark_for_import(info)  # first: a keyring that cannot keep a key stops here
        for info in plan.scopes:
            self._ensure_scope(info)
        details = {"kind": "memory", "source": doc.source_machine, "remote_head": doc.chain_head}
        self._apply_adds(doc, plan, details, progress)
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
            self._write_conflict(path, text)
        if plan.vectors and self.vectors is not None:
            self.vectors.store.put_many(plan.vectors)  # carried: the worker has nothing to redo
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

    def _mark_for_import(self, info: ScopeInfo) -> None:
        """Make an empty (or new) local scope sensitive so sealed memories can land in it: its
        key (OS keyring), its capture key pair, `scope.json` and the marker, as `sensitive
        mark` makes them (there is no plaintext here to encrypt)."""
        scope_hash = info.scope_hash
        key = self._key_scope(info)
        self.audit.append_many(
            [
                AuditEvent(
                    actor=self.actor,
                    event_type="sensitive_mark",
                    scope_hash=scope_hash,
                    target_id=scope_hash,
                    details={"encrypted": 0, "key": key.key_id.hex(), "by": "sync import"},
                )
            ]
        )
        self.gate.forget_scopes()
        self.views.drop(scope_hash)

    def _remote_event(self, doc: RemoteDocument, plan: _Plan, rec: dict[str, Any]) -> AuditEvent:
        """One remote audit line as an `import` event that names the remote chain head."""
        remote_scope = rec.get("scope_hash")
        target = plan.mapping.get(remote_scope) if remote_scope else None
        target_id = rec.get("target_id")
        return AuditEvent(
            actor=self.actor,
            event_type="import",
            scope_hash=target.scope_hash if target else remote_scope,
            target_id=redact(target_id) if isinstance(target_id, str) else target_id,
            details={
                "kind": "remote_audit",
                "remote_seq": rec["seq"],
                "remote_event": redact(str(rec["event_type"])),
                "remote_actor": redact(str(rec["actor"])),
                "remote_ts": rec["ts"],
                "remote_hash": rec["this_hash"],
                "remote_head": doc.chain_head,
                "source": doc.source_machine,
            },
        )

    def _apply_adds(
        self,
        doc: RemoteDocument,
        plan: _Plan,
        details: dict[str, Any],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """New memories, read from the file again batch by batch, then their links; then
        supersede judging of the added long-term memories, as `record_many` judges."""
        from memoryd.sync.base import SyncBase
        from memoryd.sync.merge import digests

        linked: list[Memory] = []
        judged: list[Memory] = []
        with fewer_collections():
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
                    if (
                        meta.forgotten_at is None
                        and meta.type.long_term
                        and len(judged) <= SUPERSEDE_BULK_LIMIT  # past it, none is judged
                    ):
                        judged.append(memory)
                self._add_batch(batch, details)
                if progress is not None:
                    progress(start + len(chunk), len(plan.adds))
        for start in range(0, len(linked), BULK_BATCH):
            self.graph.link_memories(linked[start : start + BULK_BATCH])
        for start in range(0, len(plan.sealed_adds), BULK_BATCH):
            # Sealed again under the local key; the graph keeps skeletons, the index nothing.
            sealed = plan.sealed_adds[start : start + BULK_BATCH]
            for memory in sealed:
                plan.base[memory.slug] = SyncBase.pack(digests(memory))
            self._add_batch(sealed, details)
        plan.report.superseded = len(self._judge_written(judged, use_llm=False))

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
            self.vault.write_many(batch, written)  # then one sync for the batch
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

    def sync_diff(
        self,
        source: Path,
        *,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
    ) -> SyncDiff:
        """The file against this data dir: memories only there (added), only here in the
        scopes the file covers (removed), and those on both sides with the fields that differ."""
        from memoryd.sync import document

        doc = document.load(Path(source))
        try:
            return self._diff(doc, map_scope or {}, scope)
        finally:
            doc.close()

    def _diff(
        self, doc: RemoteDocument, map_scope: Mapping[str, str], scope: Path | str | None
    ) -> SyncDiff:
        from memoryd.sync.merge import differing_fields
        from memoryd.sync.models import ChangedMemory, SyncDiff

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
            fields = differing_fields(self.vault.read(local.path(slug)), remote)
            if fields:
                diff.changed.append(ChangedMemory(slug=slug, fields=fields))
        covered = {t.scope_hash for t in mapping.values()}
        diff.removed = sorted(
            slug
            for slug, path in local.by_slug.items()
            if slug not in matched and local.scope_of(path) in covered
        )
        diff.sealed_not_compared = len(doc.encryption.memories) if doc.encryption else 0
        return diff

    def sync_conflicts(self) -> list[ConflictEntry]:
        """Remote versions waiting in `_conflicts/` for `sync resolve`."""
        from memoryd.sync.models import ConflictEntry

        folder = self.home / CONFLICTS_DIR
        if not folder.is_dir():
            return []
        out: list[ConflictEntry] = []
        for path in sorted(folder.glob(f"*{ENCRYPTED_SUFFIX}")):
            # A sensitive memory's: listed by name (slug.source), never opened to be listed.
            slug, _, source = path.name.removesuffix(ENCRYPTED_SUFFIX).partition(".")
            row = self.graph.get_memory(slug)
            out.append(
                ConflictEntry(
                    slug=slug,
                    source=source or "?",
                    path=str(path),
                    local_updated_at=(row.updated_at or row.created_at) if row else None,
                )
            )
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
        from memoryd.sync.models import ResolveResult

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
                atomic_write(self.home / IDENTITY, redact(_read(body_source)).encode("utf-8"))
            for path in paths:
                path.unlink(missing_ok=True)
            return ResolveResult(slug=slug, took=take, removed=[str(p) for p in paths])
        if take == "local":
            body = None
        elif take == "remote":
            if len(paths) > 1:
                raise InvalidInput(_several(slug, paths))
            body = self._conflict_body(paths[0], slug)
        else:
            text = _read(Path(take))
            body = parse(text, Path(take)).body if text.startswith("---") else text.strip()
            if not body.strip():
                raise InvalidInput(f"{take} holds no body", hint="write the merged body into it")
        with self._file_lock(slug):
            old = self.get(slug)
            if body is not None and body != old.body:
                new = self._edited(old, {}, old.path)
                new.body = body  # redacted as it is written
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
