"""`memoryd team serve`: the daemon's HTTP app on a network address over TLS, each request
authenticated by a user's token and decided by the gate (`memoryd.team.policy`).

`TeamGuard` sits in front of the daemon's app. It opens only what is gated per project
today: record (`POST /v1/memories`), recall (`GET`/`POST /v1/recall`), search, list and get;
every other route (Cypher, the graph page, MCP, maintenance) answers 403 `not_for_team`.
A request names its project by its git remote (`scope=git@github.com:acme/shop.git` or the
key `github.com/acme/shop`); the guard checks the caller's role there and hands the app the
project's scope on the server, `<home>/team-projects/<key>/`. Answers are filtered again to
the projects the caller may read, each hit carrying `recorded_by`, and every write is audited
as `team:<user>`. The admin Unix socket keeps the local daemon's rules (no token, 0600).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from memoryd.api.errors import error_body, status_of
from memoryd.api.runner import CountRequests, ServiceRunner
from memoryd.api.security import LocalOnly
from memoryd.config import Settings
from memoryd.daemon.control import refuse_second_daemon
from memoryd.daemon.server import bind_unix, embed, enrich, prepare, run_loop
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
from memoryd.team.config import PROJECTS_DIR, TeamConfig, open_store
from memoryd.team.keys import project_key
from memoryd.team.policy import Caller, Operation, authenticate, authorize
from memoryd.team.store import TeamStore, utcnow

logger = logging.getLogger(__name__)

LISTEN_FILE = "team-listen.json"
"""Where a running team server says which address it bound (port 0 picks a free one)."""
MAX_BODY = 8 * 1024 * 1024
LISTS = {"/v1/recall": "hits", "/v1/search": "items", "/v1/memories": "items"}
"""The read routes open to team users, and the key of their answer's list of hits."""

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]
ScopeOf = Callable[[str], Awaitable[str | None]]
"""A memory's scope hash by its slug (None: no such memory), read before a get is let in."""


class Projects:
    """The server-side directory of each team project: its scope on the team server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._hashes: dict[str, str] = {}

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


class Refused(Exception):
    """An answer the guard gives itself (status and error body) instead of the app's."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body


class TeamGuard:
    """ASGI middleware: authenticate, gate, rewrite the project, filter the answer."""

    def __init__(self, app: Any, store: TeamStore, projects: Projects, scope_of: ScopeOf) -> None:
        self.app = app
        self.store = store
        self.projects = projects
        self.scope_of = scope_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # no websockets on the team listener
        try:
            await self._handle(scope, receive, send)
        except MemorydError as exc:
            await _answer(send, status_of(exc), error_body(exc.code, str(exc), exc.hint or ""))
        except Refused as exc:
            await _answer(send, exc.status, exc.body)

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
        caller = await self._caller(scope)
        method, path = scope["method"], scope["path"]
        scope = {**scope, "headers": _with_actor(scope["headers"], f"team:{caller.user}")}
        if method == "GET" and path in LISTS:
            query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            key = self._project(caller, [v for k, v in query if k == "scope"], Operation.READ)
            query = [(k, v) for k, v in query if k != "scope"]
            query.append(("scope", self.projects.scope_hash(key)))
            scope["query_string"] = urlencode(query).encode("latin-1")
            await self._forward_read(caller, scope, receive, send, LISTS[path])
        elif method == "POST" and path == "/v1/recall":
            body = await _json_body(receive)
            key = self._project(caller, [body.get("scope")], Operation.READ)
            body["scope"] = self.projects.scope_hash(key)
            await self._forward_read(caller, scope, _replay(body), send, "hits")
        elif method == "POST" and path == "/v1/memories":
            body = await _json_body(receive)
            key = self._project(caller, [body.get("scope")], Operation.WRITE)
            body["scope"] = str(self.projects.directory(key))
            status, headers, answer = await _call(self.app, scope, _replay(body))
            if status == 201:
                slug = json.loads(answer)["meta"]["slug"]
                await asyncio.to_thread(self.store.note_author, slug, caller.user, key, utcnow())
            await _send(send, status, headers, answer)
        elif method == "GET" and path.startswith("/v1/memories/") and path.count("/") == 3:
            await self._get(caller, scope, receive, send, path.rsplit("/", 1)[1])
        else:
            raise NotForTeam(
                f"{method} {path} is not open to team users yet",
                hint="team users may record, recall, search, list and get"
                " (`/v1/memories`, `/v1/recall`, `/v1/search`)",
            )

    def _project(self, caller: Caller, values: list[Any], operation: Operation) -> str:
        if len(values) != 1 or not isinstance(values[0], str):
            raise InvalidInput(
                "a team request names exactly one project in `scope`",
                hint="pass scope=<the project's git remote>, e.g. git@github.com:acme/shop.git",
            )
        key = project_key(values[0])
        authorize(caller, key, operation)
        return key

    def _readable(self, caller: Caller) -> set[str]:
        return {self.projects.scope_hash(key) for key in caller.readable()}

    async def _forward_read(
        self, caller: Caller, scope: Scope, receive: Receive, send: Send, field: str
    ) -> None:
        status, headers, answer = await _call(self.app, scope, receive)
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
        await _send(send, status, headers, answer)

    async def _get(
        self, caller: Caller, scope: Scope, receive: Receive, send: Send, slug: str
    ) -> None:
        author = (await asyncio.to_thread(self.store.authors, [slug])).get(slug)
        if author is not None:
            authorize(caller, author.project, Operation.READ)
        # Decided before the app's get runs: a get counts as a read of the memory.
        scope_hash = await self.scope_of(slug)
        if scope_hash is not None and scope_hash not in self._readable(caller):
            raise _not_readable(slug, caller)
        status, headers, answer = await _call(self.app, scope, receive)
        if status == 200:
            data = json.loads(answer)
            if data["meta"].get("scope_hash") not in self._readable(caller):
                raise _not_readable(slug, caller)
            data["recorded_by"] = author.user if author else None
            answer = json.dumps(data).encode("utf-8")
        await _send(send, status, headers, answer)


