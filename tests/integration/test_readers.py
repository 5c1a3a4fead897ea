"""Recall readers: the daemon ranks recalls in reader processes that must answer exactly as
the daemon itself would, see every acknowledged write, and never be needed for correctness."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryd.config import load_settings
from memoryd.daemon.readers import (
    GRAPH_READS,
    ReaderState,
    RemoteGraph,
    _graph_read,
    catch_up,
)
from memoryd.search.index import SearchIndex
from memoryd.search.stats import Snapshot
from memoryd.wiring import open_service
from tests.daemon_harness import reader_pids, running, uds_client
from tests.waiting import wait_until

QUERIES = [
    "react storefront",
    "postgres migration",
    "部署",
    "cache ttl redis",
    "solid",
    "which databases do we run",
]


@pytest.fixture(autouse=True)
def _small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


def seed(home: Path, project: Path) -> None:
    with open_service(load_settings(home)) as svc:
        from memoryd.models import MemoryDraft, MemoryType

        drafts = [
            ("preference", "Use React", "The storefront uses React and Vite."),
            ("decision", "Switch to Solid", "We switched from React to Solid for the storefront."),
            ("fact", "Cache TTL", "Redis cache entries expire after ten minutes."),
            ("playbook", "Postgres migration", "Run alembic upgrade head, then check the logs."),
            ("decision", "部署", "我们决定采用 Kubernetes 部署 API。"),
            ("warning", "Flaky CI", "The Postgres container in CI needs a health check."),
        ]
        for kind, title, body in drafts:
            svc.record(
                MemoryDraft(type=MemoryType(kind), title=title, body=body, scope_path=project)
            )


def wait_for_readers(client: httpx.Client, wanted: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    client.get("/v1/recall", params={"q": "warm up", "track": False})  # starts them
    while client.get("/v1/health").json()["recall_readers"] < wanted:
        assert time.monotonic() < deadline, "recall readers did not start"
        time.sleep(0.1)


def recall(client: httpx.Client, q: str, project: Path, **extra: Any) -> dict[str, Any]:
    response = client.get(
        "/v1/recall", params={"q": q, "scope": str(project), "track": False, **extra}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_readers_answer_as_the_daemon_itself_does(home: Path, project: Path) -> None:
    seed(home, project)
    with (
        running(home, env={"MEMORYD_DAEMON__RECALL_READERS": "0"}) as daemon,
        uds_client(daemon.home) as client,
    ):
        assert client.get("/v1/health").json()["recall_readers"] == 0
        alone = [recall(client, q, project) for q in QUERIES]
        searched = client.get("/v1/search", params={"q": "react", "scope": str(project)})
    with (
        running(home, env={"MEMORYD_DAEMON__RECALL_READERS": "2"}) as daemon,
        uds_client(daemon.home) as client,
    ):
        wait_for_readers(client, 2)
        for _ in range(3):  # every reader answers at least once
            assert [recall(client, q, project) for q in QUERIES] == alone
        again = client.get("/v1/search", params={"q": "react", "scope": str(project)})
        assert again.json() == searched.json()
        context = client.post(
            "/v1/recall/context", json={"prompt": "react storefront", "scope": None, "k": 3}
        )
        assert context.status_code == 200, context.text
    assert any(hit["hits"] for hit in alone)
    by_kind = alone[QUERIES.index("which databases do we run")]
    assert "kind" in by_kind["stages"]
    assert all("kind" in hit["stages"] for hit in by_kind["hits"])


def test_readers_see_every_acknowledged_write(home: Path, project: Path) -> None:
    seed(home, project)
    with (
        running(home, env={"MEMORYD_DAEMON__RECALL_READERS": "2"}) as daemon,
        uds_client(daemon.home) as client,
    ):
        wait_for_readers(client, 2)
        for i in range(12):
            created = client.post(
                "/v1/memories",
                json={
                    "type": "fact",
                    "title": f"Quokka fact {i}",
                    "body": f"The quokka number {i} lives on Rottnest{i} island.",
                    "scope": str(project),
                },
            )
            assert created.status_code in (200, 201), created.text
            slug = created.json()["meta"]["slug"]
            hits = recall(client, f"rottnest{i}", project)["hits"]
            assert [h["slug"] for h in hits] == [slug]
        # An alias is an entity write: the readers' entity matchers must learn it.
        entity = client.get("/v1/entities", params={"q": "React"}).json()["items"][0]
        aliased = client.post(f"/v1/entities/{entity['id']}/aliases", json={"alias": "Reakt"})
        assert aliased.status_code == 200, aliased.text
        for _ in range(4):
            body = recall(client, "reakt", project)
            assert entity["id"] in body["entities"]
            assert body["hits"]
        # The readers keep the memories mentioning an entity and the supersedes edges
        # between commits: a new mention and a new supersede must show at once.
        react = recall(client, "react", project)["hits"]
        newer = client.post(
            "/v1/memories",
            json={
                "type": "preference",
                "title": "Storefront framework",
                "body": "We use React with the new compiler.",
                "scope": str(project),
                "supersedes": [react[0]["slug"]],
            },
        ).json()["meta"]["slug"]
        for _ in range(4):
            hits = {h["slug"]: h for h in recall(client, "react", project)["hits"]}
            assert "entity" in hits[newer]["stages"]
            assert hits[react[0]["slug"]]["superseded_by"] == newer
        # Reindex replaces the index underneath the readers: they reopen it.
        assert client.post("/v1/reindex").status_code == 200
        for _ in range(4):
            assert recall(client, "rottnest3", project)["hits"]


def test_a_dead_reader_is_replaced_and_no_recall_fails(home: Path, project: Path) -> None:
    seed(home, project)
    with running(home, env={"MEMORYD_DAEMON__RECALL_READERS": "2"}) as daemon:
        with uds_client(daemon.home) as client:
            wait_for_readers(client, 2)
            readers = reader_pids(daemon.pid)
            assert len(readers) == 2
            os.kill(readers[0], signal.SIGKILL)
            for _ in range(10):
                assert recall(client, "react storefront", project)["hits"]
            wait_for_readers(client, 2)
            assert readers[0] not in reader_pids(daemon.pid)
            assert "replacing it" in daemon.log_text()
        pids = reader_pids(daemon.pid)
    # SIGTERM: the daemon takes its readers down with it.
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in pids):
        assert time.monotonic() < deadline, "readers outlived the daemon"
        time.sleep(0.1)


def test_a_reader_may_only_read_the_graph(settings: Any, project: Path) -> None:
    with open_service(settings) as svc:
        denied = _graph_read(svc, "delete_memories", (["x"],), {})
        assert denied[:2] == ("err", "PolicyDenied")
        assert _graph_read(svc, "count_memories", (), {}) == ("ok", 0)
        assert "delete_memories" not in GRAPH_READS
        assert "record_recalls" not in GRAPH_READS


def test_catch_up_reloads_only_what_changed(settings: Any, project: Path) -> None:
    with open_service(settings) as svc:
        calls: list[str] = []
        svc.reopen_index = lambda: calls.append("reopen")  # type: ignore[method-assign]
        svc.index.refresh = lambda changed=None: calls.append("refresh")  # type: ignore[method-assign]
        svc.forget_entities = lambda: calls.append("forget")  # type: ignore[method-assign]
        first = catch_up(svc, None, ReaderState(0, 0, 0, 0))
        assert calls == ["refresh", "forget"]
        calls.clear()
        assert catch_up(svc, first, ReaderState(0, 0, 0, 0)) == first
        assert calls == []
        catch_up(svc, first, ReaderState(0, 1, 0, 0))
        assert calls == ["refresh"]
        calls.clear()
        catch_up(svc, first, ReaderState(1, 1, 1, 1))
        assert calls == ["reopen", "forget"]


class GraphOverPipe:
    """The reader's end of its connection, answered by a real service's graph in-line."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.asked: list[str] = []
        self._answer: tuple[Any, ...] | None = None

    def send(self, message: tuple[Any, ...]) -> None:
        _, name, args, kwargs = message
        self.asked.append(name)
        self._answer = _graph_read(self.svc, name, args, kwargs)

    def recv(self) -> tuple[Any, ...]:
        assert self._answer is not None
        return self._answer


