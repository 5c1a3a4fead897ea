"""Many new files written atomically, then made durable together: the vault's bulk writes
(`record_many`, `sync import`) create 100k memory files.

Each file is still a temp file renamed over its name (a reader, and recovery after a crash,
sees the old file or the whole new one), but the per-file cost is cut to the four syscalls
that do the work (create, write, close, rename):
- each directory is created and opened once, and its files are named relative to it, so
  no path is walked per file;
- the bytes go out with `os.write`, not through a file object (whose setup stats the file
  and asks whether it is a terminal);
- the temp names share one random tag per call (one `getrandom`, not one per file);
- each worker thread takes whole directories, so no two threads contend for one
  directory's lock (the syscalls release the GIL; the threads overlap them).
Nothing is fsynced per file: `sync_filesystem` flushes the data dir's filesystem once, after
the batch (Linux `syncfs`: only that filesystem, not every disk as `sync` does).

What is left is the kernel's inode allocation, and on ext4 without a journal it depends on
what else happened on the disk: each new inode is searched for past every inode of its block
group freed in the last 1-5 minutes (`recently_deleted`), so 100k files written right after
100k were removed nearby take many times the kernel time (issue 18; bench/RESULTS.md); one
file per memory leaves nothing to batch there.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memoryd.private import FILE_MODE, make_private_dir

WORKERS = 4

Render = Callable[[], bytes]
"""Makes one file's bytes (called in a worker thread)."""


class BulkWriteError(Exception):
    """The first file that could not be written, and the OSError that stopped it."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"{path}: {error}")
        self.path = path
        self.error = error


def write_new_files(
    files: Sequence[tuple[Path, Render]], written: list[Path], *, workers: int = WORKERS
) -> None:
    """Write each (path, render) atomically, grouped by directory; `written` receives every
    path that landed (so a caller can undo them), also when one fails. The first failure
    stops the rest and is raised as `BulkWriteError` once every worker has stopped; an error
    `render` raises is raised as it is."""
    by_dir: dict[Path, list[tuple[str, Render]]] = {}
    for path, render in files:
        by_dir.setdefault(path.parent, []).append((path.name, render))
    for directory in by_dir:
        try:
            make_private_dir(directory)
        except OSError as exc:
            raise BulkWriteError(directory, exc) from exc
    tag = f"{os.getpid()}.{secrets.token_hex(4)}"
    stop = threading.Event()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def one_dir(directory: Path) -> None:
        if stop.is_set():
            return
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise BulkWriteError(directory, exc) from exc
        try:
            for name, render in by_dir[directory]:
                if stop.is_set():
                    return
                _write_one(dir_fd, name, f".{name}.{tag}.tmp", render(), directory)
                written.append(directory / name)  # list.append is atomic
        finally:
            os.close(dir_fd)

    def guarded(directory: Path) -> None:
        try:
            one_dir(directory)
        except BaseException as exc:
            stop.set()
            with lock:
                failures.append(exc)

    if len(by_dir) == 1 or workers <= 1:
        for directory in by_dir:
            guarded(directory)
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(by_dir))) as pool:
            list(pool.map(guarded, sorted(by_dir, key=lambda d: -len(by_dir[d]))))
    if failures:
        raise failures[0]


def _write_one(dir_fd: int, name: str, tmp: str, data: bytes, directory: Path) -> None:
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise BulkWriteError(directory / name, exc) from exc


@functools.cache
def _syncfs() -> Any:
    """libc's syncfs (Linux), None elsewhere."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    except OSError:
        return None


def sync_filesystem(path: Path) -> None:
    """Make every write to the filesystem `path` is on durable (`syncfs`; `sync` where the
    platform has no syncfs, or it fails)."""
    syncfs = _syncfs()
    if syncfs is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()
