"""What one export collects while it streams the vault: each memory's `memories[]` line, and
the relations, supersedes edges, referenced entities and large-body chunks that the
sections after `memories[]` list."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.graph.store import EntityRow, supersede_edges
from memoryd.models import Memory, format_ts
from memoryd.sync import document, writing
from memoryd.sync.base import SyncBase
from memoryd.sync.merge import digests
from memoryd.vault import atomic_write

Row = tuple[tuple[Any, ...], dict[str, Any]]
PREVIEW_CHARS = 1000
"""How much of a chunked body stays in `content`, for readers that only know that field."""


def _ts(value: Any) -> str | None:
    return format_ts(value) if value is not None else None


def _kind(node: str) -> str:
    return "entity" if node.startswith("entity:") else "memory"


@dataclass
class Collector:
    out: Path
    machine: str
    chunk_bytes: int
    base: dict[str, str]
    embedding: Callable[[str], tuple[list[float], dict[str, Any]] | None] | None = None
    """slug → its first passage vector (v5's `embedding`) and all its vectors, exactly."""
    conflicts: Mapping[str, list[dict[str, str]]] = field(default_factory=dict)
    """slug → the bodies this side holds open conflicts with (`_conflicts/`)."""
    memories: int = 0
    entities: int = 0
    referenced: set[str] = field(default_factory=set)
    relations: list[Row] = field(default_factory=list)
    supersedes: list[Row] = field(default_factory=list)
    manifest: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)

    def item(self, memory: Memory) -> dict[str, Any]:
        """The memory's line, and what the later sections need from it."""
        meta = memory.meta
        self.memories += 1
        self.base[meta.slug] = SyncBase.pack(digests(memory))
        in_file, pointer = self._body(memory)
        vectors = self.embedding(meta.slug) if self.embedding is not None else None
        item = writing.memory_item(
            memory,
            machine=self.machine,
            body_in_file=in_file,
            embedding=vectors[0] if vectors is not None else None,
            embeddings=vectors[1] if vectors is not None else None,
            open_conflicts=self.conflicts.get(meta.slug),
        )
        if pointer is not None:
            item["large_file_pointer"] = pointer
        self.referenced.update(meta.observations)
        for rel in meta.relations:
            self.referenced.update(
                e for e in (rel.subject or "", rel.object) if _kind(e) == "entity"
            )
            subject = rel.subject or f"memory:{meta.slug}"
            row = {
                "subject_id": subject,
                "subject_kind": _kind(rel.subject or "memory"),
                "predicate": rel.predicate.value,
                "object_id": rel.object,
                "object_kind": _kind(rel.object),
                "source_memory_id": meta.slug,
                "scope_hash": meta.scope_hash,
                "confidence": rel.confidence,
                "created_at": format_ts(meta.created_at),
                "valid_from": _ts(rel.valid_from),
                "superseded_at": _ts(rel.superseded_at),
                "label": rel.label,
            }
            self.relations.append(((meta.slug, subject, row["predicate"], rel.object), row))
        for edge in supersede_edges(memory):
            row = {
                "newer_memory_id": edge["newer"],
                "older_memory_id": edge["older"],
                "entity_id": edge["entity_id"],
                "confidence": edge["confidence"],
                "decided_at": format_ts(edge["at"]),
                "decided_by": edge["decided_by"],
                "reason": edge["reason"],
                "status": edge["status"],
                "judge": edge["judge"],
            }
            self.supersedes.append(((edge["newer"], edge["older"]), row))
        return item

    def _body(self, memory: Memory) -> tuple[str, dict[str, Any] | None]:
        """The body in `content`, or, above the chunk size, a preview and a pointer to the
        chunk file that holds it whole."""
        raw = memory.body.encode("utf-8")
        if len(raw) <= self.chunk_bytes:
            return memory.body, None
        sha = hashlib.sha256(raw).hexdigest()
        target = document.chunk_path(self.out, sha)
        if not (target.is_file() and target.stat().st_size == len(raw)):
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, raw)
        self.chunks.append(str(target))
        name = f"{self.out.name}.chunks/{sha}.bin"
        self.manifest.append(
            {"memory_id": memory.slug, "sha256": sha, "bytes": len(raw), "path": name}
        )
        preview = (
            f"{memory.body[:PREVIEW_CHARS].rstrip()} …\n\n"
            f"[memoryd: the whole body ({len(raw)} bytes) is in {name}]"
        )
        return preview, {"sha256": sha, "bytes": len(raw), "path": name}

    @staticmethod
    def sorted_rows(rows: list[Row]) -> Iterator[dict[str, Any]]:
        yield from (row for _, row in sorted(rows, key=lambda r: r[0]))

    def entity_rows(
        self, catalogue: Callable[[], list[EntityRow]], merged_into: Mapping[str, str]
    ) -> Iterator[dict[str, Any]]:
        """The entities the exported memories name, with their aliases and the ids merged
        into them (so the importing side can replay the merges)."""
        merged: dict[str, list[str]] = {}
        for drop, keep in merged_into.items():
            merged.setdefault(keep, []).append(drop)
        for row in sorted(catalogue(), key=lambda e: e.id):
            if row.id not in self.referenced:
                continue
            item = row.model_dump(mode="json")
            item["aliases"] = sorted(row.aliases)
            item["merged"] = sorted(merged.get(row.id, []))
            self.entities += 1
            yield item

    def drop_stale_chunks(self) -> None:
        """Chunk files of bodies this export no longer holds."""
        folder = document.chunk_path(self.out, "x").parent
        if folder.is_dir():
            keep = {Path(c).name for c in self.chunks}
            for stale in folder.glob("*.bin"):
                if stale.name not in keep:
                    stale.unlink(missing_ok=True)
