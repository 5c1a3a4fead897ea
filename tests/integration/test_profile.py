"""The identity profile: profile/identity.md driven through three simulated weeks and a month
with the service's fixed clock, compiled without an LLM and rewritten by one (the real
Anthropic SDK over recorded replies: the only fake is the remote API), versions, diffs,
rollback, the monthly report, bad input at the CLI, and inject's identity section. Real
vault, Kuzu, tantivy and governance.db in tmp dirs."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from memoryd.api.runner import ServiceRunner
from memoryd.capture_limits import InjectLimits, load_capture_config
from memoryd.cli.main import app
from memoryd.config import InjectSettings, Settings, load_settings
from memoryd.daemon.scheduler import run_due
from memoryd.errors import ExtractionFailed, InvalidInput, NotFound
from memoryd.governance.profile import IDENTITY_FILE, REPORTS_DIR
from memoryd.llm.anthropic_provider import AnthropicProvider
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.integration.test_inject import _run
from tests.integration.test_llm import Replay

SINCE = datetime(2026, 2, 28, tzinfo=UTC)
"""When the simulated daemon started."""
SOLID = "entity:library:Solid"


EVERY_JOB = ["decay-sweep", "digest", "identity", "monthly-report"]
"""What a run after a month boundary and a Monday and a Sunday does."""


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def service(settings: Settings) -> Iterator[MemoryService]:
    with open_service(settings) as svc:
        yield svc


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A project whose scope becomes sensitive once its memory is recorded (`week_zero`)."""
    path = tmp_path / "secret"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def make_sensitive(svc: MemoryService, slug: str) -> None:
    """Its scope turns sensitive (as `memoryd sensitive` will): the memory stays in the vault
    and the graph, and must never reach the profile nor an LLM."""
    scope = svc.vault.read_scope(svc.get(slug).meta.scope_hash)
    assert scope is not None
    scope.sensitive = True
    svc.vault.write_scope(scope)


def remember(svc: MemoryService, scope: Path, type: str, title: str, body: str, when: str) -> str:
    """Record a memory as of `when` (the clock too: supersedes are decided then)."""
    svc.clock = lambda: at(when)
    draft = MemoryDraft(
        type=MemoryType(type), title=title, body=body, scope_path=scope, created_at=at(when)
    )
    return svc.record(draft).meta.slug


def week_zero(svc: MemoryService, project: Path, secret: Path) -> dict[str, str]:
    """What the developer recorded before the first Sunday."""
    slugs = {
        "react": remember(
            svc,
            project,
            "decision",
            "Use React for the admin UI",
            "The admin UI is built with React.",
            "2026-02-26T10:00",
        ),
        "uv": remember(
            svc,
            project,
            "preference",
            "Prefer uv over pip",
            "Always install Python packages with uv, never pip.",
            "2026-02-27T10:00",
        ),
        "session": remember(
            svc,
            project,
            "session",
            "Session: lint fixes",
            "We fixed lint warnings in the admin UI.",
            "2026-02-27T11:00",
        ),
        "secret": remember(
            svc,
            secret,
            "preference",
            "Payroll exports go to Nextcloud",
            "Always upload the payroll CSV to the Nextcloud share of finance.",
            "2026-02-27T12:00",
        ),
    }
    make_sensitive(svc, slugs["secret"])
    return slugs


def switch_to_solid(svc: MemoryService, project: Path, when: str) -> str:
    return remember(
        svc,
        project,
        "decision",
        "Switch the admin UI from React to Solid",
        "Switch from React to Solid for the admin UI: smaller bundles.",
        when,
    )


def run_at(svc: MemoryService, when: str) -> list[str]:
    svc.clock = lambda: at(when)
    return svc.run_due_jobs(since=SINCE)


def identity(home: Path) -> str:
    return (home / IDENTITY_FILE).read_text("utf-8")


# --------------------------------------------------------------------------- compiled


