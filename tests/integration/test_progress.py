"""Progress of the long commands (issue 29): a reindex, an mcp-memory import and a decay sweep
report `(done, total)` as they go, and the CLI draws a bar from it on a terminal only: never
into a pipe, never with --json, never for a job under `PROGRESS_MIN` items."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from memoryd.cli.progress import PROGRESS_MIN
from memoryd.config import Settings
from memoryd.domain.core import PROGRESS_STEP
from memoryd.governance.decay import SWEEP_STEPS
from memoryd.models import MemoryDraft, MemoryType, utcnow
from memoryd.wiring import open_service


def _drafts(project: Path, count: int) -> list[MemoryDraft]:
    return [
        MemoryDraft(
            type=MemoryType.FACT, title=f"Fact {n}", body=f"Body number {n}.", scope_path=project
        )
        for n in range(count)
    ]


def test_reindex_and_sync_report_progress(
    settings: Settings, project: Path, tmp_path: Path
) -> None:
    count = PROGRESS_STEP + 50
    out = tmp_path / "memories.json"
    with open_service(settings) as svc:
        svc.record_many(_drafts(project, count), bulk=True)
        calls: list[tuple[int, int]] = []
        report = svc.reindex(progress=lambda done, total: calls.append((done, total)))
        assert report.indexed == count
        assert calls == [(PROGRESS_STEP, count), (count, count)]
        exported: list[tuple[int, int]] = []
        svc.sync_export(out, progress=lambda done, total: exported.append((done, total)))
        assert exported == [(PROGRESS_STEP, count), (count, count)]
    other = settings.model_copy(update={"home": tmp_path / "other"})
    with open_service(other) as svc:
        imported: list[tuple[int, int]] = []
        result = svc.sync_import(out, progress=lambda done, total: imported.append((done, total)))
        assert len(result.added) == count
        assert imported == [(count, count)]


def _graph_file(path: Path, entities: int) -> Path:
    lines = [
        json.dumps(
            {"type": "entity", "name": f"Thing {n}", "entityType": "concept", "observations": []}
        )
        for n in range(entities)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _import(home: Path, file: Path, *args: str, terminal: bool) -> str:
    """`memoryd import mcp-memory FILE` with stderr on a pseudo-terminal or a pipe; stderr."""
    return _memoryd(home, "import", "mcp-memory", str(file), *args, terminal=terminal)


def _memoryd(home: Path, *args: str, terminal: bool) -> str:
    """`memoryd ARGS` with stderr on a pseudo-terminal or a pipe; its stderr."""
    command = [sys.executable, "-m", "memoryd", *args]
    env = {**os.environ, "MEMORYD_HOME": str(home), "COLUMNS": "100"}
    if not terminal:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr
    leader, follower = pty.openpty()
    try:
        process = subprocess.run(
            command, env=env, stdout=subprocess.PIPE, stderr=follower, timeout=300, check=False
        )
        assert process.returncode == 0
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the follower is closed and drained
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_long_import_draws_a_bar_on_a_terminal_only(tmp_path: Path) -> None:
    entities = PROGRESS_MIN + 200
    file = _graph_file(tmp_path / "graph.jsonl", entities)
    shown = _import(tmp_path / "a", file, terminal=True)
    assert "import" in shown
    assert f"{entities}/{entities}" in shown
    assert _import(tmp_path / "b", file, terminal=False) == ""
    quiet = _import(tmp_path / "c", file, "--json", terminal=True)
    assert f"{entities}/{entities}" not in quiet
    small = _import(tmp_path / "d", _graph_file(tmp_path / "small.jsonl", 20), terminal=True)
    assert "20/20" not in small


def _idle_sessions(settings: Settings, project: Path, count: int) -> None:
    """`count` session memories nobody recalled for a year: the next sweep forgets them."""
    year_ago = utcnow() - timedelta(days=365)
    drafts = [
        MemoryDraft(
            type=MemoryType.SESSION,
            title=f"Session {n}",
            body=f"Worked on ticket {n}.",
            scope_path=project,
            created_at=year_ago,
        )
        for n in range(count)
    ]
    with open_service(settings) as svc:
        svc.record_many(drafts, bulk=True)


def test_a_decay_sweep_reports_progress_and_draws_a_bar_on_a_terminal_only(
    settings: Settings, project: Path, tmp_path: Path
) -> None:
    count = PROGRESS_MIN + 100
    _idle_sessions(settings, project, count)
    with open_service(settings) as svc:
        calls: list[tuple[int, int]] = []

        def progress(done: int, total: int) -> None:
            calls.append((done, total))

        dry = svc.decay_sweep(dry_run=True, progress=progress)
        assert (len(dry.moved), calls) == (count, [])  # a dry run writes nothing to count
        report = svc.decay_sweep(progress=progress)
        assert len(report.moved) == count
    steps = SWEEP_STEPS * count
    assert calls == [(0, steps), (count, steps), (2 * count, steps), (steps, steps)]

    other = settings.model_copy(update={"home": tmp_path / "bar"})
    _idle_sessions(other, project, count)
    shown = _memoryd(other.home, "decay-sweep", terminal=True)
    assert "decay sweep" in shown
    assert "100%" in shown
    third = settings.model_copy(update={"home": tmp_path / "quiet"})
    _idle_sessions(third, project, count)
    assert "decay sweep" not in _memoryd(third.home, "decay-sweep", "--json", terminal=True)
