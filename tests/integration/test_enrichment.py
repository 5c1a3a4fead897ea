"""Issue #5: captured sessions are enriched in the background — extraction, then an LLM summary.

A real daemon enriches what a real hook captured; the LLM part runs in-process (the daemon is a
subprocess) through the Anthropic SDK over recorded Messages API replies: the worker's steps
(`daemon.server.enrich_round`) on a real `ServiceRunner`, the real hook rewriting the same file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from memoryd import memfile
from memoryd.api.runner import ServiceRunner
from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.daemon.server import enrich_round
from memoryd.doctor import service_checks
from memoryd.enrichment import EnrichmentPolicy
from memoryd.llm.anthropic_provider import AnthropicProvider
from memoryd.service import MemoryService
from memoryd.vault import parse, render
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client
from tests.integration.test_capture import FIXTURES, ClaudeTranscript, needs_fixtures, session_files
from tests.integration.test_capture_hook import run_hook
from tests.integration.test_llm import CONNECT_ERROR, TIMEOUT, Replay
from tests.waiting import wait_until

SESSION_ID = "5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f"
SLUG = f"session-claude-code-{SESSION_ID}"
OK = ("extract_session_ok", "summarize_session_ok", "dura_session_ok")


@pytest.fixture(autouse=True)
def _hook_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A loaded box must not trip the hook's budget; daemons keep small buffer pools."""
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "30000")
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))


@pytest.fixture
def transcript(tmp_path: Path, project: Path) -> ClaudeTranscript:
    """The recorded Claude Code session, copied so the test can let it grow."""
    grown = ClaudeTranscript(tmp_path / f"{SESSION_ID}.jsonl", SESSION_ID, str(project))
    shutil.copyfile(FIXTURES / "claude_code_transcript.jsonl", grown.path)
    return grown


@pytest.fixture
def providers() -> Iterator[list[AnthropicProvider]]:
    built: list[AnthropicProvider] = []
    yield built
    for provider in built:
        provider.close()


LLM = Callable[..., tuple[Replay, list[float]]]


@pytest.fixture
def with_llm(providers: list[AnthropicProvider]) -> LLM:
    """Give a service Claude through the real SDK, its network a replay of recorded replies."""

    def attach(svc: MemoryService, *steps: str, max_retries: int = 3) -> tuple[Replay, list[float]]:
        replay = Replay("anthropic", *steps)
        sleeps: list[float] = []
        provider = AnthropicProvider(
            api_key="sk-ant-test",
            model="claude-haiku-4-5",
            timeout_s=5.0,
            max_retries=max_retries,
            transport=replay.transport,
            sleep=sleeps.append,
            rng=random.Random(7),
        )
        providers.append(provider)
        svc.llm = provider
        return replay, sleeps

    return attach


def hook(home: Path, transcript: ClaudeTranscript, event: str = "Stop") -> None:
    """The real `memoryd capture --source=claude-code`, as Claude Code runs it."""
    result = run_hook(home, "claude-code", json.dumps(transcript.payload(event)))
    assert (result.returncode, result.stderr) == (0, "")


def work(svc: MemoryService, limit: int = 8) -> int:
    """One round of the daemon's enrichment worker, on a real writer thread."""
    runner = ServiceRunner()
    try:
        return asyncio.run(enrich_round(svc, runner, limit))
    finally:
        runner.close()


def the_file(home: Path) -> Path:
    [path] = session_files(home)
    return path


def prompt_of(request: httpx.Request) -> str:
    return str(json.loads(request.content)["messages"][0]["content"])


# -- the format: the summary section and re-capture ----------------------------------------------
def test_the_summary_section_is_recognised_only_as_written() -> None:
    section = memfile.render_summary(
        "Did a thing.\n\n## Asked\n<!-- end of summary -->",
        ["Chose A over B.", "  "],
        ["# Still broken"],
    )
    assert section.splitlines() == [
        "## Summary",
        "Did a thing. ## Asked <!‐‐ end of summary -->",
        "",
        "**Decisions**",
        "- Chose A over B.",
        "",
        "**Open problems**",
        "- Still broken",
        memfile.SUMMARY_END,
    ]
    body = "**Claude Code** session `x`\n\n## Asked\n- hi"
    assert memfile.split_summary(body) == ("", body)
    enriched = memfile.with_summary(section, body)
    assert memfile.split_summary(enriched) == (section, body)
    assert memfile.with_summary("", enriched) == body
    unclosed = "## Summary\nno end marker\n\n" + body
    assert memfile.split_summary(unclosed) == ("", unclosed)