def test_three_weeks_and_a_month_compiled_without_an_llm(
    service: MemoryService, project: Path, secret: Path, home: Path
) -> None:
    slugs = week_zero(service, project, secret)

    # week 1, Sunday 02:00: the weekly job compiles the first version
    assert run_at(service, "2026-03-01T02:00") == ["decay-sweep", "identity"]
    (v1,) = service.profile_history()
    assert (v1.version, v1.trigger, v1.written_by) == (1, "weekly_cron", "compiled")
    text = identity(home)
    assert text == v1.content_md
    assert "Compiled by memoryd without an LLM from 2 current preferences and decisions" in text
    assert "Use React for the admin UI: The admin UI is built with React. (decision" in text
    assert f"[{slugs['react']}]" in text
    assert f"[{slugs['uv']}]" in text
    assert "Payroll" not in text
    assert slugs["secret"] not in text
    assert slugs["session"] not in text  # sessions are not preferences or decisions
    assert sorted(v1.sources) == sorted([slugs["react"], slugs["uv"]])
    assert v1.sources_count == 2
    assert (v1.window_start, v1.window_end) == (at("2026-02-26T10:00"), at("2026-03-01T02:00"))
    assert v1.diff_from_prev.startswith("--- /dev/null\n+++ identity.md v1\n")
    assert v1.change_summary == "First version: 2 memories."
    assert service.governance.last_runs()["identity"][2] == (
        "ok: {'version': 1, 'written': True, 'sources': 2}"
    )

    # week 2: nothing changed, so no new version, and the run says so. The report of
    # February, due since March 1st 04:00, is caught up: a month with nothing in it
    assert run_at(service, "2026-03-08T02:00") == [
        "decay-sweep",
        "digest",
        "identity",
        "monthly-report",
    ]
    (february,) = service.profile_reports()
    assert (february.period, february.versions_count, february.entities_added) == ("2026-02", 0, 0)
    assert "No profile changes in 2026-02" in february.content_md
    assert [v.version for v in service.profile_history()] == [1]
    assert service.governance.last_runs()["identity"][2] == (
        "ok: {'version': 1, 'written': False, 'sources': 2}"
    )
    again = service.profile_rewrite()
    assert not again.written
    assert again.message == "identity unchanged since version 1: no new version"

    # mid-week 3 the admin UI moves to Solid: the rules supersede the React decision
    solid = switch_to_solid(service, project, "2026-03-10T12:00")
    assert service.graph.superseded_by([slugs["react"]]) == {slugs["react"]: solid}

    # week 3: version 2 drops React's decision and cites Solid's
    assert run_at(service, "2026-03-15T02:00") == ["decay-sweep", "digest", "identity"]
    v2 = service.profile_show()
    assert v2.version == 2
    assert identity(home) == v2.content_md
    assert f"[{solid}]" in v2.content_md
    assert f"[{slugs['react']}]" not in v2.content_md
    assert "## Libraries" in v2.content_md
    assert SOLID in v2.entities
    assert "-- Use React for the admin UI" in v2.diff_from_prev
    assert "+- Switch the admin UI from React to Solid" in v2.diff_from_prev
    assert v2.change_summary.splitlines() == [
        f"Added: Switch the admin UI from React to Solid [{solid}]",
        f"Dropped (superseded, forgotten or deleted): {slugs['react']}",
    ]
    assert service.profile_diff(1, 2).diff == v2.diff_from_prev

    # the month: on April 1st 04:00 the report of March is written (and Sunday's rewrite
    # that was missed since the 29th is caught up, unchanged)
    assert run_at(service, "2026-04-01T04:00") == [
        "decay-sweep",
        "digest",
        "identity",
        "monthly-report",
    ]
    report, _ = service.profile_reports()
    assert report.period == "2026-03"
    assert report.versions_count == 2
    assert report.supersedes_count == 1
    assert report.entities_added == len(v2.entities)
    assert report.entities_dropped == 0
    written = (home / REPORTS_DIR / "2026-03.md").read_text("utf-8")
    assert written == report.content_md
    assert written.startswith("# Profile changes, 2026-03\n")
    assert "- identity versions: 2\n- supersedes: 1\n" in written
    assert f'"Switch the admin UI from React to Solid" [{solid}] replaced' in written
    assert "Solid (library)" in written
    assert "Payroll" not in written
    assert service.governance.last_runs()["monthly-report"][2].startswith("ok")


