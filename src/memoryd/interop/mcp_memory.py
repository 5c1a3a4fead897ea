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
  asserting a RELATES edge. Types that are not memoryd predicates are stored as `mentions`;
  export restores the original name from the tag.
* Entities that only occur as relation endpoints (upstream does not require endpoints to
  exist) are not exported as entity lines.
* Limits: observation text is trimmed and empty observations are dropped (memoryd titles
  cannot be blank); entity names are trimmed.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.errors import InvalidInput, MemorydError
from memoryd.models import (
    EntityType,
    Memory,
    MemoryDraft,
    MemoryType,
    Predicate,
    RelationRef,
    entity_id,
)

if TYPE_CHECKING:
    from memoryd.daemon.client import RemoteService
    from memoryd.service import MemoryService

    GraphService = MemoryService | RemoteService

TAG = "mcp-memory"
RELATION_TAG = "mcp-memory:relation"
EMPTY_TAG = "mcp-memory:empty"
ENTITY_TYPE_PREFIX = "entityType:"
RELATION_TYPE_PREFIX = "relationType:"
SEQ_PREFIX = "mcp-seq:"
ROW_LIMIT = 10_000_000
FactsWriter = Callable[..., Memory]

_last_seq = 0


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


def predicate_of(relation_type: str) -> Predicate | None:
    """memoryd's predicate for an upstream `relationType`, None when there is none."""
    try:
        return Predicate(relation_type)
    except ValueError:
        return None


# -- writing --------------------------------------------------------------------------------
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
    """One `fact` memory per observation: reindex rebuilds the entity from it."""
    eid = eid or entity_id(entity_type_of(etype), name)
    added = []
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
        writer(draft, entity_ids=[eid])
        added.append(text)
    return added


