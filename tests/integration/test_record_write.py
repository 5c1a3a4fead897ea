"""One memory's graph write (`record`): its MENTIONS edges go out in one statement
(`rows.one_memory_mentions`) and are the edges the per-edge statements write, on every
engine, with the entities' counts a recount gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memoryd.graph.rows import ONE_STATEMENT_MENTIONS
from tests.integration.test_graph_counts import recounted, stored
from tests.integration.test_graph_store import (  # noqa: F401 (fixtures)
    Opener,
    engine,
    memory,
    open_store,
)


def _edges(graph: Any, slug: str) -> list[tuple[str, float]]:
    rows = graph._rows(
        "MATCH (m:Memory {slug: $slug})-[r:MENTIONS]->(e:Entity) RETURN e.id, r.confidence",
        {"slug": slug},
    )
    return sorted((str(eid), float(c)) for eid, c in rows)


@pytest.mark.parametrize("names", [2, 5, ONE_STATEMENT_MENTIONS, ONE_STATEMENT_MENTIONS + 1])
def test_one_memorys_mentions_are_those_a_batch_writes(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
    names: int,
) -> None:
    """The same memory written alone (one statement for its edges, up to the limit) and in
    a batch of two (a statement per edge or an UNWIND): the same edges and confidences, and
    entity counts equal to a recount, new entities and known ones alike."""
    ids = [f"entity:tool:Tool{i:02d}" for i in range(names)]
    alone, batch = open_store(tmp_path / "alone"), open_store(tmp_path / "batch")
    known = memory("known", body="known", observations=ids[::2])
    for graph in (alone, batch):
        graph.upsert_memories([known], new=True)
    one = memory("one", body="one", observations=ids)
    alone.upsert_memories([one], new=True)
    batch.upsert_memories([one, memory("other", body="other", observations=ids[:1])], new=True)
    assert len(_edges(alone, "one")) == names
    assert _edges(alone, "one") == _edges(batch, "one")
    for graph in (alone, batch):
        assert stored(graph) == recounted(graph)


def test_small_write_statements_are_kept_prepared_from_one_write_to_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kuzu: one memory written at a time runs its statements prepared once on the write
    connection, kept across transactions (and a checkpoint): the connection and its kept
    statements stay, the graph holds what a recount gives. A batch's big statements count
    toward the connection's budget, which replaces it (and drops what it kept) once spent."""
    from memoryd.graph import kuzu_store
    from memoryd.graph.kuzu_store import KuzuGraphStore

    graph = KuzuGraphStore(tmp_path / "graph", buffer_pool_mb=64, checkpoint_bytes=1)
    try:
        ids = [f"entity:tool:Tool{i:02d}" for i in range(4)]
        graph.upsert_memories([memory("m-0", observations=ids[:2])], new=True)
        writer, kept = graph._writer, graph._kept
        assert kept._kept
        sizes = []
        for i in range(1, 6):
            one = memory(f"m-{i}", body=f"body {i}", observations=[ids[i % 4], ids[(i + 1) % 4]])
            graph.upsert_memories([one], new=True)
            sizes.append(len(kept._kept))
        assert graph._writer is writer
        assert graph._kept is kept
        assert sizes[-1] == sizes[-2]  # the last write's statements were all kept already
        assert stored(graph) == recounted(graph)
        monkeypatch.setattr(kuzu_store, "WRITER_BUDGET", 100)
        batch = [memory(f"b-{i}", body=f"batch {i}", observations=ids) for i in range(30)]
        graph.upsert_memories(batch, new=True)
        assert graph._writer is not writer
        assert graph._kept is not kept
        assert graph._kept.spent == 0
        assert stored(graph) == recounted(graph)
    finally:
        graph.close()


def test_a_connection_keeps_a_bounded_number_of_statement_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Texts built with their values inlined are each a new statement: past `KEPT_TEXTS` a
    connection runs them unkept (counted toward its budget), so what it keeps never grows
    without end."""
    from memoryd.graph import kuzu_support
    from memoryd.graph.kuzu_store import KuzuGraphStore

    monkeypatch.setattr(kuzu_support, "KEPT_TEXTS", 5)
    graph = KuzuGraphStore(tmp_path / "graph", buffer_pool_mb=64)
    try:
        for i in range(12):
            assert graph.cypher(f"RETURN {i} AS n").rows == [[i]]
        kept = graph._local.kept
        assert len(kept._kept) == 5
        assert graph.cypher("RETURN 3 AS n").rows == [[3]]  # a kept one still answers
    finally:
        graph.close()
