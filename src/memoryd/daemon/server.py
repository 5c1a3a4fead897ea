"""`memoryd serve`: open the stores once, serve the API on the Unix socket and 127.0.0.1.

Start-up order matters:
1. the data-dir lock (inside `open_service`): from here on no other daemon or embedded
   command can hold the graph, so a leftover socket file is known to be stale;
2. the pid file, a torn audit tail repaired, the inbox drained;
3. the sockets, bound before anything is served: the Unix socket is created with mode 0600
   (umask), TCP on 127.0.0.1 only, behind the bearer token.

Both serve the HTTP API under `/v1` and MCP (streamable HTTP) at `/mcp`, behind the same
guard; MCP tools call the service the way the routes do (reads side by side, writes on the
one writer thread).

Shutdown (SIGTERM or SIGINT): stop accepting, let in-flight requests finish (their writes
are on the writer thread and complete), finish queued writes, close the stores, remove the
socket and the pid file. A second signal stops waiting for open connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memoryd.api.runner import Batcher, CountRequests, ServiceRunner
from memoryd.config import Settings
from memoryd.daemon.captures import captures_settled, watch_inbox
from memoryd.daemon.control import refuse_second_daemon
from memoryd.daemon.judging import judge_round
from memoryd.daemon.readers import ReaderPool
from memoryd.daemon.scheduler import run_schedules
from memoryd.daemon_files import DaemonFiles
from memoryd.enrichment import run_llm_stage
from memoryd.errors import MemorydError, StorageError
from memoryd.inbox import Inbox
from memoryd.models import RecallResult
from memoryd.private import private_umask
from memoryd.service import MemoryService

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

    from memoryd.mcp.member_tools import TeamCalls

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
MCP_ACTOR = "mcp"
T = TypeVar("T")


def serve(settings: Settings, *, port: int | None = None, tcp: bool | None = None) -> None:
    """Run the daemon in this process until SIGTERM or SIGINT."""
    from memoryd.wiring import ensure_home, open_service

    private_umask()  # the daemon's files, the engines' and its readers' (memoryd.private)
    files = DaemonFiles(settings.home)
    ensure_home(settings.home)
    files.check_socket_path()
    refuse_second_daemon(files)
    use_tcp = settings.daemon.tcp if tcp is None else tcp
    tcp_port = settings.daemon.port if port is None else port
    # Until the event loop takes over, SIGTERM unwinds like Ctrl-C: the stores still close.
    previous = signal.signal(signal.SIGTERM, _exit_while_starting)
    try:
        service = open_service(settings, actor="daemon")
        service.llm_judge_inline = False  # the worker asks the LLM, never the writer
        # Its decay sweeps keep the saved statistics of the scopes they move current too.
        service.index.keeps_saved = True
    except BaseException:
        signal.signal(signal.SIGTERM, previous)
        raise
    runner: ServiceRunner | None = None
    sockets: list[socket.socket] = []
    try:
        files.write_pid()
        runner = ServiceRunner()
        prepare(service, runner)
        token = files.ensure_token() if use_tcp else None
        sockets.append(bind_unix(files.socket))
        if use_tcp:
            sockets.append(bind_tcp(tcp_port))
        bound_port = sockets[1].getsockname()[1] if use_tcp else None
        logger.info(
            "memoryd daemon pid %d serving %s on %s%s",
            os.getpid(),
            settings.home,
            files.socket,
            f" and http://127.0.0.1:{bound_port}" if bound_port else "",
        )
        run_loop(_serve(service, runner, settings, sockets, token, bound_port))
    finally:
        for sock in sockets:
            sock.close()
        if runner is not None:
            runner.close()
        service.close()
        files.remove_runtime_files()
        signal.signal(signal.SIGTERM, previous)
        logger.info("memoryd daemon pid %d stopped; stores closed", os.getpid())


def _exit_while_starting(signum: int, frame: object) -> None:
    logger.info("%s while starting: closing the stores", signal.Signals(signum).name)
    raise SystemExit(0)


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run the daemon's event loop: uvloop where it is installed (the HTTP plumbing runs in
    the same process and under the same GIL as every recall, so its cost is paid by all of
    them; uvicorn picks up httptools by itself), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def prepare(service: MemoryService, runner: ServiceRunner) -> None:
    """Start-up work before the first request: repair what a crash left, drain the inbox,
    load what recall reads."""
    if service.audit.repair_torn_tail():
        logger.warning("repaired a torn audit line left by a crash")
    drain_inbox(service, runner)
    # The index writer's threads are made on the writer thread (at the daemon's priority),
    # not by the first low-priority background write.
    runner.run_write(service.index.open_writer)
    service.prepare_recall()


def drain_inbox(service: MemoryService, runner: ServiceRunner) -> None:
    """Index the captures written while no daemon ran (DESIGN.md §2), through the writer."""
    indexed = runner.run_write(service.drain_inbox)
    if indexed:
        logger.info("indexed %d capture(s) from the inbox", indexed)


async def enrich(
    service: MemoryService, runner: ServiceRunner, settings: Settings, wake: asyncio.Event
) -> None:
    """Extraction and LLM summaries of captured sessions (DESIGN.md §2's background worker):
    at start (what a previous run left queued), once drains (`wake`) have been quiet for
    `enrichment.settle_s`, and every `enrichment.interval_s` (backoffs end); in small rounds,
    so recalls and writes are never starved. Its first round waits `settle_s` too: the
    first requests come with the daemon's start (an autostarting client's), and the first
    round's first step loads the extraction pipelines (seconds of CPU on a busy machine)."""
    batch = settings.enrichment.batch_size
    await asyncio.sleep(settings.enrichment.settle_s)
    while True:
        wake.clear()
        try:
            while await enrich_round(service, runner, batch) >= batch:
                pass  # a full round: more may be due
        except MemorydError as exc:
            logger.warning("enrichment paused: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), settings.enrichment.interval_s)
        while wake.is_set():  # captures keep coming: wait until they settle
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), settings.enrichment.settle_s)


