"""Hooks that find no daemon start one in the background (`memoryd.autostart`).

Real hook processes (`python -m memoryd inject|capture`), a real daemon started by them,
stopped by `memoryd stop` at the end of each test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.autostart import (
    MARKER_NAME,
    NO_AUTOSTART_ENV,
    opted_out,
    socket_answers,
    start_in_background,
)
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService

HOOK_WALL_S = 3.0
"""The hook waits ~1 s for a new daemon; the rest is the interpreter's start on a busy box
(bench/inject.py measures the real figure, bench/RESULTS.md)."""


def _serving(home: Path) -> list[int]:
    """The pids of `memoryd serve --home HOME` processes (/proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"serve" in argv and os.fsencode(home) in argv:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def hook_env(home: Path) -> Iterator[dict[str, str]]:
    """The environment of a hook with autostart on (the suite pins it off); any daemon the
    test's hooks started is stopped afterwards."""
    env = os.environ.copy()
    env["MEMORYD_DAEMON__AUTOSTART"] = "1"
    env["MEMORYD_DAEMON__PORT"] = "0"  # the socket, plus any free TCP port
    yield env
    subprocess.run(
        [sys.executable, "-m", "memoryd", "stop", "--home", str(home)],
        capture_output=True,
        env=env,
        timeout=90,
    )
    for pid in _serving(home):  # one that never answered: ours, by its command line
        os.kill(pid, 9)


@pytest.fixture
def pref(svc: MemoryService, project: Path) -> str:
    memory = svc.record(
        MemoryDraft(
            type=MemoryType.PREFERENCE,
            title="Use uv, not pip",
            body="Always install packages with uv.",
            scope_path=project,
        )
    )
    svc.close()
    return memory.slug


def _prompt(project: Path) -> str:
    payload = {"hook_event_name": "UserPromptSubmit", "cwd": str(project), "prompt": "uv or pip?"}
    return json.dumps(payload)


def _inject(home: Path, project: Path, env: dict[str, str]) -> tuple[str, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "memoryd", "inject", "--source=claude-code", "--home", str(home)],
        input=_prompt(project),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0
    assert proc.stderr == ""
    return proc.stdout, time.monotonic() - start


def _wait_for_daemon(home: Path, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not socket_answers(home):
        assert time.monotonic() < deadline, (home / "logs" / "daemon.log").read_text()
        time.sleep(0.2)


def test_first_prompt_starts_the_daemon_and_a_later_one_gets_recall(
    home: Path, project: Path, pref: str, hook_env: dict[str, str]
) -> None:
    assert not socket_answers(home)
    out, wall = _inject(home, project, hook_env)
    assert wall < HOOK_WALL_S
    assert out == "" or pref in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    _wait_for_daemon(home)
    later, _ = _inject(home, project, hook_env)
    assert pref in json.loads(later)["hookSpecificOutput"]["additionalContext"]
    pid = int((home / "logs" / MARKER_NAME).read_text().split()[0])
    assert _serving(home) == [pid]
    # init's child, not the hook's nor ours: nothing is left to reap
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert ppid != os.getpid()
    log = (home / "logs" / "inject.log").read_text()
    assert "Traceback" not in log
    assert "this prompt gets no recall" in log or out


def test_concurrent_hooks_start_one_daemon(
    home: Path, project: Path, pref: str, hook_env: dict[str, str]
) -> None:
    command = [sys.executable, "-m", "memoryd", "inject", "--source=claude-code"]
    hooks = [
        subprocess.Popen(
            [*command, "--home", str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=hook_env,
        )
        for _ in range(4)
    ]
    for hook in hooks:
        out, err = hook.communicate(_prompt(project).encode(), timeout=60)
        assert hook.returncode == 0
        assert err == b""
        assert out == b"" or "hookSpecificOutput" in json.loads(out)
    _wait_for_daemon(home)
    time.sleep(1.0)  # a second daemon, had one been started, would be alive by now
    assert len(_serving(home)) == 1
    log = (home / "logs" / "daemon.log").read_text()
    assert log.count("memoryd daemon pid") == 1
    assert "holds the graph" not in log


def test_capture_starts_the_daemon_without_waiting(
    home: Path, project: Path, pref: str, hook_env: dict[str, str]
) -> None:
    payload = {"hook_event_name": "Stop", "session_id": "s-1", "cwd": str(project)}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "memoryd", "capture", "--source=claude-code", "--home", str(home)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=hook_env,
        timeout=60,
    )
    assert proc.returncode == 0
    assert time.monotonic() - start < HOOK_WALL_S
    _wait_for_daemon(home)
    assert len(_serving(home)) == 1


@pytest.mark.parametrize("how", ["env", "config"])
def test_the_opt_out_starts_nothing(
    home: Path, project: Path, pref: str, hook_env: dict[str, str], tmp_path: Path, how: str
) -> None:
    if how == "env":
        hook_env["MEMORYD_NO_AUTOSTART"] = "1"
    else:
        del hook_env["MEMORYD_DAEMON__AUTOSTART"]
        config = tmp_path / "config.toml"
        config.write_text("[daemon]\nautostart = false\n")
        hook_env["MEMORYD_CONFIG"] = str(config)
    out, _ = _inject(home, project, hook_env)
    assert pref in json.loads(out)["hookSpecificOutput"]["additionalContext"]  # in-process
    time.sleep(1.0)
    assert not socket_answers(home)
    assert _serving(home) == []
    assert not (home / "logs" / MARKER_NAME).exists()


def test_no_daemon_for_a_data_dir_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert start_in_background(blocker / "home") is False  # under a file: cannot be made
    assert _serving(blocker / "home") == []
    if os.geteuid() == 0:
        return  # root may write any directory: the mode case needs another user
    home = tmp_path / "readonly" / "home"
    home.mkdir(parents=True)
    home.chmod(0o500)
    try:
        assert start_in_background(home) is False
        assert _serving(home) == []
        assert not (home / "logs").exists()
    finally:
        home.chmod(0o700)


def test_the_hooks_and_the_settings_read_one_autostart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[daemon] autostart` as the hook reads it (no pydantic) and as `memoryd` does."""
    from memoryd.capture_limits import load_capture_config
    from memoryd.config import load_settings

    assert load_capture_config().autostart is load_settings().daemon.autostart is False  # pinned
    monkeypatch.delenv("MEMORYD_DAEMON__AUTOSTART")
    assert load_capture_config().autostart is load_settings().daemon.autostart is True
    config = tmp_path / "config.toml"
    config.write_text("[daemon]\nautostart = false\n")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    assert load_capture_config().autostart is load_settings().daemon.autostart is False
    monkeypatch.setenv("MEMORYD_CONFIG", str(tmp_path / "none.toml"))
    for value, off in (("1", True), ("yes", True), ("0", False), ("", False), ("false", False)):
        monkeypatch.setenv(NO_AUTOSTART_ENV, value)
        assert opted_out(load_capture_config().autostart) is off, value
