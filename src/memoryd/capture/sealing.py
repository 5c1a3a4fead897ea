"""Capture in a sensitive scope: everything the hook keeps is sealed for the scope's public key.

The hook holds no secret (DESIGN.md §7), so what it writes it cannot read back:

* a rendered session goes to `inbox/sealed/<scope>/<slug>.sealed` (`seal_session`);
* a journaled agent's hook events go to the session's sealed journal (`journal_events`), and the
  rendered box carries a `journal.SealedPlan` so the service assembles the whole session;
* a payload the hook could not capture goes to `inbox/failed/<stamp>-<scope>-<rand>.sealed`
  (`keep_failed`), and `memoryd capture retry` replays it where the key is (`replay_failed`:
  the daemon, else the in-process service), never in the hook.

Stdlib at import, like the rest of the package: `cryptography` loads only when a box is made.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from memoryd import memfile
from memoryd.capture.sources import HookInput, parse_input
from memoryd.capture_limits import CaptureLimits
from memoryd.inbox import Inbox, write_atomically
from memoryd.redact import redact
from memoryd.sensitive.sealed import (
    failed_payload_path,
    failed_scope,
    read_public_key,
    seal_for,
    sealed_capture_path,
)
from memoryd.sessions import journal

logger = logging.getLogger(__name__)


class SealedScope(NamedTuple):
    """The sensitive scope a hook call's events are sealed for."""

    scope_hash: str
    public: bytes | None
    """Its capture public key; None when it has none (nothing of it can be kept)."""


def call_cwd(hook: HookInput) -> str | None:
    """The directory that scopes one hook call: the payload's, else the git toplevel of a
    file its events touched (as `capture` scopes the session: a Windsurf edit names no cwd)."""
    if hook.cwd:
        return hook.cwd
    calls = journal.session_from_events(hook.agent, "", hook.events).tools
    return memfile.scope_for_files(path for call in calls for path, _ in call.files())


def sealed_scope(home: Path, scope_hash: str | None) -> SealedScope | None:
    """The sensitive scope `scope_hash` names, or None for a plain scope (or none)."""
    if scope_hash is None or not memfile.scope_is_sensitive(home, scope_hash):
        return None
    return SealedScope(scope_hash, read_public_key(home, scope_hash))


def journal_events(
    home: Path,
    scope_hash: str,
    public: bytes,
    key: str,
    events: list[dict[str, Any]],
    limits: CaptureLimits,
) -> None:
    """Append this call's events, redacted and sealed for the scope's public key, to the
    session's sealed journal. A plain journal the session kept before its scope was marked is
    sealed into it first and removed, so no plaintext of it stays behind."""
    sealed = journal.SealedJournal(home, key)
    journal.seal_plain_journal(home, key, lambda data: seal_for(public, data, scope_hash))
    if events:
        records = journal.prepared(events, high_entropy=limits.redact_high_entropy)
        data = journal.encode_events(records)
        sealed.append(seal_for(public, data, scope_hash))


def seal_session(
    home: Path,
    scope_hash: str,
    public: bytes,
    fields: dict[str, Any],
    body: str,
    plan: journal.SealedPlan | None = None,
) -> Path:
    """A sensitive scope's session, sealed before it touches the disk, into `inbox/sealed/`
    (one box per session: a newer capture replaces it). The hook cannot read the encrypted
    memory, so the daemon, which holds the key, merges the box into it
    (`MemoryService.drain_sealed`). A journaled session's box carries its `plan`: the daemon
    then summarises the whole sealed journal, not only this call."""
    content: dict[str, Any] = {"version": 1, "fields": fields, "body": body}
    if plan is not None:
        content["journal"] = plan.to_json()
    data = json.dumps(content, ensure_ascii=False).encode("utf-8")
    path = sealed_capture_path(home, scope_hash, str(fields["slug"]))
    write_atomically(path, seal_for(public, data, scope_hash))
    return path