def test_a_reader_keeps_graph_reads_until_the_graph_commits(settings: Any, project: Path) -> None:
    from memoryd.models import MemoryDraft, MemoryType

    with open_service(settings) as svc:
        first = svc.record(
            MemoryDraft(type=MemoryType.PREFERENCE, title="Use React",
                        body="The storefront uses React.", scope_path=project)
        )  # fmt: skip
        react = svc.resolve_entity("React").id
        pipe = GraphOverPipe(svc)
        graph = RemoteGraph(pipe, svc.graph.max_fanout)  # type: ignore[arg-type]
        graph.forget_before(svc.graph.generation)
        for _ in range(3):
            assert graph.mentioning([react]) == svc.graph.mentioning([react])
            assert graph.related_entities([react]) == svc.graph.related_entities([react])
            assert graph.superseded_by([first.slug]) == {}
        assert pipe.asked == ["mentioning", "related_entities", "supersede_edges"]

        newer = svc.record(
            MemoryDraft(type=MemoryType.PREFERENCE, title="React compiler",
                        body="The storefront uses React with its compiler.",
                        scope_path=project, supersedes=[first.slug])
        )  # fmt: skip
        graph.forget_before(svc.graph.generation)
        mentions = graph.mentioning([react])
        assert mentions == svc.graph.mentioning([react])
        assert newer.slug in {slug for _, slug, _ in mentions}
        assert graph.superseded_by([first.slug, newer.slug]) == {first.slug: newer.slug}
        assert pipe.asked[3:] == ["mentioning", "supersede_edges"]


