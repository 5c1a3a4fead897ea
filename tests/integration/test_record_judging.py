"""`record`'s judging keeps what it read (issue 28): per (entity, scope) the older memories
that mention it and their texts (`MentionLists`), moved by each record's own write and
dropped by any other write, hold what a fresh read of the graph gives; the status-line
references of a scope's speakers are read once and still find a record a line names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.governance.supersede_graph import (
    _MENTIONED_BY,
    _MENTIONED_BY_ONE,
    _mentioned,
    _Shared,
)
from memoryd.governance.supersede_kept import JUDGED_TYPES, MentionLists
from memoryd.governance.supersede_pairs import pair_texts
from memoryd.models import Memory, MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.conftest import ENGINE
from tests.graph_queries import queries

NAMES = ["PostgreSQL", "Redis", "Kafka", "DuckDB", "pytest"]
KINDS = ["decision", "fact", "preference", "playbook", "decision"]
START = datetime(2026, 1, 1, tzinfo=UTC)


def _draft(i: int, project: Path, *, minutes: int | None = None) -> MemoryDraft:
    a, b = NAMES[i % 5], NAMES[(i * 3 + 1) % 5]
    return MemoryDraft(
        type=MemoryType(KINDS[i % 5]),
        title=f"Use {a} for part {i}",
        body=f"Part {i} moves from {b} to {a}." if i % 2 else f"Part {i} runs on {a} and {b}.",
        scope_path=project,
        created_at=START + timedelta(minutes=i if minutes is None else minutes),
    )


def _fresh(svc: MemoryService, eid: str, scope: str) -> list[tuple[Any, str]]:
    """The older memories mentioning the entity in the scope, read from the graph now."""
    rows = svc.graph.cypher(
        _MENTIONED_BY,
        {"ids": [eid], "scopes": [scope], "types": list(JUDGED_TYPES)},
        limit=100_000,
    ).rows
    return sorted(((created, str(o)) for _, _, o, created in rows), key=lambda r: r[1])


def _newest_first(rows: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    rows = sorted(rows, key=lambda r: r[1])
    return sorted(rows, key=lambda r: r[0], reverse=True)


def _same_as_a_fresh_read(svc: MemoryService, kept: MentionLists, keys: list[Any]) -> int:
    """Every list and text `kept` holds for these keys is what the graph gives now;
    how many lists it holds."""
    generation = svc.graph.recall_generation
    held = kept.lists(generation, keys)
    for (eid, scope), (rows, short) in held.items():
        fresh = _fresh(svc, eid, scope)
        if short:  # a cut list: the newest rows, in order
            assert rows == _newest_first(fresh)[: len(rows)]
        else:
            assert sorted(rows, key=lambda r: r[1]) == fresh
    slugs = sorted({o for rows, _ in held.values() for _, o in rows})
    texts = kept.texts(generation, slugs)
    for memory in (svc.get(slug) for slug in texts):
        assert texts[memory.slug] == pair_texts(memory.meta.title, memory.body)
    return len(held)


def _keys(svc: MemoryService, memories: list[Memory]) -> list[tuple[str, str]]:
    return sorted({(e, m.meta.scope_hash) for m in memories for e in m.meta.observations})


@pytest.fixture(params=[ENGINE, "falkordb"])
def any_svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    """A service on the engine under test, then on FalkorDB (whose rows give times back
    in their own way)."""
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    graph: dict[str, Any] = {"engine": ENGINE, "buffer_pool_mb": 128}
    if request.param == "falkordb":
        url = request.getfixturevalue("falkordb_url")
        graph = {"engine": "falkordb", "url": url, "name": f"r-{uuid.uuid4().hex}"}
    service = open_service(load_settings(tmp_path / "home", graph=graph, lock_timeout_s=1.0))
    try:
        yield service
    finally:
        service.close()


def test_kept_lists_and_texts_equal_a_fresh_read_record_after_record(
    any_svc: MemoryService, project: Path
) -> None:
    """Records of judged and unjudged kinds, some older than the ones before them: after
    each, the lists `record` keeps equal the graph's, and once they are kept a record reads
    neither again."""
    svc = any_svc
    written = svc.record_many([_draft(i, project) for i in range(12)])
    with queries(svc) as calls:
        for i in range(12, 30):
            # Every third one dated before all others: it goes into the lists' tail.
            minutes = -i if i % 3 == 0 else None
            calls.clear()
            written.append(svc.record(_draft(i, project, minutes=minutes)))
            assert _same_as_a_fresh_read(svc, svc.judged_mentions, _keys(svc, written)) > 0
        # Every entity's list is kept by now: a record reads no list and no older text.
        calls.clear()
        svc.record(_draft(30, project))
    lists = (_MENTIONED_BY, _MENTIONED_BY_ONE)
    assert not any(q in lists or "RETURN o.slug, o.title, o.body" in q for q in calls)


def test_any_other_write_drops_what_was_kept(svc: MemoryService, project: Path) -> None:
    """A title edit and an archive are not `record`'s own write: what was kept is dropped,
    and the next record judges against the graph as it is (the edited title in its pair's
    text, no archived memory among its pairs). A batch judged before its write moves what
    was kept by its memories, as a record does; one judged once written drops it."""
    first = svc.record_many([_draft(i, project) for i in range(10)])
    svc.record(_draft(10, project))
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, _keys(svc, first)) > 0
    edited = next(m for m in first if m.meta.type is MemoryType.DECISION)
    svc.update_keywords(edited.slug, title="Renamed decision about PostgreSQL")
    assert svc.judged_mentions.lists(svc.graph.recall_generation, _keys(svc, first)) == {}
    svc.record(_draft(11, project))
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, _keys(svc, first)) > 0
    gone = next(m for m in first if m.meta.type is MemoryType.FACT)
    svc.archive(gone.slug)
    memory = svc.record(_draft(12, project))
    assert gone.slug not in {d.older for d in svc.get(memory.slug).meta.supersede_decisions}
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, _keys(svc, first)) > 0
    batch = svc.record_many([_draft(13, project), _draft(14, project, minutes=-14)])
    everyone = _keys(svc, [*first, *batch])
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, everyone) > 0
    svc.judge_batch_unwritten = lambda memories, use_llm: None
    svc.record_many([_draft(15, project)])
    assert svc.judged_mentions.lists(svc.graph.recall_generation, everyone) == {}


def test_a_cut_list_takes_a_record_only_above_its_last_row(
    svc: MemoryService, project: Path
) -> None:
    """A hub's list read only as far as its newest rows gains a newer record in its place
    and stays the graph's newest rows; a record older than its last row is left out."""
    written = svc.record_many([_draft(i, project) for i in range(20)])
    scope = written[0].meta.scope_hash
    eid = "entity:tool:PostgreSQL"
    shared = {"newer": [_Shared(100, eid, "PostgreSQL", "tool", ())]}
    where = {"newer": (scope, "2027-01-01T00:00:00Z")}
    for minutes, grows in ((30, True), (20, True), (-5, False)):
        kept = MentionLists()
        _mentioned(svc.graph, shared, where, 3, 1, kept)  # newest 3 rows, as a hub
        before = svc.graph.recall_generation
        [(rows, short)] = kept.lists(before, [(eid, scope)]).values()
        assert short
        assert len(rows) == 3
        draft = _draft(0, project, minutes=minutes).model_copy(
            update={
                "title": f"Use PostgreSQL at minute {minutes}",
                "body": f"PostgreSQL since minute {minutes}.",
            }
        )
        memory = svc.record(draft)
        kept.wrote(svc.graph, memory, before)
        [(after, short)] = kept.lists(svc.graph.recall_generation, [(eid, scope)]).values()
        assert short
        assert len(after) == 3 + grows
        assert (memory.slug in {o for _, o in after}) is grows
        assert after == _newest_first(_fresh(svc, eid, scope))[: len(after)]


