"""The `/v1` routes: each one validates, hands the call to the runner, returns a model.

Reads run on the threadpool, writes on the one writer thread (see `api.runner`). Lists are
paginated with `limit`/`offset` and answer `next_offset` (null on the last page): each route
asks the store for one row more than the page to know whether another page follows.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar, cast
from urllib.parse import quote

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi import Path as PathParam

from memoryd import __version__
from memoryd.api.errors import ErrorBody
from memoryd.api.ports import RecallReaders, ServedService
from memoryd.api.runner import Batcher, ServiceRunner
from memoryd.api.schemas import (
    AUDIT_MAX_PAGE,
    MAX_PAGE,
    SCOPE_HASH,
    ContextItem,
    ContextReply,
    ContextRequest,
    CypherQuery,
    EntityAlias,
    EntityMerge,
    GraphFacts,
    Health,
    InboxDrained,
    KeywordsPatch,
    MemoryBatch,
    MemoryCreate,
    Page,
    PathText,
    RecallPage,
    RecallQuery,
    RelationsClose,
    SearchPage,
    VersionInfo,
    memory_draft,
)
from memoryd.errors import InvalidInput
from memoryd.graph.store import (
    CypherResult,
    EntityContext,
    EntityRow,
    RelationRow,
    SupersedeRow,
)
from memoryd.models import (
    AuditRecord,
    AuditVerification,
    DecayState,
    DoctorCheck,
    EntityDeletion,
    Memory,
    MemorySummary,
    MemoryType,
    Predicate,
    RecallResult,
    ReindexReport,
    check_query,
)

P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class Backend:
    """What every route needs: the service, the runner that calls it, and a few facts."""

    service: ServedService
    runner: ServiceRunner
    checks: Callable[[], list[DoctorCheck]]
    """`memoryd doctor`'s checks over the served stores (the daemon's own line comes first)."""
    tcp_port: int | None = None
    started: float = field(default_factory=time.monotonic)
    wake_enrichment: Callable[[], None] | None = None
    """The daemon's background enrichment, woken when captures are indexed."""
    readers: RecallReaders | None = None
    """The daemon's recall readers (`memoryd.daemon.readers`); None: rank in this process."""
    stopping: Callable[[], bool] = lambda: False  # the daemon is stopping: `/v1/events` ends
    recalls: Batcher[RecallResult] = field(init=False)

    def __post_init__(self) -> None:
        self.recalls = Batcher(self.runner, self.service.count_recalls)

    async def rank(self, name: str, local: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A ranking read (recall, search, inject's context), which is Python on the GIL:
        in a recall reader when there are some, so that concurrent recalls use every core."""
        if self.readers is None:
            return await self.runner.read(local, *args, **kwargs)
        return cast(T, await self.runner.read(self.readers.call, name, *args, **kwargs))

    async def write(self, actor: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A write on the writer thread, audited under the caller's actor name."""
        return await self.runner.write(self._as(actor, fn), *args, **kwargs)

    async def exclusive(
        self, actor: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """A write that no read may overlap (reindex swaps the stores)."""
        return await self.runner.exclusive(self._as(actor, fn), *args, **kwargs)

    def _as(self, actor: str, fn: Callable[P, T]) -> Callable[P, T]:
        # Writes run one at a time on the writer thread, so setting the service's actor
        # around the call cannot leak into another write.
        def acting(*args: P.args, **kwargs: P.kwargs) -> T:
            previous, self.service.actor = self.service.actor, actor
            try:
                return fn(*args, **kwargs)
            finally:
                self.service.actor = previous

        return acting


async def backend(request: Request) -> Backend:
    """The app's `Backend`; a coroutine: FastAPI runs a plain function on the threadpool."""
    found: Backend = request.app.state.backend
    return found


Api = Annotated[Backend, Depends(backend)]
Actor = Annotated[
    str,
    Header(
        alias="X-Memoryd-Actor",
        pattern=r"^[a-z][a-z0-9_.:-]{0,31}$",
        description="who is writing, for the audit log (the CLI sends `cli`)",
    ),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")]
Offset = Annotated[int, Query(ge=0, le=10_000_000, description="rows to skip")]
ScopeQuery = Annotated[
    PathText | None,
    Query(description="a 12-hex scope hash, or the absolute path of a project directory"),
]
Slug = Annotated[str, PathParam(description="the memory's slug")]

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (403, 404, 409, 422, 503)
}

router = APIRouter(
    prefix="/v1",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,  # operationId = function name
)


def scope_param(scope: str | None) -> str | None:
    """The daemon's working directory means nothing to a client: paths must be absolute."""
    if scope is None or SCOPE_HASH.fullmatch(scope) or Path(scope).is_absolute():
        return scope
    raise InvalidInput(
        f"scope {scope!r} is neither a 12-hex scope hash nor an absolute path",
        hint="pass the project's absolute path or its scope hash (`memoryd scope show`)",
    )


def page(items: list[Any], limit: int, offset: int) -> Page[Any]:
    """A page from `limit + 1` fetched rows."""
    more = len(items) > limit
    return Page(
        items=items[:limit],
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
    )


# -- system -------------------------------------------------------------------------------
@router.get("/health", tags=["system"])
async def health(api: Api) -> Health:
    """Cheap liveness probe: touches no store (the index's commit wait is kept in memory)."""
    wait = api.service.index.commit_wait()
    return Health(
        version=__version__,
        pid=os.getpid(),
        uptime_s=round(time.monotonic() - api.started, 3),
        pending_writes=api.runner.pending_writes,
        recall_readers=api.readers.ready if api.readers is not None else 0,
        tcp_port=api.tcp_port,
        index_waiting=wait.documents,
        index_waiting_since=wait.since,
        index_failed_commits=wait.failures,
        index_error=wait.error,
        index_first_error=wait.first_error,
        index_retry_at=wait.retry_at,
    )


@router.get("/version", tags=["system"])
async def version(api: Api) -> VersionInfo:
    schema = await api.runner.read(lambda: api.service.graph.schema_version())
    return VersionInfo(version=__version__, graph_schema=schema)


@router.get("/doctor", tags=["system"])
async def doctor(api: Api) -> list[DoctorCheck]:
    """The checks of `memoryd doctor`, run inside the daemon on its open stores."""
    checks = [
        DoctorCheck(
            name="daemon",
            ok=True,
            detail=f"running (pid {os.getpid()}, {api.runner.pending_writes} writes queued,"
            f" {api.readers.ready if api.readers is not None else 0} recall readers)",
        )
    ]
    return checks + await api.runner.read(api.checks)


@router.post("/reindex", tags=["system"])
async def reindex(api: Api, actor: Actor = "api") -> ReindexReport:
    """Rebuild the graph and the search index from the vault; reads wait meanwhile."""
    return await api.exclusive(actor, api.service.reindex)


@router.post("/inbox/drain", tags=["system"])
async def drain_inbox(api: Api) -> InboxDrained:
    """Index the captures waiting in inbox/ now (the daemon also polls for them)."""
    indexed = await api.runner.write(api.service.drain_inbox)
    if indexed and api.wake_enrichment is not None:
        api.wake_enrichment()
    return InboxDrained(indexed=indexed)


# -- memories -----------------------------------------------------------------------------
# OpenAPI links: a client (or a fuzzer) learns that a created memory's slug feeds these.
_SLUG_LINKS = {
    name: {"operationId": name, "parameters": {"slug": "$response.body#/meta/slug"}}
    for name in ("get_memory", "update_memory", "archive_memory")
}


@router.post(
    "/memories",
    status_code=201,
    tags=["memories"],
    responses={201: {"description": "the recorded memory", "links": _SLUG_LINKS}},
)
async def create_memory(
    api: Api, body: MemoryCreate, response: Response, actor: Actor = "api"
) -> Memory:
    memory = await api.write(actor, api.service.record, memory_draft(body))
    response.headers["Location"] = f"/v1/memories/{quote(memory.slug, safe='')}"
    return memory


@router.post("/memories/batch", status_code=201, tags=["memories"])
async def create_memories(api: Api, body: MemoryBatch, actor: Actor = "api") -> list[Memory]:
    """Record many memories in one batched write (`record_many`): all of them or, on a bad
    one, none."""
    drafts = [memory_draft(memory) for memory in body.memories]
    return await api.write(actor, api.service.record_many, drafts, bulk=body.bulk)


@router.post("/graph/facts", status_code=201, tags=["graph"])
async def record_graph_facts(
    api: Api, body: GraphFacts, response: Response, actor: Actor = "api"
) -> Memory:
    """Record a memory that states entities and relations (what the MCP graph tools write)."""
    draft = memory_draft(body.memory)
    memory = await api.write(
        actor,
        api.service.record_graph_facts,
        draft,
        entity_ids=body.entity_ids,
        relations=body.relations,
    )
    response.headers["Location"] = f"/v1/memories/{quote(memory.slug, safe='')}"
    return memory


@router.get("/memories", tags=["memories"])
async def list_memories(
    api: Api,
    scope: ScopeQuery = None,
    type: MemoryType | None = None,
    state: DecayState | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Page[MemorySummary]:
    rows = await api.runner.read(
        api.service.list_memories,
        scope=scope_param(scope),
        type=type,
        state=state,
        limit=limit + 1,
        offset=offset,
    )
    total = await api.runner.read(
        api.service.count_memories, scope=scope_param(scope), type=type, state=state
    )
    return page(rows, limit, offset).model_copy(update={"total": total})


@router.get("/memories/{slug}", tags=["memories"])
async def get_memory(api: Api, slug: Slug) -> Memory:
    """The memory; a get counts as a recall of it (a dim or soft-forgotten one revives)."""
    memory = await api.runner.read(api.service.get, slug)
    await api.runner.write(api.service.count_read, slug)  # the next get shows it
    return memory


@router.patch("/memories/{slug}", tags=["memories"])
async def update_memory(api: Api, slug: Slug, body: KeywordsPatch, actor: Actor = "api") -> Memory:
    """Replace the title, tags and/or triggers; the vault file is rewritten atomically."""
    return await api.write(actor, api.service.update_keywords, slug, **body.model_dump())


@router.delete("/memories/{slug}", tags=["memories"])
async def archive_memory(api: Api, slug: Slug, actor: Actor = "api") -> Memory:
    """Archive (never erase): the file moves to `forgotten/` and the memory is hidden."""
    return await api.write(actor, api.service.archive, slug)


@router.post("/memories/{slug}/relations/close", tags=["graph"])
async def close_relations(
    api: Api, slug: Slug, body: RelationsClose, actor: Actor = "api"
) -> Memory:
    """Close relations this memory asserts (never dropped: `superseded_at` is set); a fact
    that only stated them is archived. What the MCP `delete_relations` tool does."""
    return await api.write(actor, api.service.close_relations, slug, body.relations)


@router.get("/memories/{slug}/supersedes", tags=["memories"])
async def memory_supersedes(
    api: Api, slug: Slug, limit: Limit = 100, offset: Offset = 0
) -> Page[SupersedeRow]:
    """Every SUPERSEDES edge reachable from this memory, in either direction."""
    rows = await api.runner.read(api.service.supersedes_chain, slug)
    return page(rows[offset:], limit, offset)


# -- search -------------------------------------------------------------------------------
@router.get("/search", tags=["recall"])
async def search(
    api: Api,
    q: Annotated[str, Query(description="words to look for (not blank)")],
    scope: ScopeQuery = None,
    type: Annotated[list[MemoryType] | None, Query()] = None,
    include_forgotten: bool = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 10,
    offset: Offset = 0,
) -> SearchPage:
    """BM25 full text over titles, bodies, tags and triggers; `hidden` counts the hits left
    out in sensitive scopes without a grant."""
    check_query(q)
    hits = await api.rank(
        "search",
        api.service.search,
        q,
        scope=scope_param(scope),
        types=type,
        k=offset + limit + 1,
        include_forgotten=include_forgotten,
    )
    one = page(list(hits[offset:]), limit, offset)
    return SearchPage(**dict(one), hidden=hits.hidden)


@router.get("/recall", tags=["recall"])
async def recall(
    api: Api,
    q: Annotated[str, Query(description="what to remember (not blank)")],
    scope: ScopeQuery = None,
    type: Annotated[list[MemoryType] | None, Query()] = None,
    include_forgotten: bool = False,
    track: Annotated[bool, Query(description="count the hits as recalls")] = True,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 10,
    offset: Offset = 0,
) -> RecallPage:
    """BM25 and entity traversal fused, current decisions first; each hit says why.
    `POST /v1/recall` takes the same fields as a JSON body (long queries do not fit a URL).

    The ranking runs concurrently with other reads; counting the hits as recalls is queued
    on the writer afterwards, so a recall never waits for writes.
    """
    query = RecallQuery(
        q=q,
        scope=scope,
        type=type,
        include_forgotten=include_forgotten,
        track=track,
        limit=limit,
        offset=offset,
    )
    return await run_recall(api, query)


@router.post("/recall", tags=["recall"])
async def recall_body(api: Api, body: RecallQuery) -> RecallPage:
    """A recall with its query in the body: the same fields and answer as `GET /v1/recall`."""
    return await run_recall(api, body)


async def run_recall(api: Backend, query: RecallQuery) -> RecallPage:
    check_query(query.q)  # before the query travels to a recall reader
    limit, offset = query.limit, query.offset
    result = await api.rank(
        "recall",
        api.service.recall,
        query.q,
        scope=scope_param(query.scope),
        types=query.type,
        k=offset + limit + 1,
        include_forgotten=query.include_forgotten,
        track=False,
    )
    hits = result.hits[offset : offset + limit]
    if query.track and hits:
        api.recalls.add(result.model_copy(update={"hits": hits}))
    more = len(result.hits) > offset + limit
    return RecallPage(
        query=result.query,
        hits=hits,
        entities=result.entities,
        stages=result.stages,
        notes=result.notes,
        hidden=result.hidden,
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
    )


@router.post("/recall/context", tags=["recall"])
async def recall_context(api: Api, body: ContextRequest) -> ContextReply:
    """The memories an agent hook injects (`memoryd inject`), in one round trip: the
    prompt's recall without superseded memories and session notes last, or at session start
    the scope's long-term memories, warnings and decisions first."""
    from memoryd.context import choose

    items, result = await api.rank(
        "inject_context",
        functools.partial(choose, api.service),
        body.prompt,
        body.scope,
        body.limit,
        track=False,
    )
    if result is not None and result.hits:
        api.recalls.add(result)
    return ContextReply(items=[ContextItem(**vars(item)) for item in items])


# -- entities and the graph ---------------------------------------------------------------
@router.get("/entities", tags=["graph"])
async def list_entities(
    api: Api,
    type: str | None = None,
    q: Annotated[str | None, Query(max_length=200, description="name or alias contains")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Page[EntityRow]:
    rows = await api.runner.read(
        lambda: api.service.graph.list_entities(type=type, query=q, limit=limit + 1, offset=offset)
    )
    return page(rows, limit, offset)


# Routes with a suffix come before the bare entity route: ids may contain slashes.
@router.get("/entities/{entity_id:path}/context", tags=["graph"])
async def entity_context(
    api: Api, entity_id: str, limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20
) -> EntityContext:
    """An entity (id, name or alias), its relations and the memories about it, current first."""
    return await api.runner.read(api.service.entity_context, entity_id, limit=limit)


@router.get("/entities/{entity_id:path}/neighbors", tags=["graph"])
async def neighbors(
    api: Api, entity_id: str, depth: Annotated[int, Query(ge=1, le=3)] = 2
) -> CypherResult:
    """Entities within `depth` hops; fan-out is capped per hop, so the result is bounded."""
    return await api.runner.read(api.service.neighbors, entity_id, depth=depth)


@router.get("/entities/{entity_id:path}/supersedes", tags=["graph"])
async def entity_supersedes(
    api: Api, entity_id: str, limit: Limit = 100, offset: Offset = 0
) -> Page[SupersedeRow]:
    """The supersedes chain of an entity: which memory replaced which, oldest first."""
    rows = await api.runner.read(api.service.entity_supersedes, entity_id)
    return page(rows[offset:], limit, offset)


@router.post("/entities/{entity_id:path}/aliases", tags=["graph"])
async def alias_entity(
    api: Api, entity_id: str, body: EntityAlias, actor: Actor = "api"
) -> EntityRow:
    """Teach the graph another name for an entity (audited, replayed by reindex)."""
    return await api.write(actor, api.service.alias_entity, entity_id, body.alias)


@router.post("/entities/merge", tags=["graph"])
async def merge_entities(api: Api, body: EntityMerge, actor: Actor = "api") -> EntityRow:
    """Merge `drop` into `keep`: edges move, `drop`'s name becomes an alias."""
    return await api.write(actor, api.service.merge_entities, body.keep, body.drop)


@router.delete("/entities/{entity_id:path}", tags=["graph"])
async def delete_entity(api: Api, entity_id: str, actor: Actor = "api") -> EntityDeletion:
    """Delete an entity (id, name or alias): memories naming it are rewritten without it,
    facts only about it are archived, nothing is erased; reindex does not bring it back."""
    return await api.write(actor, api.service.delete_entity, entity_id)


@router.get("/entities/{entity_id:path}", tags=["graph"])
async def get_entity(api: Api, entity_id: str) -> EntityRow:
    """One entity by id (`entity:library:React`), name or alias."""
    return await api.runner.read(api.service.resolve_entity, entity_id)


@router.get("/relations", tags=["graph"])
async def relations(
    api: Api,
    entity: Annotated[str | None, Query(max_length=500, description="id, name or alias")] = None,
    predicate: Predicate | None = None,
    include_closed: Annotated[bool, Query(description="also superseded relations")] = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Page[RelationRow]:
    """Relations between entities and memories, newest first."""
    rows = await api.runner.read(
        api.service.relations,
        entity=entity,
        predicate=predicate,
        include_closed=include_closed,
        limit=limit + 1,
        offset=offset,
    )
    return page(rows, limit, offset)


@router.post("/graph/cypher", tags=["graph"])
async def cypher(api: Api, body: CypherQuery) -> CypherResult:
    """Read-only Cypher with parameters, a row limit and a timeout. It runs in a separate
    process over a copy of the graph, with its own memory cap (`graph.cypher_memory_mb`) and
    timeout (`graph.cypher_timeout_ms`): a query past a limit gets 422 `query_limit`; a write
    clause, a setting or a procedure other than a read-only one gets 403."""
    # Not under the runner's read gate: the copy is taken under the graph's own write lock,
    # and the query runs in another process, so a reindex need not wait for it.
    return await anyio.to_thread.run_sync(
        lambda: api.service.cypher(
            body.query, dict(body.params), limit=body.limit, timeout_ms=body.timeout_ms
        )
    )


# -- audit --------------------------------------------------------------------------------
@router.get("/audit", tags=["audit"])
async def audit(
    api: Api,
    scope: ScopeQuery = None,
    since: datetime | None = None,
    event_type: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=AUDIT_MAX_PAGE)] = 100,
    offset: Offset = 0,
) -> Page[AuditRecord]:
    """Audit events, oldest first within a page. Offset counts back from the newest event,
    so offset 0 is the newest page and `next_offset` steps into the past."""
    scope_hash = await api.runner.read(api.service.scope_hash_of, scope_param(scope))
    records = await api.runner.read(
        api.service.audit.read,
        scope_hash=scope_hash,
        since=since,
        event_type=event_type,
        limit=limit + 1,
        offset=offset,
    )
    more = len(records) > limit
    return Page(
        items=records[1:] if more else records,
        limit=limit,
        offset=offset,
        next_offset=offset + limit if more else None,
    )


@router.get("/audit/verify", tags=["audit"])
async def audit_verify(api: Api) -> AuditVerification:
    """Walk the hash chain; `ok` false names the first bad line (status stays 200)."""
    return await api.runner.read(api.service.audit_verify)
