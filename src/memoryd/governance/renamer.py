"""The decay sweep's renamer: a child process that moves forgotten memory files into their
scope's `forgotten/` folder while the sweep writes the search index (`decay.ChildRenames`).

A rename is kernel work, and renames across folders of one file system take turns (the
kernel serialises them), so they cannot go faster; what helps is doing them beside the
sweep's other work. A thread cannot: with the sweep's thread busy in Python, each rename
waits for the GIL. So they run here, in a process of their own (bench/RESULTS.md).

It runs as a script (`python -I -S renamer.py PARENT_PID`) and imports only the standard
library, so it starts in milliseconds. Each line it reads from stdin is one batch, JSON:

    {"timeout": seconds, "folders": [dir, ...],
     "stripes": [[lock file, [[source dir, target dir, file name], ...]], ...]}

For each stripe it takes the lock file (flock, as `memfile.memory_lock` does: the capture
hook and the daemon hold the same locks) waiting at most `timeout`, renames the stripe's
files, and releases it; then it syncs the folders. It answers each batch with one line:

    {"skipped": [[stripe, job, "locked" | "gone" | error text], ...]}

(`job` is -1 for a whole stripe whose lock stayed taken). It stops, leaving the rest
undone, as soon as its parent is gone: the sweep's write intents then make the next start
finish the renames (`decay` recovery).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from typing import Any

_POLL_S = 0.005


def _locked(lock_path: str, timeout: float) -> int | None:
    """An open descriptor holding `lock_path`'s flock, or None if it stayed taken."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(_POLL_S)


def run_batch(batch: dict[str, Any], parent: int) -> list[list[Any]] | None:
    """Rename one batch; the skipped jobs, or None if the parent died meanwhile."""
    skipped: list[list[Any]] = []
    folders: dict[str, int] = {}
    try:
        for folder in batch["folders"]:
            folders[folder] = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        for s, (lock_path, jobs) in enumerate(batch["stripes"]):
            if os.getppid() != parent:
                return None
            fd = _locked(lock_path, float(batch["timeout"]))
            if fd is None:
                skipped.append([s, -1, "locked"])
                continue
            try:
                for j, (source, target, name) in enumerate(jobs):
                    try:
                        os.rename(
                            name, name, src_dir_fd=folders[source], dst_dir_fd=folders[target]
                        )
                    except FileNotFoundError:
                        skipped.append([s, j, "gone"])
                    except OSError as exc:
                        skipped.append([s, j, f"{exc.strerror or exc} ({exc.errno})"])
            finally:
                os.close(fd)  # closing releases the lock
        for fd in folders.values():
            os.fsync(fd)
    finally:
        for fd in folders.values():
            os.close(fd)
    return skipped


def main(argv: list[str]) -> int:
    parent = int(argv[1])
    for line in sys.stdin:
        skipped = run_batch(json.loads(line), parent)
        if skipped is None:
            return 0
        sys.stdout.write(json.dumps({"skipped": skipped}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
