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

import base64
import binascii
import hashlib
import json
import logging
import platform
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memoryd.audit import AuditEvent
from memoryd.domain.core import (
    BULK_BATCH,
    PROGRESS_STEP,
    SUPERSEDE_BULK_LIMIT,
    ServiceCore,
    search_doc,
)
from memoryd.errors import InvalidInput, MemorydError, MissingKey, NotFound
from memoryd.governance.analyze import sensitive
from memoryd.graph.store import EntityRow
from memoryd.journal import IntentItem
from memoryd.models import (
    AuditRecord,
    DecayState,
    Memory,
    ScopeInfo,
)
from memoryd.native import fewer_collections
from memoryd.redact import redact
from memoryd.redact.fields import clean_memory
from memoryd.scope import resolve_scope
from memoryd.search.vectors import fingerprint as vector_fingerprint
from memoryd.sensitive import envelope
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.files import (
    ScopeCipher,
    decrypt_scope,
    encrypted_files,
    plain_files,
    slug_of,
)
from memoryd.sync import cipher, document
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

NO_PASSPHRASE = (
    "no passphrase given: a sensitive memory leaves only sealed with one"
    " (`sync export --encrypt` asks for it, or --passphrase-file)"
)

logger = logging.getLogger(__name__)

CONFLICTS_DIR = "_conflicts"
IDENTITY = Path("profile") / "identity.md"
STRATEGIES = ("merge", "prefer-local", "prefer-remote")


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


