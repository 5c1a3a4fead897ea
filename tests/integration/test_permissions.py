"""The data dir is private: files 0600 and directories 0700, whoever writes them.

Each path that creates a data dir runs as a real process (or in-process for library use) under
the everyday umask 0o022, so a mode that depends on the caller's umask shows up; then the whole
tree is walked. `doctor` reports looser modes and `doctor --fix` tightens them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.models import MemoryDraft, MemoryType
from memoryd.wiring import open_service
from tests.daemon_harness import uds_client
from tests.integration.test_capture import FIXTURES, needs_fixtures, session_files
from tests.integration.test_capture_hook import claude_stop

EVERYDAY_UMASK = 0o022
runner = CliRunner()


@pytest.fixture(autouse=True)
def _everyday_umask(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run under umask 0o022 (what most logins have), whatever an earlier test left; the CLI
    entry sets the process umask, so it is put back afterwards."""
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "30000")
    previous = os.umask(EVERYDAY_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def memoryd(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`python -m memoryd ARGS` as a user runs it, under umask 0o022."""
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORYD_HOME": str(home)},
        umask=EVERYDAY_UMASK,
        timeout=180,
        check=False,
    )


def fact_args(project: Path, title: str = "Ada uses Kuzu") -> list[str]:
    return ["--type", "fact", "--title", title, "--scope", str(project)]


def record(
    home: Path, project: Path, title: str = "Ada uses Kuzu", body: str = "Ada keeps the graph."
) -> subprocess.CompletedProcess[str]:
    return memoryd(home, "record", *fact_args(project, title), stdin=body)


def modes(home: Path) -> dict[str, str]:
    """Every path under `home` (and `home`) whose mode is not private: {path: mode}."""
    found = {}
    for path in [home, *home.rglob("*")]:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            continue
        mode = stat.S_IMODE(info.st_mode)
        expected = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if mode & 0o077 or (mode | expected) != expected:
            found[str(path.relative_to(home.parent))] = f"{mode:04o}"
    return found


def assert_private(home: Path) -> None:
    assert home.is_dir()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert len(list(home.rglob("*"))) > 5  # something was written
    assert modes(home) == {}


def test_cli_record_makes_a_private_home(home: Path, project: Path) -> None:
    result = record(home, project)
    assert result.returncode == 0, result.stderr
    assert (home / "graph").is_dir()
    assert (home / "governance.db").is_file()
    assert list((home / "scopes").glob("*/facts/*.md"))
    assert_private(home)


def test_cli_in_process_makes_a_private_home(home: Path, project: Path) -> None:
    """The typer app itself (how tests and embedders call the CLI) sets the umask too."""
    result = runner.invoke(
        app,
        ["record", *fact_args(project), "--body", "In the graph.", "--home", str(home)],
    )
    assert result.exit_code == 0, result.stderr
    assert_private(home)


@needs_fixtures
def test_capture_hook_makes_a_private_home(home: Path, project: Path) -> None:

    result = memoryd(
        home, "capture", "--source=claude-code", stdin=json.dumps(claude_stop(project))
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert session_files(home), (home / "logs" / "capture.log").read_text()
    assert list((home / "inbox").iterdir())
    assert_private(home)
    assert FIXTURES.is_dir()


@contextmanager
def detached_daemon(home: Path) -> Iterator[httpx.Client]:
    """`memoryd serve --detach` as a user starts it (the test harness would make the home
    and its log itself), stopped with `memoryd stop`."""
    started = memoryd(home, "serve", "--detach", "--no-tcp")
    assert started.returncode == 0, started.stderr
    try:
        with uds_client(home) as http:
            yield http
    finally:
        stopped = memoryd(home, "stop")
        assert stopped.returncode == 0, stopped.stderr


def test_daemon_makes_a_private_home(home: Path, project: Path) -> None:
    """The daemon, its readers and the engines' files under it (children inherit the umask)."""
    with detached_daemon(home) as http:
        payload = {
            "type": "decision",
            "title": "Use Kuzu",
            "body": "Kuzu holds the graph.",
            "scope": str(project),
        }
        response = http.post("/v1/memories", json=payload)
        assert response.status_code == 201, response.text
        assert http.get("/v1/recall", params={"q": "Kuzu graph"}).status_code == 200
        assert (home / "memoryd.sock").exists()
        assert (home / "logs" / "daemon.log").exists()
        assert modes(home) == {}
    assert_private(home)


def test_reindex_keeps_the_home_private(home: Path, project: Path) -> None:
    made = record(home, project)
    assert made.returncode == 0, made.stderr
    shutil.rmtree(home / "graph")
    shutil.rmtree(home / "search")
    result = memoryd(home, "reindex")
    assert result.returncode == 0, result.stderr
    assert (home / "graph").is_dir()
    assert (home / "search").is_dir()
    assert_private(home)


def test_library_use_keeps_the_umask_and_the_home_private(
    settings: Settings, project: Path
) -> None:
    """A notebook's process keeps its umask; the files memoryd made are private anyway."""
    with open_service(settings) as svc:
        svc.record(
            MemoryDraft(
                type=MemoryType.FACT,
                title="Ada uses Kuzu",
                body="Ada keeps the graph in Kuzu.",
                scope_path=project,
            )
        )
    assert os.umask(EVERYDAY_UMASK) == EVERYDAY_UMASK
    assert_private(settings.home)


def test_a_data_dir_made_by_hand_is_tightened_on_first_open(tmp_path: Path) -> None:
    """`mkdir ~/memories` (0755 under umask 022), then `memoryd doctor --home ~/memories`:
    the empty dir becomes memoryd's and 0700, so doctor passes (issue 29). A dir that
    already holds other files keeps its mode and doctor names it."""
    made = tmp_path / "by-hand"
    made.mkdir(mode=0o755)
    made.chmod(0o755)
    checked = memoryd(made, "doctor")
    assert checked.returncode == 0, checked.stdout
    assert "ok   permissions:" in checked.stdout
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert_private(made)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    (shared / "notes.txt").write_text("mine")
    found = memoryd(shared, "doctor")
    assert found.returncode == 1
    assert f"{shared} (0755)" in found.stdout
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755


def test_doctor_reports_loose_modes_and_fix_tightens_them(home: Path, project: Path) -> None:
    made = record(home, project)
    assert made.returncode == 0, made.stderr
    memory = next((home / "scopes").glob("*/facts/*.md"))
    memory.chmod(0o644)
    memory.parent.chmod(0o755)
    home.chmod(0o755)

    found = memoryd(home, "doctor")
    assert found.returncode == 1
    line = next(x for x in found.stdout.splitlines() if "permissions" in x)
    assert line.startswith("FAIL permissions: 3 paths other users may read or enter")
    assert f"{memory} (0644)" in line
    assert f"{memory.parent} (0755)" in line
    assert "memoryd doctor --fix" in line

    fixed = memoryd(home, "doctor", "--fix")
    assert fixed.returncode == 0, fixed.stdout
    assert "ok   permissions: tightened 3 paths" in fixed.stdout
    assert_private(home)
    again = memoryd(home, "doctor", "--json")
    assert again.returncode == 0
    assert '"name": "permissions"' in again.stdout


def test_doctor_fix_through_a_running_daemon(home: Path, project: Path) -> None:
    with detached_daemon(home) as http:
        payload = {
            "type": "fact",
            "title": "Ada uses Kuzu",
            "body": "In the graph.",
            "scope": str(project),
        }
        assert http.post("/v1/memories", json=payload).status_code == 201
        (home / "governance.db").chmod(0o640)
        found = memoryd(home, "doctor")
        assert found.returncode == 1
        assert "ok   daemon: running" in found.stdout  # the daemon ran the checks
        expected = f"FAIL permissions: 1 path other users may read or enter: {home}/governance.db"
        assert f"{expected} (0640)" in found.stdout
        fixed = memoryd(home, "doctor", "--fix")
        assert fixed.returncode == 0, fixed.stdout
        assert "ok   permissions: tightened 1 path;" in fixed.stdout
        assert stat.S_IMODE((home / "governance.db").stat().st_mode) == 0o600


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="reading as another user needs root and setpriv",
)
def test_another_user_cannot_read_the_memories(project: Path) -> None:
    """The issue's repro: `setpriv --reuid=65534 cat <home>/scopes/*/facts/*.md`, in a
    directory every user may enter (pytest's tmp dirs are 0700, which would hide the bug)."""
    shared = Path(tempfile.mkdtemp(prefix="memoryd-perms-"))
    try:
        shared.chmod(0o755)
        home = shared / "home"
        made = record(home, project, "Secret plan", "The launch is on Friday.")
        assert made.returncode == 0, made.stderr
        memory = next((home / "scopes").glob("*/facts/*.md"))
        assert "launch is on Friday" in memory.read_text()
        for target in (memory, home / "governance.db", home / "graph"):
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            read = subprocess.run(
                [*command, "cat" if target.is_file() else "ls", str(target)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert read.returncode != 0, f"user 65534 read {target}"
            assert "Permission denied" in read.stderr
    finally:
        shutil.rmtree(shared)
