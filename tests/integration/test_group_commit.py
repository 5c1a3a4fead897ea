"""Group commit of the search index: records close together share one index commit (each
commit adds a segment, and tantivy's merges rewrite a small index every ~8 of them), yet every
surface finds a memory right after its `record`, and a kill -9 before the commit loses
nothing: the record's journal intent stays open until a commit holds its document."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryd.config import Settings
from memoryd.journal import Journal
from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.service import CREATING_EVENTS, MemoryService
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client
from tests.waiting import wait_until

N = 6

LONG = 60.0
"""A commit delay (the most the setting allows) no test here outlives: only a read, a write or
`close` commits."""


@pytest.fixture(autouse=True)
def _small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


def draft(i: int, project: Path) -> MemoryDraft:
    return MemoryDraft(
        type=MemoryType.FACT,
        title=f"Quokka fact {i}",
        body=f"The quokka number {i} lives on Rottnest{i} island.",
        scope_path=project,
    )


def body(i: int, project: Path) -> dict[str, Any]:
    return {
        "type": "fact",
        "title": f"Quokka fact {i}",
        "body": f"The quokka number {i} lives on Rottnest{i} island.",
        "scope": str(project),
    }


def doc(slug: str) -> SearchDoc:
    return SearchDoc(
        slug=slug,
        scope_hash="s1",
        type=MemoryType.FACT,
        decay_state=DecayState.ALIVE,
        title=f"Quokka {slug}",
        body="A quokka lives on Rottnest island.",
        tags=[],
        triggers=[],
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def in_flight(home: Path) -> set[str]:
    return Journal(home).slugs_in_flight()


def test_records_in_a_row_share_one_index_commit_and_each_is_found_at_once(
    svc: MemoryService, project: Path
) -> None:
    svc.index.commit_delay_s = LONG
    before = svc.index.generation
    slugs = [svc.record(draft(i, project)).slug for i in range(N)]
    # No commit yet: the intents stay open until one holds the documents.
    assert svc.index.generation == before
    assert in_flight(svc.home) == set(slugs)
    for i, slug in enumerate(slugs):
        hits = svc.recall(f"rottnest{i}", scope=project, track=False).hits
        assert [h.slug for h in hits] == [slug]
        assert [h.slug for h in svc.search(f"rottnest{i}", scope=project)] == [slug]
    assert svc.index.generation == before + 1  # the first read committed all six
    assert in_flight(svc.home) == set()
    # One record then its recall, again and again: each finds its own memory.
    for i in range(N, 2 * N):
        slug = svc.record(draft(i, project)).slug
        assert [h.slug for h in svc.recall(f"rottnest{i}", scope=project, track=False).hits] == [
            slug
        ]
    assert in_flight(svc.home) == set()


def test_the_timer_commits_waiting_records_for_other_processes(
    svc: MemoryService, project: Path
) -> None:
    svc.index.commit_delay_s = 0.2
    before = svc.index.generation
    slugs = [svc.record(draft(i, project)).slug for i in range(3)]
    wait_until(lambda: svc.index.generation > before, what="the timer's commit")
    wait_until(lambda: not in_flight(svc.home), what="the intents' ends")
    # What another process opening the index from disk sees (no read of ours committed it).
    other = SearchIndex.open(svc.index.directory, saves=False)
    try:
        assert {h.slug for h in other.search("quokka", limit=10)} == set(slugs)
    finally:
        other.close()


def test_the_timer_waits_for_a_burst_of_writes_to_pause(tmp_path: Path) -> None:
    """A write that comes before the timer is due puts the commit off until the writes pause:
    a burst shares one commit instead of one per `commit_delay_s`."""
    delay = 1.0
    for attempt in range(5):  # a machine that stalled a whole delay between the writes: again
        first, second, committed, commits = burst(tmp_path / f"index-{attempt}", delay)
        if second - first >= delay:
            continue
        assert commits == 1  # one commit held both
        assert min(committed) >= second + delay
        return
    pytest.fail("two writes less than a delay apart never happened")


def burst(directory: Path, delay: float) -> tuple[float, float, list[float], int]:
    """Two writes `delay` * 0.6 apart; when each started, when their `then`s ran, and the
    commits made."""
    committed: list[float] = []
    with SearchIndex.open(directory) as index:
        index.commit_delay_s = delay
        first = time.monotonic()
        index.upsert([doc("a")], then=lambda: committed.append(time.monotonic()))
        time.sleep(delay * 0.6)
        second = time.monotonic()
        index.upsert([doc("b")], then=lambda: committed.append(time.monotonic()))
        wait_until(lambda: len(committed) == 2, what="the timer's commit")
        return first, second, committed, index.generation


def test_a_batch_write_and_close_commit_the_waiting_records(
    settings: Settings, project: Path
) -> None:
    with open_service(settings) as svc:
        svc.index.commit_delay_s = LONG
        before = svc.index.generation
        first = svc.record(draft(0, project)).slug
        batch = [m.slug for m in svc.record_many([draft(1, project), draft(2, project)])]
        assert svc.index.generation == before + 1  # the batch's commit holds the record too
        assert in_flight(settings.home) == set()
        last = svc.record(draft(3, project)).slug
        assert in_flight(settings.home) == {last}
    assert in_flight(settings.home) == set()  # closing committed it
    index = SearchIndex.open(settings.home / "search", saves=False)
    try:
        assert {h.slug for h in index.search("quokka", limit=10)} == {first, *batch, last}
    finally:
        index.close()


@pytest.mark.parametrize("readers", ["0", "1"])
def test_records_in_a_row_through_the_daemon_are_each_recalled_at_once(
    home: Path, project: Path, readers: str
) -> None:
    """In the daemon itself, and in a reader process that reads the index from disk (its
    hand-off commits first)."""
    env = {
        "MEMORYD_DAEMON__RECALL_READERS": readers,
        "MEMORYD_SEARCH__COMMIT_DELAY_MS": str(int(LONG * 1000)),
    }
    with running(home, env=env) as daemon, uds_client(daemon.home) as client:
        if readers != "0":
            client.get("/v1/recall", params={"q": "warm up", "track": False})
            wait_until(
                lambda: client.get("/v1/health").json()["recall_readers"] >= 1,
                what="a recall reader",
                timeout_s=60,
            )
        slugs = [record(client, body(i, project)) for i in range(N)]
        assert in_flight(home) == set(slugs)
        for i, slug in enumerate(slugs):
            assert recalled(client, f"rottnest{i}", project) == [slug]
            found = client.get("/v1/search", params={"q": f"rottnest{i}", "scope": str(project)})
            assert [h["slug"] for h in found.json()["items"]] == [slug]
        for i in range(N, 2 * N):
            slug = record(client, body(i, project))
            assert recalled(client, f"rottnest{i}", project) == [slug]
        assert in_flight(home) == set()


def test_records_a_daemon_acknowledged_survive_its_kill_before_the_index_commit(
    settings: Settings, project: Path
) -> None:
    env = {"MEMORYD_SEARCH__COMMIT_DELAY_MS": str(int(LONG * 1000))}
    with running(settings.home, env=env) as daemon, uds_client(daemon.home) as client:
        slugs = [record(client, body(i, project)) for i in range(N)]
        assert in_flight(settings.home) == set(slugs)
        daemon.kill()
    with open_service(settings) as svc:
        for i, slug in enumerate(slugs):
            assert [h.slug for h in svc.search(f"rottnest{i}", scope=project)] == [slug]
        assert svc.index.slugs() == set(slugs) == svc.audit.targets(CREATING_EVENTS)
        assert svc.recover() == 0
    assert in_flight(settings.home) == set()


def record(client: httpx.Client, json: dict[str, Any]) -> str:
    created = client.post("/v1/memories", json=json)
    assert created.status_code in (200, 201), created.text
    return str(created.json()["meta"]["slug"])


def recalled(client: httpx.Client, q: str, project: Path) -> list[str]:
    response = client.get("/v1/recall", params={"q": q, "scope": str(project), "track": False})
    assert response.status_code == 200, response.text
    return [h["slug"] for h in response.json()["hits"]]
