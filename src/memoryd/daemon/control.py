"""Start, find and stop the daemon from another process (the CLI, `memoryd mcp`).

Kept apart from `memoryd.daemon.server` so that `memoryd status`, `memoryd stop` and
`memoryd serve --detach` load only the daemon's client, not the stores, the API and the
workers the daemon itself runs.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.autostart import serve_command, spawn_serve
from memoryd.client.connect import connect
from memoryd.daemon_files import DaemonFiles, pid_alive
from memoryd.errors import GraphLocked, MemorydError, StorageError
from memoryd.private import make_private_dir

if TYPE_CHECKING:
    from memoryd.config import Settings

STOP_TIMEOUT_S = 60.0


def refuse_second_daemon(files: DaemonFiles) -> None:
    """Fail fast with the pid when a daemon already answers (the lock would only wait)."""
    try:
        client = connect(files.home, timeout_s=5.0)
    except StorageError:
        client = None  # it does not answer: the data-dir lock decides below
    if client is not None:
        with client:
            pid = client.health().get("pid")
        raise GraphLocked(
            f"a memoryd daemon (pid {pid}) already serves {files.home}",
            hint="`memoryd status` shows it; `memoryd stop` stops it",
        )


def start_detached(settings: Settings, *, port: int | None, tcp: bool | None) -> dict[str, Any]:
    """Start `memoryd serve` in its own session, logging to <home>/logs/daemon.log, and
    return its health once the socket answers."""
    from memoryd.wiring import ensure_home

    files = DaemonFiles(settings.home)
    ensure_home(settings.home)
    refuse_second_daemon(files)
    make_private_dir(files.log.parent)
    pid = spawn_serve(serve_command(settings.home, port=port, tcp=tcp), files.log)
    deadline = time.monotonic() + settings.daemon.start_timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            raise StorageError(
                f"the daemon exited with code {os.waitstatus_to_exitcode(status)} while"
                f" starting: {_log_tail(files.log)}",
                hint=f"see {files.log}",
            )
        try:
            client = connect(settings.home, timeout_s=5.0)
        except MemorydError:
            client = None
        if client is not None:
            with client:
                health = client.health()
            if health.get("pid") == pid:
                return health
        time.sleep(0.1)
    raise StorageError(
        f"the daemon (pid {pid}) did not answer within {settings.daemon.start_timeout_s}s",
        hint=f"see {files.log}",
    )


def status(home: Path) -> dict[str, Any] | None:
    """The running daemon's health, or None."""
    client = connect(home, timeout_s=5.0)
    if client is None:
        return None
    with client:
        health = client.health()
    health["socket"] = str(DaemonFiles(home).socket)
    return health


def stop(home: Path, *, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM the daemon serving `home` and wait until it has closed its stores.

    The pid comes from the daemon itself (its /v1/health), never from the pid file alone,
    so a recycled pid is never signalled. Returns the pid stopped, or None if none ran.
    """
    health = status(home)
    if health is None:
        return None
    pid = int(health["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    files = DaemonFiles(home)
    while time.monotonic() < deadline:
        # The daemon removes its socket and pid file only after closing the stores.
        if not pid_alive(pid) or (files.read_pid() != pid and not files.socket.exists()):
            return pid
        time.sleep(0.05)
    raise StorageError(
        f"the daemon (pid {pid}) did not stop within {timeout_s:.0f}s",
        hint="it may be finishing a long write (reindex); wait, or `kill -9` it",
    )


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(line for line in text.strip().splitlines()[-lines:])