class Syncing(ServiceCore):
    """memories.json export, import, diff and conflicts."""

    iter_vault: Callable[..., Iterator[Memory]]
    """Provided by `domain.maintenance.Maintenance`."""
    flush_recall_stats: Callable[..., int]
    """Provided by `domain.recalling.Recalling`."""
    _key_scope: Callable[[ScopeInfo], ScopeKey]
    """Provided by `domain.sensitivity.Sensitivity`: a scope's key, key pair and marker."""
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
        passphrase: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportReport:
        """Write this data dir (or one scope) to `out`; the same state gives the same bytes.
        `progress(done, total)` as the vault's memory files are read.

        A sensitive memory's plaintext is never exported: with `passphrase` (and a grant on
        its scope, as for any read of it) it is sealed into the `encryption` block
        (`sync.cipher`: the same state seals to the same bytes); without one it is left out,
        and the report counts it and says why."""
        if chunk_size_mb <= 0:
            raise InvalidInput(f"--chunk-size-mb must be above 0 (got {chunk_size_mb})")
        if include_embeddings and self.vectors is None:
            raise InvalidInput(
                "no embeddings are stored here, so --include-embeddings has nothing to export",
                hint="install the vectors extra (memoryd[vectors]) and run `memoryd reindex`",
            )
        out = Path(out)
        document.check_out(out)  # before any work: a device or a symlink is never replaced
        if not self.read_only:
            self.flush_recall_stats()  # the files carry the recall counts
        wanted = self.scope_hash_of(scope)
        scopes = {s.scope_hash: s for s in self.vault.scopes()}
        if wanted is not None and wanted not in scopes:
            raise NotFound(f"no scope {wanted} in this data dir", hint="`memoryd scope show`")
        head = self._export_head()
        base_store = SyncBase(self.home)
        collect = Collector(
            out=out,
            machine=document.machine_name(),
            chunk_bytes=int(chunk_size_mb * 1024 * 1024),
            base=base_store.load(),
            embedding=self._embeddings() if include_embeddings else None,
            conflicts=self._open_conflicts(),
        )
        sealer = None
        if passphrase:
            sealer = cipher.Sealer(passphrase, cipher.home_salt(self.home, keep=not self.read_only))
        disputes = self._conflict_files() if sealer is not None else {}
        omitted = self._seal_sensitive(sealer, collect, scopes, wanted, disputes)

        total = sum(1 for _ in self.vault.iter_files()) if progress else 0

        def memories() -> Iterator[dict[str, Any]]:
            nonlocal omitted
            for read, memory in enumerate(self.iter_vault(lambda m: logger.warning("%s", m)), 1):
                if progress is not None and (read % PROGRESS_STEP == 0 or read == total):
                    progress(read, max(read, total))
                if wanted is not None and memory.meta.scope_hash != wanted:
                    continue
                if sensitive(memory, scopes.get(memory.meta.scope_hash)):
                    # No plaintext of a sensitive memory leaves memoryd: sealed, or left out.
                    if sealer is None:
                        omitted += 1
                    else:
                        sealer.add(memory, self._conflict_bodies(memory, disputes))
                        collect.base[memory.slug] = SyncBase.pack(digests(memory))
                    continue
                yield collect.item(memory)

        identity = self._identity_snapshot()
        audit_chain = None
        if include_audit_chain:
            audit_chain = [
                r.model_dump(mode="json")
                for r in self.audit.read()
                if head is not None and r.seq <= head.seq
            ]
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
            encryption=sealer.block if sealer is not None else None,
        )
        size, sha = document.write_document(out, parts)
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
            omitted_reason=(
                (NO_PASSPHRASE if sealer is None else "unreadable encrypted files (see the log)")
                if omitted
                else None
            ),
            encrypted=len(sealer.sealed) if sealer is not None else 0,
            identity_snapshot=identity is not None,
        )

    def _export_head(self) -> AuditRecord | None:
        """The audit line an export names as its chain head (and carries the chain up to):
        the newest, past the read events of earlier sealed exports at the end of the log. An
        export audits its read of a sensitive scope; without this, two exports of one state
        would differ by that line. The next export after a real change carries them."""
        last = self.audit.last_seq()
        window = 16
        while last:
            tail = self.audit.records_after(max(0, last - window))
            for record in reversed(tail):
                if not _export_read(record):
                    return record
            if last - window <= 0:
                return None
            window *= 4
        return None

    def _seal_sensitive(
        self,
        sealer: cipher.Sealer | None,
        collect: Collector,
        scopes: Mapping[str, ScopeInfo],
        wanted: str | None,
        disputes: Mapping[str, list[tuple[str, Path]]],
    ) -> int:
        """Seal the encrypted files of the exported scopes (each read under its grant, with
        its key, before anything is written), each with its open conflicts; without a
        sealer count them, as left out. Returns how many were left out."""
        sealed_scopes = {
            h: encrypted_files(self.home, h)
            for h in sorted(scopes)
            if wanted is None or h == wanted
        }
        flagged = [h for h in sealed_scopes if scopes[h].sensitive or sealed_scopes[h]]
        if sealer is None:
            return sum(len(files) for files in sealed_scopes.values())
        for scope_hash in flagged:
            self.gate.require_scope(scope_hash, "sync export")  # PolicyDenied without a grant
        left = 0
        for scope_hash in flagged:
            files = sealed_scopes[scope_hash]
            opened = 0
            for memory in decrypt_scope(self.home, scope_hash, self.keys):
                sealer.add(memory, self._conflict_bodies(memory, disputes))
                collect.base[memory.slug] = SyncBase.pack(digests(memory))
                opened += 1
            left += len(files) - opened  # unreadable files, logged by name
        return left

    def _open_conflicts(self) -> dict[str, list[dict[str, str]]]:
        """slug → the bodies this side holds in `_conflicts/` against it: an export names
        them, so the other side does not take this body over one it still disputes."""
        folder = self.home / CONFLICTS_DIR
        found: dict[str, list[dict[str, str]]] = {}
        if not folder.is_dir():
            return found
        for path in sorted(folder.glob("*.md")):
            if path.name.startswith("identity."):
                continue
            try:
                remote = parse(path.read_text(encoding="utf-8"), path)
            except (OSError, MemorydError) as exc:
                logger.warning("unreadable conflict file %s: %s", path, exc)
                continue
            sha = hashlib.sha256(remote.body.encode("utf-8")).hexdigest()
            source = path.name[len(remote.slug) + 1 : -3]
            found.setdefault(remote.slug, []).append({"source": source, "body_sha256": sha})
        return found

    def _conflict_files(self) -> dict[str, list[tuple[str, Path]]]:
        """slug → (machine, file) of each conflict file in `_conflicts/`, sealed or not."""
        folder = self.home / CONFLICTS_DIR
        found: dict[str, list[tuple[str, Path]]] = {}
        if not folder.is_dir():
            return found
        for path in sorted(folder.iterdir()):
            stem = path.name.removesuffix(ENCRYPTED_SUFFIX).removesuffix(".md")
            slug, dot, source = stem.partition(".")
            if dot and source and stem != path.name and slug != "identity":
                found.setdefault(slug, []).append((source, path))
        return found

    def _conflict_bodies(
        self, memory: Memory, files: Mapping[str, list[tuple[str, Path]]]
    ) -> list[tuple[str, str]]:
        """(machine, body) of the open conflicts a sealed memory has here: its sealed
        conflict files opened with the scope key (the export holds the grant)."""
        out = []
        for source, path in files.get(memory.slug, []):
            try:
                data = path.read_bytes()
                if path.name.endswith(ENCRYPTED_SUFFIX):
                    stem = path.name.removesuffix(ENCRYPTED_SUFFIX)
                    data = ScopeCipher(self.keys).open(data, memory.meta.scope_hash, stem, path)
                out.append((source, parse(data.decode("utf-8"), path).body))
            except (OSError, UnicodeDecodeError, MemorydError) as exc:
                logger.warning("unreadable conflict file %s: %s", path, exc)
        return out

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

    def _embeddings(self) -> Callable[[str], tuple[list[float], dict[str, Any]] | None]:
        """A memory's stored vectors: its first passage's as mcp-memory-service's
        `embedding`, and all of them exactly (float32, base64) with the model and the
        fingerprint of the text they were made from, so an import can keep them."""
        assert self.vectors is not None
        store = self.vectors.store
        prints = store.fingerprints()

        def get(slug: str) -> tuple[list[float], dict[str, Any]] | None:
            matrix = store.vectors(slug)
            if matrix is None or len(matrix) == 0 or slug not in prints:
                return None
            carried = {
                "model": store.model,
                "dim": store.dim,
                "fingerprint": prints[slug],
                "f32": base64.b64encode(matrix.astype("<f4").tobytes()).decode("ascii"),
            }
            return [round(float(v), 6) for v in matrix[0]], carried

        return get

    # -- import -----------------------------------------------------------------------------
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

    def _open_sealed(
        self, doc: RemoteDocument, passphrase: str | None
    ) -> tuple[list[Memory], Callable[[Memory], bool]]:
        """Every sealed memory of the file, opened (a wrong passphrase or a changed blob
        names the entry; nothing is written), and whether the file disputes a local
        memory's body (one of the bodies its side holds an open conflict with)."""
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

    # -- applying the plan -----------------------------------------------------------------
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


def _export_read(record: AuditRecord) -> bool:
    """An export's audited read of a sensitive scope (`gate.require_scope`)."""
    return record.event_type == "read_allowed" and '"surface":"sync export"' in record.details


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _carried_matrix(carried: dict[str, Any], dim: int) -> npt.NDArray[np.float32] | None:
    """The carried passage vectors (float32, base64), None when they are not `dim` wide."""
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