def payload_cwd(source: str, positional: list[str], stdin_text: str) -> str | None:
    """The scoping directory of a payload that could not be captured: as the capture reads
    it when it parses, else any `cwd` in its JSON."""
    with contextlib.suppress(Exception):  # the payload may be what failed
        cwd = call_cwd(parse_input(source, stdin_text, positional[-1] if positional else None))
        if cwd:
            return cwd
    for text in (stdin_text, *positional):
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("cwd"), str):
            return str(value["cwd"])
    return None


def keep_failed(home: Path, source: str, positional: list[str], stdin_text: str) -> str | None:
    """A failed payload of a sensitive scope is never kept in plain text: it is sealed for
    the scope's public key into `inbox/failed/*.sealed` (or dropped when the scope has no
    capture key). Returns what was done, or None for a payload of a plain scope."""
    cwd = payload_cwd(source, positional, stdin_text)
    if cwd is None:
        return None
    scope = memfile.scope_of(cwd)
    if not memfile.scope_is_sensitive(home, scope.scope_hash):
        return None
    public = read_public_key(home, scope.scope_hash)
    if public is None:
        return "dropped the failed payload of a sensitive scope (it has no capture key)"
    data = json.dumps(
        {"version": 1, "source": source, "args": positional, "stdin": stdin_text},
        ensure_ascii=False,
    )
    box = seal_for(public, data.encode("utf-8"), scope.scope_hash)
    path = failed_payload_path(home, scope.scope_hash)
    write_atomically(path, box)
    return f"kept the failed payload of a sensitive scope sealed in {path}"


# -- replay, where the key is ---------------------------------------------------------------
def failed_boxes(home: Path) -> list[Path]:
    """The sealed files waiting in `inbox/failed/`, oldest name first."""
    try:
        return sorted(Inbox(home).failed_dir.glob("*.sealed"))
    except OSError:
        return []


class SealedRetry(NamedTuple):
    processed: int
    failing: int
    errors: list[str]
    """One line per file still failing: the file and why (never its content)."""


Opener = Callable[[Path], bytes]
"""A kept box's plaintext, opened by whoever holds the scope's key (`open_failed_capture`)."""
Replay = Callable[[str, str, str | None], str]
"""(source, stdin, argument) → the capture's status: `capture.hook.capture` without budget."""


def replay_failed(home: Path, opener: Opener, replay: Replay) -> SealedRetry:
    """Replay every sealed failed payload (a success removes it; a failure keeps it sealed,
    as it was). A session box the drain set aside goes back to `inbox/sealed/` once it opens."""
    processed = failing = 0
    errors: list[str] = []
    for path in failed_boxes(home):
        try:
            data = json.loads(opener(path))
            if not isinstance(data, dict):
                raise ValueError(f"{path}: a sealed capture holds a JSON object")
            if "fields" in data:
                status = _requeue(home, path, data)
            else:
                args = [str(a) for a in data.get("args") or []]
                arg = args[-1] if args else None
                status = replay(str(data["source"]), str(data.get("stdin") or ""), arg)
        except Exception as exc:
            failing += 1
            hint = getattr(exc, "hint", None)
            message = getattr(exc, "message", None) or str(exc)
            error = redact(f"{path.name}: {message}" + (f" ({hint})" if hint else ""))
            logger.warning("retry of %s failed again: %s", path.name, error)
            errors.append(error)
            continue
        processed += 1
        logger.info("retried %s: %s", path.name, status)
        path.unlink(missing_ok=True)
    return SealedRetry(processed=processed, failing=failing, errors=errors)


def _requeue(home: Path, path: Path, data: dict[str, Any]) -> str:
    """A set-aside session box that opens now: back to `inbox/sealed/` for the drain."""
    fields = data.get("fields")
    if not isinstance(fields, dict) or not isinstance(fields.get("slug"), str):
        raise ValueError(f"{path}: a sealed session without its slug")
    target = sealed_capture_path(home, failed_scope(path), fields["slug"])
    if target.exists():
        return "a newer capture of the session waits already"
    write_atomically(target, path.read_bytes())
    return "sealed"
