"""A big batch (issue 28): its extraction shared with a worker process gives one process's
output, a worker that dies costs only time, and a bulk write whose graph rows (written in
a thread beside the files and the index) fail leaves nothing behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Settings, load_settings
from memoryd.domain import ingest
from memoryd.errors import StorageError
from memoryd.extraction import workers
from memoryd.extraction.linking import KnownEntity
from memoryd.extraction.pipeline import Extractor
from memoryd.models import EntityType, Memory, MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.wiring import open_service

TOOLS = ["PostgreSQL", "Redis", "Kafka", "pytest", "Docker", "GraphQL", "DuckDB", "FastAPI"]


def texts(count: int) -> list[tuple[str, str]]:
    """Titles and bodies of several shapes: tools, relations, code, paths, Chinese."""
    out = []
    for i in range(count):
        a, b = TOOLS[i % len(TOOLS)], TOOLS[(i * 3 + 1) % len(TOOLS)]
        body = [
            f"We switched from {b} to {a} for the billing service after timeouts.",
            f"`{a.lower()}.connect()` in src/billing/store_{i}.py now retries; Alice reviewed it.",
            f"计费服务从 {b} 迁移到 {a}，因为延迟太高。",
            f"{a} depends on {b}; see https://example.com/{i} and PEP 8.",
        ][i % 4]
        out.append((f"Note {i} on {a}", f"{body} Case {i}."))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


KNOWN = [
    KnownEntity(id="tool-postgresql", name="PostgreSQL", type=EntityType.TOOL),
    KnownEntity(id="tool-redis", name="Redis", type=EntityType.TOOL, aliases=["redis-server"]),
    KnownEntity(id="person-alice", name="Alice", type=EntityType.PERSON),
]


@pytest.fixture(scope="module")
def single() -> Extractor:
    return Extractor(workers=False)


@pytest.fixture
def shared() -> Iterator[Extractor]:
    """An extractor with a worker of its own, stopped after the test."""
    extractor = Extractor()
    if extractor._worker is None:
        pytest.skip("one core: extraction stays in one process")
    try:
        yield extractor
    finally:
        extractor.close()


def drafts(scope: Path, count: int, suffix: str = "") -> list[MemoryDraft]:
    return [
        MemoryDraft(type=MemoryType.FACT, title=f"{t}{suffix}", body=b, scope_path=scope)
        for t, b in texts(count)
    ]


def dumps(extractor: Extractor, batch: list[tuple[str, str]]) -> list[dict[str, object]]:
    return [e.model_dump() for e in extractor.extract_many(batch, known=KNOWN)]


Batch = list[tuple[str, str]]
Dumped = list[dict[str, object]]


def worker_started(single: Extractor, shared: Extractor) -> tuple[Batch, Dumped, int]:
    """A batch big enough to share, what one process extracts from it, and the pid of the
    worker `shared` started for it (its answer already checked against that)."""
    batch = texts(workers.PARALLEL_MIN)
    expected = dumps(single, batch)
    assert shared._worker is not None
    assert dumps(shared, batch) == expected
    pid = shared._worker.pid()
    assert pid is not None
    return batch, expected, pid


def test_a_batch_shared_with_the_worker_is_extracted_as_in_one_process(single: Extractor) -> None:
    batch = texts(workers.PARALLEL_MIN + 3 * workers.CHUNK + 7)
    expected = [e.model_dump() for e in single.extract_many(batch, known=KNOWN)]
    shared = Extractor()
    if shared._worker is None:
        pytest.skip("one core: extraction stays in one process")
    try:
        for _ in range(2):  # the worker's first batch finds it starting, the second warm
            got = [e.model_dump() for e in shared.extract_many(batch, known=KNOWN)]
            assert got == expected
        assert shared._worker.chunks_done > 0  # the warm worker took part of the batch
        assert shared._worker.pid() is not None
    finally:
        shared.close()
    assert shared._worker.pid() is None


def test_a_killed_worker_costs_only_time(single: Extractor, shared: Extractor) -> None:
    batch, expected, first = worker_started(single, shared)
    assert shared._worker is not None
    os.kill(first, signal.SIGKILL)
    assert dumps(shared, batch) == expected
    assert dumps(shared, batch) == expected
    assert shared._worker.pid() not in (None, first)  # the next big batch started another


def test_an_answer_that_cannot_be_read_costs_only_time(
    single: Extractor, shared: Extractor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's extractions come back as tuples (`workers.pack`); one that does not
    unpack stops that worker and its chunks are extracted here."""
    batch, expected, _ = worker_started(single, shared)  # started and warm
    assert shared._worker is not None
    called: list[object] = []

    def unreadable(packed: object) -> list[object]:
        called.append(packed)
        raise ValueError("not a packed chunk")

    monkeypatch.setattr(workers, "unpack", unreadable)
    for _ in range(3):  # the warm worker answers a chunk of one of them
        assert dumps(shared, batch) == expected
        if called:
            break
    assert called
    assert shared._worker.pid() is None  # stopped; the next big batch starts another
    monkeypatch.undo()
    assert dumps(shared, batch) == expected
    assert shared._worker.pid() is not None


