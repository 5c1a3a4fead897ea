"""Start the daemon in the background from a hook, with the standard library only.

With no daemon, a hook would open the stores in its own process: seconds of CPU per prompt,
against the agent's hook timeout. So `memoryd inject` and `memoryd capture` start `memoryd
serve` in the background instead (`start_in_background`), and inject waits at most about a
second for it (`wait_for_socket`) before answering with nothing; the next prompt finds the
daemon.

Never two daemons: hooks that run at once take turns on `autostart.lock`, and one that finds
a start under way (the pid in `logs/autostart`, alive and younger than `START_GRACE_S`) starts
nothing; any that slip past are refused by the data-dir lock (`locking.HomeLock`) in `serve`.
The daemon is started through `/bin/sh … &`, which exits at once: the daemon belongs to init,
never to the hook, so nothing is left a zombie. A data dir the hook cannot write gets no
daemon. `MEMORYD_NO_AUTOSTART=1` or `[daemon] autostart = false` turns all this off.
`daemon.control.start_detached` (`serve --detach`, `memoryd mcp`) spawns with `spawn_serve`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from pathlib import Path

from memoryd.daemon_files import LOG_DIR, DaemonFiles, pid_alive
from memoryd.filelock import try_lock
from memoryd.native import child_environment
from memoryd.private import make_private_dir

logger = logging.getLogger(__name__)

NO_AUTOSTART_ENV = "MEMORYD_NO_AUTOSTART"
LOCK_NAME = "autostart.lock"
MARKER_NAME = "autostart"
"""`<pid> <unix time>` of the last daemon a hook started, in `<home>/logs/`."""
START_GRACE_S = 60.0
"""A daemon started this recently is still opening its stores: no second start (the default
`daemon.start_timeout_s`)."""
RETRY_S = 30.0
"""A daemon a hook started that died this soon is not started again before this much time
(a broken config must not cost every prompt a daemon's start-up)."""
NO_DAEMON_ON_WINDOWS = (
    "the daemon needs Unix sockets and POSIX process control; on Windows hooks recall in-process"
)
_SHELL = "/bin/sh"
# `sh LOG ARGV…`: the daemon in the background, its output appended to LOG, its pid on stdout.
_LAUNCH = 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'


def opted_out(config_autostart: bool) -> bool:
    """Whether the user turned hook autostart off (`MEMORYD_NO_AUTOSTART`, or the config)."""
    flag = os.environ.get(NO_AUTOSTART_ENV, "").strip().lower()
    return flag not in ("", "0", "false", "no", "off") or not config_autostart


def serve_command(home: Path, *, port: int | None = None, tcp: bool | None = None) -> list[str]:
    command = [sys.executable, "-m", "memoryd", "serve", "--home", str(home)]
    if port is not None:
        command += ["--port", str(port)]
    if tcp is False:
        command.append("--no-tcp")
    return command


def spawn_serve(command: list[str], log: Path) -> int:
    """`command` in its own session with stdout and stderr appended to `log`; its pid.

    A child of this process (the caller reaps it: `serve --detach` waits on it)."""
    # posix_spawn, not Popen: the daemon outlives this process, and a Popen object of a
    # running child complains when it is collected.
    if sys.platform == "win32":
        raise OSError(NO_DAEMON_ON_WINDOWS)
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        return os.posix_spawn(
            command[0],
            command,
            child_environment(),
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
            ],
        )
    finally:
        os.close(log_fd)


