"""The connection every part of `GovernanceStore` shares: one connection behind one lock, a
transaction helper, and the text form of the instants and days stored.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path

from memoryd.errors import InvalidInput, StorageError
from memoryd.governance.store.schema import _storage_error
from memoryd.models import to_utc


def _instant(value: datetime) -> str:
    """A fixed-width UTC timestamp, so the text order of the column is the time order."""
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_instant(text: str) -> datetime:
    return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


def _day(value: date) -> str:
    if isinstance(value, datetime):
        return to_utc(value).date().isoformat()
    if not isinstance(value, date):
        raise InvalidInput(f"expected a date, got {value!r}")
    return value.isoformat()


class StoreBase:
    """governance.db behind a lock: the state `GovernanceStore` and its parts share."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        """Use `GovernanceStore.open`; this only wraps an already migrated connection."""
        self.path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()

    @contextmanager
    def _connection(self, doing: str) -> Iterator[sqlite3.Connection]:
        """The connection under the lock, with sqlite3 errors turned into StorageError."""
        with self._lock:
            if self._conn is None:
                raise StorageError(f"{self.path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise _storage_error(self.path, doing, exc) from exc

    @contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._connection(doing) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                # SQLite has already rolled back after some errors (a full disk, for one).
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
