"""An exclusive lock on an open file, the same call on POSIX and on Windows.

Stdlib only: the capture and inject hooks lock with it (the session's journal, a memory file
being rewritten, the autostart lock). POSIX takes flock(2) on the whole file; Windows takes
`msvcrt.locking` on the file's first byte, which every locker of the file asks for, so it
excludes the others the same way. A lock ends with `unlock` or when the descriptor closes.
"""

from __future__ import annotations

import os
import sys
import time

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

POLL_S = 0.005
"""How often a wait on Windows asks again (msvcrt's own blocking mode gives up after 10 s)."""


def try_lock(fd: int) -> bool:
    """Take the lock if it is free; whether it was taken."""
    if sys.platform == "win32":
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def lock(fd: int) -> None:
    """Take the lock, waiting as long as it is held (a caller's time budget, the hook's
    SIGALRM where there is one, bounds the wait)."""
    if sys.platform == "win32":
        while not try_lock(fd):
            time.sleep(POLL_S)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX)


def unlock(fd: int) -> None:
    """Give the lock back before the descriptor closes."""
    if sys.platform == "win32":
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
