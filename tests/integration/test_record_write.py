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
