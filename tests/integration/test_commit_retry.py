"""A failed commit of the search index's waiting documents is tried again by its timer, with
a wait that grows after each failure, until the index can be written: the documents then land
without any read or write asking for them, each once, and the records' journal intents end
once. Meanwhile the wait and its error show in `memoryd status` (the daemon's health) and in
`doctor`, and the failure is logged once. The fault is real: the index's directory is made
unwritable (`tests.faults.unwritable`), so tantivy's own commit fails."""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.errors import StorageError
from memoryd.journal import Intent, Journal
from memoryd.search.index import SearchIndex
from memoryd.service import CREATING_EVENTS, MemoryService
from tests.daemon_harness import running, uds_client
from tests.faults import unwritable
from tests.integration.test_group_commit import body, doc, draft, record
from tests.waiting import wait_until

runner = CliRunner()

LANDS_S = 90.0
"""How long a test waits for the documents to land once the fault clears: the retry's wait
grows with each failed try (reads that try too count) up to 30 s, and a loaded machine makes
the fault last longer."""

DELAY_S = 0.05
"""The index's commit delay here: its retries come 0.05, 0.1, 0.2 … s after each failure."""


@pytest.fixture(autouse=True)
def _small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


def on_disk(directory: Path) -> tuple[int, set[str]]:
    """The documents and slugs another process finds in the index (none of ours reads it)."""
    other = SearchIndex.open(directory, saves=False)
    try:
        return other.count(), other.slugs()
    finally:
        other.close()


