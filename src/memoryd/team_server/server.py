"""`memoryd serve --team` (`memoryd team serve`): the daemon's HTTP app on a network address
over TLS, each request authenticated by a user's token and decided by the gate
(`memoryd.team.policy`).

`TeamGuard` sits in front of the daemon's app and lets through only what it gates per
project: record (`POST /v1/memories`), recall, search, list and get; the graph page (its
project list, memories and event stream, filtered to the caller's projects); user Cypher,
the entities and the page's graph, answered from the cut of the graph the caller may read
(`memoryd.team.views`); MCP (`memoryd.team.mcp_tools`, whose tools call the same dispatch);
and the admin routes under `/v1/team`. Every other route (sync, maintenance, audit...)
answers 403 `not_for_team`. A request names its project by its git remote
(`scope=git@github.com:acme/shop.git`, the key `github.com/acme/shop`, or on the page its
scope hash); the guard checks the caller's role there and hands the app the project's scope
on the server, `<home>/team-projects/<key>/`. Answers are filtered again to the projects the
caller may read, each hit carrying `recorded_by`, and every write is audited as
`team:<user>`. The admin Unix socket keeps the local daemon's rules (no token, 0600).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from memoryd.api.asgi import (
    JSON,
    Answer,
    Message,
    Receive,
    Refused,
    Scope,
    Send,
    answer_error,
    call,
    json_body,
    replay,
    send_answer,
)
from memoryd.api.errors import error_body, status_of
from memoryd.api.runner import CountRequests, ServiceRunner
from memoryd.api.schemas import SCOPE_HASH
from memoryd.api.security import LocalOnly
from memoryd.config import Settings
from memoryd.daemon.control import refuse_second_daemon
from memoryd.daemon.server import (
    LazyMCP,
    bind_unix,
    embed,
    enrich,
    flush_recall_stats,
    prepare,
    run_loop,
    serve_until_stopped,
)
from memoryd.daemon_files import DaemonFiles
from memoryd.errors import (
    InvalidInput,
    MemorydError,
    NotForTeam,
    NotFound,
    ScopeNotGranted,
    StorageError,
    TokenRefused,
)
from memoryd.private import private_umask
from memoryd.scope import scope_hash_of_path
from memoryd.team.config import PROJECTS_DIR, TeamConfig, open_store, with_team_graph
from memoryd.team.keys import project_key
from memoryd.team.policy import Caller, Operation, authenticate, authorize
from memoryd.team.store import TeamStore, utcnow
from memoryd.team.views import VIEWS_DIR, Views
from memoryd.team_server.admin import AdminSocket, graph_size, online_backup
from memoryd.team_server.answers import ServerPaths
from memoryd.team_server.replica import ReplicaReads, keep_replica, start_replica
from memoryd.team_server.routes import ADMIN_PREFIX, Audit, Status, admin_route, graph_route

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.types import ASGIApp

logger = logging.getLogger(__name__)

LISTEN_FILE = "team-listen.json"
"""Where a running team server says which address it bound (port 0 picks a free one)."""
LISTS = {
    "/v1/recall": "hits",
    "/v1/search": "items",
    "/v1/memories": "items",
    "/v1/page/memories": "items",
}
"""The read routes open to team users, and the key of their answer's list of hits."""
MCP_PATH = "/mcp"
REQUEST_ID = b"x-memoryd-request-id"
"""A write's id from a developer's queue: the server makes it once, however often it comes."""
CALLER_KEY = "memoryd.team.caller"
"""Where the guard leaves the authenticated caller in the ASGI scope, for the MCP tools."""

ScopeOf = Callable[[str], Awaitable[str | None]]
"""A memory's scope hash by its slug (None: no such memory), read before a get is let in."""


