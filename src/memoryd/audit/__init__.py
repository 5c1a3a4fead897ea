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

The package, one job per module: `records` (the line format and the chain), `files` (locks,
durable writes, head.json, torn tails), `reading` (verify, read, scan), `redaction` (the
re-chain at mark). `AuditLog` here appends, and inherits the rest from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from typing import Any

from memoryd.audit.reading import check_chain
from memoryd.audit.records import (
    GENESIS_HASH,
    HEAD_NAME,
    LOG_NAME,
    PENDING_NAME,
    REDACT_EVENT,
    REDACTED_NAME,
    AuditEvent,
    _Anchor,
    _encode_record,
    _parse_record,
    _prepare,
    canonical_json,
    chain_hash,
    format_audit_ts,
)
from memoryd.audit.redaction import Redacting, Redaction
from memoryd.models import AuditRecord

__all__ = [
    "GENESIS_HASH",
    "HEAD_NAME",
    "LOG_NAME",
    "PENDING_NAME",
    "REDACTED_NAME",
    "REDACT_EVENT",
    "AuditEvent",
    "AuditLog",
    "Redaction",
    "canonical_json",
    "chain_hash",
    "check_chain",
    "format_audit_ts",
]


class AuditLog(Redacting):
    """The append-only audit log in one directory (`<data dir>/audit`).

    Appends are durable when they return (written and fsynced). The last seq and hash are kept
    in memory, so appending never rescans the file. Meant for the one process that owns the
    data dir, any thread of it; an exclusive `flock` around every append (and a re-read of the
    tail when the file grew behind this object's back) still keeps one chain if a second
    process or a second AuditLog on the same directory appends too.
    """

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
