"""The maintenance calendar: due times, catch-up after downtime, runs recorded in
governance.db, `memoryd schedule`, and a real daemon that catches up a missed decay sweep and
serves the governance routes to the CLI."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.governance.schedule import JOBS, job
from memoryd.governance.store import GovernanceStore
from memoryd.models import DecayState, MemoryDraft
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_calendar_previous_next_and_cron_forms() -> None:
    sweep, digest, identity, report = (
        job(n) for n in ("decay-sweep", "digest", "identity", "monthly-report")
    )
    now = at("2026-03-04T02:59")  # a Wednesday
    assert sweep.previous(now, UTC) == at("2026-03-03T03:00")
    assert sweep.next(now, UTC) == at("2026-03-04T03:00")
    assert sweep.next(at("2026-03-04T03:00"), UTC) == at("2026-03-05T03:00")
    assert digest.previous(now, UTC) == at("2026-03-02T09:00")  # Monday
    assert digest.next(now, UTC) == at("2026-03-09T09:00")
    assert identity.previous(now, UTC) == at("2026-03-01T02:00")  # Sunday
    assert report.previous(now, UTC) == at("2026-03-01T04:00")
    assert report.next(now, UTC) == at("2026-04-01T04:00")
    assert report.next(at("2026-12-15T00:00"), UTC) == at("2027-01-01T04:00")
    assert report.previous(at("2026-01-01T03:00"), UTC) == at("2025-12-01T04:00")
    assert (sweep.cron, digest.cron, identity.cron, report.cron) == (
        "0 3 * * *",
        "0 9 * * 1",
        "0 2 * * 0",
        "0 4 1 * *",
    )
    assert sweep.on_calendar == "*-*-* 03:00:00"
    assert digest.on_calendar == "Mon *-*-* 09:00:00"
    assert report.launchd == {"Hour": 4, "Minute": 0, "Day": 1}
    assert [j.name for j in JOBS if j.built] == [
        "decay-sweep",
        "digest",
        "identity",
        "monthly-report",
    ]
    assert [j.name for j in JOBS if j.built and not j.on_writer] == ["digest"]


def test_due_catches_up_once_and_never_runs_unbuilt_jobs() -> None:
    sweep, digest = job("decay-sweep"), job("digest")
    started = at("2026-03-04T01:00")
    assert not sweep.due(at("2026-03-04T02:00"), None, started, UTC)  # no 03:00 yet
    assert sweep.due(at("2026-03-04T03:00"), None, started, UTC)
    # the machine slept three days: one run catches up, then nothing until the next 03:00
    last = at("2026-03-01T03:00")
    assert sweep.due(at("2026-03-04T10:00"), last, started, UTC)
    assert not sweep.due(at("2026-03-04T10:00"), at("2026-03-04T10:00"), started, UTC)
    assert sweep.due(at("2026-03-05T03:00"), at("2026-03-04T10:00"), started, UTC)
    assert digest.due(at("2026-03-09T09:00"), None, started, UTC)  # the Monday after
    assert job("identity").due(at("2027-01-01T00:00"), None, started, UTC)
    unbuilt = replace(job("identity"), built=False)
    assert not unbuilt.due(at("2027-01-01T00:00"), None, started, UTC)


def test_a_failed_job_with_retry_after_is_due_again_an_hour_later() -> None:
    identity, sweep = job("identity"), job("decay-sweep")
    started, failed_at = at("2026-03-01T00:00"), at("2026-03-08T02:00")
    assert not identity.due(at("2026-03-08T02:59"), failed_at, started, UTC, failed=True)
    assert identity.due(at("2026-03-08T03:00"), failed_at, started, UTC, failed=True)
    assert not identity.due(at("2026-03-08T03:00"), failed_at, started, UTC)  # it succeeded
    # a job without retry_after waits for its next scheduled time, as before
    assert not sweep.due(at("2026-03-08T04:30"), at("2026-03-08T03:00"), started, UTC, failed=True)


def test_run_due_jobs_records_runs(svc: MemoryService, project: Path, home: Path) -> None:
    now = at("2026-03-04T12:00")  # a Wednesday: no weekly or monthly job comes due here
    svc.clock = lambda: now
    old = svc.record(
        MemoryDraft(
            type="session",
            title="Old session",
            body="We chased a memory leak in the image resizer.",
            scope_path=project,
            created_at=now - timedelta(days=100),
        )
    ).slug
    assert svc.run_due_jobs(since=now) == []  # nothing scheduled passed since the start
    assert svc.run_due_jobs(since=now - timedelta(days=2)) == ["decay-sweep"]
    assert svc.get(old).meta.decay_state is DecayState.DIM
    assert svc.run_due_jobs(since=now - timedelta(days=2)) == []  # ran: not due again
    runs = svc.governance.last_runs()
    assert set(runs) == {"decay-sweep"}
    assert runs["decay-sweep"][2] == "ok: {'dim': 1, 'soft-forgotten': 0, 'forgotten': 0}"
    svc.clock = lambda: now + timedelta(days=3)  # three days down: one catch-up run
    assert svc.run_due_jobs(since=now) == ["decay-sweep"]
    assert svc.run_due_jobs(since=now) == []
    listed = {j.name: j for j in svc.schedule()}
    assert listed["decay-sweep"].last_started == now + timedelta(days=3)
    assert listed["decay-sweep"].next_run is not None
    assert listed["decay-sweep"].next_run > now + timedelta(days=3)
    assert listed["identity"].note == ""


def test_schedule_cli(home: Path, settings: Settings) -> None:
    runner = CliRunner()
    runner.invoke(app, ["decay-sweep", "--home", str(home)])  # by hand: counts as today's run
    shown = runner.invoke(app, ["schedule", "--json", "--home", str(home)])
    assert shown.exit_code == 0, shown.output
    jobs = {j["name"]: j for j in json.loads(shown.stdout)}
    assert list(jobs) == ["decay-sweep", "digest", "identity", "monthly-report"]
    assert jobs["decay-sweep"]["last_outcome"].startswith("ok")
    assert jobs["decay-sweep"]["when"] == "daily 03:00"
    assert jobs["identity"]["when"] == "weekly Sun 02:00"
    assert jobs["monthly-report"]["note"] == ""
    assert jobs["monthly-report"]["command"] == "memoryd profile report --scheduled"
    assert jobs["digest"]["note"] == ""
    assert jobs["digest"]["command"] == "memoryd digest --notify"
    table = runner.invoke(app, ["schedule", "--home", str(home)])
    assert "not built yet" not in table.stdout
    assert "daily 03:00" in table.stdout


def test_daemon_catches_up_a_missed_sweep_and_serves_governance(
    home: Path, project: Path, settings: Settings
) -> None:
    now = datetime.now(UTC)
    with open_service(settings) as svc:
        old = svc.record(
            MemoryDraft(
                type="session",
                title="Ancient session",
                body="We replaced supervisord with systemd units on the build box.",
                scope_path=project,
                created_at=now - timedelta(days=400),
            )
        ).slug
        twin = svc.record(
            MemoryDraft(
                type="decision",
                title="Build box",
                body="The build box runs Ubuntu 24.04 and docker buildx.",
                scope_path=project,
                created_at=now - timedelta(minutes=2),  # the older: the one to keep
            )
        ).slug
        copy = svc.record(
            MemoryDraft(
                type="decision",
                title="Build box copy",
                body="The build box runs Ubuntu 24.04 and docker buildx.",
                scope_path=project,
                allow_duplicate=True,
            )
        ).slug
    with GovernanceStore.open(home / "governance.db") as store:
        store.record_run("decay-sweep", now - timedelta(days=3), now - timedelta(days=3), "ok")
    env = {"MEMORYD_SCHEDULE__POLL_S": "0.2"}
    with running(home, env=env) as daemon, uds_client(home) as client:
        deadline = now + timedelta(seconds=30)
        while datetime.now(UTC) < deadline:
            jobs = {j["name"]: j for j in client.get("/v1/schedule").json()}
            if jobs["decay-sweep"]["last_started"] > (now - timedelta(days=1)).isoformat():
                break
            time.sleep(0.1)
        assert jobs["decay-sweep"]["last_outcome"].startswith("ok")
        assert client.get(f"/v1/memories/{old}").json()["meta"]["decay_state"] == "forgotten"
        runner = CliRunner()
        base = ["--home", str(home)]
        assert "nothing to move" in runner.invoke(app, ["decay-sweep", *base]).stdout
        dupes = json.loads(runner.invoke(app, ["duplicates", "--json", *base]).stdout)
        assert [(d["keep"], d["drop"], d["kind"]) for d in dupes] == [(twin, copy, "fingerprint")]
        merged = runner.invoke(app, ["merge", "--keep", twin, "--drop", copy, "--json", *base])
        assert merged.exit_code == 0, merged.output
        assert runner.invoke(app, ["restore", old, *base]).exit_code == 0
        assert runner.invoke(app, ["restore", old, *base]).exit_code == 4
        assert runner.invoke(app, ["restore", "nope", *base]).exit_code == 3
        bad = client.post("/v1/merge", json={"keep": twin, "drop": []})
        assert bad.status_code == 422
        actors = {e["actor"] for e in client.get("/v1/audit").json()["items"]}
        assert "cli" in actors
        assert daemon.stop() == 0
