"""A failed commit of the documents waiting for one (`IndexWriting.upsert` with `then`): the
commit timer tries it again after a wait that doubles up to `_RETRY_MAX_S`, the first failure
of a run is logged once, and `commit_wait` tells `memoryd status` and `doctor` how many
documents wait, since when, and the last error, until a commit succeeds.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from memoryd.errors import MemorydError
from memoryd.search.reader import COMMIT_DELAY_S, IndexReader

logger = logging.getLogger(__name__)

_RETRY_MAX_S = 30.0
"""The longest wait between two tries of a failed commit of waiting documents: the timer's
wait doubles from `commit_delay_s` after each failure up to this, and stays there until one
succeeds."""


class CommitWait(NamedTuple):
    """The documents waiting for the index's next commit, and the failed tries to make it
    (`IndexWriting.commit_wait`: `memoryd status` and `doctor` show it)."""

    documents: int
    since: datetime | None
    """When the oldest of them started waiting."""
    failures: int
    """Tries that failed since the last commit that succeeded (0: none failed)."""
    failing_since: datetime | None
    first_error: str | None
    """The first failed try's error (a later try may only say tantivy's writer died of it)."""
    error: str | None
    """The last failed try's error."""
    retry_at: datetime | None
    """When the timer tries again."""


class CommitRetries(IndexReader):
    """The retries of failed commits and the wait they report; the base of `IndexWriting`,
    whose timer (`_arm`) they use."""

    def _arm(self, delay: float) -> None:
        """Start the commit timer (`IndexWriting` does)."""
        raise NotImplementedError

    def _note_failure(self, exc: Exception) -> None:
        """A commit of waiting documents failed (they are back in `_waiting`): remember it
        for `commit_wait`, log the first failure of a run, and have the timer try again
        after a wait that doubles with each failure up to `_RETRY_MAX_S` (the caller holds
        the waiting lock)."""
        error = exc.message if isinstance(exc, MemorydError) else f"{type(exc).__name__}: {exc}"
        now = datetime.now(UTC)
        self._failures += 1
        self._failed_error = error
        if self._failed_since is None:
            self._failed_since, self._first_error = now, error
        base = self.commit_delay_s if self.commit_delay_s > 0 else COMMIT_DELAY_S
        delay = min(base * 2 ** min(self._failures - 1, 16), _RETRY_MAX_S)
        self._retry_at = now + timedelta(seconds=delay)
        if self._closed:
            return
        if self._timer is None:
            self._arm(delay)
        if self._failures == 1:
            logger.error(
                "search index %s: %d recorded memories are not searchable yet: their commit"
                " failed (%s). memoryd keeps them waiting and tries again in %.1fs, then"
                " less often (at least every %.0fs); their writes stay journalled, so a"
                " restart indexes them again. Free disk space or restore write access to %s;"
                " `memoryd status` shows the wait.",
                self,
                len(self._waiting),
                error,
                delay,
                _RETRY_MAX_S,
                self._directory,
            )
        else:
            logger.debug("search index %s: try %d failed: %s", self, self._failures, error)

    def commit_wait(self) -> CommitWait:
        """The documents waiting for a commit (those of a commit under way included) and
        the failed tries to commit them; cheap, touches no file."""
        with self._waiting_lock:
            flying, flying_since = self._in_commit
            since = min(
                (t for t in (self._waiting_since, flying_since) if t is not None), default=None
            )
            return CommitWait(
                documents=len(self._waiting) + flying,
                since=since,
                failures=self._failures,
                failing_since=self._failed_since,
                first_error=self._first_error,
                error=self._failed_error,
                retry_at=self._retry_at,
            )

    def _note_success(self, committed: int) -> None:
        """A commit of the waiting documents succeeded: forget the failed tries."""
        with self._waiting_lock:
            failures, self._failures = self._failures, 0
            self._failed_since = self._retry_at = None
            self._first_error = self._failed_error = None
        if failures and committed:
            logger.warning(
                "search index %s: committed the %d waiting document(s) after %d failed tries;"
                " they are searchable now",
                self,
                committed,
                failures,
            )
