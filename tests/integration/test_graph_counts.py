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
from memoryd.models import DecayState, Memory
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


def co_mentions(graph: CypherGraphStore) -> tuple[dict[tuple[str, str], int], dict[Any, int]]:
    """The kept CO_MENTIONS counts and a count of the memories, not forgotten, naming each
    pair now (as the graph page's traversal counted them)."""
    kept = {
        (str(a), str(b)): int(n)
        for a, b, n in graph._rows(
            "MATCH (a:Entity)-[c:CO_MENTIONS]->(b:Entity) RETURN a.id, b.id, c.n"
        )
    }
    now = {
        (str(a), str(b)): int(n)
        for a, b, n in graph._rows(
            "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
            " WHERE a.id < b.id AND m.decay_state <> 'forgotten' RETURN a.id, b.id, count(m)"
        )
    }
    return kept, now


STATES = [DecayState.ALIVE, DecayState.DIM, DecayState.SOFT_FORGOTTEN, DecayState.FORGOTTEN]
MOVES = ("decay", "recall", "recall_state")


def move_states(
    graph: CypherGraphStore, rng: random.Random, action: str, picked: dict[str, Memory]
) -> None:
    """A decay sweep's moves (forget, restore), a recall (which revives) or one memory's
    recall with its new state, on these memories (their frontmatter kept alike)."""
    at = datetime(2026, 6, 1, tzinfo=UTC)
    if action == "decay":
        moves = {slug: rng.choice(STATES) for slug in picked}
        graph.set_decay_states(moves)
    elif action == "recall":
        graph.record_recalls({slug: (1, at) for slug in picked})
        moves = dict.fromkeys(picked, DecayState.ALIVE)
    else:
        slug = next(iter(picked))
        moves = {slug: rng.choice(STATES)}
        graph.set_recall(slug, recall_count=1, last_recalled_at=at, decay_state=moves[slug])
    for slug, state in moves.items():
        picked[slug].meta.decay_state = state


