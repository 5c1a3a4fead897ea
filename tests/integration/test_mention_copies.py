"""A MENTIONS edge carries copies of its memory's slug, time, scope, type, decay state and
sensitivity (`graph.store.MENTION_COPIES`), which supersede judging reads a hub entity's
mentions by: every write keeps them equal to the memory, a graph from before them gets them
on open, and the pairs read through them are the pairs read from the memories."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.governance.supersede import find_pairs, find_pairs_many
from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.store import MENTION_COPIES
from memoryd.models import DecayState, Memory, MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.integration.test_graph_counts import ENTITIES, drafted
from tests.integration.test_graph_store import (  # noqa: F401 (fixtures)
    Opener,
    engine,
    memory,
    open_store,
)
from tests.integration.test_small_writes import _same

_COPIES = ", ".join(f"r.{name}" for name in MENTION_COPIES)
_SOURCES = ", ".join(f"m.{name}" for name in MENTION_COPIES)


def stale(graph: CypherGraphStore) -> tuple[int, list[Any]]:
    """How many MENTIONS edges there are, and those whose copies differ from their memory."""
    rows = graph._rows(
        f"MATCH (m:Memory)-[r:MENTIONS]->(e:Entity) RETURN e.id, {_COPIES}, {_SOURCES}"
    )
    n = len(MENTION_COPIES)
    return len(rows), [r for r in rows if list(r[1 : 1 + n]) != list(r[1 + n :])]


def test_each_write_keeps_the_mentions_copies_equal_to_their_memory(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Random writes (new by CREATE and by COPY, rewrites changing type, scope, time and
    sensitivity), decay moves, recalls, entity merges and deletes, in batches on both sides
    of the keyed-statement size: after each, every MENTIONS edge's copies are its memory's."""
    graph = open_store(tmp_path / "g")
    rng = random.Random(6)
    live: dict[str, Memory] = {}
    pool = list(ENTITIES)
    serial = 0
    states = list(DecayState)
    done: set[str] = set()
    for step in range(60):
        action = rng.choice(
            ["new", "new", "rewrite", "decay", "recall", "recall_one", "merge", "delete"]
        )
        size = rng.choice([1, 3, 70])  # 70: past KEYED_ROWS and kuzu's COPY_ROWS
        slugs = rng.sample(sorted(live), min(size, len(live)))
        if action == "new" or not live:
            batch = [drafted(rng, f"m-{serial + i}", pool) for i in range(size)]
            serial += size
            graph.upsert_memories(batch, new=rng.random() < 0.5)
            live.update((m.slug, m) for m in batch)
        elif action == "rewrite":
            batch = [drafted(rng, s, pool) for s in slugs]
            for m in batch:
                m.meta.type = MemoryType(rng.choice(["decision", "fact", "session"]))
                m.meta.decay_state = rng.choice(states)
                m.sensitive = rng.random() < 0.3
            graph.upsert_memories(batch)
            live.update((m.slug, m) for m in batch)
        elif action == "decay":
            graph.set_decay_states({s: rng.choice(states) for s in slugs})
        elif action == "recall":
            at = datetime(2026, 6, 1, tzinfo=UTC)
            graph.record_recalls({s: (1, at) for s in slugs})
        elif action == "recall_one":
            graph.set_recall(
                slugs[0],
                recall_count=3,
                last_recalled_at=datetime(2026, 6, 2, tzinfo=UTC),
                decay_state=rng.choice(states),
            )
        elif action == "merge" and len(pool) >= 2:
            keep, drop = rng.sample(pool, 2)
            graph.merge_entities(keep, drop)
            pool.remove(drop)
            for m in live.values():  # the service rewrites their files likewise
                m.meta.observations = list(
                    dict.fromkeys(keep if e == drop else e for e in m.meta.observations)
                )
        elif action == "delete":
            graph.delete_memories(slugs)
            for slug in slugs:
                del live[slug]
        edges, wrong = stale(graph)
        assert not wrong, f"step {step}: {action}"
        if edges:
            done.add(action)
    assert done >= {"new", "rewrite", "decay", "recall", "recall_one", "merge", "delete"}


