"""Engine-neutral parts of a graph store: the values it writes, and the rows it reads back
as memoryd's types. Every engine's store (`kuzu_store`, `falkordb_store`) uses these, so two
engines given the same memories hold and return the same things."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from memoryd.graph.store import EntityRow
from memoryd.models import DecayState, Memory, MemorySummary, MemoryType, Predicate

PER_ENTITY_CACHE = 20_000
"""Entries `mentioning` and `related_entities` keep before starting over (`_per_entity`)."""

MEMORY_COLUMNS = (
    "slug, type, scope_hash, title, body, source, created_at, updated_at, ttl_days,"
    " decay_state, recall_count, last_recalled_at, fingerprint, category, tags, triggers,"
    " sensitive, path"
)
EDGE_KEYS = (
    "newer",
    "older",
    "entity_id",
    "confidence",
    "decided_at",
    "decided_by",
    "reason",
    "status",
    "judge",
)
"""The SupersedeRow fields recall reads of every active edge (`_supersedes_map`)."""


def utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def entity_parts(entity_id: str) -> tuple[str, str]:
    """`entity:library:React` → ("library", "React")."""
    _, _, rest = entity_id.partition(":")
    etype, _, name = rest.partition(":")
    return etype or "concept", name or entity_id


SUMMARY_COLUMNS = (
    "slug, type, title, scope_hash, source, created_at, updated_at, decay_state, tags, recall_count"
)
"""A memory's columns in a `MemorySummary` (lists of memories: no body)."""


def summary(row: Sequence[Any]) -> MemorySummary:
    names = [c.strip() for c in SUMMARY_COLUMNS.split(",")]
    return MemorySummary.model_validate(dict(zip(names, row, strict=True)))


def prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def entity_row(row: list[Any]) -> EntityRow:
    keys = [
        "id",
        "name",
        "type",
        "aliases",
        "context",
        "first_seen_at",
        "last_seen_at",
        "mention_count",
        "scope_hash",
        "decay_state",
    ]
    data = dict(zip(keys, row, strict=True))
    data["aliases"] = data["aliases"] or []
    data["mention_count"] = data["mention_count"] or 0
    data["decay_state"] = data["decay_state"] or "fresh"
    return EntityRow.model_validate(data)


def jsonable(value: Any) -> Any:
    """Engine values (nodes, rels, timestamps) as JSON-friendly Python values."""
    if isinstance(value, datetime):
        return utc(value).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Decimal):  # INT128, e.g. sum() over INT64: a number, not a string
        return int(value) if value == value.to_integral_value() else float(value)
    return json.loads(json.dumps(value, default=str))


# -- writes ---------------------------------------------------------------------------
def memory_params(memory: Memory) -> dict[str, Any]:
    meta = memory.meta
    return {
        "slug": meta.slug,
        "type": meta.type.value,
        "scope_hash": meta.scope_hash,
        "title": meta.title,
        "body": "" if memory.sensitive else memory.body,
        "source": meta.source,
        "created_at": meta.created_at,
        "updated_at": meta.updated_at,
        "ttl_days": meta.ttl_days,
        "decay_state": meta.decay_state.value,
        "recall_count": meta.recall_count,
        "last_recalled_at": meta.last_recalled_at,
        "fingerprint": "" if memory.sensitive else memory.fingerprint,
        "category": meta.category,
        "tags": list(meta.tags),
        "triggers": list(meta.triggers),
        "dura": meta.dura_score.model_dump_json() if meta.dura_score else None,
        "sensitive": memory.sensitive,
        "promoted_from": meta.promoted_from,
        "path": str(memory.path or ""),
    }


@dataclass
class GraphRows:
    """What a batch of memories writes: node parameters, entities, and edges by kind."""

    memories: list[Memory]
    """The memories as the graph holds them (a sensitive one as its skeleton)."""
    mems: list[dict[str, Any]]
    slugs: list[str]
    mentions: dict[tuple[str, str], float]
    """(slug, entity id) → the highest confidence of a mention."""
    entity_rows: dict[str, dict[str, Any]]
    relates: dict[tuple[str, str], list[dict[str, Any]]]
    """(subject kind, object kind) → RELATES edge rows."""


