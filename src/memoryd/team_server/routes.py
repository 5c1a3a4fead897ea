"""The team server's routes that are not the daemon's app behind a filter: user Cypher, the
entities and the graph page's drawing over the caller's cut of the graph
(`memoryd.team.views`), and the admin routes under `/v1/team` (users, tokens, grants).
`TeamGuard.dispatch` (`memoryd.team_server.server`) sends requests here once it knows the caller.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from memoryd.api.asgi import JSON, Answer
from memoryd.api.page import MAX_NODES, _entity_graph
from memoryd.api.routes import page
from memoryd.api.schemas import MAX_PAGE, CypherQuery
from memoryd.errors import InvalidInput, NotForTeam, NotFound, TeamDenied
from memoryd.team.keys import project_key
from memoryd.team.policy import Caller, Operation, Role, authorize
from memoryd.team.store import TeamStore, TokenRow, utcnow
from memoryd.team.views import Views, resolve

ADMIN_PREFIX = "/v1/team"
SUFFIXES = ("/context", "/neighbors", "/supersedes", "/aliases")
"""Entity routes that answer from the whole graph (not open to team users)."""
Audit = Callable[[str, str, str, dict[str, Any]], Awaitable[None]]
"""Append an audit record: actor, event type, target, details."""
Status = Callable[[], Awaitable[dict[str, Any]]]
"""The server's graph size and replica state (`GET /v1/team/status`)."""
SOURCE_HEADER = b"x-memoryd-graph-source"
"""`replica` or `primary`: the FalkorDB server that answered a graph read."""
NOTE_HEADER = b"x-memoryd-graph-note"
"""Why the primary answered although there is a replica (down, syncing, lagging)."""


async def graph_route(
    views: Views,
    scopes: list[str],
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: dict[str, Any],
) -> Answer:
    """Cypher, entities and the graph page, over the cut of the graph `scopes` (the
    caller's readable projects) keep, on the replica when it serves (the answer says where)."""
    source, note = views.served_by()
    args = dict(query)
    result: Any
    try:
        if method == "POST" and path == "/v1/graph/cypher":
            ask = CypherQuery.model_validate(body)
            result = await asyncio.to_thread(
                views.cypher,
                scopes,
                ask.query,
                dict(ask.params),
                limit=ask.limit,
                timeout_ms=ask.timeout_ms,
            )
        elif method == "GET" and path == "/v1/page/graph":
            depth, cap = int(args.get("depth", 1)), int(args.get("cap", 40))
            if not 1 <= depth <= 3 or not 2 <= cap <= MAX_NODES:
                raise InvalidInput(f"depth is 1-3 and cap 2-{MAX_NODES}")
            result = await asyncio.to_thread(
                _page_graph, views, scopes, _required(args, "entity"), depth, cap
            )
        elif method == "GET" and path == "/v1/entities":
            limit, offset = int(args.get("limit", 100)), int(args.get("offset", 0))
            if not 1 <= limit <= MAX_PAGE or offset < 0:
                raise InvalidInput(f"limit is 1-{MAX_PAGE} and offset at least 0")
            rows = await asyncio.to_thread(
                views.entities,
                scopes,
                type=args.get("type"),
                query=args.get("q"),
                limit=limit + 1,
                offset=offset,
            )
            result = page(rows, limit, offset)
        elif method == "GET" and path.count("/") >= 3 and not path.endswith(SUFFIXES):
            entity = path.removeprefix("/v1/entities/")
            result = await asyncio.to_thread(views.entity, scopes, entity)
        else:
            raise NotForTeam(
                f"{method} {path} is not open to team users",
                hint="read entities with `GET /v1/entities[/ID]` or Cypher",
            )
    except (ValidationError, ValueError) as exc:
        raise InvalidInput(f"{method} {path}: {exc}".splitlines()[0]) from exc
    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    headers = [*JSON, (SOURCE_HEADER, source.encode("ascii"))]
    if note:
        headers.append((NOTE_HEADER, note.encode("ascii", "replace")))
        if isinstance(data, dict) and path == "/v1/graph/cypher":
            data["note"] = f"read from the primary: {note}"  # MCP's graph_query shows it
    return 200, headers, json.dumps(data).encode("utf-8")