def test_rollback_and_bad_input(service: MemoryService, project: Path, secret: Path) -> None:
    with pytest.raises(NotFound, match="no identity profile yet"):
        service.profile_show()
    week_zero(service, project, secret)
    service.clock = lambda: at("2026-03-01T09:00")
    v1 = service.profile_rewrite().version
    switch_to_solid(service, project, "2026-03-02T09:00")
    v2 = service.profile_rewrite().version
    assert (v1.trigger, v2.version) == ("manual", 2)

    back = service.profile_rollback(1)
    assert back.written
    assert back.version.version == 3
    assert (back.version.trigger, back.version.written_by) == ("rollback", "rollback of v1")
    assert back.version.content_md == v1.content_md == identity(service.home)
    assert back.version.change_summary == "Rolled back to version 1."
    assert service.profile_diff(1, 3).diff == ""
    assert not service.profile_rollback(3).written  # the same text: no version
    # a compiled rewrite compiles afresh: the current memories win again
    assert service.profile_rewrite().version.content_md == v2.content_md

    for call in (
        lambda: service.profile_show(9),
        lambda: service.profile_diff(1, 9),
        lambda: service.profile_rollback(9),
    ):
        with pytest.raises(NotFound, match="no profile version 9"):
            call()
    for month in ("2026-13", "2026-3", "march", "2026-00"):
        with pytest.raises(InvalidInput, match="is not YYYY-MM"):
            service.profile_report(month)
    with pytest.raises(NotFound, match="2026-04 has not begun"):
        service.profile_report("2026-04")
    with pytest.raises(InvalidInput, match="limit"):
        service.profile_history(limit=0)


def test_a_month_without_data_says_so(service: MemoryService) -> None:
    service.clock = lambda: at("2026-03-05T10:00")
    report = service.profile_report()  # the previous month, as the job on the 1st does
    assert (report.period, report.empty) == ("2026-02", True)
    assert (report.versions_count, report.supersedes_count) == (0, 0)
    assert "No profile changes in 2026-02" in Path(report.path).read_text("utf-8")
    # the month under way is reported as far as it went
    current = service.profile_report("2026-03")
    assert "_The month is not over: this covers it up to 2026-03-05._" in current.content_md
    assert [r.period for r in service.profile_reports()] == ["2026-03", "2026-02"]


# --------------------------------------------------------------------------- the LLM


@pytest.fixture
def claude() -> Iterator[tuple[Replay, list[AnthropicProvider]]]:
    replay = Replay(
        "anthropic",
        "rewrite_identity_week1",
        "server_error_500",
        "rewrite_identity_week3",
        "rewrite_identity_week3",
        "rewrite_identity_week3",
    )
    made: list[AnthropicProvider] = []
    yield replay, made
    for provider in made:
        provider.close()


def test_three_weeks_and_a_month_with_the_llm(
    service: MemoryService,
    project: Path,
    secret: Path,
    home: Path,
    claude: tuple[Replay, list[AnthropicProvider]],
) -> None:
    replay, made = claude
    slugs = week_zero(service, project, secret)
    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-haiku-4-5",
        timeout_s=5.0,
        max_retries=0,
        transport=replay.transport,
        sleep=lambda _s: None,
        rng=random.Random(7),
    )
    made.append(provider)
    service.llm = provider

    # week 1: the LLM writes the first version from the long-term memories
    assert run_at(service, "2026-03-01T02:00") == ["decay-sweep", "identity"]
    v1 = service.profile_show()
    assert v1.written_by == "llm:anthropic/claude-haiku-4-5"
    assert v1.change_summary.startswith("First version: focus on the admin UI")
    assert identity(home) == v1.content_md
    assert "- Builds the admin UI with React.\n" in v1.content_md
    prompt = json.loads(replay.requests[0].content)["messages"][0]["content"]
    assert "<current_identity>\n(none yet)\n</current_identity>" in prompt
    assert "Use React for the admin UI" in prompt
    assert "Prefer uv over pip" in prompt
    assert "Payroll" not in prompt
    assert "Nextcloud" not in prompt
    assert "lint fixes" not in prompt  # session memories are not long-term
    assert sorted(v1.sources) == sorted([slugs["react"], slugs["uv"]])

    # week 2: the LLM is down. The run is recorded as failed, the profile stays as it was
    assert run_at(service, "2026-03-08T02:00") == [
        "decay-sweep",
        "digest",
        "identity",
        "monthly-report",
    ]
    outcome = service.governance.last_runs()["identity"][2]
    assert outcome.startswith("error: the identity profile was not rewritten")
    assert [v.version for v in service.profile_history()] == [1]
    assert identity(home) == v1.content_md
    service.llm = None  # recording would ask it to extract entities: not this test's replies
    solid = switch_to_solid(service, project, "2026-03-08T02:20")
    service.llm = provider
    assert run_at(service, "2026-03-08T02:40") == []  # retried an hour after the failure
    assert run_at(service, "2026-03-08T03:05") == ["decay-sweep", "identity"]
    v2 = service.profile_show()
    assert v2.version == 2
    assert "moved from React to Solid (2026-03)" in v2.content_md
    assert v2.window_start == v1.window_end == at("2026-03-01T02:00")  # nothing lost
    assert v2.sources == [solid]  # only what is new since v1; React's decision superseded
    assert "+- Builds the admin UI with Solid" in v2.diff_from_prev
    retried = json.loads(replay.requests[2].content)["messages"][0]["content"]
    assert "- Builds the admin UI with React." in retried  # v1 is the current identity
    assert "Switch the admin UI from React to Solid" in retried

    # week 3: the LLM answers the same text: no new version
    assert run_at(service, "2026-03-15T02:00") == ["decay-sweep", "digest", "identity"]
    assert [v.version for v in service.profile_history()] == [2, 1]
    assert "'written': False" in service.governance.last_runs()["identity"][2]

    # the month
    assert run_at(service, "2026-04-01T04:00") == [
        "decay-sweep",
        "digest",
        "identity",
        "monthly-report",
    ]
    report, february = service.profile_reports()
    assert (report.period, report.versions_count, report.supersedes_count) == ("2026-03", 2, 1)
    assert february.period == "2026-02"
    assert "llm:anthropic/claude-haiku-4-5" in report.content_md
    assert replay.steps == []  # every recorded reply was asked for


