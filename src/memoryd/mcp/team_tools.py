"""The team server's MCP tools (`/mcp` on `memoryd serve --team`): recall, search, remember,
get_memory and graph_query in one project the user has a grant on.

Each tool is one request through the team server's dispatch (`TeamGuard.dispatch`), made as
the user the guard authenticated and left in the ASGI scope, so a tool answers exactly what the
HTTP route would: the same gate, the same project rewrite, the same filtering of hits.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field
from starlette.applications import Starlette

from memoryd import __version__
from memoryd.errors import MemorydError

Dispatch = Callable[
    [Any, dict[str, Any], str, str, list[tuple[str, str]], dict[str, Any] | None],
    Awaitable[tuple[int, list[tuple[bytes, bytes]], bytes]],
]
"""(caller, ASGI scope, method, path, query, JSON body) → (status, headers, body)."""

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
Project = Annotated[
    str,
    Field(description="The project's git remote (git@github.com:acme/shop.git) or its key"),
]
INSTRUCTIONS = (
    "memoryd team memory: what your team's agents recorded in the projects you have a grant"
    " on. Name the project by its git remote in every call; each hit says who recorded it."
)


def _one_line(exc: MemorydError) -> ToolError:
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    return ToolError(" ".join(f"{exc.message}{hint}".split()))


def create_team_mcp(dispatch: Dispatch, caller_key: str) -> tuple[MCPServer, Starlette]:
    """The team MCP server and its streamable HTTP app (stateless, JSON answers; the caller
    is `scope[caller_key]`, put there by the guard that authenticated the request)."""
    server = MCPServer("memoryd-team", instructions=INSTRUCTIONS, version=__version__)

    async def call(
        ctx: Context,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: dict[str, Any] | None = None,
    ) -> Any:
        scope = ctx.request_context.request.scope  # type: ignore[union-attr]
        try:
            status, _, answer = await dispatch(scope[caller_key], scope, method, path, query, body)
        except MemorydError as exc:
            raise _one_line(exc) from exc
        data = json.loads(answer)
        if status >= 400:
            error = data.get("error", {})
            hint = f" (hint: {error['hint']})" if error.get("hint") else ""
            raise ToolError(f"{error.get('message', f'HTTP {status}')}{hint}")
        return data

    @server.tool(annotations=READ)
    async def recall(
        query: Annotated[str, Field(description="What to recall (not blank)")],
        project: Project,
        ctx: Context,
        k: Annotated[int, Field(ge=1, le=100, description="At most this many hits")] = 10,
    ) -> dict[str, Any]:
        """Recall what the team recorded about `query` in `project`, best first; each hit
        names who recorded it (`recorded_by`)."""
        data = await call(ctx, "POST", "/v1/recall", [], {"q": query, "scope": project, "limit": k})
        return {"query": query, "hits": data["hits"]}

    @server.tool(annotations=READ)
    async def search(
        query: Annotated[str, Field(description="Words to look for (not blank)")],
        project: Project,
        ctx: Context,
        k: Annotated[int, Field(ge=1, le=100)] = 10,
    ) -> dict[str, Any]:
        """Full-text search of `project`'s team memories."""
        data = await call(
            ctx, "GET", "/v1/search", [("q", query), ("scope", project), ("limit", str(k))]
        )
        return {"query": query, "items": data["items"]}

    @server.tool(annotations=WRITE)
    async def remember(
        project: Project,
        type: Annotated[str, Field(description="decision, fact, preference, warning, ...")],
        title: Annotated[str, Field(description="One line")],
        body: Annotated[str, Field(description="The memory itself")],
        ctx: Context,
    ) -> dict[str, Any]:
        """Record a memory in `project` for the whole team (needs write there)."""
        made = {"type": type, "title": title, "body": body, "scope": project}
        data = await call(ctx, "POST", "/v1/memories", [], made)
        return {"slug": data["meta"]["slug"], "title": data["meta"]["title"]}

    @server.tool(annotations=READ)
    async def get_memory(
        slug: Annotated[str, Field(description="A hit's slug")], ctx: Context
    ) -> dict[str, Any]:
        """One memory in full, if it is in a project you may read."""
        result: dict[str, Any] = await call(ctx, "GET", f"/v1/memories/{slug}", [])
        return result

    @server.tool(annotations=READ)
    async def graph_query(
        query: Annotated[str, Field(description="Read-only Cypher (FalkorDB dialect)")],
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=10_000)] = 100,
    ) -> dict[str, Any]:
        """Read-only Cypher over the part of the team graph you may read."""
        result: dict[str, Any] = await call(
            ctx, "POST", "/v1/graph/cypher", [], {"query": query, "limit": limit}
        )
        return result

    # The guard has checked the token: a DNS-rebinding page cannot send one.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=True,
        stateless_http=True,
        transport_security=security,
    )
    return server, app