def _page_graph(views: Views, scopes: list[str], entity: str, depth: int, cap: int) -> Any:
    """The graph page's neighbourhood of `entity` (`api.page`'s own drawing), in the cut."""
    with views.view(scopes) as view:
        centre = resolve(view, entity)
        backend = SimpleNamespace(service=SimpleNamespace(graph=view))
        return _entity_graph(cast(Any, backend), centre, depth, cap)


async def admin_route(
    store: TeamStore,
    caller: Caller,
    method: str,
    path: str,
    body: dict[str, Any],
    audit: Audit,
    status: Status | None = None,
) -> Answer:
    """Users, tokens and grants over HTTP: users and tokens for team admins, grants in a
    project for its admins too; each change audited as `team:<the admin>`."""
    now, route = utcnow(), (method, path.removeprefix(ADMIN_PREFIX))
    if route == ("GET", "/me"):  # any user: who the token is, and where they may go
        roles = {project: role.name.lower() for project, role in caller.roles.items()}
        return 200, JSON, json.dumps({"user": caller.user, "roles": roles}).encode()
    is_admin = await asyncio.to_thread(store.is_admin, caller.user)
    result: Any
    if route[1] == "/grants" and method in ("PUT", "DELETE"):
        key = project_key(_required(body, "project"))
        if not is_admin:
            authorize(caller, key, Operation.ADMIN)
        user = _required(body, "user")
        if method == "PUT":
            role = Role.parse(_required(body, "role"))
            await asyncio.to_thread(store.grant, user, key, role, now)
            result = {"user": user, "project": key, "role": role.name.lower()}
        else:
            gone = await asyncio.to_thread(store.revoke, user, key)
            result = {"user": user, "project": key, "role": None, "had_one": gone}
        await audit(f"team:{caller.user}", f"team_grant_{method.lower()}", user, {"project": key})
        return 200, JSON, json.dumps(result).encode()
    if not is_admin:
        raise TeamDenied(
            f"user {caller.user!r} is not a team admin",
            hint="a team admin runs `memoryd team user admin NAME` on the server",
        )
    if route == ("GET", "/status") and status is not None:
        result = await status()
    elif route == ("GET", "/users"):
        result = [
            {
                "user": name,
                "admin": await asyncio.to_thread(store.is_admin, name),
                "tokens": [token_json(t, now) for t in tokens],
                "roles": {p: r.name.lower() for p, r in roles.items()},
            }
            for name, tokens, roles in await asyncio.to_thread(store.users)
        ]
    elif route == ("POST", "/users"):
        name = _required(body, "name")
        days = body.get("expires_days")
        until = None if days is None else now + timedelta(days=float(days))
        token = await asyncio.to_thread(store.add_user, name, now, until)
        await audit(f"team:{caller.user}", "team_user_add", name, {"expires_days": days})
        result = {"user": name, "token": token}
    elif method == "POST" and route[1].startswith("/tokens/") and route[1].count("/") == 3:
        token_id, action = route[1].split("/")[2:]
        if action == "revoke":
            row = await asyncio.to_thread(store.revoke_token, token_id, now)
        elif action == "expire":
            at = datetime.fromisoformat(body["at"]) if body.get("at") else now
            if at.tzinfo is None:
                raise InvalidInput("`at` needs a UTC offset", hint="e.g. 2027-01-01T00:00Z")
            row = await asyncio.to_thread(store.expire_token, token_id, at)
        else:
            raise NotFound(f"no token action {action!r}", hint="revoke or expire")
        await audit(
            f"team:{caller.user}", f"team_token_{action}", row.user, {"token": row.token_id}
        )
        result = token_json(row, now)
    else:
        raise NotFound(
            f"no team admin route {method} {path}",
            hint="GET /v1/team/status, GET/POST /v1/team/users,"
            " POST /v1/team/tokens/ID/revoke|expire,"
            " PUT/DELETE /v1/team/grants",
        )
    return 200, JSON, json.dumps(result).encode()


def token_json(row: TokenRow, now: datetime) -> dict[str, Any]:
    """A token's id and state for a listing (never the token)."""
    if row.revoked_at is not None:
        state = "revoked"
    elif row.expires_at is not None and row.expires_at <= now:
        state = "expired"
    else:
        state = "active"
    expires = None if row.expires_at is None else row.expires_at.isoformat()
    return {"id": row.token_id, "user": row.user, "state": state, "expires_at": expires}


def _required(values: Mapping[str, Any], name: str) -> str:
    value = values.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"`{name}` is missing or empty", hint=f"pass {name}")
    return value
