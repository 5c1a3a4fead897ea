"""The developer daemon's side of a team: `Forwarder`, in front of `memoryd serve`'s app once
the data dir joined a team (`memoryd.team_member.member`), sends what belongs to a shared project to
the team server (see `memoryd.team_member.member` for what goes where)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, quote

import anyio.from_thread

from memoryd.api.asgi import (
    JSON,
    Answer,
    Receive,
    Scope,
    Send,
    answer_error,
    call,
    json_body,
    replay,
    send_answer,
)
from memoryd.errors import InvalidInput, MemorydError
from memoryd.memfile import SCOPE_PATH_HEADER, path_of_header, scope_file, scope_is_sensitive
from memoryd.models import SCOPE_HASH_RE
from memoryd.team_member.member import (
    CONTEXT_ROUTE,
    Membership,
    TeamLink,
    TeamUnreachable,
    key_of_path,
    message,
)
from memoryd.team_member.outbox import OUTBOX_DIR, Outbox
from memoryd.team_member.share import Shared, not_shared, plan, send

if TYPE_CHECKING:
    from memoryd.protocol import MemoryAPI

T = TypeVar("T")
Read = Callable[[Callable[["MemoryAPI"], T]], Awaitable[T]]
"""Run a read of the daemon's own stores (under its runner's gate)."""

logger = logging.getLogger(__name__)

SEEN_DIR = "team-seen"
SEEN_MOST = 500
"""Team hits kept per project for recall while the server is away (the newest seen)."""
WORD = re.compile(r"\w{3,}")


class Seen:
    """The team hits this developer last saw, per project (`<home>/team-seen/`, 0600): what
    recall answers from, and says so, while the team server is away."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()

    def _file(self, key: str) -> Path:
        return self.directory / (hashlib.sha256(key.encode("utf-8")).hexdigest()[:16] + ".json")

    def _read(self, key: str) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self._file(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def keep(self, key: str, hits: list[dict[str, Any]]) -> None:
        if not hits:
            return
        with self._lock:
            kept = self._read(key)
            for hit in hits:
                kept.pop(hit["slug"], None)
                kept[hit["slug"]] = hit  # the newest seen last
            rows = dict(list(kept.items())[-SEEN_MOST:])
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = self._file(key)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(rows, out)
            tmp.replace(path)

    def recall(self, key: str, query: str, limit: int) -> list[dict[str, Any]]:
        """The kept hits that share words with `query`: the score the team gave each, times
        the share of the query's words its title and snippet hold."""
        words = {w.casefold() for w in WORD.findall(query)}
        found = []
        for hit in self._read(key).values():
            text = {w.casefold() for w in WORD.findall(f"{hit['title']} {hit.get('snippet', '')}")}
            share = len(words & text) / len(words) if words else 0.0
            if share > 0:
                found.append({**hit, "source": "team-cache", "score": hit["score"] * share})
        return sorted(found, key=lambda hit: -float(hit["score"]))[:limit]


ROUTES = {
    ("POST", "/v1/memories"),
    ("GET", "/v1/recall"),
    ("POST", "/v1/recall"),
    ("POST", CONTEXT_ROUTE),
}
PROMOTE = re.compile(r"^/v1/promotions/\d+/promote$")
"""The Review queue's approval: with `"team": true`, the promoted memory is shared too."""
QUEUE = re.compile(r"^/v1/promotions(/\d+)?$")
"""The Review queue's reads: each promotion says the team project its scope is shared as."""
SCOPE_PATH = SCOPE_PATH_HEADER.lower().encode("ascii")
ONE_MEMORY = re.compile(r"^/v1/memories/[^/]+$")
"""A get: a slug this daemon does not hold is asked of the team (a team hit's)."""


def _key_or_none(path: str) -> str | None:
    try:
        return key_of_path(path)
    except InvalidInput:
        return None


def _query(scope: Scope) -> list[tuple[str, str]]:
    return parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)


