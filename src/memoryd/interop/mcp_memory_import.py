"""`memoryd import mcp-memory`: a `memory.jsonl` of the official MCP memory server, checked
line by line first (a malformed file writes nothing), then written in batches, the next one
built while the last is written. The mapping itself is `interop/mcp_memory.py`'s."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd import jsondepth
from memoryd.errors import InvalidInput, MemorydError
from memoryd.interop.mcp_memory import (
    all_rows,
    entity_fact,
    entity_type_of,
    export_graph,
    observation_facts,
    relation_fact,
)
from memoryd.models import EntityType, GraphFact, Recorded, entity_id

if TYPE_CHECKING:
    from memoryd.protocol import MemoryAPI as GraphService


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
            obj = jsondepth.loads(raw)
        except jsondepth.TooDeep as exc:
            raise InvalidInput(f"{where}: {exc}; nothing was imported", hint=hint) from None
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
    superseded: int = 0
    """Older memories the imported ones superseded (judged as any write is)."""


def _pick(ids: Sequence[str], wanted: EntityType) -> str | None:
    prefix = f"entity:{wanted.value}:"
    return next((i for i in ids if i.startswith(prefix)), ids[0] if ids else None)


IMPORT_BATCH = 5000
"""Facts per `record_graph_facts_brief` call: one request (and one write pass) through the
daemon, where one request per line ran about 3 lines a second. 5000 is the bulk batch of
the write path (`BULK_BATCH`) and the API's `MAX_BATCH_FACTS`."""


class _Batches:
    """Facts of an import with the input line each came from, written `IMPORT_BATCH` at a
    time; a failed batch names its lines (the batches before it stay written).

    One batch ahead: while the service writes batch n (through the daemon, most of an
    import's time), the caller builds batch n+1, which goes out only once batch n is
    acknowledged. So batches land in order, at most one is in flight, and a failure stops
    the import before the next is sent, as when they were written one after the other."""

    def __init__(self, svc: GraphService, progress: Callable[[int], None] | None = None) -> None:
        self.svc = svc
        self.progress = progress
        self.facts: list[GraphFact] = []
        self.lines: list[int] = []
        self.superseded = 0
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-batch")
        self._sent: tuple[Future[list[Recorded]], list[int]] | None = None

    def add(self, line: int, facts: Sequence[GraphFact]) -> None:
        for fact in facts:
            self.facts.append(fact)
            self.lines.append(line)
        if len(self.facts) >= IMPORT_BATCH:
            self.flush()

    def flush(self) -> None:
        """Send the facts gathered so far, once the batch before them is written."""
        if not self.facts:
            return
        facts, lines = self.facts, self.lines
        self.facts, self.lines = [], []
        self._settle()
        self._sent = (self._writer.submit(self.svc.record_graph_facts_brief, facts), lines)

    def finish(self) -> None:
        """Send what is left and wait until every batch is written."""
        self.flush()
        self._settle()

    def close(self) -> None:
        """Wait for a batch still being written (it lands whole or not at all)."""
        self._writer.shutdown(wait=True)

    def _settle(self) -> None:
        if self._sent is None:
            return
        future, lines = self._sent
        self._sent = None
        try:
            written = future.result()
        except MemorydError as exc:
            first, last = lines[0], lines[-1]
            exc.message = (
                f"lines {first}-{last} (none of them written; the lines before are): {exc.message}"
            )
            exc.args = (exc.message,)
            raise
        self.superseded += sum(len(r.supersedes) for r in written)
        if self.progress is not None:
            self.progress(lines[-1])


def import_graph(
    svc: GraphService,
    graph: ParsedGraph,
    *,
    scope_path: Path | None = None,
    source: str = "mcp-memory-import",
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Write a parsed upstream graph as the MCP tools do (the same memories), in batches of
    `IMPORT_BATCH` through `record_graph_facts_brief` (`record_graph_facts_many` answering
    slugs, not whole memories).

    Idempotent: observations already stored for the entity (counted, so repeated texts
    survive) and relations already present are skipped. `progress(line, last line)` after
    each batch written."""
    report = ImportReport(ignored_lines=list(graph.ignored_lines))
    current = export_graph(svc)
    last = max([e.line for e in graph.entities] + [r.line for r in graph.relations], default=0)
    batches = _Batches(svc, None if progress is None else lambda line: progress(line, last))
    try:
        for line, facts in _new_facts(svc, graph, current, report, scope_path, source):
            batches.add(line, facts)
        batches.finish()
    finally:
        batches.close()
    report.superseded = batches.superseded
    return report


def _new_facts(
    svc: GraphService,
    graph: ParsedGraph,
    current: dict[str, Any],
    report: ImportReport,
    scope: Path | None,
    source: str,
) -> Iterator[tuple[int, list[GraphFact]]]:
    """(input line, its facts) for what `graph` holds and `current` (the stored graph) does
    not, counted into `report` as they are made."""
    have_obs = {e["name"]: Counter(e["observations"]) for e in current["entities"]}
    have_rels = {(r["from"], r["to"], r["relationType"]) for r in current["relations"]}
    by_name: dict[str, list[str]] = {}
    for eid, name in all_rows(svc, "MATCH (e:Entity) RETURN e.id, e.name ORDER BY e.id"):
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
        facts = observation_facts(
            ent.name, ent.entity_type, fresh, eid=eid, source=source, scope_path=scope
        )
        if not facts and ent.name not in declared:
            facts = [
                entity_fact(ent.name, ent.entity_type, eid=eid, source=source, scope_path=scope)
            ]
        yield ent.line, facts
        declared.add(ent.name)
        if ent.name not in by_name:
            report.entities_created += 1
        by_name.setdefault(ent.name, []).append(eid)
        report.observations_added += len(fresh)

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
        yield (
            rel.line,
            [relation_fact(ends[0], ends[1], rel.relation_type, source=source, scope_path=scope)],
        )
        have_rels.add(triple)
        report.relations_added += 1


def _names(graph: dict[str, Any]) -> set[str]:
    return {e["name"] for e in graph["entities"]}
