"""The maintenance calendar (DESIGN §2, seeds/004 cron 编排): which job runs when, whether it
is due, and the record of its runs in governance.db.

The daemon runs due jobs itself (`MemoryService.run_due_jobs`): a job is due when one of its
scheduled times has passed since its last run, so a machine that slept through 03:00 sweeps
when it wakes, once, however many runs it missed. A job that never ran waits for its first
scheduled time after the daemon started (a new install does not sweep on its first start).
`memoryd setup auto-install` installs the same calendar into systemd, launchd or cron for
machines without a daemon (`memoryd.setup.schedules` reads `JOBS`). Times are local wall
clock, as cron's are.

Built: decay-sweep, the weekly `digest --notify`, the identity rewrite and the monthly
profile report. The daemon runs the digest beside its writer (it only reads, and waits on mail
servers) and the identity's LLM call off it. A job with `retry_after` that failed (the LLM or
the mail server down) is due again that long after the failure, until it succeeds: it does not
wait a whole week or month for its next scheduled time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel

from memoryd.errors import MemorydError
from memoryd.models import Timestamp, to_utc

if TYPE_CHECKING:
    from memoryd.governance.store import GovernanceStore

T = TypeVar("T")

Every = Literal["daily", "weekly", "monthly"]
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class Job:
    """One periodic job: its command line and its calendar."""

    name: str
    args: tuple[str, ...]
    description: str
    every: Every
    at: time
    weekday: int = 0  # weekly: 0 = Monday
    day: int = 1  # monthly: day of the month
    built: bool = True
    on_writer: bool = True
    """The daemon runs it on the writer thread; False: beside it, as a read (the digest
    waits on mail servers, never on the writer)."""
    os_timer: bool = True
    """`memoryd setup auto-install` also gives it an OS timer. Not the digest: setup installs
    the daemon, which sends it; a timer beside it would mail twice."""
    retry_after: timedelta | None = None
    """A failed run is retried this long after it (None: at the next scheduled time)."""

    @property
    def when(self) -> str:
        hhmm = self.at.strftime("%H:%M")
        if self.every == "daily":
            return f"daily {hhmm}"
        if self.every == "weekly":
            return f"weekly {_DAYS[self.weekday]} {hhmm}"
        return f"monthly on day {self.day} {hhmm}"

    # the same calendar in each scheduler's terms
    @property
    def on_calendar(self) -> str:
        hhmm = self.at.strftime("%H:%M")
        if self.every == "daily":
            return f"*-*-* {hhmm}:00"
        if self.every == "weekly":
            return f"{_DAYS[self.weekday]} *-*-* {hhmm}:00"
        return f"*-*-{self.day:02d} {hhmm}:00"

    @property
    def cron(self) -> str:
        base = f"{self.at.minute} {self.at.hour}"
        if self.every == "daily":
            return f"{base} * * *"
        if self.every == "weekly":
            return f"{base} * * {(self.weekday + 1) % 7}"
        return f"{base} {self.day} * *"

    @property
    def launchd(self) -> dict[str, int]:
        when = {"Hour": self.at.hour, "Minute": self.at.minute}
        if self.every == "weekly":
            when["Weekday"] = (self.weekday + 1) % 7
        if self.every == "monthly":
            when["Day"] = self.day
        return when

    def previous(self, now: datetime, tz: tzinfo | None = None) -> datetime:
        """The latest scheduled time at or before `now` (in UTC)."""
        local = to_utc(now).astimezone(tz)
        candidate = local.replace(hour=self.at.hour, minute=self.at.minute, second=0, microsecond=0)
        if self.every == "daily":
            if candidate > local:
                candidate -= timedelta(days=1)
        elif self.every == "weekly":
            candidate -= timedelta(days=(candidate.weekday() - self.weekday) % 7)
            if candidate > local:
                candidate -= timedelta(days=7)
        else:
            candidate = candidate.replace(day=self.day)
            if candidate > local:
                month = candidate.month - 1 or 12
                year = candidate.year - (candidate.month == 1)
                candidate = candidate.replace(year=year, month=month)
        return to_utc(candidate)

    def next(self, now: datetime, tz: tzinfo | None = None) -> datetime:
        """The first scheduled time after `now` (in UTC)."""
        last = self.previous(now, tz).astimezone(tz)
        if self.every == "monthly":
            year, month = last.year + (last.month == 12), last.month % 12 + 1
            return to_utc(last.replace(year=year, month=month))
        return to_utc(last + timedelta(days=1 if self.every == "daily" else 7))

    def due(
        self,
        now: datetime,
        last_run: datetime | None,
        since: datetime,
        tz: tzinfo | None = None,
        *,
        failed: bool = False,
    ) -> bool:
        """Whether to run now: a scheduled time passed since the last run (or, never run,
        since `since`, when the daemon started), or the last run `failed` at least
        `retry_after` ago."""
        if not self.built:
            return False
        retry = self.retry_after
        if failed and last_run is not None and retry is not None:
            return to_utc(now) - to_utc(last_run) >= retry or self.previous(now, tz) > last_run
        return self.previous(now, tz) > to_utc(last_run or since)


RETRY_FAILED_AFTER = timedelta(hours=1)
"""How long a failed digest, identity rewrite or report waits before the next attempt."""

JOBS: tuple[Job, ...] = (
    Job("decay-sweep", ("decay-sweep",), "age unused session memories", "daily", time(3, 0)),
    Job(
        "digest",
        ("digest", "--notify"),
        "weekly review: promotions, duplicates, decay, trends",
        "weekly",
        time(9, 0),
        weekday=0,
        on_writer=False,
        os_timer=False,
        retry_after=RETRY_FAILED_AFTER,
    ),
    Job(
        "identity",
        ("profile", "rewrite", "--scheduled"),
        "rewrite profile/identity.md",
        "weekly",
        time(2, 0),
        weekday=6,
        retry_after=RETRY_FAILED_AFTER,
    ),
    Job(
        "monthly-report",
        ("profile", "report", "--scheduled"),
        "profile change report of the previous month",
        "monthly",
        time(4, 0),
        day=1,
        retry_after=RETRY_FAILED_AFTER,
    ),
)
NOT_BUILT = "not built yet (the next governance issue)"


def job(name: str) -> Job:
    for found in JOBS:
        if found.name == name:
            return found
    from memoryd.errors import NotFound

    raise NotFound(
        f"no scheduled job named {name!r}",
        hint=f"the jobs are {', '.join(j.name for j in JOBS)}",
    )


class JobStatus(BaseModel):
    """One row of `memoryd schedule`."""

    name: str
    command: str
    when: str
    built: bool
    last_started: Timestamp | None = None
    last_finished: Timestamp | None = None
    last_outcome: str | None = None
    next_run: Timestamp | None = None
    note: str = ""


def status(
    runs: dict[str, tuple[datetime, datetime, str]], now: datetime, tz: tzinfo | None = None
) -> list[JobStatus]:
    """Every job with its last run (from governance.db) and its next one."""
    rows = []
    for j in JOBS:
        last = runs.get(j.name)
        rows.append(
            JobStatus(
                name=j.name,
                command="memoryd " + " ".join(j.args),
                when=j.when,
                built=j.built,
                last_started=last[0] if last else None,
                last_finished=last[1] if last else None,
                last_outcome=last[2] if last else None,
                next_run=j.next(now, tz) if j.built else None,
                note="" if j.built else NOT_BUILT,
            )
        )
    return rows


def recorded(store: GovernanceStore, name: str, started: datetime, run: Callable[[], T]) -> T:
    """Run a job and record the run (by hand or scheduled: either way today's run is done),
    its failure included, before the error goes on."""
    import time as clock

    began = clock.monotonic()
    try:
        result = run()
    except MemorydError as exc:
        finished = started + timedelta(seconds=clock.monotonic() - began)
        store.record_run(name, started, finished, f"error: {exc.message}")
        raise
    finished = started + timedelta(seconds=clock.monotonic() - began)
    summary = getattr(result, "counts", None)
    store.record_run(name, started, finished, f"ok: {summary}" if summary is not None else "ok")
    return result
