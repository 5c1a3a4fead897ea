"""governance.db: the small relational state memoryd keeps beside the vault and the graph.

SQLite (stdlib `sqlite3`) holds only promotions, trigger_stats, profile_versions and
profile_change_reports (DESIGN §3), plus the enrichment queue of captured sessions, the
supersede judge queue and the runs of scheduled maintenance jobs: work state, not memory
content, so `reindex` needs none of it. Numbered migrations, `migrations/NNN_name.sql`
shipped as package data, run on open; `PRAGMA user_version` records the last one applied,
and each one commits or rolls back as a whole, so a crash mid-upgrade
leaves the previous schema intact.

One connection and one lock for every query; the package splits the queries by table, one
module each: `schema` (migrations), `base` (the connection), `queues` (enrichment and supersede
judge), `profiles` (profile history), `promotions`. `GovernanceStore` here opens the file and
holds the rest (trigger statistics, the audit witness, job runs, forgetting a scope).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from types import TracebackType
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from memoryd.errors import InvalidInput, StorageError
from memoryd.governance.store.base import _day, _instant, _parse_instant
from memoryd.governance.store.profiles import ProfileChangeReport, ProfileHistory, ProfileVersion
from memoryd.governance.store.promotions import PromotionQueue, Proposed
from memoryd.governance.store.queues import (
    Enqueued,
    EnrichmentRow,
    EnrichmentState,
    JudgeRow,
    WorkQueues,
)
from memoryd.governance.store.schema import (
    LATEST_VERSION,
    Migration,
    _migrate,
    _storage_error,
    _user_version,
    migrations,
    split_statements,
)
from memoryd.private import FILE_MODE, make_private_dir

__all__ = [
    "GLOBAL_SCOPE",
    "LATEST_VERSION",
    "Enqueued",
    "EnrichmentRow",
    "EnrichmentState",
    "GovernanceStore",
    "JudgeRow",
    "Migration",
    "ProfileChangeReport",
    "ProfileVersion",
    "Proposed",
    "TriggerStat",
    "migrations",
    "split_statements",
]

logger = logging.getLogger(__name__)

GLOBAL_SCOPE = "_global"
"""The scope_hash trigger hits without a scope are counted under (seeds/001)."""

_BUSY_TIMEOUT_S = 10.0


class TriggerStat(BaseModel):
    """How often one trigger keyword led to a recall in one scope on one day."""

    model_config = ConfigDict(frozen=True)

    trigger: str
    scope_hash: str
    day: date
    hits: int


class GovernanceStore(WorkQueues, ProfileHistory, PromotionQueue):
    """governance.db behind a lock: one connection, shared by the threads of one process."""

    LATEST_VERSION: ClassVar[int] = LATEST_VERSION

    @classmethod
    def open(cls, path: Path) -> GovernanceStore:
        """Open (creating if needed) and migrate the database file at `path`.

        WAL lets readers run beside the writer; `synchronous=FULL` because in WAL mode NORMAL
        may lose the last commits on power loss, and a decided promotion must stay decided.
        """
        path = Path(path)
        try:
            make_private_dir(path.parent)
            # SQLite creates files 0644 and gives -wal/-shm the database's mode: create it 0600.
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))
        except OSError as exc:
            raise StorageError(f"cannot create {path}: {exc.strerror or exc}") from exc
        try:
            conn = sqlite3.connect(
                path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise _storage_error(path, "open", exc) from exc
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                logger.warning("%s: WAL mode unavailable, using %s journaling", path, mode)
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            _migrate(conn, path, migrations())
        except sqlite3.Error as exc:
            conn.close()
            raise _storage_error(path, "open", exc) from exc
        except BaseException:
            conn.close()
            raise
        return cls(conn, path)

    @classmethod
    def open_read_only(cls, path: Path, *, immutable: bool = True) -> GovernanceStore:
        """The database file at `path` read as it is, never migrated or written.

        `immutable` (a notebook without a daemon) creates no -wal/-shm file either, and sees
        only what is checkpointed; without it (the MCP tools, beside a daemon that writes),
        reads see every commit.
        """
        path = Path(path)
        flags = "mode=ro&immutable=1" if immutable else "mode=ro"
        try:
            conn = sqlite3.connect(
                f"{path.absolute().as_uri()}?{flags}",
                uri=True,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        return cls(conn, path)

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise _storage_error(self.path, "close", exc) from exc

    def __enter__(self) -> GovernanceStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def forget_scope(self, scope_hash: str, slugs: Sequence[str]) -> int:
        """Remove what this database holds of a scope made sensitive: its promotions (they
        quote titles and bodies), its trigger counts (trigger words), and the enrichment rows
        of its memories. Deleted pages are zeroed (`secure_delete`) and the WAL is emptied,
        so no plaintext lingers in free pages. Returns the rows removed."""
        with self._connection("forget a sensitive scope in") as conn:
            conn.execute("PRAGMA secure_delete = ON")
        removed = 0
        with self._transaction("forget a sensitive scope in") as conn:
            removed += conn.execute(
                "DELETE FROM promotions WHERE scope_hash = ?", (scope_hash,)
            ).rowcount
            removed += conn.execute(
                "DELETE FROM trigger_stats WHERE scope_hash = ?", (scope_hash,)
            ).rowcount
            for start in range(0, len(slugs), 500):
                chunk = list(slugs[start : start + 500])
                marks = ",".join("?" * len(chunk))
                removed += conn.execute(
                    f"DELETE FROM enrichment WHERE slug IN ({marks})", chunk
                ).rowcount
        with self._connection("checkpoint") as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    def schema_version(self) -> int:
        """The migration the database is at (`PRAGMA user_version`)."""
        with self._connection("read the schema version of") as conn:
            return _user_version(conn)

    def integrity_check(self) -> list[str]:
        """SQLite's `quick_check`: an empty list when the file is sound (for `doctor`)."""
        with self._connection("check") as conn:
            rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
        return [] if rows == ["ok"] else rows

    def record_trigger_hits(
        self, triggers: Sequence[str], scope_hash: str | None, day: date
    ) -> None:
        """Count one hit per trigger listed (a repeated trigger counts again) on `day`.

        `scope_hash` None counts under `_global`. A datetime is taken as its UTC day.
        """
        if isinstance(triggers, str):
            raise InvalidInput("triggers must be a sequence of strings, not one string")
        hits: Counter[tuple[str, str | None, date]] = Counter(
            (t, scope_hash, day) for t in triggers
        )
        self.add_trigger_hits(hits)

    def add_trigger_hits(self, hits: Mapping[tuple[str, str | None, date], int]) -> None:
        """Add counted hits, (trigger, scope_hash or None, day) → n, in one transaction:
        recall counts its triggers in memory and flushes them here in batches."""
        rows: Counter[tuple[str, str, str]] = Counter()
        for (trigger, scope_hash, day), n in hits.items():
            if trigger.strip() and n > 0:
                rows[(trigger.strip(), scope_hash or GLOBAL_SCOPE, _day(day))] += n
        if not rows:
            return
        with self._transaction("record trigger hits in") as conn:
            conn.executemany(
                "INSERT INTO trigger_stats (trigger, scope_hash, day, hits) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (trigger, scope_hash, day) DO UPDATE SET hits = hits + excluded.hits",
                [(*key, n) for key, n in rows.items()],
            )

    def witness_audit(self, seq: int, this_hash: str) -> None:
        """Keep the audit chain's new end (`AuditLog`'s witness): see 010_audit_witness.sql.
        An update only: a deleted row stays missing for `audit verify` to report.

        Committed with `synchronous=NORMAL` (no fsync; WAL stays consistent): a witness lost
        to a power cut only lags the log, which verify accepts, and every audit append
        already pays two fsyncs."""
        with self._connection("witness the audit chain end in") as conn:
            conn.execute("PRAGMA synchronous = NORMAL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "UPDATE audit_witness SET seq = ?, this_hash = ? WHERE id = 1",
                        (seq, this_hash),
                    )
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                conn.execute("PRAGMA synchronous = FULL")

    def audit_witness(self) -> tuple[int, str] | None:
        """The audit chain end last witnessed: seq -1 before the first, None when the row
        was deleted."""
        with self._connection("read the audit witness from") as conn:
            row = conn.execute("SELECT seq, this_hash FROM audit_witness WHERE id = 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def record_run(self, job: str, started: datetime, finished: datetime, outcome: str) -> None:
        """A scheduled job ran (or was run by hand): when, and how it ended."""
        with self._transaction("record a job run in") as conn:
            conn.execute(
                "INSERT INTO schedule_runs (job, started_at, finished_at, outcome)"
                " VALUES (?, ?, ?, ?)",
                (job, _instant(started), _instant(finished), outcome[:2000]),
            )

    def last_runs(self) -> dict[str, tuple[datetime, datetime, str]]:
        """job → (started, finished, outcome) of its latest run."""
        with self._connection("read job runs from") as conn:
            rows = conn.execute(
                "SELECT job, started_at, finished_at, outcome FROM schedule_runs r"
                " WHERE started_at = (SELECT max(started_at) FROM schedule_runs WHERE job = r.job)"
            ).fetchall()
        return {
            str(job): (_parse_instant(start), _parse_instant(end), str(outcome))
            for job, start, end, outcome in rows
        }

    def trigger_stats(
        self, *, since: date | None = None, scope_hash: str | None = None
    ) -> list[TriggerStat]:
        """Hits per trigger, scope and day, oldest day first, busiest trigger first within it.

        `since` includes that day. `scope_hash` None means every scope; pass `GLOBAL_SCOPE`
        for the scope-less hits alone.
        """
        clauses: list[str] = []
        params: list[str] = []
        if since is not None:
            clauses.append("day >= ?")
            params.append(_day(since))
        if scope_hash is not None:
            clauses.append("scope_hash = ?")
            params.append(scope_hash)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        query = (
            f"SELECT trigger, scope_hash, day, hits FROM trigger_stats {where} "
            "ORDER BY day, hits DESC, trigger, scope_hash"
        )
        with self._connection("read trigger stats from") as conn:
            rows = conn.execute(query, params).fetchall()
        return [
            TriggerStat(trigger=trigger, scope_hash=scope, day=date.fromisoformat(day), hits=hits)
            for trigger, scope, day, hits in rows
        ]
