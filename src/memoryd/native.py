"""Native-heap tuning for the processes that open the graph (glibc only, stdlib only).

The graph engine allocates from its worker threads. glibc gives each thread that contends for
the heap its own arena (up to 8 per core) and keeps freed memory in all of them, so a long
ingest or a reindex leaves free but unreturned heap behind (bench/RESULTS.md).

kuzu (0.11) writes some pages at a checkpoint from a `malloc`'d buffer it fills only in part:
the rest of the page on disk is whatever the process freed there last, such as a request's
text before redaction. So freed memory is cleared while the engine checkpoints
(`heap_cleared`), and for good in a process that holds a sensitive scope's plaintext
(`clear_freed_heap`).

The engine also holds the GIL for the whole of each statement it runs, so a background job's
statements run only when the thread's courtesy wait lets them (`yielding_to`, `courtesy`),
on threads of a lower OS priority (`lower_thread_priority`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the hooks import this module for `child_environment`: keep it light
    import subprocess
    from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def limit_malloc_arenas(arenas: int = ARENAS) -> None:
    """Cap glibc's malloc arenas for this process. Takes effect for arenas made after the
    call, so call it before the engine starts its threads; MALLOC_ARENA_MAX, when the user
    set it, wins."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        logger.debug("mallopt is not available (not glibc)")
        return
    if mallopt(_M_ARENA_MAX, arenas) != 1:
        logger.debug("mallopt(M_ARENA_MAX, %d) was refused", arenas)


M_PERTURB = -6
"""glibc's `mallopt` parameter (malloc.h): fill freed bytes, and clear allocated ones."""
PERTURB_BYTE = 0xFF
"""Freed bytes become 0xFF; glibc fills allocated ones with its complement, 0x00."""


def glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # not a name this libc knows: not glibc
        return False


_perturb = threading.Lock()
_for_good = False
"""Whether `clear_freed_heap` turned the switch on for the rest of the process."""


def _set_perturb(byte: int) -> bool:
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_PERTURB, byte) == 1)


def clear_freed_heap() -> bool:
    """Turn glibc's `M_PERTURB` on for the rest of this process: every `malloc` outside the
    per-thread cache (chunks up to 1,032 bytes) returns cleared bytes and every `free`
    overwrites them. Whether it is on (False off glibc: macOS, musl)."""
    global _for_good
    if not glibc():
        return False
    with _perturb:
        _for_good = _set_perturb(PERTURB_BYTE)
        return _for_good


@contextlib.contextmanager
def heap_cleared() -> Iterator[None]:
    """`M_PERTURB` on while the block runs (the engine's checkpoint, where it fills page
    buffers in part): the pages hold zeros past their data, not freed plaintext. Off again
    after, unless `clear_freed_heap` turned it on for good; on all the time it cost the
    daemon ~10% more CPU on a bulk import (bench/RESULTS.md)."""
    if not glibc():
        yield
        return
    with _perturb:
        if not _for_good:
            _set_perturb(PERTURB_BYTE)
    try:
        yield
    finally:
        with _perturb:
            if not _for_good:
                _set_perturb(0)


def child_environment() -> dict[str, str]:
    """The environment for a daemon started in the background: capped from its first thread."""
    env = dict(os.environ)
    env.setdefault("MALLOC_ARENA_MAX", str(ARENAS))
    return env


def spawn_child(module: str) -> tuple[subprocess.Popen[bytes], Connection]:
    """`python -m module FD` with a socket pair's end as FD (the graph-query sandbox, the
    recall readers): the child, and this side's connection to it. OSError if it cannot
    start; the caller names what failed."""
    import socket
    import subprocess
    from multiprocessing.connection import Connection

    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", module, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=child_environment(),
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    return process, Connection(ours.detach())


def lower_thread_priority(niceness: int) -> bool:
    """Lower the calling thread's OS priority by `niceness` (Linux: a thread has its own nice
    value; elsewhere nothing changes). For a daemon's background threads: when the cores are
    busy, a user's hook or request, in this process or another, runs before them. Threads and
    processes this thread starts inherit the lower priority. Whether it was lowered."""
    if not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < 19:
            os.setpriority(os.PRIO_PROCESS, tid, min(current + niceness, 19))
    except OSError as exc:  # not ours to change (a sandbox's seccomp, say): run as we are
        logger.debug("could not lower thread %d's priority: %s", tid, exc)
        return False
    return True


@contextlib.contextmanager
def fewer_collections(young: int = 50_000) -> Iterator[None]:
    """Run a bulk write with fewer cyclic-GC passes.

    A 100k import or `record_many` keeps every memory of the batch alive while it is
    written, and each young-generation overflow promotes them, so full collections walk
    everything allocated so far again and again (bench/RESULTS.md). Objects alive when the
    write starts are frozen out of collection and the young threshold is raised; both are put
    back afterwards, so garbage cycles are still collected, just in fewer, larger passes.
    """
    if not _held.acquire(blocking=False):  # inside another, or another thread's: that one
        yield  # puts the collector back
        return
    try:
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(max(young, thresholds[0]), *thresholds[1:])
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
    finally:
        _held.release()


_held = threading.Lock()
"""Held while a `fewer_collections` runs: they nest (`record` runs the batch write's), and a
recall thread loading its tables may run one beside the writer's; only the holder changes
the collector's settings and puts them back."""


_courtesy = threading.local()


@contextlib.contextmanager
def yielding_to(wait: Callable[[], None]) -> Iterator[None]:
    """Run the block as background work: before each statement the embedded graph engine
    runs for it (the engine holds the GIL for a whole statement, tens of milliseconds for a
    write), `courtesy` calls `wait` (the daemon's: wait while a request is in flight)."""
    previous = getattr(_courtesy, "wait", None)
    _courtesy.wait = wait
    try:
        yield
    finally:
        _courtesy.wait = previous


def yielding() -> bool:
    """Whether this thread runs background work (inside `yielding_to`)."""
    return getattr(_courtesy, "wait", None) is not None


def courtesy() -> None:
    """Called by the graph store before each statement: the background work's wait, when
    this thread runs some (`yielding_to`); nothing otherwise."""
    wait = getattr(_courtesy, "wait", None)
    if wait is not None:
        wait()