def spawn_orphan(command: list[str], log: Path) -> int:
    """`command` in the background as init's child, not ours (no zombie whatever happens to
    it, however long this process lives); its pid."""
    if sys.platform == "win32":
        raise OSError(NO_DAEMON_ON_WINDOWS)
    read_end, write_end = os.pipe()  # not inheritable (PEP 446); macOS has no pipe2
    try:
        shell = os.posix_spawn(
            _SHELL,
            [_SHELL, "-c", _LAUNCH, "memoryd-autostart", str(log), *command],
            child_environment(),
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_end, 1),
                (os.POSIX_SPAWN_OPEN, 2, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
            ],
        )
    finally:
        os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            out = pipe.read(64)
    finally:
        _, status = os.waitpid(shell, 0)
    text = out.decode("ascii", "replace").strip()
    if os.waitstatus_to_exitcode(status) != 0 or not text.isdigit():
        raise OSError(f"{_SHELL} could not start the daemon (exit {status}, said {text!r})")
    return int(text)


def socket_answers(home: Path, timeout_s: float = 0.2) -> bool:
    """Whether a process listens on the data dir's socket (a dead daemon's file refuses)."""
    if sys.platform == "win32":
        return False  # the daemon listens on a Unix socket only
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(DaemonFiles(home).socket))
        except TimeoutError:
            return True  # a full backlog: someone listens
        except OSError:
            return False
    return True


def wait_for_socket(home: Path, deadline: float, poll_s: float = 0.05) -> bool:
    """Poll the socket until `deadline` (time.monotonic); whether it answered."""
    while True:
        if socket_answers(home):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll_s, left))


def writable_home(home: Path) -> bool:
    """Whether this process may create the daemon's files in `home` (or create `home`)."""
    current = home
    while not current.exists():
        if current.parent == current:
            return False
        current = current.parent
    return current.is_dir() and os.access(current, os.W_OK | os.X_OK)


def _read_marker(path: Path) -> tuple[int, float] | None:
    try:
        pid_text, _, when_text = path.read_text("ascii").partition(" ")
        return int(pid_text), float(when_text)
    except (OSError, ValueError):
        return None


def start_in_background(home: Path) -> bool:
    """Start `memoryd serve` for `home` unless one is starting or was just tried; whether a
    daemon is (now) on its way. Never raises for an expected failure: it logs why."""
    if sys.platform == "win32":
        logger.warning("not starting a daemon: %s", NO_DAEMON_ON_WINDOWS)
        return False
    if socket_answers(home):
        return True
    if not writable_home(home):
        logger.warning("not starting a daemon: %s is not writable by this user", home)
        return False
    logs = home / LOG_DIR
    try:
        make_private_dir(logs)
        lock_fd = os.open(logs / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        logger.warning("not starting a daemon: cannot write %s: %s", logs, exc)
        return False
    try:
        if not try_lock(lock_fd):
            return True  # another hook is starting it right now
        if socket_answers(home):
            return True
        marker = logs / MARKER_NAME
        last = _read_marker(marker)
        now = time.time()
        if last is not None:
            pid, when = last
            if pid_alive(pid) and now - when < START_GRACE_S:
                return True
            if not pid_alive(pid) and now - when < RETRY_S:
                logger.warning(
                    "the daemon started %.0fs ago (pid %d) is gone; not starting another"
                    " before %.0fs have passed: see %s",
                    now - when,
                    pid,
                    RETRY_S,
                    DaemonFiles(home).log,
                )
                return False
        try:
            pid = spawn_orphan(serve_command(home), DaemonFiles(home).log)
        except OSError as exc:
            logger.warning("could not start the daemon: %s", exc)
            return False
        tmp = marker.with_name(f".{MARKER_NAME}.{os.getpid()}")
        with contextlib.suppress(OSError):
            tmp.write_text(f"{pid} {now}", "ascii")
            os.replace(tmp, marker)
        logger.info("started the daemon for %s (pid %d; log %s)", home, pid, DaemonFiles(home).log)
        return True
    finally:
        os.close(lock_fd)


def start_unless_opted_out(home: Path, config_autostart: bool = True) -> None:
    """`start_in_background` for a hook that does not wait for the daemon (capture): nothing
    when the user opted out, and never an exception (the hook must not fail the agent)."""
    try:
        if not opted_out(config_autostart):
            start_in_background(home)
    except Exception as exc:
        logger.warning("could not start the daemon: %s", exc)