def test_an_idle_worker_stops_and_the_next_big_batch_starts_another(
    single: Extractor, shared: Extractor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers, "IDLE_S", 0.5)  # read when a batch ends
    batch, expected, first = worker_started(single, shared)
    assert shared._worker is not None
    deadline = time.monotonic() + 30
    while alive(first) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(first)  # exited and reaped
    assert shared._worker.pid() is None
    assert dumps(shared, batch) == expected
    assert shared._worker.pid() not in (None, first)


def test_a_bulk_batch_whose_graph_write_fails_leaves_nothing(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = svc.record(
        MemoryDraft(type=MemoryType.FACT, title="Kept", body="PostgreSQL runs billing.")
    ).slug
    calls: list[int] = []

    def broken(batch: list[object], **_: object) -> None:
        calls.append(len(batch))
        raise StorageError("the graph refused the batch")

    monkeypatch.setattr(svc.graph, "upsert_memories", broken)
    with pytest.raises(StorageError, match="refused the batch"):
        svc.record_many(drafts(project, 12))
    monkeypatch.undo()
    assert calls == [12]
    assert svc.graph.memory_slugs() == {kept}
    assert svc.index.slugs() == {kept}
    assert [p.stem for p in svc.vault.iter_files()] == [kept]
    assert svc.consistency() == (set(), set(), set())


def test_a_bulk_batch_whose_files_fail_takes_its_graph_rows_back(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*_: object) -> None:
        raise StorageError("no space left writing the batch's files")

    monkeypatch.setattr(svc.vault, "write_many", full_disk)
    with pytest.raises(StorageError, match="no space left"):
        svc.record_many(drafts(project, 12))
    monkeypatch.undo()
    assert svc.graph.memory_slugs() == set()
    assert svc.index.slugs() == set()
    assert list(svc.vault.iter_files()) == []
    assert svc.consistency() == (set(), set(), set())


def test_a_batch_with_a_sensitive_memory_is_never_sent_to_the_worker(
    svc: MemoryService, project: Path, tmp_path: Path, file_keyring: object
) -> None:
    worker = svc.extractor._worker if isinstance(svc.extractor, Extractor) else None
    if worker is None:
        pytest.skip("one core: extraction stays in one process")
    svc.sensitive_mark(project)
    size = workers.PARALLEL_MIN + 2 * workers.CHUNK
    before = worker.chunks_done
    for round_ in range(3):  # the worker takes chunks once it has started
        svc.record_many(drafts(project, size, f" {round_}"))
    assert worker.chunks_done == before
    plain = tmp_path / "plain"
    plain.mkdir()
    for round_ in range(3):  # the same batches in a plain scope are shared
        svc.record_many(drafts(plain, size, f" {round_}"))
        if worker.chunks_done > before:
            break
    assert worker.chunks_done > before


def extracted(memories: list[Memory]) -> dict[str, tuple[object, object]]:
    """Each memory's extracted observations and relations, by title."""
    return {
        m.meta.title: (
            list(m.meta.observations),
            [r.model_dump() for r in m.meta.relations],
        )
        for m in memories
    }


def entities(svc: MemoryService) -> list[tuple[object, ...]]:
    """The graph's entities less their times (each home records at its own time)."""
    return sorted(
        (e.id, e.name, e.type, e.aliases, e.mention_count, e.scope_hash)
        for e in svc.graph.entity_catalogue()
    )


def one_home(settings: Settings, name: str) -> MemoryService:
    return open_service(
        load_settings(
            settings.home.parent / name,
            graph={"engine": settings.graph.engine, "buffer_pool_mb": 128},
            lock_timeout_s=1.0,
        )
    )


def test_a_call_past_bulk_batch_has_the_worker_extract_each_batch_beside_the_write_before_it(
    svc: MemoryService, settings: Settings, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a write batch is written, the worker extracts the next one (this process joins
    once the write is done), against the entities known before the call: what is stored is
    what one extraction of the whole call stores (the reference home writes the drafts as one
    batch)."""
    worker = svc.extractor._worker if isinstance(svc.extractor, Extractor) else None
    if worker is None:
        pytest.skip("one core: extraction stays in one process")
    size = workers.PARALLEL_MIN
    with one_home(settings, "reference") as one:
        reference = extracted(one.record_many(drafts(project, 2 * size + 10)))
        reference_entities = entities(one)
    monkeypatch.setattr(ingest, "BULK_BATCH", size)
    seen: list[str] = []
    extract, write = svc._extract, svc.graph.upsert_memories

    def _extract(memories: list[Memory], *rest: Any, **kw: Any) -> None:
        seen.append(f"extract {len(memories)}")
        extract(memories, *rest, **kw)

    def upsert(batch: list[Memory], **kwargs: Any) -> None:
        if kwargs.get("new") and not any(s.startswith("write") for s in seen):
            before, deadline = worker.chunks_done, time.monotonic() + 30
            while worker.chunks_done == before and time.monotonic() < deadline:
                time.sleep(0.01)
            beside = "the worker extracting" if worker.chunks_done > before else "nothing"
            seen.append(f"write {len(batch)} beside {beside}")
        elif kwargs.get("new"):  # not judging's decisions, written after the batches
            seen.append(f"write {len(batch)}")
        write(batch, **kwargs)

    monkeypatch.setattr(svc, "_extract", _extract)
    monkeypatch.setattr(svc.graph, "upsert_memories", upsert)
    written = svc.record_many(drafts(project, 2 * size + 10))
    monkeypatch.undo()
    assert seen == [
        f"extract {size}",
        f"extract {size}",
        f"write {size} beside the worker extracting",
        "extract 10",  # too short to share: extracted here once the write is done
        f"write {size}",
        "write 10",
    ]
    assert not [t for t in threading.enumerate() if t.name == "memoryd-extract-ahead"]
    assert extracted(written) == reference
    assert extracted([svc.get(m.slug) for m in written]) == reference
    assert entities(svc) == reference_entities
    assert svc.consistency() == (set(), set(), set())


def test_an_extraction_that_fails_ahead_leaves_the_batches_before_written(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second batch's extraction fails while the first is written: the first stays (as
    when a later batch's write fails), nothing of the others is anywhere, the error is said."""
    monkeypatch.setattr(ingest, "BULK_BATCH", 10)
    extract = svc._extract
    calls: list[int] = []

    def _extract(memories: list[Memory], *known: Any, **kw: Any) -> None:
        calls.append(len(memories))
        if len(calls) == 2:
            raise StorageError("the extraction of the second batch broke")
        extract(memories, *known, **kw)

    monkeypatch.setattr(svc, "_extract", _extract)
    batch = drafts(project, 30)
    with pytest.raises(StorageError, match="second batch broke"):
        svc.record_many(batch)
    monkeypatch.undo()
    assert calls == [10, 10]
    titles = {svc.get(slug).meta.title for slug in svc.graph.memory_slugs()}
    assert titles == {d.title for d in batch[:10]}
    assert len(svc.index.slugs()) == 10
    assert len(list(svc.vault.iter_files())) == 10
    assert svc.consistency() == (set(), set(), set())
    assert not [t for t in threading.enumerate() if t.name == "memoryd-extract-ahead"]


def test_a_write_that_fails_while_the_next_batch_is_extracted_leaves_nothing_of_it(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch's graph write fails while the second is extracted beside it: the
    write's error is raised once the extraction has ended, and nothing is written."""
    monkeypatch.setattr(ingest, "BULK_BATCH", 10)
    extract = svc._extract
    ended: list[int] = []

    def _extract(memories: list[Memory], *known: Any, **kw: Any) -> None:
        extract(memories, *known, **kw)
        ended.append(len(memories))

    def broken(batch: list[object], **_: object) -> None:
        raise StorageError("the graph refused the batch")

    monkeypatch.setattr(svc, "_extract", _extract)
    monkeypatch.setattr(svc.graph, "upsert_memories", broken)
    with pytest.raises(StorageError, match="refused the batch"):
        svc.record_many(drafts(project, 30))
    monkeypatch.undo()
    assert ended == [10, 10]  # the second batch's extraction ended before the error came
    assert svc.graph.memory_slugs() == set()
    assert svc.index.slugs() == set()
    assert list(svc.vault.iter_files()) == []
    assert svc.consistency() == (set(), set(), set())
