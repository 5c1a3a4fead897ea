"""The FalkorDB replica itself (`graph/falkordb_replica.py`), without a team server: it
follows a primary that asks for a password, reads what the writer wrote, reports how far
behind it is, and says why it cannot run on a primary with no TCP port; `setup falkordb
--tcp-port` makes and keeps that password, and adds the port to a running server."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memoryd.errors import ConfigError, StorageError
from memoryd.graph.falkordb_replica import Replica
from memoryd.graph.falkordb_server import LocalServer, graph_password, start_local
from memoryd.graph.falkordb_store import FalkorGraphStore
from tests.conftest import ENGINE
from tests.daemon_harness import free_port
from tests.integration.test_falkordb import memory
from tests.pins import PINNED_ENV
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(ENGINE != "kuzu", reason="runs beside the kuzu leg only")
PASSWORD = "replica-test-secret"


@pytest.fixture
def root() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="mdrep-", dir="/tmp"))  # short socket paths
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def primary(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalServer]:
    monkeypatch.setenv("MEMORYD_GRAPH_PASSWORD", PASSWORD)  # the server takes this one
    server = start_local(root / "p", query_memory_mb=64, tcp_port=free_port())
    try:
        yield server
    finally:
        server.stop()


def test_a_replica_follows_a_primary_with_a_password_and_says_how_far_behind(
    root: Path, primary: LocalServer
) -> None:
    writer = FalkorGraphStore(root / "graph", url=primary.url, name=f"r-{uuid.uuid4().hex}",
                              password=PASSWORD)  # fmt: skip
    replica = Replica(root / "r", lambda: writer, max_lag_s=2.0)
    try:
        writer.upsert_memories([memory("first")])
        replica.start()
        wait_until(lambda: replica.state().state == "in sync", what="the first sync",
                   timeout_s=120, every_s=0.1)  # fmt: skip
        state = replica.state()
        assert state.serving
        assert state.writes_behind == 0
        slugs = "MATCH (m:Memory) RETURN m.slug ORDER BY m.slug"
        assert replica.store().cypher(slugs).rows == [["first"]]
        writer.upsert_memories([memory("second")])
        wait_until(lambda: replica.store().cypher(slugs).rows == [["first"], ["second"]],
                   what="the second write on the replica", timeout_s=60)  # fmt: skip
        assert replica.state().state == "in sync"
        # The replica asks for the password too: it is never open on its socket.
        bare = redis.Redis(unix_socket_path=str(root / "r" / "falkordb.sock"))
        with pytest.raises(redis.AuthenticationError):
            bare.ping()
        bare.close()
        # Cut off from its primary, it is down, and reads go elsewhere.
        replica._client.execute_command("REPLICAOF", "NO", "ONE")
        assert replica.state().state == "down"
        assert not replica.state().serving
    finally:
        replica.stop()
        writer.close()


def test_a_primary_with_no_tcp_port_cannot_have_a_replica(root: Path, falkordb_url: str) -> None:
    writer = FalkorGraphStore(root / "graph", url=falkordb_url, name=f"r-{uuid.uuid4().hex}")
    replica = Replica(root / "r", lambda: writer, max_lag_s=2.0)
    try:
        with pytest.raises(ConfigError, match="listens on no TCP port"):
            replica.start()
        assert not (root / "r").exists()  # no replica server was started
    finally:
        replica.stop()
        writer.close()


def refused_without_password(port: int) -> bytes:
    """What the server on 127.0.0.1:`port` answers a client that gives no password."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(128)


def cli(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "memoryd", *args, "--home", str(home)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**PINNED_ENV, **os.environ, **(env or {})}, check=False)  # fmt: skip


NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


def test_setup_falkordb_with_a_tcp_port_asks_for_a_password_and_serves_a_replica(
    root: Path,
) -> None:
    """`memoryd setup falkordb --tcp-port P` on a machine with no OS keyring: the server also
    listens on 127.0.0.1:P (only there) and asks every client for a password it made, kept in
    a file only its owner reads (the CLI says where); a client without it is refused
    (NOAUTH), memoryd's clients find it, and a replica follows with it (`masterauth`)."""
    home = root / "home"
    port = free_port()
    started = cli(home, "setup", "falkordb", "--tcp-port", str(port), env=NO_KEYRING)
    try:
        assert started.returncode == 0, started.stderr
        directory = home / "falkordb"
        kept = directory / "password"
        assert f"kept in {kept} (readable by you only: there is no real OS keyring here)" in (
            " ".join(started.stdout.split())
        ), started.stdout
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        password = kept.read_text().strip()
        assert len(password) >= 40
        url = f"unix://{directory / 'falkordb.sock'}"
        assert graph_password(url) == password
        assert refused_without_password(port).startswith(b"-NOAUTH")
        bare = redis.Redis(unix_socket_path=str(directory / "falkordb.sock"))
        with pytest.raises(redis.AuthenticationError):
            bare.ping()  # the socket asks too: one password for the whole server
        bare.close()
        client = redis.Redis(host="127.0.0.1", port=port, password=password,
                             decode_responses=True)  # fmt: skip
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        client.close()
        for line in (directory / "redis.log").read_text().splitlines():
            assert password not in line
        again = cli(home, "setup", "falkordb", "--tcp-port", str(port), "--json", env=NO_KEYRING)
        assert again.returncode == 0, again.stderr
        shown = json.loads(again.stdout)
        assert shown["password"] is True
        assert shown["password_kept"] is None
        assert kept.read_text().strip() == password
        writer = FalkorGraphStore(root / "graph", url=url, name=f"r-{uuid.uuid4().hex}",
                                  password=graph_password(url))  # fmt: skip
        replica = Replica(root / "r", lambda: writer, max_lag_s=2.0)
        try:
            writer.upsert_memories([memory("over-tcp")])
            replica.start()
            wait_until(lambda: replica.state().state == "in sync", what="the first sync",
                       timeout_s=120, every_s=0.1)  # fmt: skip
            assert replica.store().cypher("MATCH (m:Memory) RETURN m.slug").rows == [["over-tcp"]]
            assert replica._client.config_get("masterauth")["masterauth"] == password
        finally:
            replica.stop()
            writer.close()
    finally:
        stopped = cli(home, "setup", "falkordb", "--stop")
        assert stopped.returncode == 0, stopped.stderr


