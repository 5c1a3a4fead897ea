"""memoryd's MCP server (official `mcp` SDK 2.x): memoryd's own tools plus the official MCP
memory server's tool set (same names, same argument names), backed by memoryd's graph.

`create_server(service)` builds a fresh server around a MemoryService or the daemon's client;
nothing lives at module level. Every MemorydError becomes a tool error that says what to do.
How tools reach the service is a `ServiceCalls`: one call at a time for `memoryd mcp`
(embedded or through the daemon), the daemon's reader pool and single writer for `/mcp`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar, cast

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from memoryd import __version__
from memoryd.errors import MemorydError, NotFound, describe_validation
from memoryd.interop import mcp_memory
from memoryd.mcp.governance_tools import add_governance_tools
from memoryd.mcp.member_tools import TeamCalls, team_get, team_recall, team_remember
from memoryd.mcp.params import (
    DeletionItem,
    EntityItem,
    Limit,
    ObservationItem,
    PromotionId,
    RelationItem,
    Scope,
    Slug,
    argument_errors,
)
from memoryd.models import (
    EntityType,
    MemoryDraft,
    MemoryType,
    PromotionStatus,
    RecallResult,
    entity_id,
)

if TYPE_CHECKING:
    from memoryd.protocol import MemoryAPI

T = TypeVar("T")
READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
DELETE = ToolAnnotations(destructive_hint=True, idempotent_hint=True)
OBSERVATIONS_PER_ENTITY = 20
INSTRUCTIONS = (
    "memoryd is the user's long-term memory across coding sessions. Call `recall` before "
    "answering questions about past decisions, preferences or project conventions; call "
    "`remember` when the user states a decision, preference, fact, playbook or warning worth "
    "keeping. Slugs name memories; cite them."
)


def _error(exc: MemorydError) -> ToolError:
    """One line, as the CLI says it (`error: MESSAGE (hint: HINT)`, without `error:`)."""
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    return ToolError(" ".join(f"{exc.message}{hint}".split()))


class Server(MCPServer):
    """The SDK's server, with arguments that fail a tool's input schema reported as one line
    naming the parameter, item and field (the SDK's text is pydantic's, with a web link)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {argument_errors(cause)}") from cause


class ServiceCalls(Protocol):
    """How tools call the service. Tools run on worker threads; a read tool's whole body is
    one `read`, a write tool's whole body one `write` (its look-ups included, so what it
    checked still holds when it writes)."""

    def read(self, action: Callable[[], T]) -> T: ...

    def write(self, action: Callable[[], T]) -> T: ...

    def recall(self, query: str, scope: str | None, k: int) -> RecallResult:
        """Recall `query` and count its hits as recalls."""
        ...


class OneAtATime:
    """One call at a time: the in-process stores, or the daemon client's one connection,
    are shared by every tool call."""

    def __init__(self, service: MemoryAPI) -> None:
        self._service = service
        self._lock = threading.Lock()

    def read(self, action: Callable[[], T]) -> T:
        with self._lock:
            return action()

    write = read

    def recall(self, query: str, scope: str | None, k: int) -> RecallResult:
        return self.read(lambda: self._service.recall(query, scope=scope, k=k))


