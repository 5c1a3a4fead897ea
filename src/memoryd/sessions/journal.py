"""The journal of a session whose agent writes no readable session file (Cursor, Windsurf …).

Each hook call carries one piece of the session (a prompt, an edit, a command); the journal,
`<home>/inbox/sessions/<agent>-<hash>.jsonl`, collects them — redacted before they are written
— so the memory written at the end of a turn holds the whole session. Appends are single
`O_APPEND` writes, so concurrent hooks of one session do not interleave lines. Journals idle for
`journal_ttl_days` are deleted.

In a sensitive scope the journal is `<agent>-<hash>.sealed` (`SealedJournal`): one line per hook
call, the base64 of a sealed box (`memoryd.sensitive.sealed`, made by the hook for the scope's
public key) of that call's redacted events. The hook can append but never read it back, so the
session is assembled where the key is (`assemble_sealed`, run by the service's drain of sealed
captures) from the journal and what the rendering call said (`SealedPlan`).

Stdlib and base only: the hook and the service share this module (`tests/unit/test_layers.py`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from memoryd.capture_limits import CaptureLimits
from memoryd.filelock import lock, unlock
from memoryd.memfile import format_ts
from memoryd.private import make_private_dir
from memoryd.redact import redact_json
from memoryd.sessions.session import Session, ToolCall, as_mapping, parse_ts
from memoryd.sessions.summary import summarize, trivial_reason

logger = logging.getLogger(__name__)

SESSIONS_DIR = ("inbox", "sessions")
_PRUNE_MARK = ".pruned"
SEALED_JOURNAL_SUFFIX = ".sealed"
SCOPE_KEY = "scope"
"""The key under which a plain journal's events name their scope hash."""
PLAIN_JOURNAL_SUFFIX = ".jsonl"


def sessions_dir(home: Path) -> Path:
    return home.joinpath(*SESSIONS_DIR)


def _key(agent: str, session_id: str) -> str:
    return f"{agent}-{hashlib.sha1(session_id.encode('utf-8')).hexdigest()[:16]}"


def journal_key(agent: str, session_id: str) -> str:
    """The journal's file stem: the agent and a hash of the session id (never its text)."""
    return _key(agent, session_id)


def prepared(events: list[dict[str, Any]], *, high_entropy: bool = True) -> list[dict[str, Any]]:
    """The events as a journal keeps them: redacted, each with a time."""
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    records = []
    for item in events:
        record = redact_json(item, high_entropy=high_entropy)
        record.setdefault("ts", now)
        records.append(record)
    return records


def _append(path: Path, data: bytes) -> None:
    """One `O_APPEND` write: concurrent hooks of a session never interleave their lines."""
    make_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def parse_events(raw: bytes) -> list[dict[str, Any]]:
    """The events of a plain journal's bytes (a torn or hand-broken line is skipped)."""
    events = []
    for line in raw.split(b"\n"):
        if line.strip():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    events.append(item)
    return events


