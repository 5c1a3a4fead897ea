"""The team server's users, tokens, grants and who recorded what, in one SQLite file (0600).

A token is `mdt_<id>_<secret>` with 256 random bits; the store keeps only
HMAC-SHA256(server key, token). A slow hash (bcrypt, scrypt) protects low-entropy passwords
from guessing; a 256-bit random token cannot be guessed, so one keyed hash is enough, and the
key (`team.key`, 0600, outside the database) means a copy of the database alone cannot even
test a candidate token. Lookup is by the digest, so no comparison of secrets runs in Python.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memoryd.errors import Conflict, InvalidInput, NotFound, StorageError
from memoryd.team.policy import Role, Token

USER_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,26}$")
"""Fits the audit's actor pattern once prefixed with `team:`."""
TOKEN = re.compile(r"^mdt_(?P<id>[0-9a-f]{12})_[A-Za-z0-9_-]{43}$")
SCHEMA = """
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY, user TEXT NOT NULL REFERENCES users(name), digest TEXT UNIQUE NOT NULL,
    created_at TEXT NOT NULL, expires_at TEXT, revoked_at TEXT);
CREATE TABLE IF NOT EXISTS grants (
    user TEXT NOT NULL REFERENCES users(name), project TEXT NOT NULL, role INTEGER NOT NULL,
    granted_at TEXT NOT NULL, PRIMARY KEY (user, project));
CREATE TABLE IF NOT EXISTS admins (user TEXT PRIMARY KEY REFERENCES users(name));
CREATE TABLE IF NOT EXISTS landed (
    request_id TEXT PRIMARY KEY, slug TEXT NOT NULL, user TEXT NOT NULL, landed_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS authors (
    slug TEXT PRIMARY KEY, user TEXT NOT NULL, project TEXT NOT NULL, recorded_at TEXT NOT NULL);
"""


@dataclass(frozen=True)
class TokenRow:
    token_id: str
    user: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True)
class Author:
    user: str
    project: str


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def check_user_name(name: str) -> str:
    if not USER_NAME.match(name):
        raise InvalidInput(
            f"user name {name!r} is not 1-27 characters of a-z, 0-9, '_', '.', '-' starting"
            " with a letter",
            hint="pick a short lower-case name, e.g. alice",
        )
    return name


