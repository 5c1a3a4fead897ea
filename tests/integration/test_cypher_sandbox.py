"""User Cypher runs in its own process, over a copy of the graph, under its own limits
(issue 12): a query that asks for too much gets a clear error and takes nothing from the
process that writes. Real stores, a real worker process, both engines (MEMORYD_TEST_ENGINE)."""

from __future__ import annotations

import json
import os
import resource
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings, load_settings
from memoryd.errors import InvalidInput, PolicyDenied, QueryLimitExceeded
from memoryd.graph.sandbox import GRACE_S
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.conftest import ENGINE

MEMORY_BOMB = "WITH 100000000 AS n UNWIND range(1, n) AS x RETURN count(x)"
SLOW = (
    "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y"
    " WITH x, y WHERE (x + y) % 3 = 0 RETURN count(*)"
)
MEMORY_MB = 256


def sandbox_settings(home: Path, **graph: object) -> Settings:
    wanted = {"engine": ENGINE, "buffer_pool_mb": 128, "cypher_memory_mb": MEMORY_MB, **graph}
    return load_settings(home, graph=wanted, lock_timeout_s=1.0, extraction={"enabled": False})


@pytest.fixture
def sandboxed(home: Path) -> Iterator[MemoryService]:
    service = open_service(sandbox_settings(home))
    try:
        yield service
    finally:
        service.close()


def note(svc: MemoryService, project: Path, title: str) -> str:
    draft = MemoryDraft(type=MemoryType.FACT, title=title, body=f"{title}.", scope_path=project)
    return svc.record(draft).meta.slug


def count(svc: MemoryService) -> int:
    rows = svc.cypher("MATCH (m:Memory) RETURN count(m)").rows
    return int(rows[0][0])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_memory_bomb_stops_in_its_own_process(sandboxed: MemoryService, project: Path) -> None:
    """The issue's query grew the daemon to 23 GB; here it ends at the worker's cap, this
    process does not grow, and the service keeps reading and writing."""
    note(sandboxed, project, "Before the bomb")
    assert count(sandboxed) == 1
    peak = peak_rss_mb()
    started = time.monotonic()
    with pytest.raises(QueryLimitExceeded) as info:
        sandboxed.cypher(MEMORY_BOMB)
    assert time.monotonic() - started < 10
    assert info.value.limit == "memory"
    assert f"{MEMORY_MB:,} MB a query may use" in info.value.message
    assert "graph.cypher_memory_mb" in info.value.hint
    assert "range()" in info.value.hint  # says how to narrow the query
    assert peak_rss_mb() - peak < 100
    note(sandboxed, project, "After the bomb")
    assert count(sandboxed) == 2


def test_each_query_sees_every_write_before_it(sandboxed: MemoryService, project: Path) -> None:
    box = sandboxed.cypher_sandbox()
    assert count(sandboxed) == 0
    pid = box.worker_pid
    assert pid is not None
    assert count(sandboxed) == 0
    assert box.worker_pid == pid  # nothing changed: same worker, same copy
    for n in range(1, 4):
        slug = note(sandboxed, project, f"Write number {n}")
        found = sandboxed.cypher(
            "MATCH (m:Memory {slug: $slug}) RETURN m.title", {"slug": slug}
        ).rows
        assert found == [[f"Write number {n}"]]
        assert count(sandboxed) == n
    assert box.worker_pid == pid
    copies = list((sandboxed.home / "tmp").glob("cypher-*/copy-*"))
    assert len(copies) == 1  # older copies are deleted once the worker moved on


def test_a_slow_query_stops_at_its_timeout(sandboxed: MemoryService) -> None:
    sandboxed.cypher("RETURN 1")  # the worker is up: only the query is timed (slow CI boxes)
    started = time.monotonic()
    with pytest.raises(QueryLimitExceeded) as info:
        sandboxed.cypher(SLOW, timeout_ms=300)
    assert time.monotonic() - started < 300 / 1000 + GRACE_S + 2
    assert info.value.limit == "time"
    assert "300 ms" in info.value.message
    assert "graph.cypher_timeout_ms" in info.value.hint
    assert sandboxed.cypher("RETURN 1").rows == [[1]]


def test_a_worker_that_stops_answering_is_killed_at_the_deadline(
    sandboxed: MemoryService,
) -> None:
    """The engine checks its timeout between steps; a step can take longer, and a worker can
    hang. The parent does not wait for it past the timeout and a grace period."""
    box = sandboxed.cypher_sandbox()
    sandboxed.cypher("RETURN 1")
    pid = box.worker_pid
    assert pid is not None
    freezer = threading.Timer(0.3, os.kill, (pid, signal.SIGSTOP))
    freezer.start()
    started = time.monotonic()
    try:
        with pytest.raises(QueryLimitExceeded, match="1,000 ms"):
            sandboxed.cypher(SLOW, timeout_ms=1000)
    finally:
        freezer.join()
    assert time.monotonic() - started < 1 + GRACE_S + 2
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    assert sandboxed.cypher("RETURN 2").rows == [[2]]
    assert box.worker_pid not in (None, pid)