def declare_entity(
    writer: FactsWriter,
    name: str,
    etype: str,
    *,
    eid: str | None = None,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> None:
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
    writer(draft, entity_ids=[eid or entity_id(entity_type_of(etype), name)])


def relate(
    writer: FactsWriter,
    src: tuple[str, str],
    dst: tuple[str, str],
    relation_type: str,
    *,
    source: str = "mcp",
    scope_path: Path | None = None,
) -> None:
    """One `fact` memory asserting `src relation_type dst` (each a (name, entity id) pair)."""
    predicate = predicate_of(relation_type) or Predicate.MENTIONS
    ref = RelationRef(predicate=predicate, subject=src[1], object=dst[1])
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
    writer(draft, entity_ids=list(dict.fromkeys([src[1], dst[1]])), relations=[ref])


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


@dataclass
class _EntityRows:
    name: str
    type: str
    memories: list[tuple[tuple[datetime, int, str], str, str, list[str]]] = field(
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
    rows = svc.cypher(
        "MATCH (e:Entity) WHERE e.id IN $ids OPTIONAL MATCH (m:Memory)-[:MENTIONS]->(e)"
        " RETURN e.id, e.name, e.type, m.slug, m.title, m.body, m.tags, m.created_at",
        {"ids": list(entity_ids)},
        limit=ROW_LIMIT,
    ).rows
    ents: dict[str, _EntityRows] = {}
    for eid, name, etype, slug, title, body, tags, created in rows:
        ent = ents.setdefault(eid, _EntityRows(name=name, type=etype))
        if slug is not None:
            tags = list(tags or [])
            ent.memories.append((_order_key(created, tags, slug), title or "", body or "", tags))
    entities: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for ent in ents.values():
        ent.memories.sort(key=lambda m: m[0])
        if ent.memories and all(_is_relation(m[3]) for m in ent.memories):
            continue  # only ever named as a relation endpoint
        etype = ent.type
        observations: list[str] = []
        for _, title, body, tags in ent.memories:
            original = _tag_value(tags, ENTITY_TYPE_PREFIX)
            if original is not None and etype == ent.type:
                etype = original
            if _is_relation(tags) or EMPTY_TAG in tags:
                continue
            prefix = f"{ent.name}: "
            if original is not None and body.startswith(prefix):
                observations.append(body[len(prefix) :])
            else:
                observations.append(title)
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
    rows = svc.cypher(
        "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE r.superseded_at IS NULL"
        " AND (a.id IN $ids OR b.id IN $ids)"
        " RETURN a.name, b.name, r.predicate, r.source_memory, r.created_at",
        {"ids": list(entity_ids)},
        limit=ROW_LIMIT,
    ).rows
    slugs = sorted({r[3] for r in rows if r[3]})
    tags_of: dict[str, list[str]] = {}
    if slugs:
        found = svc.cypher(
            "MATCH (m:Memory) WHERE m.slug IN $slugs RETURN m.slug, m.tags",
            {"slugs": slugs},
            limit=ROW_LIMIT,
        ).rows
        tags_of = {slug: list(tags or []) for slug, tags in found}
    keyed: list[tuple[tuple[Any, ...], dict[str, str]]] = []
    for a, b, predicate, slug, created in rows:
        tags = tags_of.get(slug or "", [])
        kind = _tag_value(tags, RELATION_TYPE_PREFIX) or predicate
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


def all_entity_ids(svc: GraphService) -> list[str]:
    rows = svc.cypher("MATCH (e:Entity) RETURN e.id", limit=ROW_LIMIT).rows
    return [r[0] for r in rows]


def ids_named(svc: GraphService, names: Sequence[str]) -> list[str]:
    rows = svc.cypher(
        "MATCH (e:Entity) WHERE e.name IN $names RETURN e.id", {"names": list(names)}, limit=10_000
    ).rows
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


# -- import ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class EntityLine:
    line: int
    name: str
    entity_type: str
    observations: list[str]


@dataclass(frozen=True)
class RelationLine:
    line: int
    source: str
    target: str
    relation_type: str


@dataclass
class ParsedGraph:
    entities: list[EntityLine] = field(default_factory=list)
    relations: list[RelationLine] = field(default_factory=list)
    ignored_lines: list[int] = field(default_factory=list)


def _string(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{where}: `{key}` must be a non-empty string")
    return value


def parse_jsonl(text: str, *, source: str = "<input>") -> ParsedGraph:
    """Parse and check every line first, so a malformed file writes nothing. Blank lines and
    lines whose `type` is neither `entity` nor `relation` are skipped, as upstream does."""
    graph = ParsedGraph()
    hint = "fix that line (one JSON object per line, as written by the MCP memory server)"
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{source} line {number}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: not valid JSON ({exc.msg})", hint=hint) from exc
        if not isinstance(obj, dict):
            raise InvalidInput(f"{where}: expected a JSON object", hint=hint)
        kind = obj.get("type")
        try:
            if kind == "entity":
                observations = obj.get("observations", [])
                if not isinstance(observations, list) or not all(
                    isinstance(o, str) for o in observations
                ):
                    raise InvalidInput(f"{where}: `observations` must be a list of strings")
                graph.entities.append(
                    EntityLine(
                        number,
                        _string(obj, "name", where).strip(),
                        _string(obj, "entityType", where),
                        observations,
                    )
                )
            elif kind == "relation":
                graph.relations.append(
                    RelationLine(
                        number,
                        _string(obj, "from", where).strip(),
                        _string(obj, "to", where).strip(),
                        _string(obj, "relationType", where),
                    )
                )
            else:
                graph.ignored_lines.append(number)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, hint=hint) from exc
    return graph


@dataclass
class ImportReport:
    entities_created: int = 0
    observations_added: int = 0
    relations_added: int = 0
    ignored_lines: list[int] = field(default_factory=list)


def _pick(ids: Sequence[str], wanted: EntityType) -> str | None:
    prefix = f"entity:{wanted.value}:"
    return next((i for i in ids if i.startswith(prefix)), ids[0] if ids else None)


def import_graph(
    svc: GraphService,
    graph: ParsedGraph,
    *,
    scope_path: Path | None = None,
    source: str = "mcp-memory-import",
) -> ImportReport:
    """Write a parsed upstream graph through the MCP tools' path (`record_graph_facts`).

    Idempotent: observations already stored for the entity (counted, so repeated texts
    survive) and relations already present are skipped."""
    writer: FactsWriter = svc.record_graph_facts
    scope = scope_path
    report = ImportReport(ignored_lines=list(graph.ignored_lines))
    current = export_graph(svc)
    have_obs = {e["name"]: Counter(e["observations"]) for e in current["entities"]}
    have_rels = {(r["from"], r["to"], r["relationType"]) for r in current["relations"]}
    by_name: dict[str, list[str]] = {}
    for eid, name in svc.cypher("MATCH (e:Entity) RETURN e.id, e.name", limit=ROW_LIMIT).rows:
        by_name.setdefault(name, []).append(eid)

    declared = _names(current)
    for ent in graph.entities:
        mapped = entity_type_of(ent.entity_type)
        eid = _pick(by_name.get(ent.name, []), mapped) or entity_id(mapped, ent.name)
        counter = have_obs.setdefault(ent.name, Counter())
        fresh = []
        for text in (o.strip() for o in ent.observations):
            if not text:
                continue
            if counter[text] > 0:
                counter[text] -= 1
            else:
                fresh.append(text)
        try:
            added = observe(
                writer, ent.name, ent.entity_type, fresh, eid=eid, source=source, scope_path=scope
            )
            if not added and ent.name not in declared:
                declare_entity(
                    writer, ent.name, ent.entity_type, eid=eid, source=source, scope_path=scope
                )
        except MemorydError as exc:
            raise _at_line(exc, ent.line) from None
        declared.add(ent.name)
        if ent.name not in by_name:
            report.entities_created += 1
        by_name.setdefault(ent.name, []).append(eid)
        report.observations_added += len(added)

    for rel in graph.relations:
        triple = (rel.source, rel.target, rel.relation_type)
        if triple in have_rels:
            continue
        ends = []
        for name in (rel.source, rel.target):
            eid = _pick(by_name.get(name, []), EntityType.CONCEPT) or entity_id(
                EntityType.CONCEPT, name
            )
            by_name.setdefault(name, []).append(eid)
            ends.append((name, eid))
        try:
            relate(writer, ends[0], ends[1], rel.relation_type, source=source, scope_path=scope)
        except MemorydError as exc:
            raise _at_line(exc, rel.line) from None
        have_rels.add(triple)
        report.relations_added += 1
    return report


def _names(graph: dict[str, Any]) -> set[str]:
    return {e["name"] for e in graph["entities"]}


def _at_line(exc: MemorydError, line: int) -> MemorydError:
    """The same error, its message prefixed with the input line it came from."""
    exc.message = f"line {line}: {exc.message}"
    exc.args = (exc.message,)
    return exc
