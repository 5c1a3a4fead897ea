"""Issue 16, the digest: its sections over real stores, the CLI (text, JSON, bad input),
`--notify` through a real local SMTP server (aiosmtpd) and a fake `notify-send` on PATH (a
real subprocess that records its argv), and the weekly job, in process and in a real daemon.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import keyring
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from keyrings.alt.file import PlaintextKeyring
from rich.console import Console
from typer.testing import CliRunner

from memoryd.cli.digest_view import render
from memoryd.cli.main import app
from memoryd.config import DigestSettings, Settings, SmtpSettings, load_settings
from memoryd.errors import ConfigError, InvalidInput
from memoryd.governance.digest import DigestSection, plain_text
from memoryd.governance.schedule import job
from memoryd.governance.store import GovernanceStore
from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.vault import parse
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client

DURA = Path(__file__).parents[1] / "data" / "dura"
NEAR = (
    "The nightly export job writes parquet files to the shared bucket, compresses them with"
    " zstd level three, keeps fourteen days of history and pages the on-call engineer when a"
    " run takes longer than forty minutes or fails twice in a row for the same table{}"
)
cli = CliRunner()


@dataclass
class Vault:
    """What `populate` recorded: one item of each digest section (and a few that are not)."""

    now: datetime
    promotions: list[int]
    evidence: list[str]
    candidate: tuple[str, str]
    fingerprint_pair: tuple[str, str]
    near_pair: tuple[str, str]
    overdue: str
    soon: str
    fresh: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def labelled(svc: MemoryService, project: Path, name: str) -> str:
    memory = parse((DURA / name).read_text("utf-8"), DURA / name)
    draft = MemoryDraft(
        type=MemoryType.SESSION, title=memory.meta.title, body=memory.body, scope_path=project
    )
    return svc.record(draft).slug


def populate(svc: MemoryService, project: Path) -> Vault:
    """Two pending promotions (heuristic DURA), a supersede candidate, a fingerprint pair, a
    near-duplicate pair written this week, and session memories fading overdue, in two
    days, and not at all."""
    now = datetime.now(UTC).replace(microsecond=0)
    svc.clock = lambda: now
    promotions, evidence = [], []
    for name in ("en-20-docker-lesson.md", "zh-05-never-float-money.md"):
        report = svc.analyze_session(labelled(svc, project, name), mode="heuristic")
        assert report.promotion_id is not None
        assert report.queue == "new"
        promotions.append(report.promotion_id)
        evidence += report.proposal.evidence
    assert evidence

    def draft(title: str, body: str, type: str, **more: Any) -> MemoryDraft:
        return MemoryDraft.model_validate(
            {"type": type, "title": title, "body": body, "scope_path": project, **more}
        )

    older = svc.record(
        draft(
            "Databases",
            "All backend services use PostgreSQL.",
            "decision",
            created_at=now - timedelta(days=30),
        )
    )
    newer = svc.record(
        draft(
            "Billing on CockroachDB",
            "Moved only the billing service from Postgres to CockroachDB.",
            "decision",
            created_at=now - timedelta(days=20),
        )
    )
    box = "The build box runs Ubuntu 24.04 and docker buildx."
    twin = svc.record(
        draft("Build box", box, "fact", created_at=now - timedelta(days=60))
    ).meta.slug
    copy = svc.record(
        draft("Build box copy", box, "fact", allow_duplicate=True, created_at=now)
    ).meta.slug
    near_a = svc.record(
        draft("Nightly export", NEAR.format("."), "fact", created_at=now - timedelta(days=2))
    ).meta.slug
    near_b = svc.record(
        draft("Nightly export job", NEAR.format(" again."), "fact", created_at=now)
    ).meta.slug
    overdue = svc.record(
        draft(
            "Session: printer drivers",
            "We fought the office printer drivers for an afternoon.",
            "session",
            created_at=now - timedelta(days=200),
        )
    ).meta.slug
    soon = svc.record(
        draft(
            "Session: flaky clock",
            "The CI clock skew made two tests flaky; we pinned the runner image.",
            "session",
            created_at=now - timedelta(days=88),
        )
    ).meta.slug
    fresh = svc.record(
        draft(
            "Session: new linter rule",
            "Added a lint rule against bare excepts.",
            "session",
            created_at=now - timedelta(days=10),
        )
    ).meta.slug
    return Vault(
        now=now,
        promotions=promotions,
        evidence=evidence,
        candidate=(newer.meta.slug, older.meta.slug),
        fingerprint_pair=(twin, copy),
        near_pair=(near_a, near_b),
        overdue=overdue,
        soon=soon,
        fresh=fresh,
    )


@pytest.fixture
def service(settings: Settings) -> Iterator[MemoryService]:
    with open_service(settings) as svc:
        yield svc


# -- the sections -------------------------------------------------------------------------------
def test_each_section_lists_what_waits_with_totals_and_limits(
    service: MemoryService, project: Path, other_project: Path
) -> None:
    v = populate(service, project)
    d = service.digest(scope=project)
    assert [p.id for p in d.promotions] == sorted(v.promotions, reverse=True)  # newest first
    assert {p.dura.by for p in d.promotions} == {"heuristic-v1"}
    assert sorted(q for p in d.promotions for q in p.evidence) == sorted(v.evidence)
    assert [(r.newer, r.older, r.status) for r in d.supersede_candidates] == [
        (*v.candidate, "candidate")
    ]
    assert [(p.keep, p.drop, p.kind) for p in d.duplicates] == [
        (*v.fingerprint_pair, "fingerprint"),
        (*v.near_pair, "near"),
    ]
    assert 0.8 <= d.duplicates[1].similarity < 1.0
    # overdue (idle 200 days: dim was due at day 90) first, then dim in two days
    assert [(f.slug, f.from_state, f.to_state) for f in d.fading] == [
        (v.overdue, DecayState.ALIVE, DecayState.SOFT_FORGOTTEN),
        (v.soon, DecayState.ALIVE, DecayState.DIM),
    ]
    created = {s: service.get(s).meta.created_at for s in (v.overdue, v.soon)}
    assert d.fading[0].due_at == created[v.overdue] + timedelta(days=90)
    assert d.fading[1].due_at == created[v.soon] + timedelta(days=90)
    assert d.totals == {"promotions": 2, "supersede": 1, "duplicates": 2, "fading": 2}
    assert d.trends is not None  # the project's entities, first mentioned this week
    assert d.trends.data["scope_hash"] == d.scope_hash
    assert d.days == 7
    assert d.at == v.now

    capped = service.digest(scope=project, limit=1, days=1)
    assert [len(capped.promotions), len(capped.duplicates), len(capped.fading)] == [1, 1, 1]
    assert capped.totals["fading"] == 1  # the one due in two days is not within one day
    assert capped.totals["promotions"] == 2
    assert capped.totals["duplicates"] == 1  # near pairs: written within the last day only
    assert service.digest(scope=other_project).totals == {
        "promotions": 0,
        "supersede": 0,
        "duplicates": 0,
        "fading": 0,
    }
    # a sweep at the horizon moves exactly what the digest said would fade
    moved = service.sweep_at(v.now + timedelta(days=7), dry_run=True).moved
    assert sorted((m.slug, m.to_state) for m in moved) == sorted(
        (f.slug, f.to_state) for f in d.fading
    )
    with pytest.raises(InvalidInput, match="days 0"):
        service.digest(days=0)
    with pytest.raises(InvalidInput, match="limit 5000"):
        service.digest(limit=5000)


def test_plain_and_rich_text_show_every_section_and_the_trends(
    service: MemoryService, project: Path
) -> None:
    v = populate(service, project)
    d = service.digest()
    text = plain_text(d)
    for expected in (
        "Pending promotions (2)",
        "by heuristic-v1",
        f"> {v.evidence[0]}",
        "Supersede candidates (1)",
        f"{v.candidate[0]} replaces {v.candidate[1]}?",
        "Duplicate pairs (2)",
        "Fading within 7 days (2)",
        f"{v.soon} → dim on",
    ):
        assert expected in text
    # the window's trends: what the populated sessions mention, new this week
    assert "Trends (last 7 days; `memoryd trends` for all)\n  rising: " in text
    assert d.trends is not None
    assert d.trends.data["rising_entities"]
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(d))
    shown = console.export_text()
    console.file.close()
    assert f"> {v.evidence[0]}" in shown
    assert "rising: " in shown
    assert f"{v.overdue}  alive → soft-forgotten at the next sweep" in shown
    trends = DigestSection(title="Trends (7 days)", lines=["rising: Kuzu +12 mentions"])
    with_trends = d.model_copy(update={"trends": trends})
    assert "Trends (7 days)\n  rising: Kuzu +12 mentions" in plain_text(with_trends)
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(with_trends))
    assert "rising: Kuzu +12 mentions" in console.export_text()
    console.file.close()


def test_cli_digest_text_json_and_bad_input(settings: Settings, project: Path) -> None:
    with open_service(settings) as svc:
        v = populate(svc, project)
    home = ["--home", str(settings.home)]
    shown = cli.invoke(app, ["digest", *home])
    assert shown.exit_code == 0, shown.output
    assert "Pending promotions (2)" in shown.stdout
    assert f"> {v.evidence[0]}" in shown.stdout
    assert "Supersede candidates (1)" in shown.stdout
    as_json = cli.invoke(app, ["digest", "--json", "--limit", "1", *home])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["totals"]["promotions"] == 2
    assert len(data["promotions"]) == 1
    assert data["promotions"][0]["dura"]["by"] == "heuristic-v1"
    assert data["trends"]["data"]["rising_entities"]
    bad = cli.invoke(app, ["digest", "--days", "0", *home])
    assert bad.exit_code == 2
    both = cli.invoke(app, ["digest", "--tui", "--json", *home])
    assert both.exit_code == 2
    assert "--tui shows the queue itself" in both.stderr


# -- --notify -------------------------------------------------------------------------------------
@dataclass
class Mailbox:
    port: int
    messages: list[tuple[str, list[str], EmailMessage]] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.original_content or envelope.content
        self.messages.append(
            (
                envelope.mail_from,
                list(envelope.rcpt_tos),
                message_from_bytes(content, policy=policy.default),
            )
        )
        return "250 OK"

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        login = (data.login.decode(), data.password.decode())
        self.logins.append(login)
        return AuthResult(success=login == ("digest-bot", "s3cret-pw"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    box = Mailbox(port=free_port())
    server = Controller(
        box,
        hostname="127.0.0.1",
        port=box.port,
        authenticator=box.authenticate,
        auth_require_tls=False,
    )
    server.start()
    try:
        yield box
    finally:
        server.stop()


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[PlaintextKeyring]:
    """The OS keyring is the one thing faked: a file in tmp_path."""
    previous = keyring.get_keyring()
    fake = PlaintextKeyring()
    fake.file_path = str(tmp_path / "keyring_pass.cfg")
    keyring.set_keyring(fake)
    try:
        yield fake
    finally:
        keyring.set_keyring(previous)


def fake_notifier(tmp_path: Path) -> tuple[Path, Path]:
    """A `notify-send` on PATH that records its argv, one per line."""
    bin_dir, log = tmp_path / "bin", tmp_path / "notify-send.argv"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "notify-send"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{log}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir, log


def smtp_config(tmp_path: Path, port: int, **extra: str) -> None:
    """Write the `[digest.smtp]` section into the config file the tests use."""
    lines = [
        "[digest.smtp]",
        'host = "127.0.0.1"',
        f"port = {port}",
        'security = "none"',
        'from = "memoryd@example.org"',
        'to = ["dev@example.org", "lead@example.org"]',
        *(f"{key} = {value}" for key, value in extra.items()),
    ]
    Path(os.environ["MEMORYD_CONFIG"]).write_text("\n".join(lines) + "\n")


def test_notify_sends_mail_and_a_desktop_notification(
    settings: Settings,
    project: Path,
    tmp_path: Path,
    mailbox: Mailbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with open_service(settings) as svc:
        v = populate(svc, project)
    bin_dir, argv_log = fake_notifier(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DIGEST_SMTP_PASSWORD", "s3cret-pw")
    smtp_config(
        tmp_path, mailbox.port, username='"digest-bot"', password_env='"DIGEST_SMTP_PASSWORD"'
    )
    sent = cli.invoke(app, ["digest", "--notify", "--home", str(settings.home)])
    assert sent.exit_code == 0, sent.output
    assert "email: sent (to dev@example.org, lead@example.org via 127.0.0.1)" in sent.stdout
    assert mailbox.logins == [("digest-bot", "s3cret-pw")]
    [(sender, recipients, mail)] = mailbox.messages
    assert sender == "memoryd@example.org"
    assert recipients == ["dev@example.org", "lead@example.org"]
    assert mail["To"] == "dev@example.org, lead@example.org"
    assert mail["Subject"] == (
        "memoryd digest: 2 promotions, 1 supersede candidates, 2 duplicates, 2 fading"
    )
    text = mail.get_content()
    assert "Pending promotions (2)" in text
    assert f"> {v.evidence[0]}" in text
    assert f"{v.candidate[0]} replaces {v.candidate[1]}?" in text
    argv = argv_log.read_text().splitlines()
    assert argv[:2] == ["--app-name=memoryd", "memoryd digest"]
    assert argv[2].startswith("2 promotions, 1 supersede candidates")
    assert "desktop: sent" in sent.stdout


def test_notify_reads_the_password_from_the_keyring(
    settings: Settings,
    tmp_path: Path,
    mailbox: Mailbox,
    ring: PlaintextKeyring,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no desktop notifier here
    smtp_config(tmp_path, mailbox.port, username='"digest-bot"')
    home = ["--home", str(settings.home)]
    missing = cli.invoke(app, ["digest", "--notify", *home])
    assert missing.exit_code == 8
    assert "no SMTP password for digest.smtp.username 'digest-bot'" in missing.stderr
    assert "keyring set memoryd smtp:digest-bot@127.0.0.1" in missing.stderr
    assert mailbox.messages == []
    ring.set_password("memoryd", "smtp:digest-bot@127.0.0.1", "s3cret-pw")
    sent = cli.invoke(app, ["digest", "--notify", *home])
    assert sent.exit_code == 0, sent.output
    assert mailbox.logins == [("digest-bot", "s3cret-pw")]
    assert len(mailbox.messages) == 1
    assert "desktop: skipped (no desktop notifier here" in sent.stdout
    assert "Nothing waits for a decision" in mailbox.messages[0][2].get_content()


def test_smtp_misconfiguration_names_the_key(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    home = ["--home", str(settings.home)]
    smtp_config(tmp_path, 2525, password='"hunter2"')
    refused = cli.invoke(app, ["digest", "--notify", *home])
    assert refused.exit_code == 8
    assert "digest.smtp.password is not read from the config file" in refused.stderr
    with pytest.raises(ConfigError, match=r"digest\.smtp\.password is not read"):
        load_settings(settings.home)
    smtp_config(tmp_path, 2525, password_env='"NO_SUCH_VARIABLE"', username='"bot"')
    unset = cli.invoke(app, ["digest", "--notify", *home])
    assert unset.exit_code == 8
    assert "digest.smtp.password_env names $NO_SUCH_VARIABLE, which is not set" in unset.stderr
    Path(os.environ["MEMORYD_CONFIG"]).write_text('[digest.smtp]\nhost = "127.0.0.1"\n')
    incomplete = cli.invoke(app, ["digest", "--notify", *home])
    assert incomplete.exit_code == 8
    assert "digest.smtp.from" in incomplete.stderr
    assert "digest.smtp.to" in incomplete.stderr
    closed = free_port()  # nothing listens there
    smtp_config(tmp_path, closed)
    down = cli.invoke(app, ["digest", "--notify", *home])
    assert down.exit_code == 1
    assert f"email: failed (cannot send through digest.smtp.host 127.0.0.1:{closed}" in (
        down.stderr
    )


# -- the weekly job ---------------------------------------------------------------------------
def test_the_weekly_job_records_a_failure_retries_and_never_raises(
    service: MemoryService,
    project: Path,
    tmp_path: Path,
    mailbox: Mailbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    closed = free_port()
    smtp = SmtpSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": closed,
            "security": "none",
            "from": "memoryd@example.org",
            "to": ["dev@example.org"],
        }
    )
    service.digest_settings = DigestSettings(smtp=smtp)
    at = job("digest").next(datetime(2026, 3, 4, tzinfo=UTC))  # Monday 09:00, local time
    service.clock = lambda: at - timedelta(minutes=1)
    since = at - timedelta(days=1)

    def run_digest_job(since: datetime) -> list[str]:
        """What the daemon's scheduler does for the digest: run it when it is due."""
        due = [name for name in service.due_jobs(since) if name == "digest"]
        for name in due:
            service.run_job(name)
        return due

    assert run_digest_job(since) == []  # 09:00 has not come yet
    service.clock = lambda: at + timedelta(minutes=5)
    assert run_digest_job(since) == ["digest"]  # the server is down: recorded
    started, _, outcome = service.governance.last_runs()["digest"]
    assert started == at + timedelta(minutes=5)
    assert outcome.startswith(
        f"error: email: cannot send through digest.smtp.host 127.0.0.1:{closed}"
    )
    service.clock = lambda: at + timedelta(minutes=30)
    assert run_digest_job(since) == []  # retried an hour after, not at once
    service.digest_settings = DigestSettings(smtp=smtp.model_copy(update={"port": mailbox.port}))
    service.clock = lambda: at + timedelta(hours=1, minutes=6)
    assert run_digest_job(since) == ["digest"]
    assert service.governance.last_runs()["digest"][2].startswith("ok: desktop skipped")
    assert len(mailbox.messages) == 1
    service.clock = lambda: at + timedelta(days=2)
    assert run_digest_job(since) == []  # done for this week
    listed = {j.name: j for j in service.schedule()}
    assert listed["digest"].built
    assert listed["digest"].note == ""
    assert listed["digest"].last_outcome is not None
    assert listed["digest"].last_outcome.startswith("ok")