async def enrich_round(service: MemoryService, runner: ServiceRunner, limit: int) -> int:
    """One round of the enrichment worker: up to `limit` due sessions, one at a time.

    Each is three steps, so nothing long holds the writer: the file is read and the spaCy
    rules run as a read; the LLM call (HTTP, seconds, retries) runs on a plain thread; only
    writing the result is a writer job, which checks the content did not change meanwhile.
    Before each step it waits until captures stopped arriving (`captures_settled`) and no
    request is in flight (`yield_to_requests`), and within a step before each graph
    statement (`ServiceRunner.background`).
    Returns how many were settled; a failure is logged and leaves that one queued.
    """
    settled = 0
    inbox = Inbox(service.home)
    await captures_settled(inbox)  # an agent's hooks first
    await judge_round(service, runner, limit)  # recorded memories: the rules ran, the LLM next
    await runner.yield_to_requests()
    for slug in await runner.read(runner.background(service.enrichment_due), limit):
        try:
            await captures_settled(inbox)
            await runner.yield_to_requests()  # a user's request first (`ServiceRunner`)
            job = await runner.read(runner.background(service.prepare_enrichment), slug)
            if job is None:
                continue
            result = None
            if job.use_llm and service.llm is not None:
                result = await asyncio.to_thread(run_llm_stage, service.llm, job)
            await runner.yield_to_requests()
            state = await runner.write(runner.background(service.apply_enrichment), job, result)
        except MemorydError as exc:
            logger.warning("enrichment of %s stays queued: %s", slug, exc)
            continue
        settled += 1
        if job.use_llm and job.skip is None and state not in ("requeued", "gone"):
            await judge_round(service, runner, limit)  # apply_enrichment queued its judging
    return settled


async def embed(service: MemoryService, runner: ServiceRunner, settings: Settings) -> None:
    """The vector stage's background work (when it runs): every `enrichment.settle_s`, the
    memories the index wrote since the last look are embedded. A look that finds nothing
    costs no model call."""
    if service.vectors is None:
        return
    service.embeds_in_background = True
    while True:
        await embed_rounds(service, runner)
        await asyncio.sleep(max(0.2, settings.enrichment.settle_s))


async def embed_rounds(service: MemoryService, runner: ServiceRunner) -> None:
    """The vector stage's embeddings (when it runs): what the index wrote since the last
    round, a batch at a time, so a recall waits at most one batch (`recall.vectors.BATCH`)."""
    if service.vectors is None:
        return
    try:
        while True:
            report = await runner.read(service.embed_pending)
            if report is None:
                return
            if report.embedded or report.removed:
                logger.info(
                    "embedded %d memories (%d passages), %d waiting",
                    report.embedded,
                    report.passages,
                    len(report.pending),
                )
            if not report.pending:
                return
    except MemorydError as exc:
        logger.warning("embedding paused: %s", exc)


