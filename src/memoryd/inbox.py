"""The inbox: how a capture hands a memory file to whoever owns the index (DESIGN.md §2).

`memoryd capture` writes the memory file into the vault, then drops one small request,
`<home>/inbox/<slug>.json` (`{"slug", "path", "scope_hash", "scope_path", "source", "ts"}`),
written atomically. One file per slug: a session captured three times before anything drains
the inbox leaves one request, naming the latest file. `MemoryService.drain_inbox` indexes each
request and removes it — only if it was not replaced meanwhile, so a capture racing a drain is
never lost. A request whose file is already indexed unchanged is simply removed.

`<home>/inbox/failed/` keeps what a capture could not process: `<id>.json` (source, error,
attempts) and `<id>.stdin` (the hook payload, **redacted** by the caller before it gets here, so
the copy is safe to keep in plain text and to edit by hand). `memoryd capture retry` replays
them. `<home>/inbox/sessions/` holds the hook-event journals of capture; the drain ignores
both subdirectories.

Standard library only: the capture hook imports this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from memoryd.private import make_private_dir

logger = logging.getLogger(__name__)

INBOX_DIR = "inbox"
FAILED_DIR = "failed"
REQUEST_VERSION = 1


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write `data` so readers see the old file or the new one, never a part (temp + rename)."""
    make_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def now_ts() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class IndexRequest(NamedTuple):
    """Index (or re-index) the memory file at `path`."""

    slug: str
    path: str
    scope_hash: str
    scope_path: str | None
    source: str
    ts: str

    @classmethod
    def from_json(cls, data: Any) -> IndexRequest:
        if not isinstance(data, dict):
            raise ValueError("an index request is a JSON object")
        fields = ("slug", "path", "scope_hash", "source", "ts")
        if not all(isinstance(data.get(f), str) and data[f] for f in fields):
            raise ValueError(f"an index request needs {', '.join(fields)}")
        scope_path = data.get("scope_path")
        return cls(
            slug=data["slug"],
            path=data["path"],
            scope_hash=data["scope_hash"],
            scope_path=scope_path if isinstance(scope_path, str) else None,
            source=data["source"],
            ts=data["ts"],
        )


class PendingRequest(NamedTuple):
    """A request as found on disk, with what identifies this version of its file."""

    file: Path
    request: IndexRequest
    inode: int
    mtime_ns: int


class FailedCapture(NamedTuple):
    """A payload a capture could not process, kept for `memoryd capture retry`."""

    meta_file: Path
    stdin_file: Path
    source: str
    args: list[str]
    attempts: int
    last_error: str
    created_at: str