def test_the_daemon_runs_the_weekly_digest_and_survives_a_failed_send(
    home: Path,
    project: Path,
    settings: Settings,
    tmp_path: Path,
    mailbox: Mailbox,
) -> None:
    with open_service(settings) as svc:
        populate(svc, project)
    now = datetime.now(UTC)
    with GovernanceStore.open(home / "governance.db") as store:  # last run: two weeks ago
        store.record_run("digest", now - timedelta(days=14), now - timedelta(days=14), "ok")
    bin_dir, argv_log = fake_notifier(tmp_path)
    smtp_config(tmp_path, mailbox.port)
    env = {"MEMORYD_SCHEDULE__POLL_S": "0.2", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    with running(home, env=env) as daemon, uds_client(home) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not mailbox.messages:
            time.sleep(0.1)
        [(_, recipients, mail)] = mailbox.messages
        assert recipients == ["dev@example.org", "lead@example.org"]
        assert mail["Subject"].startswith("memoryd digest: 2 promotions")
        assert argv_log.read_text().splitlines()[1] == "memoryd digest"
        jobs = {j["name"]: j for j in client.get("/v1/schedule").json()}
        assert jobs["digest"]["last_outcome"].startswith("ok: desktop sent")
        served = client.get("/v1/digest", params={"limit": 1}).json()
        assert served["totals"]["promotions"] == 2
        assert len(served["promotions"]) == 1
        assert client.get("/v1/digest", params={"days": 0}).status_code == 422
        assert daemon.stop() == 0
    # another data dir whose mail server is gone: the run fails, is recorded, and the daemon
    # goes on serving
    down = tmp_path / "down"
    with open_service(load_settings(down)):
        pass
    with GovernanceStore.open(down / "governance.db") as store:
        store.record_run("digest", now - timedelta(days=14), now - timedelta(days=14), "ok")
    smtp_config(tmp_path, free_port())
    with running(down, env=env) as daemon, uds_client(down) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = {j["name"]: j for j in client.get("/v1/schedule").json()}
            if (jobs["digest"]["last_outcome"] or "").startswith("error"):
                break
            time.sleep(0.1)
        assert "email: cannot send through digest.smtp.host" in jobs["digest"]["last_outcome"]
        assert client.get("/v1/health").status_code == 200
        assert daemon.stop() == 0
