"""The work queues in governance.db: captured memories waiting for enrichment, and memories
waiting for the supersede judge, each with its attempts and retry time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memoryd.governance.store.base import StoreBase, _instant

EnrichmentState = Literal["pending", "done", "failed"]
Enqueued = Literal["new", "changed", "same"]


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


def _enrichment_row(row: tuple[object, ...]) -> EnrichmentRow:
    keys = [key.strip() for key in _ENRICHMENT_COLUMNS.split(",")]
    data = dict(zip(keys, row, strict=True))
    data["rules_done"] = bool(data["rules_done"])
    return EnrichmentRow.model_validate(data)


def _judge_row(row: tuple[object, ...]) -> JudgeRow:
    keys = [key.strip() for key in _JUDGE_COLUMNS.split(",")]
    return JudgeRow.model_validate(dict(zip(keys, row, strict=True)))


class WorkQueues(StoreBase):
    """The enrichment and supersede judge queues, for `GovernanceStore`."""

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