def failed(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_failed_timer_commit_lands_once_the_index_can_be_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "index"
    ran: list[str] = []
    with SearchIndex.open(directory) as index:
        index.commit_delay_s = DELAY_S
        index.upsert([doc("a")], then=lambda: ran.append("a"))
        wait_until(lambda: ran == ["a"], what="the first commit")
        with caplog.at_level(logging.DEBUG, logger="memoryd.search"), unwritable(directory):
            for slug in ("b", "c"):
                index.upsert([doc(slug)], then=lambda slug=slug: ran.append(slug))  # type: ignore[misc]
            wait_until(lambda: failed(caplog), what="the timer's commit to fail")
            time.sleep(0.5)  # a few more tries, all failing
            assert ran == ["a"]  # their `then`s (a record's journal end) wait for the commit
        # The fault cleared: no read, no write; the timer's next try commits them.
        wait_until(
            lambda: sorted(ran) == ["a", "b", "c"], what="the timer's retry", timeout_s=LANDS_S
        )
        assert on_disk(directory) == (3, {"a", "b", "c"})  # each once
    errors = failed(caplog)
    assert len(errors) == 1, [r.getMessage() for r in errors]  # logged once, tried many times
    message = errors[0].getMessage()
    assert "recorded memories are not searchable yet" in message
    assert "tries again" in message
    assert "Free disk space or restore write access" in message
    tries = [r for r in caplog.records if "failed tries" in r.getMessage()]
    assert len(tries) == 1
    assert "searchable now" in tries[0].getMessage()
    assert Counter(ran) == {"a": 1, "b": 1, "c": 1}


def test_the_index_reports_the_waiting_documents_and_the_failure_until_a_commit_succeeds(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "index"
    with SearchIndex.open(directory) as index:
        index.commit_delay_s = DELAY_S
        index.upsert([doc("a")])
        assert index.commit_wait().documents == 0
        with unwritable(directory):
            for slug in ("b", "c"):
                index.upsert([doc(slug)], then=lambda: None)
            failing = wait_until(
                lambda: w if (w := index.commit_wait()).failures >= 3 else None,
                what="three failed tries",
            )
            assert failing is not None
            assert failing.documents == 2
            assert failing.since is not None
            assert failing.failing_since is not None
            assert failing.since <= failing.failing_since
            assert failing.first_error is not None
            assert "indexing 2 document(s) failed" in failing.first_error
            assert failing.error is not None
            assert failing.retry_at is not None
            assert failing.retry_at >= failing.failing_since
        wait_until(
            lambda: index.commit_wait().documents == 0, what="the timer's retry", timeout_s=LANDS_S
        )
        cleared = index.commit_wait()
        assert cleared == (0, None, 0, None, None, None, None)


def test_the_retry_waits_longer_after_each_failure_up_to_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read off the scheduled tries, so a stalled test thread cannot blur the waits: try k
    fails at `now_k` and schedules the next at `retry_at_k = now_k + wait_k`, and try k+1
    starts no earlier, so `retry_at_k+1 - retry_at_k >= wait_k+1`; and the failure is seen
    after it happened, so `retry_at_k - seen_k <= wait_k`."""
    cap = 0.4
    monkeypatch.setattr("memoryd.search.retries._RETRY_MAX_S", cap)
    directory = tmp_path / "index"
    seen: dict[int, tuple[datetime, datetime]] = {}  # failures → (seen at, next try at)
    with SearchIndex.open(directory) as index:
        index.commit_delay_s = DELAY_S
        index.upsert([doc("a")])
        with unwritable(directory):
            index.upsert([doc("b")], then=lambda: None)
            while max(seen, default=0) < 8:
                wait = index.commit_wait()
                if wait.failures and wait.failures not in seen and wait.retry_at is not None:
                    seen[wait.failures] = (datetime.now(UTC), wait.retry_at)
                time.sleep(0.002)
        index.commit()  # a read or a write tries at once
        assert index.commit_wait().failures == 0

    def waited(k: int) -> float:  # 0.05, 0.1, 0.2, then the bound 0.4, 0.4 …
        return min(DELAY_S * 2 ** (k - 1), cap)

    assert len(seen) >= 4, seen  # most tries seen: 2 ms polls, waits of 50 ms and more
    for k, (seen_at, retry_at) in seen.items():
        assert (retry_at - seen_at).total_seconds() <= waited(k), (k, seen)
        if k - 1 in seen:
            gap = (retry_at - seen[k - 1][1]).total_seconds()
            assert gap >= waited(k) - 0.001, (k, gap)


def test_records_whose_commit_failed_end_their_intents_once_and_stay_single(
    svc: MemoryService,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended: Counter[str] = Counter()
    end = Journal.end

    def counted(self: Journal, intent: Intent) -> None:  # counts, then ends as ever
        ended[intent.id] += 1
        end(self, intent)

    monkeypatch.setattr(Journal, "end", counted)
    svc.index.commit_delay_s = DELAY_S
    first = svc.record(draft(0, project)).slug
    wait_until(lambda: not Journal(svc.home).slugs_in_flight(), what="the first commit")
    with caplog.at_level(logging.ERROR, logger="memoryd.search"), unwritable(svc.index.directory):
        slugs = [svc.record(draft(i, project)).slug for i in range(1, 4)]
        wait_until(lambda: failed(caplog), what="the timer's commit to fail")
        time.sleep(0.5)  # a few more tries, all failing
        assert Journal(svc.home).slugs_in_flight() == set(slugs)  # open while they wait
    wait_until(
        lambda: not Journal(svc.home).slugs_in_flight(), what="the intents' ends", timeout_s=LANDS_S
    )
    assert len(ended) == 4
    assert set(ended.values()) == {1}
    assert on_disk(svc.index.directory) == (4, {first, *slugs})
    for i, slug in enumerate([first, *slugs]):
        assert [h.slug for h in svc.search(f"rottnest{i}", scope=project)] == [slug]
    assert svc.index.slugs() == svc.audit.targets(CREATING_EVENTS) == {first, *slugs}
    assert svc.recover() == 0


def test_the_daemon_shows_the_wait_in_status_and_doctor_and_commits_by_itself(
    home: Path, project: Path
) -> None:
    env = {"MEMORYD_SEARCH__COMMIT_DELAY_MS": "100", "MEMORYD_DAEMON__RECALL_READERS": "0"}
    with running(home, env=env) as daemon, uds_client(daemon.home) as client:
        first = record(client, body(0, project))
        wait_until(lambda: not Journal(home).slugs_in_flight(), what="the first commit")
        assert client.get("/v1/health").json()["index_waiting"] == 0
        with unwritable(home / "search"):
            slugs = [record(client, body(i, project)) for i in range(1, 4)]
            health = failing(client, 2)
            assert health["index_waiting"] == 3
            assert health["index_waiting_since"] is not None
            assert "document(s) failed: " in health["index_first_error"]
            assert health["index_retry_at"] is not None
            doctor = {c["name"]: c for c in client.get("/v1/doctor").json()}
            commits = doctor["search index commits"]
            assert not commits["ok"]
            assert "3 memories wait for a commit since" in commits["detail"]
            assert "restore write access" in commits["fix"]
            assert not doctor["index consistency"]["ok"]  # it cannot read past the wait
            # A read commits first (read-your-writes): it fails, saying what to do.
            found = client.get("/v1/search", params={"q": "quokka", "scope": str(project)})
            assert found.status_code == 503
            assert "write access" in found.json()["error"]["hint"]
            status = runner.invoke(app, ["status", "--home", str(home)])
            assert status.exit_code == 0, status.output
            assert "search index: 3 memories wait for a commit since" in status.stdout
            assert "the daemon tries again at" in status.stdout
            checked = runner.invoke(app, ["doctor", "--home", str(home)])
            assert checked.exit_code == 1
            assert "FAIL search index commits: 3 memories wait for a commit" in checked.stdout
            assert Journal(home).slugs_in_flight() == set(slugs)
        # Nothing but the health probe (which reads no store) until the timer's retry lands.
        wait_until(
            lambda: client.get("/v1/health").json()["index_waiting"] == 0,
            what="the daemon's retry",
            timeout_s=LANDS_S,
        )
        health = client.get("/v1/health").json()
        assert (health["index_failed_commits"], health["index_error"]) == (0, None)
        assert not Journal(home).slugs_in_flight()
        assert on_disk(home / "search") == (4, {first, *slugs})
        doctor = {c["name"]: c for c in client.get("/v1/doctor").json()}
        assert doctor["search index commits"]["ok"]
        assert "search index" not in runner.invoke(app, ["status", "--home", str(home)]).stdout
        assert doctor["index consistency"]["ok"], doctor["index consistency"]
    log = daemon.log.read_text()
    assert log.count("recorded memories are not searchable yet") == 1


def failing(client: httpx.Client, tries: int) -> dict[str, Any]:
    """The daemon's health once `tries` commits failed."""
    health: dict[str, Any] = wait_until(
        lambda: (h := client.get("/v1/health").json())["index_failed_commits"] >= tries and h,
        what=f"{tries} failed tries in the daemon's health",
    )
    return health


def test_a_batch_refused_while_the_index_cannot_commit_leaves_nothing_behind(
    svc: MemoryService, project: Path
) -> None:
    """A batch commits at once, with the records waiting: while the index cannot commit it
    fails, and is undone in every store, while the waiting records stay for the retry."""
    svc.index.commit_delay_s = DELAY_S
    with unwritable(svc.index.directory):
        waiting = svc.record(draft(0, project)).slug
        with pytest.raises(StorageError, match="search index"):
            svc.record_many([draft(1, project), draft(2, project)])
        assert svc.graph.memory_slugs() == {waiting}
        assert [p.stem for p in svc.vault.iter_files()] == [waiting]
    wait_until(lambda: not Journal(svc.home).slugs_in_flight(), what="the retry", timeout_s=LANDS_S)
    assert svc.index.slugs() == {waiting}
    assert svc.consistency() == (set(), set(), set())
