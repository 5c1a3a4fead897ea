"""The one gate of the team server: who may do what in which project.

Pure: it decides from values the caller read (the token's row, the user's grants, the clock),
so every case is unit-tested without a server. A project (its remote's key) is the unit of
permission; a user has read, write or admin in it, each role including the ones below.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from memoryd.errors import InvalidInput, ScopeNotGranted, TokenRefused


class Role(enum.IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str) -> Role:
        try:
            return cls[name.upper()]
        except KeyError:
            raise InvalidInput(
                f"role {name!r} is not one of read, write, admin",
                hint="pass --role read|write|admin",
            ) from None


class Operation(enum.Enum):
    """What a request does, and the least role it needs."""

    READ = Role.READ  # recall, search, list, get
    WRITE = Role.WRITE  # record
    ADMIN = Role.ADMIN  # grants within the project

    @property
    def needs(self) -> Role:
        return Role(self.value)


@dataclass(frozen=True)
class Token:
    """A token's row as the store holds it (never the token itself)."""

    token_id: str
    user: str
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class Caller:
    """A request's user, once the gate let its token in, with the user's roles."""

    user: str
    token_id: str
    roles: Mapping[str, Role] = field(default_factory=dict)

    def readable(self) -> list[str]:
        return sorted(key for key, role in self.roles.items() if role >= Role.READ)


def authenticate(token: Token | None, roles: Mapping[str, Role], now: datetime) -> Caller:
    """The caller behind `token` (None: no token matched), or TokenRefused."""
    hint = "ask a team admin for a new token (`memoryd team user add` / `team token add`)"
    if token is None:
        raise TokenRefused("the token is unknown to this team server", hint=hint)
    if token.revoked_at is not None and token.revoked_at <= now:
        raise TokenRefused(
            f"token {token.token_id} was revoked at {token.revoked_at.isoformat()}", hint=hint
        )
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenRefused(
            f"token {token.token_id} expired at {token.expires_at.isoformat()}", hint=hint
        )
    return Caller(user=token.user, token_id=token.token_id, roles=dict(roles))


def authorize(caller: Caller, project: str, operation: Operation) -> Role:
    """The caller's role in `project` when it allows `operation`, else ScopeNotGranted."""
    role = caller.roles.get(project)
    if role is None:
        raise ScopeNotGranted(
            f"user {caller.user!r} has no access to project {project!r}",
            hint=f"a team admin runs `memoryd team grant {caller.user} {project} --role read`",
        )
    if role < operation.needs:
        raise ScopeNotGranted(
            f"user {caller.user!r} may only {role.name.lower()} in project {project!r};"
            f" {operation.name.lower()} needs {operation.needs.name.lower()}",
            hint=f"a team admin runs `memoryd team grant {caller.user} {project}"
            f" --role {operation.needs.name.lower()}`",
        )
    return role


def gate(
    token: Token | None,
    roles: Mapping[str, Role],
    project: str,
    operation: Operation,
    now: datetime,
) -> Caller:
    """Every team read and write in one call: the token, then the role in the project."""
    caller = authenticate(token, roles, now)
    authorize(caller, project, operation)
    return caller
