"""The team server's operations, on a running server (issue 32, Operations): an online
backup while a user keeps recording, restored into a new data dir; the FalkorDB replica that
serves users' Cypher and the graph page (routing proved by each server's SLOWLOG, the gate
holding there, a write not waiting behind a long query); `team status` with the replica's lag.

The module starts its own FalkorDB primary, on a Unix socket and a loopback TCP port (Redis
replicates over TCP only); the team server starts the replica itself (`replica = true`, the
default)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from memoryd.config import Settings
from memoryd.filelock import try_lock
from memoryd.graph.falkordb_server import SOCKET, LocalServer, start_local
from memoryd.team.config import load_team, with_team_graph
from memoryd.team.store import TeamStore
from memoryd.vault import parse
from memoryd.wiring import open_service
from tests.conftest import isolate_environment
from tests.daemon_harness import free_port, uds_client
from tests.pins import PINNED_ENV
from tests.team_harness import Team
from tests.waiting import wait_until

SHOP = "git@github.com:acme/shop.git"
OTHER = "git@github.com:acme/other.git"


@pytest.fixture(scope="module")
def primary() -> Iterator[LocalServer]:
    directory = Path(tempfile.mkdtemp(prefix="mdfp-", dir="/tmp"))
    server = start_local(directory / "s", query_memory_mb=256, tcp_port=free_port())
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, primary: LocalServer) -> Iterator[Team]:
    root = Path(tempfile.mkdtemp(prefix="mdops-", dir="/tmp"))  # the replica's socket path
    with pytest.MonkeyPatch.context() as patch:
        isolate_environment(patch, root)
        patch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
        team = Team.init(root / "server", primary.url, f"team-{uuid.uuid4().hex}")
        for user in ("alice", "bob", "carol"):
            team.add_user(user)
        team.cli("grant", "alice", SHOP, "--role", "write")
        team.cli("grant", "bob", SHOP, "--role", "read")
        team.cli("grant", "carol", OTHER, "--role", "write")
        try:
            yield team.start()
        finally:
            team.stop()
            shutil.rmtree(root, ignore_errors=True)


def connect(socket_path: Path, password: str | None) -> redis.Redis:
    """A client of a server of the test (the replica asks for the primary's password)."""
    return redis.Redis(unix_socket_path=str(socket_path), password=password,
                       decode_responses=True)  # fmt: skip


def status(team: Team) -> dict[str, Any]:
    with uds_client(team.home) as admin:
        answer = admin.get("/v1/team/status")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def in_sync(team: Team) -> dict[str, Any]:
    """The replica's state once it holds every write the primary made."""
    return wait_until(
        lambda: (r := status(team)["replica"])["state"] == "in sync" and r,
        what="the replica to catch up", timeout_s=120, every_s=0.2,
    )  # fmt: skip


@contextmanager
def slowlogs(password: str | None, *servers: Path) -> Iterator[list[Callable[[str], bool]]]:
    """Each server's SLOWLOG logging every command; per server, whether a command naming a
    text ran there since."""
    clients = [connect(s, password) for s in servers]
    for client in clients:
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()

    def ran(client: redis.Redis) -> Callable[[str], bool]:
        def named(text: str) -> bool:
            entries = client.slowlog_get(100_000)
            return any(text in " ".join(map(str, e["command"].split())) for e in entries)

        return named

    try:
        yield [ran(client) for client in clients]
    finally:
        for client in clients:
            client.config_set("slowlog-log-slower-than", 10_000)
            client.close()


def record(team: Team, title: str, user: str = "alice", scope: str = SHOP) -> str:
    body = {"type": "fact", "title": title, "body": f"{title}, noted by the ops test.",
            "scope": scope}  # fmt: skip
    with team.client(user) as alice:
        answer = alice.post("/v1/memories", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["meta"]["slug"])


def vault_slugs(home: Path) -> set[str]:
    """The slugs of the memory files under the vault, each file read whole (a torn file fails)."""
    return {parse(p.read_text("utf-8"), p).meta.slug for p in (home / "scopes").rglob("*.md")}


def memoryd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args], capture_output=True, text=True, timeout=600,
        env={**PINNED_ENV, **os.environ}, check=False,
    )  # fmt: skip