def test_a_write_between_the_read_and_the_records_write_drops_the_lists(
    svc: MemoryService, project: Path
) -> None:
    """Lists read before another write committed (a daemon thread's, say) are not moved
    by the record written after it: they are dropped."""
    written = svc.record_many([_draft(i, project) for i in range(10)])
    scope = written[0].meta.scope_hash
    eid = "entity:tool:PostgreSQL"
    shared = {"newer": [_Shared(1, eid, "PostgreSQL", "tool", ())]}
    kept = MentionLists()
    _mentioned(svc.graph, shared, {"newer": (scope, "2027-01-01T00:00:00Z")}, None, 1, kept)
    assert kept.lists(svc.graph.recall_generation, [(eid, scope)])
    svc.update_keywords(written[0].slug, title="Renamed decision about PostgreSQL")
    before = svc.graph.recall_generation
    memory = svc.record(_draft(10, project))
    kept.wrote(svc.graph, memory, before)
    assert kept.lists(svc.graph.recall_generation, [(eid, scope)]) == {}


def test_kept_status_line_references_equal_a_reread_of_the_speakers(
    svc: MemoryService, project: Path
) -> None:
    """Thirty real records one by one (the status-line links they state are checked in
    test_small_writes): after each, the references kept per speaker are those its stored
    body gives, and a record reads only the bodies of speakers it had not seen."""
    import yaml

    from memoryd.domain.superseding import _status_lines_of
    from tests.integration.test_supersede_records import REPO, decision_of

    truth = yaml.safe_load((REPO / "truth.yaml").read_text(encoding="utf-8"))
    calls: list[Any] = []
    cypher = svc.graph.cypher

    def counted(query: str, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        if query.endswith(("RETURN o.slug, o.body", "RETURN o.body")) and "slugs" in params:
            calls.append(len(params["slugs"]))
        return cypher(query, params, *args, **kwargs)

    svc.graph.cypher = counted  # type: ignore[method-assign]
    read = 0
    try:
        for i, record in enumerate(truth["records"][:30]):
            calls.clear()
            memory = svc.record(decision_of(record, project, i, START + timedelta(days=i)))
            read += sum(calls)
            scope = memory.meta.scope_hash
            speaking = svc.status_speakers.get(scope, set())
            held = svc.status_refs.get(scope)
            if held is None:
                continue
            assert held[0] is speaking
            for slug, refs in held[1].items():
                body = svc.get(slug).body
                assert refs == tuple(r for line in _status_lines_of(body) for r in line.refs)
    finally:
        del svc.graph.cypher
    assert speaking
    assert read < 2 * len(speaking)


def _list_and_text_reads(svc: MemoryService, record: Any) -> tuple[Memory, list[str]]:
    """`record()`'s result and the per-entity list and older-text reads it ran."""
    with queries(svc) as calls:
        memory = record()
    lists = (_MENTIONED_BY, _MENTIONED_BY_ONE)
    texts = "UNWIND $slugs AS s MATCH (o:Memory {slug: s}) RETURN o.slug, o.title, o.body"
    return memory, [q for q in calls if q in lists or q == texts]


def test_a_scope_read_whole_spares_a_first_meeting_with_an_entity_its_reads(
    any_svc: MemoryService, project: Path
) -> None:
    """The first record of a scope reads its lists and texts whole; a later record naming
    entities no record met before (one no older memory mentions) reads no list and no
    text, and what is kept, empty lists too, equals the graph."""
    svc = any_svc
    written = svc.record_many([_draft(i, project) for i in range(12)])
    written.append(svc.record(_draft(12, project).model_copy(update={"body": "Kafka only."})))
    draft = _draft(13, project).model_copy(
        update={"title": "Use DuckDB and Neo4j", "body": "Part 13 moves from Redis to DuckDB."}
    )
    memory, reads = _list_and_text_reads(svc, lambda: svc.record(draft))
    assert reads == []
    keys = _keys(svc, [*written, memory])
    assert any(e.endswith("Neo4j") for e, _ in keys)
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, keys) == len(keys)


