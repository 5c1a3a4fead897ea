"""The official MCP memory server's knowledge graph (`memory.jsonl`), on top of memoryd's graph.

Shared by the MCP tools (`create_entities`, `read_graph`, …) and `memoryd import/export
mcp-memory`, so both write and read the graph the same way.

How the upstream graph maps onto memoryd (lossless for a round trip):

* An observation is one `fact` memory about the entity (title = the text, body
  `"<name>: <text>"`), tagged `mcp-memory`, `entityType:<original type>` and `mcp-seq:<n>`.
  memoryd's entity keeps one of its 7 types (others become `concept`); export restores the
  original `entityType` from the tag. `mcp-seq` (a nanosecond counter) keeps the order of
  observations, entities and relations, since `created_at` has one-second resolution.
* An entity without observations gets one placeholder memory tagged `mcp-memory:empty`;
  it is never exported as an observation.
* A relation is one `fact` memory tagged `mcp-memory:relation` and `relationType:<original>`
  asserting a RELATES edge. Any relationType is accepted: a memoryd predicate written
  another way (`worksOn`, `works on`) or a synonym (`depends on` → `uses`) maps to that
  predicate, anything else is stored as `mentions`; when the name differs from the
  predicate's, the edge (and the frontmatter relation) keep it as `label`, which is what the
  read tools and export return.
* Deleting keeps history: a deleted observation's memory is archived; a deleted relation is
  closed (`superseded_at`) in its memory, which is archived; a deleted entity is removed from
  the frontmatter of every memory naming it and its own facts are archived (see
  `MemoryService.delete_entity`). Archived memories are not shown by the read tools.
* Entities that only occur as relation endpoints (upstream does not require endpoints to
  exist) are not exported as entity lines.
* Limits: observation text is trimmed and empty observations are dropped (memoryd titles
  cannot be blank); entity names are trimmed.

Reading a `memory.jsonl` in (`memoryd import mcp-memory`) is `interop/mcp_memory_import.py`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.errors import NotFound
from memoryd.models import (
    DecayState,
    EntityType,
    GraphFact,
    Memory,
    MemoryDraft,
    MemoryType,
    Predicate,
    RelationRef,
    entity_id,
)

if TYPE_CHECKING:
    from memoryd.protocol import MemoryAPI as GraphService

TAG = "mcp-memory"
RELATION_TAG = "mcp-memory:relation"
EMPTY_TAG = "mcp-memory:empty"
ENTITY_TYPE_PREFIX = "entityType:"
RELATION_TYPE_PREFIX = "relationType:"
SEQ_PREFIX = "mcp-seq:"
PAGE_ROWS = 10_000
"""The most rows one Cypher call returns through the daemon; longer results are paged."""
FactsWriter = Callable[..., Memory]

_last_seq = 0


def all_rows(
    svc: GraphService, query: str, params: dict[str, Any] | None = None
) -> list[list[Any]]:
    """Every row of an `ORDER BY` query, read page by page (the daemon caps a page)."""
    rows: list[list[Any]] = []
    while True:
        page = svc.cypher(
            f"{query} SKIP $skip LIMIT $take",
            {**(params or {}), "skip": len(rows), "take": PAGE_ROWS},
            limit=PAGE_ROWS,
        ).rows
        rows += page
        if len(page) < PAGE_ROWS:
            return rows


def next_seq() -> int:
    """A strictly increasing number (wall clock in ns) that orders what we write."""
    global _last_seq
    _last_seq = max(time.time_ns(), _last_seq + 1)
    return _last_seq


def entity_type_of(value: str) -> EntityType:
    """memoryd's entity type for an upstream `entityType` (`concept` when it has none)."""
    try:
        return EntityType(value.strip().lower())
    except ValueError:
        return EntityType.CONCEPT


