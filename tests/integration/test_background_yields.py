"""Issue 28: the daemon's background work never runs a step while a user's request is in
flight (`ServiceRunner.yield_to_requests`, `CountRequests`) and runs on threads of a lower OS
priority, and extraction builds its pipelines once per process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryd.api.runner import BACKGROUND_NICENESS, CountRequests, ServiceRunner
from memoryd.config import Settings
from memoryd.daemon import captures
from memoryd.daemon.captures import watch_inbox
from memoryd.daemon.server import enrich_round
from memoryd.extraction import spacy_stages
from memoryd.extraction.pipeline import Extractor
from memoryd.inbox import Inbox, IndexRequest, now_ts
from memoryd.models import MemoryDraft, MemoryType
from memoryd.native import yielding_to
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.integration.test_capture import FIXTURES, ClaudeTranscript, needs_fixtures
from tests.integration.test_capture_hook import run_hook

on_linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.getpriority(os.PRIO_PROCESS, 0) >= 19,
    reason="a thread has its own nice value on Linux only (and none is lower than 19)",
)


def _thread_priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_enrichment_worker_waits_while_a_request_is_in_flight(
    settings: Settings, project: Path
) -> None:
    with open_service(settings) as svc:
        memory = svc.record(
            MemoryDraft(
                type=MemoryType.SESSION,
                title="Moved the cache to Redis",
                body="We moved the session cache from Memcached to Redis; p95 fell to 4 ms.",
                scope_path=project,
            )
        )
        assert svc.enrichment_due(8) == [memory.slug]
        prepared: list[str] = []
        original = svc.prepare_enrichment

        def prepare(slug: str, **kwargs: Any) -> Any:  # the real step, watched
            prepared.append(slug)
            return original(slug, **kwargs)

        svc.prepare_enrichment = prepare  # type: ignore[method-assign]
        runner = ServiceRunner()

        async def scenario() -> tuple[list[str], int]:
            runner.request_started()  # a recall arrives before the round starts
            round_ = asyncio.create_task(enrich_round(svc, runner, 8))
            await asyncio.sleep(0.6)
            during = list(prepared)
            runner.request_ended()
            return during, await round_

        try:
            during, settled = asyncio.run(scenario())
        finally:
            runner.close()
        assert during == []
        assert (prepared, settled) == ([memory.slug], 1)
        assert svc.enrichment_due(8) == []


def test_a_steady_stream_of_requests_does_not_hold_background_work_for_ever() -> None:
    runner = ServiceRunner()

    async def scenario() -> tuple[float, float]:
        runner.request_started()
        waited = await runner.yield_to_requests(quiet_s=0.01, starve_s=0.2)
        runner.request_ended()
        quiet = await runner.yield_to_requests(quiet_s=0.05, starve_s=5.0)
        return waited, quiet

    try:
        waited, quiet = asyncio.run(scenario())
    finally:
        runner.close()
    assert 0.2 <= waited < 2.0
    assert 0.03 <= quiet < 1.0  # the quiet time after the last request, not the deadline


def test_requests_in_a_burst_make_background_work_wait_for_the_burst_to_end() -> None:
    """Recalls 150 ms apart: a step started in one of their pauses would overlap the next,
    so the worker waits longer than the pause (twice the spacing) and runs only after it."""
    runner = ServiceRunner()

    async def scenario() -> tuple[bool, float]:
        async def client() -> None:
            for _ in range(8):
                runner.request_started()
                await asyncio.sleep(0.01)
                runner.request_ended()
                await asyncio.sleep(0.15)

        burst = asyncio.create_task(client())
        await asyncio.sleep(0.5)  # a few requests in
        started = asyncio.get_running_loop().time()
        await runner.yield_to_requests(quiet_s=0.05, starve_s=10.0)
        waited = asyncio.get_running_loop().time() - started
        done = burst.done()
        await burst
        return done, waited

    try:
        done, waited = asyncio.run(scenario())
    finally:
        runner.close()
    assert done, "the worker ran in a pause of the burst"
    assert waited < 5.0


def test_requests_are_counted_around_the_app_and_health_probes_are_not() -> None:
    runner = ServiceRunner()
    seen: list[tuple[str, int]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["path"], runner.requests_in_flight))
        if scope["path"] == "/v1/fail":
            raise RuntimeError("the route failed")

    counted = CountRequests(app, runner)

    async def call(path: str) -> None:
        await counted({"type": "http", "path": path}, None, None)

    async def scenario() -> None:
        await call("/v1/recall")
        await call("/v1/health")
        with contextlib.suppress(RuntimeError):
            await call("/v1/fail")

    try:
        asyncio.run(scenario())
    finally:
        runner.close()
    assert seen == [("/v1/recall", 1), ("/v1/health", 0), ("/v1/fail", 1)]
    assert runner.requests_in_flight == 0


def test_extraction_builds_each_pipeline_once_per_extractor(
    monkeypatch: Any, tmp_path: Path
) -> None:
    built: list[str] = []
    original = spacy_stages.blank_pipeline

    def blank(lang: str) -> Any:
        built.append(lang)
        return original(lang)

    monkeypatch.setattr(spacy_stages, "blank_pipeline", blank)
    extractor = Extractor(cache_dir=tmp_path)
    for _ in range(3):
        extractor.extract("我们决定从 MySQL 切到 PostgreSQL,用 Redis 做缓存。", title="迁移")
        extractor.extract("We switched from React to Solid; the API runs on Redis.", title="UI")
    assert sorted(built) == ["en", "zh"]


def test_an_english_recall_loads_no_jieba_though_the_scope_holds_chinese(
    settings: Settings, project: Path, tmp_path: Path
) -> None:
    """The first recall counts its scope's statistics from the stored documents: Chinese text
    as the index stored its segmentation, so nothing is cut again and jieba stays unloaded."""
    with open_service(settings) as svc:
        svc.record(
            MemoryDraft(
                type=MemoryType.DECISION,
                title="Redis for the session cache",
                body="We chose Redis over Memcached for the session cache.",
                scope_path=project,
            )
        )
        svc.record(
            MemoryDraft(
                type=MemoryType.DECISION,
                title="数据库迁移",
                body="迁移到 PostgreSQL 之后查询变快了。",
                scope_path=project,
            )
        )
    script = (
        "import sys, memoryd\n"
        f"with memoryd.open({str(settings.home)!r}) as svc:\n"
        f"    hits = svc.recall('redis session cache', scope={str(project)!r}).hits\n"
        "print(len(hits), 'jieba' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "False"]


def _decision(project: Path, n: int) -> MemoryDraft:
    return MemoryDraft(
        type=MemoryType.DECISION,
        title=f"Queue {n}: use Kafka for the audit events",
        body=f"We put the audit events on Kafka ({n}); the consumers batch them.",
        scope_path=project,
    )


def test_a_background_jobs_graph_statements_wait_for_its_courtesy(
    settings: Settings, project: Path
) -> None:
    """The embedded engine holds the GIL for a whole statement: each statement a background
    job runs (reads and a write's) first calls the job's wait; other work calls none."""
    calls: list[str] = []
    with open_service(settings) as svc:
        svc.record(_decision(project, 0))
        assert calls == []
        with yielding_to(lambda: calls.append("wait")):
            svc.record(_decision(project, 1))
            written = len(calls)
            svc.graph.count_memories()
        svc.record(_decision(project, 2))
    assert written >= 2  # the write's reads and its transaction's statements
    assert len(calls) == written + 1


def test_a_background_write_pauses_while_a_request_is_in_flight(
    settings: Settings, project: Path
) -> None:
    """A recall arrives while a background write runs: the write's next statement waits
    until the request ended, and a graph read meanwhile (the recall's) is answered at once;
    a write of the user queued behind it is not kept waiting."""
    with open_service(settings) as svc:
        svc.record(_decision(project, 0))  # the stores warmed up
        runner = ServiceRunner()

        async def scenario() -> tuple[bool, float, bool, float]:
            runner.request_started()
            background = asyncio.create_task(
                runner.write(runner.background(svc.record), _decision(project, 1))
            )
            await asyncio.sleep(0.9)
            paused = not background.done()
            started = time.monotonic()
            counted = await asyncio.to_thread(svc.graph.count_memories)
            read_s = time.monotonic() - started
            runner.request_ended()
            await background
            # A user's write queued behind a paused background write: the pause ends.
            runner.request_started()
            started = time.monotonic()
            second = asyncio.create_task(
                runner.write(runner.background(svc.record), _decision(project, 2))
            )
            await asyncio.sleep(0.05)
            await runner.write(svc.record, _decision(project, 3))
            await second
            behind_s = time.monotonic() - started
            runner.request_ended()
            return paused, read_s, counted == 1, behind_s

        try:
            paused, read_s, counted_one, behind_s = asyncio.run(scenario())
        finally:
            runner.close()
        assert paused, "the background write ran while a request was in flight"
        assert counted_one
        assert read_s < 0.5
        assert behind_s < 0.5 * 3
        assert svc.graph.count_memories() == 4


@on_linux
def test_background_work_runs_on_threads_of_a_lower_os_priority() -> None:
    """A request's reads and writes run at the daemon's priority, background work's below it:
    when the cores are busy, a user's hook (another process, no request of the daemon's)
    runs first. A background write with a write queued behind it keeps the daemon's
    priority (that write must not wait on a lowered thread). Writes stay one at a time, in
    order."""
    runner = ServiceRunner()
    order: list[str] = []

    def write(name: str) -> int:
        order.append(name)
        time.sleep(0.005)
        return _thread_priority()

    async def scenario() -> tuple[int, int, int, int, int, int]:
        alone = await runner.write(runner.background(write), "background alone")
        gathered = await asyncio.gather(
            runner.read(_thread_priority),
            runner.write(write, "request 1"),
            runner.read(runner.background(_thread_priority)),
            runner.write(runner.background(write), "background, a write behind"),
            runner.write(write, "request 2"),
        )
        return alone, *gathered

    try:
        alone, read, written, background_read, behind, written_after = asyncio.run(scenario())
    finally:
        runner.close()
    own = os.getpriority(os.PRIO_PROCESS, 0)
    low = min(own + BACKGROUND_NICENESS, 19)
    assert (read, written, written_after, behind) == (own, own, own, own)
    assert (alone, background_read) == (low, low)
    assert order == ["background alone", "request 1", "background, a write behind", "request 2"]


def _watch_until_drained(svc: MemoryService, settings: Settings, noted: Callable[[], Any]) -> None:
    """The daemon's inbox watch (`watch_inbox`, polling every 50 ms) until it has drained
    once; `noted` runs on the draining thread just before each real drain."""
    polling = settings.model_copy(
        update={"daemon": settings.daemon.model_copy(update={"inbox_poll_s": 0.05})}
    )
    drain = svc.drain_inbox

    def watched() -> int:
        noted()
        return drain()

    svc.drain_inbox = watched  # type: ignore[method-assign]
    runner = ServiceRunner()

    async def scenario() -> None:
        drained = asyncio.Event()
        watching = asyncio.create_task(watch_inbox(svc, runner, polling, drained))
        try:
            await asyncio.wait_for(drained.wait(), 60)
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    try:
        asyncio.run(scenario())
    finally:
        runner.close()


@needs_fixtures
@on_linux
def test_the_daemon_indexes_a_capture_at_low_priority(
    home: Path, project: Path, tmp_path: Path, settings: Settings
) -> None:
    """The daemon's reaction to a capture (indexing the inbox request) is background work:
    the agent's next hook may already run, and it gets the cores first."""
    transcript = ClaudeTranscript(tmp_path / "low.jsonl", "low-priority-session", str(project))
    shutil.copyfile(FIXTURES / "claude_code_transcript.jsonl", transcript.path)
    hooked = run_hook(home, "claude-code", json.dumps(transcript.payload("Stop")))
    assert (hooked.returncode, hooked.stderr) == (0, "")
    with open_service(settings) as svc:
        priorities: list[int] = []
        _watch_until_drained(svc, settings, lambda: priorities.append(_thread_priority()))
        assert priorities == [min(os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICENESS, 19)]
        assert [m.slug for m in svc.list_memories()] != []


@needs_fixtures
def test_the_daemon_indexes_captures_once_they_stop_arriving(
    home: Path, project: Path, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's hooks come in bursts: indexing beside the next hook makes it wait (for the
    disk more than the cores), so the daemon drains once no capture arrived for a while."""
    monkeypatch.setattr(captures, "CAPTURES_QUIET_S", 0.8)
    transcript = ClaudeTranscript(tmp_path / "burst.jsonl", "burst-session", str(project))
    shutil.copyfile(FIXTURES / "claude_code_transcript.jsonl", transcript.path)
    hooked = run_hook(home, "claude-code", json.dumps(transcript.payload("Stop")))
    assert (hooked.returncode, hooked.stderr) == (0, "")
    [request] = (home / "inbox").glob("*.json")
    written = request.stat().st_mtime
    with open_service(settings) as svc:
        drained_at: list[float] = []
        _watch_until_drained(svc, settings, lambda: drained_at.append(time.time()))
    assert len(drained_at) == 1
    assert drained_at[0] - written >= 0.75


def test_enrichment_waits_while_captures_keep_arriving(
    settings: Settings, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture request younger than `CAPTURES_QUIET_S` holds the enrichment worker's next
    step back: the agent's hooks are still coming."""
    monkeypatch.setattr(captures, "CAPTURES_QUIET_S", 0.8)
    with open_service(settings) as svc:
        svc.record(
            MemoryDraft(
                type=MemoryType.SESSION,
                title="Moved the cache to Redis",
                body="We moved the session cache from Memcached to Redis; p95 fell to 4 ms.",
                scope_path=project,
            )
        )
        prepared_at: list[float] = []
        original = svc.prepare_enrichment

        def prepare(slug: str, **kwargs: Any) -> Any:
            prepared_at.append(time.time())
            return original(slug, **kwargs)

        svc.prepare_enrichment = prepare  # type: ignore[method-assign]
        arrived = Inbox(svc.home).submit(
            IndexRequest(
                slug="session-arriving",
                path=str(project / "arriving.md"),
                scope_hash="0123456789ab",
                scope_path=None,
                source="claude-code",
                ts=now_ts(),
            )
        )
        written = arrived.stat().st_mtime
        runner = ServiceRunner()
        try:
            settled = asyncio.run(enrich_round(svc, runner, 8))
        finally:
            runner.close()
        assert (settled, svc.enrichment_due(8)) == (1, [])
    assert prepared_at[0] - written >= 0.75
