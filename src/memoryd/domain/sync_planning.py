"""Sync import planning: every change an import of a checked memories.json makes, worked out
before anything is written (`_plan`): the scope mapping, which memories are added, merged or
left in conflict, entity merges and aliases, the identity profile, sealed memories, carried
vectors and the remote audit lines. `dry_run` returns this plan (`domain.syncing`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.domain.sync_exporting import CONFLICTS_DIR, IDENTITY, SyncExporting
from memoryd.domain.writes import search_doc
from memoryd.errors import InvalidInput, MemorydError, MissingKey
from memoryd.models import Memory, ScopeInfo
from memoryd.redact import redact
from memoryd.redact.fields import clean_memory
from memoryd.scope import resolve_scope
from memoryd.search.vectors import fingerprint as vector_fingerprint
from memoryd.sensitive.files import ScopeCipher, encrypted_files, plain_files, slug_of
from memoryd.vault import ENCRYPTED_SUFFIX, render

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from memoryd.sync.document import RemoteDocument, RemoteMemory
    from memoryd.sync.models import (
        ConflictStrategy,
        ImportReport,
        MappedBy,
        ScopeMapping,
    )  # numpy loads only for an import that carries vectors

logger = logging.getLogger(__name__)


@dataclass
class _Local:
    """This data dir's memories, found by slug and by (scope, content hash). Paths are kept
    as strings: a `Path` object per memory adds up at 100k memories (bench/RESULTS.md)."""

    by_slug: dict[str, str] = field(default_factory=dict)
    by_hash: dict[tuple[str, str], str] = field(default_factory=dict)
    prints: dict[str, bytes] = field(default_factory=dict)
    """slug → `_print` of the memory, for those the file holds under the same slug: one
    equal to the file's needs neither a second read nor a merge (re-importing a file)."""

    def scope_of(self, path: str) -> str:
        """`scopes/<hash>/<type>s/<slug>.md` → hash."""
        return Path(path).parent.parent.name

    def path(self, slug: str) -> Path:
        return Path(self.by_slug[slug])


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
    sealed_adds: list[Memory] = field(default_factory=list)
    """Sensitive memories of the file (opened with the passphrase) to seal under the local
    scope key."""
    mark: list[ScopeInfo] = field(default_factory=list)
    """Local scopes to make sensitive (a key made here) before sealed memories land in them."""
    vectors: list[tuple[str, str, str, Any]] = field(default_factory=list)
    """Carried vectors to store as they are: (slug, scope, fingerprint, matrix)."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _carried_matrix(carried: dict[str, Any], dim: int) -> npt.NDArray[np.float32] | None:
    """The carried passage vectors (float32, base64), None when they are not `dim` wide."""
    import numpy as np

    try:
        raw = base64.b64decode(str(carried.get("f32", "")).encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None
    if dim <= 0 or carried.get("dim") != dim or not raw or len(raw) % (4 * dim):
        return None
    return np.frombuffer(raw, dtype="<f4").reshape(-1, dim).astype(np.float32)


def _print(memory: Memory) -> bytes:
    """Everything a memory holds (frontmatter, extra fields, body, sealed or not) as one
    digest: two memories with equal prints merge to no change."""
    meta = json.dumps(memory.meta.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    text = f"{meta}\0{memory.sensitive}\0{memory.body}"
    return hashlib.sha256(text.encode("utf-8")).digest()


def _as_slug(memory: Memory, slug: str) -> Memory:
    """The file's memory under the local slug it matched by content."""
    if memory.slug == slug:
        return memory
    return Memory(meta=memory.meta.model_copy(update={"slug": slug}), body=memory.body)


