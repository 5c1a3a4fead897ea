"""What the graph store keeps counted as it writes, on every engine: an entity's mention
count, first and last seen and home scope (updated by each write's delta, equal to a recount
of its MENTIONS), and on kuzu the memories per (scope, body fingerprint) that the duplicate
check looks up by key."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.kuzu_store import KuzuGraphStore
from memoryd.graph.rows import utc
from memoryd.models import Memory
from tests.integration.test_graph_store import (  # noqa: F401 (fixtures)
    SCOPE,
    Opener,
    engine,
    memory,
    open_store,
)

ENTITIES = [f"entity:library:{name}" for name in ("React", "Solid", "Vue", "Redis", "Kafka")]
SCOPES = [SCOPE, "ffffffffffff"]
BODIES = ["use it", "drop it", "keep it for now", "measure first"]


def stored(graph: CypherGraphStore) -> dict[str, tuple[Any, ...]]:
    rows = graph._rows(
        "MATCH (e:Entity) RETURN e.id, e.mention_count, e.first_seen_at, e.last_seen_at,"
        " e.scope_hash"
    )
    return {str(r[0]): (int(r[1] or 0), utc(r[2]), utc(r[3]), r[4]) for r in rows}


def recounted(graph: CypherGraphStore) -> dict[str, tuple[Any, ...]]:
    rows = graph._rows(
        "MATCH (e:Entity) OPTIONAL MATCH (m:Memory)-[:MENTIONS]->(e)"
        " RETURN e.id, count(m), min(m.created_at), max(m.created_at),"
        " collect(DISTINCT m.scope_hash)"
    )
    return {
        str(r[0]): (int(r[1]), utc(r[2]), utc(r[3]), r[4][0] if len(r[4]) == 1 else None)
        for r in rows
    }


def prints(graph: CypherGraphStore) -> tuple[dict[str, int], dict[str, int]]:
    """kuzu's kept count per (scope, fingerprint) and a count of the memories now."""
    kept = {str(k): int(n) for k, n in graph._rows("MATCH (p:BodyPrint) RETURN p.key, p.n")}
    now: dict[str, int] = {}
    for scope, fp in graph._rows("MATCH (m:Memory) RETURN m.scope_hash, m.fingerprint"):
        now[f"{scope}:{fp}"] = now.get(f"{scope}:{fp}", 0) + 1
    return kept, now


def drafted(rng: random.Random, slug: str, pool: list[str]) -> Memory:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return memory(
        slug,
        body=rng.choice(BODIES),
        scope_hash=rng.choice(SCOPES),
        created_at=start + timedelta(days=rng.randrange(60), seconds=rng.randrange(3)),
        observations=rng.sample(pool, min(len(pool), rng.randrange(4))),
    )


def test_counts_kept_by_each_write_equal_a_recount(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Random writes, rewrites (same entities, others, another time or scope), deletes and
    entity merges, in batches on both sides of the keyed-statement size: after each, every
    entity's stats are what a recount of its MENTIONS gives, and (kuzu) each kept
    fingerprint count is the number of memories that hold it."""
    graph = open_store(tmp_path / "g")
    rng = random.Random(28)
    live: dict[str, Memory] = {}
    pool = list(ENTITIES)
    serial = 0
    for step in range(70):
        action = rng.choice(["new", "new", "rewrite", "same", "delete", "merge"])
        size = rng.choice([1, 2, 7])
        if action == "new" or not live:
            batch = [drafted(rng, f"m-{serial + i}", pool) for i in range(size)]
            serial += size
            graph.upsert_memories(batch, new=rng.random() < 0.5)
            live.update((m.slug, m) for m in batch)
        elif action in ("rewrite", "same"):
            slugs = rng.sample(sorted(live), min(size, len(live)))
            batch = [live[s] if action == "same" else drafted(rng, s, pool) for s in slugs]
            graph.upsert_memories(batch)
            live.update((m.slug, m) for m in batch)
        elif action == "delete":
            gone = rng.sample(sorted(live), min(size, len(live)))
            graph.delete_memories(gone)
            for slug in gone:
                del live[slug]
        else:
            if len(pool) >= 2:
                keep, drop = rng.sample(pool, 2)
                graph.merge_entities(keep, drop)
                pool.remove(drop)
                for m in live.values():  # the service rewrites their files likewise
                    m.meta.observations = list(
                        dict.fromkeys(keep if e == drop else e for e in m.meta.observations)
                    )
        assert stored(graph) == recounted(graph), f"step {step}: {action}"
        if isinstance(graph, KuzuGraphStore):
            kept, now = prints(graph)
            assert kept == now, f"step {step}: {action}"
    assert any(n > 1 for n, *_ in stored(graph).values())


@pytest.mark.kuzu_only("the fingerprint key table; FalkorDB indexes Memory.fingerprint")
def test_the_duplicate_check_looks_the_fingerprint_up_by_key(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A graph written before schema 5 gets its counts from the migration; writes and
    deletes then keep them, and the check finds a duplicate through them only."""
    from memoryd.graph import kuzu_store

    directory = tmp_path / "g"
    with pytest.MonkeyPatch.context() as old_code:
        old_code.setattr(kuzu_store, "SCHEMA_VERSION", 4)
        old = open_store(directory)
        assert isinstance(old, KuzuGraphStore)
        assert not old._keyed_prints
        old.upsert_memories([memory("first", body="same text"), memory("other", body="else")])
        old.close()
    graph = open_store(directory)
    assert isinstance(graph, KuzuGraphStore)
    assert graph._keyed_prints
    same = memory("x", body="same text").fingerprint
    assert graph.find_by_fingerprint(SCOPE, same) == "first"
    assert prints(graph)[0] == prints(graph)[1]
    graph.upsert_memories([memory("second", body="same text")], new=True)
    graph.upsert_memories([memory("first", body="changed")])
    assert graph.find_by_fingerprint(SCOPE, same) == "second"
    graph.delete_memories(["second"])
    assert graph.find_by_fingerprint(SCOPE, same) is None
    assert graph.find_fingerprints(SCOPE, [same] * 6) == {}
    kept, now = prints(graph)
    assert kept == now
    assert f"{SCOPE}:{same}" not in kept
    # the memories are read only for a fingerprint the keys hold
    with graph._transaction() as conn:
        conn.execute("CREATE (:BodyPrint {key: $k, n: 1})", {"k": f"{SCOPE}:{'0' * 40}"})
        conn.execute("MATCH (m:Memory {slug: 'other'}) SET m.fingerprint = $f", {"f": "1" * 40})
    assert graph.find_by_fingerprint(SCOPE, "1" * 40) is None
    assert graph.find_fingerprints(SCOPE, ["0" * 40]) == {}