def fresh_statistics(home: Path, scope: str) -> tuple[Snapshot, int]:
    """A fresh process's statistics of `scope` (checked against a count from scratch), and
    how many scopes it counted rather than loaded (saving nothing: checking changes nothing)."""
    counted: list[object] = []
    with SearchIndex.open(home / "search", saves=False) as fresh:
        original = fresh._stats.load

        def load(entries: Any, scopes: Any) -> None:
            counted.append(scopes)
            original(entries, scopes)

        fresh._stats.load = load  # type: ignore[method-assign,assignment]
        found = fresh.statistics([scope], include_forgotten=True)
    with SearchIndex.open(home / "search", saves=False) as recount:
        recount._files = None
        assert found == recount.statistics([scope], include_forgotten=True)
    return found, len(counted)


def test_a_fresh_reader_loads_the_statistics_the_daemons_writes_kept(
    home: Path, project: Path
) -> None:
    """The daemon's writer never recalled the scope (its readers do): its records and
    archivals still keep the scope's saved statistics current, so a reader started later (or
    the next process) loads them instead of counting the scope, and loads what a count finds.
    A reindex drops them, and the new index's writes keep its own."""
    seed(home, project)
    with open_service(load_settings(home)) as svc:
        scope = svc.recall("storefront", scope=project, track=False).hits[0].scope_hash
    assert fresh_statistics(home, scope)[1] == 0  # counted and saved by that recall
    env = {"MEMORYD_DAEMON__RECALL_READERS": "1"}
    memory = {"type": "decision", "title": "Queue", "body": "We use RabbitMQ for the jobs."}
    with running(home, env=env) as daemon, uds_client(daemon.home) as client:
        for title in ("Queue", "Broker"):
            body = {**memory, "title": title, "body": f"{title}: {memory['body']}"}
            made = client.post("/v1/memories", json={**body, "scope": str(project)})
            assert made.status_code == 201, made.text
        gone = client.delete(f"/v1/memories/{made.json()['meta']['slug']}")
        assert gone.status_code == 200, gone.text
        wait_until(
            lambda: fresh_statistics(home, scope)[1] == 0,
            what="the daemon to save the statistics its writes changed",
            every_s=0.5,
        )
        before = fresh_statistics(home, scope)[0]
    assert fresh_statistics(home, scope) == (before, 0)
    with running(home, env=env) as daemon, uds_client(daemon.home) as client:
        assert client.post("/v1/reindex").status_code == 200
        assert fresh_statistics(home, scope)[1] == 0  # the new index's files, kept as it filled
        assert recall(client, "rabbitmq jobs", project)["hits"]
        made = client.post("/v1/memories", json={**memory, "scope": str(project), "title": "Jobs"})
        assert made.status_code == 201, made.text
    assert fresh_statistics(home, scope)[1] == 0