class Forwarder:
    """ASGI middleware of a developer's daemon in a team: see the module docstring."""

    def __init__(self, app: Any, link: TeamLink, read: Read[Any] | None = None) -> None:
        self.app = app
        self.link = link
        self.read = read
        self.home = link.member.home
        self.outbox = Outbox(link, self.home / OUTBOX_DIR)
        self.seen = Seen(self.home / SEEN_DIR)

    async def run(self) -> None:
        """The daemon's chore: send what waits in the outbox whenever the server is back."""
        await self.outbox.drain_forever()

    async def close(self) -> None:
        await self.link.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        http, method, path = scope["type"] == "http", scope.get("method"), scope.get("path", "")
        promoting = http and method == "POST" and PROMOTE.match(path) is not None
        getting = http and method == "GET" and ONE_MEMORY.match(path) is not None
        queue = http and method == "GET" and QUEUE.match(path) is not None
        if not (promoting or getting or queue or (http and (method, path) in ROUTES)):
            await self.app(scope, receive, send)
            return
        try:
            if promoting:
                status, headers, answer = await self._promote(scope, receive)
            elif getting:
                status, headers, answer = await self._get(scope, path.rsplit("/", 1)[1])
            elif queue:
                status, headers, answer = await self._queue(scope)
            else:
                status, headers, answer = await self._handle(scope, receive)
        except MemorydError as exc:
            from memoryd.api.errors import error_body, status_of

            await answer_error(send, status_of(exc), error_body(exc.code, str(exc), exc.hint or ""))
            return
        await send_answer(send, status, headers, answer)

    async def _handle(self, scope: Scope, receive: Receive) -> Answer:
        method, path = scope["method"], scope["path"]
        query = _query(scope)
        body = await json_body(receive) if method == "POST" else {}
        where = body.get("scope") if method == "POST" else dict(query).get("scope")
        hint = dict(scope["headers"]).get(SCOPE_PATH)
        key = await self.shared(where if isinstance(where, str) else None, hint)
        if key is None:  # personal: the local daemon alone
            return await call(self.app, scope, replay(body) if method == "POST" else replay(None))
        if path == "/v1/memories":
            return await self.record(key, body)
        if path == CONTEXT_ROUTE:
            return await self._context(scope, key, body)
        return await self._recall(scope, key, method, query, body)

    async def shared(self, where: str | None, hint: bytes | None = None) -> str | None:
        """The team project `where` (a path or a scope hash) belongs to, if it is shared. A
        hash is known by the join's links, by the path the client sent beside it (`hint`,
        `SCOPE_PATH_HEADER`: any clone of the project, wherever it lies), or by the vault's
        `scope.json`."""
        if not where:
            return None
        if SCOPE_HASH_RE.match(where):
            if await asyncio.to_thread(scope_is_sensitive, self.home, where):
                return None
            key = self.link.member.links.get(where)
            if key is None:
                path = path_of_header(hint, where) if hint else None
                path = path or await asyncio.to_thread(self._vault_path, where)
                key = None if path is None else await asyncio.to_thread(_key_or_none, path)
        elif os.path.isabs(where):
            key = await asyncio.to_thread(_key_or_none, where)
        else:
            return None
        if key is None or key not in await self.link.roles():
            return None
        return key

    def _vault_path(self, scope_hash: str) -> str | None:
        try:
            data = json.loads(scope_file(self.home, scope_hash).read_text(encoding="utf-8"))
            return str(data["path"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    async def record(self, key: str, body: dict[str, Any]) -> Answer:
        body = {**body, "scope": key}
        answer: Answer = await self.outbox.send(body, uuid.uuid4().hex)
        return answer

    async def team_hits(self, key: str, q: str, limit: int) -> tuple[list[dict[str, Any]], str]:
        """The team's hits for `q` in `key` (a note says why there are none)."""
        try:
            answer = await self.link.request(
                "POST", "/v1/recall", body={"q": q, "scope": key, "limit": limit, "track": True}
            )
        except TeamUnreachable:
            cached = await asyncio.to_thread(self.seen.recall, key, q, limit)
            return cached, (
                f"team server {self.link.member.url} unreachable: team hits come from the local"
                f" copy of what you last saw there ({len(cached)} match)"
            )
        if answer.status_code != 200:
            return [], f"team: {message(answer.content)}"
        hits = [{**hit, "source": "team"} for hit in answer.json()["hits"]]
        await asyncio.to_thread(self.seen.keep, key, hits)
        return hits, f"team: {key} on {self.link.member.url}"

    async def _recall(
        self,
        scope: Scope,
        key: str,
        method: str,
        query: list[tuple[str, str]],
        body: dict[str, Any],
    ) -> Answer:
        ask = body if method == "POST" else dict(query)
        status, headers, answer = await call(
            self.app, scope, replay(body) if method == "POST" else replay(None)
        )
        if status != 200:  # the app checked the fields: past here they are valid
            return status, headers, answer
        limit, offset = int(ask.get("limit", 10)), int(ask.get("offset", 0))
        data = json.loads(answer)
        team, note = await self.team_hits(key, str(ask.get("q", "")), limit + offset)
        data["hits"] = merge(data["hits"], team, limit)
        data["notes"] = [*data.get("notes", []), note]
        return 200, JSON, json.dumps(data).encode("utf-8")

    async def _context(self, scope: Scope, key: str, body: dict[str, Any]) -> Answer:
        """Inject: the personal items, and for a prompt the team's current hits, by score."""
        status, headers, answer = await call(self.app, scope, replay(body))
        prompt = body.get("prompt")
        if status != 200 or not isinstance(prompt, str) or not prompt.strip():
            return status, headers, answer
        limit = int(body.get("limit", body.get("k", 8)))
        items = json.loads(answer)["items"]
        local = {"q": prompt, "scope": body.get("scope"), "limit": 50, "track": False}
        recall_scope = {**scope, "path": "/v1/recall", "raw_path": b"/v1/recall"}
        _, _, scored = await call(self.app, recall_scope, replay(local))
        scores = {h["slug"]: float(h["score"]) for h in json.loads(scored).get("hits", [])}
        team, _ = await self.team_hits(key, prompt, limit)
        ranked = [(scores.get(item["slug"], 0.0), {**item, "source": "personal"}) for item in items]
        for hit in team:
            if hit.get("superseded_by"):
                continue
            author = hit.get("recorded_by") or "a teammate"
            text = f"(team, recorded by {author}) {hit.get('snippet') or ''}".strip()
            item = {
                "slug": hit["slug"],
                "type": hit["type"],
                "title": hit["title"],
                "body": text,
                "created_at": hit["created_at"],
                "source": "team",
                "recorded_by": hit.get("recorded_by"),
            }
            ranked.append((float(hit["score"]), item))
        ranked.sort(key=lambda pair: -pair[0])
        merged = [item for _, item in ranked[:limit]]
        return 200, JSON, json.dumps({"items": merged}).encode("utf-8")

    async def _get(self, scope: Scope, slug: str) -> Answer:
        status, headers, answer = await call(self.app, scope, replay(None))
        if status != 404 or (found := await self.team_memory(slug)) is None:
            return status, headers, answer
        return 200, JSON, json.dumps(found).encode("utf-8")

    async def team_memory(self, slug: str) -> dict[str, Any] | None:
        """The team's memory `slug`, marked `source: team` (None: none the user may read, or
        the server is away)."""
        try:
            answer = await self.link.request("GET", f"/v1/memories/{quote(slug, safe='')}")
        except TeamUnreachable:
            return None
        if answer.status_code != 200:
            return None
        found: dict[str, Any] = answer.json()
        return {**found, "source": "team"}

    async def _queue(self, scope: Scope) -> Answer:
        """A promotion, or a page of them, each with `team_project`: the team project its
        scope is shared as (the Review page offers "to the team" for those)."""
        status, headers, answer = await call(self.app, scope, replay(None))
        if status != 200:
            return status, headers, answer
        data = json.loads(answer)
        rows = data.get("items", [data])
        keys: dict[str, str | None] = {}
        for row in rows:
            where = str(row["scope_hash"])
            if where not in keys:
                keys[where] = await self.shared(where)
            row["team_project"] = keys[where]
        return 200, JSON, json.dumps(data).encode("utf-8")

    async def _promote(self, scope: Scope, receive: Receive) -> Answer:
        """The Review queue's approval: the app promotes (the memory is personal); with
        `"team": true` it is then shared with its supersedes chain, as `memoryd share` does,
        and the answer names its team copy (`team_slug`)."""
        body = await json_body(receive)
        to_team = body.pop("team", False) is True
        status, headers, answer = await call(self.app, scope, replay(body))
        if status != 200 or not to_team:
            return status, headers, answer
        data = json.loads(answer)
        try:
            report = await self.share([str(data["promoted_slug"])])
        except MemorydError as exc:
            raise not_shared(str(data["promoted_slug"]), exc) from exc
        data["team_slug"] = next(
            team for slug, _, _, team in report.rows if slug == data["promoted_slug"]
        )
        return 200, JSON, json.dumps(data).encode("utf-8")

    async def share(self, slugs: list[str]) -> Shared:
        """`memoryd share SLUG...` from inside the daemon: planned on its own stores, sent
        with their supersedes chain."""
        if self.read is None:
            raise InvalidInput("this daemon cannot read its stores for a share")
        member = self.link.member
        planned = await self.read(lambda svc: plan(svc, member, slugs, None))
        return await asyncio.to_thread(send, member, planned)


def merge(
    mine: list[dict[str, Any]], team: list[dict[str, Any]], limit: int
) -> list[dict[str, Any]]:
    """The personal and the team hits in one list by calibrated score, each saying where it
    came from (`source`) and who recorded a team one."""
    personal = [{**hit, "source": "personal", "recorded_by": None} for hit in mine]
    return sorted(personal + team, key=lambda hit: -float(hit["score"]))[:limit]


class TeamTools:
    """The developer daemon's own MCP tools (`/mcp`) in a shared project: recall merges the
    team's hits and remember records in the team, through the same Forwarder as the HTTP
    routes. Called from the tools' worker threads (anyio's), each step run on the loop."""

    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder

    def project(self, scope: str | None) -> str | None:
        return anyio.from_thread.run(self.forwarder.shared, scope)

    def recall(
        self, project: str, query: str, k: int, mine: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], str]:
        team, note = anyio.from_thread.run(self.forwarder.team_hits, project, query, k)
        return merge(mine, team, k), note

    def get(self, slug: str) -> dict[str, Any] | None:
        return anyio.from_thread.run(self.forwarder.team_memory, slug)

    def record(self, project: str, memory: dict[str, Any]) -> dict[str, Any]:
        status, _, answer = anyio.from_thread.run(self.forwarder.record, project, memory)
        data: dict[str, Any] = json.loads(answer)
        if status >= 400:
            raise MemorydError(f"the team server refused it: {message(answer)}")
        return data


def forwarding(home: Path, app: Any, read: Read[Any] | None = None) -> tuple[Any, Forwarder | None]:
    """`app` behind a Forwarder when this data dir joined a team (else as it is); `read`
    runs a read of the daemon's stores (for a share from the Review queue)."""
    member = Membership.load(home)
    if member is None:
        return app, None
    logger.info("in the team at %s as %s", member.url, member.user)
    forwarder = Forwarder(app, TeamLink(member), read)
    return forwarder, forwarder
