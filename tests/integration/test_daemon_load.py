"""A real daemon under concurrent clients, and killed -9 in the middle of writes."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import httpx
import pytest

from tests.daemon_harness import (
    Daemon,
    check_after_restart,
    free_port,
    running,
    tcp_client,
    uds_client,
    write_until_killed,
)

CLIENTS = 8
OPS = 50
WORDS = ["kuzu", "tantivy", "ruff", "solid", "postgres", "redis", "docker", "jieba"]


@pytest.fixture(autouse=True)
def _small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


def test_eight_clients_mixed_writes_and_reads(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    written: dict[int, list[str]] = {n: [] for n in range(CLIENTS)}
    failures: list[str] = []
    start = threading.Barrier(CLIENTS)

    def client_loop(n: int, daemon: Daemon) -> None:
        # Half the clients use the socket, half TCP with the token.
        assert daemon.port is not None
        http = uds_client(home) if n % 2 else tcp_client(daemon.port, daemon.token())
        rng = random.Random(n)
        with http:
            start.wait()
            for i in range(OPS):
                word = rng.choice(WORDS)
                try:
                    if i % 2 == 0 or not written[n]:
                        body = {
                            "type": rng.choice(["fact", "decision", "session"]),
                            "title": f"client {n} op {i} {word}",
                            "body": f"client {n} wrote op {i} about {word} at {rng.random()}",
                            "scope": str(project),
                            "tags": [word],
                        }
                        response = http.post("/v1/memories", json=body)
                        if response.status_code == 201:
                            written[n].append(response.json()["meta"]["slug"])
                    elif i % 4 == 1:
                        response = http.get("/v1/recall", params={"q": word, "limit": 5})
                    elif i % 8 == 3:
                        response = http.get("/v1/search", params={"q": word, "limit": 5})
                    else:
                        response = http.get(f"/v1/memories/{rng.choice(written[n])}")
                except httpx.HTTPError as exc:
                    failures.append(f"client {n} op {i}: {exc!r}")
                    continue
                if response.is_error:
                    failures.append(f"client {n} op {i}: {response.status_code} {response.text}")

    with running(home, free_port()) as daemon:
        threads = [threading.Thread(target=client_loop, args=(n, daemon)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not failures, failures[:5]
        slugs = [slug for mine in written.values() for slug in mine]
        assert len(slugs) == CLIENTS * OPS // 2
        with uds_client(home) as http:
            listed: list[str] = []
            offset: int | None = 0
            while offset is not None:
                page = http.get("/v1/memories", params={"limit": 1000, "offset": offset}).json()
                listed += [m["slug"] for m in page["items"]]
                offset = page["next_offset"]
            assert sorted(listed) == sorted(slugs)
            audit = http.get("/v1/audit", params={"event_type": "record", "limit": 1000}).json()
            assert sorted(r["target_id"] for r in audit["items"]) == sorted(slugs)
            verify = http.get("/v1/audit/verify").json()
            assert verify["ok"], verify
            # The daemon's enrichment and DURA workers may audit their own rewrites meanwhile;
            # the record lines above are exactly the acknowledged writes.
            assert verify["lines"] >= len(slugs)
            hits = http.get("/v1/search", params={"q": "client", "limit": 1000}).json()["items"]
            assert len(hits) == len(slugs)


# httpcore leaks the socket of a failed Unix-socket connect; writers hit a killed daemon here.
LEAKY_CONNECT = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def crash_cycles(home: Path, project: Path, cycles: int, seed: int) -> None:
    """kill -9 the daemon mid-writes `cycles` times; after each restart every acknowledged
    write is in the vault and the graph, the audit chain verifies, the four stores agree and
    doctor is clean."""
    rng = random.Random(seed)
    acknowledged: list[str] = []
    daemon = Daemon(home).start()
    try:
        for cycle in range(cycles):
            result = write_until_killed(
                daemon, project, writers=4, kill_after_s=rng.uniform(0.2, 1.2), cycle=cycle
            )
            acknowledged += result.acknowledged
            daemon = Daemon(home).start()  # the graph opens: start() waits for /v1/health
            check = check_after_restart(daemon, acknowledged)
            assert check["missing"] == [], f"cycle {cycle}: lost {check['missing'][:5]}"
            assert check["audit"]["ok"], f"cycle {cycle}: {check['audit']}"
            assert check["search_status"] == 200
            # Vault, graph, search index and audit log agree, with no reindex: a write the
            # kill cut short was settled when the daemon started again.
            assert check["four_way"]["agree"], f"cycle {cycle}: {check['four_way']}"
            assert check["doctor_failures"] == [], f"cycle {cycle}"
        assert len(acknowledged) >= cycles  # writes really were in flight
    finally:
        daemon.stop()
        daemon.kill()


@LEAKY_CONNECT
def test_kill_9_mid_writes_loses_no_acknowledged_write(tmp_path: Path, project: Path) -> None:
    crash_cycles(tmp_path / "home", project, cycles=3, seed=3)


@pytest.mark.slow
@LEAKY_CONNECT
def test_kill_9_twenty_times(tmp_path: Path, project: Path) -> None:
    crash_cycles(tmp_path / "home", project, cycles=20, seed=20)