def test_setup_falkordb_keeps_the_password_in_a_real_keyring(
    root: Path, file_keyring: object
) -> None:
    """With an OS keyring (the tests' file backend stands in for one), the password goes
    there, not into a file, and the CLI says so; clients read it from the keyring."""
    home = root / "home"
    port = free_port()
    started = cli(home, "setup", "falkordb", "--tcp-port", str(port))
    try:
        assert started.returncode == 0, started.stderr
        assert "kept in the OS keyring" in started.stdout, started.stdout
        assert "memoryd/falkordb" in started.stdout
        directory = home / "falkordb"
        assert not (directory / "password").exists()
        import keyring

        password = keyring.get_password("memoryd", "falkordb")
        assert password
        assert graph_password(f"unix://{directory / 'falkordb.sock'}") == password
        assert refused_without_password(port).startswith(b"-NOAUTH")
        client = redis.Redis(host="127.0.0.1", port=port, password=password)
        assert client.ping()
        client.close()
    finally:
        cli(home, "setup", "falkordb", "--stop")


def test_setup_falkordb_adds_a_tcp_port_to_a_running_server_or_says_what_to_stop(
    root: Path,
) -> None:
    """`--tcp-port P` for a server already running without it: refused while a writer holds
    the graph (the error names it and what to do), then, with the writer gone, the server is
    restarted on P, with a password, and keeps what it held. One on P with no password (set
    up before memoryd made them) is restarted with one."""
    home = root / "home"
    port = free_port()
    started = cli(home, "setup", "falkordb", "--json", env=NO_KEYRING)
    try:
        assert started.returncode == 0, started.stderr
        url = json.loads(started.stdout)["url"]
        assert graph_password(url) is None  # a Unix socket only: no password
        writer = FalkorGraphStore(root / "graph", url=url, name=f"r-{uuid.uuid4().hex}")
        try:
            writer.upsert_memories([memory("before-the-port")])
            refused = cli(home, "setup", "falkordb", "--tcp-port", str(port), env=NO_KEYRING)
            assert refused.returncode != 0
            said = " ".join(refused.stderr.split())
            assert f"is not on TCP port {port} (it listens on its Unix socket only)" in said
            assert f"pid {os.getpid()}" in said  # the writer holding it
            assert f"memoryd setup falkordb --tcp-port {port}` again" in said
            assert writer.cypher("MATCH (m:Memory) RETURN m.slug").rows == [["before-the-port"]]
        finally:
            writer.close()
        moved = cli(home, "setup", "falkordb", "--tcp-port", str(port), env=NO_KEYRING)
        assert moved.returncode == 0, moved.stderr
        assert f"and 127.0.0.1:{port}" in moved.stdout
        restarted = f"memoryd restarted it to listen on 127.0.0.1:{port} with a password."
        assert restarted in moved.stdout
        assert refused_without_password(port).startswith(b"-NOAUTH")
        reader = FalkorGraphStore(root / "graph", url=url, name=writer.name,
                                  password=graph_password(url), read_only=True)  # fmt: skip
        try:
            assert reader.cypher("MATCH (m:Memory) RETURN m.slug").rows == [["before-the-port"]]
        finally:
            reader.close()
        # A server set up on that port before memoryd made passwords (none kept, none asked)
        # is restarted with one too.
        open_port = redis.Redis(unix_socket_path=url[len("unix://") :],
                                password=graph_password(url))  # fmt: skip
        open_port.config_set("requirepass", "")
        open_port.close()
        for name in ("password.json", "password"):
            (home / "falkordb" / name).unlink()
        assert refused_without_password(port).startswith(b"+PONG")
        again = cli(home, "setup", "falkordb", "--tcp-port", str(port), env=NO_KEYRING)
        assert again.returncode == 0, again.stderr
        assert restarted in again.stdout
        assert refused_without_password(port).startswith(b"-NOAUTH")
    finally:
        cli(home, "setup", "falkordb", "--stop")


def test_a_port_on_a_server_memoryd_did_not_start_in_the_background_is_refused(
    root: Path,
) -> None:
    """A server started in the foreground by another process (no pid file) is not restarted
    to add a port: the error says to stop it."""
    server = start_local(root / "fg", query_memory_mb=64)
    try:
        with pytest.raises(StorageError, match="memoryd did not start it in the background"):
            start_local(root / "fg", tcp_port=free_port())
        assert server.process is not None
        assert server.process.poll() is None
    finally:
        server.stop()