def test_manual_rewrite_with_the_llm_down_fails_and_compiled_still_works(
    service: MemoryService, project: Path, secret: Path
) -> None:
    week_zero(service, project, secret)
    replay = Replay("anthropic", "server_error_500")
    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-haiku-4-5",
        timeout_s=5.0,
        max_retries=0,
        transport=replay.transport,
        sleep=lambda _s: None,
    )
    service.llm = provider
    try:
        service.clock = lambda: at("2026-03-01T09:00")
        with pytest.raises(ExtractionFailed, match="profile was not rewritten") as caught:
            service.profile_rewrite()
        assert "`memoryd profile rewrite --compiled`" in caught.value.hint
        assert service.profile_history() == []
        assert not (service.home / IDENTITY_FILE).exists()
        assert service.profile_rewrite(compiled=True).version.written_by == "compiled"
    finally:
        service.llm = None
        provider.close()


# --------------------------------------------------------------------------- CLI


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


def test_profile_cli(home: Path, settings: Settings, project: Path) -> None:
    assert cli(home, "profile", "show")[0] == 3
    code, _, err = cli(home, "profile", "rewrite")
    assert code == 0, err
    with open_service(settings) as svc:
        svc.record(
            MemoryDraft(
                type=MemoryType.PREFERENCE,
                title="Prefer ruff",
                body="Lint and format with ruff.",
                scope_path=project,
            )
        )
    code, out, err = cli(home, "profile", "rewrite")
    assert code == 0, err
    assert out.startswith("wrote identity version 2 (compiled)\nAdded: Prefer ruff")
    code, out, _ = cli(home, "profile", "rewrite")
    assert (code, out.splitlines()[0]) == (0, "identity unchanged since version 2: no new version")
    code, out, err = cli(home, "profile", "show")
    assert code == 0
    assert "Prefer ruff: Lint and format with ruff." in out
    assert "(version 2, compiled" in err
    code, out, _ = cli(home, "profile", "history", "--json")
    assert [v["version"] for v in json.loads(out)] == [2, 1]
    code, out, _ = cli(home, "profile", "diff", "1", "2")
    assert code == 0
    assert "+- Prefer ruff" in out
    assert cli(home, "profile", "diff", "1", "7")[0] == 3
    code, _, err = cli(home, "profile", "rollback", "7")
    assert code == 3
    assert "no profile version 7" in err
    code, out, _ = cli(home, "profile", "rollback", "1")
    assert (code, out.splitlines()[0]) == (0, "wrote identity version 3 (rollback of v1)")
    code, _, err = cli(home, "profile", "report", "--month", "2026-3")
    assert code == 2
    assert "month '2026-3' is not YYYY-MM" in err
    code, _, err = cli(home, "profile", "report", "--month", "2999-01")
    assert code == 3
    assert "has not begun" in err
    code, out, _ = cli(home, "profile", "report", "--month", "2025-01")
    assert code == 0
    assert out.splitlines() == [
        "no profile changes in 2025-01",
        f"wrote {home / REPORTS_DIR / '2025-01.md'}",
    ]
    code, out, _ = cli(home, "profile", "reports", "--json")
    assert [r["period"] for r in json.loads(out)] == ["2025-01"]


