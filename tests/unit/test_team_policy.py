"""The team gate (`memoryd.team.policy`) and project keys (`memoryd.team.keys`): every role
against every operation, and each way a token or a grant can fail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryd.errors import (
    InvalidInput,
    MemorydError,
    PolicyDenied,
    ScopeNotGranted,
    TeamDenied,
    TokenRefused,
)
from memoryd.team.keys import project_key
from memoryd.team.policy import (
    Caller,
    Operation,
    Role,
    Token,
    authenticate,
    authorize,
    gate,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
P = "github.com/acme/shop"
Q = "github.com/acme/other"
ALLOWED = {
    (Role.READ, Operation.READ): True,
    (Role.READ, Operation.WRITE): False,
    (Role.READ, Operation.ADMIN): False,
    (Role.WRITE, Operation.READ): True,
    (Role.WRITE, Operation.WRITE): True,
    (Role.WRITE, Operation.ADMIN): False,
    (Role.ADMIN, Operation.READ): True,
    (Role.ADMIN, Operation.WRITE): True,
    (Role.ADMIN, Operation.ADMIN): True,
}


def token(**kw: datetime | None) -> Token:
    return Token(token_id="0123456789ab", user="alice", **kw)


@pytest.mark.parametrize(("role", "operation"), list(ALLOWED))
def test_every_role_against_every_operation(role: Role, operation: Operation) -> None:
    if ALLOWED[role, operation]:
        caller = gate(token(), {P: role}, P, operation, NOW)
        assert caller.user == "alice"
        assert authorize(caller, P, operation) is role
    else:
        with pytest.raises(ScopeNotGranted, match=f"may only {role.name.lower()}") as info:
            gate(token(), {P: role}, P, operation, NOW)
        assert f"--role {operation.needs.name.lower()}" in (info.value.hint or "")


@pytest.mark.parametrize("operation", list(Operation))
def test_a_role_in_another_project_grants_nothing_here(operation: Operation) -> None:
    with pytest.raises(ScopeNotGranted, match=r"no access to project 'github\.com/acme/shop'"):
        gate(token(), {Q: Role.ADMIN}, P, operation, NOW)


def test_an_unknown_token_is_refused() -> None:
    with pytest.raises(TokenRefused, match="unknown"):
        gate(None, {}, P, Operation.READ, NOW)


def test_a_revoked_token_is_refused_from_the_moment_of_revocation() -> None:
    revoked = token(revoked_at=NOW)
    with pytest.raises(TokenRefused, match="revoked"):
        gate(revoked, {P: Role.ADMIN}, P, Operation.READ, NOW)
    assert authenticate(revoked, {}, NOW - timedelta(seconds=1)).user == "alice"


def test_an_expired_token_is_refused_and_one_not_yet_expired_is_not() -> None:
    expiring = token(expires_at=NOW + timedelta(hours=1))
    assert gate(expiring, {P: Role.READ}, P, Operation.READ, NOW).user == "alice"
    with pytest.raises(TokenRefused, match="expired"):
        gate(expiring, {P: Role.READ}, P, Operation.READ, NOW + timedelta(hours=1))


def test_the_errors_are_typed_under_policy_denied() -> None:
    assert issubclass(TokenRefused, TeamDenied)
    assert issubclass(ScopeNotGranted, TeamDenied)
    assert issubclass(TeamDenied, PolicyDenied)
    assert issubclass(PolicyDenied, MemorydError)
    assert {TokenRefused.code, ScopeNotGranted.code} == {"token_refused", "scope_not_granted"}


def test_readable_lists_every_granted_project() -> None:
    caller = Caller("alice", "x", {P: Role.READ, Q: Role.WRITE})
    assert caller.readable() == [Q, P]


def test_role_names_parse_and_others_are_refused() -> None:
    assert Role.parse("Write") is Role.WRITE
    with pytest.raises(InvalidInput, match="'owner' is not one of read, write, admin"):
        Role.parse("owner")


@pytest.mark.parametrize(
    "remote",
    [
        "https://github.com/acme/Shop.git",
        "https://github.com/acme/Shop",
        "https://GitHub.COM/acme/Shop/",
        "https://user:secret@github.com/acme/Shop.git",
        "http://github.com:443/acme/Shop.git",
        "ssh://git@github.com/acme/Shop.git",
        "ssh://git@github.com:22/acme/Shop",
        "git@github.com:acme/Shop.git",
        "git@GITHUB.com:acme/Shop",
        "github.com:acme/Shop.git",
        "github.com/acme/Shop",
        "  git@github.com:acme/Shop.git/  ",
    ],
)
def test_every_form_of_one_remote_gives_one_key(remote: str) -> None:
    assert project_key(remote) == "github.com/acme/Shop"


def test_different_repositories_give_different_keys() -> None:
    keys = {
        project_key(r)
        for r in (
            "git@github.com:acme/shop.git",
            "git@gitlab.com:acme/shop.git",
            "git@github.com:acme/shop-api.git",
            "git@github.com:other/shop.git",
            "https://gitlab.example.com/group/sub/shop.git",
        )
    }
    assert len(keys) == 5


@pytest.mark.parametrize(
    ("remote", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("github.com", "no host and path"),
        ("https://github.com/", "no host and path"),
        ("https://github.com/acme/../etc", "'..'"),
        ("https://github.com/.git/shop", "'.git'"),
        ("https://github.com/acme/sh op", "'sh op'"),
        ("/home/me/src/shop", "no host and path"),
    ],
)
def test_what_is_not_a_remote_is_refused_by_name(remote: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        project_key(remote)