# Other ways agents name memoryd's predicates (keys as `relation_key` writes them). Only
# active voice with the same direction: `used_by` would swap the ends, so it is not here.
SYNONYMS: dict[str, Predicate] = {
    "use": Predicate.USES,
    "using": Predicate.USES,
    "utilizes": Predicate.USES,
    "depends_on": Predicate.USES,
    "requires": Predicate.USES,
    "work_on": Predicate.WORKS_ON,
    "working_on": Predicate.WORKS_ON,
    "contributes_to": Predicate.WORKS_ON,
    "prefer": Predicate.PREFERS,
    "likes": Predicate.PREFERS,
    "replaces": Predicate.SUPERSEDES,
    "replaced_by": Predicate.SUPERSEDED_BY,
    "contradicts": Predicate.CONFLICTS_WITH,
    "conflicts": Predicate.CONFLICTS_WITH,
    "references": Predicate.CITES,
    "cite": Predicate.CITES,
    "run_on": Predicate.RUNS_ON,
    "runs_in": Predicate.RUNS_ON,
    "deployed_on": Predicate.RUNS_ON,
    "hosted_on": Predicate.RUNS_ON,
    "part_of": Predicate.BELONGS_TO,
    "member_of": Predicate.BELONGS_TO,
    "belongs": Predicate.BELONGS_TO,
    "located_in": Predicate.LOCATED_AT,
    "based_in": Predicate.LOCATED_AT,
    "lives_in": Predicate.LOCATED_AT,
    "refers_to": Predicate.MENTIONS,
    "mention": Predicate.MENTIONS,
}


def relation_key(relation_type: str) -> str:
    """`worksOn`, `works on`, `Works-On` → `works_on`."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", relation_type.strip())
    return re.sub(r"[\s_-]+", "_", spaced).lower().strip("_")


def predicate_of(relation_type: str) -> Predicate | None:
    """memoryd's predicate for an upstream `relationType` (case, spaces, hyphens and
    camelCase ignored; a few synonyms), None when there is none."""
    key = relation_key(relation_type)
    try:
        return Predicate(key)
    except ValueError:
        return SYNONYMS.get(key)


def relation_ref(src_id: str, dst_id: str, relation_type: str) -> RelationRef:
    """The relation memoryd stores for an upstream one: a predicate, and the original name
    as `label` when it is not exactly the predicate's."""
    predicate = predicate_of(relation_type) or Predicate.MENTIONS
    label = None if relation_type == predicate.value else relation_type.strip()[:200] or None
    return RelationRef(predicate=predicate, subject=src_id, object=dst_id, label=label)