class TeamStore:
    """Open per call site; each method is one short transaction (the server reads on every
    request, the CLI writes), so the CLI may change grants while the server runs."""

    def __init__(self, path: Path, key_path: Path) -> None:
        self.path = path
        self._key = self._load_key(key_path)
        with self._db() as db:
            db.executescript(SCHEMA)
        os.chmod(path, 0o600)

    @staticmethod
    def _load_key(key_path: Path) -> bytes:
        try:
            key = key_path.read_bytes()
        except OSError as exc:
            raise StorageError(
                f"cannot read the team key {key_path}: {exc.strerror}",
                hint="run `memoryd team init` in this data dir",
            ) from exc
        if len(key) < 32:
            raise StorageError(
                f"the team key {key_path} is too short", hint="run `memoryd team init`"
            )
        return key

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=10)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the team database {self.path}: {exc}") from exc
        try:
            db.execute("PRAGMA foreign_keys = ON")
            with db:
                yield db
        except sqlite3.Error as exc:
            raise StorageError(f"team database {self.path}: {exc}") from exc
        finally:
            db.close()

    def digest(self, token: str) -> str:
        return hmac.new(self._key, token.encode("utf-8"), hashlib.sha256).hexdigest()

    # users and tokens

    def add_user(self, name: str, now: datetime, expires_at: datetime | None = None) -> str:
        """Add the user and return their first token (shown once; only its digest is kept)."""
        check_user_name(name)
        with self._db() as db:
            if db.execute("SELECT 1 FROM users WHERE name = ?", (name,)).fetchone():
                raise Conflict(
                    f"user {name!r} exists",
                    hint=f"give them another token with `memoryd team token add {name}`",
                )
            db.execute("INSERT INTO users VALUES (?, ?)", (name, now.isoformat()))
        return self.add_token(name, now, expires_at)

    def add_token(self, user: str, now: datetime, expires_at: datetime | None = None) -> str:
        token_id = secrets.token_hex(6)
        token = f"mdt_{token_id}_{secrets.token_urlsafe(32)}"
        with self._db() as db:
            self._need_user(db, user)
            db.execute(
                "INSERT INTO tokens VALUES (?, ?, ?, ?, ?, NULL)",
                (
                    token_id,
                    user,
                    self.digest(token),
                    now.isoformat(),
                    None if expires_at is None else expires_at.isoformat(),
                ),
            )
        return token

    @staticmethod
    def _need_user(db: sqlite3.Connection, user: str) -> None:
        if not db.execute("SELECT 1 FROM users WHERE name = ?", (user,)).fetchone():
            raise NotFound(f"no team user {user!r}", hint="see `memoryd team user list`")

    def users(self) -> list[tuple[str, list[TokenRow], dict[str, Role]]]:
        with self._db() as db:
            names = [r[0] for r in db.execute("SELECT name FROM users ORDER BY name")]
        return [(n, self.tokens(n), self.roles(n)) for n in names]

    def tokens(self, user: str) -> list[TokenRow]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, user, created_at, expires_at, revoked_at FROM tokens"
                " WHERE user = ? ORDER BY created_at, id",
                (user,),
            ).fetchall()
        return [
            TokenRow(r[0], r[1], datetime.fromisoformat(r[2]), _time(r[3]), _time(r[4]))
            for r in rows
        ]

    def revoke_token(self, token_id: str, now: datetime) -> TokenRow:
        """Revoke by the token's id (`team user list` shows it) or by the token itself."""
        found = TOKEN.match(token_id)
        where, value = ("digest", self.digest(token_id)) if found else ("id", token_id)
        with self._db() as db:
            row = db.execute(f"SELECT id FROM tokens WHERE {where} = ?", (value,)).fetchone()
            if row is None:
                raise NotFound(f"no token {token_id!r}", hint="see `memoryd team user list`")
            db.execute(
                "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (now.isoformat(), row[0]),
            )
        return next(t for u in self.users() for t in u[1] if t.token_id == row[0])

    def expire_token(self, token_id: str, at: datetime) -> TokenRow:
        """Set when a token stops working (`at` may be now: it is refused from then on)."""
        with self._db() as db:
            gone = db.execute(
                "UPDATE tokens SET expires_at = ? WHERE id = ?", (at.isoformat(), token_id)
            ).rowcount
        if not gone:
            raise NotFound(f"no token {token_id!r}", hint="see `memoryd team user list`")
        return next(t for u in self.users() for t in u[1] if t.token_id == token_id)

    def lookup(self, token: str) -> Token | None:
        """The token's row (the gate decides whether it still holds), None if unknown."""
        if not TOKEN.match(token):
            return None
        with self._db() as db:
            row = db.execute(
                "SELECT id, user, expires_at, revoked_at FROM tokens WHERE digest = ?",
                (self.digest(token),),
            ).fetchone()
        return None if row is None else Token(row[0], row[1], _time(row[2]), _time(row[3]))

    # grants

    def grant(self, user: str, project: str, role: Role, now: datetime) -> None:
        with self._db() as db:
            self._need_user(db, user)
            db.execute(
                "INSERT INTO grants VALUES (?, ?, ?, ?) ON CONFLICT (user, project)"
                " DO UPDATE SET role = excluded.role, granted_at = excluded.granted_at",
                (user, project, int(role), now.isoformat()),
            )

    def revoke(self, user: str, project: str) -> bool:
        with self._db() as db:
            self._need_user(db, user)
            gone = db.execute(
                "DELETE FROM grants WHERE user = ? AND project = ?", (user, project)
            ).rowcount
        return gone > 0

    def roles(self, user: str) -> dict[str, Role]:
        with self._db() as db:
            rows = db.execute("SELECT project, role FROM grants WHERE user = ?", (user,))
            return {project: Role(role) for project, role in rows}

    # team admins: may add users, expire and revoke tokens, and grant in every project

    def set_admin(self, user: str, admin: bool) -> None:
        with self._db() as db:
            self._need_user(db, user)
            if admin:
                db.execute("INSERT OR IGNORE INTO admins VALUES (?)", (user,))
            else:
                db.execute("DELETE FROM admins WHERE user = ?", (user,))

    def is_admin(self, user: str) -> bool:
        with self._db() as db:
            return db.execute("SELECT 1 FROM admins WHERE user = ?", (user,)).fetchone() is not None

    # writes sent again (a developer's queue): each lands once

    def landed(self, request_id: str) -> str | None:
        """The slug a write with this request id made, if one did."""
        with self._db() as db:
            row = db.execute("SELECT slug FROM landed WHERE request_id = ?", (request_id,))
            found = row.fetchone()
        return None if found is None else str(found[0])

    def note_landed(self, request_id: str, slug: str, user: str, now: datetime) -> None:
        with self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO landed VALUES (?, ?, ?, ?)",
                (request_id, slug, user, now.isoformat()),
            )

    # who recorded what

    def note_author(self, slug: str, user: str, project: str, now: datetime) -> None:
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO authors VALUES (?, ?, ?, ?)",
                (slug, user, project, now.isoformat()),
            )

    def authors(self, slugs: list[str]) -> dict[str, Author]:
        if not slugs:
            return {}
        marks = ",".join("?" * len(slugs))
        with self._db() as db:
            rows = db.execute(
                f"SELECT slug, user, project FROM authors WHERE slug IN ({marks})",
                slugs,
            ).fetchall()
        return {r[0]: Author(r[1], r[2]) for r in rows}


def utcnow() -> datetime:
    return datetime.now(UTC)
