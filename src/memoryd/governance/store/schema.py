"""governance.db's schema: the numbered migrations shipped as package data, applied on open
each in one transaction, and the SQLite errors told apart (damaged file, full disk, other).
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memoryd.errors import ResourceExhausted, StorageError

logger = logging.getLogger(__name__)


LATEST_VERSION = 10
"""The schema version this code creates and understands: the number of the last migration."""


_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


# SQLite result codes that mean "this file is damaged", not "cannot get at it".
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_SQLITE_FULL = 13


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered schema step: `NNN_name.sql`, applied once, in order."""

    version: int
    name: str
    sql: str


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """The shipped migrations, in order; they must be numbered 001 … LATEST_VERSION."""
    folder = importlib.resources.files("memoryd.governance") / "migrations"
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, LATEST_VERSION + 1)):
        raise StorageError(
            f"memoryd's governance migrations are incomplete: found {[m.name for m in found]}, "
            f"expected 001 … {LATEST_VERSION:03d}",
            hint="reinstall memoryd",
        )
    return tuple(found)


def split_statements(sql: str) -> list[str]:
    """Split a migration into statements, the way the sqlite3 shell does (triggers included).

    `executescript` would commit the open transaction first; running statements one by one
    keeps a whole migration in one transaction.
    """
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    leftover = "\n".join(
        line for line in pending.splitlines() if line.strip() and not line.strip().startswith("--")
    )
    if leftover:
        raise StorageError(f"migration SQL ends with an incomplete statement: {leftover[:80]!r}")
    return statements


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def _is_corruption(exc: sqlite3.Error) -> bool:
    return _primary_code(exc) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _storage_error(path: Path, doing: str, exc: sqlite3.Error) -> StorageError:
    """Name the file and say whether it is damaged (move it away) or just unreachable."""
    if _is_corruption(exc):
        return StorageError(
            f"{path} is corrupt or not a SQLite database ({exc})",
            hint="restore it from a backup, or move it away: memoryd then creates an empty one "
            "(the promotions queue, trigger statistics and profile history in it are lost)",
        )
    if _primary_code(exc) == _SQLITE_FULL:
        return ResourceExhausted(
            f"cannot {doing} {path}: the disk is full ({exc})", hint="free disk space, then retry"
        )
    return StorageError(f"cannot {doing} {path}: {exc}")


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _migrate(conn: sqlite3.Connection, path: Path, steps: Sequence[Migration]) -> None:
    """Apply the missing migrations, each in one IMMEDIATE transaction with its version bump.

    The version is re-read inside the transaction, so two processes opening an old database at
    the same moment do not both apply a step.
    """
    latest = steps[-1].version if steps else 0
    current = _user_version(conn)
    if current > latest:
        raise StorageError(
            f"{path} is at schema {current} but this memoryd knows {latest}: upgrade memoryd",
            hint="a newer memoryd wrote this database; install that version (or newer)",
        )
    for step in steps:
        if step.version <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = _user_version(conn)
            if current >= step.version:
                conn.execute("ROLLBACK")
                continue
            for statement in split_statements(step.sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {step.version:d}")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) and not _is_corruption(exc):
                raise StorageError(
                    f"{path}: migration {step.name} failed ({exc}); the database stays at "
                    f"schema {current}",
                    hint="report this as a memoryd bug, with the message above",
                ) from exc
            raise
        current = step.version
        logger.info("%s: applied migration %s", path, step.name)
