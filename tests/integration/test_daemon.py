"""The daemon as a real process: CLI parity, guards, signals, detach, stale sockets."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import load_settings
from memoryd.wiring import open_service
from tests.daemon_harness import Daemon, free_port, running, tcp_client, uds_client
from tests.waiting import wait_until

runner = CliRunner()

SLUG = re.compile(r"\d{4}-\d\d-\d\d-[a-z0-9-]+-[0-9a-f]{6}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|\+00:00)?…?")
HASH = re.compile(r"sha256:[0-9a-f]{64}")
SECONDS = re.compile(r"in \d+\.\ds")


@pytest.fixture(autouse=True)
def _small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemons inherit the environment: keep their buffer pools small."""
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    with running(home, free_port()) as process:
        yield process


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


def scenario(home: Path, project: Path) -> list[tuple[int, str, str]]:
    """One CLI session: writes, reads, errors and the audit log."""
    steps: list[tuple[int, str, str]] = []

    def step(*args: str) -> tuple[int, str, str]:
        steps.append(cli(home, *args))
        return steps[-1]

    scope = ["--scope", str(project)]
    first = step(
        "record", "--type", "decision", "--title", "Prefer ruff", "--body",
        "Use ruff for lint and format.", "--tags", "lint,python", "--triggers", "ruff", *scope,
    )[1].strip()  # fmt: skip
    step(
        "record", "--type", "fact", "--title", "Kuzu graph", "--body", "The graph is Kuzu.", *scope
    )
    step(
        "record", "--type", "warning", "--title", "Json", "--body", "Mind the tz.", "--json", *scope
    )
    step("record", "--type", "fact", "--title", "Again", "--body", "The graph is Kuzu.", *scope)
    step("record", "--type", "fact", "--title", "Nowhere", "--body", "x", "--scope", "/nonexistent")
    step("get", first)
    step("get", first, "--json")
    step("get", "no-such-slug")
    step("list")
    step("list", "--json", "--limit", "2", *scope)
    step("list", "--type", "fact", "--offset", "0")
    step("search", "ruff")
    step("search", "graph", "--json", "-k", "1")
    step("search", "zzzqqq")
    step("reindex")
    step("audit")
    step("audit", "--json", "--limit", "2")
    step("audit", "--event-type", "record", *scope)
    step("audit", "verify")
    step("audit", "verify", "--json")
    step("entity", "list")
    step("entity", "show", "Kuzu", "--json")
    step("entity", "show", "no such thing")
    step("graph", "query", "MATCH (m:Memory) RETURN m.type, count(*) ORDER BY m.type")
    step("graph", "query", "MATCH (m:Memory) DELETE m")
    step("graph", "neighbors", "Kuzu", "--json")
    step("recall", "kuzu graph", "--explain")  # last: recalls count (and the daemon counts later)
    step("recall", "ruff", "--json", "-k", "1")
    return steps


def normalise(steps: list[tuple[int, str, str]], home: Path) -> list[tuple[int, str, str]]:
    slugs: dict[str, str] = {}

    def clean(text: str) -> str:
        text = text.replace(str(home), "HOME")
        text = SLUG.sub(lambda m: slugs.setdefault(m.group(0), f"SLUG{len(slugs)}"), text)
        return SECONDS.sub("in Ns", HASH.sub("HASH", TIMESTAMP.sub("TS", text)))

    return [(code, clean(out), clean(err)) for code, out, err in steps]


