"""governance.db: the small relational state memoryd keeps beside the vault and the graph.

SQLite (stdlib `sqlite3`) holds only promotions, trigger_stats, profile_versions and
profile_change_reports (DESIGN §3), plus the enrichment queue of captured sessions, the
supersede judge queue and the runs of scheduled maintenance jobs: work state, not memory
content, so `reindex` needs none of it. Numbered migrations, `migrations/NNN_name.sql`
shipped as package data, run on open; `PRAGMA user_version` records the last one applied,
and each one commits or rolls back as a whole, so a crash mid-upgrade
leaves the previous schema intact.

Over 600 lines: every query on governance.db, which has one connection and one lock; one method
per table operation.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import logging
import os
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from memoryd.errors import Conflict, InvalidInput, NotFound, ResourceExhausted, StorageError
from memoryd.models import Promotion, PromotionProposal, PromotionStatus, to_utc
from memoryd.private import FILE_MODE, make_private_dir

logger = logging.getLogger(__name__)

LATEST_VERSION = 10
"""The schema version this code creates and understands: the number of the last migration."""

GLOBAL_SCOPE = "_global"
"""The scope_hash trigger hits without a scope are counted under (seeds/001)."""

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_BUSY_TIMEOUT_S = 10.0
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


class TriggerStat(BaseModel):
    """How often one trigger keyword led to a recall in one scope on one day."""

    model_config = ConfigDict(frozen=True)

    trigger: str
    scope_hash: str
    day: date
    hits: int


EnrichmentState = Literal["pending", "done", "failed"]
Enqueued = Literal["new", "changed", "same"]
Proposed = Literal["new", "updated", "decided"]
"""What `propose_promotion` did: inserted a row, refreshed the source's pending one, or left
alone a promotion of exactly this content that was already decided."""


class EnrichmentRow(BaseModel):
    """One memory in the enrichment queue: which content, how far, and why it stopped."""

    model_config = ConfigDict(frozen=True)

    slug: str
    fingerprint: str
    state: EnrichmentState
    rules_done: bool
    attempts: int
    last_error: str | None
    next_attempt_at: datetime
    enqueued_at: datetime
    updated_at: datetime


class JudgeRow(BaseModel):
    """One memory waiting for the LLM's part of supersede judging (`judge_queue`)."""

    model_config = ConfigDict(frozen=True)

    slug: str
    state: EnrichmentState
    queued: int
    """How often it was queued: a job settles only the queueing it was prepared from."""
    attempts: int
    last_error: str | None
    next_attempt_at: datetime


_JUDGE_COLUMNS = "slug, state, queued, attempts, last_error, next_attempt_at"

_ENRICHMENT_COLUMNS = (
    "slug, fingerprint, state, rules_done, attempts, last_error, next_attempt_at, enqueued_at,"
    " updated_at"
)


class ProfileVersion(BaseModel):
    """One version of profile/identity.md: its text, the diff from the one before, and what
    it rests on (`sources`: memory slugs, `entities`: entity ids)."""

    model_config = ConfigDict(frozen=True)

    version: int
    written_at: datetime
    trigger: str
    """weekly_cron, manual or rollback."""
    written_by: str
    """`compiled` (without an LLM), `llm:<provider>/<model>`, or `rollback of vN`."""
    content_md: str
    diff_from_prev: str = ""
    change_summary: str = ""
    sources_count: int = 0
    window_start: datetime | None = None
    window_end: datetime | None = None
    sources: list[str] = []
    entities: list[str] = []


class ProfileChangeReport(BaseModel):
    """One month's profile change report (profile/change-reports/YYYY-MM.md)."""

    model_config = ConfigDict(frozen=True)

    period: str
    generated_at: datetime
    content_md: str
    versions_count: int
    supersedes_count: int
    entities_added: int
    entities_dropped: int


_PROFILE_COLUMNS = (
    "version_num, written_at, trigger, written_by, content_md, diff_from_prev, change_summary,"
    " sources_count, sources_window_start, sources_window_end, sources, entities"
)
_REPORT_COLUMNS = (
    "period, generated_at, content_md, versions_count, supersedes_count, entities_added,"
    " entities_dropped"
)


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


