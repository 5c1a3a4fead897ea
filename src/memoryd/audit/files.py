"""The audit log's files: the log opened under the thread lock and an exclusive `flock`, durable
writes, the head anchor (head.json and the witness), and the repair of a torn tail.

`LogFiles` holds the state every job of `AuditLog` shares (paths, the last anchor, the locks);
the jobs subclass it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import threading
from collections.abc import (
    Callable,
    Iterator,
)
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from memoryd.audit.records import (
    _GENESIS,
    HEAD_NAME,
    LOG_NAME,
    PENDING_NAME,
    REDACTED_NAME,
    _Anchor,
    _chains_onto,
    _parse_record,
    _TailScan,
    canonical_json,
)
from memoryd.errors import (
    AuditChainBroken,
    MemorydError,
    ResourceExhausted,
    StorageError,
)
from memoryd.private import make_private_dir

logger = logging.getLogger(__name__)


_TAIL_BLOCK = 64 * 1024
_PREVIEW_BYTES = 200


def _tail_segments(fd: int, size: int, want: int) -> list[tuple[int, bytes]]:
    """The last `want` lines as (offset, bytes), oldest first; the last one may lack its newline.

    Reads backwards in blocks, so finding the end of a 100k-line log costs one read.
    """
    pos = size
    buf = b""
    while pos > 0:
        step = min(_TAIL_BLOCK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
        if buf.count(b"\n", 0, len(buf) - 1) >= want:
            break
    pieces = buf.split(b"\n")
    segments: list[tuple[int, bytes]] = []
    offset = pos
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        segment = piece if last else piece + b"\n"
        # The first piece of a block that does not start the file is a partial line.
        if segment and not (index == 0 and pos > 0):
            segments.append((offset, segment))
        offset += len(segment)
    return segments[-want:]


def _storage_error(exc: OSError, path: Path, doing: str) -> StorageError:
    """Turn an OSError into the StorageError a user can act on (disk full, read-only …)."""
    reasons = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exhausted",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
    }
    reason = reasons.get(exc.errno or 0, exc.strerror or str(exc))
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceExhausted(
            f"cannot {doing} {path}: {reason}", hint="free disk space, then retry"
        )
    return StorageError(f"cannot {doing} {path}: {reason}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


class LogFiles:
    """The state and the files of one audit directory; `AuditLog` is built on it."""

    _settle_redaction: Callable[[], None]
    """Finish a redaction a crash interrupted (audit/redaction.py); called under the lock."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], datetime] | None = None,
        witness: Callable[[int, str], None] | None = None,
    ) -> None:
        """`witness(seq, this_hash)` is called with each new chain end, under the log's lock
        (so witnesses arrive in order), after head.json: a failure is logged, since the
        witness may lag the log (`verify` accepts that) but never lead it."""
        self.dir = Path(path)
        self.witness = witness
        self.log_path = self.dir / LOG_NAME
        self.head_path = self.dir / HEAD_NAME
        self.pending_path = self.dir / PENDING_NAME
        self.redacted_path = self.dir / REDACTED_NAME
        self._clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._last: _Anchor | None = None
        self._size = -1  # the log's size after our last write; another size means re-read
        self._ino = -1  # the log file's inode: a redaction replaces the file
        self._dir_synced = False
        self._flock_warned = False
        try:
            make_private_dir(self.dir)
        except OSError as exc:
            raise _storage_error(exc, self.dir, "create the audit directory") from exc

    @contextmanager
    def _locked_log(self) -> Iterator[int]:
        """The log, opened for appending, under the thread lock and an exclusive file lock.

        A redaction replaces the log file: whoever waited for the old file's lock opens the
        new one, and a redaction a crash interrupted is finished first."""
        with self._lock:
            fd = self._open_locked()
            try:
                yield fd
            finally:
                os.close(fd)  # closing also releases the flock

    def _open_locked(self) -> int:
        while True:
            try:
                fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError as exc:
                raise _storage_error(exc, self.log_path, "open") from exc
            try:
                self._flock(fd, fcntl.LOCK_EX)
                pending = self.pending_path.exists()
                if pending:
                    self._settle_redaction()
                else:
                    ino = os.fstat(fd).st_ino
                    if ino == os.stat(self.log_path).st_ino:
                        if ino != self._ino:  # replaced since this object last wrote it
                            self._last, self._ino = None, ino
                        return fd
            except FileNotFoundError:
                pass  # replaced between the open and the stat: open the new file
            except OSError as exc:
                os.close(fd)
                raise _storage_error(exc, self.log_path, "open") from exc
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            self._last = None  # another file now: its tail is read afresh

    def _flock(self, fd: int, operation: int) -> None:
        try:
            fcntl.flock(fd, operation)
        except OSError as exc:
            # Some network file systems refuse flock; the thread lock still covers the
            # documented case of one owning process. Say so once, not on every append.
            if not self._flock_warned:
                self._flock_warned = True
                logger.warning(
                    "cannot lock %s (%s); relying on the in-process lock", self.log_path, exc
                )

    def _file_size(self, fd: int) -> int:
        try:
            return os.fstat(fd).st_size
        except OSError as exc:
            raise _storage_error(exc, self.log_path, "stat") from exc

    def _load_tail(self, fd: int, size: int) -> tuple[_Anchor, int]:
        """Where the chain ends: repair a torn tail, refuse a log cut behind the head anchor."""
        anchor, size = self._repair(fd, size)
        self._check_against_head(anchor)
        return anchor, size

    def _write(self, fd: int, size: int, data: bytes) -> None:
        """Write + fsync; on failure cut the file back so no half line of ours stays behind."""
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError as exc:
            self._undo_partial_write(fd, size)
            raise _storage_error(exc, self.log_path, "append to") from exc
        if not self._dir_synced:
            # The file may have just been created: make its directory entry durable too.
            self._fsync_dir()
            self._dir_synced = True

    def _undo_partial_write(self, fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as exc:
            self._last = None  # the next append re-reads the tail and repairs it
            logger.error(
                "could not cut %s back to %d bytes after a failed write (%s); "
                "the next append treats the leftover as a torn tail",
                self.log_path,
                size,
                exc,
            )

    def _fsync_dir(self) -> None:
        try:
            fd = os.open(self.dir, os.O_RDONLY)
        except OSError as exc:
            raise _storage_error(exc, self.dir, "open") from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _storage_error(exc, self.dir, "sync") from exc
        finally:
            os.close(fd)

    # -- the head anchor ---------------------------------------------------------------------

    def _write_head(self, anchor: _Anchor, *, strict: bool = False) -> None:
        """Atomically record the chain's end (temp + fsync + rename).

        The directory is not fsynced: if the rename is lost in a crash, the old head is simply
        behind the log, which verify accepts. A failure here is logged, not raised: the records
        are already durable and the next append brings the anchor forward. After a redaction
        (`strict`) the old head no longer matches the log: a failure is raised, and the
        pending redaction moves the head on the next open.
        """
        data = canonical_json({"seq": anchor.seq, "this_hash": anchor.this_hash}).encode()
        try:
            self._replace_file(self.head_path, data + b"\n")
        except OSError as exc:
            if strict:
                raise _storage_error(exc, self.head_path, "write") from exc
            logger.warning(
                "could not update the audit head anchor %s (%s); the records are written and "
                "the anchor catches up on the next append",
                self.head_path,
                exc,
            )
        if self.witness is not None:
            try:
                self.witness(anchor.seq, anchor.this_hash)
            except MemorydError as exc:  # lags until the next append; verify accepts a lag
                logger.warning("could not witness the audit chain end: %s", exc.message)

    def settle(self) -> None:
        """Finish a redaction a crash interrupted (it moves the head and the witness to the
        re-chained log): before a witness is read to verify against."""
        if self.pending_path.exists():
            with self._locked_log():
                pass

    def chain_end(self) -> tuple[int, str]:
        """(seq, this_hash) of the last record, (0, genesis hash) for an empty log."""
        with self._locked_log() as fd:
            size = self._file_size(fd)
            if self._last is None or size != self._size:
                self._last, self._size = self._load_tail(fd, size)
            return self._last.seq, self._last.this_hash

    @staticmethod
    def _replace_file(path: Path, data: bytes) -> None:
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _read_head(self) -> tuple[_Anchor | None, str | None]:
        """(anchor, None), (None, None) when there is no anchor yet, or (None, problem)."""
        try:
            raw = self.head_path.read_bytes()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise _storage_error(exc, self.head_path, "read") from exc
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if (
            isinstance(obj, dict)
            and type(obj.get("seq")) is int
            and obj["seq"] >= 0
            and isinstance(obj.get("this_hash"), str)
        ):
            return _Anchor(obj["seq"], obj["this_hash"]), None
        return None, f"the head anchor {self.head_path} is unreadable (edited or corrupted)"

    def _check_against_head(self, anchor: _Anchor) -> None:
        """Refuse to append over a log whose end was cut: writing would erase the evidence."""
        head, problem = self._read_head()
        if problem is not None:
            raise AuditChainBroken(f"{problem}; not appending to {self.log_path}")
        if head is None:
            return
        hint = "restore audit.jsonl from a backup, or move head.json away to accept the log as is"
        if head.seq > anchor.seq:
            raise AuditChainBroken(
                f"{self.log_path} ends at seq {anchor.seq} but the head anchor says {head.seq} "
                "(lines were removed from the end); not appending over it",
                hint=hint,
            )
        if head.seq == anchor.seq and head.this_hash != anchor.this_hash:
            raise AuditChainBroken(
                f"the last line of {self.log_path} is not the record the head anchor holds "
                "(the end of the log was rewritten); not appending over it",
                hint=hint,
            )

    # -- torn tails --------------------------------------------------------------------------

    def repair_torn_tail(self) -> bool:
        """Cut away a last line left half-written by a crash; True when the file was changed.

        Only the LAST line is ever touched, and only when the head anchor does not vouch for
        it; every repair is logged as a WARNING. A broken line elsewhere is tampering, left for
        `verify` to report. Appends call this themselves the first time.
        """
        if not self.log_path.exists():
            return False
        with self._locked_log() as fd:
            size = self._file_size(fd)
            _, new_size = self._repair(fd, size)
            if new_size != size:
                self._last = None
            return new_size != size

    def _scan_tail(self, fd: int, size: int) -> _TailScan:
        try:
            segments = _tail_segments(fd, size, want=2) if size else []
        except OSError as exc:
            raise _storage_error(exc, self.log_path, "read") from exc
        if not segments:
            return _TailScan(_GENESIS, 0, b"", None)
        last_offset, last_bytes = segments[-1]
        complete = last_bytes.endswith(b"\n")
        record = _parse_record(last_bytes.rstrip(b"\n") if complete else last_bytes)
        if complete and record is not None:
            return _TailScan(_Anchor(record["seq"], record["this_hash"]), size, b"", None)
        # The last line is broken or lacks its newline: the chain ends at the line before it.
        anchor = _GENESIS
        if len(segments) == 2:
            previous = _parse_record(segments[0][1].rstrip(b"\n"))
            if previous is None:
                raise AuditChainBroken(
                    f"the last two lines of {self.log_path} are broken: that is not an "
                    "interrupted write, so it is not repaired; run `memoryd audit verify`"
                )
            anchor = _Anchor(previous["seq"], previous["this_hash"])
        completes = None
        if not complete and record is not None and _chains_onto(record, anchor):
            completes = _Anchor(record["seq"], record["this_hash"])
        return _TailScan(anchor, last_offset, last_bytes, completes)

    def _repair(self, fd: int, size: int) -> tuple[_Anchor, int]:
        """The chain's end and the file size after repairing a torn last line, if any."""
        scan = self._scan_tail(fd, size)
        if not scan.fragment:
            return scan.last, size
        if scan.completes_chain is not None:
            # The whole record reached the disk but its newline did not: keep the record.
            self._write(fd, size, b"\n")
            logger.warning(
                "%s: the last line (seq %d) had no newline; added it",
                self.log_path,
                scan.completes_chain.seq,
            )
            return scan.completes_chain, size + 1
        head, _ = self._read_head()
        if head is not None and head.seq > scan.last.seq:
            raise AuditChainBroken(
                f"the last line of {self.log_path} is broken, but the head anchor says seq "
                f"{head.seq} was written: not an interrupted write, so it is not repaired; "
                "run `memoryd audit verify`"
            )
        try:
            os.ftruncate(fd, scan.good_end)
            os.fsync(fd)
        except OSError as exc:
            raise _storage_error(exc, self.log_path, "repair the torn tail of") from exc
        logger.warning(
            "%s: dropped a torn last line left by an interrupted write (%d bytes at offset %d): %r",
            self.log_path,
            len(scan.fragment),
            scan.good_end,
            scan.fragment[:_PREVIEW_BYTES],
        )
        return scan.last, scan.good_end
