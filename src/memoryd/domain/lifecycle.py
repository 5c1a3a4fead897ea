"""The lifecycle of memories through the service: decay, restore, merge, duplicates and
the schedules that run them (the work is in `memoryd.governance`; these are the thin
methods)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.domain.recalling import Recalling
from memoryd.errors import InvalidInput, MemorydError
from memoryd.governance.decay import (
    SWEEP_YOUNG_OBJECTS,
    DecaySweep,
    RestoreResult,
    SweepReport,
    restore,
)
from memoryd.models import DecayState, to_utc
from memoryd.native import fewer_collections

if TYPE_CHECKING:
    from memoryd.governance.merge import DuplicatePair, MergeResult
    from memoryd.governance.schedule import JobStatus

logger = logging.getLogger(__name__)


class Lifecycle(Recalling):
    """Decay, restore, merge and the scheduled jobs (a get counts as a recall here too)."""

    def count_read(self, slug: str) -> None:
        """A get of one memory counts as a recall of it: recall_count, last_recalled_at, and a
        dim or soft-forgotten memory comes back to alive (a search listing does not count).
        Written through to the file at once, so the next get shows it however it is made
        (embedded or through the daemon)."""
        self._require_writable("count a read")
        row = self.graph.get_memory(slug)
        if row is None:
            return  # forgotten by decay (only `restore` brings it back), or unknown
        now = self.clock()
        before = self._recall_pending.get(slug, (0, now))[0]
        self._recall_pending[slug] = (before + 1, now)
        counted = self._write_recall_counts([slug])
        if row.decay_state is not DecayState.ALIVE:
            self._reindex_search(list(counted))
        self.flush_recall_stats([slug])

    def decay_sweep(
        self, *, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> SweepReport:
        """Move unused session memories along alive → dim → soft-forgotten → forgotten
        (`memoryd.governance.decay`), as of now (`clock`)."""
        return self.sweep_at(self.clock(), dry_run=dry_run, progress=progress)

    def sweep_at(
        self,
        now: datetime,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> SweepReport:
        """The decay sweep as of `now` (tests and the bench simulate days). Recalls counted so
        far reach the graph and the files first, so a memory recalled a moment ago is not
        swept. `progress(done, total)`: `DecaySweep.run`."""
        from memoryd.governance import schedule

        if not dry_run:
            self._require_writable("sweep decayed memories")
        if not self.read_only:
            self.flush_recall_stats()
        at = to_utc(now)
        sweep = DecaySweep(self.governance_stores(), self.decay_policy)
        # A sweep that moves a whole vault holds 100k moves, journal items and index
        # documents at once, and makes next to no cyclic garbage: each collection would
        # walk them again (with the bulk writes' 50k young threshold, 39 passes were 0.9 s
        # of a 100k first sweep; with this one, a few).
        with fewer_collections(young=SWEEP_YOUNG_OBJECTS):
            if dry_run:
                return sweep.run(at, dry_run=True)
            report = schedule.recorded(
                self.governance, "decay-sweep", at, lambda: sweep.run(at, progress=progress)
            )
        if report.moved:
            self.forget_entities()  # forgotten memories took their mentions with them
        return report

    def merge(self, keep: str, drop: Sequence[str], *, across_scopes: bool = False) -> MergeResult:
        """Fold the `drop` memories into `keep` (`memoryd.governance.merge`)."""
        from memoryd.governance.merge import merge

        self.status_speakers.clear()  # the kept memory's body may gain a status line
        self._require_writable("merge memories")
        self.flush_recall_stats()  # the counts being summed are in the files
        result = merge(
            self.governance_stores(),
            keep,
            drop,
            across_scopes=across_scopes,
            now=self.clock(),
            merge_promotions=lambda slugs, now: self.governance.merge_promotions(
                slugs, now, into=keep, by=self.actor
            ),
        )
        self.forget_entities()
        return result

    def duplicates(self, *, scope: Path | str | None = None) -> list[DuplicatePair]:
        """Candidate pairs to merge: equal fingerprints and near-duplicates."""
        from memoryd.governance.merge import duplicates

        return duplicates(self.governance_stores(), scope_hash=self.scope_hash_of(scope))

    def schedule(self) -> list[JobStatus]:
        """Each maintenance job: its calendar, last run and next run."""
        from memoryd.governance import schedule

        return schedule.status(self.governance.last_runs(), self.clock())

    def due_jobs(self, since: datetime) -> list[str]:
        """The built jobs whose time came since their last run (or, never run, since
        `since`: the daemon's start), and the failed ones whose retry time came."""
        from memoryd.governance import schedule

        now, runs = self.clock(), self.governance.last_runs()
        due = []
        for job in schedule.JOBS:
            last = runs.get(job.name)
            failed = last is not None and last[2].startswith("error")
            if job.due(now, last[0] if last else None, since, failed=failed):
                due.append(job.name)
        return due

    def run_job(self, name: str) -> None:
        """Run one scheduled job now, as scheduled (its run is recorded). The daemon's
        scheduler runs the digest beside the writer and the identity's LLM call off it."""
        from memoryd.governance import schedule

        self._require_writable(f"run the scheduled {name}")
        if name == "decay-sweep":
            self.decay_sweep()
        elif name == "identity":
            self.profile_rewrite(scheduled=True)
        elif name == "monthly-report":
            self.profile_report(scheduled=True)
        elif name == "digest":
            self.send_scheduled_digest()
        else:
            schedule.job(name)  # NotFound for a name that is no job
            raise InvalidInput(f"the scheduled job {name} is {schedule.NOT_BUILT}")

    def run_due_jobs(self, since: datetime) -> list[str]:
        """Run the due jobs (`due_jobs`); what an embedded scheduler calls (the daemon runs
        the identity job's LLM call off its writer instead). Returns their names; a failure
        is recorded in governance.db and logged, and the next job still runs."""
        self._require_writable("run scheduled jobs")
        ran = []
        for name in self.due_jobs(since):
            try:
                self.run_job(name)
            except MemorydError as exc:
                logger.warning("scheduled %s failed: %s", name, exc)
            ran.append(name)
        return ran

    def restore(self, slug: str) -> RestoreResult:
        """Bring a forgotten (or dim, soft-forgotten) memory back to alive."""
        self._require_writable("restore a memory")
        self.flush_recall_stats()  # a recall that revived it already is in its file
        result = restore(self.governance_stores(), slug, self.clock())
        self.forget_entities()
        return result