class Journal:
    def __init__(self, home: Path, agent: str, session_id: str) -> None:
        self.path = sessions_dir(home) / f"{_key(agent, session_id)}{PLAIN_JOURNAL_SUFFIX}"

    def append(
        self, events: list[dict[str, Any]], *, high_entropy: bool = True, scope: str | None = None
    ) -> None:
        """Append the events, redacted; each names `scope` (its hash), so marking that scope
        sensitive finds and seals this journal even before the session has a memory."""
        if not events:
            return
        records = prepared(events, high_entropy=high_entropy)
        if scope:
            for record in records:
                record[SCOPE_KEY] = scope
        lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
        _append(self.path, ("\n".join(lines) + "\n").encode("utf-8", "replace"))

    def read(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return parse_events(raw)


class SealedJournal:
    """A sensitive scope's journal of one session: sealed boxes, one base64 line each."""

    def __init__(self, home: Path, key: str) -> None:
        self.key = key
        self.path = sessions_dir(home) / f"{key}{SEALED_JOURNAL_SUFFIX}"

    @property
    def plain_path(self) -> Path:
        """The plain journal the same session kept before its scope was marked sensitive."""
        return self.path.with_name(f"{self.key}{PLAIN_JOURNAL_SUFFIX}")

    def append(self, box: bytes) -> None:
        _append(self.path, base64.b64encode(box) + b"\n")

    def boxes(self) -> list[bytes]:
        """Every box appended so far, in order (a torn last line is left for the next read)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        found = []
        for line in raw.split(b"\n"):
            with contextlib.suppress(ValueError):
                if line.strip():
                    found.append(base64.b64decode(line, validate=True))
        return found


def seal_plain_journal(home: Path, key: str, seal: Callable[[bytes], bytes]) -> bool:
    """Move a session's plain journal into its sealed journal (its scope became sensitive):
    its events become one box made by `seal`, then the plain file goes. Whether one was there."""
    sealed = SealedJournal(home, key)
    try:
        raw = sealed.plain_path.read_bytes()
    except FileNotFoundError:
        return False
    earlier = parse_events(raw)
    if earlier:
        sealed.append(seal(encode_events(earlier)))
    sealed.plain_path.unlink(missing_ok=True)
    return True


def plain_journals_of(home: Path, scope_hash: str) -> list[str]:
    """The keys of the plain journals whose events name `scope_hash` (marking it seals them)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(sessions_dir(home)):
            if not entry.name.endswith(PLAIN_JOURNAL_SUFFIX):
                continue
            with contextlib.suppress(OSError):
                events = parse_events(Path(entry.path).read_bytes())
                if any(item.get(SCOPE_KEY) == scope_hash for item in events):
                    found.append(entry.name.removesuffix(PLAIN_JOURNAL_SUFFIX))
    return sorted(found)


def encode_events(records: list[dict[str, Any]]) -> bytes:
    """What one sealed journal box holds: the call's prepared events as a JSON list."""
    return json.dumps(records, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_events(plaintext: bytes) -> list[dict[str, Any]]:
    value = json.loads(plaintext)
    if not isinstance(value, list):
        raise ValueError("a sealed journal box holds a JSON list of events")
    return [item for item in value if isinstance(item, dict)]


class SealedPlan(NamedTuple):
    """What the rendering hook call knew besides the journal: how to summarise the session
    where the journal can be read (the service, which holds the scope's key)."""

    journal: str
    """The journal's key (`journal_key`)."""
    agent: str
    session_id: str
    agent_name: str
    roots: list[str]
    title: str | None
    final: str | None
    model: str | None
    ts: str | None
    limits: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self._asdict()

    @classmethod
    def from_json(cls, data: Any) -> SealedPlan:
        if not isinstance(data, dict):
            raise ValueError("a sealed capture's journal plan is a JSON object")
        for name in ("journal", "agent", "session_id", "agent_name"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise ValueError(f"a sealed capture's journal plan needs `{name}`")
        if "/" in data["journal"] or data["journal"].startswith("."):
            raise ValueError("a sealed capture's journal key is not a file name")
        roots = data.get("roots")
        limits = data.get("limits")

        def text(name: str) -> str | None:
            value = data.get(name)
            return value if isinstance(value, str) and value else None

        return cls(
            journal=data["journal"],
            agent=data["agent"],
            session_id=data["session_id"],
            agent_name=data["agent_name"],
            roots=[r for r in roots if isinstance(r, str)] if isinstance(roots, list) else [],
            title=text("title"),
            final=text("final"),
            model=text("model"),
            ts=text("ts"),
            limits=limits if isinstance(limits, dict) else {},
        )

    def capture_limits(self) -> CaptureLimits:
        """The hook's limits (unknown or mistyped entries fall back to the defaults)."""
        defaults = CaptureLimits()
        known = {
            name: value
            for name, value in self.limits.items()
            if name in CaptureLimits._fields and type(value) is type(getattr(defaults, name))
        }
        return defaults._replace(**known)


def assemble_sealed(
    plan: SealedPlan, events: list[dict[str, Any]], fields: dict[str, Any]
) -> tuple[dict[str, Any], str] | str:
    """The memory of a journaled session from its opened journal: the frontmatter fields
    (`fields` updated with what the summary says) and the body, or why it is trivial."""
    session = session_from_events(plan.agent, plan.session_id, events)
    if plan.final:
        session.final = plan.final
    session.model = session.model or plan.model
    when = parse_ts(plan.ts)
    session.seen(when)
    limits = plan.capture_limits()
    reason = trivial_reason(session, limits)
    if reason:
        return reason
    summary = summarize(
        session, limits, agent_name=plan.agent_name, roots=plan.roots, title=plan.title
    )
    updated = dict(fields)
    updated.update(title=summary.title, tags=summary.tags, triggers=summary.triggers)
    started = session.started_at or when
    if started is not None:
        updated["created_at"] = format_ts(started)
    if session.model:
        updated["model"] = session.model
    return updated, summary.body


@contextlib.contextmanager
def session_lock(home: Path, agent: str, session_id: str) -> Iterator[None]:
    """Serialise the read-modify-write of one session's memory between concurrent hooks.

    Blocks; the capture's time budget (a SIGALRM) interrupts a wait that is too long.
    """
    path = sessions_dir(home) / f"{_key(agent, session_id)}.lock"
    make_private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        lock(fd)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)


def session_from_events(agent: str, session_id: str, events: list[dict[str, Any]]) -> Session:
    session = Session(agent=agent, session_id=session_id)
    for item in events:
        session.seen(parse_ts(item.get("ts")))
        kind = item.get("kind")
        raw = item.get("text")
        text = raw if isinstance(raw, str) else ""
        if kind == "prompt":
            session.add_prompt(text)
        elif kind == "assistant":
            session.add_assistant(text)
        elif kind == "final" and text:
            session.final = text
        elif kind == "compact" and text:
            session.compactions.append(text)
        elif kind == "error" and text:
            session.errors.append(text)
        elif kind == "note" and text:
            session.notes.append(text)
        elif kind == "tool":
            session.tools.append(
                ToolCall(
                    name=str(item.get("name") or "tool"),
                    input=as_mapping(item.get("input")),
                    output=str(item.get("output") or ""),
                    error=bool(item.get("error")),
                    exit_code=item.get("exit_code")
                    if isinstance(item.get("exit_code"), int)
                    else None,
                    server=str(item.get("server") or ""),
                )
            )
        if isinstance(item.get("cwd"), str) and session.cwd is None:
            session.cwd = item["cwd"]
    return session


def copilot_session_id(home: Path, scope_hash: str, event: str, when: datetime) -> str:
    """Copilot names no session: one session per `sessionStart` in a scope, kept in a pointer."""
    pointer = sessions_dir(home) / f"copilot-{scope_hash}.current"
    if event != "sessionStart":
        with contextlib.suppress(OSError):
            current = pointer.read_text(encoding="utf-8").strip()
            if current:
                return current
    session_id = f"{scope_hash}-{when.strftime('%Y%m%dT%H%M%S')}"
    make_private_dir(pointer.parent)
    fd = os.open(pointer, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(session_id + "\n")
    return session_id


def prune(home: Path, ttl_days: int) -> int:
    """Delete journals and locks idle for `ttl_days`; runs at most once a day."""
    directory = sessions_dir(home)
    mark = directory / _PRUNE_MARK
    now = time.time()
    try:
        if now - mark.stat().st_mtime < 86400:
            return 0
    except FileNotFoundError:
        pass
    except OSError:
        return 0
    removed = 0
    cutoff = now - ttl_days * 86400
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.name != _PRUNE_MARK and entry.stat().st_mtime < cutoff:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
        mark.touch()
    if removed:
        logger.info("pruned %d idle session journal file(s)", removed)
    return removed
