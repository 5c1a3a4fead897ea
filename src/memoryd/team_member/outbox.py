"""Team writes waiting for the team server: `<home>/team-outbox/`, one file per write.

A developer's record in a shared project is written here first (fsynced, named by its
sequence and a request id made once), then sent; the file goes only once the server answered.
While the server is away the daemon's chore sends the files in order every few seconds. The
request id travels as `X-Memoryd-Request-Id` and the team server makes a write once per id,
so a write sent twice (the answer was lost, the daemon died before deleting the file) still
lands once. A write the server refuses (no grant, a bad body) moves to `refused/` with the
server's answer beside it: kept, not retried forever.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.api.asgi import JSON, Answer
from memoryd.team_member.member import TeamLink, TeamUnreachable

logger = logging.getLogger(__name__)

OUTBOX_DIR = "team-outbox"
REFUSED_DIR = "refused"
RETRY_S = 2.0
QUEUED_SCOPE = "000000000000"
"""The scope hash a queued write's placeholder answer names: it is in no scope yet."""


def waiting(home: Path) -> int:
    """How many team writes wait to be sent (for `memoryd team status`)."""
    return len(_pending(home / OUTBOX_DIR))


def _pending(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == ".json")
    except FileNotFoundError:
        return []


class Outbox:
    """The queue of one developer daemon (one drain at a time)."""

    def __init__(self, link: TeamLink, directory: Path) -> None:
        self.link = link
        self.directory = directory
        self._lock = asyncio.Lock()
        self._seq = max((int(p.name.split("-", 1)[0]) for p in _pending(directory)), default=0)

    async def send(self, body: dict[str, Any], request_id: str) -> Answer:
        """Queue the write, then send what waits; its own answer if it went, else 202."""
        path = await asyncio.to_thread(self._put, body, request_id)
        answers = await self.drain()
        if path.name in answers:
            return answers[path.name]
        count = waiting(self.directory.parent)
        # Shaped as the memory a record answers (so `memoryd record` prints its placeholder
        # slug), with what happened to it beside; its team slug comes when it lands.
        meta = {
            "title": body.get("title", ""),
            "slug": f"team-queued-{request_id}",
            "type": body.get("type", "fact"),
            "scope_hash": QUEUED_SCOPE,
            "source": body.get("source") or "api",
            "created_at": body.get("created_at") or datetime.now(UTC).isoformat(),
        }
        queued = {
            "meta": meta,
            "body": body.get("body", ""),
            "queued": True,
            "request_id": request_id,
            "waiting": count,
            "message": f"the team server is away: the memory waits with {count - 1} other(s)"
            " and is sent when it is back (`memoryd team status`)",
        }
        return 202, JSON, json.dumps(queued).encode("utf-8")

    def _put(self, body: dict[str, Any], request_id: str) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._seq += 1
        path = self.directory / f"{self._seq:012d}-{request_id}.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(json.dumps({"request_id": request_id, "body": body}).encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(path)
        return path

    async def drain(self) -> dict[str, Answer]:
        """Send the waiting writes in order until one cannot go; each one sent's answer."""
        answers: dict[str, Answer] = {}
        async with self._lock:
            for path in _pending(self.directory):
                try:
                    entry = json.loads(await asyncio.to_thread(path.read_bytes))
                except (OSError, ValueError):
                    continue  # a file another drain took, or torn: the next drain sees
                try:
                    answer = await self.link.request(
                        "POST",
                        "/v1/memories",
                        body=entry["body"],
                        headers={"X-Memoryd-Request-Id": entry["request_id"]},
                    )
                except TeamUnreachable:
                    break
                if answer.status_code >= 500:
                    break  # the server is there but not well: keep it for later
                if answer.status_code >= 400:
                    await asyncio.to_thread(self._refuse, path, answer.content)
                else:
                    await asyncio.to_thread(path.unlink)
                answers[path.name] = (answer.status_code, JSON, answer.content)
        return answers

    def _refuse(self, path: Path, answer: bytes) -> None:
        refused = self.directory / REFUSED_DIR
        refused.mkdir(exist_ok=True, mode=0o700)
        (refused / f"{path.stem}.answer").write_bytes(answer)
        path.replace(refused / path.name)
        logger.warning("the team server refused %s: %s", path.name, answer[:200])

    async def drain_forever(self) -> None:
        while True:
            if _pending(self.directory):
                try:
                    await self.drain()
                except Exception:  # the chore must outlive any one failure
                    logger.exception("sending the team outbox failed; retrying")
            await asyncio.sleep(RETRY_S)