def test_cli_output_is_the_same_with_and_without_a_daemon(tmp_path: Path, project: Path) -> None:
    embedded_home = tmp_path / "embedded"
    embedded = normalise(scenario(embedded_home, project), embedded_home)
    assert not (embedded_home / "memoryd.sock").exists()

    daemon_home = tmp_path / "daemon"
    with running(daemon_home) as daemon:
        remote = normalise(scenario(daemon_home, project), daemon_home)
        with uds_client(daemon_home) as client:
            actors = {e["actor"] for e in client.get("/v1/audit").json()["items"]}
    assert actors == {"cli"}  # every command went through the daemon
    assert daemon.stop() == 0

    failures = {step: code for step, (code, _, _) in enumerate(embedded) if code}
    assert failures == {3: 4, 4: 2, 7: 3, 22: 3, 24: 5}  # conflict, input, not found ×2, policy
    for step, (mine, theirs) in enumerate(zip(embedded, remote, strict=True)):
        assert mine == theirs, f"step {step} differs"


def test_guards_files_and_a_second_daemon(daemon: Daemon, home: Path) -> None:
    assert stat.S_IMODE((home / "memoryd.sock").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "token").stat().st_mode) == 0o600
    assert (home / "memoryd.pid").read_text().strip() == str(daemon.pid)
    code, out, _ = cli(home, "token")
    assert code == 0
    assert out.strip() == daemon.token()
    assert daemon.port is not None

    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}") as anonymous:
        refused = anonymous.get("/v1/health")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
    with tcp_client(daemon.port, daemon.token()) as client:
        assert client.get("/v1/health").json()["pid"] == daemon.pid
        rebound = client.get("/v1/health", headers={"Host": f"attacker.test:{daemon.port}"})
        assert rebound.status_code == 403
        assert rebound.json()["error"]["code"] == "policy_denied"
    with uds_client(home) as client:  # the socket needs no token
        assert client.get("/v1/health").status_code == 200

    code, out, _ = cli(home, "status", "--json")
    assert code == 0
    assert json.loads(out)["pid"] == daemon.pid

    second = Daemon(home, free_port())
    with pytest.raises(RuntimeError, match="already serves"):
        second.start()
    assert second.process is not None
    assert second.process.returncode == 6  # GraphLocked

    # While the daemon runs no command opens the graph: an embedded open would wait and fail.
    with pytest.raises(Exception, match="holds the graph"):
        open_service(load_settings(home, lock_timeout_s=0.2))


# httpcore leaks the socket of a failed Unix-socket connect (it never closes it); the
# writers below connect after the daemon stopped listening on purpose.
LEAKY_CONNECT = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@LEAKY_CONNECT
def test_sigterm_finishes_in_flight_writes(home: Path, project: Path) -> None:
    daemon = Daemon(home).start()
    acknowledged: list[str] = []
    errors: list[str] = []
    started = threading.Barrier(5)

    def writer(n: int) -> None:
        with uds_client(home, timeout=60.0) as client:
            started.wait()
            for i in range(100):
                body = {"type": "fact", "title": f"w{n} {i}", "body": f"writer {n} #{i}"}
                try:
                    response = client.post("/v1/memories", json={**body, "scope": str(project)})
                except httpx.TransportError:
                    return  # the daemon stopped listening: expected after SIGTERM
                if response.status_code == 201:
                    acknowledged.append(response.json()["meta"]["slug"])
                else:
                    errors.append(response.text)
                    return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    wait_until(lambda: len(acknowledged) >= 8, what="eight acknowledged writes")
    assert daemon.stop(signal.SIGTERM) == 0
    for thread in threads:
        thread.join()
    assert not (home / "memoryd.sock").exists()
    assert not (home / "memoryd.pid").exists()
    assert "stores closed" in daemon.log_text()
    assert all("shutting down" in e for e in errors), errors

    with open_service(load_settings(home)) as svc:  # the lock was released
        assert set(acknowledged) <= svc.graph.memory_slugs()
        assert set(acknowledged) <= svc.index.slugs()
        assert svc.audit_verify().ok