def test_co_mentions_kept_by_each_write_equal_a_recount(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Every write that changes which memories name a pair of entities, or whether one of
    them counts (forgotten or not), keeps CO_MENTIONS equal to a count from the memories:
    new memories (one by one and in bulk, `new` or not), rewrites, deletes, entity merges,
    decay moves (forget, restore), a recall that revives, a recall's state; in batches on both
    sides of the keyed-statement size. A pair no memory names any more has no edge."""
    graph = open_store(tmp_path / "g")
    assert graph.co_mentions
    rng = random.Random(29)
    live: dict[str, Memory] = {}
    pool = [f"entity:library:L{i}" for i in range(9)]
    serial = 0
    most = 0
    done: set[str] = set()
    for step in range(90):
        action = rng.choice(["new", "new", "rewrite", "same", "delete", "merge", *MOVES, "decay"])
        size = rng.choice([1, 2, 7, 12])
        picked = rng.sample(sorted(live), min(size, len(live)))
        if action == "new" or not live:
            batch = [drafted(rng, f"m-{serial + i}", pool) for i in range(size)]
            for m in batch:
                m.meta.observations = rng.sample(pool, min(len(pool), rng.randrange(6)))
                m.meta.decay_state = rng.choice(STATES)
            serial += size
            graph.upsert_memories(batch, new=rng.random() < 0.5)
            live.update((m.slug, m) for m in batch)
        elif action in ("rewrite", "same"):
            batch = []
            for slug in picked:
                m = live[slug] if action == "same" else drafted(rng, slug, pool)
                if action == "rewrite":
                    m.meta.observations = rng.sample(pool, min(len(pool), rng.randrange(6)))
                    m.meta.decay_state = rng.choice(STATES)
                batch.append(m)
            graph.upsert_memories(batch)
            live.update((m.slug, m) for m in batch)
        elif action == "delete":
            graph.delete_memories(picked)
            for slug in picked:
                del live[slug]
        elif action == "merge":
            if len(pool) > 4:
                keep, drop = rng.sample(pool, 2)
                graph.merge_entities(keep, drop)
                pool.remove(drop)
                for m in live.values():
                    m.meta.observations = list(
                        dict.fromkeys(keep if e == drop else e for e in m.meta.observations)
                    )
        else:
            move_states(graph, rng, action, {slug: live[slug] for slug in picked})
        kept, now = co_mentions(graph)
        assert kept == now, f"step {step}: {action}"
        done.add(action)
        most = max(most, *kept.values(), 0)
    assert done >= {"new", "rewrite", "delete", "merge", "decay", "recall", "recall_state"}
    assert most > 3


def test_co_mentions_filled_for_a_graph_written_before_them(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
    engine: str,  # noqa: F811
) -> None:
    """A graph written by a memoryd without CO_MENTIONS gets them counted by the migration
    (forgotten memories left out), and writes keep them from there."""
    from memoryd.graph import falkordb_store, kuzu_store

    directory = tmp_path / "g"
    module: Any = kuzu_store if engine != "falkordb" else falkordb_store
    before = module.MIGRATIONS[:-1]
    with pytest.MonkeyPatch.context() as old_code:
        old_code.setattr(module, "SCHEMA_VERSION", len(before))
        if module is falkordb_store:
            old_code.setattr(module, "MIGRATIONS", before)
        old = open_store(directory)
        assert not old.co_mentions
        a, b, c = ENTITIES[:3]
        old.upsert_memories(
            [
                memory("one", observations=[a, b, c]),
                memory("two", observations=[a, b]),
                memory("gone", observations=[a, c], decay_state=DecayState.FORGOTTEN),
            ]
        )
        old.close()
    graph = open_store(directory)
    assert graph.co_mentions
    kept, now = co_mentions(graph)
    assert kept == now == {(a, b): 2, (a, c): 1, (b, c): 1}
    graph.set_decay_states({"gone": DecayState.ALIVE, "two": DecayState.FORGOTTEN})
    kept, now = co_mentions(graph)
    assert kept == now == {(a, b): 1, (a, c): 2, (b, c): 1}


def test_a_hubs_view_from_the_kept_counts_equals_the_one_from_the_memories(
    open_store: Opener,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The graph page's entity view of a generated hub (a third of the memories name it, a
    Zipf tail of neighbours, relations, forgotten memories) is the same, node for node, count
    for count and left-out number for number, whether it reads CO_MENTIONS or counts over the
    memories as before them, at every depth and at a cap that leaves most out and one that
    leaves out none; after a decay move and a merge too."""
    from memoryd.api.page_graph import neighbourhood
    from memoryd.models import Predicate, RelationRef

    graph = open_store(tmp_path / "g")
    rng = random.Random(290)
    hub = "entity:tool:PostgreSQL"
    names = [hub] + [f"entity:library:Z{i:02d}" for i in range(1, 70)]
    weights = [1.0 / r for r in range(1, 70)]
    batch = []
    for i in range(400):
        named = [hub] if rng.random() < 0.33 else []
        while len(named) < rng.randint(2, 5):
            other = rng.choices(names[1:], weights)[0]
            if other not in named:
                named.append(other)
        relations = (
            [RelationRef(subject=named[0], predicate=Predicate.USES, object=named[1])]
            if rng.random() < 0.3
            else []
        )
        state = DecayState.FORGOTTEN if rng.random() < 0.1 else DecayState.ALIVE
        batch.append(memory(f"h-{i}", observations=named, relations=relations, decay_state=state))
    graph.upsert_memories(batch[:300], new=True)
    graph.upsert_memories(batch[300:])

    def views() -> list[dict[str, Any]]:
        centre = graph.get_entity(hub)
        assert centre is not None
        return [
            neighbourhood(graph, centre, depth, cap).model_dump()
            for depth in (1, 2, 3)
            for cap in (8, 40, 200)
        ]

    def both() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        kept = views()
        graph.co_mentions = False
        try:
            return kept, views()
        finally:
            graph.co_mentions = True

    kept, counted = both()
    assert kept == counted
    assert kept[0]["left_out"] > 20
    assert len(kept[0]["left_out_names"]) == 20
    assert any(e["kind"] == "co_mention" and e["count"] > 1 for e in kept[0]["edges"])
    graph.set_decay_states({f"h-{i}": DecayState.FORGOTTEN for i in range(0, 400, 3)})
    graph.merge_entities("entity:library:Z01", "entity:library:Z02")
    kept_after, counted_after = both()
    assert kept_after == counted_after != kept


def test_a_team_users_cut_counts_co_mentions_of_its_scopes_only(
    falkordb_url: str, tmp_path: Path
) -> None:
    """A scoped view (what a team user may see) keeps no co-mention count another scope's
    memories made: they would tell which entities that scope names together."""
    from memoryd.graph.falkordb_store import FalkorGraphStore
    from memoryd.graph.falkordb_views import scoped_view

    a, b, c = ENTITIES[:3]
    other = SCOPES[1]
    graph = FalkorGraphStore(tmp_path / "g", url=falkordb_url, name=f"cut-{random.random()}")
    try:
        graph.upsert_memories(
            [
                memory("ours", observations=[a, b]),
                memory("theirs", observations=[a, b, c], scope_hash=other),
            ]
        )
        assert co_mentions(graph)[0] == {(a, b): 2, (a, c): 1, (b, c): 1}
        view = scoped_view(graph, [SCOPE], tmp_path / "view")
        try:
            assert view.co_mentions
            assert co_mentions(view)[0] == {(a, b): 1}
            assert c not in {r[0] for r in view.cypher("MATCH (e:Entity) RETURN e.id").rows}
        finally:
            view.close()
    finally:
        graph.close()


def test_co_mentions_follow_every_service_write(svc: Any, project: Path) -> None:
    """Through the service, each write that changes mentions or forgets: `record`,
    `record_many` (drafts and graph facts), archive (forget) and restore, an entity merge, an
    entity deleted, a decay sweep that forgets; after each the kept counts are the memories'."""
    from memoryd.models import GraphFact, MemoryDraft

    a, b, c, d = ENTITIES[:4]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def draft(title: str, days: int = 0) -> MemoryDraft:
        return MemoryDraft.model_validate(
            {
                "type": "session",
                "title": title,
                "body": f"{title}: notes.",
                "scope_path": project,
                "created_at": t0 + timedelta(days=days),
            }
        )

    def check(step: str) -> dict[tuple[str, str], int]:
        kept, now = co_mentions(svc.graph)
        assert kept == now, step
        return kept

    one = svc.record_graph_facts(draft("one"), entity_ids=[a, b, c]).slug
    assert check("record")[(a, b)] == 1
    svc.record(draft("React and Redis with Kafka"))
    check("record with extraction")
    facts = [GraphFact(draft=draft(f"many {i}"), entity_ids=[a, b, d]) for i in range(6)]
    svc.record_graph_facts_many(facts)
    assert check("record_graph_facts_many")[(a, b)] == 7
    svc.record_many([draft(f"Vue and Solid, take {i}") for i in range(6)])
    check("record_many")
    svc.archive(one)
    assert check("archive")[(a, b)] == 6
    assert (a, c) not in check("archive")
    svc.restore(one)
    assert check("restore")[(a, c)] == 1
    svc.merge_entities(a, d)
    assert check("merge")[(a, b)] == 7
    svc.delete_entity(c)
    check("delete entity")
    svc.sweep_at(t0 + timedelta(days=2000))
    assert check("sweep") == {}
