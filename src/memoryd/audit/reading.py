"""Reading the audit log: `verify` (chain, head and witness, four ways), `read` and `scan` with
their filters, and the log's lines forwards and backwards up to a snapshot of its size; and
`check_chain`, the same record checks over records from elsewhere (sync's memories.json).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import (
    Collection,
    Generator,
    Iterable,
    Iterator,
)
from contextlib import closing
from datetime import datetime
from typing import Any

from memoryd.audit.files import _TAIL_BLOCK, LogFiles, _storage_error
from memoryd.audit.records import (
    _GENESIS,
    _Anchor,
    _body,
    _parse_record,
    _shape_problem,
    chain_hash,
)
from memoryd.errors import (
    InvalidInput,
)
from memoryd.models import AuditRecord, AuditVerification, to_utc

logger = logging.getLogger(__name__)


def check_chain(records: Iterable[Any]) -> tuple[int, str] | None:
    """Check a chain carried elsewhere (a sync export's `audit_chain`): None when every
    record links onto the one before, from the genesis hash; else (index, what is wrong)."""
    anchor = _GENESIS
    for index, obj in enumerate(records):
        checked = LogReading._check_record(obj, index + 1, anchor, None)
        if isinstance(checked, str):
            return index, checked.split(": ", 1)[-1]
        anchor = checked
    return None


class LogReading(LogFiles):
    """The methods of `AuditLog` that only read the log: verify, read, scan."""

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
        return LogReading._check_record(obj, n, anchor, head)

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
        one line. A line that holds no wanted type, quoted, and no \\u escape cannot be one
        of them and is passed over unparsed: most of a 100k log, for one rare type."""
        size, _ = self._snapshot()
        wanted = set(event_types)
        # A JSON string equal to a type with no character of a short escape (" \ / or a
        # control) is the type quoted, or written with a \u escape.
        literals = [b'"' + t.encode() + b'"' for t in wanted]
        plain = all(c not in '"\\/' and c >= " " for t in wanted for c in t)
        for raw in self._lines(size):
            if plain and b"\\u" not in raw and not any(lit in raw for lit in literals):
                continue  # no JSON string on the line can be a wanted type: not parsed
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
