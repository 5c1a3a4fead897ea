"""The forks memoryd starts on a FalkorDB server, one at a time across processes.

FalkorDB (4.16) makes a `GRAPH.COPY` in a forked child, and a copy that finds another child
running (an AOF rewrite, a replica's full sync, a BGSAVE) hangs the whole server. So every
fork memoryd starts (a copy, an AOF rewrite, a replica's first sync) takes the server's fork
lock at a moment no child runs (waiting for a child's end outside the lock, checking again
under it), starts its fork and keeps the lock until the fork shows (or is over): a copy can
then never meet a child that started after its check. The lock is a
thread lock per server and, for a server on this machine (a `unix://` URL, or a `redis://`
one whose server's directory holds memoryd's socket), a file lock (`fork.lock`) in the
server's directory, so the team server, its chores and a CLI run share it. A local server
memoryd starts forks nothing by itself (`falkordb_server`: no automatic saves or AOF
rewrites); `rewrite_if_grown` is the AOF rewrite Redis would have made.
Clients are passed in: this module imports no client library.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memoryd.errors import StorageError
from memoryd.filelock import try_lock, unlock
from memoryd.graph.falkordb_server import SOCKET

logger = logging.getLogger(__name__)

LOCK_FILE = "fork.lock"
CHILDREN = ("rdb_bgsave_in_progress", "aof_rewrite_in_progress", "module_fork_in_progress")
"""`INFO persistence` fields: a forked child runs (no `GRAPH.COPY` may start then)."""
CHILD_WAIT_S = 60.0
"""How long a fork waits for the server's child to end, or for the lock, before it gives up."""
STARTED_WAIT_S = 30.0
"""How long a fork memoryd asked for may take to show in `INFO` before the lock goes."""
REWRITE_MIN_BYTES = 64 * 1024 * 1024
"""An append-only file is rewritten once it is past this and twice its size after the last
rewrite: Redis's own defaults (`auto-aof-rewrite-min-size`, `-percentage 100`), which a local
server memoryd starts leaves to memoryd."""

_threads: dict[str, threading.Lock] = {}
_directories: dict[str, Path | None] = {}
_guard = threading.Lock()


def server_directory(client: Any, url: str) -> Path | None:
    """The directory of the server at `url` when it is on this machine and memoryd started
    it (its socket is there); None for another server (only the thread lock then)."""
    if url.startswith("unix://"):
        return Path(url[len("unix://") :]).parent
    with _guard:
        if url in _directories:
            return _directories[url]
    try:
        found = Path(str(client.config_get("dir").get("dir") or ""))
        directory = found if found.is_absolute() and (found / SOCKET).exists() else None
    except Exception:  # a server that hides its CONFIG: no file lock
        directory = None
    with _guard:
        _directories[url] = directory
    return directory


@contextmanager
def fork_lock(client: Any, url: str, *, wait: bool = True) -> Iterator[bool]:
    """Hold the server's fork lock (this process's threads, then the other processes'); with
    `wait` false, take it only if it is free, and say whether it was taken."""
    with _guard:
        lock = _threads.setdefault(url, threading.Lock())
    if not lock.acquire(blocking=wait):
        yield False
        return
    try:
        directory = server_directory(client, url)
        if directory is None:
            yield True
            return
        path = directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            deadline = time.monotonic() + 2 * CHILD_WAIT_S
            while not try_lock(fd):
                if not wait:
                    yield False
                    return
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"another process held {path} for {2 * CHILD_WAIT_S:.0f} s",
                        hint="try again in a minute; `memoryd doctor` checks the server",
                    )
                time.sleep(0.02)
            try:
                yield True
            finally:
                unlock(fd)
        finally:
            os.close(fd)
    finally:
        lock.release()


def persistence(client: Any) -> dict[str, Any]:
    return dict(client.info("persistence"))


def child_runs(client: Any) -> bool:
    return any(int(persistence(client).get(f, 0)) for f in CHILDREN)


@contextmanager
def no_child(client: Any, url: str, doing: str) -> Iterator[None]:
    """The fork lock, held at a moment no child runs on the server. The wait for a child to
    end is made outside the lock, so a process that forks again and again (each fork waits
    for the one before) does not hold the lock all the while and starve the others."""
    deadline = time.monotonic() + CHILD_WAIT_S
    while True:
        while child_runs(client):
            if time.monotonic() > deadline:
                raise StorageError(
                    f"the FalkorDB server at {url} kept a background save running"
                    f" for {CHILD_WAIT_S:.0f} s: cannot {doing}",
                    hint="try again in a minute; `memoryd doctor` checks the server",
                )
            time.sleep(0.01)
        with fork_lock(client, url):
            if not child_runs(client):
                yield
                return


def copy_graph(client: Any, url: str, source: str, key: str) -> None:
    """`GRAPH.COPY` under the fork lock, once no child runs (the copy's own child has ended
    when the command answers)."""
    with no_child(client, url, f"copy the graph {source}"):
        client.execute_command("GRAPH.COPY", source, key)


def started(
    client: Any, url: str, start: Callable[[], object], shown: Callable[[], bool], doing: str
) -> None:
    """Start a fork with `start` under the fork lock, once no child runs, and keep the lock
    until `shown` says it runs or is over (a copy after that sees it or nothing)."""
    with no_child(client, url, doing):
        start()
        _until(shown, url, doing)


def _until(shown: Callable[[], bool], url: str, doing: str) -> None:
    deadline = time.monotonic() + STARTED_WAIT_S
    while not shown():
        if time.monotonic() > deadline:
            logger.warning("%s did not show on %s in %.0f s", doing, url, STARTED_WAIT_S)
            return
        time.sleep(0.01)


def rewrite_aof(client: Any, url: str) -> None:
    """`BGREWRITEAOF` under the fork lock: the lock goes once the rewrite's child runs or the
    rewrite is over."""
    with no_child(client, url, "rewrite the append-only file"):
        _rewrite(client, url)


def _rewrite(client: Any, url: str) -> None:
    """Start the rewrite (the fork lock held, no child running) and wait until it shows."""
    before = int(persistence(client).get("aof_rewrites", 0))

    def shown() -> bool:
        now = persistence(client)
        return bool(int(now.get("aof_rewrite_in_progress", 0))) or (
            int(now.get("aof_rewrites", 0)) > before
            and not int(now.get("aof_rewrite_scheduled", 0))
        )

    client.bgrewriteaof()
    _until(shown, url, "rewrite the append-only file")


def rewrite_if_grown(client: Any, url: str) -> bool:
    """Rewrite the append-only file of a server that leaves that to memoryd (its automatic
    rewrite is off) once it grew past `REWRITE_MIN_BYTES` and twice its last rewritten size;
    whether it did. It never waits: with the fork lock taken or a child running it is left
    for the next call (the writer's housekeeping thread also renews its lease)."""
    now = persistence(client)
    if not int(now.get("aof_enabled", 0)):
        return False
    size, base = int(now.get("aof_current_size", 0)), int(now.get("aof_base_size", 0))
    if size < max(REWRITE_MIN_BYTES, 2 * base):
        return False
    if int(client.config_get("auto-aof-rewrite-percentage").get("auto-aof-rewrite-percentage", 0)):
        return False  # the server rewrites it itself
    with fork_lock(client, url, wait=False) as held:
        if not held or child_runs(client):
            return False
        logger.info("rewriting the append-only file of %s (%d bytes, %d after the last)",
                    url, size, base)  # fmt: skip
        _rewrite(client, url)
    return True
