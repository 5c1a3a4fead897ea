"""The team server's operations, on a running server (issue 32, Operations): an online
backup while a user keeps recording, restored into a new data dir; `team status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.config import Settings
from memoryd.team.config import load_team, with_team_graph
from memoryd.team.store import TeamStore
from memoryd.vault import parse
from memoryd.wiring import open_service
from tests.conftest import isolate_environment
from tests.daemon_harness import free_port
from tests.pins import PINNED_ENV
from tests.team_harness import Team

SHOP = "git@github.com:acme/shop.git"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, falkordb_url: str) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("ops")
    with pytest.MonkeyPatch.context() as patch:
        isolate_environment(patch, root)
        patch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
        team = Team.init(root / "server", falkordb_url, f"team-{uuid.uuid4().hex}")
        for user in ("alice", "bob"):
            team.add_user(user)
        team.cli("grant", "alice", SHOP, "--role", "write")
        team.cli("grant", "bob", SHOP, "--role", "read")
        try:
            yield team.start()
        finally:
            team.stop()


def record(team: Team, title: str) -> str:
    body = {"type": "fact", "title": title, "body": f"{title}, noted by the ops test.",
            "scope": SHOP}  # fmt: skip
    with team.client("alice") as alice:
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
    team: Team, falkordb_url: str, tmp_path: Path
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
                  "--falkordb-url", falkordb_url, "--graph-name", f"team-{uuid.uuid4().hex}",
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