class Projects:
    """The server-side directory of each team project: its scope on the team server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._hashes: dict[str, str] = {}
        self.paths = ServerPaths(root.parent, root)
        """How the server's paths read in an answer: a project's directory as its key."""

    def directory(self, key: str) -> Path:
        """The project's directory, made on first use. It holds an empty `.git` so it is its
        own scope root even when the team data dir lies inside a git checkout."""
        path = self.root.joinpath(*key.split("/"))
        (path / ".git").mkdir(parents=True, exist_ok=True)
        return path

    def scope_hash(self, key: str) -> str:
        if key not in self._hashes:
            self._hashes[key] = scope_hash_of_path(self.directory(key))
        return self._hashes[key]


class TeamGuard:
    """ASGI middleware: authenticate, gate, rewrite the project, filter the answer.

    `dispatch` decides one request of an authenticated caller and returns the whole answer;
    the HTTP listener and the team MCP tools (`memoryd.team.mcp_tools`) both go through it,
    so the two surfaces cannot disagree on what a user may see."""

    def __init__(
        self,
        app: Any,
        store: TeamStore,
        projects: Projects,
        scope_of: ScopeOf,
        *,
        views: Views | None = None,
        mcp: Any = None,
        audit: Audit | None = None,
        status: Status | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.projects = projects
        self.scope_of = scope_of
        self.views = views
        self.mcp = mcp
        self.audit = audit
        self.status = status
        self._landing = asyncio.Lock()

    @property
    def landing(self) -> asyncio.Lock:
        """Held while a team write lands (its memory, then its author note): the backup's
        write barrier takes it too (`team_server/admin.py`)."""
        return self._landing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # no websockets on the team listener
        try:
            await self._handle(scope, receive, send)
        except MemorydError as exc:
            await answer_error(send, status_of(exc), error_body(exc.code, str(exc), exc.hint or ""))
        except Refused as exc:
            await answer_error(send, exc.status, exc.body)

    async def _caller(self, scope: Scope) -> Caller:
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise TokenRefused(
                "a team request needs `Authorization: Bearer <token>`",
                hint="send the token `memoryd team user add` printed",
            )
        row = await asyncio.to_thread(self.store.lookup, token.strip())
        roles = await asyncio.to_thread(self.store.roles, row.user) if row else {}
        return authenticate(row, roles, utcnow())

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        if method in ("GET", "HEAD") and (path == "/" or path.startswith("/static/")):
            await self.app(scope, receive, send)  # the graph page's files: no data in them
            return
        caller = await self._caller(scope)
        if path == MCP_PATH and self.mcp is not None:
            await self.mcp({**scope, CALLER_KEY: caller}, receive, send)
        elif method == "GET" and path == "/v1/events":
            await self._events(caller, scope, receive, send)
        else:
            query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            body = await json_body(receive) if method in ("POST", "PUT", "DELETE") else None
            status, headers, answer = await self.dispatch(caller, scope, method, path, query, body)
            await send_answer(send, status, headers, answer)

    async def dispatch(
        self,
        caller: Caller,
        base: Scope,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: dict[str, Any] | None,
    ) -> Answer:
        """The answer to one request of `caller` (MemorydError when the gate refuses it),
        with no path of the server's machine in it (`team_server.answers`)."""
        try:
            answer = await self._decide(caller, base, method, path, query, body)
        except MemorydError as exc:
            self.projects.paths.error(exc)
            raise
        return self.projects.paths.answer(answer)

    async def _decide(
        self,
        caller: Caller,
        base: Scope,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: dict[str, Any] | None,
    ) -> Answer:
        scope = {
            **base,
            "method": method,
            "path": path,
            "raw_path": path.encode("utf-8"),
            "query_string": urlencode(query).encode("latin-1"),
            "headers": _with_actor(base["headers"], f"team:{caller.user}"),
        }
        if method == "GET" and path in LISTS:
            key = self._project(caller, [v for k, v in query if k == "scope"], Operation.READ)
            query = [(k, v) for k, v in query if k != "scope"]
            query.append(("scope", self.projects.scope_hash(key)))
            scope["query_string"] = urlencode(query).encode("latin-1")
            return await self._forward_read(caller, scope, replay(None), LISTS[path])
        if path.startswith(ADMIN_PREFIX):
            if self.audit is None:
                raise NotForTeam(f"{method} {path} needs the team server's audit log")
            return await admin_route(
                self.store, caller, method, path, body or {}, self.audit, self.status
            )
        body = body if body is not None else {}
        if method == "POST" and path == "/v1/recall":
            key = self._project(caller, [body.get("scope")], Operation.READ)
            body["scope"] = self.projects.scope_hash(key)
            return await self._forward_read(caller, scope, replay(body), "hits")
        if method == "POST" and path == "/v1/memories":
            key = self._project(caller, [body.get("scope")], Operation.WRITE)
            body["scope"] = str(self.projects.directory(key))
            await self._same_project(caller, key, body)
            request_id = dict(base["headers"]).get(REQUEST_ID, b"").decode("latin-1")
            async with self._landing:  # a write sent again waits for its first to land
                if request_id and (slug := await asyncio.to_thread(self.store.landed, request_id)):
                    return 200, JSON, json.dumps({"meta": {"slug": slug}, "again": True}).encode()
                status, headers, answer = await call(self.app, scope, replay(body))
                if status == 201:
                    slug = json.loads(answer)["meta"]["slug"]
                    now = utcnow()
                    await asyncio.to_thread(self.store.note_author, slug, caller.user, key, now)
                    if request_id:
                        await asyncio.to_thread(
                            self.store.note_landed, request_id, slug, caller.user, now
                        )
            return status, headers, answer
        if method == "GET" and path.startswith("/v1/memories/") and path.count("/") == 3:
            return await self._get(caller, scope, path.rsplit("/", 1)[1])
        if method == "GET" and path == "/v1/projects":
            return await self._projects(caller, scope)
        if (
            path == "/v1/graph/cypher"
            or path == "/v1/page/graph"
            or (method == "GET" and path.startswith("/v1/entities"))
        ):
            if self.views is None:
                raise NotForTeam(f"{method} {path} needs the team graph's views")
            scopes = sorted(self._readable(caller))
            return await graph_route(self.views, scopes, method, path, query, body)
        raise NotForTeam(
            f"{method} {path} is not open to team users",
            hint="team users may record, recall, search, list and get memories, run Cypher,"
            " read entities, the graph page and its events, all within their projects",
        )

    async def _same_project(self, caller: Caller, key: str, body: dict[str, Any]) -> None:
        """A write may supersede or promote only memories of its own project: a grant on one
        project must not demote what another holds."""
        named = body.get("supersedes") or []
        if body.get("promoted_from"):
            named = [*named, body["promoted_from"]]
        for slug in named if isinstance(named, list) else []:
            found = await self.scope_of(slug) if isinstance(slug, str) else None
            if found is not None and found != self.projects.scope_hash(key):
                raise ScopeNotGranted(
                    f"memory {slug!r} is not in project {key!r}: user {caller.user!r} may not"
                    " supersede or promote it from there",
                    hint="supersede only memories of the project you write in",
                )

    def _project(self, caller: Caller, values: list[Any], operation: Operation) -> str:
        if len(values) != 1 or not isinstance(values[0], str):
            raise InvalidInput(
                "a team request names exactly one project in `scope`",
                hint="pass scope=<the project's git remote>, e.g. git@github.com:acme/shop.git",
            )
        value = values[0]
        if SCOPE_HASH.fullmatch(value):  # the graph page names projects by their scope hash
            keys = [k for k in caller.readable() if self.projects.scope_hash(k) == value]
            if not keys:
                raise ScopeNotGranted(
                    f"user {caller.user!r} may read no project with scope hash {value!r}",
                    hint="pass the project's git remote; `GET /v1/projects` lists yours",
                )
            value = keys[0]
        key = project_key(value)
        authorize(caller, key, operation)
        return key

    def _readable(self, caller: Caller) -> set[str]:
        return {self.projects.scope_hash(key) for key in caller.readable()}

    async def _forward_read(
        self, caller: Caller, scope: Scope, receive: Receive, field: str
    ) -> Answer:
        status, headers, answer = await call(self.app, scope, receive)
        if status == 200:
            data = json.loads(answer)
            readable = self._readable(caller)
            hits = [h for h in data.get(field, []) if h.get("scope_hash") in readable]
            authors = await asyncio.to_thread(self.store.authors, [h["slug"] for h in hits])
            for hit in hits:
                author = authors.get(hit["slug"])
                hit["recorded_by"] = author.user if author else None
            data[field] = hits
            answer = json.dumps(data).encode("utf-8")
        return status, headers, answer

    async def _get(self, caller: Caller, scope: Scope, slug: str) -> Answer:
        author = (await asyncio.to_thread(self.store.authors, [slug])).get(slug)
        if author is not None:
            authorize(caller, author.project, Operation.READ)
        # Decided before the app's get runs: a get counts as a read of the memory.
        scope_hash = await self.scope_of(slug)
        if scope_hash is not None and scope_hash not in self._readable(caller):
            raise _not_readable(slug, caller)
        status, headers, answer = await call(self.app, scope, replay(None))
        if status == 200:
            data = json.loads(answer)
            if data["meta"].get("scope_hash") not in self._readable(caller):
                raise _not_readable(slug, caller)
            data["recorded_by"] = author.user if author else None
            answer = json.dumps(data).encode("utf-8")
        return status, headers, answer

    async def _projects(self, caller: Caller, scope: Scope) -> Answer:
        """The graph page's project list: the caller's projects, each named by its key."""
        status, headers, answer = await call(self.app, scope, replay(None))
        if status == 200:
            keys = {self.projects.scope_hash(key): key for key in caller.readable()}
            rows = [
                {**row, "path": keys[row["scope_hash"]], "name": keys[row["scope_hash"]]}
                for row in json.loads(answer)
                if row.get("scope_hash") in keys
            ]
            answer = json.dumps(rows).encode("utf-8")
        return status, headers, answer

    async def _events(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        """The page's event stream, each memory event outside the caller's projects cut to
        its `id` line (the client still resumes after it); the stream ends within a minute,
        and its reconnect meets the gate again."""
        readable = self._readable(caller)
        scope = {**scope, "headers": _with_actor(scope["headers"], f"team:{caller.user}")}

        async def filtered(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                text = message["body"].decode("utf-8")
                paths = self.projects.paths
                kept = [paths.event(_event_for(b, readable)) for b in text.split("\n\n")]
                message = {**message, "body": "\n\n".join(kept).encode("utf-8")}
            await send(message)

        await self.app(scope, receive, filtered)


def _event_for(block: str, readable: set[str]) -> str:
    """One server-sent event as a caller may see it: a memory event outside `readable` keeps
    only its `id` line."""
    lines = block.split("\n")
    if "event: memory" not in lines:
        return block
    data = next((line[6:] for line in lines if line.startswith("data: ")), "{}")
    try:
        scope_hash = json.loads(data).get("scope_hash")
    except ValueError:
        scope_hash = None
    if scope_hash in readable:
        return block
    return "\n".join(line for line in lines if line.startswith("id: "))


def _not_readable(slug: str, caller: Caller) -> ScopeNotGranted:
    return ScopeNotGranted(
        f"memory {slug!r} is not in a project user {caller.user!r} may read",
        hint="ask a team admin for a grant on its project",
    )


def _with_actor(headers: list[tuple[bytes, bytes]], actor: str) -> list[tuple[bytes, bytes]]:
    """The request's headers with the audit actor set to the user (whatever the client sent)."""
    kept = [(k, v) for k, v in headers if k.lower() not in (b"x-memoryd-actor", b"content-length")]
    return [*kept, (b"x-memoryd-actor", actor.encode("ascii"))]


def bind_network(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections queue from here on, before uvicorn serves
    except OSError as exc:
        sock.close()
        raise StorageError(
            f"cannot listen on {host}:{port}: {exc.strerror}",
            hint="pick another host or port in [team] of team.toml",
        ) from exc
    sock.setblocking(False)
    return sock


def serve_team(settings: Settings, team: TeamConfig) -> None:
    """Run the team server in this process until SIGTERM or SIGINT."""
    from memoryd.wiring import ensure_home, open_service

    private_umask()
    settings = with_team_graph(settings, team)
    files = DaemonFiles(settings.home)
    ensure_home(settings.home)
    files.check_socket_path()
    refuse_second_daemon(files)
    store = open_store(team)
    service = open_service(settings, actor="team")
    service.llm_judge_inline = False
    runner: ServiceRunner | None = None
    reads: ReplicaReads | None = None
    sockets: list[socket.socket] = []
    listen = settings.home / LISTEN_FILE
    try:
        files.write_pid()
        reads = start_replica(
            settings.home, lambda: service.graph, team.replica_max_lag_s, team.replica
        )
        runner = ServiceRunner()
        prepare(service, runner)
        sockets = [bind_unix(files.socket), bind_network(team.host, team.port)]
        sockets[0].listen(128)  # both queue connections before the listen file says "up"
        host, port = sockets[1].getsockname()[:2]
        listen.write_text(json.dumps({"host": host, "port": port}), encoding="utf-8")
        logger.info("memoryd team server pid %d on https://%s:%d", os.getpid(), host, port)
        run_loop(_serve(service, runner, settings, team, store, sockets, reads))
    finally:
        for sock in sockets:
            sock.close()
        if reads is not None:
            reads.close()
        if runner is not None:
            runner.close()
        service.close()
        with contextlib.suppress(FileNotFoundError):
            listen.unlink()
        files.remove_runtime_files()


async def _serve(
    service: Any,
    runner: ServiceRunner,
    settings: Settings,
    team: TeamConfig,
    store: TeamStore,
    sockets: list[socket.socket],
    reads: ReplicaReads,
) -> None:
    import uvicorn

    from memoryd.api.app import create_app

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    app = create_app(service, runner, settings=settings)
    counted = CountRequests(app, runner)
    common: dict[str, Any] = {
        "lifespan": "off",
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": None,
        "server_header": False,
    }

    async def scope_of(slug: str) -> str | None:
        try:
            memory = await runner.read(service.get, slug)
        except NotFound:
            return None
        return str(memory.meta.scope_hash)

    async def audit(actor: str, event: str, target: str, details: dict[str, Any]) -> None:
        def append() -> None:
            service.audit.append(
                actor=actor, event_type=event, scope_hash=None, target_id=target, details=details
            )

        await runner.write(append)

    async def status() -> dict[str, Any]:
        return {
            "graph": await runner.read(lambda: graph_size(service.graph)),
            "replica": await asyncio.to_thread(reads.report),
        }

    guard = TeamGuard(
        counted,
        store,
        Projects(settings.home / PROJECTS_DIR),
        scope_of,
        views=Views(lambda: service.graph, settings.home / VIEWS_DIR, reads=reads),
        audit=audit,
        status=status,
    )

    def build_mcp() -> tuple[ASGIApp, StreamableHTTPSessionManager]:
        from memoryd.mcp.team_tools import create_team_mcp

        mcp_server, mcp_app = create_team_mcp(guard.dispatch, CALLER_KEY)
        return mcp_app, mcp_server.session_manager

    guard.mcp = LazyMCP(build_mcp)  # the MCP SDK loads at the first /mcp request
    admin = AdminSocket(
        counted,
        backup=lambda out: online_backup(
            settings.home, out, guard.landing, runner, lambda: service.graph
        ),
        status=status,
    )
    servers = [
        Server(uvicorn.Config(LocalOnly(admin), **common)),
        Server(
            uvicorn.Config(guard, ssl_certfile=str(team.cert), ssl_keyfile=str(team.key), **common)
        ),
    ]
    # The daemon's workers: extraction, supersede judging and embedding of what users record;
    # the replica's server started again if it died.
    chores = [
        asyncio.create_task(flush_recall_stats(service, runner, settings)),
        asyncio.create_task(enrich(service, runner, settings, asyncio.Event())),
        asyncio.create_task(embed(service, runner, settings)),
        asyncio.create_task(keep_replica(reads)),
    ]
    await serve_until_stopped(servers, sockets, guard.mcp, chores)