def test_compose_keeps_the_summary_and_replaces_the_rest() -> None:
    fields = {"title": "T", "slug": "s", "type": "session", "scope_hash": "0123456789ab"}
    first = memfile.compose(None, fields, "old body")
    section = memfile.render_summary("The summary.", [], [])
    enriched = first.replace("\n\nold body\n", f"\n\n{section}\n\nold body\n")
    again = memfile.compose(enriched, fields, "new body")
    assert again.endswith(f"---\n\n{section}\n\nnew body\n")
    assert memfile.compose(again, fields, "new body") == again


# -- the daemon, end to end ----------------------------------------------------------------------
@needs_fixtures
def test_a_real_daemon_enriches_captured_sessions(
    home: Path,
    project: Path,
    tmp_path: Path,
    transcript: ClaudeTranscript,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYD_DAEMON__INBOX_POLL_S", "0.2")
    monkeypatch.setenv("MEMORYD_ENRICHMENT__INTERVAL_S", "0.5")
    hook(home, transcript)
    # An embedded command indexed it and died before enriching: the queue survives it.
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        assert svc.enrichment_counts() == {"pending": 1, "done": 0, "failed": 0}
        assert svc.get(SLUG).meta.observations == []

    def counts(http: httpx.Client) -> str:
        checks = {c["name"]: c for c in http.get("/v1/doctor").json()}
        return str(checks["enrichment"]["detail"])

    def wait_for(http: httpx.Client, detail: str) -> None:
        deadline = time.monotonic() + 60
        while detail not in counts(http):
            assert time.monotonic() < deadline, counts(http)
            time.sleep(0.1)

    def mentions(http: httpx.Client, slug: str) -> list[str]:
        rows = http.post(
            "/v1/graph/cypher",
            json={
                "query": "MATCH (:Memory {slug: $slug})-[:MENTIONS]->(e:Entity) RETURN e.id",
                "params": {"slug": slug},
            },
        ).json()["rows"]
        return sorted(row[0] for row in rows)

    with running(home) as daemon, uds_client(home) as http:
        wait_for(http, "0 pending, 1 done, 0 failed; no LLM configured")
        memory = parse(the_file(home).read_text(encoding="utf-8"), the_file(home))
        assert {"entity:tool:pytest", "entity:tool:uv"} <= set(memory.meta.observations)
        assert set(memory.meta.observations) <= set(mentions(http, SLUG))
        assert not memory.body.startswith(memfile.SUMMARY_HEADING)  # no LLM, no summary

        second = ClaudeTranscript(tmp_path / "s2.jsonl", "sess-redis", str(project))
        second.prompt("Move the session cache to Redis and pin the version for streams.")
        second.tool("Edit", {"file_path": str(project / "src/cache.py")}, "ok")
        second.say("Done: the cache uses Redis 7 because streams need it; pytest passes.")
        hook(home, second)
        wait_for(http, "0 pending, 2 done, 0 failed")
        assert "entity:tool:Redis" in mentions(http, "session-claude-code-sess-redis")
        events = [e["event_type"] for e in http.get("/v1/audit").json()["items"]]
        assert events.count("enrich") == 2
        # issue 15: the worker scored each session once, offline (no LLM configured)
        scored = {}
        for slug in (SLUG, "session-claude-code-sess-redis"):
            meta = http.get(f"/v1/memories/{slug}").json()["meta"]
            assert meta["dura_score"]["by"] == "heuristic-v1"
            scored[slug] = sum(meta["dura_score"][k] for k in "DURA") / 4
        queued = http.get("/v1/promotions").json()["items"]
        assert sorted(p["source_slug"] for p in queued) == sorted(
            slug for slug, mean in scored.items() if mean >= 0.6
        )
        assert events.count("propose") == len(queued)
        assert daemon.stop() == 0


@needs_fixtures
def test_an_embedded_read_only_reports_waiting_captures_and_a_write_indexes_them(
    home: Path, transcript: ClaudeTranscript, settings: Settings
) -> None:
    """A read does no hidden work; a write (or `capture retry`) runs the rules and leaves the
    LLM to the daemon."""
    hook(home, transcript)
    cli = CliRunner()
    for read in (["search", "importer", "--json"], ["list"], ["recall", "importer"]):
        result = cli.invoke(app, [*read, "--home", str(home)])
        assert result.exit_code == 0, result.stderr
        waiting = result.stderr.splitlines()[0]  # first: `recall` then says nothing matched
        assert waiting == "1 capture waiting; run memoryd serve or memoryd capture retry"
    assert (
        json.loads(cli.invoke(app, ["search", "importer", "--json", "--home", str(home)]).stdout)
        == []
    )
    memory = parse(the_file(home).read_text(encoding="utf-8"), the_file(home))
    assert "entity:tool:pytest" not in memory.meta.observations

    retried = cli.invoke(app, ["capture", "retry", "--home", str(home)])
    assert retried.exit_code == 0, retried.stderr
    assert "indexed 1 waiting capture(s)" in retried.stdout
    result = cli.invoke(app, ["search", "importer", "--json", "--home", str(home)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(result.stdout) != []
    memory = parse(the_file(home).read_text(encoding="utf-8"), the_file(home))
    assert "entity:tool:pytest" in memory.meta.observations
    with open_service(settings) as svc:
        assert svc.enrichment_counts() == {"pending": 0, "done": 1, "failed": 0}
        checks = {c.name: c for c in service_checks(svc, settings)}
        assert checks["enrichment"].ok


# -- the LLM stage, in-process with the real client ----------------------------------------------
@needs_fixtures
def test_the_llm_summary_lands_survives_recapture_and_is_searchable(
    home: Path, transcript: ClaudeTranscript, settings: Settings, with_llm: LLM
) -> None:
    hook(home, transcript)
    with open_service(settings) as svc:
        replay, sleeps = with_llm(svc, "rate_limited_429", *OK)
        assert svc.drain_inbox() == 1
        assert svc.search("rejected") == []  # a word only the summary will hold
        assert work(svc) == 1
        assert sleeps == [2.0]  # the 429's retry-after, honoured without holding the writer
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert (row.state, row.attempts, row.last_error) == ("done", 0, None)
        extraction, summary, dura = (prompt_of(r) for r in replay.requests[1:])
        assert "<offline_proposals>" in extraction
        assert "pytest" in extraction
        assert "Run the importer tests and fix anything that fails." in summary
        assert memfile.SUMMARY_HEADING not in summary  # the stages read the captured part
        assert "Run the importer tests and fix anything that fails." in dura
        memory = svc.get(SLUG)
        assert memory.body.startswith("## Summary\nRan the memories.json importer tests")
        assert "**Open problems**\n- Only tests/sync was run" in memory.body
        assert "entity:project:mcp-memory-service" in memory.meta.observations  # the LLM's
        assert "entity:tool:uv" in memory.meta.observations  # spaCy's
        assert [h.slug for h in svc.search("rejected")] == [SLUG]
        assert memory.meta.dura_score is not None
        assert memory.meta.dura_score.by == "llm:claude-haiku-4-5"  # issue 15: scored once
        [promotion] = svc.list_promotions()
        assert (promotion.source_slug, promotion.proposed_type.value) == (SLUG, "fact")
        assert promotion.evidence == [  # the quote it invented is dropped
            "Fixed: `created_at` is now coerced to a float epoch, matching mcp-memory-service"
            " v5 exports."
        ]
        [enrich] = svc.audit_records(event_type="enrich")
        assert json.loads(enrich.details)["llm"] == "anthropic/claude-haiku-4-5"
        assert json.loads(enrich.details)["dura"] == {"mean": 0.787, "by": "llm:claude-haiku-4-5"}
        assert "importer" not in enrich.details  # counts and ids only, never memory text
        assert work(svc) == 0  # nothing is enriched twice
        enriched = the_file(home).read_text(encoding="utf-8")

    hook(home, transcript, "SessionEnd")  # the same session captured again, unchanged
    assert the_file(home).read_text(encoding="utf-8") == enriched

    transcript.prompt("Also make the importer accept epoch milliseconds.")
    transcript.say("Done: values above 1e11 are milliseconds, so they are divided by 1000.")
    hook(home, transcript)  # the session went on: capture rewrites the body
    text = the_file(home).read_text(encoding="utf-8")
    memory = parse(text, the_file(home))
    assert render(memory) == text
    section, rest = memfile.split_summary(memory.body)
    assert section == memfile.split_summary(parse(enriched, the_file(home)).body)[0]
    assert "epoch milliseconds" in rest
    assert "entity:project:mcp-memory-service" in memory.meta.observations
    with open_service(settings) as svc:
        with_llm(svc)  # no reply recorded: an LLM request would fail the test
        assert svc.drain_inbox() == 1
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert (row.state, row.rules_done) == ("pending", False)
        assert [h.slug for h in svc.search("rejected")] == [SLUG]
        assert [h.slug for h in svc.search("epoch milliseconds")] == [SLUG]


@pytest.mark.parametrize(
    ("steps", "code"),
    [
        (("rate_limited_429",), "rate_limited"),
        ((TIMEOUT,), "extraction_failed"),
        ((CONNECT_ERROR,), "extraction_failed"),
        (("refusal",), "extraction_failed"),
        (("extract_session_ok", "summarize_session_malformed", "summarize_session_malformed"), ""),
    ],
    ids=["429", "timeout", "unreachable", "refusal", "malformed-json"],
)
@needs_fixtures
def test_llm_failures_keep_the_rules_and_retry_then_fail(
    home: Path,
    transcript: ClaudeTranscript,
    settings: Settings,
    with_llm: LLM,
    steps: tuple[str, ...],
    code: str,
) -> None:
    hook(home, transcript)
    with open_service(settings) as svc:
        svc.enrichment = EnrichmentPolicy(max_attempts=2, backoff_s=0.2)
        with_llm(svc, *steps, max_retries=0)
        svc.drain_inbox()
        assert work(svc) == 1
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert (row.state, row.attempts, row.rules_done) == ("pending", 1, True)
        assert row.last_error is not None
        assert row.last_error.startswith(code or "extraction")
        wait = (row.next_attempt_at - row.updated_at).total_seconds()
        assert 0.19 < wait < 0.21  # the backoff
        assert svc.governance.due_enrichments(row.updated_at, 8) == []
        memory = svc.get(SLUG)
        assert "entity:tool:uv" in memory.meta.observations  # the spaCy part is written
        assert not memory.body.startswith(memfile.SUMMARY_HEADING)
        wait_until(lambda: svc.enrichment_due(8), what="the backoff to pass")
        with_llm(svc, "rate_limited_429", max_retries=0)
        assert work(svc) == 1
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert (row.state, row.attempts) == ("failed", 2)
        assert row.last_error is not None
        assert row.last_error.startswith("rate_limited: ")
        checks = {c.name: c for c in service_checks(svc, settings)}
        assert not checks["enrichment"].ok
        assert "0 pending, 0 done, 1 failed" in checks["enrichment"].detail


@needs_fixtures
def test_pending_work_survives_a_restart_and_runs_once(
    home: Path, transcript: ClaudeTranscript, settings: Settings, with_llm: LLM
) -> None:
    hook(home, transcript)
    # An embedded command: the rules run, the LLM work waits for the daemon.
    with open_service(settings) as svc:
        replay, _ = with_llm(svc)
        svc.drain_inbox()
        assert svc.enrich_pending(use_llm=False) == 1
        assert replay.requests == []
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert (row.state, row.rules_done) == ("pending", True)
        assert "entity:tool:uv" in svc.get(SLUG).meta.observations
        assert svc.enrich_pending(use_llm=False) == 0  # the rules do not run twice
    with open_service(settings) as svc:  # the daemon, after a restart
        replay, _ = with_llm(svc, *OK)
        assert work(svc) == 1
        assert len(replay.requests) == 3  # extraction, summary, DURA
        assert svc.get(SLUG).body.startswith(memfile.SUMMARY_HEADING)
    hook(home, transcript, "SessionEnd")
    with open_service(settings) as svc:
        with_llm(svc)
        assert svc.drain_inbox() == 0
        assert work(svc) == 0
        assert svc.enrichment_counts() == {"pending": 0, "done": 1, "failed": 0}


@needs_fixtures
def test_a_sensitive_scope_is_never_sent_to_the_llm(
    home: Path, transcript: ClaudeTranscript, settings: Settings, with_llm: LLM
) -> None:
    hook(home, transcript)
    with open_service(settings) as svc:
        svc.drain_inbox()  # queued while its scope was not sensitive yet
        memory = svc.get(SLUG)
        scope = svc.vault.read_scope(memory.meta.scope_hash)
        assert scope is not None
        scope.sensitive = True
        svc.vault.write_scope(scope)
        replay, _ = with_llm(svc)
        before = the_file(home).read_bytes()
        assert work(svc) == 1
        assert replay.requests == []
        assert the_file(home).read_bytes() == before
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert (row.state, row.last_error) == ("done", "its scope is sensitive")
        assert svc.audit_records(event_type="enrich") == []


# -- the hook and the worker rewrite the same file -----------------------------------------------
@needs_fixtures
def test_a_recapture_between_the_workers_read_and_write_loses_nothing(
    home: Path, transcript: ClaudeTranscript, settings: Settings, providers: list[Any]
) -> None:
    hook(home, transcript)
    recaptured = False

    def answer(request: httpx.Request) -> httpx.Response:
        """Claude's replies; while the summary is being written, the session goes on."""
        nonlocal recaptured
        if "record_SessionSummary" in request.content.decode() and not recaptured:
            recaptured = True
            transcript.prompt("One more thing: document the created_at coercion in the README.")
            hook(home, transcript)
        sent = request.content.decode()
        name = "summarize_session_ok" if "SessionSummary" in sent else ""
        name = "dura_session_ok" if "DuraJudgement" in sent else name
        return Replay("anthropic", name or "extract_session_ok")._handle(request)

    provider = AnthropicProvider(
        api_key="sk-ant-test", max_retries=0, transport=httpx.MockTransport(answer)
    )
    providers.append(provider)
    with open_service(settings) as svc:
        svc.llm = provider
        svc.drain_inbox()
        job = svc.prepare_enrichment(SLUG)
        assert job is not None
        assert work(svc) == 1  # the worker read it, then the hook rewrote it: nothing written
        memory = svc.get(SLUG)
        assert "document the created_at coercion" in memory.body
        assert not memory.body.startswith(memfile.SUMMARY_HEADING)
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert row.state == "pending"
        assert row.fingerprint != job.fingerprint
        assert work(svc) == 1  # the new content is enriched next
        memory = svc.get(SLUG)
        assert memory.body.startswith(memfile.SUMMARY_HEADING)
        assert "document the created_at coercion" in memory.body
        row = svc.governance.enrichment(SLUG)
        assert row is not None
        assert row.state == "done"


@needs_fixtures
def test_the_hook_waits_for_the_file_lock(
    home: Path, transcript: ClaudeTranscript, settings: Settings
) -> None:
    hook(home, transcript)
    path = the_file(home)
    transcript.prompt("Then bump the version in pyproject.toml.")
    with memfile.memory_lock(home, SLUG):
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "capture", "--source=claude-code"],
            stdin=subprocess.PIPE,
            env={**os.environ, "MEMORYD_HOME": str(home)},
        )
        assert process.stdin is not None
        process.stdin.write(json.dumps(transcript.payload()).encode())
        process.stdin.close()
        with pytest.raises(subprocess.TimeoutExpired):  # blocked on the lock held here
            process.wait(timeout=1.0)
        assert "bump the version" not in path.read_text(encoding="utf-8")
        with pytest.raises(TimeoutError), memfile.memory_lock(home, SLUG, timeout_s=0.05):
            pass
    assert process.wait(timeout=60) == 0
    assert "bump the version" in path.read_text(encoding="utf-8")


@needs_fixtures
def test_draining_over_http_wakes_the_enrichment_worker(
    home: Path, transcript: ClaudeTranscript, settings: Settings
) -> None:
    """`POST /v1/inbox/drain` indexes the capture and wakes the worker at once."""
    from fastapi.testclient import TestClient

    from memoryd.api.app import create_app

    hook(home, transcript)
    woken: list[bool] = []
    with open_service(settings) as svc:
        app = create_app(svc, settings=settings)
        app.state.backend.wake_enrichment = lambda: woken.append(True)
        with TestClient(app) as client:
            assert client.post("/v1/inbox/drain").json() == {"indexed": 1}
            assert woken == [True]
            assert client.post("/v1/inbox/drain").json() == {"indexed": 0}
            assert woken == [True]


def test_enrichment_waits_until_captures_settle(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session is captured several times in a row (PreCompact, Stop, SessionEnd): the
    worker runs `settle_s` after the start (the first requests come with it), then only
    once the drains have been quiet for `settle_s`."""
    import memoryd.daemon.server as server

    rounds: list[float] = []

    async def one_round(service: object, runner: object, limit: int) -> int:
        rounds.append(time.monotonic())
        return 0

    monkeypatch.setattr(server, "enrich_round", one_round)
    tuned = settings.model_copy(
        update={
            "enrichment": settings.enrichment.model_copy(
                update={"interval_s": 60.0, "settle_s": 0.3}
            )
        }
    )

    async def scenario() -> None:
        wake = asyncio.Event()
        started = time.monotonic()
        worker = asyncio.create_task(server.enrich(None, None, tuned, wake))  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while not rounds:  # what a previous run left queued
            assert time.monotonic() < deadline, "no first round"
            await asyncio.sleep(0.01)
        assert len(rounds) == 1
        assert rounds[0] - started >= 0.3  # after the start's first requests
        for _ in range(5):  # drains keep coming, 0.1 s apart
            wake.set()
            await asyncio.sleep(0.1)
        assert len(rounds) == 1
        await asyncio.sleep(0.5)
        assert len(rounds) == 2
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker

    asyncio.run(scenario())