def test_a_scope_too_big_to_read_whole_is_judged_entity_by_entity_alike(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the rows a scope may hold whole, `record` reads the lists it needs by key, as
    before, and decides the same as with the scope read whole (two homes, the same
    records; decisions compared by the older memory's title)."""
    import memoryd.governance.supersede_kept as kept_module
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    drafts = [_draft(i, project) for i in range(12)]
    later = [
        _draft(i, project).model_copy(update={"title": f"Switch part {i} to {NAMES[i % 5]}"})
        for i in range(12, 24)
    ]
    decided: list[list[list[tuple[str, str, float, str | None]]]] = []
    for name, rows in (("whole", kept_module._WARM_ROWS), ("by-key", 3)):
        monkeypatch.setattr(kept_module, "_WARM_ROWS", rows)
        graph = {"engine": ENGINE, "buffer_pool_mb": 128}
        svc = open_service(load_settings(tmp_path / name, graph=graph, lock_timeout_s=1.0))
        try:
            titles = {m.slug: m.meta.title for m in svc.record_many(drafts)}
            out = []
            reads: list[str] = []
            for draft in later:
                memory, read = _list_and_text_reads(svc, lambda d=draft, s=svc: s.record(d))
                reads += read
                titles[memory.slug] = memory.meta.title
                out.append(
                    sorted(
                        (titles[d.older], d.status.value, d.confidence, d.judge)
                        for d in memory.meta.supersede_decisions
                    )
                )
            whole = svc.judged_mentions.warm(svc.graph, memory.meta.scope_hash)
            assert whole is (name == "whole")
            assert bool(reads) is (name == "by-key")
        finally:
            svc.close()
        decided.append(out)
    assert decided[0] == decided[1]
    assert any(decided[0])


def test_a_rewrite_of_an_unjudged_memory_keeps_what_was_kept(
    svc: MemoryService, project: Path
) -> None:
    """A session's rewrite (its enrichment, an edit of its tags) names nothing judging
    keeps: the lists and texts stay, equal to the graph, and the next record reads none;
    a decision's edit still drops them."""
    first = svc.record_many([_draft(i, project) for i in range(10)])
    session = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.SESSION,
                title="Session on PostgreSQL and Kafka",
                body="We looked at PostgreSQL and Kafka for the queue.",
                scope_path=project,
                created_at=START,
            )
        ]
    )[0]
    svc.record(_draft(10, project))
    keys = _keys(svc, [*first, session])
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, keys) > 0
    svc.update_keywords(session.slug, tags=["queue", "kafka"])
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, keys) > 0
    _, reads = _list_and_text_reads(svc, lambda: svc.record(_draft(11, project)))
    assert reads == []
    decision = next(m for m in first if m.meta.type is MemoryType.DECISION)
    svc.update_keywords(decision.slug, tags=["db"])
    assert svc.judged_mentions.lists(svc.graph.recall_generation, keys) == {}


