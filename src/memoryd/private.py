"""The data dir is private: files 0600, directories 0700, whoever creates them.

Memories, the graph, the search index and governance.db hold a user's work; no other local
account may read them. Two layers keep it so:

- Process entry points (the `memoryd` console script and `python -m memoryd`, the CLI, the
  daemon) set the umask to 0o077 with `private_umask`. That also covers the files the engines
  create themselves (Kuzu's database and WAL, tantivy's segments, SQLite's -wal/-shm), and
  every child process (the daemon's readers) inherits it.
- Library use (a notebook, a test) must not have its process umask changed under it, so the
  code that creates the data dir and its stores also gives explicit modes: `make_private_dir`,
  0o600 in `os.open`, and `tighten` over the engines' directories after they open.

Stdlib only: the capture hook imports this on its fast path.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

PRIVATE_UMASK = 0o077
FILE_MODE = 0o600
DIR_MODE = 0o700
_SHARED_BITS = 0o077  # group and other


def private_umask() -> None:
    """Mask group and other bits for everything this process creates from now on (keeps any
    stricter bits the caller had)."""
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)


def make_private_dir(path: Path) -> None:
    """`mkdir -p` where every directory created gets mode 0700.

    `Path.mkdir(parents=True, mode=...)` and `os.makedirs` give the mode to the last
    directory only; parents get the process default.
    """
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        os.chmod(directory, DIR_MODE)  # mkdir's mode is masked by a stricter umask only


def walk(home: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """`home` and every file and directory under it; symlinks are not followed (their target
    is not ours to change)."""
    try:
        yield home, home.lstat()
    except FileNotFoundError:
        return
    stack = [home]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed while we walked (a temp file, a lock)
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            path = Path(entry.path)
            yield path, info
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)


def loose_entries(home: Path) -> list[tuple[Path, int]]:
    """The paths under `home` (and `home` itself) that a group or other user may use, with
    their modes; sorted, so a report is the same each time."""
    loose = [
        (path, stat.S_IMODE(info.st_mode))
        for path, info in walk(home)
        if info.st_mode & _SHARED_BITS
    ]
    return sorted(loose)


def tighten(home: Path) -> list[Path]:
    """Remove group and other bits from `home` and everything under it; the paths changed.
    A path this user may not change (another owner's) is left for `loose_entries` to report."""
    changed = []
    for path, mode in loose_entries(home):
        try:
            os.chmod(path, mode & ~_SHARED_BITS)  # `walk` skipped symlinks
        except (FileNotFoundError, PermissionError):
            continue
        changed.append(path)
    return changed


def tighten_if_empty(directory: Path) -> bool:
    """Take group and other bits from an empty `directory` this user owns (a data dir made
    by hand before memoryd first opened it); whether its mode changed."""
    if sys.platform == "win32":  # no POSIX modes to tighten
        return False
    info = directory.stat()
    if not info.st_mode & _SHARED_BITS or info.st_uid != os.getuid():
        return False
    with os.scandir(directory) as entries:
        if next(entries, None) is not None:
            return False
    os.chmod(directory, stat.S_IMODE(info.st_mode) & ~_SHARED_BITS)
    return True


def tighten_shallow(directory: Path) -> None:
    """Tighten `directory` and the entries directly in it: for engines' own files (a handful
    of files each) after library code opened them without the private umask."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for path in (directory, *(Path(e.path) for e in entries)):
        try:
            info = path.lstat()
            if info.st_mode & _SHARED_BITS and not stat.S_ISLNK(info.st_mode):
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~_SHARED_BITS)
        except FileNotFoundError:
            continue


def swap_dir(new: Path, live: Path) -> None:
    """Put a rebuilt directory in place of the live one (rename is atomic per step)."""
    import shutil  # not on the capture hook's path

    old = live.with_name(live.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        live.rename(old)
    new.rename(live)
    shutil.rmtree(old, ignore_errors=True)
