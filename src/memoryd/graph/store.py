"""What the service needs from a graph engine, and the rows it gets back.

The graph is the index and the graph of record for entities, relations and the supersedes
chain (DESIGN.md §4). Everything written here is derived from the vault's frontmatter, so a
store can always be rebuilt by `memoryd reindex`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from memoryd.models import DecayState, Memory, MemorySummary, MemoryType, Timestamp

NodeKind = Literal["memory", "entity"]


class MemoryRow(BaseModel):
    """A memory as the graph holds it (no body for sensitive memories)."""

    slug: str
    type: MemoryType
    scope_hash: str
    title: str
    body: str
    source: str
    created_at: Timestamp
    updated_at: Timestamp | None
    ttl_days: int | None
    decay_state: DecayState
    recall_count: int
    last_recalled_at: Timestamp | None
    fingerprint: str
    category: str | None
    tags: list[str]
    triggers: list[str]
    sensitive: bool
    path: str


class EntityRow(BaseModel):
    id: str
    name: str
    type: str
    aliases: list[str] = Field(default_factory=list)
    context: str | None = None
    first_seen_at: Timestamp | None = None
    last_seen_at: Timestamp | None = None
    mention_count: int = 0
    scope_hash: str | None = None
    decay_state: str = "fresh"


class RelationRow(BaseModel):
    subject_id: str
    subject_kind: NodeKind
    predicate: str
    object_id: str
    object_kind: NodeKind
    confidence: float
    source_memory: str | None
    created_at: Timestamp | None = None
    valid_from: Timestamp | None = None
    superseded_at: Timestamp | None = None
    label: str | None = None
    """The source's own name for the relation when it is not the predicate's."""


class SupersedeRow(BaseModel):
    newer: str
    older: str
    entity_id: str | None = None
    confidence: float = 1.0
    decided_at: Timestamp | None = None
    decided_by: str = "user"
    reason: str | None = None


class EntityContext(BaseModel):
    """An entity with its relations, and the memories about it, current ones first."""

    entity: EntityRow
    relations: list[list[Any]]
    memories: list[MemorySummary]
    superseded: list[str] = Field(default_factory=list)


class CypherResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False


_WRITE_CLAUSE = re.compile(
    r"\b(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|DROP|ALTER|COPY|LOAD|INSTALL|ATTACH|IMPORT|EXPORT|"
    r"CHECKPOINT|BEGIN|COMMIT|ROLLBACK|USE)\b",
    re.IGNORECASE,
)
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`")


def write_clause(query: str) -> str | None:
    """The first write clause in a Cypher query (outside string literals), or None."""
    match = _WRITE_CLAUSE.search(_STRING_LITERAL.sub("''", query))
    return match.group(1).upper() if match else None


MAX_RANGE_VALUES = 1_000_000
"""The most values one `range()` in a read query may build. The engine builds the whole list
in memory before its timeout can fire (`range(1, 10^8)` needs 7 GB), so the bound is
checked before the query runs."""
_RANGE_CALL = re.compile(r"\b(?:list_)?range\s*\(", re.IGNORECASE)
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_ARITHMETIC = re.compile(r"[0-9+\-*/%() \t\n]+")


def oversized_range(query: str, params: dict[str, Any] | None = None) -> int | None:
    """How many values the largest constant `range(start, stop[, step])` in `query` would
    build, when that is more than MAX_RANGE_VALUES; else None.

    Bounds given as integer arithmetic over literals and parameters are evaluated; a bound
    that depends on the data (`range(0, size(e.aliases))`) is bounded by the data itself.
    """
    text = _STRING_LITERAL.sub("''", query)
    worst = 0
    for match in _RANGE_CALL.finditer(text):
        args = _call_arguments(text, match.end())
        values = [_constant_int(arg, params or {}) for arg in args]
        bounds = [v for v in values if v is not None]
        if len(bounds) != len(values) or len(bounds) not in (2, 3):
            continue
        start, stop = bounds[0], bounds[1]
        step = bounds[2] if len(bounds) == 3 else 1
        if step == 0:
            continue
        worst = max(worst, (stop - start) // step + 1)
    return worst if worst > MAX_RANGE_VALUES else None


def _call_arguments(text: str, start: int) -> list[str]:
    """The top-level, comma-separated arguments of the call whose "(" ends at `start`."""
    depth = 0
    args: list[str] = []
    current: list[str] = []
    for char in text[start:]:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                args.append("".join(current))
                return args
            depth -= 1
        elif char == "," and depth == 0:
            args.append("".join(current))
            current = []
            continue
        current.append(char)
    return []


def _constant_int(expr: str, params: dict[str, Any]) -> int | None:
    """The value of integer arithmetic over literals and int parameters, or None."""

    def value(match: re.Match[str]) -> str:
        found = params.get(match.group(1))
        is_int = isinstance(found, int) and not isinstance(found, bool)
        return f"({found})" if is_int else "?"

    source = _PARAM.sub(value, expr).strip()
    if not source or not _ARITHMETIC.fullmatch(source) or "**" in source:
        return None
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        return None
    return _evaluate(tree.body)


def _evaluate(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _evaluate(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right != 0:
            return left % right if isinstance(node.op, ast.Mod) else int(left / right)
    return None


class GraphStore(Protocol):
    """The small interface every engine implements (kuzu and ladybug today)."""

    max_fanout: int
    """Neighbours followed per node in a traversal: the hub cap."""

    @property
    def generation(self) -> int:
        """Counts committed write transactions: a cache of graph reads is good while it holds."""
        ...

    def close(self) -> None: ...

    def schema_version(self) -> int: ...

    def upsert_memories(
        self, memories: Sequence[Memory], *, link_memories: bool = True, new: bool = False
    ) -> None:
        """Write memory nodes and every edge their frontmatter describes, in one transaction."""

    def link_memories(self, memories: Sequence[Memory]) -> None:
        """(Re)write the memory→memory edges (supersedes, promoted_from) once all nodes exist."""

    def delete_memories(self, slugs: Sequence[str]) -> None: ...

    def set_recall(
        self, slug: str, *, recall_count: int, last_recalled_at: datetime, decay_state: DecayState
    ) -> None: ...

    def get_memory(self, slug: str) -> MemoryRow | None: ...

    def list_memories(
        self,
        *,
        scope_hash: str | None = None,
        type: MemoryType | None = None,
        decay_state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]: ...

    def count_memories(
        self,
        *,
        scope_hash: str | None = None,
        type: MemoryType | None = None,
        decay_state: DecayState | None = None,
    ) -> int: ...

    def memory_slugs(self) -> set[str]: ...

    def find_by_fingerprint(self, scope_hash: str, fingerprint: str) -> str | None: ...

    def find_fingerprints(self, scope_hash: str, fingerprints: Sequence[str]) -> dict[str, str]:
        """Fingerprint → the oldest slug holding it, for those that exist in the scope."""

    def upsert_scope(
        self, scope_hash: str, path: str, sensitive: bool, aliases: list[str]
    ) -> None: ...

    def get_entity(self, entity_id: str) -> EntityRow | None: ...

    def list_entities(
        self,
        *,
        type: str | None = None,
        query: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[EntityRow]: ...

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult: ...

    def memory_rows(self, slugs: Sequence[str]) -> dict[str, MemoryRow]: ...

    def entity_catalogue(self) -> list[EntityRow]: ...

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]: ...

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]: ...

    def superseded_by(self, slugs: Sequence[str]) -> dict[str, str]: ...

    def supersedes_map(self) -> dict[str, str]: ...

    def supersedes_chain(self, slug: str) -> list[SupersedeRow]: ...

    def neighbourhood(self, entity_id: str, *, depth: int = 1) -> CypherResult: ...

    def add_entity_aliases(self, entity_id: str, aliases: Sequence[str]) -> None: ...

    def merge_entities(self, keep: str, drop: str) -> None: ...

    def delete_entity(self, entity_id: str) -> None:
        """Remove the entity node and the edges still touching it."""

    def record_recalls(self, recalls: Mapping[str, tuple[int, datetime]]) -> dict[str, int]:
        """Add (n, at) recalls to each memory and revive it; returns the new counts."""

    def snapshot(self) -> dict[str, list[Any]]:
        """Every node and edge in a canonical order: two equal graphs give equal snapshots."""