_ENTITY_ROWS = (
    "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.mention_count, e.type, e.aliases"
)


def test_kept_entity_rows_equal_the_graphs_record_after_record(
    svc: MemoryService, project: Path
) -> None:
    """Each record's entities (name, mention count, type, aliases) are kept and counted
    up by the records after it, sessions too, as the graph counts them; a session's
    rewrite drops them (it moves counts); a record whose entities are all kept reads none."""
    svc.record_many([_draft(i, project) for i in range(8)])
    for i in range(8, 20):
        if i == 14:
            session = svc.record(
                MemoryDraft(
                    type=MemoryType.SESSION,
                    title="Session on Kafka",
                    body="We tried Kafka and DuckDB for the queue.",
                    scope_path=project,
                )
            )
            svc.update_keywords(session.slug, tags=["queue"])
            ids = sorted(session.meta.observations)
            assert svc.judged_mentions.entities(svc.graph.recall_generation, ids) == {}
        memory = svc.record(_draft(i, project))
        ids = sorted(memory.meta.observations)
        held = svc.judged_mentions.entities(svc.graph.recall_generation, ids)
        fresh = {str(r[0]): tuple(r) for r in svc.graph.cypher(_ENTITY_ROWS, {"ids": ids}).rows}
        assert held == fresh
    with queries(svc) as calls:
        svc.record(_draft(20, project))
    assert _ENTITY_ROWS not in calls


def test_a_batch_into_a_scope_read_whole_adds_its_new_entities_lists(
    svc: MemoryService, project: Path
) -> None:
    """A scope read whole holds every list of it, so a batch's write must add the lists of
    entities new to the scope: else the next record would find no older memory there."""
    svc.record_many([_draft(i, project) for i in range(6)])
    first = svc.record(_draft(6, project))
    scope = first.meta.scope_hash
    assert svc.judged_mentions.warm(svc.graph, scope)  # a record read the scope whole
    before = {e for e, s in _keys(svc, [first]) if s == scope}
    batch = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.DECISION,
                title=f"Use ClickHouse for report {i}",
                body=f"Report {i} moves from DuckDB to ClickHouse.",
                scope_path=project,
                created_at=START + timedelta(minutes=100 + i),
            )
            for i in range(3)
        ]
    )
    new = [key for key in _keys(svc, batch) if key[0] not in before]
    assert new, "the batch names an entity the scope had not seen"
    assert _same_as_a_fresh_read(svc, svc.judged_mentions, _keys(svc, batch)) == len(
        _keys(svc, batch)
    )