def bind_unix(path: Path) -> socket.socket:
    """The Unix socket, mode 0600 from the moment it exists (we hold the data-dir lock, so a
    file already there is a dead daemon's)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise StorageError(f"cannot create the socket {path}: {exc.strerror}") from exc
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.setblocking(False)
    return sock


def bind_tcp(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise StorageError(
            f"cannot listen on 127.0.0.1:{port}: {exc.strerror}",
            hint="pick another port with --port (or daemon.port in config.toml), or --no-tcp",
        ) from exc
    sock.setblocking(False)
    return sock


class DaemonCalls:
    """How the daemon's MCP tools call the service: as the HTTP routes do. Tools run on
    worker threads; reads run there under the runner's gate (side by side, shut out only
    by reindex), writes are queued on the one writer thread and audited as `mcp`, and
    recall counts are batched onto the writer afterwards, so a recall never waits for
    writes."""

    def __init__(
        self,
        service: MemoryService,
        runner: ServiceRunner,
        recalls: Batcher[RecallResult],
        readers: ReaderPool | None,
    ) -> None:
        self._service = service
        self._runner = runner
        self._recalls = recalls
        self._readers = readers

    def read(self, action: Callable[[], T]) -> T:
        with self._runner.gate.shared():
            return action()

    def write(self, action: Callable[[], T]) -> T:
        def acting() -> T:
            # One write at a time on the writer thread: the actor cannot leak into another.
            previous, self._service.actor = self._service.actor, MCP_ACTOR
            try:
                return action()
            finally:
                self._service.actor = previous

        return self._runner.run_write(acting)

    def recall(self, query: str, scope: str | None, k: int) -> RecallResult:
        readers, service = self._readers, self._service
        result: RecallResult = self.read(
            lambda: (
                readers.call("recall", query, scope=scope, k=k, track=False)
                if readers is not None
                else service.recall(query, scope=scope, k=k, track=False)
            )
        )
        if result.hits:
            self._recalls.add(result)
        return result


def mount_mcp(
    app: Starlette,
    service: MemoryService,
    runner: ServiceRunner,
    readers: ReaderPool | None,
    team: TeamCalls | None = None,
) -> LazyMCP:
    """Add memoryd's MCP server at `/mcp` (streamable HTTP) to the API app; returns its
    session holder, whose `run()` the caller must hold open while serving (uvicorn runs
    with lifespan off here).

    The server is built on the first `/mcp` request (`LazyMCP`): importing the MCP SDK is
    most of a daemon start's CPU, and most daemons (the CLI's, the hooks', the stdio `mcp`
    command's, which all speak `/v1`) never get an MCP request.

    Stateless with JSON answers: every MCP request is one plain HTTP exchange, so the daemon
    keeps no per-client sessions and a shutdown never waits on an open event stream. The
    SDK's own Host/Origin check is kept, widened to the port-less `localhost` a Unix-socket
    client sends; LocalOnly (Host check, token on TCP) guards the route like every other.
    """
    from starlette.routing import Route

    def build() -> tuple[ASGIApp, StreamableHTTPSessionManager]:
        from mcp.server.transport_security import TransportSecuritySettings

        from memoryd.mcp.server import create_server

        calls = DaemonCalls(service, runner, app.state.backend.recalls, readers)
        server = create_server(
            service, home=service.home, calls=calls, default_scope=Path.home(), team=team
        )
        hosts = ["localhost", "127.0.0.1", "[::1]"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
            allowed_origins=[f"http://{h}{port}" for h in hosts for port in ("", ":*")],
        )
        mcp_app = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            json_response=True,
            stateless_http=True,
            transport_security=security,
        )
        # The SDK's app is one route at MCP_PATH (no auth, no custom routes): its endpoint
        # is what the lazy route hands each request to, as the mounted route did.
        (route,) = mcp_app.routes
        if not isinstance(route, Route) or route.path != MCP_PATH:
            raise TypeError(f"the MCP SDK's app is not one route at {MCP_PATH}: {route!r}")
        return route.app, server.session_manager

    lazy = LazyMCP(build)
    app.router.routes.append(Route(MCP_PATH, endpoint=lazy))
    return lazy


class LazyMCP:
    """The ASGI endpoint at `/mcp`: builds the MCP server (`build`, on a worker thread, so
    requests to `/v1` go on meanwhile) when the first request comes, starts its session
    manager's task group and from then on hands every request to the SDK's endpoint.

    `run()` is what the daemon holds open while serving, as it held the session manager's
    own `run()`; on leaving it the session manager (if one was started) is stopped."""

    def __init__(self, build: Callable[[], tuple[ASGIApp, StreamableHTTPSessionManager]]) -> None:
        self._build = build
        self._endpoint: ASGIApp | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint or await self._start()
        await endpoint(scope, receive, send)

    async def _start(self) -> ASGIApp:
        async with self._lock:
            if self._endpoint is None:
                endpoint, sessions = await asyncio.to_thread(self._build)
                started = asyncio.get_running_loop().create_future()
                self._holder = asyncio.create_task(self._hold(sessions, started))
                await started
                self._endpoint = endpoint
            return self._endpoint

    async def _hold(
        self, sessions: StreamableHTTPSessionManager, started: asyncio.Future[None]
    ) -> None:
        # The session manager's task group is entered and left in this one task, as anyio
        # requires; requests run their MCP exchanges in it.
        try:
            async with sessions.run():
                started.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self._stop.set()
            if self._holder is not None:
                await self._holder


async def flush_recall_stats(
    service: MemoryService, runner: ServiceRunner, settings: Settings
) -> None:
    """Recalls are counted in memory, added to the graph every few seconds (one write for
    many recalls), and to the vault files less often. Scope statistics the last writes left
    unsaved are saved too, when saving is due (`SearchIndex.save_statistics`)."""
    waited = 0.0
    while True:
        await asyncio.sleep(settings.daemon.count_interval_s)
        waited += settings.daemon.count_interval_s
        runner.write_later(lambda: service.index.save_statistics())
        if waited >= settings.daemon.flush_interval_s:
            waited = 0.0
            runner.write_later(service.flush_recall_stats)
        else:
            runner.write_later(service.flush_recall_counts)


async def serve_until_stopped(
    servers: Sequence[Any],
    sockets: Sequence[socket.socket],
    mcp_sessions: Any,
    chores: Sequence[asyncio.Task[Any]],
    closing: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve each uvicorn server on its socket until SIGTERM or SIGINT: the first signal lets
    in-flight requests finish, a second stops waiting for open connections. Then the chores
    are cancelled and `closing` runs, with the signal handlers still in place (the daemon and
    the team server share this)."""
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        first = not servers[0].should_exit
        logger.info(
            "%s: %s",
            signal.Signals(signum).name,
            "finishing in-flight requests, then closing the stores"
            if first
            else "no longer waiting for open connections",
        )
        for server in servers:
            server.force_exit = not first
            server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        async with mcp_sessions.run():
            await asyncio.gather(
                *(
                    server.serve(sockets=[sock])
                    for server, sock in zip(servers, sockets, strict=True)
                )
            )
    finally:
        for chore in chores:
            chore.cancel()
        if closing is not None:
            await closing()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def _serve(
    service: MemoryService,
    runner: ServiceRunner,
    settings: Settings,
    sockets: list[socket.socket],
    token: str | None,
    tcp_port: int | None,
) -> None:
    import uvicorn

    from memoryd.api.app import create_app
    from memoryd.api.security import SOCKET_ONLY, LocalOnly

    class Server(uvicorn.Server):
        """uvicorn without its own signal handling: the daemon stops both servers at once."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    app = create_app(service, runner, settings=settings, tcp_port=tcp_port)
    readers_wanted = settings.daemon.reader_count()
    readers = ReaderPool(service, readers_wanted) if readers_wanted else None
    app.state.backend.readers = readers
    counted = CountRequests(app, runner)
    from memoryd.team_member.forward import (  # a data dir that joined a team (`team join`)
        TeamTools,
        forwarding,
    )

    served, team = forwarding(settings.home, counted, lambda read: runner.read(read, service))
    tools = TeamTools(team) if team is not None else None  # its MCP tools reach the team too
    mcp_sessions = mount_mcp(app, service, runner, readers, tools)
    guarded = [LocalOnly(served), LocalOnly(served, token=token, refused=SOCKET_ONLY)]
    servers = [
        Server(
            uvicorn.Config(
                guard,
                lifespan="off",
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=None,
                server_header=False,
                # Clients are local (the socket, 127.0.0.1): no proxy's X-Forwarded-For to
                # read, and one ASGI layer less on every request.
                proxy_headers=False,
            )
        )
        for guard, _ in zip(guarded, sockets, strict=False)
    ]
    app.state.backend.stopping = lambda: servers[0].should_exit  # the page's event stream

    enrich_wake = asyncio.Event()
    app.state.backend.wake_enrichment = enrich_wake.set

    started = service.clock()

    chores = [
        *(
            [asyncio.create_task(run_schedules(service, runner, settings, started))]
            if settings.schedule.enabled
            else []
        ),
        asyncio.create_task(flush_recall_stats(service, runner, settings)),
        asyncio.create_task(watch_inbox(service, runner, settings, enrich_wake)),
        asyncio.create_task(enrich(service, runner, settings, enrich_wake)),
        asyncio.create_task(embed(service, runner, settings)),
        *([asyncio.create_task(team.run())] if team is not None else []),
    ]

    async def closing() -> None:
        if team is not None:
            await team.close()
        if readers is not None:
            await asyncio.to_thread(readers.close)

    await serve_until_stopped(servers, sockets, mcp_sessions, chores, closing)