def test_a_test_daemon_keeps_the_suites_pins_outside_the_isolation(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module-scoped fixture starts its daemon before conftest isolates each test: the
    harness still gives it `tests.pins`, so it ranks as the in-process stores do whether or
    not the vector extra is installed (it would run `recall.vectors = auto` otherwise)."""
    monkeypatch.delenv("MEMORYD_RECALL__VECTORS")
    with running(home), uds_client(home) as http:
        checks = {check["name"]: check for check in http.get("/v1/doctor").json()}
    assert (
        checks["vectors"]["detail"] == "recall runs without the vector stage: recall.vectors is off"
    )


def test_detach_status_stop(home: Path) -> None:
    port = free_port()
    code, out, err = cli(home, "serve", "--detach", "--port", str(port))
    assert code == 0, err
    assert f"http://127.0.0.1:{port}" in out
    pid = int(re.search(r"pid (\d+)", out).group(1))  # type: ignore[union-attr]
    try:
        code, out, _ = cli(home, "status")
        assert code == 0
        assert f"pid {pid}" in out
        assert (home / "logs" / "daemon.log").is_file()
        code, out, _ = cli(home, "stop")
        assert code == 0
        assert f"pid {pid}" in out
        code, out, _ = cli(home, "status")
        assert code == 1
        assert "no memoryd daemon" in out
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # only if `stop` failed; it is gone otherwise
        os.waitpid(pid, 0)  # spawned by this process: reap it


def test_a_killed_daemon_leaves_a_stale_socket_that_is_ignored(home: Path, project: Path) -> None:
    daemon = Daemon(home).start()
    with uds_client(home) as client:
        body = {
            "type": "fact",
            "title": "Before",
            "body": "before the crash",
            "scope": str(project),
        }
        slug = client.post("/v1/memories", json=body).json()["meta"]["slug"]
    daemon.kill()
    assert (home / "memoryd.sock").exists()  # left behind by kill -9
    code, out, err = cli(home, "get", slug)  # embedded mode: no daemon answers
    assert code == 0, err
    assert "before the crash" in out
    with running(home) as again:
        assert again.pid != daemon.pid
        code, out, _ = cli(home, "list", "--json")
        assert [m["slug"] for m in json.loads(out)] == [slug]


def test_captures_are_indexed_at_start_and_while_the_daemon_runs(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.capture.hook import main as capture_main
    from memoryd.inbox import Inbox

    monkeypatch.chdir(project)
    monkeypatch.setenv("MEMORYD_DAEMON__INBOX_POLL_S", "0.2")

    def capture(text: str) -> None:
        args = ["--source=manual", f"--home={home}"]
        assert capture_main(args, stdin=io.StringIO(text), stdout=io.StringIO()) == 0

    capture("We decided to use uv instead of pip because it resolves faster.\n" * 4)
    assert len(Inbox(home).pending()) == 1  # no daemon, no embedded command yet
    with running(home), uds_client(home) as http:
        found = http.get("/v1/search", params={"q": "pip"}).json()["items"]
        assert len(found) == 1  # drained at start
        capture("Redis keeps the session cache; we pinned version 7 for streams.\n" * 4)
        wait_until(
            lambda: http.get("/v1/search", params={"q": "redis"}).json()["items"],
            what="the capture to be indexed",
        )
    assert Inbox(home).pending() == []


def test_a_torn_audit_line_is_repaired_at_start_with_a_warning(home: Path, project: Path) -> None:
    # The intact line comes from an embedded command: one daemon start is what is tested.
    code, _, err = cli(
        home, "record", "--type", "fact", "--title", "Kept", "--body", "before the tear",
        "--scope", str(project),
    )  # fmt: skip
    assert code == 0, err
    log = home / "audit" / "audit.jsonl"
    intact = log.read_bytes()
    log.write_bytes(intact + b'{"seq": 2, "ts": "2026-')  # a write cut short by a crash
    with running(home) as daemon, uds_client(home) as http:
        verify = http.get("/v1/audit/verify").json()
        assert verify == {
            "ok": True,
            "lines": 1,
            "first_bad_line": None,
            "problem": None,
            "missing": [],
        }
        assert "torn" in daemon.log_text()  # repaired, and said so
    assert log.read_bytes() == intact