# --------------------------------------------------------------------------- inject


def test_inject_identity_section_is_off_by_default_and_fits_the_budget(
    home: Path, settings: Settings, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_service(settings) as svc:
        for n in range(12):
            svc.record(
                MemoryDraft(
                    type=MemoryType.PREFERENCE,
                    title=f"Preference number {n}",
                    body=f"Always apply rule {n} when reviewing pull requests. " * 3,
                    scope_path=project,
                )
            )
        svc.profile_rewrite()
    start = {"hook_event_name": "SessionStart", "cwd": str(project), "source": "startup"}

    def context(*extra: str) -> str:
        out = _run(home, "claude-code", start, *extra)
        return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])

    assert "memoryd identity" not in context()  # off by default

    monkeypatch.setenv("MEMORYD_INJECT__IDENTITY", "true")
    shown = context()
    head, _, rest = shown.partition("\nmemoryd recall")
    assert head.startswith("memoryd identity (profile/identity.md):\n## General\n- Preference")
    assert len(head) <= 300 * 4  # inject.identity_tokens
    assert rest  # the memories still follow
    small = context("--budget-tokens", "150")
    assert len(small) <= 150 * 4
    small_head = small.partition("\nmemoryd recall")[0]
    assert small_head.startswith("memoryd identity (profile/identity.md):\n## General\n- Pref")
    assert len(small_head) <= 50 * 4  # a third of the budget
    # a prompt recalls; the identity is for the start of a session only
    prompt = {"hook_event_name": "UserPromptSubmit", "cwd": str(project), "prompt": "rule 3"}
    assert "memoryd identity" not in _run(home, "claude-code", prompt)


def test_inject_settings_agree_with_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook reads `[inject]` without pydantic; both readers give the same answer."""
    assert (
        InjectSettings().model_dump()
        == InjectLimits()._asdict()
        == {
            "identity": False,
            "identity_tokens": 300,
        }
    )
    config = tmp_path / "config.toml"
    config.write_text("[inject]\nidentity = true\nidentity_tokens = 120\n")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    monkeypatch.setenv("MEMORYD_HOME", str(tmp_path / "h"))
    assert load_capture_config().inject == InjectLimits(identity=True, identity_tokens=120)
    assert load_settings().inject == InjectSettings(identity=True, identity_tokens=120)
    monkeypatch.setenv("MEMORYD_INJECT__IDENTITY_TOKENS", "10")  # below 50: the hook ignores it
    fast = load_capture_config()
    assert fast.inject.identity_tokens == 300
    assert fast.problems == ("ignored setting: inject.identity_tokens: 10 is below 50",)


def test_the_daemons_scheduler_asks_the_llm_off_the_writer(
    service: MemoryService, project: Path, secret: Path
) -> None:
    replay = Replay("anthropic", "rewrite_identity_week1", "server_error_500")
    threads: list[str] = []

    def network(request: httpx.Request) -> httpx.Response:
        threads.append(threading.current_thread().name)
        return replay.transport.handle_request(request)

    week_zero(service, project, secret)
    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-haiku-4-5",
        timeout_s=5.0,
        max_retries=0,
        transport=httpx.MockTransport(network),
        sleep=lambda _s: None,
    )
    service.llm = provider
    runner = ServiceRunner()
    try:
        service.clock = lambda: at("2026-03-01T02:00")
        assert asyncio.run(run_due(service, runner, SINCE)) == ["decay-sweep", "identity"]
        assert service.profile_show().written_by == "llm:anthropic/claude-haiku-4-5"
        assert len(threads) == 1
        assert not threads[0].startswith("memoryd-writer")  # agents' writes never wait on it
        service.clock = lambda: at("2026-03-08T02:00")
        ran = asyncio.run(run_due(service, runner, SINCE))
        assert ran == [
            "decay-sweep",
            "digest",
            "identity",
            "monthly-report",
        ]  # a failure stops nothing
        runs = service.governance.last_runs()
        assert runs["identity"][2].startswith("error: the identity profile was not rewritten")
        assert runs["monthly-report"][2].startswith("ok")
        assert [v.version for v in service.profile_history()] == [1]
    finally:
        runner.close()
        service.llm = None
        provider.close()
