"""The daemon's files in the data dir: socket, pid file, bearer token, log.

The pid file is advice for `status` and `stop`; the data-dir lock (`locking.HomeLock`) is what
really keeps a second daemon (or an embedded command) away from the graph.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from pathlib import Path
from typing import NamedTuple

from memoryd.errors import StorageError

SOCKET_NAME = "memoryd.sock"
PID_NAME = "memoryd.pid"
TOKEN_NAME = "token"
LOG_DIR = "logs"
LOG_NAME = "daemon.log"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# AF_UNIX paths are limited to 108 bytes on Linux (104 on macOS), terminator included.
MAX_SOCKET_PATH = 104


def configure_logging(*, verbose: bool = False) -> None:
    """The daemon (and its readers) log with timestamps; memoryd's own INFO lines are kept
    by default."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, force=True)
    logging.getLogger("memoryd").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)


class DaemonFiles(NamedTuple):
    """The daemon's files in a data dir. A NamedTuple, not a frozen dataclass: the inject
    hook reads the socket's path, and importing `dataclasses` (with `inspect`) is a cost
    every prompt would pay."""

    home: Path

    @property
    def socket(self) -> Path:
        return self.home / SOCKET_NAME

    @property
    def pid(self) -> Path:
        return self.home / PID_NAME

    @property
    def token(self) -> Path:
        return self.home / TOKEN_NAME

    @property
    def log(self) -> Path:
        return self.home / LOG_DIR / LOG_NAME

    def check_socket_path(self) -> None:
        """Refuse a data dir whose socket path the kernel cannot bind, with a usable message."""
        if len(os.fsencode(self.socket)) >= MAX_SOCKET_PATH:
            raise StorageError(
                f"the socket path {self.socket} is too long for a Unix socket",
                hint="use a shorter data dir (--home or MEMORYD_HOME)",
            )

    # -- token ----------------------------------------------------------------------------
    def ensure_token(self) -> str:
        """The bearer token for TCP clients, created once with mode 0600."""
        existing = self.read_token()
        if existing:
            return existing
        import secrets  # only here: it imports `random`, which the hooks never need

        token = secrets.token_urlsafe(32)
        tmp = self.token.with_name(f".{TOKEN_NAME}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(token + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.token)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StorageError(f"cannot write the token file {self.token}: {exc.strerror}") from exc
        return token

    def read_token(self) -> str | None:
        try:
            text = self.token.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the token file {self.token}: {exc.strerror}") from exc
        return text or None

    # -- pid ------------------------------------------------------------------------------
    def write_pid(self) -> None:
        try:
            fd = os.open(self.pid, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()}\n")
        except OSError as exc:
            raise StorageError(f"cannot write the pid file {self.pid}: {exc.strerror}") from exc

    def read_pid(self) -> int | None:
        """The pid in the pid file if that process is still alive, else None."""
        try:
            text = self.pid.read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the pid file {self.pid}: {exc.strerror}") from exc
        if not text.isdigit():
            return None
        pid = int(text)
        return pid if pid_alive(pid) else None

    def remove_runtime_files(self) -> None:
        """Remove the socket and pid file of this process (a clean shutdown)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        with contextlib.suppress(OSError):
            if self.pid.read_text(encoding="utf-8").strip() == str(os.getpid()):
                self.pid.unlink()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True
