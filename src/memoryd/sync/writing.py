"""Writing memories.json (`write_document`): deterministically, top-level keys indented and one
JSON object per line in each array, renamed over the target only when whole (`check_out`);
the file format and reading it are `sync.document`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.errors import InvalidInput
from memoryd.models import Memory, ScopeInfo
from memoryd.sync.document import TO_V5_TYPE, content_hash


def machine_name() -> str:
    """The exporting machine, spelled as mcp-memory-service spells it."""
    name = os.environ.get("COMPUTERNAME") or os.environ.get("HOSTNAME") or platform.node()
    return (name or "unknown").lower().replace(" ", "-")


def epoch(value: datetime) -> float:
    return value.timestamp()


def _line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


@dataclass
class ExportParts:
    """Everything one export holds, already in its final order."""

    metadata: dict[str, Any]
    memories: Iterable[dict[str, Any]]
    entities: Iterable[dict[str, Any]]
    relations: Iterable[dict[str, Any]]
    supersedes_chain: Iterable[dict[str, Any]]
    scopes: list[dict[str, Any]]
    identity_snapshot: dict[str, Any] | None
    large_file_manifest: list[dict[str, Any]]
    audit_chain: list[dict[str, Any]] | None
    encryption: Callable[[], dict[str, Any] | None] | None = None
    """The sealed sensitive memories' block (`sync.cipher`), asked for once `memories[]`
    has been streamed (the plain ones' stream seals those of flagged scopes on the way)."""


def check_out(out: Path) -> None:
    """`out` must be a new path or a regular file: the export is renamed over it, which
    would replace a device (`/dev/full`, as root), a symlink (not its target: the rename
    never follows one), a FIFO or a socket with a plain file. Checked with `lstat` before
    the export starts and again just before the rename."""
    try:
        found = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InvalidInput(f"cannot write {out}: {exc.strerror or exc}") from exc
    if stat.S_ISREG(found.st_mode):
        return
    kind = (
        "a symlink" if stat.S_ISLNK(found.st_mode)
        else "a directory" if stat.S_ISDIR(found.st_mode)
        else "a device" if stat.S_ISCHR(found.st_mode) or stat.S_ISBLK(found.st_mode)
        else "a FIFO" if stat.S_ISFIFO(found.st_mode)
        else "a socket" if stat.S_ISSOCK(found.st_mode)
        else "not a regular file"
    )  # fmt: skip
    raise InvalidInput(
        f"--out {out} is {kind}; the export replaces its target, so it writes only to a new"
        " path or over a regular file; nothing was written",
        hint="give the path of a new file (or of the real file a symlink points to)",
    )


def write_document(out: Path, parts: ExportParts) -> tuple[int, str]:
    """Write atomically (temp file, fsync, rename); returns (bytes, sha256). `out` must be
    a new path or a regular file (`check_out`).

    `total_memories` is filled in from the memories written: they are streamed to a scratch
    file first, so an export of 100k memories never holds them all."""
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
    digest = hashlib.sha256()
    size = 0
    try:
        with tempfile.TemporaryFile(
            "w+", encoding="utf-8", newline="\n", dir=out.parent
        ) as scratch:
            count = _put_array(scratch.write, "memories", parts.memories)
            parts.metadata["total_memories"] = count
            encryption = parts.encryption() if parts.encryption is not None else None
            sealed = len(encryption["memories"]) if encryption is not None else 0
            parts.metadata["encrypted_memories"] = sealed
            scratch.seek(0)
            with tmp.open("w", encoding="utf-8", newline="\n") as fh:

                def put(text: str) -> None:
                    nonlocal size
                    data = text.encode("utf-8")
                    digest.update(data)
                    size += len(data)
                    fh.write(text)

                meta = json.dumps(parts.metadata, ensure_ascii=False, indent=2)
                put('{\n  "export_metadata": ' + meta.replace("\n", "\n  "))
                while block := scratch.read(1 << 20):
                    put(block)
                sections: list[tuple[str, Iterable[dict[str, Any]]]] = [
                    ("entities", parts.entities),
                    ("relations", parts.relations),
                    ("supersedes_chain", parts.supersedes_chain),
                    ("scopes", parts.scopes),
                ]
                for name, items in sections:
                    _put_array(put, name, items)
                snapshot = parts.identity_snapshot
                put(f',\n  "identity_snapshot": {"null" if snapshot is None else _line(snapshot)}')
                _put_array(put, "large_file_manifest", parts.large_file_manifest)
                if parts.audit_chain is not None:
                    _put_array(put, "audit_chain", parts.audit_chain)
                if encryption is not None:
                    put(f',\n  "encryption": {_line(encryption)}')
                put("\n}\n")
                fh.flush()
                os.fsync(fh.fileno())
        check_out(out)  # it may have changed while the export was written
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size, digest.hexdigest()


def _put_array(put: Callable[[str], Any], name: str, items: Iterable[dict[str, Any]]) -> int:
    put(f',\n  "{name}": [')
    count = 0
    for item in items:
        put(("\n    " if count == 0 else ",\n    ") + _line(item))
        count += 1
    put("]" if count == 0 else "\n  ]")
    return count


def memory_item(
    memory: Memory,
    *,
    machine: str,
    body_in_file: str,
    embedding: list[float] | None = None,
    embeddings: dict[str, Any] | None = None,
    open_conflicts: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """One `memories[]` entry: mcp-memory-service's fields, then memoryd's."""
    meta = memory.meta
    updated = meta.updated_at or meta.created_at
    relations = [
        {
            "predicate": r.predicate.value,
            "subject_id": r.subject or f"memory:{meta.slug}",
            "object_id": r.object,
        }
        for r in meta.relations
    ]
    ours: dict[str, Any] = {
        "id": meta.slug,
        "scope": meta.scope_hash,
        "source": meta.source,
        "type": meta.type.value,
        "title": meta.title,
        "supersedes": list(meta.supersedes),
        "decay_state": meta.decay_state.value,
    }
    item: dict[str, Any] = {
        "content": body_in_file,
        "content_hash": content_hash(body_in_file),
        "tags": list(meta.tags),
        "created_at": epoch(meta.created_at),
        "updated_at": epoch(updated),
        "memory_type": TO_V5_TYPE[meta.type],
        "metadata": {"memoryd": ours},
        "export_source": machine,
    }
    if embedding is not None:
        item["embedding"] = embedding
    item.update(
        {
            "id": meta.slug,
            "scope": meta.scope_hash,
            "source": meta.source,
            "frontmatter": meta.to_yaml_dict(),
            "entities": list(meta.observations),
            "relations": relations,
            "supersedes": list(meta.supersedes),
            "decay_state": meta.decay_state.value,
        }
    )
    if embeddings is not None:
        item["embeddings"] = embeddings
    if open_conflicts:
        item["open_conflicts"] = open_conflicts
    return item


def scope_item(info: ScopeInfo) -> dict[str, Any]:
    return info.model_dump(mode="json")
