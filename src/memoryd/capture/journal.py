"""The journal of a session whose agent writes no readable session file (Cursor, Windsurf …).

Each hook call carries one piece of the session (a prompt, an edit, a command); the journal,
`<home>/inbox/sessions/<agent>-<hash>.jsonl`, collects them — redacted before they are written
— so the memory written at the end of a turn holds the whole session. Appends are single
`O_APPEND` writes, so concurrent hooks of one session do not interleave lines. Journals idle for
`journal_ttl_days` are deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.capture.session import Session, ToolCall, as_mapping, parse_ts
from memoryd.private import make_private_dir
from memoryd.redact import redact_json

logger = logging.getLogger(__name__)

SESSIONS_DIR = ("inbox", "sessions")
_PRUNE_MARK = ".pruned"


def sessions_dir(home: Path) -> Path:
    return home.joinpath(*SESSIONS_DIR)


def _key(agent: str, session_id: str) -> str:
    return f"{agent}-{hashlib.sha1(session_id.encode('utf-8')).hexdigest()[:16]}"


class Journal:
    def __init__(self, home: Path, agent: str, session_id: str) -> None:
        self.path = sessions_dir(home) / f"{_key(agent, session_id)}.jsonl"

    def append(self, events: list[dict[str, Any]], *, high_entropy: bool = True) -> None:
        if not events:
            return
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        lines = []
        for item in events:
            record = redact_json(item, high_entropy=high_entropy)
            record.setdefault("ts", now)
            lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode("utf-8", "replace")
        make_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        events = []
        for line in raw.split(b"\n"):
            if line.strip():
                with contextlib.suppress(ValueError):
                    item = json.loads(line)
                    if isinstance(item, dict):
                        events.append(item)
        return events


@contextlib.contextmanager
def session_lock(home: Path, agent: str, session_id: str) -> Iterator[None]:
    """Serialise the read-modify-write of one session's memory between concurrent hooks.

    Blocks; the capture's time budget (a SIGALRM) interrupts a wait that is too long.
    """
    path = sessions_dir(home) / f"{_key(agent, session_id)}.lock"
    make_private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
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
