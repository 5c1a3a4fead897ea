"""The team database (`memoryd.team.store`) and `team init` (`memoryd.team.config`): tokens
stored only as keyed digests, revocation and expiry, grants, file modes, the TLS pair."""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.errors import ConfigError, Conflict, InvalidInput, NotFound, TokenRefused
from memoryd.team.config import init_team, load_team, open_store
from memoryd.team.policy import Operation, Role, gate
from memoryd.team.store import TeamStore

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
P = "github.com/acme/shop"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    init_team(tmp_path / "team", NOW, host="127.0.0.1", port=0, falkordb_url="unix:///x.sock")
    return tmp_path / "team"


@pytest.fixture
def store(home: Path) -> TeamStore:
    return open_store(load_team(home))


def test_init_writes_a_private_team_dir_with_a_usable_tls_pair(home: Path) -> None:
    config = load_team(home)
    assert config.graph_settings() == {
        "engine": "falkordb",
        "url": "unix:///x.sock",
        "name": "team",
    }
    for secret in (config.key, config.secret, config.database):
        assert secret.stat().st_mode & 0o077 == 0, secret
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.cert, config.key)  # the key matches the certificate
    with pytest.raises(ConfigError, match="already a team data dir"):
        init_team(home, NOW, host="127.0.0.1", port=0, falkordb_url=None)


def test_init_refuses_a_data_dir_in_use(tmp_path: Path) -> None:
    (tmp_path / "vault").mkdir()
    with pytest.raises(ConfigError, match="not empty"):
        init_team(tmp_path, NOW, host="127.0.0.1", port=0, falkordb_url=None)


def test_only_a_keyed_digest_of_the_token_is_stored(store: TeamStore) -> None:
    token = store.add_user("alice", NOW)
    raw = store.path.read_bytes()
    assert token.encode() not in raw
    assert token.split("_", 2)[2].encode() not in raw  # the secret (it may hold "_")
    assert store.digest(token).encode() in raw
    found = store.lookup(token)
    assert found is not None
    assert found.user == "alice"
    assert store.lookup(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert store.lookup("not a token") is None


def test_a_copy_of_the_database_with_another_key_matches_no_token(
    home: Path, tmp_path: Path
) -> None:
    token = open_store(load_team(home)).add_user("alice", NOW)
    other_key = tmp_path / "other.key"
    other_key.write_bytes(b"k" * 32)
    assert TeamStore(load_team(home).database, other_key).lookup(token) is None


def test_revoke_by_id_or_token_and_the_gate_refuses_it(store: TeamStore) -> None:
    first = store.add_user("alice", NOW)
    second = store.add_token("alice", NOW)
    store.grant("alice", P, Role.WRITE, NOW)
    first_id = first.split("_")[1]  # the id `team user list` shows
    assert {t.token_id for t in store.tokens("alice")} == {first_id, second.split("_")[1]}
    assert store.revoke_token(first_id, NOW).revoked_at == NOW
    store.revoke_token(second, NOW + timedelta(seconds=1))
    for token in (first, second):
        with pytest.raises(TokenRefused, match="revoked"):
            gate(store.lookup(token), store.roles("alice"), P, Operation.READ, NOW + timedelta(1))
    with pytest.raises(NotFound, match="no token"):
        store.revoke_token("ffffffffffff", NOW)


def test_an_expiring_token_works_until_its_time(store: TeamStore) -> None:
    token = store.add_user("bob", NOW, NOW + timedelta(days=1))
    store.grant("bob", P, Role.READ, NOW)
    row, roles = store.lookup(token), store.roles("bob")
    assert gate(row, roles, P, Operation.READ, NOW).user == "bob"
    with pytest.raises(TokenRefused, match="expired"):
        gate(row, roles, P, Operation.READ, NOW + timedelta(days=1))


def test_grants_replace_and_revoke(store: TeamStore) -> None:
    store.add_user("alice", NOW)
    store.grant("alice", P, Role.READ, NOW)
    store.grant("alice", P, Role.ADMIN, NOW)
    assert store.roles("alice") == {P: Role.ADMIN}
    assert store.revoke("alice", P) is True
    assert store.revoke("alice", P) is False
    assert store.roles("alice") == {}
    with pytest.raises(NotFound, match="no team user 'carol'"):
        store.grant("carol", P, Role.READ, NOW)


def test_user_names_are_checked_and_unique(store: TeamStore) -> None:
    store.add_user("alice", NOW)
    with pytest.raises(Conflict, match="exists"):
        store.add_user("alice", NOW)
    for bad in ("Alice", "", "1x", "a" * 28, "a b"):
        with pytest.raises(InvalidInput, match="user name"):
            store.add_user(bad, NOW)


def test_authors_are_remembered_per_slug(store: TeamStore) -> None:
    store.note_author("use-elements", "alice", P, NOW)
    found = store.authors(["use-elements", "unknown"])
    assert list(found) == ["use-elements"]
    assert (found["use-elements"].user, found["use-elements"].project) == ("alice", P)
