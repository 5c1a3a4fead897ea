"""Moving the files a decay sweep forgets into their scope's `forgotten/` folder.

The sweep (`governance.decay`) hands over each batch's files once their ledger lines have
landed. A sweep that forgets many (`CHILD_RENAMES`) has them moved by the child renamer
(`governance.renamer`, a process of its own) while it writes the search index: renames are
kernel work that the file system serialises, and a thread cannot overlap them with the
sweep's Python work (each rename would wait for the GIL); measured: bench/RESULTS.md.
A few are moved here, as is everything when the child cannot start.

Either way each lock stripe is taken once for all its files (the capture hook takes the
same locks), a file whose stripe stayed locked or that is gone is skipped and named with
why, and each folder is synced once per batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from memoryd.errors import MemorydError, StorageError
from memoryd.governance.stores import Stores
from memoryd.memfile import LOCKS_DIR, lock_file, lock_stripe
from memoryd.private import make_private_dir
from memoryd.vault import fsync_dir, storage_error

logger = logging.getLogger(__name__)

CHILD_RENAMES = 2_000
"""A sweep that forgets at least this many files has the child renamer move them; fewer
are moved in the sweep's process, where they cost less than starting the child (measured:
bench/RESULTS.md)."""
RENAMER_SCRIPT = Path(__file__).with_name("renamer.py")
"""The child renamer, run as a script (it imports only the standard library)."""


class Rename(NamedTuple):
    """One file to move: the memory's slug, its file, and where it goes."""

    slug: str
    path: str
    target: str


class Renames:
    """The forgotten files of a sweep, renamed into `forgotten/` batch by batch as the sweep
    hands them over: by the child renamer (`governance.renamer`) beside the sweep's index
    write, or here when it cannot start (or for a sweep that forgets few)."""

    def __init__(self, stores: Stores, skipped: dict[str, str], forgetting: int) -> None:
        self._stores = stores
        self._skipped = skipped
        self._child: subprocess.Popen[bytes] | None = None
        self._in_process = forgetting < CHILD_RENAMES
        self._batches: list[list[list[Rename]]] = []
        """What the child was sent: per batch, its stripes' jobs."""
        self._renamed: set[str] = set()
        self._feed: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._answered: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        """The child's answers, a line per batch, as they come (None: it closed stdout)."""
        self._answers = 0
        self._errors = b""

    def send(self, renames: list[Rename]) -> None:
        """Rename these files (their ledger lines have landed), now or in the child."""
        if not renames:
            return
        folders = {r.target.rpartition("/")[0] for r in renames}
        for folder in folders:
            try:
                make_private_dir(Path(folder))
            except OSError as exc:
                raise storage_error(exc, Path(folder), "creating") from exc
        stripes: dict[int, list[Rename]] = {}
        for r in renames:
            stripes.setdefault(lock_stripe(r.slug), []).append(r)
        if self._child is None and not self._in_process:
            self._start()
        if self._child is None:
            self._renamed.update(_rename_here(self._stores, stripes, self._skipped))
            return
        jobs = list(stripes.values())
        self._batches.append(jobs)
        batch = {
            "timeout": self._stores.lock_timeout_s,
            "folders": sorted(folders | {r.path.rpartition("/")[0] for r in renames}),
            "stripes": [
                [
                    str(lock_file(self._stores.home, stripe[0].slug)),
                    [[r.path.rpartition("/")[0], *r.target.rpartition("/")[::2]] for r in stripe],
                ]
                for stripe in jobs
            ],
        }
        self._feed.put(json.dumps(batch).encode("utf-8") + b"\n")

    def _start(self) -> None:
        """Start the child (if it cannot start, the renames are made here)."""
        make_private_dir(self._stores.home / LOCKS_DIR)
        script = str(RENAMER_SCRIPT)
        try:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", script, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            logger.warning("decay: cannot start the renamer (%s); renaming in this process", exc)
            self._in_process = True
            return
        self._child = child
        stdin, stdout, stderr = child.stdin, child.stdout, child.stderr
        if stdin is None or stdout is None or stderr is None:  # PIPE gives all three
            raise StorageError("the decay renamer started without its pipes")

        def feed() -> None:  # writes block while the child renames: never the sweep's thread
            try:
                while (line := self._feed.get()) is not None:
                    stdin.write(line)
                    stdin.flush()
            except OSError:  # the child died: `moved` says so
                pass
            finally:
                with contextlib.suppress(OSError):
                    stdin.close()

        def answers() -> None:
            try:
                for line in stdout:
                    self._answered.put(line)
            finally:
                self._answered.put(None)

        def errors() -> None:
            self._errors = stderr.read()

        self._threads = [
            threading.Thread(target=target, name=f"decay-renamer-{target.__name__}")
            for target in (feed, answers, errors)
        ]
        for thread in self._threads:
            thread.start()

    def moved(self) -> Iterator[set[str]]:
        """The slugs whose files moved, batch by batch as the renames are done (the others
        are in `skipped`), so the graph deletes each batch's while the next is renamed. A
        child that stops before answering every batch is a StorageError: the sweep's
        intents then stay, and the next start finishes the renames."""
        child = self._child
        if child is None:
            yield self._renamed
            return
        self._feed.put(None)  # every batch is sent
        for jobs in self._batches:
            answer = self._answered.get()
            if answer is None:
                break
            moved = self._read_answer(jobs, answer)
            self._renamed.update(moved)
            yield moved
        for thread in self._threads:
            thread.join()
        code = child.wait()
        _close_pipes(child)
        self._child = None
        if code != 0 or self._answers != len(self._batches):
            tail = self._errors.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise StorageError(
                f"the decay renamer stopped (exit {code}) after {self._answers} of "
                f"{len(self._batches)} batches: {' '.join(tail) or 'no message'}",
                hint="the next start finishes the renames the sweep began",
            )

    def _read_answer(self, jobs: list[list[Rename]], answer: bytes) -> set[str]:
        """The slugs of one batch that moved; the skipped ones go into `skipped`."""
        self._answers += 1
        timeout = self._stores.lock_timeout_s
        missed: set[str] = set()
        try:
            for stripe, job, reason in json.loads(answer)["skipped"]:
                for r in jobs[stripe] if job < 0 else [jobs[stripe][job]]:
                    missed.add(r.slug)
                    self._skipped[r.slug] = _skip_reason(r, str(reason), timeout)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise StorageError(
                f"the decay renamer answered {answer[:200]!r}: {exc}",
                hint="the next start finishes the renames the sweep began",
            ) from exc
        return {r.slug for stripe in jobs for r in stripe if r.slug not in missed}

    def close(self) -> None:
        """Stop the child if the sweep stopped before all its answers were read."""
        child = self._child
        if child is None:
            return
        self._feed.put(None)
        child.kill()
        child.wait()
        for thread in self._threads:
            thread.join()
        _close_pipes(child)
        self._child = None


