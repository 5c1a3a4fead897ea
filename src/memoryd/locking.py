"""The data-dir lock: one process at a time opens the graph (DESIGN.md §2).

Kuzu itself refuses a second process, but with an unhelpful error and no waiting. This lock
lets a second embedded command wait a bounded time, then fail with a message that says what
to do.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from memoryd.errors import GraphLocked, StorageError
from memoryd.private import make_private_dir

LOCK_FILE = "memoryd.lock"


class HomeLock:
    def __init__(self, home: Path, *, timeout_s: float, poll_s: float = 0.05) -> None:
        self.path = home / LOCK_FILE
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            make_private_dir(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(
                f"cannot open lock file {self.path}: {exc.strerror}",
                hint="make the data dir writable, or point --home/MEMORYD_HOME elsewhere",
            ) from exc
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise GraphLocked(
                        f"another memoryd process{holder} holds the graph in {self.path.parent}:"
                        " use `memoryd serve`, or wait"
                    ) from None
                time.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> HomeLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
