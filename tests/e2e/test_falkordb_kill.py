"""Kill the FalkorDB server, or the process writing to it, in the middle of a bulk import;
restart; open the stores as the next command would. No write that was acknowledged is lost,
no memory is half-written (doctor's checks and `audit verify` pass), and the graph equals
what a fresh `reindex` builds from the vault."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.config import Settings, load_settings
from memoryd.graph.falkordb_server import LocalServer, start_local
from memoryd.wiring import open_service
from tests.conftest import ENGINE
from tests.e2e.test_crash_recovery import assert_four_way_agreement

pytestmark = pytest.mark.skipif(ENGINE != "kuzu", reason="runs beside the kuzu leg only")

# The writer: bulk-imports batches and prints each batch's slugs once record_many returned.
CHILD = r"""
import json, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from memoryd.config import load_settings
from memoryd.models import MemoryDraft
from memoryd.wiring import open_service

home, project, total, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
svc = open_service(load_settings(Path(home)))
start = datetime(2026, 1, 1, tzinfo=UTC)
for first in range(0, total, batch):
    drafts = [
        MemoryDraft.model_validate({
            "type": "decision", "title": f"Decision {i}", "scope_path": project,
            "body": f"Service {i} keeps its queue in Redis and its rows in Postgres ({i}).",
            "created_at": start + timedelta(minutes=i),
        })
        for i in range(first, min(total, first + batch))
    ]
    done = svc.record_many(drafts)
    print(json.dumps([m.meta.slug for m in done]), flush=True)
svc.close()
"""


_STARTED: list[LocalServer] = []
"""Every server a test started (the first, and each restart after a kill), to stop."""


@pytest.fixture
def server() -> Iterator[LocalServer]:
    directory = Path(tempfile.mkdtemp(prefix="mdfk-kill-", dir="/tmp"))
    _STARTED.append(start_local(directory / "s"))
    try:
        yield _STARTED[-1]
    finally:
        while _STARTED:
            running = _STARTED.pop()
            if running.process is not None and running.process.poll() is None:
                running.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _settings(home: Path, url: str) -> Settings:
    return load_settings(
        home, graph={"engine": "falkordb", "url": url, "name": "kill"}, lock_timeout_s=5.0
    )


def _import_until_killed(
    home: Path, project: Path, server: LocalServer, victim: str, after: int, total: int = 4000
) -> tuple[set[str], LocalServer]:
    """Run the writer, kill `victim` once `after` batches were acknowledged; the acknowledged
    slugs and the server serving afterwards (restarted when it was the victim)."""
    env = {
        **os.environ,
        "MEMORYD_GRAPH__ENGINE": "falkordb",
        "MEMORYD_GRAPH__URL": server.url,
        "MEMORYD_GRAPH__NAME": "kill",
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), str(project), str(total), "200"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acknowledged: set[str] = set()
    for batches, line in enumerate(child.stdout, 1):
        acknowledged.update(json.loads(line))
        if batches == after:
            if victim == "server":
                assert server.process is not None
                server.process.send_signal(signal.SIGKILL)
                server.process.wait()
            else:
                child.send_signal(signal.SIGKILL)
            break
    # whatever the child acknowledged before it noticed counts too
    out, _ = child.communicate(timeout=120)
    for line in out.splitlines():
        acknowledged.update(json.loads(line))
    if victim == "server":
        assert child.returncode != 0, "the writer went on without its server"
        time.sleep(0.1)
        server = start_local(server.directory)
        _STARTED.append(server)
    return acknowledged, server


@pytest.mark.parametrize(("victim", "after"), [("server", 2), ("daemon", 3)])
def test_a_kill_mid_import_loses_no_acknowledged_write(
    server: LocalServer, tmp_path: Path, project: Path, victim: str, after: int
) -> None:
    home = tmp_path / "home"
    acknowledged, server = _import_until_killed(home, project, server, victim, after)
    assert len(acknowledged) >= after * 200
    _check_after_kill(home, server, acknowledged)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(10))
def test_ten_kills_during_a_10k_import(
    server: LocalServer, tmp_path: Path, project: Path, round_: int
) -> None:
    """The issue's bar: 10 kills (server and writer in turn) at varying points of a 10k
    import, each repaired on the next open with nothing acknowledged lost."""
    home = tmp_path / "home"
    victim = "server" if round_ % 2 == 0 else "daemon"
    after = 2 + (round_ * 7) % 40  # batches of 200: somewhere in the first 8,400
    acknowledged, server = _import_until_killed(home, project, server, victim, after, 10_000)
    _check_after_kill(home, server, acknowledged)


def _check_after_kill(home: Path, server: LocalServer, acknowledged: set[str]) -> None:
    settings = _settings(home, server.url)
    svc = open_service(settings)  # settles what the kill left
    try:
        # vault, graph, index and audit log agree; doctor is clean; the audit chain verifies
        assert acknowledged <= assert_four_way_agreement(svc, settings)
        before = svc.graph.snapshot()
        svc.reindex()
        assert svc.graph.snapshot() == before
    finally:
        svc.close()
    server.stop()