def test_an_online_backup_under_writes_restores_every_acknowledged_write(
    team: Team, primary: LocalServer, tmp_path: Path
) -> None:
    """Alice records without pause while `team backup` runs on the live server: every write
    acknowledged before the backup started is in the restored vault and graph, every memory
    restored is whole (its file parses, its author note came with it), the graph rebuilt
    from the vault holds exactly the memories the live graph held at the backup, and the
    restored audit log verifies."""
    acknowledged: list[tuple[float, str]] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            n = 0
            while not stop.is_set():
                n += 1
                slug = record(team, f"Ops stream write {n} lands on the ledger queue")
                acknowledged.append((time.monotonic(), slug))
        except BaseException as exc:  # surfaced by the assert below
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(acknowledged) < 5 and thread.is_alive():
            time.sleep(0.05)
        archive = tmp_path / "online.tar.gz"
        started = time.monotonic()
        made = memoryd("team", "backup", str(archive), "--home", str(team.home))
        finished = time.monotonic()
        while len([t for t, _ in acknowledged if t > finished]) < 3 and thread.is_alive():
            time.sleep(0.05)  # writes go on after the backup too
    finally:
        stop.set()
        thread.join(timeout=300)
    assert not failures, failures
    assert made.returncode == 0, made.stderr
    assert "writes waited" in made.stdout, made.stdout
    assert archive.stat().st_mode & 0o777 == 0o600
    before = {slug for at, slug in acknowledged if at < started}
    written = {slug for _, slug in acknowledged}

    restored = tmp_path / "restored"
    out = memoryd("team", "restore", str(archive), "--port", str(free_port()),
                  "--falkordb-url", primary.url, "--graph-name", f"team-{uuid.uuid4().hex}",
                  "--home", str(restored))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "note:" not in out.stderr  # the rebuilt graph has what the live one had
    in_vault = vault_slugs(restored)
    assert before <= in_vault <= written
    config = load_team(restored)
    authors = TeamStore(config.database, config.secret).authors(sorted(in_vault))
    assert set(authors) == in_vault  # no memory without its author note: none half-landed
    service = open_service(with_team_graph(Settings(home=restored), config), actor="test")
    try:
        rows = service.graph.cypher("MATCH (m:Memory) RETURN m.slug", limit=100_000).rows
        verified = service.audit_verify()
    finally:
        service.close()
    assert {row[0] for row in rows} == in_vault
    manifest = json.loads((restored / "backup.json").read_text())
    assert manifest["graph"]["memories"] == len(in_vault)
    assert verified.ok, verified.problem


