"""A developer's daemon in a team (`memoryd team join URL --token-file F`).

The join writes `<home>/team-member.json` (the server, the CA to trust, the user and their
project roles as the server last said) and the token, 0600, in `<home>/team-token`. From then
on `memoryd serve` puts `team.forward.Forwarder` in front of its app: a request in a shared
project (its normalised git remote is one the user has a role in, and it is not sensitive) goes
to the team server as well as, or instead of, the local stores:

- record (`POST /v1/memories`) goes to the team: the memory is the team's, recorded by this
  user; with the server away it waits in the outbox (`team_member.outbox`) and is sent, once,
  when the server is back;
- recall (`GET`/`POST /v1/recall`) asks both and merges the hits by their calibrated score,
  each saying where it came from (`source`: personal or team) and who recorded a team one;
- inject (`POST /v1/recall/context`) adds the team's current hits for the prompt to the
  personal items, in score order, each team item naming its author;
- the daemon's own MCP tools (`/mcp`) recall and remember the same way;
- a get (`GET /v1/memories/SLUG`, MCP `get_memory`) of a slug it does not hold asks the team;
- a Review-queue approval with `"team": true` promotes, then shares the memory with its chain.
- the Review queue's reads (`GET /v1/promotions[/ID]`) name each promotion's team project
  (`team_project`), for which the Review page offers "to the team".

A request that names its scope by hash says its root path beside it (`X-Memoryd-Scope-Path`),
so any clone of a shared project is found by its remote. Personal scopes, captures
(`/v1/capture`, the inbox) and sensitive scopes never leave.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memoryd.errors import ConfigError, InvalidInput, StorageError, TokenRefused
from memoryd.scope import resolve_scope, scope_hash_of_path
from memoryd.team.keys import project_key

logger = logging.getLogger(__name__)

MEMBER_FILE = "team-member.json"
TOKEN_FILE = "team-token"
ROLES_TTL_S = 60.0
"""How long the user's roles, as the server said them, are taken as they are."""
TIMEOUT_S = 10.0
CONTEXT_ROUTE = "/v1/recall/context"


@dataclass
class Membership:
    """What `team join` wrote: where the team server is and what this user may do there."""

    home: Path
    url: str
    ca: str | None
    user: str
    roles: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    """scope hash → project key, for the scopes this daemon found shared."""

    @classmethod
    def load(cls, home: Path) -> Membership | None:
        path = home / MEMBER_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read {path}: {exc}", hint="run `memoryd team join` again"
            ) from exc
        return cls(home=home, **{k: v for k, v in data.items() if k != "home"})

    def save(self) -> None:
        data = {k: v for k, v in asdict(self).items() if k != "home"}
        path = self.home / MEMBER_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2, sort_keys=True)
        tmp.replace(path)

    def token(self) -> str:
        try:
            return (self.home / TOKEN_FILE).read_text(encoding="ascii").strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the team token {self.home / TOKEN_FILE}: {exc.strerror}",
                hint="run `memoryd team join URL --token-file F` again",
            ) from exc

    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.ca) if self.ca else True

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}


def join(home: Path, url: str, token_file: Path, ca: Path | None) -> Membership:
    """Check the token with the server (`GET /v1/team/me`) and write the membership."""
    if not url.startswith("https://"):
        raise InvalidInput(
            f"{url!r} is not an https:// URL", hint="the team server speaks TLS only"
        )
    try:
        token = token_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"cannot read the token file {token_file}: {exc}",
            hint="save the token `memoryd team user add` printed to a file",
        ) from exc
    if ca is not None and not ca.is_file():
        raise InvalidInput(f"no certificate file {ca}", hint="pass the server's cert.pem")
    member = Membership(home, url.rstrip("/"), None if ca is None else str(ca.resolve()), "")
    try:
        answer = httpx.get(
            f"{member.url}/v1/team/me",
            headers={"Authorization": f"Bearer {token}"},
            verify=member.verify(),
            timeout=TIMEOUT_S,
        )
    except httpx.HTTPError as exc:
        raise StorageError(
            f"cannot reach the team server {url}: {exc}",
            hint="check the URL, and pass --ca with its certificate if it is self-signed",
        ) from exc
    if answer.status_code != 200:
        raise TokenRefused(
            f"the team server refused the token: {message(answer.content)}",
            hint="ask a team admin for a token (`memoryd team user add`)",
        )
    me = answer.json()
    member.user, member.roles = str(me["user"]), dict(me["roles"])
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(token + "\n")
    member.save()
    return member


def message(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode("utf-8", "replace")


class TeamUnreachable(StorageError):
    """The team server did not answer (down, or the network is)."""

    code = "team_unreachable"


class TeamLink:
    """The developer daemon's connection to the team server (one async client)."""

    def __init__(self, member: Membership) -> None:
        self.member = member
        self._client: httpx.AsyncClient | None = None
        self._roles_at = 0.0

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.member.url,
                headers=self.member.headers(),
                verify=self.member.verify(),
                timeout=TIMEOUT_S,
            )
        return self._client

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        try:
            return await self.client().request(
                method, path, params=params, json=body, headers=headers
            )
        except httpx.HTTPError as exc:
            raise TeamUnreachable(
                f"the team server {self.member.url} did not answer: {exc!r}",
                hint="it may be down; team writes wait in the outbox (`memoryd team status`)",
            ) from exc

    async def roles(self) -> dict[str, str]:
        """The user's project roles, asked again at most every `ROLES_TTL_S` (the last known
        ones while the server is away)."""
        if time.monotonic() - self._roles_at > ROLES_TTL_S:
            try:
                answer = await self.request("GET", "/v1/team/me")
                if answer.status_code == 200:
                    self.member.roles = dict(answer.json()["roles"])
                    await asyncio.to_thread(self.member.save)
            except TeamUnreachable:
                pass
            self._roles_at = time.monotonic()
        return self.member.roles

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def key_of_path(path: str) -> str | None:
    """The project key of a directory's git remote; None outside git, without a remote, or in
    a sensitive directory (it never leaves the machine)."""
    info = resolve_scope(path)
    if info.sensitive or not info.git_remote:
        return None
    try:
        return project_key(info.git_remote)
    except InvalidInput:
        return None


def link(member: Membership, path: Path) -> str:
    """Mark `path`'s project as shared with the team (its remote's key), for the hooks that
    name a scope by its hash; refused for a sensitive, remote-less or ungranted project."""
    info = resolve_scope(path)
    if info.sensitive:
        raise InvalidInput(
            f"{info.path} is a sensitive scope: it never leaves this machine",
            hint="share another project, or unmark this one (`memoryd sensitive unmark`)",
        )
    if not info.git_remote:
        raise InvalidInput(
            f"{info.path} has no git remote: a team project is named by its remote",
            hint="add the remote (`git remote add origin URL`) first",
        )
    key = project_key(info.git_remote)
    if key not in member.roles:
        raise InvalidInput(
            f"user {member.user!r} has no role in {key} on {member.url}",
            hint=f"a team admin runs `memoryd team grant {member.user} {key} --role write`",
        )
    member.links[scope_hash_of_path(info.path)] = key
    member.save()
    return key