class GovernanceStore:
    """governance.db behind a lock: one connection, shared by the threads of one process."""

    LATEST_VERSION: ClassVar[int] = LATEST_VERSION

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        """Use `GovernanceStore.open`; this only wraps an already migrated connection."""
        self.path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()

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

    # -- the enrichment queue ----------------------------------------------------------------
    def enqueue_enrichment(self, slug: str, fingerprint: str, now: datetime) -> Enqueued:
        """Queue a memory's content for enrichment. Returns `new` (never queued before),
        `changed` (queued again: its content changed) or `same` (exactly this content is
        queued, enriched or failed already: nothing changes, nothing is enriched twice).

        Queued content starts over: pending, no attempts, the spaCy stage not yet run.
        """
        stamp = _instant(now)
        with self._transaction("queue enrichment in") as conn:
            row = conn.execute(
                "SELECT fingerprint FROM enrichment WHERE slug = ?", (slug,)
            ).fetchone()
            if row is not None and row[0] == fingerprint:
                return "same"
            conn.execute(
                "INSERT INTO enrichment (slug, fingerprint, state, rules_done, attempts,"
                " last_error, next_attempt_at, enqueued_at, updated_at)"
                " VALUES (?, ?, 'pending', 0, 0, NULL, ?, ?, ?)"
                " ON CONFLICT (slug) DO UPDATE SET fingerprint = excluded.fingerprint,"
                " state = 'pending', rules_done = 0, attempts = 0, last_error = NULL,"
                " next_attempt_at = excluded.next_attempt_at,"
                " enqueued_at = excluded.enqueued_at, updated_at = excluded.updated_at",
                (slug, fingerprint, stamp, stamp, stamp),
            )
        return "new" if row is None else "changed"

    def enqueue_enrichments(self, items: Sequence[tuple[str, str]], now: datetime) -> int:
        """Queue many (slug, fingerprint) contents in one transaction (memories recorded by
        hand); as `enqueue_enrichment`, a content already queued, enriched or failed is left
        alone. Returns how many rows it queued or started over."""
        stamp = _instant(now)
        rows = [(slug, fingerprint, stamp, stamp, stamp) for slug, fingerprint in items]
        if not rows:
            return 0
        with self._transaction("queue enrichment in") as conn:
            cursor = conn.executemany(
                "INSERT INTO enrichment (slug, fingerprint, state, rules_done, attempts,"
                " last_error, next_attempt_at, enqueued_at, updated_at)"
                " VALUES (?, ?, 'pending', 0, 0, NULL, ?, ?, ?)"
                " ON CONFLICT (slug) DO UPDATE SET fingerprint = excluded.fingerprint,"
                " state = 'pending', rules_done = 0, attempts = 0, last_error = NULL,"
                " next_attempt_at = excluded.next_attempt_at,"
                " enqueued_at = excluded.enqueued_at, updated_at = excluded.updated_at"
                " WHERE enrichment.fingerprint <> excluded.fingerprint",
                rows,
            )
            return max(0, cursor.rowcount)

    def due_enrichments(
        self, now: datetime, limit: int, *, rules_only: bool = False
    ) -> list[EnrichmentRow]:
        """Pending rows whose backoff is over, longest waiting first. `rules_only`: only those
        the spaCy stage has not run on (what an embedded command does without the LLM)."""
        where = "state = 'pending' AND next_attempt_at <= ?"
        if rules_only:
            where += " AND rules_done = 0"
        query = (
            f"SELECT {_ENRICHMENT_COLUMNS} FROM enrichment WHERE {where}"
            " ORDER BY next_attempt_at, enqueued_at, slug LIMIT ?"
        )
        with self._connection("read the enrichment queue of") as conn:
            rows = conn.execute(query, (_instant(now), limit)).fetchall()
        return [_enrichment_row(row) for row in rows]

    def enrichment(self, slug: str) -> EnrichmentRow | None:
        """The queue row of one memory, or None when it was never queued."""
        with self._connection("read the enrichment queue of") as conn:
            row = conn.execute(
                f"SELECT {_ENRICHMENT_COLUMNS} FROM enrichment WHERE slug = ?", (slug,)
            ).fetchone()
        return None if row is None else _enrichment_row(row)

    def record_enrichment(
        self,
        slug: str,
        fingerprint: str,
        *,
        state: EnrichmentState,
        rules_done: bool,
        attempts: int,
        last_error: str | None,
        next_attempt_at: datetime,
        now: datetime,
    ) -> bool:
        """Record how an attempt ended, only if the row is still about `fingerprint`: a
        re-capture that queued newer content meanwhile wins. Returns whether it was recorded."""
        with self._transaction("record enrichment in") as conn:
            cursor = conn.execute(
                "UPDATE enrichment SET state = ?, rules_done = ?, attempts = ?, last_error = ?,"
                " next_attempt_at = ?, updated_at = ? WHERE slug = ? AND fingerprint = ?",
                (
                    state,
                    int(rules_done),
                    attempts,
                    last_error,
                    _instant(next_attempt_at),
                    _instant(now),
                    slug,
                    fingerprint,
                ),
            )
            return cursor.rowcount > 0

    def enrichment_counts(self) -> dict[EnrichmentState, int]:
        """How many memories are pending, done and failed (for `doctor`)."""
        counts: dict[EnrichmentState, int] = {"pending": 0, "done": 0, "failed": 0}
        with self._connection("read the enrichment queue of") as conn:
            for state, count in conn.execute(
                "SELECT state, count(*) FROM enrichment GROUP BY state"
            ):
                counts[state] = int(count)
        return counts

    # -- the identity profile (governance/profile.py) -----------------------------------------
    def add_profile_version(
        self,
        *,
        written_at: datetime,
        trigger: str,
        written_by: str,
        content_md: str,
        diff_from_prev: str,
        change_summary: str,
        window: tuple[datetime | None, datetime | None],
        sources: Sequence[str],
        entities: Sequence[str],
    ) -> ProfileVersion:
        """Append the next version (numbered one past the last) and return it."""
        with self._transaction("record a profile version in") as conn:
            row = conn.execute("SELECT max(version_num) FROM profile_versions").fetchone()
            number = int(row[0] or 0) + 1
            conn.execute(
                "INSERT INTO profile_versions (version_num, written_at, trigger, written_by,"
                " content_md, diff_from_prev, change_summary, sources_count,"
                " sources_window_start, sources_window_end, sources, entities)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    number,
                    _instant(written_at),
                    trigger,
                    written_by,
                    content_md,
                    diff_from_prev,
                    change_summary,
                    len(sources),
                    None if window[0] is None else _instant(window[0]),
                    None if window[1] is None else _instant(window[1]),
                    json.dumps(list(sources), ensure_ascii=False),
                    json.dumps(list(entities), ensure_ascii=False),
                ),
            )
        found = self.profile_version(number)
        assert found is not None
        return found

    def profile_version(self, number: int) -> ProfileVersion | None:
        """One version by number, or None."""
        return next(iter(self._profile_versions("WHERE version_num = ?", (number,))), None)

    def latest_profile_version(self, *, before: datetime | None = None) -> ProfileVersion | None:
        """The newest version (written before `before`, when given), or None."""
        if before is None:
            rows = self._profile_versions("ORDER BY version_num DESC LIMIT 1", ())
        else:
            rows = self._profile_versions(
                "WHERE written_at < ? ORDER BY version_num DESC LIMIT 1", (_instant(before),)
            )
        return next(iter(rows), None)

    def profile_versions(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 1000,
    ) -> list[ProfileVersion]:
        """Versions newest first; `since` inclusive, `until` exclusive."""
        clauses, params = [], []
        if since is not None:
            clauses.append("written_at >= ?")
            params.append(_instant(since))
        if until is not None:
            clauses.append("written_at < ?")
            params.append(_instant(until))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._profile_versions(
            f"{where} ORDER BY version_num DESC LIMIT ?", (*params, limit)
        )

    def _profile_versions(self, tail: str, params: Sequence[object]) -> list[ProfileVersion]:
        with self._connection("read profile versions from") as conn:
            rows = conn.execute(
                f"SELECT {_PROFILE_COLUMNS} FROM profile_versions {tail}", params
            ).fetchall()
        return [_profile_version(row) for row in rows]

    def save_profile_report(self, report: ProfileChangeReport) -> None:
        """Write the report of its month, replacing one written before."""
        with self._transaction("record a profile report in") as conn:
            conn.execute(
                f"INSERT INTO profile_change_reports ({_REPORT_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (period) DO UPDATE SET"
                " generated_at = excluded.generated_at, content_md = excluded.content_md,"
                " versions_count = excluded.versions_count,"
                " supersedes_count = excluded.supersedes_count,"
                " entities_added = excluded.entities_added,"
                " entities_dropped = excluded.entities_dropped",
                (
                    report.period,
                    _instant(report.generated_at),
                    report.content_md,
                    report.versions_count,
                    report.supersedes_count,
                    report.entities_added,
                    report.entities_dropped,
                ),
            )

    def profile_reports(self, *, period: str | None = None) -> list[ProfileChangeReport]:
        """The monthly reports, newest month first (one month's with `period`)."""
        where, params = ("WHERE period = ?", (period,)) if period else ("", ())
        with self._connection("read profile reports from") as conn:
            rows = conn.execute(
                f"SELECT {_REPORT_COLUMNS} FROM profile_change_reports {where}"
                " ORDER BY period DESC",
                params,
            ).fetchall()
        return [
            ProfileChangeReport(
                period=str(p),
                generated_at=_parse_instant(str(g)),
                content_md=str(c),
                versions_count=int(v or 0),
                supersedes_count=int(s or 0),
                entities_added=int(a or 0),
                entities_dropped=int(d or 0),
            )
            for p, g, c, v, s, a, d in rows
        ]

    # -- the supersede judge queue -----------------------------------------------------------
    def queue_judges(self, slugs: Sequence[str], now: datetime) -> None:
        """Queue memories for the LLM's part of supersede judging (the daemon's worker does
        it). A memory queued again starts over: pending, no attempts, due now."""
        stamp = _instant(now)
        rows = [(slug, stamp, stamp, stamp) for slug in dict.fromkeys(slugs)]
        if not rows:
            return
        with self._transaction("queue supersede judging in") as conn:
            conn.executemany(
                "INSERT INTO judge_queue (slug, state, queued, attempts, last_error,"
                " next_attempt_at, enqueued_at, updated_at) VALUES (?, 'pending', 1, 0, NULL,"
                " ?, ?, ?) ON CONFLICT (slug) DO UPDATE SET state = 'pending',"
                " queued = queued + 1, attempts = 0, last_error = NULL,"
                " next_attempt_at = excluded.next_attempt_at,"
                " enqueued_at = excluded.enqueued_at, updated_at = excluded.updated_at",
                rows,
            )

    def due_judges(self, now: datetime, limit: int) -> list[JudgeRow]:
        """Pending judge jobs whose backoff is over, longest waiting first."""
        with self._connection("read the judge queue of") as conn:
            rows = conn.execute(
                f"SELECT {_JUDGE_COLUMNS} FROM judge_queue"
                " WHERE state = 'pending' AND next_attempt_at <= ?"
                " ORDER BY next_attempt_at, enqueued_at, slug LIMIT ?",
                (_instant(now), limit),
            ).fetchall()
        return [_judge_row(row) for row in rows]

    def judge_job(self, slug: str) -> JudgeRow | None:
        """The judge queue row of one memory, or None when it was never queued."""
        with self._connection("read the judge queue of") as conn:
            row = conn.execute(
                f"SELECT {_JUDGE_COLUMNS} FROM judge_queue WHERE slug = ?", (slug,)
            ).fetchone()
        return None if row is None else _judge_row(row)

    def settle_judge(
        self,
        row: JudgeRow,
        *,
        state: EnrichmentState,
        attempts: int,
        last_error: str | None,
        next_attempt_at: datetime,
        now: datetime,
    ) -> bool:
        """Record how a judge attempt ended, only if the memory was not queued again since
        `row` was read (then its new queueing is judged next). Whether it was recorded."""
        with self._transaction("record supersede judging in") as conn:
            cursor = conn.execute(
                "UPDATE judge_queue SET state = ?, attempts = ?, last_error = ?,"
                " next_attempt_at = ?, updated_at = ? WHERE slug = ? AND queued = ?",
                (
                    state,
                    attempts,
                    last_error,
                    _instant(next_attempt_at),
                    _instant(now),
                    row.slug,
                    row.queued,
                ),
            )
            return cursor.rowcount > 0

    def judge_counts(self) -> dict[EnrichmentState, int]:
        """Judge jobs by state: pending, done, failed (for `doctor`)."""
        counts: dict[EnrichmentState, int] = {"pending": 0, "done": 0, "failed": 0}
        with self._connection("read the judge queue of") as conn:
            for state, count in conn.execute(
                "SELECT state, count(*) FROM judge_queue GROUP BY state"
            ):
                counts[state] = int(count)
        return counts

    # -- the promotions queue ----------------------------------------------------------------
    def propose_promotion(self, proposal: PromotionProposal, now: datetime) -> tuple[int, Proposed]:
        """Queue a proposal, at most one pending per source session.

        A pending promotion of the same session is refreshed in place (same id: the session
        grew, or was scored again). A decided promotion of exactly this content is left alone:
        a reviewer's answer is not asked again for the same text.
        """
        values = (
            proposal.source_title,
            proposal.source_fingerprint,
            proposal.scope_hash,
            proposal.proposed_type.value,
            proposal.proposed_title,
            proposal.proposed_body,
            json.dumps(proposal.proposed_triggers, ensure_ascii=False),
            json.dumps(proposal.proposed_supersedes, ensure_ascii=False),
            proposal.dura.model_dump_json(),
            proposal.reasoning,
            json.dumps(proposal.evidence, ensure_ascii=False),
        )
        with self._transaction("queue a promotion in") as conn:
            pending = conn.execute(
                "SELECT id FROM promotions WHERE source_session_slug = ? AND status = 'pending'"
                " ORDER BY id LIMIT 1",
                (proposal.source_slug,),
            ).fetchone()
            if pending is not None:
                conn.execute(
                    "UPDATE promotions SET source_title = ?, source_fingerprint = ?,"
                    " scope_hash = ?, proposed_type = ?, proposed_title = ?, proposed_body = ?,"
                    " proposed_triggers = ?, proposed_supersedes = ?, dura_score = ?,"
                    " reasoning = ?, evidence = ?, source_missing_at = NULL WHERE id = ?",
                    (*values, pending[0]),
                )
                return int(pending[0]), "updated"
            decided = conn.execute(
                "SELECT id FROM promotions WHERE source_session_slug = ?"
                " AND source_fingerprint = ? ORDER BY id DESC LIMIT 1",
                (proposal.source_slug, proposal.source_fingerprint),
            ).fetchone()
            if decided is not None:
                return int(decided[0]), "decided"
            cursor = conn.execute(
                "INSERT INTO promotions (source_title, source_fingerprint, scope_hash,"
                " proposed_type, proposed_title, proposed_body, proposed_triggers,"
                " proposed_supersedes, dura_score, reasoning, evidence, source_session_slug,"
                " status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
                (*values, proposal.source_slug, _instant(now)),
            )
            return int(cursor.lastrowid or 0), "new"

    def promotion(self, promotion_id: int) -> Promotion | None:
        """One promotion by id, or None."""
        with self._connection("read the promotions of") as conn:
            row = conn.execute(
                f"SELECT {_PROMOTION_COLUMNS} FROM promotions WHERE id = ?", (promotion_id,)
            ).fetchone()
        return None if row is None else _promotion(row)

    def promotions(
        self,
        *,
        status: PromotionStatus | None = None,
        scope_hash: str | None = None,
        source_slug: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        """The queue, newest first; each filter is optional."""
        clauses: list[str] = []
        params: list[object] = []
        for column, value in (
            ("status", status),
            ("scope_hash", scope_hash),
            ("source_session_slug", source_slug),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        query = (
            f"SELECT {_PROMOTION_COLUMNS} FROM promotions {where}"
            " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
        )
        with self._connection("read the promotions of") as conn:
            rows = conn.execute(query, (*params, limit, offset)).fetchall()
        return [_promotion(row) for row in rows]

    def decide_promotion(
        self,
        promotion_id: int,
        status: PromotionStatus,
        *,
        by: str,
        now: datetime,
        reason: str | None = None,
        promoted_slug: str | None = None,
    ) -> Promotion:
        """Record a decision on a pending promotion. Unknown id: NotFound; already decided:
        Conflict (deciding twice is refused, whatever the second answer)."""
        if status == "pending":
            raise InvalidInput("a decision is approved, rejected or merged, not pending")
        with self._transaction("decide a promotion in") as conn:
            row = conn.execute(
                "SELECT status, decided_at FROM promotions WHERE id = ?", (promotion_id,)
            ).fetchone()
            if row is None:
                raise _unknown_promotion(promotion_id)
            if row[0] != "pending":
                raise Conflict(
                    f"promotion {promotion_id} was already decided: {row[0]} at {row[1]}",
                    hint="`memoryd promotions --status pending` lists what is left to decide",
                )
            conn.execute(
                "UPDATE promotions SET status = ?, decided_at = ?, decided_by = ?,"
                " decision_reason = ?, promoted_slug = ? WHERE id = ?",
                (status, _instant(now), by, reason, promoted_slug, promotion_id),
            )
        decided = self.promotion(promotion_id)
        assert decided is not None
        return decided

    def mark_source_missing(self, promotion_id: int, now: datetime) -> None:
        """Mark a pending promotion whose source session is gone; it stays in the queue."""
        with self._transaction("mark a promotion in") as conn:
            cursor = conn.execute(
                "UPDATE promotions SET source_missing_at = ? WHERE id = ?",
                (_instant(now), promotion_id),
            )
            if cursor.rowcount == 0:
                raise _unknown_promotion(promotion_id)

    def promotion_counts(self) -> dict[PromotionStatus, int]:
        """How many promotions are in each state (for `doctor` and the review page)."""
        counts: dict[PromotionStatus, int] = {
            "pending": 0,
            "approved": 0,
            "rejected": 0,
            "merged": 0,
        }
        with self._connection("read the promotions of") as conn:
            for state, count in conn.execute(
                "SELECT status, count(*) FROM promotions GROUP BY status"
            ):
                counts[state] = int(count)
        return counts

    # -- promotions: merge and schedules (governance/merge.py, governance/schedule.py) ---------
    def merge_promotions(
        self, slugs: Sequence[str], now: datetime, *, into: str, by: str
    ) -> list[int]:
        """Mark the pending promotions of memories merged `into` another `merged` (decided by
        `by`, the reason naming the kept memory); returns their ids."""
        if not slugs:
            return []
        marks = ",".join("?" * len(slugs))
        with self._transaction("merge promotions in") as conn:
            rows = conn.execute(
                "UPDATE promotions SET status = 'merged', decided_at = ?, decided_by = ?,"
                " decision_reason = ?"
                f" WHERE status = 'pending' AND source_session_slug IN ({marks}) RETURNING id",
                (_instant(now), by, f"merged into {into}", *slugs),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)

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


_PROMOTION_COLUMNS = (
    "id, source_session_slug, source_title, source_fingerprint, scope_hash, proposed_type,"
    " proposed_title, proposed_body, proposed_triggers, proposed_supersedes, dura_score,"
    " reasoning, evidence, status, created_at, decided_at, decided_by, decision_reason,"
    " promoted_slug, source_missing_at"
)


def _promotion(row: tuple[object, ...]) -> Promotion:
    keys = [key.strip() for key in _PROMOTION_COLUMNS.split(",")]
    data: dict[str, object] = dict(zip(keys, row, strict=True))
    data["source_slug"] = data.pop("source_session_slug")
    data["dura"] = json.loads(str(data.pop("dura_score")))
    for key in ("proposed_triggers", "proposed_supersedes", "evidence"):
        data[key] = json.loads(str(data[key]))
    data["reasoning"] = data["reasoning"] or ""
    return Promotion.model_validate(data)


def _profile_version(row: Sequence[object]) -> ProfileVersion:
    number, written, trigger, by, content, diff, summary, count, start, end, sources, entities = row
    return ProfileVersion(
        version=int(str(number)),
        written_at=_parse_instant(str(written)),
        trigger=str(trigger),
        written_by=str(by),
        content_md=str(content),
        diff_from_prev=str(diff or ""),
        change_summary=str(summary or ""),
        sources_count=int(str(count or 0)),
        window_start=None if start is None else _parse_instant(str(start)),
        window_end=None if end is None else _parse_instant(str(end)),
        sources=json.loads(str(sources or "[]")),
        entities=json.loads(str(entities or "[]")),
    )


def _instant(value: datetime) -> str:
    """A fixed-width UTC timestamp, so the text order of the column is the time order."""
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _unknown_promotion(promotion_id: int) -> NotFound:
    return NotFound(
        f"no promotion {promotion_id}",
        hint="`memoryd promotions --status pending` lists the queue with its ids",
    )


def _parse_instant(text: str) -> datetime:
    return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


def _enrichment_row(row: tuple[object, ...]) -> EnrichmentRow:
    keys = [key.strip() for key in _ENRICHMENT_COLUMNS.split(",")]
    data = dict(zip(keys, row, strict=True))
    data["rules_done"] = bool(data["rules_done"])
    return EnrichmentRow.model_validate(data)


def _judge_row(row: tuple[object, ...]) -> JudgeRow:
    keys = [key.strip() for key in _JUDGE_COLUMNS.split(",")]
    return JudgeRow.model_validate(dict(zip(keys, row, strict=True)))


def _day(value: date) -> str:
    if isinstance(value, datetime):
        return to_utc(value).date().isoformat()
    if not isinstance(value, date):
        raise InvalidInput(f"expected a date, got {value!r}")
    return value.isoformat()
