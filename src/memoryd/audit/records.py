"""The audit log's record format: canonical JSON, the hash chain, and the checks one line must
pass (its shape, its link to the line before), shared by the jobs of `AuditLog` (append, read,
verify, re-chain; see memoryd/audit/__init__.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import (
    Mapping,
)
from dataclasses import dataclass
from datetime import date, datetime
from json.encoder import encode_basestring as _json_str
from pathlib import Path
from typing import Any

from memoryd.errors import (
    InvalidInput,
)
from memoryd.models import AuditRecord, to_utc

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