# -- writing --------------------------------------------------------------------------------
def observation_facts(
    name: str,
    etype: str,
    contents: Sequence[str],
    *,
    eid: str | None = None,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> list[GraphFact]:
    """One `fact` memory per observation (blank ones dropped): reindex rebuilds the entity
    from them."""
    eid = eid or entity_id(entity_type_of(etype), name)
    facts = []
    for raw in contents:
        text = raw.strip()
        if not text:
            continue
        draft = MemoryDraft(
            type=MemoryType.FACT,
            title=text[:500],
            body=f"{name}: {text}",
            scope_path=scope_path,
            source=source,
            tags=[TAG, f"{ENTITY_TYPE_PREFIX}{etype}", f"{SEQ_PREFIX}{next_seq()}"],
            allow_duplicate=True,
        )
        facts.append(GraphFact(draft=draft, entity_ids=[eid]))
    return facts


def entity_fact(
    name: str,
    etype: str,
    *,
    eid: str | None = None,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> GraphFact:
    """An entity without observations: a placeholder memory that export leaves out."""
    draft = MemoryDraft(
        type=MemoryType.FACT,
        title=f"{name} ({etype})"[:500],
        body=f"{name} is a {etype}",
        scope_path=scope_path,
        source=source,
        tags=[TAG, EMPTY_TAG, f"{ENTITY_TYPE_PREFIX}{etype}", f"{SEQ_PREFIX}{next_seq()}"],
        allow_duplicate=True,
    )
    return GraphFact(draft=draft, entity_ids=[eid or entity_id(entity_type_of(etype), name)])


def relation_fact(
    src: tuple[str, str],
    dst: tuple[str, str],
    relation_type: str,
    *,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> GraphFact:
    """One `fact` memory asserting `src relation_type dst` (each a (name, entity id) pair)."""
    ref = relation_ref(src[1], dst[1], relation_type)
    text = f"{src[0]} {relation_type} {dst[0]}"
    draft = MemoryDraft(
        type=MemoryType.FACT,
        title=text[:500],
        body=text,
        scope_path=scope_path,
        source=source,
        tags=[
            TAG,
            RELATION_TAG,
            f"{RELATION_TYPE_PREFIX}{relation_type}",
            f"{SEQ_PREFIX}{next_seq()}",
        ],
        allow_duplicate=True,
    )
    return GraphFact(draft=draft, entity_ids=list(dict.fromkeys([src[1], dst[1]])), relations=[ref])


def _write(writer: FactsWriter, fact: GraphFact) -> None:
    writer(fact.draft, entity_ids=fact.entity_ids, relations=fact.relations)


def observe(
    writer: FactsWriter,
    name: str,
    etype: str,
    contents: Sequence[str],
    *,
    eid: str | None = None,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> list[str]:
    """Write `observation_facts` one by one (the MCP tools); returns the texts written."""
    facts = observation_facts(name, etype, contents, eid=eid, source=source, scope_path=scope_path)
    for fact in facts:
        _write(writer, fact)
    return [text for text in (raw.strip() for raw in contents) if text]


def declare_entity(
    writer: FactsWriter,
    name: str,
    etype: str,
    *,
    eid: str | None = None,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> None:
    _write(writer, entity_fact(name, etype, eid=eid, source=source, scope_path=scope_path))


def relate(
    writer: FactsWriter,
    src: tuple[str, str],
    dst: tuple[str, str],
    relation_type: str,
    *,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> None:
    _write(writer, relation_fact(src, dst, relation_type, source=source, scope_path=scope_path))


# -- reading --------------------------------------------------------------------------------
def _tag_value(tags: Sequence[str], prefix: str) -> str | None:
    return next((t[len(prefix) :] for t in tags if t.startswith(prefix)), None)


def _is_relation(tags: Sequence[str]) -> bool:
    """A relation statement (older ones carry only `mcp-memory` and no `entityType:`)."""
    if RELATION_TAG in tags:
        return True
    return TAG in tags and EMPTY_TAG not in tags and _tag_value(tags, ENTITY_TYPE_PREFIX) is None


_EPOCH = datetime.min.replace(tzinfo=UTC)


def _order_key(created: Any, tags: Sequence[str], slug: str) -> tuple[datetime, int, str]:
    when = created if isinstance(created, datetime) else _EPOCH
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seq = _tag_value(tags, SEQ_PREFIX)
    return when, int(seq) if seq and seq.isdigit() else 0, slug


def _observation(name: str, title: str, body: str, tags: Sequence[str]) -> str | None:
    """The observation text a memory shows for entity `name`; None for relation statements
    and empty-entity placeholders."""
    if _is_relation(tags) or EMPTY_TAG in tags:
        return None
    prefix = f"{name}: "
    if _tag_value(tags, ENTITY_TYPE_PREFIX) is not None and body.startswith(prefix):
        return body[len(prefix) :]
    return title


@dataclass
class _EntityRows:
    name: str
    type: str
    memories: list[tuple[tuple[datetime, int, str], str, str, list[str], bool]] = field(
        default_factory=list
    )


def graph_of(
    svc: GraphService,
    entity_ids: Sequence[str],
    *,
    max_observations: int | None = None,
    exact: bool = False,
) -> dict[str, Any]:
    """The upstream `{entities, relations}` shape for these entities and the relations
    touching them. Default (the MCP read tools): entities by name, observations de-duplicated
    and capped at `max_observations`. `exact` (export): everything, in the order written."""
    if not entity_ids:
        return {"entities": [], "relations": []}
    rows = all_rows(
        svc,
        # A sensitive memory is never exported or shown here, grant or not: an export
        # leaves the gate (the graph holds no text of one; this keeps it so).
        "MATCH (e:Entity) WHERE e.id IN $ids OPTIONAL MATCH (m:Memory)-[:MENTIONS]->(e)"
        " WHERE coalesce(m.sensitive, false) = false AND NOT EXISTS"
        " { MATCH (s:Scope) WHERE s.hash = m.scope_hash AND s.sensitive = true }"
        " RETURN e.id, e.name, e.type, m.slug, m.title, m.body, m.tags, m.created_at,"
        " m.decay_state ORDER BY e.id, m.slug",
        {"ids": list(entity_ids)},
    )
    ents: dict[str, _EntityRows] = {}
    for eid, name, etype, slug, title, body, tags, created, state in rows:
        ent = ents.setdefault(eid, _EntityRows(name=name, type=etype))
        if slug is not None:
            tags = list(tags or [])
            live = state != DecayState.FORGOTTEN.value
            order = _order_key(created, tags, slug)
            ent.memories.append((order, title or "", body or "", tags, live))
    entities: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for ent in ents.values():
        ent.memories.sort(key=lambda m: m[0])
        if ent.memories and all(_is_relation(m[3]) for m in ent.memories):
            continue  # only ever named as a relation endpoint
        etype = ent.type
        observations: list[str] = []
        for _, title, body, tags, live in ent.memories:
            original = _tag_value(tags, ENTITY_TYPE_PREFIX)
            if original is not None and etype == ent.type:
                etype = original
            text = _observation(ent.name, title, body, tags)
            if live and text is not None:  # a deleted observation's memory is archived
                observations.append(text)
        if not exact:
            observations = list(dict.fromkeys(observations))[:max_observations]
        first = ent.memories[0][0] if ent.memories else (_EPOCH, 0, "")
        key = (first, ent.name) if exact else (ent.name, first)
        entities.append(
            (key, {"name": ent.name, "entityType": etype, "observations": observations})
        )
    entities.sort(key=lambda e: e[0])
    return {"entities": [e for _, e in entities], "relations": _relations(svc, entity_ids, exact)}


def _relations(svc: GraphService, entity_ids: Sequence[str], exact: bool) -> list[dict[str, str]]:
    rows = all_rows(
        svc,
        "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE r.superseded_at IS NULL"
        " AND (a.id IN $ids OR b.id IN $ids)"
        " RETURN a.name, b.name, r.predicate, r.source_memory, r.created_at, r.label"
        " ORDER BY a.id, b.id, r.source_memory, r.predicate, r.label",
        {"ids": list(entity_ids)},
    )
    slugs = sorted({r[3] for r in rows if r[3]})
    tags_of: dict[str, list[str]] = {}
    if slugs:
        found = all_rows(
            svc,
            "MATCH (m:Memory) WHERE m.slug IN $slugs RETURN m.slug, m.tags ORDER BY m.slug",
            {"slugs": slugs},
        )
        tags_of = {slug: list(tags or []) for slug, tags in found}
    keyed: list[tuple[tuple[Any, ...], dict[str, str]]] = []
    for a, b, predicate, slug, created, label in rows:
        tags = tags_of.get(slug or "", [])
        kind = _relation_type(predicate, label, tags)
        order = _order_key(created, tags, slug or "")
        key = (order, a, b) if exact else (a, b, kind, order)
        keyed.append((key, {"from": a, "to": b, "relationType": kind}))
    keyed.sort(key=lambda r: r[0])
    seen: set[tuple[str, str, str]] = set()
    out = []
    for _, rel in keyed:
        triple = (rel["from"], rel["to"], rel["relationType"])
        if triple not in seen:
            seen.add(triple)
            out.append(rel)
    return out


def _relation_type(predicate: str, label: str | None, tags: Sequence[str]) -> str:
    """The relationType shown for an edge: the exact upstream name (tag), else the edge's
    label, else the predicate."""
    return _tag_value(tags, RELATION_TYPE_PREFIX) or label or predicate


def all_entity_ids(svc: GraphService) -> list[str]:
    rows = all_rows(svc, "MATCH (e:Entity) RETURN e.id ORDER BY e.id")
    return [r[0] for r in rows]


def ids_named(svc: GraphService, names: Sequence[str]) -> list[str]:
    rows = all_rows(
        svc,
        "MATCH (e:Entity) WHERE e.name IN $names RETURN e.id ORDER BY e.id",
        {"names": list(names)},
    )
    return [r[0] for r in rows]


def export_graph(svc: GraphService) -> dict[str, Any]:
    """The whole graph in the upstream shape, in the order it was written."""
    return graph_of(svc, all_entity_ids(svc), exact=True)


def to_jsonl(graph: dict[str, Any]) -> str:
    """Upstream's file: entities then relations, fixed key order, no trailing newline."""
    lines = [
        json.dumps(
            {
                "type": "entity",
                "name": e["name"],
                "entityType": e["entityType"],
                "observations": e["observations"],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for e in graph["entities"]
    ]
    lines += [
        json.dumps(
            {
                "type": "relation",
                "from": r["from"],
                "to": r["to"],
                "relationType": r["relationType"],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for r in graph["relations"]
    ]
    return "\n".join(lines)


def write_jsonl(graph: dict[str, Any], path: Path) -> None:
    """Write atomically (temp file + rename), as upstream does."""
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(to_jsonl(graph))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- deleting (the MCP delete tools) -------------------------------------------------------
def delete_entities(svc: GraphService, names: Sequence[str]) -> list[str]:
    """Delete the entities with these exact names (every type of that name) and, with them,
    their observations and the relations touching them. Unknown names are ignored."""
    deleted = []
    for eid in dict.fromkeys(ids_named(svc, names)):
        try:
            deleted.append(svc.delete_entity(eid).name)
        except NotFound:
            continue  # gone meanwhile (deleted through another name of the same entity)
    return list(dict.fromkeys(deleted))


@dataclass
class ObservationsDeleted:
    deleted: int = 0
    kept: list[dict[str, str]] = field(default_factory=list)
    """Observations that come from a memory the graph tools did not write (a decision, a
    session note): memoryd does not archive those for a graph edit."""


def delete_observations(svc: GraphService, name: str, texts: Sequence[str]) -> ObservationsDeleted:
    """Archive the memories holding these observations of the entity named `name`. An
    unknown entity or text is ignored, as upstream does."""
    out = ObservationsDeleted()
    wanted = set(texts)
    if not wanted:
        return out
    rows = all_rows(
        svc,
        "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) WHERE e.name = $n AND m.decay_state <> $gone"
        " RETURN DISTINCT m.slug, m.title, m.body, m.tags ORDER BY m.slug",
        {"n": name, "gone": DecayState.FORGOTTEN.value},
    )
    for slug, title, body, tags in rows:
        tags = list(tags or [])
        text = _observation(name, title or "", body or "", tags)
        if text is None or text not in wanted:
            continue
        if TAG in tags:
            svc.archive(slug)
            out.deleted += 1
        else:
            out.kept.append({"entityName": name, "observation": text, "memory": slug})
    return out


def delete_relation(svc: GraphService, src: str, dst: str, relation_type: str) -> int:
    """Close the current relations `src relation_type dst` (exact names and type, as
    upstream matches them); the graph-tool facts that stated them are archived. Returns how
    many memories changed; none match is not an error."""
    rows = all_rows(
        svc,
        "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE a.name = $a AND b.name = $b"
        " AND r.superseded_at IS NULL"
        " OPTIONAL MATCH (m:Memory {slug: r.source_memory})"
        " RETURN a.id, b.id, r.predicate, r.label, r.source_memory, m.tags"
        " ORDER BY r.source_memory, a.id, b.id, r.predicate, r.label",
        {"a": src, "b": dst},
    )
    by_memory: dict[str, list[RelationRef]] = {}
    for a_id, b_id, predicate, label, slug, tags in rows:
        if not slug or _relation_type(predicate, label, list(tags or [])) != relation_type:
            continue
        ref = RelationRef(predicate=Predicate(predicate), subject=a_id, object=b_id, label=label)
        by_memory.setdefault(slug, []).append(ref)
    for slug, refs in by_memory.items():
        svc.close_relations(slug, refs)
    return len(by_memory)
