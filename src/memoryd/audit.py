"""The audit log: hash-chained, append-only JSON lines in `audit/audit.jsonl` (seeds/001).

Each line is one `AuditRecord`. `this_hash = sha256(prev_hash || canonical_json(record without
prev_hash and this_hash))`, so editing, deleting, swapping or inserting a line breaks the chain at
that line. A chain cannot notice lines cut from the END, so `audit/head.json` anchors the tail: it
holds the seq and hash of the last record written, and `verify` reports a log that ends before it.
head.json sits beside the log, so one who cuts the last lines can rewrite it too: every head
move is also handed to `witness` (the service keeps it in governance.db, another store), and
`verify(witness=…)` checks the chain holds that seq with that hash. Cutting the tail unnoticed
then takes rewriting two stores consistently, whatever the cut lines were about.

What goes into `details` is the caller's responsibility, and it must never be plaintext of a
memory (no bodies, no titles of sensitive memories; DESIGN §7): ids, counts, hashes and states
only. The log is plain text that sync, backups and bug reports carry around.

Marking a scope sensitive renames its memories to opaque slugs; `redact_slugs` then rewrites
the lines written before the mark with the new names and re-chains the log from the first line
it changed (the re-chain is itself a chained `audit_redact` event). The new log is written whole
beside the old one, `redact.json` notes the old and new chain ends, the log is replaced by a
rename and the head moved after it: whoever takes the log's lock next finishes a redaction a
crash interrupted (`_settle_redaction`).

Over 600 lines: the hash chain, its head anchor, torn-tail repair, the four-way verify and the
re-chain at mark share one file format and its invariants.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import (
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from json.encoder import encode_basestring as _json_str
from pathlib import Path
from typing import Any

from memoryd.errors import (
    AuditChainBroken,
    InvalidInput,
    MemorydError,
    ResourceExhausted,
    StorageError,
)
from memoryd.models import AuditRecord, AuditVerification, to_utc
from memoryd.private import make_private_dir

logger = logging.getLogger(__name__)

LOG_NAME = "audit.jsonl"
HEAD_NAME = "head.json"
PENDING_NAME = "redact.json"
"""A redaction in flight: the chain ends before and after it (no slugs)."""
REDACTED_NAME = LOG_NAME + ".redacted"
"""The re-chained log, written whole before it replaces the log."""
REDACT_EVENT = "audit_redact"
GENESIS_HASH = "sha256:" + "0" * 64

_RECORD_FIELDS = tuple(AuditRecord.model_fields)
_FIELD_SET = frozenset(_RECORD_FIELDS)
_OPTIONAL_FIELDS = ("scope_hash", "target_id")
_STR_FIELDS = tuple(f for f in _RECORD_FIELDS if f != "seq" and f not in _OPTIONAL_FIELDS)
_HASH = re.compile(r"sha256:[0-9a-f]{64}\Z")
_TAIL_BLOCK = 64 * 1024
_PREVIEW_BYTES = 200
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(obj: Any) -> str:
    """The one serialisation that is hashed: sorted keys, no spaces, UTF-8 text kept as is.

    Same output as `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
    """
    return _CANONICAL_ENCODER.encode(obj)


def chain_hash(prev_hash: str, body: Mapping[str, Any]) -> str:
    """`sha256(prev_hash || canonical_json(body))`, where body is a record without its hashes."""
    data = (prev_hash + canonical_json(body)).encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def format_audit_ts(value: datetime) -> str:
    """UTC ISO-8601 with a Z, to the millisecond: several events a second are common."""
    return to_utc(value).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One event to append; `details` must hold no memory plaintext (see the module docstring)."""

    actor: str
    event_type: str
    scope_hash: str | None = None
    target_id: str | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Anchor:
    """Where the chain ends: the seq and hash the next record links to."""

    seq: int
    this_hash: str


_GENESIS = _Anchor(0, GENESIS_HASH)


def _anchor_json(anchor: _Anchor) -> dict[str, Any]:
    return {"seq": anchor.seq, "this_hash": anchor.this_hash}


@dataclass(frozen=True, slots=True)
class _TailScan:
    """The end of the log file: the last good record and whatever broken bytes follow it."""

    last: _Anchor
    good_end: int
    fragment: bytes
    completes_chain: _Anchor | None
    """Set when the fragment is a whole, chained record that only lacks its newline."""


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_audit_ts(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_DETAILS_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    default=_json_default,
)


def _details_json(details: Mapping[str, Any] | None) -> str:
    if not details:
        return "{}"
    try:
        return _DETAILS_ENCODER.encode(details if type(details) is dict else dict(details))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"audit details cannot be stored as JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Prepared:
    """An event checked and half-encoded before the lock: everything but seq, ts and hashes."""

    event: AuditEvent
    details: str
    front: str
    """`{"actor":…,"details":…,"event_type":…,` — the keys that sort before prev_hash."""
    scope: str
    target: str


def _prepare(event: AuditEvent) -> _Prepared:
    """Validate an event and JSON-encode its fixed fields; raises InvalidInput."""
    actor, event_type = event.actor, event.event_type
    scope_hash, target_id = event.scope_hash, event.target_id
    if type(actor) is not str or not actor.strip():
        raise InvalidInput(f"audit event needs a non-empty actor, got {actor!r}")
    if type(event_type) is not str or not event_type.strip():
        raise InvalidInput(f"audit event needs a non-empty event_type, got {event_type!r}")
    if scope_hash is not None and type(scope_hash) is not str:
        raise InvalidInput(f"audit event scope_hash must be a string or None, got {scope_hash!r}")
    if target_id is not None and type(target_id) is not str:
        raise InvalidInput(f"audit event target_id must be a string or None, got {target_id!r}")
    details = _details_json(event.details)
    return _Prepared(
        event,
        details,
        f'{{"actor":{_json_str(actor)},"details":{_json_str(details)},'
        f'"event_type":{_json_str(event_type)},',
        "null" if scope_hash is None else _json_str(scope_hash),
        "null" if target_id is None else _json_str(target_id),
    )


def _encode_record(seq: int, ts: str, item: _Prepared, prev_hash: str) -> tuple[AuditRecord, str]:
    """The record and its line, with the canonical JSON spelled out field by field.

    `_json_str` is the C string encoder json.dumps(ensure_ascii=False) itself uses. This is
    `canonical_json` unrolled (keys in sorted order, compact separators) because json.dumps
    of a dict twice per record halves bulk-ingest speed; the tests check that both produce
    the same bytes, and `verify` re-hashes with `canonical_json` itself.
    """
    # ts is ours (digits, '-', ':', '.', 'T', 'Z') and needs no escaping.
    body = (
        f'{item.front}"scope_hash":{item.scope},"seq":{seq},"target_id":{item.target},"ts":"{ts}"}}'
    )
    try:
        data = (prev_hash + body).encode()
    except UnicodeEncodeError as exc:  # a lone surrogate; caught before anything is written
        raise InvalidInput(f"audit event has text that is not valid Unicode: {exc}") from exc
    this_hash = "sha256:" + hashlib.sha256(data).hexdigest()
    line = (
        f'{item.front}"prev_hash":{_json_str(prev_hash)},"scope_hash":{item.scope},'
        f'"seq":{seq},"target_id":{item.target},"this_hash":"{this_hash}","ts":"{ts}"}}\n'
    )
    event = item.event
    record = AuditRecord(
        seq=seq,
        ts=ts,
        actor=event.actor,
        event_type=event.event_type,
        scope_hash=event.scope_hash,
        target_id=event.target_id,
        details=item.details,
        prev_hash=prev_hash,
        this_hash=this_hash,
    )
    return record, line


def _shape_problem(obj: Any) -> str | None:
    """Why `obj` is not an audit record, or None when it has exactly the right fields and types."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    if obj.keys() != _FIELD_SET:
        missing = [name for name in _RECORD_FIELDS if name not in obj]
        if missing:
            return f"missing field {missing[0]!r}"
        return f"unexpected field {sorted(obj.keys() - _FIELD_SET)[0]!r}"
    seq = obj["seq"]
    if type(seq) is not int or seq < 1:
        return "seq is not a positive integer"
    for name in _STR_FIELDS:
        if type(obj[name]) is not str:
            return f"{name} is not a string"
    for name in ("prev_hash", "this_hash"):
        if not _HASH.match(obj[name]):
            return f"{name} is not a sha256 hash"
    for name in _OPTIONAL_FIELDS:
        if obj[name] is not None and type(obj[name]) is not str:
            return f"{name} is not a string or null"
    return None


def _parse_record(line: bytes) -> dict[str, Any] | None:
    """The record on one line (newline stripped), or None when it is not a well-formed record."""
    try:
        obj = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return None
    return obj if _shape_problem(obj) is None else None


def _body(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("prev_hash", "this_hash")}


def _chains_onto(obj: Mapping[str, Any], anchor: _Anchor) -> bool:
    return bool(
        obj["seq"] == anchor.seq + 1
        and obj["prev_hash"] == anchor.this_hash
        and chain_hash(anchor.this_hash, _body(obj)) == obj["this_hash"]
    )


def check_chain(records: Iterable[Any]) -> tuple[int, str] | None:
    """Check a chain carried elsewhere (a sync export's `audit_chain`): None when every
    record links onto the one before, from the genesis hash; else (index, what is wrong)."""
    anchor = _GENESIS
    for index, obj in enumerate(records):
        checked = AuditLog._check_record(obj, index + 1, anchor, None)
        if isinstance(checked, str):
            return index, checked.split(": ", 1)[-1]
        anchor = checked
    return None


@dataclass(frozen=True, slots=True)
class Redaction:
    """What `redact_slugs` rewrote: counts and where the re-chain began, never the names."""

    lines_redacted: int
    lines_rechained: int
    first_seq: int | None
    record: AuditRecord


_RUN = re.compile(r"[\w.-]+")
"""A run of slug characters; a slug is a whole run, or whole '.'-separated parts of one."""


class _Renamer:
    """Renames old slugs as whole tokens (not inside a longer slug or word), in one pass
    over the text whatever the number of slugs: a mark may rename thousands."""

    def __init__(self, renames: Mapping[str, str]) -> None:
        self.renames = dict(renames)

    def text(self, text: str) -> str:
        return _RUN.sub(self._run, text)

    def _run(self, found: re.Match[str]) -> str:
        run = found.group(0)
        renamed = self.renames.get(run)
        if renamed is not None:
            return renamed
        if "." not in run:
            return run
        # `decisions/<slug>.md`, or a slug with a '.' of its own: the longest known join of
        # whole parts from each position.
        parts = run.split(".")
        out: list[str] = []
        i = 0
        while i < len(parts):
            for j in range(len(parts), i, -1):
                renamed = self.renames.get(".".join(parts[i:j]))
                if renamed is not None:
                    out.append(renamed)
                    i = j
                    break
            else:
                out.append(parts[i])
                i += 1
        return ".".join(out)

    def value(self, value: Any) -> Any:
        """`value` (parsed JSON) with every string in it renamed, keys included."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        return value

    def details(self, details: str) -> str:
        """The details with every old slug renamed, re-encoded as appends encode them."""
        try:
            parsed = json.loads(details)
        except ValueError:
            return self.text(details)  # not JSON (written by hand?): renamed as text
        renamed = self.value(parsed)
        return details if renamed == parsed else _DETAILS_ENCODER.encode(renamed)


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


class AuditLog:
    """The append-only audit log in one directory (`<data dir>/audit`).

    Appends are durable when they return (written and fsynced). The last seq and hash are kept
    in memory, so appending never rescans the file. Meant for the one process that owns the
    data dir, any thread of it; an exclusive `flock` around every append (and a re-read of the
    tail when the file grew behind this object's back) still keeps one chain if a second
    process or a second AuditLog on the same directory appends too.
    """

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

    # -- appending ---------------------------------------------------------------------------

    def append(
        self,
        *,
        actor: str,
        event_type: str,
        scope_hash: str | None,
        target_id: str | None,
        details: Mapping[str, Any] | None = None,
    ) -> AuditRecord:
        """Append one event and return its record, durable on return.

        `details` is stored as JSON in plain text: ids, counts and states only, never memory
        text (DESIGN §7).
        """
        event = AuditEvent(
            actor=actor,
            event_type=event_type,
            scope_hash=scope_hash,
            target_id=target_id,
            details=details,
        )
        return self.append_many([event])[0]

    def append_many(self, events: Sequence[AuditEvent]) -> list[AuditRecord]:
        """Append a batch with ONE write and ONE fsync: bulk ingest stays fast.

        The whole batch is validated before anything is written, so a bad event leaves the log
        untouched. Every record of the batch carries the same `ts`: the time it was written.
        """
        if not events:
            return []
        prepared = [_prepare(event) for event in events]
        with self._locked_log() as fd:
            size = self._file_size(fd)
            if self._last is None or size != self._size:
                anchor, size = self._load_tail(fd, size)
            else:
                anchor = self._last
            ts = format_audit_ts(self._clock())
            records: list[AuditRecord] = []
            lines: list[str] = []
            seq, prev_hash = anchor.seq, anchor.this_hash
            for item in prepared:
                seq += 1
                record, line = _encode_record(seq, ts, item, prev_hash)
                records.append(record)
                lines.append(line)
                prev_hash = record.this_hash
            data = "".join(lines).encode()
            self._write(fd, size, data)
            self._last, self._size = _Anchor(seq, prev_hash), size + len(data)
            self._write_head(self._last)
            return records

    def last_seq(self) -> int:
        """The seq of the last record (0 for an empty log): a write intent notes it, so
        recovery knows which records came after it. Repairs a torn tail like an append."""
        with self._locked_log() as fd:
            size = self._file_size(fd)
            if self._last is None or size != self._size:
                self._last, self._size = self._load_tail(fd, size)
            return self._last.seq

    def records_after(self, seq: int) -> list[AuditRecord]:
        """The records with a seq above `seq`, oldest first, read from the end of the log."""
        size, _ = self._snapshot()
        found: list[AuditRecord] = []
        with closing(self._lines_backwards(size)) as lines:
            for raw in lines:
                obj = _parse_record(raw.rstrip(b"\n"))
                if obj is None:
                    continue
                if obj["seq"] <= seq:
                    break
                found.append(AuditRecord.model_validate(obj))
        found.reverse()
        return found

    # -- redaction at mark --------------------------------------------------------------------

    def redact_slugs(
        self, renames: Mapping[str, str], *, actor: str, scope_hash: str | None
    ) -> Redaction | None:
        """Rename old slugs to new ones in every line (`target_id`, and any string in
        `details`), re-chain the log from the first line changed and append an
        `audit_redact` event; None when there is nothing to rename.

        The chain is checked as it is read: a broken log is refused (AuditChainBroken), since
        re-chaining it would hide the break. The event's details hold counts and the first seq
        changed: never a slug, nor the old chain end (with the unchanged rest of the lines,
        that hash would let anyone confirm a guessed old slug by re-hashing).
        """
        renames = {old: new for old, new in renames.items() if old and old != new}
        if not renames:
            return None
        renamer = _Renamer(renames)

        with self._locked_log() as fd:
            size = self._file_size(fd)
            old_end, size = self._load_tail(fd, size)
            head, _ = self._read_head()
            self._last = None
            try:
                out = os.open(self.redacted_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            except OSError as exc:
                raise _storage_error(exc, self.redacted_path, "create") from exc
            renamed = False
            try:
                self._flock(out, fcntl.LOCK_EX)  # the new log is locked from its first byte
                redaction, data = self._rechain(out, size, head, renamer, actor, scope_hash)
                if not redaction.lines_redacted:
                    self._write(fd, size, data)  # nothing renamed: the event is appended
                    new_end = _Anchor(redaction.record.seq, redaction.record.this_hash)
                    self._write_head(new_end)
                    self._last, self._size = new_end, size + len(data)
                    return redaction
                _write_all(out, data)
                os.fsync(out)
                new_end = _Anchor(redaction.record.seq, redaction.record.this_hash)
                pending = {"new": _anchor_json(new_end), "old": _anchor_json(old_end)}
                self._replace_file(self.pending_path, canonical_json(pending).encode())
                self._fsync_dir()
                os.replace(self.redacted_path, self.log_path)
                renamed = True
                self._fsync_dir()
                self._write_head(new_end, strict=True)
                self.pending_path.unlink()
                self._fsync_dir()
                stat = os.fstat(out)
                self._last, self._size, self._ino = new_end, stat.st_size, stat.st_ino
                return redaction
            except OSError as exc:
                raise _storage_error(exc, self.log_path, "redact") from exc
            finally:
                os.close(out)
                if not renamed:
                    self.pending_path.unlink(missing_ok=True)
                    self.redacted_path.unlink(missing_ok=True)

    def _rechain(
        self,
        out: int,
        size: int,
        head: _Anchor | None,
        renamer: _Renamer,
        actor: str,
        scope_hash: str | None,
    ) -> tuple[Redaction, bytes]:
        """Write the renamed, re-chained log to `out` (all but its last line) and return the
        redaction with that last line: the `audit_redact` event."""
        anchor, prev_hash = _GENESIS, GENESIS_HASH
        redacted = rechained = 0
        first_seq: int | None = None
        buffer: list[bytes] = []
        buffered = 0
        for n, raw in enumerate(self._lines(size), start=1):
            checked = self._check_line(raw, n, anchor, head)
            if isinstance(checked, str):
                raise AuditChainBroken(
                    f"{self.log_path} is broken ({checked}): it is not redacted, since "
                    "re-chaining it would hide that",
                    hint="run `memoryd audit verify`, restore the log from a backup, then "
                    "mark the scope again",
                )
            anchor = checked
            obj = json.loads(raw)
            target, details = obj["target_id"], obj["details"]
            if target is not None:
                obj["target_id"] = renamer.text(target)
            obj["details"] = renamer.details(details)
            if obj["target_id"] != target or obj["details"] != details:
                redacted += 1
                if first_seq is None:
                    first_seq = obj["seq"]
            if first_seq is None:
                line = raw
            else:
                rechained += 1
                obj["prev_hash"] = prev_hash
                obj["this_hash"] = chain_hash(prev_hash, _body(obj))
                line = (canonical_json(obj) + "\n").encode()
            prev_hash = obj["this_hash"]
            buffer.append(line)
            buffered += len(line)
            if buffered >= _TAIL_BLOCK * 16:
                _write_all(out, b"".join(buffer))
                buffer, buffered = [], 0
        _write_all(out, b"".join(buffer))
        details = {
            "first_seq": first_seq,
            "lines_rechained": rechained,
            "lines_redacted": redacted,
            "slugs": len(renamer.renames),
        }
        event = AuditEvent(
            actor=actor,
            event_type=REDACT_EVENT,
            scope_hash=scope_hash,
            target_id=scope_hash,
            details=details,
        )
        ts = format_audit_ts(self._clock())
        record, event_line = _encode_record(anchor.seq + 1, ts, _prepare(event), prev_hash)
        return Redaction(redacted, rechained, first_seq, record), event_line.encode()

    def _settle_redaction(self) -> None:
        """Finish a redaction a crash interrupted; the caller holds the log's lock.

        `redact.json` is written after the new log is whole and synced, so the new log, when
        it is still beside the old, replaces it; then the head moves to the new chain end.
        """
        try:
            pending = json.loads(self.pending_path.read_bytes())
            old_end, new_end = _Anchor(**pending["old"]), _Anchor(**pending["new"])
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as exc:
            raise AuditChainBroken(
                f"{self.pending_path} (an audit redaction in flight) is unreadable: {exc}",
                hint=f"if {self.redacted_path.name} is beside it, move it over "
                f"{self.log_path.name}; then remove {self.pending_path.name} and run "
                "`memoryd audit verify`",
            ) from exc
        except OSError as exc:
            raise _storage_error(exc, self.pending_path, "read") from exc
        try:
            if self.redacted_path.exists():
                os.replace(self.redacted_path, self.log_path)
                self._fsync_dir()
            fd = os.open(self.log_path, os.O_RDONLY)
            try:
                end = self._scan_tail(fd, self._file_size(fd)).last
            finally:
                os.close(fd)
            if end == new_end:
                self._write_head(new_end, strict=True)
                logger.warning(
                    "%s: finished an audit redaction a crash interrupted (chain end seq %d)",
                    self.log_path,
                    new_end.seq,
                )
            elif end != old_end:
                logger.warning(
                    "%s: ends neither where the interrupted redaction began nor where it "
                    "ended; left as it is for `memoryd audit verify`",
                    self.log_path,
                )
            self.pending_path.unlink(missing_ok=True)
            self._fsync_dir()
        except OSError as exc:
            raise _storage_error(exc, self.log_path, "finish the redaction of") from exc
        self._last = None

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

    # -- reading -----------------------------------------------------------------------------

    def _snapshot(self) -> tuple[int, tuple[_Anchor | None, str | None]]:
        """The file size and head to read against: a line boundary even while others append."""
        if self.pending_path.exists():
            with self._locked_log():
                pass  # a redaction a crash interrupted: finished before anything is read
        with self._lock:
            try:
                fd = os.open(self.log_path, os.O_RDONLY)
            except FileNotFoundError:
                return 0, self._read_head()
            except OSError as exc:
                raise _storage_error(exc, self.log_path, "open") from exc
            try:
                self._flock(fd, fcntl.LOCK_SH)
                return self._file_size(fd), self._read_head()
            finally:
                os.close(fd)

    def _lines(self, size: int) -> Generator[bytes, None, None]:
        """The raw lines of the first `size` bytes, streamed."""
        if size == 0:
            return
        try:
            with self.log_path.open("rb") as f:
                pos = 0
                for raw in f:
                    if pos + len(raw) >= size:
                        yield raw[: size - pos]
                        return
                    pos += len(raw)
                    yield raw
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _storage_error(exc, self.log_path, "read") from exc

    def verify(
        self, witness: tuple[int, str] | None = None, *, witnessed_by: str = "the witness"
    ) -> AuditVerification:
        """Walk the whole chain and the head anchor; report the first problem found.

        `witness` is a chain end kept outside this directory (read BEFORE this call, so it
        can only lag the log): the chain must hold its seq with its hash. That catches the
        last lines cut together with a rewritten head.json, which the chain alone cannot.
        Streams the file, so a log of 100k+ lines needs no more memory than one line.
        """
        size, (head, head_problem) = self._snapshot()
        lines = 0
        first_bad: int | None = None
        problem: str | None = None
        anchor = _GENESIS
        for raw in self._lines(size):
            lines += 1
            if problem is not None:
                continue
            checked = self._check_line(raw, lines, anchor, head)
            if isinstance(checked, str):
                problem, first_bad = checked, lines
            else:
                anchor = checked
                if (
                    witness is not None
                    and anchor.seq == witness[0]
                    and anchor.this_hash != (witness[1])
                ):
                    problem, first_bad = (
                        f"line {lines}: seq {anchor.seq} is not the record {witnessed_by}"
                        " holds as written (the end of the log was rewritten)",
                        lines,
                    )
        if problem is None and head_problem is not None:
            problem = head_problem
        if problem is None and head is not None and anchor.seq < head.seq:
            first_bad = lines + 1
            problem = (
                f"truncated after line {lines}: {self.head_path.name} expects {head.seq} "
                f"lines ({head.seq - anchor.seq} removed from the end)"
            )
        if problem is None and witness is not None and anchor.seq < witness[0]:
            first_bad = lines + 1
            problem = (
                f"truncated after line {lines}: {witnessed_by} says seq {witness[0]} was"
                f" written ({witness[0] - anchor.seq} removed from the end, and"
                f" {self.head_path.name} rewritten to match)"
            )
        return AuditVerification(
            ok=problem is None, lines=lines, first_bad_line=first_bad, problem=problem
        )

    @staticmethod
    def _check_line(raw: bytes, n: int, anchor: _Anchor, head: _Anchor | None) -> str | _Anchor:
        """What is wrong with line `n` given the chain before it, or the chain's new end."""
        complete = raw.endswith(b"\n")
        text = raw[:-1] if complete else raw
        try:
            obj = json.loads(text)
        except ValueError:
            if not complete:
                return (
                    f"line {n}: torn last line ({len(raw)} bytes without a newline: an "
                    "interrupted write, which the next append repairs)"
                )
            return f"line {n}: not valid JSON"
        return AuditLog._check_record(obj, n, anchor, head)

    @staticmethod
    def _check_record(obj: Any, n: int, anchor: _Anchor, head: _Anchor | None) -> str | _Anchor:
        """`_check_line` of a line already parsed: a chain carried in a sync file is parsed
        once, with the file (encoding it again to parse it again was half of its check)."""
        shape = _shape_problem(obj)
        if shape is not None:
            return f"line {n}: not an audit record ({shape})"
        seq = obj["seq"]
        if n == 1 and seq != 1:
            return (
                f"line 1: seq {seq}, but the log starts at seq 1 "
                "(a line was deleted or lines were swapped)"
            )
        if seq == anchor.seq:
            return f"line {n}: seq {seq} repeats line {n - 1}'s (a line was duplicated)"
        if seq > anchor.seq + 1:
            return (
                f"line {n}: seq {seq} follows {anchor.seq} "
                "(a line was deleted or lines were swapped)"
            )
        if seq < anchor.seq:
            return f"line {n}: seq {seq} follows {anchor.seq} (lines were swapped or moved)"
        if obj["prev_hash"] != anchor.this_hash:
            if n == 1:
                return "line 1: prev_hash is not the genesis hash"
            return f"line {n}: prev_hash does not match line {n - 1}'s this_hash"
        if chain_hash(obj["prev_hash"], _body(obj)) != obj["this_hash"]:
            return f"line {n}: this_hash does not match its content (edited?)"
        if head is not None and seq == head.seq and obj["this_hash"] != head.this_hash:
            return (
                f"line {n}: seq {seq} is not the record the head anchor holds "
                "(the end of the log was rewritten)"
            )
        return _Anchor(seq, obj["this_hash"])

    def targets(self, event_types: Collection[str]) -> set[str]:
        """The target ids of every record of these event types, streamed (`verify` asks
        which memories have the line that created them)."""
        return {obj["target_id"] for obj in self.scan(event_types) if obj["target_id"]}

    def scan(self, event_types: Collection[str]) -> Iterator[dict[str, Any]]:
        """The records of these event types as parsed (details still a JSON string), one at
        a time: a caller after one field of 100k+ records (`read` builds them all) holds
        one line."""
        size, _ = self._snapshot()
        wanted = set(event_types)
        for raw in self._lines(size):
            obj = _parse_record(raw.rstrip(b"\n"))
            if obj is not None and obj["event_type"] in wanted:
                yield obj

    def read(
        self,
        *,
        scope_hash: str | None = None,
        since: datetime | None = None,
        event_type: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[AuditRecord]:
        """The matching records, newest last.

        `limit` keeps the newest matches and `offset` skips that many of the newest first, so
        `read(limit=20)` is the last 20 events and `read(limit=20, offset=20)` the 20 before.
        With a limit the file is read from the end and only as far back as needed. Lines that
        are not records are skipped with a warning (`verify` says which and why).
        """
        if offset < 0 or (limit is not None and limit < 0):
            raise InvalidInput("limit and offset must not be negative")
        if limit == 0:
            return []
        since_utc = to_utc(since) if since is not None else None
        wanted = None if limit is None else limit + offset
        size, _ = self._snapshot()
        source = self._lines(size) if wanted is None else self._lines_backwards(size)
        matches: list[dict[str, Any]] = []
        skipped = 0
        with closing(source) as lines:
            for raw in lines:
                obj = _parse_record(raw.rstrip(b"\n"))
                if obj is None:
                    skipped += 1
                    continue
                if scope_hash is not None and obj["scope_hash"] != scope_hash:
                    continue
                if event_type is not None and obj["event_type"] != event_type:
                    continue
                if since_utc is not None and not self._at_or_after(obj["ts"], since_utc):
                    continue
                matches.append(obj)
                if wanted is not None and len(matches) >= wanted:
                    break
        if skipped:
            logger.warning(
                "%s: skipped %d line(s) that are not audit records; run `memoryd audit verify`",
                self.log_path,
                skipped,
            )
        if wanted is not None:
            matches.reverse()  # read newest first; hand back oldest first
        matches = matches[: max(0, len(matches) - offset)]
        if limit is not None:
            matches = matches[-limit:]
        return [AuditRecord.model_validate(obj) for obj in matches]

    def _lines_backwards(self, size: int) -> Generator[bytes, None, None]:
        """The lines of the first `size` bytes, last first, read in blocks from the end."""
        if size == 0:
            return
        try:
            with self.log_path.open("rb") as f:
                pos, carry, rightmost = size, b"", True
                while pos > 0:
                    step = min(_TAIL_BLOCK, pos)
                    pos -= step
                    pieces = (os.pread(f.fileno(), step, pos) + carry).split(b"\n")
                    # pieces[0] may continue further left; the others are whole lines.
                    carry = pieces[0]
                    whole = pieces[1:]
                    if rightmost and whole and whole[-1] == b"":
                        whole.pop()  # the file ends with a newline
                    rightmost = False
                    yield from reversed(whole)
                if carry:
                    yield carry
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _storage_error(exc, self.log_path, "read") from exc

    def _at_or_after(self, ts: str, since: datetime) -> bool:
        try:
            return to_utc(datetime.fromisoformat(ts)) >= since
        except ValueError:
            logger.warning("%s has a record with an unreadable ts %r; skipped", self.log_path, ts)
            return False