@pytest.mark.parametrize("chinese", [True, False])
def test_a_reader_loads_jieba_before_its_first_call_only_over_chinese_memories(
    settings: Any, project: Path, monkeypatch: pytest.MonkeyPatch, chinese: bool
) -> None:
    """jieba's dictionary takes hundreds of milliseconds to load: a reader over Chinese
    memories loads it before it says it is ready, not during a recall; a reader over none
    never loads it."""
    import socket
    import threading
    from multiprocessing.connection import Connection

    from memoryd.daemon import readers
    from memoryd.models import MemoryDraft, MemoryType

    loaded: list[bool] = []
    monkeypatch.setattr(readers, "load_segmenter", lambda: loaded.append(True))
    with open_service(settings) as svc:
        svc.record(
            MemoryDraft(
                type=MemoryType.DECISION,
                title="部署" if chinese else "Deploy",
                body="我们用 Kubernetes 部署 API。" if chinese else "We deploy on Kubernetes.",
                scope_path=project,
            )
        )
        svc.index.commit()  # as the daemon does before a reader opens the index (ReaderState.of)
        ours, theirs = socket.socketpair()
        daemon_end, reader_end = Connection(ours.detach()), Connection(theirs.detach())
        reader = threading.Thread(target=readers.serve_reader, args=(reader_end,))
        reader.start()
        try:
            daemon_end.send(("hello", str(settings.home), svc.graph.max_fanout, [], None))
            while (message := daemon_end.recv())[0] == "graph":
                daemon_end.send(_graph_read(svc, *message[1:]))
            assert message == ("ready",)
        finally:
            daemon_end.close()
            reader.join(timeout=60)
            reader_end.close()
    assert loaded == ([True] if chinese else [])


def test_a_reader_loads_its_daemons_scopes_before_it_is_ready(
    settings: Any, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope's statistics take 0.6 s of CPU to load at 100k memories: a reader loads the
    scopes its daemon recalled before it reports ready, and its first recall there hands it
    no recount (it opened its index after the daemon's state it was given)."""
    import socket
    import threading
    from multiprocessing.connection import Connection

    from memoryd.daemon import readers
    from memoryd.search.stats_file import StatsFiles

    seed(settings.home, project)
    with open_service(settings) as svc:
        scope = svc.scope_hash_of(project)
        assert scope is not None
        expected = svc.recall("cache ttl redis", scope=scope, track=False)  # tallied, saved
        loads: list[str] = []
        original = StatsFiles.load

        def load(files: StatsFiles, scope_hash: str, opstamp: int) -> Any:
            loads.append(scope_hash)
            return original(files, scope_hash, opstamp)

        monkeypatch.setattr(StatsFiles, "load", load)
        ours, theirs = socket.socketpair()
        daemon_end, reader_end = Connection(ours.detach()), Connection(theirs.detach())
        reader = threading.Thread(target=readers.serve_reader, args=(reader_end,))
        reader.start()

        def answer() -> tuple[Any, ...]:
            while (message := daemon_end.recv())[0] == "graph":
                daemon_end.send(_graph_read(svc, *message[1:]))
            return message

        try:
            state = ReaderState.of(svc)
            daemon_end.send(("hello", str(settings.home), svc.graph.max_fanout, [scope], state))
            assert answer() == ("ready",)
            assert loads == [scope]
            kwargs = {"scope": scope, "track": False}
            daemon_end.send(("call", "recall", ("cache ttl redis",), kwargs, state, None))
            kind, result = answer()
        finally:
            daemon_end.close()
            reader.join(timeout=60)
            reader_end.close()
    assert kind == "ok"
    assert loads == [scope]
    assert [h.slug for h in result.hits] == [h.slug for h in expected.hits]
