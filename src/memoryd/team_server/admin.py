"""The team server's own routes on its admin Unix socket (the local daemon's rules: the
socket's 0600 mode, no token), in front of the daemon's app there:

- `POST /v1/team/backup {"out": PATH}`: an online backup (`team.backup`). The server holds
  its writes back while `take` copies the data dir: it takes the guard's landing lock (no
  team write sits between its memory and its author note) and runs `take` on the one writer
  thread (every write the service makes waits behind it, none is halfway). Then writes go
  again and the copy is packed into PATH. Reads are served throughout.
- `GET /v1/team/status`: the graph's size and the replica's state (`team_server/replica.py`),
  for `memoryd team status`; team admins get the same over TLS (`GET /v1/team/status`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.types import Receive, Scope, Send

from memoryd.api.asgi import JSON, answer_error, json_body, send_answer
from memoryd.api.errors import error_body, status_of
from memoryd.api.runner import ServiceRunner
from memoryd.errors import InvalidInput, MemorydError
from memoryd.team.backup import archive, check_out, staging_dir, take

BACKUP = "/v1/team/backup"
STATUS = "/v1/team/status"

Backup = Callable[[Path], Awaitable[dict[str, Any]]]
Status = Callable[[], Awaitable[dict[str, Any]]]


class AdminSocket:
    """ASGI layer on the admin socket: the backup and status routes, else the app."""

    def __init__(self, app: Any, *, backup: Backup, status: Status) -> None:
        self.app = app
        self.backup = backup
        self.status = status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = (scope.get("method"), scope.get("path"))
        if scope["type"] != "http" or route not in (("POST", BACKUP), ("GET", STATUS)):
            await self.app(scope, receive, send)
            return
        try:
            if route == ("POST", BACKUP):
                out = (await json_body(receive)).get("out")
                if not isinstance(out, str) or not Path(out).is_absolute():
                    raise InvalidInput(
                        "`out` must be the archive's absolute path", hint='{"out": "/abs/x.tgz"}'
                    )
                answer = await self.backup(Path(out))
            else:
                answer = await self.status()
        except MemorydError as exc:
            await answer_error(send, status_of(exc), error_body(exc.code, str(exc), exc.hint or ""))
            return
        await send_answer(send, 200, JSON, json.dumps(answer).encode("utf-8"))


async def online_backup(
    home: Path, out: Path, landing: asyncio.Lock, runner: ServiceRunner, graph: Callable[[], Any]
) -> dict[str, Any]:
    """Back the running server's data dir up into `out`, its writes held back for the copy
    alone; what was copied, and how long writes waited (`paused_ms`, from the barrier's
    taking to its release)."""
    out = check_out(out)
    staging = await asyncio.to_thread(staging_dir, home)
    try:
        async with landing:
            held = time.monotonic()
            snapshot = await runner.write(lambda: take(home, staging, graph()))
            paused_ms = round((time.monotonic() - held) * 1000, 1)
        files = await asyncio.to_thread(archive, snapshot, out)
    finally:
        await asyncio.to_thread(shutil.rmtree, staging, True)
    return {"out": str(out), "files": files, "paused_ms": paused_ms, **snapshot.manifest}


SIZE = "MATCH (n) WHERE n:Memory OR n:Entity RETURN labels(n)[0], count(n)"


def graph_size(graph: Any) -> dict[str, int]:
    """The team graph's memories and entities."""
    counts = {str(label): int(n) for label, n in graph.cypher(SIZE).rows}
    return {"memories": counts.get("Memory", 0), "entities": counts.get("Entity", 0)}
