"""Sync export: this data dir as one memories.json (`sync.export.Collector` writes it), with
its sensitive memories sealed under a passphrase, the body conflicts an import left, the
identity profile and the carried vectors; the base of the sync job (`domain.syncing.Syncing`).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import platform
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.domain.core import PROGRESS_STEP, ServiceCore
from memoryd.errors import InvalidInput, MemorydError, NotFound
from memoryd.graph.store import EntityRow
from memoryd.models import AuditRecord, Memory, ScopeInfo
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.files import ScopeCipher, decrypt_scope, encrypted_files
from memoryd.vault import ENCRYPTED_SUFFIX, parse

if TYPE_CHECKING:
    from memoryd.sync import cipher
    from memoryd.sync.export import Collector
    from memoryd.sync.models import ExportReport

logger = logging.getLogger(__name__)


NO_PASSPHRASE = (
    "no passphrase given: a sensitive memory leaves only sealed with one"
    " (`sync export --encrypt` asks for it, or --passphrase-file)"
)


CONFLICTS_DIR = "_conflicts"
IDENTITY = Path("profile") / "identity.md"


def _export_read(record: AuditRecord) -> bool:
    """An export's audited read of a sensitive scope (`gate.require_scope`)."""
    return record.event_type == "read_allowed" and '"surface":"sync export"' in record.details


class SyncExporting(ServiceCore):
    """memories.json export, and the conflict files an import left."""

    iter_vault: Callable[..., Iterator[Memory]]
    """Provided by `domain.maintenance.Maintenance`."""
    flush_recall_stats: Callable[..., int]
    """Provided by `domain.recalling.Recalling`."""
    _key_scope: Callable[[ScopeInfo], ScopeKey]
    """Provided by `domain.sensitivity.Sensitivity`: a scope's key, key pair and marker."""
    alias_entity: Callable[[str, str], EntityRow]
    merge_entities: Callable[[str, str], EntityRow]
    """Provided by `domain.entities.Entities`."""

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
        from memoryd.governance.analyze import sensitive
        from memoryd.sync import cipher, document, writing
        from memoryd.sync.base import SyncBase
        from memoryd.sync.export import Collector
        from memoryd.sync.merge import digests
        from memoryd.sync.models import ExportReport
        from memoryd.sync.writing import ExportParts

        if chunk_size_mb <= 0:
            raise InvalidInput(f"--chunk-size-mb must be above 0 (got {chunk_size_mb})")
        if include_embeddings and self.vectors is None:
            raise InvalidInput(
                "no embeddings are stored here, so --include-embeddings has nothing to export",
                hint="install the vectors extra (memoryd[vectors]) and run `memoryd reindex`",
            )
        out = Path(out)
        writing.check_out(out)  # before any work: a device or a symlink is never replaced
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
            machine=writing.machine_name(),
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
                writing.scope_item(s)
                for h, s in sorted(scopes.items())
                if wanted is None or h == wanted
            ],
            identity_snapshot=identity,
            large_file_manifest=collect.manifest,
            audit_chain=audit_chain,
            encryption=sealer.block if sealer is not None else None,
        )
        size, sha = writing.write_document(out, parts)
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
        from memoryd.sync.base import SyncBase
        from memoryd.sync.merge import digests

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
