"""The graph page's own reads and its live feed: projects, the home list, an entity's drawn
neighbourhood, a memory's history, and `/v1/events` (server-sent events).

Everything here reads; the page's edits go through the routes every client uses (PATCH and
DELETE `/v1/memories/{slug}`, `/restore`, `/v1/merge`), audited under the actor `page`.
The graph holds no title, mention or relation of a sensitive memory (`Memory.skeleton`), so
the graph queries below cannot show one; the home list itself goes through `list_memories`
and `search`, which ask the sensitive-scope gate.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from memoryd.api.routes import ERRORS, Api, Backend, ScopeQuery, Slug, scope_param
from memoryd.governance.decay import decay_moves
from memoryd.graph.store import EntityRow, GraphStore
from memoryd.models import (
    AuditRecord,
    DecayState,
    MemorySummary,
    MemoryType,
    Timestamp,
    check_query,
)

router = APIRouter(
    prefix="/v1",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
    tags=["page"],
)

SEARCH_WINDOW = 500
"""Full-text hits fetched before the page's state and date filters apply (the list says when
it reached this many)."""
MAX_NODES = 200
NAMED_LEFT_OUT = 20
"""Entities the cap left out that the page names (the strongest)."""
EDGES_PER_NODE = 2
"""Lines the page draws, at most, per entity drawn (a co-mention is one, the relations one
way one arrow), beyond each entity's link to the hop before: a hub's neighbours are often
all co-mentioned and related with each other (37 entities at 10k memories held 2,490 edges,
which took the browser seconds to lay out and draw; bench/RESULTS.md)."""
REACH_ROWS = 200_000
"""Entities read, at most, to count what the cap left out."""
PAIR_ROWS = MAX_NODES * MAX_NODES * 4
"""Edge rows read between the entities drawn, at most (every pair, four predicates each)."""
FEED_POLL_S = 0.5
FEED_STREAM_S = 60.0
"""A feed stream ends after this long and the page reconnects (from the last id it saw)."""
NEW_MEMORY_EVENTS = frozenset({"record", "capture", "import", "promote"})
CHANGE_EVENTS = frozenset(
    {"update", "archive", "restore", "merge", "merged_into", "enrich", "supersede", "decay"}
)
HISTORY_EVENTS = NEW_MEMORY_EVENTS | CHANGE_EVENTS | {"analyze", "propose", "reject", "recover"}


# -- projects ---------------------------------------------------------------------------
class Project(BaseModel):
    """A scope the page can switch to: its path, and how many memories it holds."""

    scope_hash: str
    path: str
    name: str
    sensitive: bool
    memories: int
    latest: Timestamp | None = None


@router.get("/projects")
async def projects(api: Api) -> list[Project]:
    """The projects with memories, the most recently written first (the page's switcher)."""
    return await api.runner.read(_projects, api)


def _projects(api: Backend) -> list[Project]:
    graph = api.service.graph
    scopes = {
        h: (path or "", bool(sensitive))
        for h, path, sensitive in graph.cypher(
            "MATCH (s:Scope) RETURN s.hash, s.path, s.sensitive", limit=10_000
        ).rows
    }
    counts = graph.cypher(
        "MATCH (m:Memory) WHERE m.decay_state <> 'forgotten'"
        " RETURN m.scope_hash, count(m), max(m.created_at)",
        limit=10_000,
    ).rows
    found = []
    for scope_hash, count, latest in counts:
        path, sensitive = scopes.get(scope_hash, ("", False))
        name = path.rstrip("/").rsplit("/", 1)[-1] if path else scope_hash
        found.append(
            Project(
                scope_hash=scope_hash,
                path=path,
                name=name or path,
                sensitive=sensitive,
                memories=int(count),
                latest=latest,
            )
        )
    return sorted(found, key=lambda p: (p.latest is None, -_stamp(p.latest), p.name))


def _stamp(at: datetime | None) -> float:
    return at.timestamp() if at is not None else 0.0


# -- the home list ------------------------------------------------------------------------
class BrowseItem(MemorySummary):
    """A row of the home list; a full-text hit also has its score and snippet."""

    score: float | None = None
    snippet: str = ""


class BrowsePage(BaseModel):
    items: list[BrowseItem]
    limit: int
    offset: int
    next_offset: int | None = None
    total: int
    """Memories matching the filters (for a search: among the first `SEARCH_WINDOW` hits)."""
    window_reached: bool = False
    """A search filled its window: later hits were not looked at; narrow the words."""
    hidden: int = 0
    """Memories (or, for a search, hits) left out in sensitive scopes without a grant; not
    in `total`."""


Day = Annotated[date | None, Query(description="a day, YYYY-MM-DD (UTC)")]


@router.get("/page/memories")
async def browse(
    api: Api,
    scope: ScopeQuery = None,
    type: MemoryType | None = None,
    state: DecayState | None = None,
    since: Day = None,
    until: Day = None,
    q: Annotated[str | None, Query(max_length=2000, description="full-text words")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> BrowsePage:
    """Memories newest first (or, with `q`, the best full-text hits first), filtered by
    project, type, decay state and creation day (`since` and `until` both included)."""
    start = _day_start(since)
    end = _day_start(until + timedelta(days=1)) if until is not None else None
    scope_hash = await api.runner.read(api.service.scope_hash_of, scope_param(scope))
    if q is not None and q.strip():
        check_query(q)
        return await _search(api, q, scope_hash, type, state, start, end, limit, offset)
    return await api.runner.read(_listing, api, scope_hash, type, state, start, end, limit, offset)


def _day_start(day: date | None) -> datetime | None:
    return None if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC)


def _listing(
    api: Backend,
    scope_hash: str | None,
    type: MemoryType | None,
    state: DecayState | None,
    start: datetime | None,
    end: datetime | None,
    limit: int,
    offset: int,
) -> BrowsePage:
    """`list_memories` (newest first, the gate asked) from the first memory before `end`:
    the graph counts how many newer ones to skip, and how many fall in the window.

    The graph holds a sensitive scope's memories too (as skeletons), and `list_memories`
    leaves those of an ungranted scope out of a page: they are counted as `hidden`, not in
    `total`. Offsets stay the graph's (hidden rows included), so paging never skips one."""
    total = _count(api, scope_hash, type, state, start=start, end=end)
    newer = _count(api, scope_hash, type, state, start=end) if end is not None else 0
    rows = api.service.list_memories(
        scope=scope_hash, type=type, state=state, limit=limit, offset=newer + offset
    )
    items = [
        BrowseItem(**row.model_dump()) for row in rows if start is None or row.created_at >= start
    ]
    hidden = 0
    if scope_hash is None:
        gate = api.service.gate
        for sensitive in gate.sensitive_scopes():
            if not gate.readable(sensitive):
                hidden += _count(api, sensitive, type, state, start=start, end=end)
    more = offset + limit < total
    return BrowsePage(
        items=items,
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
        total=total - hidden,
        hidden=hidden,
    )


def _count(
    api: Backend,
    scope_hash: str | None,
    type: MemoryType | None,
    state: DecayState | None,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
) -> int:
    """How many memories match, created in [start, end)."""
    where, params = [], {}
    for name, column, value in (
        ("scope", "m.scope_hash = $scope", scope_hash),
        ("type", "m.type = $type", type.value if type else None),
        ("state", "m.decay_state = $state", state.value if state else None),
        ("from_ts", "m.created_at >= $from_ts", start),
        ("to_ts", "m.created_at < $to_ts", end),
    ):
        if value is not None:
            where.append(column)
            params[name] = value
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = api.service.graph.cypher(
        f"MATCH (m:Memory) {clause} RETURN count(m)", params, limit=1
    ).rows
    return int(rows[0][0])


async def _search(
    api: Backend,
    q: str,
    scope_hash: str | None,
    type: MemoryType | None,
    state: DecayState | None,
    start: datetime | None,
    end: datetime | None,
    limit: int,
    offset: int,
) -> BrowsePage:
    hits = await api.rank(
        "search",
        api.service.search,
        q,
        scope=scope_hash,
        types=[type] if type is not None else None,
        k=SEARCH_WINDOW,
        include_forgotten=state is DecayState.FORGOTTEN,
    )
    kept = [
        h
        for h in hits
        if (state is None or h.decay_state is state)
        and (start is None or h.created_at >= start)
        and (end is None or h.created_at < end)
    ]
    shown = kept[offset : offset + limit]
    rows = await api.runner.read(api.service.graph.memory_rows, [h.slug for h in shown])
    items = []
    for hit in shown:
        row = rows.get(hit.slug)
        items.append(
            BrowseItem(
                slug=hit.slug,
                type=hit.type,
                title=hit.title,
                scope_hash=hit.scope_hash,
                source=row.source if row else "",
                created_at=hit.created_at,
                updated_at=row.updated_at if row else None,
                decay_state=hit.decay_state,
                tags=row.tags if row else [],
                recall_count=row.recall_count if row else 0,
                score=hit.score,
                snippet=hit.snippet,
            )
        )
    more = offset + limit < len(kept)
    return BrowsePage(
        items=items,
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
        total=len(kept),
        window_reached=len(hits) >= SEARCH_WINDOW,
        hidden=sum(h.count for h in hits.hidden),
    )


# -- an entity's neighbourhood, drawn ----------------------------------------------------
class GraphNode(BaseModel):
    id: str
    name: str
    type: str
    mention_count: int = 0
    hop: int
    """Hops from the centre (0: the centre)."""
    weight: float = 0.0
    """Why it was kept: the memories it shares with the hop before, or for a relation 1e9 +
    the memories asserting it + half its confidence (the ranking that decided which
    neighbours fit under the cap)."""


class GraphEdge(BaseModel):
    source: str
    target: str
    kind: Literal["relation", "co_mention"]
    label: str
    """The predicate, or `co-mentioned N×`."""
    count: int = 1
    """How many memories assert the relation, or mention both entities."""
    confidence: float = 1.0


class EntityGraph(BaseModel):
    """The entities within `depth` hops of `centre` over current relations and co-mentions
    (two entities named by one memory that is not forgotten), at most `cap` of them: each hop
    ranks its neighbours relations first (asserted by the most memories first), then by
    memories shared, and keeps the strongest. Between the entities drawn, the links to the
    hop before and then the strongest others, at most `EDGES_PER_NODE` lines per entity."""

    centre: EntityRow
    depth: int
    cap: int
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    left_out: int = 0
    """Entities reached (neighbours of an entity drawn less than `depth` hops out) but not
    drawn because the cap was met."""
    left_out_names: list[str] = Field(default_factory=list)
    """The strongest of them, at most `NAMED_LEFT_OUT`."""
    edges_left_out: int = 0
    """Edges between entities drawn that were not sent: the weakest pairs past the edge
    budget."""
    truncated: bool = False
    """More entities were reached than the graph read (`REACH_ROWS`): `left_out` is a lower
    bound."""


@router.get("/page/graph")
async def entity_graph(
    api: Api,
    entity: Annotated[str, Query(min_length=1, max_length=500, description="id, name or alias")],
    depth: Annotated[int, Query(ge=1, le=3)] = 1,
    cap: Annotated[int, Query(ge=2, le=MAX_NODES, description="most entities drawn")] = 40,
) -> EntityGraph:
    """An entity's neighbourhood for the graph page: relations and co-mentions as two kinds
    of edge, with a depth and a cap, and what the cap left out."""
    centre = await api.runner.read(api.service.resolve_entity, entity)
    return await api.runner.read(_entity_graph, api, centre, depth, cap)


_RELATED = (
    "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids AND NOT b.id IN $drawn"
    " AND r.superseded_at IS NULL"
    " RETURN b.id, count(r) AS n, max(r.confidence) AS c ORDER BY n DESC, c DESC, b.id"
)
_SHARED = (
    "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
    " WHERE a.id IN $ids AND NOT b.id IN $drawn AND m.decay_state <> 'forgotten'"
    " RETURN b.id, count(DISTINCT m) AS n ORDER BY n DESC, b.id"
)


def _entity_graph(api: Backend, centre: EntityRow, depth: int, cap: int) -> EntityGraph:
    """Each hop asks the graph for only the strongest neighbours that still fit (`LIMIT`),
    plus `NAMED_LEFT_OUT` more to name what the cap left out (a hop where nothing fits is
    asked only while fewer are named); how many it left out is the number of distinct
    entities reached less those drawn (one column of ids, counted here: neither engine counts
    a union of two patterns in one statement)."""
    graph = api.service.graph
    hops: dict[str, tuple[int, float]] = {centre.id: (0, 0.0)}
    left: dict[str, float] = {}
    frontier = [centre.id]
    for hop in range(1, depth + 1):
        if not frontier:
            break
        room = cap - len(hops)
        if not room and len(left) >= NAMED_LEFT_OUT:
            break  # nothing more fits, and enough are named: only the count below is left
        kept: list[str] = []
        for other, weight in _strongest(graph, frontier, list(hops), room + NAMED_LEFT_OUT):
            if len(kept) < room:
                kept.append(other)
                hops[other] = (hop, weight)
            else:
                left[other] = max(left.get(other, 0.0), weight)
        frontier = kept
    reach = [eid for eid, (hop, _) in hops.items() if hop < depth]
    reached, truncated = _reached(graph, reach)
    left_out = len(reached - hops.keys())
    strongest = sorted(left.items(), key=lambda kv: (-kv[1], kv[0]))[:NAMED_LEFT_OUT]
    names = {n.id: n.name for n in _nodes(api, {i: (0, w) for i, w in strongest})}
    edges, edges_left_out = _edges(graph, hops, cap)
    return EntityGraph(
        centre=centre,
        depth=depth,
        cap=cap,
        nodes=_nodes(api, hops),
        edges=edges,
        left_out=left_out,
        left_out_names=[names.get(i, i) for i, _ in strongest],
        edges_left_out=edges_left_out,
        truncated=truncated,
    )


def _strongest(
    graph: GraphStore, frontier: list[str], drawn: list[str], k: int
) -> list[tuple[str, float]]:
    """The `k` strongest neighbours of `frontier` not yet drawn, best first: relations (the
    most asserted first) weighted above any count of shared memories. Each statement stops
    at `k` rows; the co-mentions ask for as many more as relations were found, since those
    come first and may be the same entities."""
    params = {"ids": frontier, "drawn": drawn}
    related = graph.cypher(f"{_RELATED} LIMIT {k}", params, limit=k).rows
    shared = graph.cypher(
        f"{_SHARED} LIMIT {k + len(related)}", params, limit=k + len(related)
    ).rows
    ranked: dict[str, float] = {}
    for other, asserted, confidence in related:
        ranked.setdefault(other, 1e9 + int(asserted) + float(confidence or 0.0) / 2)
    for other, count in shared:
        ranked.setdefault(other, float(count))
    return list(ranked.items())[:k]


def _reached(graph: GraphStore, ids: list[str]) -> tuple[set[str], bool]:
    """The distinct entities related to or co-mentioned with any of `ids` (and whether
    there were more than `REACH_ROWS`)."""
    if not ids:
        return set(), False
    found: set[str] = set()
    truncated = False
    for statement in (
        "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids"
        " AND r.superseded_at IS NULL RETURN DISTINCT b.id",
        "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
        " WHERE a.id IN $ids AND m.decay_state <> 'forgotten' RETURN DISTINCT b.id",
    ):
        result = graph.cypher(statement, {"ids": ids}, limit=REACH_ROWS)
        found.update(row[0] for row in result.rows)
        truncated = truncated or result.truncated
    return found, truncated


def _edges(
    graph: GraphStore, hops: dict[str, tuple[int, float]], cap: int
) -> tuple[list[GraphEdge], int]:
    """The edges between the entities drawn, by pair: first each entity's strongest link to
    the hop before (so everything drawn hangs together), then the strongest other pairs while
    the lines the page draws stay within `EDGES_PER_NODE` per entity; and how many edges that
    left out. A pair's strength is the memories behind it (mentioning both, or asserting a
    relation), a relation breaking a tie."""
    ids = list(hops)
    relations = graph.cypher(
        "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE a.id IN $ids AND b.id IN $ids"
        " AND a.id <> b.id AND r.superseded_at IS NULL"
        " RETURN a.id, r.predicate, b.id, count(r), max(r.confidence)"
        " ORDER BY a.id, r.predicate, b.id",
        {"ids": ids},
        limit=PAIR_ROWS,
    ).rows
    shared = graph.cypher(
        "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
        " WHERE a.id IN $ids AND b.id IN $ids AND a.id < b.id"
        " AND m.decay_state <> 'forgotten'"
        " RETURN a.id, b.id, count(DISTINCT m) ORDER BY a.id, b.id",
        {"ids": ids},
        limit=PAIR_ROWS,
    ).rows
    pairs: dict[tuple[str, str], list[GraphEdge]] = {}
    strength: dict[tuple[str, str], tuple[int, int]] = {}
    for src, predicate, dst, n, confidence in relations:
        pair = (min(src, dst), max(src, dst))
        pairs.setdefault(pair, []).append(
            GraphEdge(
                source=src,
                target=dst,
                kind="relation",
                label=predicate,
                count=int(n),
                confidence=float(confidence or 0.0),
            )
        )
        memories, _ = strength.get(pair, (0, 0))
        strength[pair] = (max(memories, int(n)), 1)
    for src, dst, n in shared:
        pairs.setdefault((src, dst), []).append(
            GraphEdge(
                source=src,
                target=dst,
                kind="co_mention",
                label=f"co-mentioned {int(n)}×",
                count=int(n),
            )
        )
        memories, related = strength.get((src, dst), (0, 0))
        strength[(src, dst)] = (max(memories, int(n)), related)
    ranked = sorted(pairs, key=lambda pair: (-strength[pair][0], -strength[pair][1], pair))
    chosen: dict[tuple[str, str], None] = {}
    linked: set[str] = set()
    for pair in ranked:  # each entity's link to the hop before
        a, b = pair
        far = a if hops[a][0] > hops[b][0] else b if hops[b][0] > hops[a][0] else None
        if far is not None and far not in linked:
            linked.add(far)
            chosen[pair] = None
    lines = {pair: _lines(pairs[pair]) for pair in pairs}
    room = EDGES_PER_NODE * len(hops) - sum(lines[pair] for pair in chosen)
    for pair in ranked:
        if pair not in chosen and lines[pair] <= room:
            chosen[pair] = None
            room -= lines[pair]
    edges = [edge for pair in sorted(chosen) for edge in pairs[pair]]
    total = len(relations) + len(shared)
    return edges, total - len(edges)


def _lines(edges: list[GraphEdge]) -> int:
    """The lines the page draws for a pair's edges: the co-mention, and one arrow per
    direction (its predicates as one label)."""
    arrows = {(e.source, e.target) for e in edges if e.kind == "relation"}
    return len(arrows) + sum(e.kind == "co_mention" for e in edges)


def _nodes(api: Backend, hops: dict[str, tuple[int, float]]) -> list[GraphNode]:
    if not hops:
        return []
    rows = api.service.graph.cypher(
        "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.type, e.mention_count",
        {"ids": list(hops)},
        limit=MAX_NODES + 20,
    ).rows
    return sorted(
        (
            GraphNode(
                id=eid,
                name=name or eid,
                type=etype or "",
                mention_count=int(mentions or 0),
                hop=hops[eid][0],
                weight=hops[eid][1],
            )
            for eid, name, etype, mentions in rows
        ),
        key=lambda n: (n.hop, -n.weight, n.id),
    )


# -- a memory's history -----------------------------------------------------------------
@router.get("/memories/{slug}/history")
async def memory_history(api: Api, slug: Slug) -> list[AuditRecord]:
    """The audit records about one memory, oldest first: written, captured again, edited,
    scored, promoted, decayed, forgotten, restored (a session's timeline on the page)."""
    return await api.runner.read(_history, api, slug)


def _history(api: Backend, slug: str) -> list[AuditRecord]:
    quoted = json.dumps(slug)
    return [
        AuditRecord.model_validate(record)
        for record in api.service.audit.scan(HISTORY_EVENTS)
        if record.get("target_id") == slug
        # a sweep lists its moves, a merge the memories it folded in
        or (record["event_type"] in ("decay", "merge") and quoted in str(record.get("details")))
    ]


# -- the live feed ----------------------------------------------------------------------
class FeedEvent(BaseModel):
    """One change the page shows as it happens: a new memory (`kind` new) or a change to
    one (`kind` changed), from the audit log."""

    seq: int
    ts: str
    kind: Literal["new", "changed"]
    event_type: str
    actor: str
    scope_hash: str | None
    slug: str | None
    memory: MemorySummary | None = None
    """The memory as the graph has it now (null once it left the graph, and for a sensitive
    one: the graph holds no title of it, and the home list shows it only under a grant)."""


# Not in the OpenAPI document: it cannot describe a stream, and a fuzzer would wait on it.
@router.get("/events", response_class=StreamingResponse, include_in_schema=False)
async def events(
    request: Request,
    api: Api,
    after: Annotated[
        int | None, Query(ge=0, description="the last audit seq seen (default: now)")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=20)] = None,
) -> StreamingResponse:
    """Server-sent events: each new or changed memory as a `FeedEvent` (`id` is its audit
    seq), a comment every few seconds; the stream ends after a minute and the client
    reconnects with `Last-Event-ID`. Polls the audit log's tail, so captures the daemon
    indexes from `inbox/` show up too."""
    if after is None and last_event_id is not None and last_event_id.isdigit():
        after = int(last_event_id)
    if after is None:
        after = await api.runner.read(api.service.audit.last_seq)
    return StreamingResponse(
        _feed(request, api, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _feed(request: Request, api: Backend, seq: int) -> AsyncIterator[str]:
    yield f"retry: 1000\nevent: hello\nid: {seq}\ndata: {json.dumps({'seq': seq})}\n\n"
    deadline = time.monotonic() + FEED_STREAM_S
    quiet = 0.0
    while time.monotonic() < deadline and not api.stopping():
        if await request.is_disconnected():
            return
        records = await api.runner.read(api.service.audit.records_after, seq)
        wanted = [r for r in records if r.event_type in NEW_MEMORY_EVENTS | CHANGE_EVENTS]
        if records:
            seq = records[-1].seq
        if wanted:
            for event in await api.runner.read(_feed_events, api, wanted):
                yield f"id: {event.seq}\nevent: memory\ndata: {event.model_dump_json()}\n\n"
            quiet = 0.0
        elif records:
            yield f"id: {seq}\n\n"  # nothing to show, but the client resumes after these
        quiet += FEED_POLL_S
        if quiet >= 10.0:
            yield ": still here\n\n"
            quiet = 0.0
        await anyio.sleep(FEED_POLL_S)


def _feed_events(api: Backend, records: list[AuditRecord]) -> list[FeedEvent]:
    targets = {
        record.seq: sorted({slug for slug, _ in decay_moves([record])})
        if record.event_type == "decay"
        else [record.target_id]
        for record in records
    }
    rows = api.service.graph.memory_rows(
        sorted({slug for slugs in targets.values() for slug in slugs if slug})
    )
    out = []
    for record in records:
        for slug in targets[record.seq]:
            row = rows.get(slug) if slug else None
            if row is not None and row.sensitive:
                row = None
            out.append(
                FeedEvent(
                    seq=record.seq,
                    ts=record.ts,
                    kind="new" if record.event_type in NEW_MEMORY_EVENTS else "changed",
                    event_type=record.event_type,
                    actor=record.actor,
                    scope_hash=record.scope_hash,
                    slug=slug,
                    memory=MemorySummary(**row.model_dump()) if row else None,
                )
            )
    return out
