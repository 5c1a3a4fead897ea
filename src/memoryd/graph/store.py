"""What the service needs from a graph engine, and the rows it gets back.

The graph is the index and the graph of record for entities, relations and the supersedes
chain (DESIGN.md §4). Everything written here is derived from the vault's frontmatter, so a
store can always be rebuilt by `memoryd reindex`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from memoryd.errors import InvalidInput, PolicyDenied
from memoryd.models import DecayState, Memory, MemorySummary, MemoryType, Predicate, Timestamp

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
    status: str = "active"
    """`active` demotes the older memory; a `candidate` waits for a human."""
    judge: str | None = None
    """What judged it: `rule:<name>`, `llm:<provider>/<model>`, or None when a person said so."""
    rules: int | None = None
    """The version of the rules that made an automatic decision (None before versions)."""


def supersede_edges(memory: Memory) -> list[dict[str, Any]]:
    """The SUPERSEDES edges a memory's frontmatter describes: every slug in `supersedes`
    (active, with its decision's provenance when one is kept) and every candidate decision.
    Rejected and undone decisions are history in the file, not edges."""
    decisions = {d.older: d for d in memory.meta.supersede_decisions}
    edges: list[dict[str, Any]] = []
    for older in memory.meta.supersedes:
        d = decisions.get(older)
        edges.append(
            {
                "newer": memory.meta.slug,
                "older": older,
                "at": (d.decided_at if d and d.decided_at else memory.meta.created_at),
                "confidence": d.confidence if d else 1.0,
                "decided_by": d.decided_by if d else "user",
                "status": "active",
                "judge": d.judge if d else None,
                "reason": d.reason if d else None,
                "entity_id": d.entity_id if d else None,
                "rules": d.rules if d else None,
            }
        )
    for d in memory.meta.supersede_decisions:
        if d.status == "candidate" and d.older not in memory.meta.supersedes:
            edges.append(
                {
                    "newer": memory.meta.slug,
                    "older": d.older,
                    "at": d.decided_at or memory.meta.created_at,
                    "confidence": d.confidence,
                    "decided_by": d.decided_by,
                    "status": "candidate",
                    "judge": d.judge,
                    "reason": d.reason,
                    "entity_id": d.entity_id,
                    "rules": d.rules,
                }
            )
    return edges


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


@dataclass(frozen=True)
class GraphCopy:
    """A private, consistent copy of the graph that a sandboxed reader opens read-only."""

    directory: Path
    engine: str
    generation: int
    """The source's `generation` when it was copied: the copy is current while it holds."""
    size: int
    """Bytes in the data file."""


_WRITE_CLAUSE = re.compile(
    r"(?<![.$])\b(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|DROP|ALTER|COPY|LOAD|INSTALL|UNINSTALL|"
    r"ATTACH|IMPORT|EXPORT|CHECKPOINT|BEGIN|COMMIT|ROLLBACK|USE)\b",
    re.IGNORECASE,
)
_CALL = re.compile(r"(?<![.$])\bCALL\b\s*([A-Za-z_][\w.]*)?\s*(\(|=)?", re.IGNORECASE)
_PARAM = re.compile(r"\$(\w+)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")

MEMORY_HINT = (
    "narrow the query: return fewer or smaller values, build no large lists (range(),"
    " collect()) and no cross product of unrelated MATCHes, add a LIMIT"
)
TIME_HINT = (
    "narrow the query: match fewer nodes (a label, a WHERE on a key), follow fewer hops,"
    " add a LIMIT"
)
CO_MENTIONS_FILL = (
    "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
    " WHERE a.id < b.id AND m.decay_state <> 'forgotten'"
    " WITH a, b, count(m) AS n CREATE (a)-[:CO_MENTIONS {n: n}]->(b)"
)
"""Every pair of entities named by one memory that is not forgotten, as a CO_MENTIONS edge
from the lesser id to the other holding how many such memories name both: the migration that
adds the edges fills them so (writes keep them: `CypherGraphStore._move_co_mentions`)."""

READ_ONLY_PROCEDURES = frozenset(
    {
        "current_setting",
        "db_version",
        "show_attached_databases",
        "show_connection",
        "show_functions",
        "show_indexes",
        "show_loaded_extensions",
        "show_macros",
        "show_sequences",
        "show_tables",
        "show_warnings",
        "table_info",
    }
)
"""The procedures a user's `CALL` may name: they describe the schema and the session and
change nothing. Every other one is refused: settings (`CALL threads=1`,
`CALL checkpoint_threshold=1` persist in the database), file readers (`read_csv`), index
and projected-graph builders, graph algorithms."""


def cypher_code(query: str, *, keep_names: bool = False) -> str:
    """`query` as the engine's parser sees its structure: string literals become `''`,
    comments a space, and a `quoted` name `_` (or its text, with `keep_names`, when that is
    a plain identifier). Keyword checks on the result cannot be fooled by a keyword inside a
    string or a comment, nor by a comment that hides a quote."""
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        char = query[i]
        if char in "'\"":
            j = i + 1
            while j < n and query[j] != char:
                j += 2 if query[j] == "\\" else 1
            out.append("''")
            i = j + 1
        elif char == "`":
            j = i + 1
            while j < n and (query[j] != "`" or query.startswith("``", j)):
                j += 2 if query.startswith("``", j) else 1
            name = query[i + 1 : j]
            out.append(name if keep_names and _IDENTIFIER.fullmatch(name) else "_")
            i = j + 1
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        elif query.startswith("//", i):
            j = query.find("\n", i)
            out.append(" ")
            i = n if j < 0 else j
        else:
            out.append(char)
            i += 1
    return "".join(out)


def write_clause(query: str) -> str | None:
    """The first write clause in a Cypher query (outside literals and comments), or None."""
    match = _WRITE_CLAUSE.search(cypher_code(query))
    return match.group(1).upper() if match else None


def refused_call(query: str, procedures: frozenset[str] = READ_ONLY_PROCEDURES) -> str | None:
    """Why a `CALL` in `query` may not run (a setting, or a procedure off the allow-list
    `procedures`, lower case), or None when every CALL names a read-only procedure."""
    for match in _CALL.finditer(cypher_code(query, keep_names=True)):
        name, opener = match.group(1), match.group(2)
        if name is None or opener is None:
            return "CALL must name a procedure, e.g. CALL show_tables() RETURN *"
        if opener == "=":
            return f"CALL {name}=… changes an engine setting"
        if name.lower() not in procedures:
            return f"CALL {name}() is not a read-only procedure"
    return None


def check_page(limit: int, offset: int) -> None:
    """A page's bounds are counts: a negative one is the caller's mistake, refused before any
    engine sees it (kuzu reads a negative LIMIT as an error, SQLite as no limit at all)."""
    if limit < 0 or offset < 0:
        raise InvalidInput(
            f"a page's limit and offset must be 0 or more (got limit {limit}, offset {offset})",
            hint="page with offset 0, limit, 2*limit, … up to the total",
        )


def check_cypher(
    query: str,
    params: Mapping[str, Any] | None = None,
    *,
    procedures: frozenset[str] = READ_ONLY_PROCEDURES,
) -> None:
    """Refuse, before the engine sees it, what a read-only graph query may not do: write
    clauses and CALLs other than the engine's read-only `procedures` (PolicyDenied), more
    than one statement,
    and parameters the query does not use or uses without a value (InvalidInput: kuzu refuses
    an unused one, and reads a missing one as null).

    A short text that passed with the same parameter names is not checked again: memoryd's
    own reads repeat a few texts, several for each `record`. What fails is never kept."""
    names = frozenset(params or ())
    if len(query) <= _KEPT_CHECK_CHARS:
        _checked(query, names, procedures)
    else:
        _check(query, names, procedures)


_KEPT_CHECK_CHARS = 4000


def _check(query: str, names: frozenset[str], procedures: frozenset[str]) -> None:
    clause = write_clause(query)
    if clause is not None:
        raise PolicyDenied(
            f"graph queries are read-only: {clause} is a write clause",
            hint="use `memoryd record` and the entity commands to change the graph",
        )
    refused = refused_call(query, procedures)
    if refused is not None:
        raise PolicyDenied(
            f"graph queries are read-only: {refused}",
            hint="a query may CALL only " + ", ".join(sorted(procedures)),
        )
    code = cypher_code(query)
    if not code.strip(" \t\r\n;"):
        raise InvalidInput(
            "the graph query is empty", hint="e.g. MATCH (m:Memory) RETURN m.title LIMIT 5"
        )
    if sum(1 for part in code.split(";") if part.strip()) > 1:
        raise InvalidInput(
            "a graph query is one statement; this one has several (separated by ;)",
            hint="run the statements one at a time",
        )
    if "$`" in query:
        return  # a quoted parameter name: leave the parameter check to the engine
    used = set(_PARAM.findall(code))
    given = set(names)
    if given - used:
        unused = sorted(given - used)
        listed = ", ".join(f"${name}" for name in unused)
        raise InvalidInput(
            f"parameter {listed} is given but the query does not use it"
            if len(unused) == 1
            else f"parameters {listed} are given but the query does not use them",
            hint="remove it from the parameters, or refer to it in the query",
        )
    if used - given:
        missing = ", ".join(f"${name}" for name in sorted(used - given))
        raise InvalidInput(
            f"the query uses {missing} but no value was given for it",
            hint='give each parameter a value (CLI: --params \'{"name": "value"}\')',
        )


_checked = functools.lru_cache(maxsize=256)(_check)


class GraphStore(Protocol):
    """The small interface every engine implements (kuzu, ladybug, falkordb)."""

    max_fanout: int
    """Neighbours followed per node in a traversal: the hub cap."""
    co_mentions: bool
    """The graph keeps CO_MENTIONS counts (`CO_MENTIONS_FILL`): a pair's co-mentions are
    read from one edge instead of counted over the memories."""

    @property
    def generation(self) -> int:
        """Counts committed write transactions: a cache of graph reads is good while it holds."""
        ...

    @property
    def recall_generation(self) -> int:
        """Counts committed writes that may change what recall reads of the graph (entity
        mentions and relations, supersede edges): recall counts alone do not."""
        ...

    def close(self) -> None: ...

    def replace_with(self, rebuilt: Path) -> None:
        """Put the graph built in the directory `rebuilt` (reindex) in place of this closed
        store's graph; `rebuilt` is gone afterwards."""
        ...

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

    def set_decay_states(self, states: Mapping[str, DecayState]) -> None:
        """Set the decay state of each memory (slug → state); its edges stay."""

    def decay_candidates(self, alive: datetime, dim: datetime, soft: datetime) -> list[list[Any]]:
        """The session memories a decay sweep may move (idle since these instants)."""

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

    def memory_paths_outside(self, prefix: str) -> list[str]:
        """The memory file paths that do not start with `prefix` (a moved home's)."""

    def rebase_memory_paths(self, old_prefix: str, new_prefix: str) -> int:
        """Replace `old_prefix` by `new_prefix` in every memory path holding it; how many."""

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

    def relation_rows(
        self,
        *,
        entity_id: str | None = None,
        predicate: Predicate | None = None,
        include_closed: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[list[Any]]:
        """RELATES edges newest first, as JSON values in `RelationRow`'s field order."""

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult: ...

    def copy_to(self, target: Path) -> GraphCopy:
        """A consistent copy of the committed graph in the new directory `target`."""
        ...

    def memory_rows(self, slugs: Sequence[str]) -> dict[str, MemoryRow]: ...

    def newest_mentioning(self, entity_id: str, limit: int) -> list[MemorySummary]:
        """The `limit` newest memories (not forgotten) mentioning an entity, newest first."""
        ...

    def entity_catalogue(self) -> list[EntityRow]: ...

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]: ...

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]: ...

    def superseded_by(self, slugs: Sequence[str]) -> dict[str, str]: ...

    def supersede_edges(self, slugs: Sequence[str] | None = None) -> dict[str, SupersedeRow]:
        """older → its active SUPERSEDES edge, for these slugs (every one when None)."""

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