class SyncPlanning(SyncExporting):
    """The plan of a memories.json import."""

    def _open_sealed(
        self, doc: RemoteDocument, passphrase: str | None
    ) -> tuple[list[Memory], Callable[[Memory], bool]]:
        """Every sealed memory of the file, opened (a wrong passphrase or a changed blob
        names the entry; nothing is written), and whether the file disputes a local
        memory's body (one of the bodies its side holds an open conflict with)."""
        from memoryd.sync import cipher, document

        block = doc.encryption
        if block is None or not block.memories:
            return [], lambda _: False
        if not passphrase:
            raise InvalidInput(
                f"{doc.path} holds {len(block.memories)} sealed sensitive memories: they open"
                " only with the passphrase they were exported with; nothing was imported",
                hint="give it with --passphrase-file FILE, or at the prompt",
            )
        keys = cipher.key_for(block, passphrase)
        plain = {m.slug: m.index for m in doc.memories}
        marks = {item.slug: item.conflicts for item in block.memories if item.conflicts}
        seen: set[str] = set()
        opened = []
        for item in block.memories:
            where = f"encryption.memories[{item.index}]"
            if item.slug in plain or item.slug in seen:
                raise document.bad(
                    doc.path, f"{where}.id", f"slug {item.slug} is in the file twice"
                )
            seen.add(item.slug)
            try:
                opened.append(clean_memory(cipher.open_memory(item, keys)))
            except cipher.BadBlock as exc:
                raise document.bad(doc.path, exc.where, exc.problem, hint=exc.hint) from exc

        def disputes(local: Memory) -> bool:
            held = marks.get(local.slug, ())
            return bool(held) and keys.conflict_mark(local.slug, local.body) in held

        return opened, disputes

    def _scope_mappings(
        self,
        doc: RemoteDocument,
        map_scope: Mapping[str, str],
        scope: Path | str | None,
        sealed: Sequence[Memory] = (),
    ) -> tuple[dict[str, ScopeInfo], list[ScopeMapping], list[ScopeInfo]]:
        """remote scope hash → the local scope it lands in; every mapping is reported."""
        from memoryd.sync import document
        from memoryd.sync.models import ScopeMapping

        used = sorted({m.scope_hash for m in doc.memories} | {m.meta.scope_hash for m in sealed})
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

    def _local(self, remote: Collection[str] = ()) -> _Local:
        """Where each local memory is, by slug and by (scope, content hash), and the
        `_print` of those whose slug is in `remote`; the memories themselves are read again
        only when the file holds a different version of them."""
        from memoryd.sync import document

        local = _Local()
        for memory in self.iter_vault(lambda m: logger.warning("%s", m)):
            assert memory.path is not None
            local.by_slug[memory.meta.slug] = str(memory.path)
            if memory.meta.slug in remote:
                local.prints[memory.meta.slug] = _print(memory)
            key = (memory.meta.scope_hash, document.content_hash(memory.body))
            local.by_hash.setdefault(key, memory.meta.slug)
        return local

    def _remote_memory(
        self, doc: RemoteDocument, item: RemoteMemory, target: ScopeInfo, *, clean: bool = True
    ) -> Memory:
        """The file's memory as this side keeps it: in its local scope, redacted (slug
        included) like every write, before it is merged or written (`clean=False`: as the file
        holds it, to compare with a stored memory, which is redacted already)."""
        meta, body = item.open(doc)
        if item.foreign:
            meta = meta.model_copy()  # the document's own stays as read (and is redacted)
        if meta.scope_hash != target.scope_hash:
            meta.scope_hash = target.scope_hash
        memory = Memory(meta=meta, body=body)
        return memory if item.foreign or not clean else clean_memory(memory)

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
        sealed: Sequence[Memory] = (),
        disputes: Callable[[Memory], bool] = lambda _: False,
    ) -> _Plan:
        from memoryd.sync.base import SyncBase
        from memoryd.sync.merge import digests
        from memoryd.sync.models import ImportReport, SkippedMemory

        mapping, mappings, create = self._scope_mappings(doc, map_scope, scope, sealed)
        report = ImportReport(
            source_machine=doc.source_machine,
            exporter_version=doc.exporter_version,
            remote_chain_head=doc.chain_head,
            strategy=strategy,
            dry_run=dry_run,
            scope_mappings=mappings,
        )
        plan = _Plan(report=report, scopes=create)
        local = self._local({m.slug for m in doc.memories})
        base_packed = SyncBase(self.home).load()
        plan.base = dict(base_packed)
        held = self._sealed_targets(plan, sealed, mapping)
        marking = {info.scope_hash for info in plan.mark}
        taken: set[str] = set()
        for item in doc.memories:
            target = mapping[item.scope_hash]
            slug = item.slug
            if target.sensitive or target.scope_hash in marking:
                report.skipped.append(
                    SkippedMemory(
                        slug=slug,
                        reason=f"local scope {target.scope_hash} is sensitive, and this memory"
                        " came in plaintext: export it from a sensitive scope (sealed)",
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
                if doc.include_embeddings:
                    self._plan_vectors(plan, doc, item, self._remote_memory(doc, item, target))
                continue
            taken.add(found)
            # The same as a stored memory (redacted when written) needs no redaction: a
            # re-import redacts nothing again.
            remote = _as_slug(self._remote_memory(doc, item, target, clean=False), found)
            if local.prints.get(found) != _print(remote):
                remote = _as_slug(clean_memory(remote), found)
            if local.prints.get(found) == _print(remote):
                # The same memory on both sides: what the merge would find, without it.
                plan.base[found] = SyncBase.pack(digests(remote))
                report.unchanged += 1
                kept = remote
            else:
                mine = self.vault.read(local.path(found))
                disputed = _sha(mine.body) in item.conflicts
                kept = self._plan_update(plan, doc, mine, remote, strategy, disputed=disputed)
            if doc.include_embeddings:
                self._plan_vectors(plan, doc, item, kept)
        for memory in sealed:
            memory.meta.scope_hash = mapping[memory.meta.scope_hash].scope_hash
            slug = memory.slug
            if slug in local.by_slug or slug in taken:
                report.skipped.append(
                    SkippedMemory(slug=slug, reason="a plaintext memory here has this slug")
                )
                continue
            taken.add(slug)
            if slug in held:
                mine = self.vault.read(held[slug])
                disputed = disputes(mine)
                self._plan_update(plan, doc, mine, memory, strategy, disputed=disputed)
            else:
                plan.sealed_adds.append(memory)
                report.added.append(slug)
        self._plan_entities(doc, plan)
        self._plan_identity(doc, plan)
        self._plan_audit(doc, plan, mapping)
        return plan

    def _sealed_targets(
        self, plan: _Plan, sealed: Sequence[Memory], mapping: Mapping[str, ScopeInfo]
    ) -> dict[str, Path]:
        """Check that every local scope the sealed memories go to can seal them: sensitive
        with its key here, or empty (then this import marks it); returns the encrypted files
        those scopes hold already, by slug."""
        targets = {
            mapping[m.meta.scope_hash].scope_hash: mapping[m.meta.scope_hash] for m in sealed
        }
        held: dict[str, Path] = {}
        for scope_hash, info in sorted(targets.items()):
            stored = self.vault.read_scope(scope_hash)
            if (stored is not None and stored.sensitive) or self.keys.has_keys(scope_hash):
                try:
                    self.keys.current(scope_hash)
                except MissingKey as exc:
                    raise MissingKey(
                        f"the file's sealed memories go to the sensitive scope {info.path}"
                        f" ({scope_hash}), whose key is not on this machine ({exc.message});"
                        " nothing was imported",
                        hint=f"memoryd sensitive import-key {info.path} FILE (made by"
                        " `memoryd sensitive export-key` where the key is), then import again",
                    ) from exc
            else:
                plain = plain_files(self.home, scope_hash)
                if plain:
                    raise InvalidInput(
                        f"the file's sealed memories go to scope {info.path} ({scope_hash}),"
                        f" which holds {len(plain)} plaintext memories here; nothing was"
                        " imported",
                        hint=f"mark it sensitive first (memoryd sensitive mark {info.path}),"
                        " or --map-scope it elsewhere",
                    )
                plan.mark.append(info)
                plan.report.scopes_marked.append(scope_hash)
            held.update((slug_of(p), p) for p in encrypted_files(self.home, scope_hash))
        plan.report.encrypted = len(sealed)
        return held

    def _plan_vectors(
        self, plan: _Plan, doc: RemoteDocument, item: RemoteMemory, memory: Memory
    ) -> None:
        """Keep a memory's carried vectors when they fit what this side will index of it:
        the same model, made from the same text (else the embedding worker makes them)."""
        carried = item.embeddings(doc)
        if carried is None or memory.sensitive or memory.meta.forgotten_at is not None:
            return
        store = self.vectors.store if self.vectors is not None else None
        indexed = search_doc(memory)
        matrix = _carried_matrix(carried, store.dim if store is not None else 0)
        if (
            store is None
            or matrix is None
            or carried.get("model") != store.model
            or carried.get("fingerprint")
            != vector_fingerprint(indexed.title, indexed.body, store.model)
        ):
            plan.report.embeddings_to_compute += 1
            return
        plan.vectors.append(
            (memory.slug, memory.meta.scope_hash, str(carried["fingerprint"]), matrix)
        )
        plan.report.embeddings_carried += 1

    def _plan_update(
        self,
        plan: _Plan,
        doc: RemoteDocument,
        found: Memory,
        remote: Memory,
        strategy: ConflictStrategy,
        *,
        disputed: bool = False,
    ) -> Memory:
        """Merge a memory both sides hold; a body both changed under `merge` waits in
        `_conflicts/`. So does one the other side still disputes (`disputed`): its export
        names the bodies it holds open conflicts with, and when this side's body is one of
        them, this side keeps it. Returns the memory this side will hold."""
        from memoryd.sync.base import SyncBase
        from memoryd.sync.merge import merge
        from memoryd.sync.models import ConflictEntry, MemoryChange

        report = plan.report
        slug = found.slug
        remote = _as_slug(remote, slug)
        merged = merge(
            found, remote, SyncBase.unpack(plan.base.get(slug)), strategy, open_conflict=disputed
        )
        plan.base[slug] = SyncBase.pack(merged.base)
        if merged.body_conflict:
            suffix = ENCRYPTED_SUFFIX if found.sensitive else ".md"
            path = self.home / CONFLICTS_DIR / f"{slug}.{doc.source_machine}{suffix}"
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
            if self._conflict_text(path, found) != text:
                plan.conflict_files.append((path, text))
        real = [c for c in merged.changes if c.took != "conflict"]
        if real:
            plan.updates.append((found, merged.memory))
            report.updated.append(MemoryChange(slug=slug, fields=real))
        else:
            report.unchanged += 1
        return merged.memory

    def _conflict_text(self, path: Path, local: Memory) -> str | None:
        """What a conflict file holds (a sealed one, of a sensitive memory, opened with its
        scope key), None when there is none."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if not path.name.endswith(ENCRYPTED_SUFFIX):
            return data.decode("utf-8", errors="replace")
        stem = path.name.removesuffix(ENCRYPTED_SUFFIX)
        try:
            opened = ScopeCipher(self.keys).open(data, local.meta.scope_hash, stem, path)
        except MemorydError:
            return None
        return opened.decode("utf-8", errors="replace")

    def _plan_entities(self, doc: RemoteDocument, plan: _Plan) -> None:
        """Merges the remote made that this graph has not, then aliases it lacks. An entity
        exists after the import when the graph has it or a memory of the file names it."""

        def exists(eid: str) -> bool:
            return eid in doc.referenced or self.graph.get_entity(eid) is not None

        merged_here = self._merged_into()
        for entity in sorted(doc.entities, key=lambda e: str(e.get("id"))):
            keep = redact(str(entity.get("id", "")))
            if not keep or not exists(keep):
                continue
            dropped_names: set[str] = set()
            for drop in entity.get("merged") or []:
                drop = redact(str(drop))
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
                alias = redact(str(alias)).strip()
                if alias and alias not in have and alias != name:
                    have.add(alias)
                    plan.aliases.append((keep, alias))
                    plan.report.aliases_added.append(f"{keep} = {alias}")

    def _plan_identity(self, doc: RemoteDocument, plan: _Plan) -> None:
        if doc.identity is None:
            return
        doc.identity = redact(doc.identity)
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
        for held in self.audit.scan(["import"]):  # streamed: 100k+ import lines
            details = held["details"]
            found = re.search(r'"remote_hash":\s*"([^"]+)"', details) if details else None
            if found:
                imported.add(found.group(1))
        plan.audit = [rec for rec in doc.audit_chain if rec["this_hash"] not in imported]
        plan.mapping = dict(mapping)
        plan.report.audit_events_imported = len(plan.audit)