def create_server(  # noqa: C901 - one closure per tool
    service: MemoryAPI,
    *,
    home: Path | None = None,
    calls: ServiceCalls | None = None,
    default_scope: Path | None = None,
    team: TeamCalls | None = None,
) -> MCPServer:
    """An MCP server whose tools call `service` through `calls` (default: one at a time).

    `default_scope` is the project new memories belong to when a tool is not given one
    (None: the working directory; the daemon passes the user's home, since an HTTP client's
    working directory is unknown to it). `team`: the daemon joined a team, and recall and
    remember in a shared project go through it."""
    server = Server("memoryd", instructions=INSTRUCTIONS, version=__version__)
    via: ServiceCalls = calls or OneAtATime(service)
    svc = service

    def guarded(run: Callable[[Callable[[], T]], T], action: Callable[[], T]) -> T:
        try:
            return run(action)
        except MemorydError as exc:
            raise _error(exc) from exc
        except ValidationError as exc:  # a value the tool passed on, checked by a model
            raise ToolError(describe_validation(exc.errors())) from exc

    def call(action: Callable[[], T]) -> T:
        return guarded(via.read, action)

    def write(action: Callable[[], T]) -> T:
        return guarded(via.write, action)

    # -- memoryd's own tools ------------------------------------------------------------
    @server.tool(annotations=READ)
    def recall(
        query: Annotated[str, Field(description="What to recall, in any language (not blank)")],
        scope: Scope = None,
        k: Annotated[int, Field(description="At most this many hits")] = 10,
        explain: Annotated[
            bool, Field(description="Add why each hit matched (stages, terms, graph paths)")
        ] = False,
    ) -> dict[str, Any]:
        """Recall what the user's memory knows about `query` (any language): past decisions,
        preferences, facts, playbooks, warnings and session notes, best first. Use it before
        answering anything that depends on earlier work. `scope` is a project path (or 12-hex
        scope hash) to stay inside one project; omit it to search everything. Each hit has a
        `slug` (pass it to `get_memory` for the full text) and `superseded_by` when a newer
        memory replaced it — prefer the current one. `explain` adds why each hit matched."""

        def run() -> dict[str, Any]:
            result = via.recall(query, scope, k)
            hits = []
            for hit in result.hits:
                row: dict[str, Any] = {
                    "slug": hit.slug,
                    "type": hit.type.value,
                    "title": hit.title,
                    "snippet": hit.snippet,
                    "created_at": hit.created_at.isoformat(),
                    "score": hit.score,
                    "superseded_by": hit.superseded_by,
                }
                if explain:
                    row.update(stages=hit.stages, matched_terms=hit.matched_terms, paths=hit.paths)
                hits.append(row)
            out: dict[str, Any] = {"query": query, "hits": hits}
            if result.hidden:
                out["hidden"] = [h.message for h in result.hidden]
            if explain:
                out["entities"] = result.entities
            return out if team is None else team_recall(team, out, scope, k)

        try:
            return run()
        except MemorydError as exc:
            raise _error(exc) from exc

    @server.tool(annotations=WRITE)
    def remember(
        type: Annotated[
            str,
            Field(description="decision, preference, fact, playbook, warning, or session"),
        ],
        title: Annotated[str, Field(description="One short line")],
        body: Annotated[str, Field(description="The details, in markdown")],
        tags: Annotated[list[str] | None, Field(description="Labels to file it under")] = None,
        triggers: Annotated[
            list[str] | None, Field(description="Words that should bring it back")
        ] = None,
        scope: Annotated[
            str | None,
            Field(description="The project path it belongs to (default: see the description)"),
        ] = None,
        supersedes: Annotated[
            list[str] | None, Field(description="Slugs of the memories this one replaces")
        ] = None,
    ) -> dict[str, Any]:
        """Store a memory for future sessions. `type` is one of decision, preference, fact,
        playbook, warning (long-term) or session (working notes). `title` is one short line;
        `body` the details in markdown. `triggers` are words that should bring it back;
        `scope` the project path it belongs to (default: the server's working directory, or
        your home directory when the server is the daemon's `/mcp`).
        `supersedes` lists slugs of memories this one replaces. Returns the new `slug`."""
        try:
            kind = MemoryType(type.strip().lower())
        except ValueError as exc:
            raise ToolError(
                f"unknown type {type!r}; use one of {', '.join(t.value for t in MemoryType)}"
            ) from exc

        def run() -> dict[str, Any]:
            draft = MemoryDraft(
                type=kind,
                title=title,
                body=body,
                scope_path=Path(scope) if scope else default_scope,
                source="mcp",
                tags=tags or [],
                triggers=triggers or [],
                supersedes=supersedes or [],
            )
            memory = svc.record(draft)
            return {
                "slug": memory.meta.slug,
                "type": memory.meta.type.value,
                "scope_hash": memory.meta.scope_hash,
            }

        if team is not None:  # in a shared project, the memory is the team's
            made = {"type": kind.value, "title": title, "body": body, "source": "mcp",
                    "tags": tags or [], "triggers": triggers or [],
                    "supersedes": supersedes or []}  # fmt: skip
            if (shared := team_remember(team, scope, made)) is not None:
                return shared
        return write(run)

    @server.tool(annotations=READ)
    def get_memory(slug: Slug) -> dict[str, Any]:
        """The full memory with this slug (from `recall` or `entity_context`): frontmatter
        (type, title, tags, triggers, supersedes, dates, decay state) and the markdown body."""

        def run() -> dict[str, Any] | None:
            try:
                memory = svc.get(slug)
            except NotFound:
                if team is None:
                    raise
                return None  # a team hit's slug: asked of the team below, off the read gate
            meta = memory.meta.model_dump(mode="json", exclude_none=True)
            return {"slug": slug, "meta": meta, "body": memory.body}

        found = call(run)
        if found is None:
            assert team is not None  # without a team, run raised the NotFound
            return team_get(team, slug)
        counts = getattr(svc, "count_read", None)  # the daemon's client counts in the route
        if counts is not None and not getattr(svc, "read_only", True):
            write(lambda: counts(slug))  # a get is a recall: it revives a decayed memory
        return found

    @server.tool(annotations=READ)
    def entity_context(
        entity: Annotated[
            str, Field(description="A name, alias or entity id such as entity:library:React")
        ],
        limit: Annotated[int, Field(description="At most this many memories")] = 20,
    ) -> dict[str, Any]:
        """Everything about one entity (a library, tool, person, project, concept…, by name,
        alias or id `entity:library:React`): its aliases, relations and neighbours, and the
        memories about it, current ones first (`superseded` lists the replaced ones)."""
        return call(lambda: svc.entity_context(entity, limit=limit).model_dump(mode="json"))

    @server.tool(annotations=READ)
    def supersedes_chain(slug: Slug) -> dict[str, Any]:
        """The history of a decision: which memories this one replaced and which replaced it
        (newer → older pairs, with who decided and why). Use it to explain how a choice changed."""
        rows = call(lambda: svc.supersedes_chain(slug))
        return {"slug": slug, "chain": [r.model_dump(mode="json") for r in rows]}

    @server.tool(annotations=READ)
    def list_promotions(
        status: Annotated[
            str, Field(description="pending, approved, rejected, merged, or all")
        ] = "pending",
        scope: Scope = None,
        limit: Limit = 50,
    ) -> dict[str, Any]:
        """Session memories proposed for promotion to long-term memory, newest first, with
        their evidence: DURA scores (`dura.by` says who scored: `llm:<model>` or the offline
        `heuristic-v1`), the source session and the sentences quoted from it. `status`:
        pending, approved, rejected, merged or all."""
        if status not in ("pending", "approved", "rejected", "merged", "all"):
            raise ToolError(
                f"status {status!r} is not one of pending, approved, rejected, merged, all"
            )
        wanted = None if status == "all" else cast(PromotionStatus, status)
        rows = call(lambda: svc.list_promotions(status=wanted, scope=scope, limit=limit))
        return {"promotions": [r.model_dump(mode="json") for r in rows]}

    @server.tool(annotations=WRITE)
    def promote(
        promotion_id: PromotionId,
        type: Annotated[
            str | None, Field(description="Another long-term type than the one proposed")
        ] = None,
        title: Annotated[
            str | None, Field(description="Another title than the one proposed")
        ] = None,
        body: Annotated[str | None, Field(description="Another body than the one proposed")] = None,
    ) -> dict[str, Any]:
        """Approve a pending promotion: write the long-term memory it proposes (optionally
        with another type, title or body). Refused unless the user let agents decide
        (`governance.agents_decide`); otherwise tell the user to run `memoryd promote ID`."""

        def run() -> dict[str, Any]:
            kind = MemoryType(type) if type else None
            decided = svc.promote(promotion_id, type=kind, title=title, body=body, agent=True)
            return decided.model_dump(mode="json")

        try:
            return write(run)
        except ValueError as exc:
            raise ToolError(f"type {type!r} is not a long-term memory type: {exc}") from exc

    @server.tool(annotations=WRITE)
    def reject(
        promotion_id: PromotionId,
        reason: Annotated[str | None, Field(description="Why, for the audit log")] = None,
    ) -> dict[str, Any]:
        """Reject a pending promotion. Refused unless the user let agents decide
        (`governance.agents_decide`); otherwise tell the user to run `memoryd reject ID`."""
        decided = write(lambda: svc.reject(promotion_id, reason=reason, agent=True))
        return decided.model_dump(mode="json")

    add_governance_tools(server, svc, read=call, write=write)

    # -- the official MCP memory server's tools -------------------------------------------
    def graph_of(entity_ids: list[str]) -> dict[str, Any]:
        return mcp_memory.graph_of(svc, entity_ids, max_observations=OBSERVATIONS_PER_ENTITY)

    def ids_named(names: list[str]) -> list[str]:
        return mcp_memory.ids_named(svc, names)

    @server.tool(annotations=READ)
    def read_graph(
        offset: Annotated[int, Field(description="Entities to skip: a page's next_offset")] = 0,
        limit: Annotated[int, Field(description="Entities per page (1 to 1000)")] = 100,
    ) -> dict[str, Any]:
        """The knowledge graph, one page of entities at a time (ordered by name) with their
        observations and the relations touching them. Pass `next_offset` back as `offset`
        to read on; it is null on the last page. Prefer `search_nodes` to find something."""

        if offset < 0:
            raise ToolError(f"offset must be 0 or more (got {offset})")

        def run() -> dict[str, Any]:
            take = max(1, min(limit, 1000))
            # The engine crashes on a SKIP past the rows it sorted: count them first.
            total = svc.cypher("MATCH (e:Entity) RETURN count(e)", limit=1).rows[0][0]
            rows = (
                svc.cypher(
                    "MATCH (e:Entity) RETURN e.id ORDER BY e.name, e.id SKIP $skip LIMIT $take",
                    {"skip": offset, "take": take + 1},
                    limit=take + 1,
                ).rows
                if offset < total
                else []
            )
            page = graph_of([r[0] for r in rows[:take]])
            page["next_offset"] = offset + take if len(rows) > take else None
            return page

        return call(run)

    @server.tool(annotations=READ)
    def search_nodes(
        query: Annotated[
            str, Field(description="Text to find in entity names, types and observations")
        ],
    ) -> dict[str, Any]:
        """Find entities whose name, type or observations contain `query` (case-insensitive),
        with the relations touching them. For memories themselves, use `recall`."""

        def run() -> dict[str, Any]:
            q = query.lower()
            found = svc.cypher(
                "MATCH (e:Entity) WHERE lower(e.name) CONTAINS $q OR lower(e.type) CONTAINS $q"
                " RETURN e.id",
                {"q": q},
                limit=500,
            ).rows
            via = svc.cypher(
                "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) WHERE lower(m.title) CONTAINS $q"
                " RETURN DISTINCT e.id",
                {"q": q},
                limit=500,
            ).rows
            return graph_of(list(dict.fromkeys(r[0] for r in [*found, *via])))

        return call(run)

    @server.tool(annotations=READ)
    def open_nodes(
        names: Annotated[list[str], Field(description="Exact entity names to open")],
    ) -> dict[str, Any]:
        """The entities with exactly these names, their observations and the relations
        touching them. Unknown names are left out."""
        return call(lambda: graph_of(ids_named(names)))

    def observe(name: str, etype: str, contents: list[str]) -> list[str]:
        """One `fact` memory per observation: reindex rebuilds the entity from it."""
        return mcp_memory.observe(
            svc.record_graph_facts, name, etype, contents, scope_path=default_scope
        )

    @server.tool(annotations=WRITE)
    def create_entities(
        entities: Annotated[list[EntityItem], Field(description="The entities to create")],
    ) -> dict[str, Any]:
        """Create entities `[{name, entityType, observations: [text…]}]` in the knowledge
        graph; names that already exist are skipped. Each observation is stored as a `fact`
        memory about the entity. Types outside person, organization, place, library, tool,
        project, concept are kept as `concept` (read tools still show your type)."""

        def run() -> dict[str, Any]:
            created = []
            for ent in entities:
                name, etype, obs = ent.name, ent.entityType, ent.observations
                if ids_named([name]):
                    continue
                if not observe(name, etype, obs):
                    mcp_memory.declare_entity(
                        svc.record_graph_facts, name, etype, scope_path=default_scope
                    )
                created.append({"name": name, "entityType": etype, "observations": obs})
            return {"entities": created}

        return write(run)

    @server.tool(annotations=WRITE)
    def add_observations(
        observations: Annotated[
            list[ObservationItem], Field(description="The observations to add, per entity")
        ],
    ) -> dict[str, Any]:
        """Add observations `[{entityName, contents: [text…]}]` to existing entities; each is
        stored as a `fact` memory. An unknown entity is an error: create it first."""

        def run() -> dict[str, Any]:
            results = []
            for item in observations:
                name = item.entityName
                rows = svc.cypher(
                    "MATCH (e:Entity) WHERE e.name = $n RETURN e.type", {"n": name}, limit=1
                ).rows
                if not rows:
                    raise ToolError(f"Entity with name {name} not found")
                added = observe(name, str(rows[0][0]), item.contents)
                results.append({"entityName": name, "addedObservations": added})
            return {"results": results}

        return write(run)

    @server.tool(annotations=WRITE)
    def create_relations(
        relations: Annotated[list[RelationItem], Field(description="The relations to create")],
    ) -> dict[str, Any]:
        """Create relations `[{from, to, relationType}]` between entities, in active voice
        (`uses`, `works_on`, `depends on`, `inspired by` …). Any relationType is accepted
        and read back exactly as given; memoryd's own predicates (mentions, works_on, uses,
        prefers, supersedes, superseded_by, conflicts_with, cites, runs_on, belongs_to,
        located_at), however written (`worksOn`, `works on`), also feed recall. Relations
        that already exist are skipped; endpoints need not exist yet."""

        def run() -> dict[str, Any]:
            have = {
                (r["from"], r["to"], r["relationType"])
                for r in mcp_memory.graph_of(
                    svc, ids_named([n for r in relations for n in (r.from_, r.to)])
                )["relations"]
            }
            created = []
            for rel in relations:
                src, dst, kind = rel.from_, rel.to, rel.relationType
                if (src, dst, kind) in have:
                    continue
                ids = {}
                for name in (src, dst):
                    found = ids_named([name])
                    ids[name] = found[0] if found else entity_id(EntityType.CONCEPT, name)
                mcp_memory.relate(
                    svc.record_graph_facts,
                    (src, ids[src]),
                    (dst, ids[dst]),
                    kind,
                    scope_path=default_scope,
                )
                have.add((src, dst, kind))
                created.append({"from": src, "to": dst, "relationType": kind})
            return {"relations": created}

        return write(run)

    @server.tool(annotations=DELETE)
    def delete_entities(
        entityNames: Annotated[list[str], Field(description="Exact names of the entities")],
    ) -> dict[str, Any]:
        """Delete entities by exact name, with their observations and every relation
        touching them; unknown names are ignored. memoryd keeps history: the facts about the
        entity are archived (hidden, not erased) and other memories simply stop naming it."""

        def run() -> dict[str, Any]:
            deleted = mcp_memory.delete_entities(svc, entityNames)
            return {
                "success": True,
                "message": f"Entities deleted successfully ({len(deleted)} found)",
                "deleted": deleted,
            }

        return write(run)

    @server.tool(annotations=DELETE)
    def delete_observations(
        deletions: Annotated[
            list[DeletionItem], Field(description="The observations to delete, per entity")
        ],
    ) -> dict[str, Any]:
        """Delete observations `[{entityName, observations: [exact text…]}]`; unknown
        entities and texts are ignored. The memories holding them are archived (hidden, not
        erased). Observations that come from other memories (decisions, session notes) are
        listed under `kept`: archive those memories themselves if they are wrong."""

        def run() -> dict[str, Any]:
            deleted = 0
            kept: list[dict[str, str]] = []
            for item in deletions:
                done = mcp_memory.delete_observations(svc, item.entityName, item.observations)
                deleted += done.deleted
                kept += done.kept
            out: dict[str, Any] = {
                "success": True,
                "message": f"Observations deleted successfully ({deleted} found)",
            }
            if kept:
                out["kept"] = kept
            return out

        return write(run)

    @server.tool(annotations=DELETE)
    def delete_relations(
        relations: Annotated[
            list[RelationItem], Field(description="The relations to delete, exactly as shown")
        ],
    ) -> dict[str, Any]:
        """Delete relations `[{from, to, relationType}]`, matched exactly as `read_graph`
        shows them; unknown ones are ignored. memoryd closes a relation instead of erasing
        it (it stays as history, no longer current) and archives the fact that stated it."""

        def run() -> dict[str, Any]:
            changed = 0
            for rel in relations:
                changed += mcp_memory.delete_relation(svc, rel.from_, rel.to, rel.relationType)
            return {
                "success": True,
                "message": f"Relations deleted successfully ({changed} found)",
            }

        return write(run)

    return server