def graph_rows(memories: Sequence[Memory]) -> GraphRows:
    """The nodes and edges a batch of memories describes in its frontmatter."""
    memories = [m.skeleton() if m.sensitive else m for m in memories]
    mems = [memory_params(m) for m in memories]
    slugs = [m["slug"] for m in mems]
    mentions: dict[tuple[str, str], float] = {}
    entity_rows: dict[str, dict[str, Any]] = {}
    relates: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def entity(eid: str) -> None:
        """An entity the batch names; its scope and dates come from its MENTIONS."""
        if eid not in entity_rows:
            etype, name = entity_parts(eid)
            entity_rows[eid] = {"id": eid, "name": name, "type": etype}

    for memory in memories:
        slug = memory.meta.slug
        for eid in memory.meta.observations:
            entity(eid)
            mentions[(slug, eid)] = max(mentions.get((slug, eid), 0.0), 1.0)
        for rel in memory.meta.relations:
            subject = rel.subject or slug
            s_kind = "entity" if subject.startswith("entity:") else "memory"
            o_kind = "entity" if rel.object.startswith("entity:") else "memory"
            if s_kind == "entity":
                entity(subject)
            if o_kind == "entity":
                entity(rel.object)
            if rel.predicate is Predicate.MENTIONS and subject == slug and o_kind == "entity":
                prior = mentions.get((slug, rel.object), 0.0)
                mentions[(slug, rel.object)] = max(prior, rel.confidence)
                continue
            relates.setdefault((s_kind, o_kind), []).append(
                {
                    "s": subject,
                    "o": rel.object,
                    "predicate": rel.predicate.value,
                    "confidence": rel.confidence,
                    "source": slug,
                    "created_at": memory.meta.created_at,
                    "valid_from": rel.valid_from or memory.meta.created_at,
                    "superseded_at": rel.superseded_at,
                    "label": rel.label,
                }
            )
    return GraphRows(memories, mems, slugs, mentions, entity_rows, relates)


def memory_filter(
    scope_hash: str | None, type: MemoryType | None, decay_state: DecayState | None
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause `list_memories` and `count_memories` share, and its parameters."""
    where = []
    params: dict[str, Any] = {}
    if scope_hash is not None:
        where.append("m.scope_hash = $scope")
        params["scope"] = scope_hash
    if type is not None:
        where.append("m.type = $type")
        params["type"] = type.value
    if decay_state is not None:
        where.append("m.decay_state = $state")
        params["state"] = decay_state.value
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


ONE_STATEMENT_MENTIONS = 32
"""A memory's mentions, up to this many, are written by one statement (`one_memory_mentions`):
one statement per memory is cheaper than one per edge (bench/RESULTS.md, s-record2)."""


def one_memory_mentions(mentions: dict[tuple[str, str], float]) -> tuple[str, dict[str, Any]]:
    """One memory's MENTIONS edges ((slug, entity id) → confidence) as one statement: the
    memory and each entity matched by key, every edge in one CREATE. Its entities are
    written first in the same transaction, so each MATCH finds one node."""
    rows = sorted(mentions.items())
    params: dict[str, Any] = {"slug": rows[0][0][0]}
    matches, edges = [], []
    for i, ((_, eid), confidence) in enumerate(rows):
        params[f"id{i}"], params[f"c{i}"] = eid, confidence
        matches.append(f"MATCH (e{i}:Entity {{id: $id{i}}})")
        edges.append(f"(m)-[:MENTIONS {{confidence: CAST($c{i} AS DOUBLE)}}]->(e{i})")
    query = f"MATCH (m:Memory {{slug: $slug}}) {' '.join(matches)} CREATE {', '.join(edges)}"
    return query, params
