"""Redaction at mark: the slugs renamed in the lines written before a scope was made sensitive,
the re-chain from the first line changed, and finishing a redaction a crash interrupted (the
package docstring, memoryd/audit/__init__.py, describes the steps).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from collections.abc import (
    Mapping,
)
from dataclasses import dataclass
from typing import Any

from memoryd.audit.files import _TAIL_BLOCK, _storage_error, _write_all
from memoryd.audit.reading import LogReading
from memoryd.audit.records import (
    _DETAILS_ENCODER,
    _GENESIS,
    GENESIS_HASH,
    REDACT_EVENT,
    AuditEvent,
    _Anchor,
    _anchor_json,
    _body,
    _encode_record,
    _prepare,
    canonical_json,
    chain_hash,
    format_audit_ts,
)
from memoryd.errors import (
    AuditChainBroken,
)
from memoryd.models import AuditRecord

logger = logging.getLogger(__name__)


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


class Redacting(LogReading):
    """`redact_slugs` and the re-chain, for `AuditLog`."""

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