def cypher(team: Team, user: str, query: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    with team.client(user) as client:
        answer = client.post("/v1/graph/cypher", json={"query": query})
    return answer.status_code, answer.json(), dict(answer.headers)


def test_users_cypher_runs_on_the_replica_and_the_gate_holds_there(
    team: Team, primary: LocalServer
) -> None:
    """Bob's Cypher is answered from the replica (its SLOWLOG has the query, the primary's
    has not); Carol, with no grant on the shop, sees nothing of it through the replica."""
    title = "Refunds settle through the replica ledger"
    record(team, title)
    record(team, "Other project keeps its own queue", user="carol", scope=OTHER)
    in_sync(team)
    replica_socket = team.home / "falkordb-replica" / SOCKET
    with slowlogs(primary.password, primary.socket, replica_socket) as (on_primary, on_replica):
        code, bob, headers = cypher(team, "bob", "MATCH (m:Memory) RETURN m.title AS routed_b")
        assert code == 200, bob
        assert headers["x-memoryd-graph-source"] == "replica"
        assert title in [row[0] for row in bob["rows"]]
        code, carol, headers = cypher(team, "carol", "MATCH (m:Memory) RETURN m.title AS routed_c")
        assert code == 200, carol
        assert headers["x-memoryd-graph-source"] == "replica"
        assert [row[0] for row in carol["rows"]] == ["Other project keeps its own queue"]
        assert "Refunds" not in json.dumps(carol)
        assert on_replica("routed_b")
        assert on_replica("routed_c")
        assert not on_primary("routed_b")
        assert not on_primary("routed_c")


def at_once(team: Team, users: list[str], query: str) -> dict[str, tuple[int, Any, float]]:
    """Each user's Cypher sent at the same moment: per user, status, body, seconds taken."""
    barrier = threading.Barrier(len(users))
    answers: dict[str, tuple[int, Any, float]] = {}

    def ask(user: str) -> None:
        barrier.wait()
        started = time.monotonic()
        code, body, _ = cypher(team, user, query)
        answers[user] = (code, body, time.monotonic() - started)

    threads = [threading.Thread(target=ask, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return answers


def test_two_users_cypher_at_once_each_get_their_own_cut(team: Team) -> None:
    """Bob and Carol ask at the same moment, each right after a write (so each cut is made
    again): both answer within seconds, each with their own projects only. Before the copies
    went one at a time, two `GRAPH.COPY`s at once hung the FalkorDB server: both 503 after 10 s."""
    for round_ in range(3):
        title = f"Concurrent cuts keep the shop ledger, round {round_}"
        record(team, title)
        record(team, f"Other project queue, round {round_}", user="carol", scope=OTHER)
        in_sync(team)
        answers = at_once(team, ["bob", "carol"], "MATCH (m:Memory) RETURN m.title")
        assert {user: a[0] for user, a in answers.items()} == {"bob": 200, "carol": 200}, answers
        bob, carol = answers["bob"][1], answers["carol"][1]
        assert title in [row[0] for row in bob["rows"]]
        assert not any("Other project" in row[0] for row in bob["rows"])
        assert f"Other project queue, round {round_}" in [row[0] for row in carol["rows"]]
        assert "shop ledger" not in json.dumps(carol)
        assert "Refunds" not in json.dumps(carol)
        assert max(a[2] for a in answers.values()) < 8.0, answers


def test_cuts_made_at_once_under_an_aof_rewrite_are_each_right(tmp_path: Path) -> None:
    """Four cuts of one graph made at once on the primary's kind of server (append-only file
    on) while it rewrites that file: each holds its scope's memories only, and the server
    still answers. A `GRAPH.COPY` meeting another forked child hangs FalkorDB 4.16."""
    from memoryd.graph.falkordb_store import FalkorGraphStore
    from memoryd.graph.falkordb_views import scoped_view

    directory = Path(tempfile.mkdtemp(prefix="mdcut-", dir="/tmp"))
    server = start_local(directory / "s", query_memory_mb=256)
    graph = FalkorGraphStore(tmp_path / "graph", url=server.url, name=f"cut-{uuid.uuid4().hex}")
    client = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=60)
    try:
        client.execute_command(
            "GRAPH.QUERY", graph.key, "UNWIND range(1, 20000) AS i CREATE (:Memory {slug:"
            " 'm' + toString(i), scope_hash: CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END})",
        )  # fmt: skip
        found: dict[str, Any] = {}

        def cut(n: int) -> None:
            scope = "ab"[n % 2]
            try:
                view = scoped_view(graph, [scope], tmp_path / f"view{n}")
                try:
                    found[str(n)] = view.cypher(
                        "MATCH (m:Memory) RETURN m.scope_hash, count(m)"
                    ).rows
                finally:
                    view.close()
            except Exception as exc:  # the test reports every failure
                found[str(n)] = repr(exc)

        threads = [threading.Thread(target=cut, args=(n,)) for n in range(4)]
        client.bgrewriteaof()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert found == {str(n): [["ab"[n % 2], 10000]] for n in range(4)}
        assert client.ping()
    finally:
        client.close()
        graph.close()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_long_query_on_the_replica_does_not_hold_up_a_write(
    team: Team, primary: LocalServer
) -> None:
    """While Bob's query runs on the replica for seconds (up to the 10 s Cypher limit), Alice's
    write is acknowledged and the query's answer comes only after it; the query ran on the
    replica only."""
    in_sync(team)
    heavy = ("UNWIND range(1, 1000000) AS x UNWIND range(1, 100) AS heavy_y"
             " WITH x, heavy_y WHERE (x + heavy_y) % 7 = 3 RETURN count(*)")  # fmt: skip
    ended: dict[str, float] = {}

    def long_query() -> None:
        cypher(team, "bob", heavy)  # 200, or the time limit's error: it ran long either way
        ended["query"] = time.monotonic()

    replica_socket = team.home / "falkordb-replica" / SOCKET
    with slowlogs(primary.password, primary.socket, replica_socket) as (on_primary, on_replica):
        thread = threading.Thread(target=long_query)
        thread.start()
        wait_until(lambda: graph_busy(replica_socket, primary.password),
                   what="the query to run on the replica",
                   timeout_s=60, every_s=0.02)  # fmt: skip
        started = time.monotonic()
        record(team, "Writes land while a long query runs on the replica")
        ended["write"] = time.monotonic()
        thread.join(timeout=120)
        assert ended["write"] < ended["query"], (ended, started)
        assert on_replica("heavy_y")
        assert not on_primary("heavy_y")


def graph_busy(socket_path: Path, password: str | None) -> bool:
    """Whether a client of the server waits on a graph command running in FalkorDB's threads
    (a blocked client, `flags=b`)."""
    client = connect(socket_path, password)
    try:
        return any(
            "b" in str(c.get("flags")) and str(c.get("cmd", "")).startswith("graph.")
            for c in client.client_list()
        )
    finally:
        client.close()


def test_team_status_shows_the_replica_and_its_lag(team: Team) -> None:
    """`team status --json` (the CLI) and `GET /v1/team/status` (a team admin over TLS) give
    the replica's state and how far behind it is in bytes, writes and seconds."""
    in_sync(team)
    shown = json.loads(team.cli("status", "--json"))
    replica = shown["replica"]
    assert replica["state"] == "in sync"
    assert replica["serving"] is True
    assert replica["writes_behind"] == 0
    assert replica["bytes_behind"] >= 0
    assert replica["seconds_behind"] == 0.0
    team.cli("user", "admin", "alice")
    with team.client("alice") as alice:
        over_tls = alice.get("/v1/team/status")
    assert over_tls.status_code == 200, over_tls.text
    assert over_tls.json()["replica"]["state"] == "in sync"
    with team.client("bob") as bob:
        assert bob.get("/v1/team/status").status_code == 403


def test_with_the_replica_down_reads_go_to_the_primary_and_say_so(
    team: Team, primary: LocalServer
) -> None:
    """A replica cut off from the primary (`REPLICAOF NO ONE`) is down: Bob's Cypher is
    answered by the primary with a note naming why, Carol still sees nothing of the shop, and
    `team status` shows it. Once its server dies, the team server starts it again and reads
    go back to it."""
    in_sync(team)
    replica_socket = team.home / "falkordb-replica" / SOCKET
    replica = connect(replica_socket, primary.password)
    replica.execute_command("REPLICAOF", "NO", "ONE")
    wait_until(lambda: status(team)["replica"]["state"] == "down", what="the replica to be down",
               timeout_s=30, every_s=0.2)  # fmt: skip
    code, bob, headers = cypher(team, "bob", "MATCH (m:Memory) RETURN m.title")
    assert code == 200, bob
    assert headers["x-memoryd-graph-source"] == "primary"
    assert "the replica is down" in headers["x-memoryd-graph-note"]
    assert bob["note"].startswith("read from the primary: the replica is down")
    assert "Refunds settle through the replica ledger" in [row[0] for row in bob["rows"]]
    code, carol, _ = cypher(team, "carol", "MATCH (m:Memory) RETURN m.title")
    assert code == 200, carol
    assert "Refunds" not in json.dumps(carol)
    shown = json.loads(team.cli("status", "--json"))
    assert shown["replica"]["state"] == "down"
    assert shown["replica"]["serving"] is False

    with contextlib.suppress(redis.ConnectionError):
        replica.shutdown(nosave=True)
    replica.close()
    in_sync(team)  # started again by the team server, synced afresh
    code, bob, headers = cypher(team, "bob", "MATCH (m:Memory) RETURN m.title")
    assert code == 200, bob
    assert headers["x-memoryd-graph-source"] == "replica"
    assert "Refunds settle through the replica ledger" in [row[0] for row in bob["rows"]]


def test_a_lagging_replica_sends_cypher_to_the_primary_until_it_catches_up(
    team: Team, primary: LocalServer
) -> None:
    """The replica keeps its link up but stops applying the primary's stream (`CLIENT PAUSE
    WRITE` on it holds the replication link's writes too): once it is more than
    `replica_max_lag_s` (2 s) behind, `team status` says lagging and Bob's Cypher is answered
    by the primary, which holds the write the replica lacks, naming why in the header and the
    answer's note; once the pause ends and the replica catches up, reads go back to it."""
    in_sync(team)
    replica = connect(team.home / "falkordb-replica" / SOCKET, primary.password)
    title = "Chargebacks are filed from the lagging ledger"
    replica.execute_command("CLIENT", "PAUSE", 120_000, "WRITE")
    try:
        record(team, title)
        lagging = wait_until(
            lambda: (r := status(team)["replica"])["state"] == "lagging" and r,
            what="the replica to lag", timeout_s=60, every_s=0.2,
        )  # fmt: skip
        assert lagging["link"] == "up"
        assert lagging["writes_behind"] >= 1
        assert lagging["seconds_behind"] > 2.0
        code, bob, headers = cypher(team, "bob", "MATCH (m:Memory) RETURN m.title")
        assert code == 200, bob
        assert headers["x-memoryd-graph-source"] == "primary"
        why = "the replica is lagging: more than 2 s behind the primary"
        assert why in headers["x-memoryd-graph-note"]
        assert bob["note"] == f"read from the primary: {why}"
        assert title in [row[0] for row in bob["rows"]]
        code, carol, _ = cypher(team, "carol", "MATCH (m:Memory) RETURN m.title")
        assert code == 200, carol
        assert "Chargebacks" not in json.dumps(carol)  # the gate holds on the primary too
    finally:
        replica.execute_command("CLIENT", "UNPAUSE")
        replica.close()
    in_sync(team)
    code, bob, headers = cypher(team, "bob", "MATCH (m:Memory) RETURN m.title")
    assert code == 200, bob
    assert headers["x-memoryd-graph-source"] == "replica"
    assert "x-memoryd-graph-note" not in headers
    assert "note" not in bob
    assert title in [row[0] for row in bob["rows"]]


REWRITER = """
import sys, time
from pathlib import Path
import redis
from memoryd.graph.falkordb_forks import rewrite_aof
url, stop = sys.argv[1], Path(sys.argv[2])
client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=60)
n = 0
while not stop.exists():
    rewrite_aof(client, url)
    n += 1
print(n)
"""


def test_cuts_made_while_another_process_asks_for_aof_rewrites_are_each_right(
    tmp_path: Path,
) -> None:
    """Another process asks for AOF rewrites over and over (memoryd's own request,
    `falkordb_forks.rewrite_aof`) while this one cuts copies of the graph: each cut holds its
    scope's memories only, the server still answers, and the rewrites did run. The fork lock
    is a file in the server's directory: a rewrite cannot start between a cut's check for a
    child and its `GRAPH.COPY` (which hangs FalkorDB 4.16), whichever process asks."""
    from memoryd.graph.falkordb_store import FalkorGraphStore
    from memoryd.graph.falkordb_views import scoped_view

    directory = Path(tempfile.mkdtemp(prefix="mdfork-", dir="/tmp"))
    server = start_local(directory / "s", query_memory_mb=256)
    graph = FalkorGraphStore(tmp_path / "graph", url=server.url, name=f"fork-{uuid.uuid4().hex}")
    client = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=60)
    stop = tmp_path / "stop"
    rewriter = None
    try:
        assert (
            client.config_get("auto-aof-rewrite-percentage")["auto-aof-rewrite-percentage"] == "0"
        )
        assert client.config_get("save")["save"] == ""
        client.execute_command(
            "GRAPH.QUERY", graph.key, "UNWIND range(1, 20000) AS i CREATE (:Memory {slug:"
            " 'm' + toString(i), scope_hash: CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END})",
        )  # fmt: skip
        rewriter = subprocess.Popen(
            [sys.executable, "-c", REWRITER, server.url, str(stop)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**PINNED_ENV, **os.environ},
        )  # fmt: skip
        wait_until(lambda: int(client.info("persistence")["aof_rewrites"]) >= 1,
                   what="the first rewrite", timeout_s=60, every_s=0.02)  # fmt: skip
        found: dict[int, Any] = {}

        def cuts() -> None:
            for n in range(8):
                try:
                    view = scoped_view(graph, ["ab"[n % 2]], tmp_path / f"view{n}")
                    try:
                        found[n] = view.cypher(
                            "MATCH (m:Memory) RETURN m.scope_hash, count(m)"
                        ).rows
                    finally:
                        view.close()
                except Exception as exc:  # the test reports every failure
                    found[n] = repr(exc)

        thread = threading.Thread(target=cuts, daemon=True)
        thread.start()
        thread.join(timeout=300)
        assert not thread.is_alive(), f"a cut hung; made so far: {found}"
        assert found == {n: [["ab"[n % 2], 10000]] for n in range(8)}
        assert client.ping()
        stop.touch()
        out, err = rewriter.communicate(timeout=120)
        assert rewriter.returncode == 0, err
        assert int(out) >= 2, out  # it went on rewriting while the cuts were made
    finally:
        stop.touch()
        if rewriter is not None and rewriter.poll() is None:
            rewriter.kill()
            rewriter.wait()
        client.close()
        graph.close()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_memoryd_rewrites_the_append_only_file_once_it_grew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local server rewrites its append-only file never by itself; `rewrite_if_grown` (the
    writer's housekeeping thread asks each minute) does, under the server's fork lock, once
    the file is past the floor and twice its size after the last rewrite, and not before; it
    does not wait for the lock another process holds."""
    from memoryd.graph import falkordb_forks

    monkeypatch.setattr(falkordb_forks, "REWRITE_MIN_BYTES", 100_000)
    directory = Path(tempfile.mkdtemp(prefix="mdaof-", dir="/tmp"))
    server = start_local(directory / "s", query_memory_mb=64)
    client = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=60)
    try:
        assert not falkordb_forks.rewrite_if_grown(client, server.url)
        for n in range(200):
            client.set(f"k{n}", os.urandom(500).hex())  # not compressible
        assert not int(client.info("persistence")["aof_rewrites"])  # the server made none
        # Another process holds the fork lock (a copy): the rewrite is left for later.
        held = os.open(server.directory / falkordb_forks.LOCK_FILE, os.O_RDWR | os.O_CREAT)
        try:
            assert try_lock(held)
            assert not falkordb_forks.rewrite_if_grown(client, server.url)
        finally:
            os.close(held)
        assert falkordb_forks.rewrite_if_grown(client, server.url)
        wait_until(
            lambda: (p := client.info("persistence"))["aof_rewrites"] == 1
            and not p["aof_rewrite_in_progress"],
            what="the rewrite to end", timeout_s=60, every_s=0.05,
        )  # fmt: skip
        assert client.info("persistence")["aof_base_size"] > 100_000
        assert not falkordb_forks.rewrite_if_grown(client, server.url)  # not twice its size yet
    finally:
        client.close()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
