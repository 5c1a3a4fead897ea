"""The FalkorDB replica itself (`graph/falkordb_replica.py`), without a team server: it
follows a primary that asks for a password, reads what the writer wrote, reports how far
behind it is, and says why it cannot run on a primary with no TCP port."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memoryd.errors import ConfigError
from memoryd.graph.falkordb_replica import Replica
from memoryd.graph.falkordb_server import LocalServer, start_local
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
    server = start_local(root / "p", query_memory_mb=64, tcp_port=free_port())
    client = redis.Redis(unix_socket_path=str(server.socket))
    client.config_set("requirepass", PASSWORD)
    client.close()
    monkeypatch.setenv("MEMORYD_GRAPH_PASSWORD", PASSWORD)
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


def test_setup_falkordb_with_a_tcp_port_serves_a_replica(root: Path) -> None:
    """`memoryd setup falkordb --tcp-port P`: the local server also listens on 127.0.0.1:P
    (only there), and a replica follows it."""
    home = root / "home"
    port = free_port()

    def memoryd(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "memoryd", *args, "--home", str(home)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env={**PINNED_ENV, **os.environ}, check=False)  # fmt: skip

    started = memoryd("setup", "falkordb", "--tcp-port", str(port), "--json")
    try:
        assert started.returncode == 0, started.stderr
        url = json.loads(started.stdout)["url"]
        client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        client.close()
        writer = FalkorGraphStore(root / "graph", url=url, name=f"r-{uuid.uuid4().hex}")
        replica = Replica(root / "r", lambda: writer, max_lag_s=2.0)
        try:
            writer.upsert_memories([memory("over-tcp")])
            replica.start()
            wait_until(lambda: replica.state().state == "in sync", what="the first sync",
                       timeout_s=120, every_s=0.1)  # fmt: skip
            assert replica.store().cypher("MATCH (m:Memory) RETURN m.slug").rows == [["over-tcp"]]
        finally:
            replica.stop()
            writer.close()
    finally:
        stopped = memoryd("setup", "falkordb", "--stop")
        assert stopped.returncode == 0, stopped.stderr
