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
from pydantic import BaseModel

from memoryd.api.page_graph import MAX_NODES as MAX_NODES  # the team server's page route
from memoryd.api.page_graph import EntityGraph, neighbourhood
from memoryd.api.routes import ERRORS, Api, Backend, ScopeQuery, Slug, scope_param
from memoryd.governance.decay import decay_moves
from memoryd.graph.store import EntityRow
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


# -- an entity's neighbourhood, drawn (`api.page_graph`) -----------------------------------
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


def _entity_graph(api: Backend, centre: EntityRow, depth: int, cap: int) -> EntityGraph:
    """`neighbourhood` in the backend's graph (the team server's page route calls this with
    a backend over its cut of the graph)."""
    return neighbourhood(api.service.graph, centre, depth, cap)


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