def _close_pipes(child: subprocess.Popen[bytes]) -> None:
    for pipe in (child.stdin, child.stdout, child.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _skip_reason(r: Rename, reason: str, timeout: float) -> str:
    if reason == "locked":
        return f"cannot lock the memory file of {r.slug}: it stayed locked for {timeout:g} s"
    if reason == "gone":
        return f"{r.path} is gone"
    return f"cannot move {r.path}: {reason}"


def _rename_here(
    stores: Stores, stripes: dict[int, list[Rename]], skipped: dict[str, str]
) -> set[str]:
    """Rename into `forgotten/` in this process, by lock stripe (each stripe taken once for
    all its files, the capture hook's lock too), then sync each folder once. The slugs
    renamed; a file gone meanwhile is noted in `skipped`."""
    renamed: set[str] = set()
    renames = [job for jobs in stripes.values() for job in jobs]
    with _Folders() as opened:
        for jobs in stripes.values():
            renamed.update(_rename_stripe(stores, jobs, skipped, opened))
    folders = {r.target.rpartition("/")[0] for r in renames} | {
        r.path.rpartition("/")[0] for r in renames
    }
    for folder in sorted(folders):
        try:
            fsync_dir(Path(folder))
        except OSError as exc:
            raise storage_error(exc, Path(folder), "syncing") from exc
    return renamed


def _rename_stripe(
    stores: Stores, jobs: list[Rename], skipped: dict[str, str], opened: _Folders
) -> list[str]:
    try:
        with stores.lock(jobs[0].slug):
            return [r.slug for r in jobs if _moved(r, skipped, opened)]
    except MemorydError as exc:  # the stripe stayed locked: none of its files moves
        for r in jobs:
            skipped[r.slug] = str(exc)
        return []


class _Folders:
    """Folders held open while a batch renames, so each rename names two files relative to
    them (renameat) rather than walking both full paths: less kernel time (bench/RESULTS.md)."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def __enter__(self) -> _Folders:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def fd(self, folder: str) -> int:
        found = self._fds.get(folder)
        if found is None:
            found = self._fds[folder] = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        return found


def _moved(r: Rename, skipped: dict[str, str], opened: _Folders) -> bool:
    """Rename one file into `forgotten/` (its stripe's lock held)."""
    source_dir, _, source = r.path.rpartition("/")
    target_dir, _, name = r.target.rpartition("/")
    try:
        os.rename(source, name, src_dir_fd=opened.fd(source_dir), dst_dir_fd=opened.fd(target_dir))
    except FileNotFoundError:
        skipped[r.slug] = f"{r.path} is gone"
        return False
    except OSError as exc:
        skipped[r.slug] = str(storage_error(exc, Path(r.path), "moving"))
        return False
    return True