class Inbox:
    def __init__(self, home: Path) -> None:
        self.dir = home / INBOX_DIR
        self.failed_dir = self.dir / FAILED_DIR

    # -- index requests -------------------------------------------------------------------
    def submit(self, request: IndexRequest, *, sync: bool = False) -> Path:
        """Drop (or replace) the index request of `request.slug`.

        Atomic but not fsynced by default: the memory file it names is the durable part, and a
        request lost to a power cut is redone by the session's next capture or by `reindex`.
        """
        path = self.dir / f"{request.slug}.json"
        data = {"version": REQUEST_VERSION, **request._asdict()}
        raw = (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8")
        write_atomically(path, raw, sync=sync)
        return path

    def pending(self) -> list[PendingRequest]:
        """Every readable request, oldest first; unreadable ones are logged and set aside."""
        try:
            entries = [e for e in os.scandir(self.dir) if _is_request(e.name) and e.is_file()]
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            try:
                stat = entry.stat()
                request = IndexRequest.from_json(json.loads(Path(entry.path).read_bytes()))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                logger.warning("setting aside unreadable index request %s: %s", entry.path, exc)
                self._set_aside(Path(entry.path))
                continue
            found.append(PendingRequest(Path(entry.path), request, stat.st_ino, stat.st_mtime_ns))
        found.sort(key=lambda p: (p.mtime_ns, p.file.name))
        return found

    def waiting(self) -> bool:
        """Whether anything waits to be drained: a request, or a sealed capture of a
        sensitive scope (`inbox/sealed/`)."""
        from memoryd.sensitive.sealed import waiting_captures

        return bool(self.pending()) or bool(waiting_captures(self.dir.parent))

    def arrivals(self) -> tuple[float, float] | None:
        """How many seconds ago the newest and the oldest waiting request were written; None
        when none waits. The daemon reacts to captures once they stop arriving
        (`daemon.captures.captures_settled`)."""
        try:
            entries = [e for e in os.scandir(self.dir) if _is_request(e.name)]
        except FileNotFoundError:
            return None
        written = []
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                written.append(entry.stat().st_mtime)
        if not written:
            return None
        now = time.time()
        return max(0.0, now - max(written)), max(0.0, now - min(written))

    def requested_slugs(self) -> set[str]:
        """The slugs with a request waiting (from the file names: nothing is parsed)."""
        try:
            return {e.name[: -len(".json")] for e in os.scandir(self.dir) if _is_request(e.name)}
        except FileNotFoundError:
            return set()

    def done(self, pending: PendingRequest) -> bool:
        """Remove a processed request, unless a newer capture replaced it meanwhile."""
        try:
            stat = pending.file.stat()
        except FileNotFoundError:
            return True
        if (stat.st_ino, stat.st_mtime_ns) != (pending.inode, pending.mtime_ns):
            return False
        with contextlib.suppress(FileNotFoundError):
            pending.file.unlink()
        return True

    def _set_aside(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            make_private_dir(self.failed_dir)
            os.replace(path, self.failed_dir / f"{path.stem}.request-{os.urandom(3).hex()}.bad")

    # -- failed captures ------------------------------------------------------------------
    def keep_failed(self, *, source: str, args: list[str], stdin_text: str, error: str) -> Path:
        """Keep a payload for `capture retry`. The caller redacts `stdin_text` and `args` first."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        name = f"{stamp}-{source}-{os.urandom(4).hex()}"
        stdin_file = self.failed_dir / f"{name}.stdin"
        write_atomically(stdin_file, stdin_text.encode("utf-8", "replace"))
        meta = {
            "version": 1,
            "source": source,
            "args": args,
            "stdin_file": stdin_file.name,
            "attempts": 1,
            "last_error": error,
            "created_at": now_ts(),
        }
        meta_file = self.failed_dir / f"{name}.json"
        write_atomically(
            meta_file, (json.dumps(meta, ensure_ascii=False, indent=2) + "\n").encode()
        )
        return meta_file

    def failed(self) -> list[FailedCapture]:
        try:
            files = sorted(self.failed_dir.glob("*.json"))
        except OSError:
            return []
        found = []
        for meta_file in files:
            try:
                meta = json.loads(meta_file.read_bytes())
                found.append(
                    FailedCapture(
                        meta_file=meta_file,
                        stdin_file=self.failed_dir / str(meta["stdin_file"]),
                        source=str(meta["source"]),
                        args=[str(a) for a in meta.get("args") or []],
                        attempts=int(meta.get("attempts") or 1),
                        last_error=str(meta.get("last_error") or ""),
                        created_at=str(meta.get("created_at") or ""),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("skipping unreadable failed capture %s: %s", meta_file, exc)
        return found

    def forget_failed(self, entry: FailedCapture) -> None:
        for path in (entry.stdin_file, entry.meta_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def note_retry_failure(self, entry: FailedCapture, error: str) -> None:
        meta = json.loads(entry.meta_file.read_bytes())
        meta["attempts"] = entry.attempts + 1
        meta["last_error"] = error
        meta["last_attempt_at"] = now_ts()
        write_atomically(
            entry.meta_file, (json.dumps(meta, ensure_ascii=False, indent=2) + "\n").encode()
        )


def _is_request(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")