def test_a_worker_that_dies_mid_query_is_replaced(sandboxed: MemoryService) -> None:
    box = sandboxed.cypher_sandbox()
    sandboxed.cypher("RETURN 1")
    pid = box.worker_pid
    assert pid is not None
    killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(QueryLimitExceeded, match="died"):
            sandboxed.cypher(SLOW, timeout_ms=10_000)
    finally:
        killer.join()
    assert sandboxed.cypher("RETURN 3").rows == [[3]]


def test_a_result_larger_than_its_cap_is_refused(home: Path) -> None:
    with open_service(sandbox_settings(home, cypher_result_mb=1)) as svc:
        query = "UNWIND range(1, 20000) AS x RETURN x, $pad AS pad"
        with pytest.raises(QueryLimitExceeded) as info:
            svc.cypher(query, {"pad": "p" * 100}, limit=100_000)
        assert info.value.limit == "result"
        assert "1 MB a query may return" in info.value.message
        assert "graph.cypher_result_mb" in info.value.hint
        assert len(svc.cypher(query, {"pad": "p"}, limit=10).rows) == 10


def test_refused_queries_start_no_process(sandboxed: MemoryService) -> None:
    for query in ("CALL checkpoint_threshold=1", "MATCH (m) DETACH DELETE m"):
        with pytest.raises(PolicyDenied, match="read-only"):
            sandboxed.cypher(query)
    with pytest.raises(InvalidInput, match="parameter"):
        sandboxed.cypher("RETURN 1", {"n": 1})
    with pytest.raises(InvalidInput, match=r"timeout_ms 20,000 is outside 1…10,000"):
        sandboxed.cypher("RETURN 1", timeout_ms=20_000)
    assert sandboxed.cypher_sandbox().worker_pid is None
    assert not (sandboxed.home / "tmp").exists()


def test_close_stops_the_worker_and_deletes_the_copy(home: Path) -> None:
    svc = open_service(sandbox_settings(home))
    assert svc.cypher("RETURN 1").rows == [[1]]
    pid = svc.cypher_sandbox().worker_pid
    assert pid is not None
    copies = list((home / "tmp").glob("cypher-*"))
    assert len(copies) == 1
    assert copies[0].stat().st_mode & 0o777 == 0o700
    svc.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not copies[0].exists()


def test_a_read_only_service_queries_through_the_sandbox_too(home: Path, project: Path) -> None:
    """Notebooks without a daemon open the data dir read-only: same sandbox, same limits."""
    with open_service(sandbox_settings(home)) as svc:
        note(svc, project, "Seen by the notebook")
    before = sorted(home.rglob("*"))
    with open_service(sandbox_settings(home), read_only=True) as reader:
        assert count(reader) == 1
        with pytest.raises(QueryLimitExceeded):
            reader.cypher(MEMORY_BOMB)
        assert count(reader) == 1
        assert sorted(home.rglob("*")) == before  # its copy is in the system's temp dir


# -- the CLI, embedded (no daemon) ----------------------------------------------------------
runner = CliRunner()


def graph_query(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["graph", "query", *args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def cli_home(home: Path, project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMORYD_GRAPH__CYPHER_MEMORY_MB", str(MEMORY_MB))
    monkeypatch.setenv("MEMORYD_EXTRACTION__ENABLED", "false")
    with open_service(sandbox_settings(home)) as svc:
        note(svc, project, "One memory")
    return home


def test_cli_graph_query_limits_and_exit_codes(cli_home: Path) -> None:
    code, out, _ = graph_query(cli_home, "MATCH (m:Memory) RETURN m.title", "--json")
    assert code == 0
    assert json.loads(out)["rows"] == [["One memory"]]

    code, _, err = graph_query(cli_home, MEMORY_BOMB)
    assert code == 5
    assert f"more than the {MEMORY_MB:,} MB a query may use" in err
    assert "graph.cypher_memory_mb" in err
    assert err.count("\n") == 1  # one line

    code, _, err = graph_query(cli_home, "CALL checkpoint_threshold=1")
    assert code == 5
    assert "changes an engine setting" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("RETURN 1", "--params", '{"n": 1}'), "parameter $n is given but the query does not use"),
        (("RETURN $n",), "uses $n but no value was given"),
        (("RETURN $n", "--params", "{nope"), "--params is not valid JSON"),
        (("RETURN $n", "--params", "[1]"), "--params must be a JSON object"),
        (("MATCH (m RETURN m",), "invalid Cypher: Parser exception"),
        (("MATCH (x:Nope) RETURN x",), "invalid Cypher: Binder exception"),
        (("RETURN 1; RETURN 2",), "one statement"),
        (("",), "the graph query is empty"),
        (("// only a comment",), "the graph query is empty"),
    ],
)
def test_cli_a_query_mistake_is_invalid_input(
    cli_home: Path, args: tuple[str, ...], message: str
) -> None:
    """`RETURN 1 --params '{"n":1}'` was exit 7, "storage failed"."""
    code, _, err = graph_query(cli_home, *args)
    assert code == 2, err
    assert message in err