def _not_readable(slug: str, caller: Caller) -> ScopeNotGranted:
    return ScopeNotGranted(
        f"memory {slug!r} is not in a project user {caller.user!r} may read",
        hint="ask a team admin for a grant on its project",
    )


def _with_actor(headers: list[tuple[bytes, bytes]], actor: str) -> list[tuple[bytes, bytes]]:
    """The request's headers with the audit actor set to the user (whatever the client sent)."""
    kept = [(k, v) for k, v in headers if k.lower() not in (b"x-memoryd-actor", b"content-length")]
    return [*kept, (b"x-memoryd-actor", actor.encode("ascii"))]


async def _json_body(receive: Receive) -> dict[str, Any]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidInput("the client went away before sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Refused(
                413, error_body("too_large", f"the body is over {MAX_BODY:,} bytes", "send less")
            )
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    try:
        data = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise InvalidInput(f"the body is not JSON: {exc}", hint="send a JSON object") from exc
    if not isinstance(data, dict):
        raise InvalidInput("the body is not a JSON object", hint="send a JSON object")
    return data


def _replay(body: dict[str, Any]) -> Receive:
    raw = json.dumps(body).encode("utf-8")
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive


async def _call(
    app: Any, scope: Scope, receive: Receive
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run the app on one request and keep its whole answer, to check it before it goes."""
    started: Message = {}
    chunks: list[bytes] = []

    async def collect(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, collect)
    return int(started.get("status", 500)), list(started.get("headers", [])), b"".join(chunks)


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    kept.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": kept})
    await send({"type": "http.response.body", "body": body})


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    headers = [(b"content-type", b"application/json")]
    await _send(send, status, headers, json.dumps(body).encode("utf-8"))


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
    settings = settings.model_copy(
        update={"graph": settings.graph.model_copy(update=team.graph_settings())}
    )
    files = DaemonFiles(settings.home)
    ensure_home(settings.home)
    files.check_socket_path()
    refuse_second_daemon(files)
    store = open_store(team)
    service = open_service(settings, actor="team")
    service.llm_judge_inline = False
    runner: ServiceRunner | None = None
    sockets: list[socket.socket] = []
    listen = settings.home / LISTEN_FILE
    try:
        files.write_pid()
        runner = ServiceRunner()
        prepare(service, runner)
        sockets = [bind_unix(files.socket), bind_network(team.host, team.port)]
        sockets[0].listen(128)  # both queue connections before the listen file says "up"
        host, port = sockets[1].getsockname()[:2]
        listen.write_text(json.dumps({"host": host, "port": port}), encoding="utf-8")
        logger.info("memoryd team server pid %d on https://%s:%d", os.getpid(), host, port)
        run_loop(_serve(service, runner, settings, team, store, sockets))
    finally:
        for sock in sockets:
            sock.close()
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

    guard = TeamGuard(counted, store, Projects(settings.home / PROJECTS_DIR), scope_of)
    servers = [
        Server(uvicorn.Config(LocalOnly(counted), **common)),
        Server(
            uvicorn.Config(guard, ssl_certfile=str(team.cert), ssl_keyfile=str(team.key), **common)
        ),
    ]
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        first = not servers[0].should_exit
        logger.info("%s: stopping the team server", signal.Signals(signum).name)
        for server in servers:
            server.force_exit = not first
            server.should_exit = True

    async def flush_recall_stats() -> None:
        """As the daemon does: counts to the graph often, to the vault files less often."""
        waited = 0.0
        while True:
            await asyncio.sleep(settings.daemon.count_interval_s)
            waited += settings.daemon.count_interval_s
            if waited >= settings.daemon.flush_interval_s:
                waited = 0.0
                runner.write_later(service.flush_recall_stats)
            else:
                runner.write_later(service.flush_recall_counts)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    # The daemon's workers: extraction, supersede judging and embedding of what users record.
    chores = [
        asyncio.create_task(flush_recall_stats()),
        asyncio.create_task(enrich(service, runner, settings, asyncio.Event())),
        asyncio.create_task(embed(service, runner, settings)),
    ]
    try:
        await asyncio.gather(
            *(server.serve(sockets=[sock]) for server, sock in zip(servers, sockets, strict=True))
        )
    finally:
        for chore in chores:
            chore.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
