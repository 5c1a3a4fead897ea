"""Real daemon processes for tests and bench/crash.py: start, talk, SIGTERM, kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memoryd.client.connect import socket_accepts
from memoryd.client.wire import unix_socket_transport
from memoryd.private import make_private_dir
from tests.pins import PINNED_ENV

START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def uds_client(home: Path, *, timeout: float = 30.0, actor: str = "test") -> httpx.Client:
    return httpx.Client(
        transport=unix_socket_transport(home / "memoryd.sock"),
        base_url="http://localhost",
        timeout=timeout,
        headers={"X-Memoryd-Actor": actor},
    )


def tcp_client(port: int, token: str, *, timeout: float = 30.0) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        timeout=timeout,
        headers={"Authorization": f"Bearer {token}"},
    )


def reader_pids(daemon_pid: int) -> list[int]:
    """The daemon's recall readers: its children running `memoryd.daemon.readers`."""
    children = Path(f"/proc/{daemon_pid}/task/{daemon_pid}/children").read_text().split()
    return [
        int(pid)
        for pid in children
        if b"memoryd.daemon.readers" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


@dataclass
class Daemon:
    """`python -m memoryd serve` in a subprocess, logging to <home>/logs/test-daemon.log.

    Its environment is this process's over the suite's pins (`tests.pins`), so a daemon a
    module-scoped fixture starts (before conftest's per-test isolation) ranks as the stores
    a test opens in process do; `env` overrides both."""

    home: Path
    port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.home / "logs" / "test-daemon.log"

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> Daemon:
        # The harness writes into the data dir itself (its log), so it keeps the modes the
        # daemon would give them: doctor's permission check stays meaningful in tests.
        make_private_dir(self.log.parent)
        os.close(os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        command = [sys.executable, "-m", "memoryd", "serve", "--home", str(self.home)]
        command += ["--port", str(self.port)] if self.port is not None else ["--no-tcp"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**PINNED_ENV, **os.environ, **self.env},
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited {self.process.returncode}: {self.log_text()}")
            if socket_accepts(self.home / "memoryd.sock"):
                try:
                    with uds_client(self.home, timeout=2.0) as client:
                        if client.get("/v1/health").json().get("pid") == self.process.pid:
                            return self
                except (httpx.TransportError, ValueError):
                    pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"daemon did not answer in {timeout_s}s: {self.log_text()}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def token(self) -> str:
        return (self.home / "token").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Signal the daemon and wait for it; returns its exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """kill -9: no shutdown code runs at all."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


@contextmanager
def running(
    home: Path, port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[Daemon]:
    daemon = Daemon(home, port, env=env or {}).start()
    try:
        yield daemon
    finally:
        try:
            daemon.stop()
        finally:
            daemon.kill()


# -- kill -9 in the middle of writes ------------------------------------------------------
@dataclass
class CrashCycle:
    acknowledged: list[str]
    errors: int
    seconds: float


def write_until_killed(
    daemon: Daemon, project: Path, *, writers: int, kill_after_s: float, cycle: int
) -> CrashCycle:
    """Writers record memories over the socket; the daemon is killed -9 mid-stream.

    A write counts as acknowledged only when its 201 response was read.
    """
    acknowledged: list[str] = []
    errors = 0
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        nonlocal errors
        i = 0
        with uds_client(daemon.home, timeout=30.0) as client:
            while not stop.is_set():
                body = {
                    "type": "fact",
                    "title": f"crash {cycle} writer {n} item {i}",
                    "body": f"cycle {cycle} writer {n} item {i}: audit {random.random()}",
                    "scope": str(project),
                    "tags": ["crash", f"c{cycle}"],
                }
                i += 1
                try:
                    response = client.post("/v1/memories", json=body)
                except httpx.TransportError:
                    with lock:
                        errors += 1
                    return  # the daemon is gone
                if response.status_code == 201:
                    with lock:
                        acknowledged.append(response.json()["meta"]["slug"])
                else:
                    with lock:
                        errors += 1

    started = time.monotonic()
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    # The first write of a fresh daemon loads the extraction pipeline: kill only once
    # writes are flowing, so the kill lands in the middle of them.
    deadline = time.monotonic() + START_TIMEOUT_S
    while not acknowledged and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(kill_after_s)
    daemon.kill()
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    return CrashCycle(acknowledged, errors, time.monotonic() - started)


def check_after_restart(daemon: Daemon, acknowledged: list[str]) -> dict[str, Any]:
    """Every acknowledged write in the vault and the graph; the audit chain verifies; and the
    four stores agree (`four_way`), with `doctor` clean, without a reindex."""
    with uds_client(daemon.home, timeout=120.0) as client:
        verify = client.get("/v1/audit/verify").json()
        found: set[str] = set()
        for start in range(0, len(acknowledged), 500):
            chunk = acknowledged[start : start + 500]
            response = client.post(
                "/v1/graph/cypher",
                json={
                    "query": "MATCH (m:Memory) WHERE m.slug IN $slugs RETURN m.slug, m.path",
                    "params": {"slugs": chunk},
                    "limit": 10_000,
                },
            )
            response.raise_for_status()
            for slug, path in response.json()["rows"]:
                if Path(path).is_file():
                    found.add(slug)
        searchable = client.get("/v1/search", params={"q": "crash", "limit": 1}).status_code
        doctor = client.get("/v1/doctor").json()
        agreement = four_way(daemon.home, client)
    missing = sorted(set(acknowledged) - found)
    return {
        "audit": verify,
        "missing": missing,
        "search_status": searchable,
        "doctor_failures": [f"{c['name']}: {c['detail']}" for c in doctor if not c["ok"]],
        "four_way": agreement,
    }


def four_way(home: Path, client: httpx.Client) -> dict[str, Any]:
    """The memories each store holds: the vault's files (read from disk), the graph's nodes
    (Cypher through the daemon), the search index's documents (opened beside the daemon, as
    its recall readers do) and the audit log's record/capture/adopt lines (read from disk).
    `agree` is whether the four sets are one; `recovered` counts the `recover` lines."""
    from memoryd.audit import AuditLog
    from memoryd.search.index import SearchIndex
    from memoryd.service import CREATING_EVENTS
    from memoryd.vault import Vault

    vault_store = Vault(home)
    vault = {vault_store.read(path).meta.slug for path in vault_store.iter_files()}
    graph: set[str] = set()
    while True:
        response = client.post(
            "/v1/graph/cypher",
            json={
                "query": "MATCH (m:Memory) RETURN m.slug ORDER BY m.slug SKIP $skip LIMIT 1000",
                "params": {"skip": len(graph)},
                "limit": 1000,
            },
        )
        response.raise_for_status()
        rows = response.json()["rows"]
        graph.update(row[0] for row in rows)
        if len(rows) < 1000:
            break
    index_store = SearchIndex.open(home / "search")
    try:
        index = index_store.slugs()
    finally:
        index_store.close()
    audit_log = AuditLog(home / "audit")
    audit = audit_log.targets(CREATING_EVENTS)
    recovered = [json.loads(r.details) for r in audit_log.read(event_type="recover")]
    return {
        "agree": vault == graph == index == audit,
        "vault": len(vault),
        "graph": len(graph),
        "index": len(index),
        "audit": len(audit),
        "differ": sorted((vault | graph | index | audit) - (vault & graph & index & audit))[:10],
        "rolled_forward": sum(r["outcome"] == "rolled forward" for r in recovered),
        "rolled_back": sum(r["outcome"] == "rolled back" for r in recovered),
    }