def test_a_graph_from_before_the_copies_gets_them_on_open(
    open_store: Opener,  # noqa: F811
    engine: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """MENTIONS edges written before the copies (kuzu schema 5, FalkorDB 1) get them from
    their memories when the graph is opened, and the hub read finds them."""
    from memoryd.graph import falkordb_store, kuzu_store

    directory = tmp_path / "g"
    at = datetime(2026, 5, 1, tzinfo=UTC)
    kinds = [("decision", "alive"), ("fact", "dim"), ("session", "alive"), ("fact", "forgotten")]
    with pytest.MonkeyPatch.context() as old_code:
        if engine == "kuzu":
            old_code.setattr(kuzu_store, "SCHEMA_VERSION", 5)
        else:
            old_code.setattr(falkordb_store, "MIGRATIONS", falkordb_store.MIGRATIONS[:1])
        old = open_store(directory)
        assert old.schema_version() == (5 if engine == "kuzu" else 1)
        olders = [
            memory(f"m-{i}", type=kind, created_at=at + timedelta(minutes=i), decay_state=state)
            for i, (kind, state) in enumerate(kinds)
        ]
        old.upsert_memories(olders, new=True)
        with old._transaction() as conn:  # edges as the old schema wrote them
            conn.execute("CREATE (:Entity {id: 'entity:library:Redis', name: 'Redis'})")
            conn.execute(
                "MATCH (m:Memory), (e:Entity {id: 'entity:library:Redis'})"
                " CREATE (m)-[:MENTIONS {confidence: 0.9}]->(e)"
            )
        old.close()
    graph = open_store(directory)
    current = kuzu_store.SCHEMA_VERSION if engine == "kuzu" else falkordb_store.SCHEMA_VERSION
    assert graph.schema_version() == current
    edges, wrong = stale(graph)
    assert (edges, wrong) == (4, [])
    newer = memory("m-new", created_at=at + timedelta(hours=1), observations=[ENTITIES[3]])
    graph.upsert_memories([newer], new=True)
    pairs = find_pairs_many(graph, [newer], limit=5, newest=1, hub=0)
    assert [p.older for p in pairs["m-new"]] == ["m-1", "m-0"]
    assert _same(pairs["m-new"]) == _same(find_pairs(graph, newer, limit=5))


def test_the_service_s_writes_keep_the_copies_and_the_pairs_read_through_them(
    svc: MemoryService, project: Path, other_project: Path
) -> None:
    """A generated hub (every memory names Redis; two scopes; ties in time): after each of
    record_many, record, archive, restore, a recall, a decay sweep, an edit of a memory's
    title and an entity merge, the copies are their memories', and a batch read through them
    with the hub's list cut short (`newest`) finds the pairs full lists and one query per
    memory (from the memories' own properties) find."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    kinds = ["decision", "fact", "preference", "playbook", "session"]

    def draft(i: int, scope: Path) -> MemoryDraft:
        return MemoryDraft(
            type=MemoryType(kinds[i % 5]),
            title=f"Redis for part {i}",
            body=f"Part {i} keeps its cache in Redis"
            + ("; PostgreSQL stores the rest." if i % 4 == 0 else "."),
            scope_path=scope,
            created_at=start + timedelta(minutes=i // 4),  # four to a minute: ties
        )

    def check(step: str) -> None:
        assert isinstance(svc.graph, CypherGraphStore)
        edges, wrong = stale(svc.graph)
        assert edges, step
        assert not wrong, step
        memories = [svc.get(m.slug) for m in written]
        for limit in (1, 4, 30):
            full = find_pairs_many(svc.graph, memories, limit=limit, newest=None)
            assert any(len(p) >= min(limit, 3) for p in full.values()), step
            for m in memories:
                assert _same(full[m.slug]) == _same(find_pairs(svc.graph, m, limit=limit)), step
            for newest in (1, 3, 7):
                cut = find_pairs_many(svc.graph, memories, limit=limit, newest=newest, hub=0)
                assert {m: _same(p) for m, p in cut.items()} == {
                    m: _same(p) for m, p in full.items()
                }, f"{step}: limit {limit}, newest {newest}"

    written = svc.record_many([draft(i, project) for i in range(70)])
    written += svc.record_many([draft(i, other_project) for i in range(70, 80)])
    check("record_many")
    written.append(svc.record(draft(80, project)))
    check("record")
    judged = [m for m in written if m.meta.type.value in ("decision", "fact", "preference")]
    for m in judged[:6]:
        svc.archive(m.slug)
    check("archive")
    svc.restore(judged[0].slug)
    check("restore")
    svc.recall("Redis cache", scope=project)
    svc.flush_recall_stats()
    check("recall")
    assert svc.decay_sweep().moved  # the sessions, idle since January
    check("decay")
    svc.update_keywords(judged[7].slug, title="Redis for part seven")
    check("edit")
    (postgres,) = [e for e in svc.entities() if e.name == "PostgreSQL"]
    (redis,) = [e for e in svc.entities() if e.name == "Redis"]
    svc.merge_entities(redis.id, postgres.id)
    check("merge")
