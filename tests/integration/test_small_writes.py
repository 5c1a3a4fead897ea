"""Small writes (issue 28): a batch's supersede pairs come from a few queries whatever its
size and equal the one-memory query's; a write no status line can touch skips reading the
scope, and one an older record's status line names still gets its link; a memory is read
by its key."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd import memfile
from memoryd.governance import supersede
from memoryd.governance.supersede import Pair, find_pairs, find_pairs_batch, find_pairs_many
from memoryd.governance.supersede_kept import MentionLists
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.graph_queries import queries
from tests.integration.test_supersede_records import REPO, decision_of

ROOT = Path(__file__).resolve().parents[2]

NOTES = [
    ("decision", "Use PostgreSQL for billing", "Billing stores invoices in PostgreSQL."),
    ("playbook", "Run pytest before merging", "Run pytest before merging billing changes."),
    ("fact", "Redis caches sessions", "Sessions live in Redis with a one-hour TTL."),
    ("decision", "Kafka for events", "Billing publishes events to Kafka; PostgreSQL keeps state."),
    ("preference", "Prefer Redis over Memcached", "We prefer Redis over Memcached for caching."),
    ("decision", "Use Redis instead of Kafka", "We switched from Kafka to Redis streams."),
    ("fact", "PostgreSQL 16 in production", "Production runs PostgreSQL 16 with Redis beside it."),
    ("decision", "Move billing to DuckDB", "Billing reports move from PostgreSQL to DuckDB."),
    (
        "decision",
        "Use Kafka instead of Redis",
        "Events go back from Redis streams to Kafka; pytest covers it.",
    ),
]


def _same(pairs: list[Pair]) -> list[Pair]:
    """Pairs with their shared names in one order (the query returns them in any order)."""
    return [replace(p, known=tuple(sorted(p.known, key=repr))) for p in pairs]


def test_a_batch_finds_the_pairs_one_query_per_memory_finds(
    svc: MemoryService, project: Path
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    drafts = [
        MemoryDraft(
            type=MemoryType(kind),
            title=title,
            body=body,
            scope_path=project,
            created_at=start + timedelta(minutes=i),
        )
        for i, (kind, title, body) in enumerate(NOTES)
    ]
    written = svc.record_many(drafts[:7])
    # An explicit supersede (an edge newer -> older) and the judged ones are left out.
    explicit = drafts[7].model_copy(update={"supersedes": [written[0].slug]})
    # The last one shares `pytest` only with a playbook: an entity with no older to judge.
    written += [svc.record(explicit), svc.record(drafts[8])]
    assert svc.graph.cypher("MATCH ()-[r:SUPERSEDES]->() RETURN count(r)", {}).rows[0][0] >= 1
    memories = [svc.get(m.slug) for m in written]
    for limit in (1, 2, 20):
        with queries(svc) as calls:
            many = find_pairs_many(svc.graph, memories, limit=limit)
        assert len(calls) == 4  # whatever the batch size
        for memory in memories:
            assert _same(many[memory.slug]) == _same(find_pairs(svc.graph, memory, limit=limit))
    assert any(many[m.slug] for m in memories)


def test_records_one_at_a_time_get_the_links_their_status_lines_state(
    svc: MemoryService, project: Path
) -> None:
    """Thirty real records recorded one by one: a record that an older one's status line
    names ("Superseded by …") is linked when it arrives, and nothing else is."""
    import yaml

    truth = yaml.safe_load((REPO / "truth.yaml").read_text(encoding="utf-8"))
    records = truth["records"][:30]
    file_of: dict[str, str] = {}
    for i, record in enumerate(records):
        memory = svc.record(decision_of(record, project, i))
        file_of[memory.slug] = record["file"]
    files = set(file_of.values())
    stated = {
        (s["newer"], s["older"])
        for s in truth["supersedes"]
        if s["newer"] in files and s["older"] in files
    }
    rows = svc.graph.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) RETURN n.slug, o.slug", {}, limit=10_000
    ).rows
    assert {(file_of[n], file_of[o]) for n, o in rows} == stated


def test_one_memory_is_read_by_its_key_like_many(svc: MemoryService, project: Path) -> None:
    written = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.FACT, title=f"Fact {i}", body=f"Body {i}", scope_path=project
            )
            for i in range(3)
        ]
    )
    slugs = [m.slug for m in written]
    many = svc.graph.memory_rows(slugs)
    for slug in slugs:
        assert svc.graph.get_memory(slug) == many[slug]
    assert svc.graph.get_memory("no-such-slug") is None


@pytest.mark.slow
def test_the_bench_prints_its_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "small.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "small_writes.py"), "--record-at", "40",
         "--many-at", "80", "--batches", "10,20", "--records", "3", "--json", str(out)],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "record_many at 80" in done.stdout
    assert "targets:" in done.stdout
    result = json.loads(out.read_text())
    assert result["record_in_process"]["records"] == 3
    assert [r["batch"] for r in result["many_daemon"]] == [10, 20]
    assert result["peak_rss_mb_daemon"] > 0


@pytest.mark.parametrize("judged", ["before", "after"])
def test_a_batch_writes_its_supersede_decisions_in_one_graph_write(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch, judged: str
) -> None:
    """Judged before its write, a batch's decisions go out with it in its one write; judged
    once written (a status line of its scope may link it, an LLM judges), every decision of
    the batch in one more write."""
    start = datetime(2026, 2, 1, tzinfo=UTC)
    older = [
        ("Use Kafka for events", "Billing publishes its events to Kafka."),
        ("Use Jest for tests", "The frontend tests run on Jest."),
        ("Use Webpack to bundle", "The frontend is bundled with Webpack."),
    ]
    newer = [
        ("Switch events to RabbitMQ", "We switched from Kafka to RabbitMQ for billing events."),
        ("Switch tests to Vitest", "We switched from Jest to Vitest for the frontend tests."),
        ("Switch bundling to Vite", "We switched from Webpack to Vite to bundle the frontend."),
    ]

    def drafts(notes: list[tuple[str, str]], at: datetime) -> list[MemoryDraft]:
        return [
            MemoryDraft(
                type=MemoryType.DECISION,
                title=title,
                body=body,
                scope_path=project,
                created_at=at + timedelta(minutes=i),
            )
            for i, (title, body) in enumerate(notes)
        ]

    olds = svc.record_many(drafts(older, start))
    monkeypatch.setattr(memfile, "LOCK_STRIPES", 1)  # every file behind one lock
    if judged == "after":
        monkeypatch.setattr(svc, "judge_batch_unwritten", lambda memories, use_llm: None)
    writes: list[list[str]] = []
    upsert = svc.graph.upsert_memories

    def counted(memories: Any, *args: Any, **kwargs: Any) -> Any:
        writes.append([m.slug for m in memories])
        return upsert(memories, *args, **kwargs)

    svc.graph.upsert_memories = counted  # type: ignore[method-assign]
    try:
        news = svc.record_many(drafts(newer, start + timedelta(days=1)))
    finally:
        del svc.graph.upsert_memories
    replaced = {m.slug: set(m.meta.supersedes) for m in news}
    assert replaced == {n.slug: {o.slug} for n, o in zip(news, olds, strict=True)}
    # The memories, with their decisions or then every decision of the batch at once.
    assert [sorted(w) for w in writes] == [sorted(m.slug for m in news)] * (
        1 if judged == "before" else 2
    )
    events = svc.audit.records_after(0)
    assert sorted(str(e.target_id) for e in events if e.event_type == "supersede") == sorted(
        replaced
    )
    for memory in news:  # the files hold the decisions
        assert svc.get(memory.slug).meta.supersede_decisions


def test_an_import_writes_its_batches_in_order_and_stops_at_a_failed_one(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches are written one at a time and in order: a failed batch names its lines, the
    ones before it stay written and none after it is sent."""
    import threading

    from memoryd.errors import InvalidInput
    from memoryd.interop import mcp_memory, mcp_memory_import

    entities = [
        {"type": "entity", "name": f"svc-{i}", "entityType": "service", "observations": [f"o{i}"]}
        for i in range(50)
    ]
    text = "\n".join(json.dumps(line) for line in entities)
    monkeypatch.setattr(mcp_memory_import, "IMPORT_BATCH", 10)
    many = svc.record_graph_facts_brief
    sizes: list[int] = []
    busy = threading.Lock()

    def third_fails(facts: Any) -> Any:
        assert busy.acquire(blocking=False), "two batches written at once"
        try:
            sizes.append(len(facts))
            if len(sizes) == 3:
                raise InvalidInput("refused")
            return many(facts)
        finally:
            busy.release()

    monkeypatch.setattr(svc, "record_graph_facts_brief", third_fails)
    with pytest.raises(InvalidInput, match=r"lines 21-30 \(none of them written"):
        mcp_memory_import.import_graph(svc, mcp_memory_import.parse_jsonl(text), scope_path=project)
    assert sizes == [10, 10, 10]  # nothing after the failed batch was sent
    names = {e["name"] for e in mcp_memory.export_graph(svc)["entities"]}
    assert names == {f"svc-{i}" for i in range(20)}


def test_a_made_slug_another_memory_drew_is_drawn_again(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memories with one title share all of their slug but six random hex digits: two of a
    batch, or one of a batch and a stored one, that drew the same are not a refused batch."""
    import secrets

    draws = iter(["aaaaaa", "aaaaaa", "aaaaaa", "bbbbbb", "aaaaaa", "cccccc", "dddddd"])
    real = secrets.token_hex
    # The write path draws a slug's tail with `secrets.token_hex(3)` (domain/writes.py).
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws) if n == 3 else real(n))
    same = "Works from the Berlin office on Tuesdays"
    first = svc.record_many(
        [MemoryDraft(type=MemoryType.FACT, title=same, body=f"Person {i}.", scope_path=project)
         for i in range(2)]
    )  # fmt: skip
    second = svc.record(
        MemoryDraft(type=MemoryType.FACT, title=same, body="P 3.", scope_path=project)
    )
    slugs = [m.slug for m in [*first, second]]
    assert [s[-6:] for s in slugs] == ["aaaaaa", "bbbbbb", "cccccc"]
    for slug in slugs:
        assert svc.get(slug).meta.slug == slug


def test_a_record_judged_before_its_write_gets_what_judging_it_once_written_gives(
    svc: MemoryService, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`record` judges a memory before writing it, so that its decisions are written with it
    (one write, no rewrite): the decisions, SUPERSEDES edges and audit lines are those the
    judging of the written memory gives, record for record."""
    from memoryd.config import load_settings
    from memoryd.wiring import open_service
    from tests.conftest import ENGINE

    start = datetime(2026, 3, 1, tzinfo=UTC)
    notes = [
        *NOTES,
        ("decision", "Use Jest for tests", "The frontend tests run on Jest."),
        ("decision", "Switch tests to Vitest", "We switched from Jest to Vitest for the tests."),
        ("decision", "Use Kafka for events", "Billing publishes its events to Kafka."),
        ("decision", "Replace Kafka with RabbitMQ", "Kafka is replaced by RabbitMQ in billing."),
        ("decision", "Kafka stays", "Kafka stays for events; RabbitMQ was tried and dropped."),
        ("session", "Moved the tests", "We moved the tests from Vitest to Jest again."),
    ]
    drafts = [
        MemoryDraft(
            type=MemoryType(kind),
            title=title,
            body=body,
            slug=f"2026-03-01-note-{i:02d}",
            scope_path=project,
            created_at=start + timedelta(minutes=i),
        )
        for i, (kind, title, body) in enumerate(notes)
    ]
    drafts[9] = drafts[9].model_copy(update={"supersedes": [drafts[2].slug]})  # by hand
    after = open_service(
        load_settings(tmp_path / "home-after", graph={"engine": ENGINE, "buffer_pool_mb": 128})
    )
    try:
        monkeypatch.setattr(after, "judge_unwritten", lambda memory: None)
        rewrites: list[str] = []
        replace_many = svc._replace_many

        def counted(edits: Any, **kwargs: Any) -> None:
            rewrites.extend(new.slug for _, new, _ in edits)
            replace_many(edits, **kwargs)

        monkeypatch.setattr(svc, "_replace_many", counted)
        for draft in drafts:
            before, once_written = svc.record(draft), after.record(draft)
            assert before.meta.supersedes == after.get(once_written.slug).meta.supersedes

        slugs = [d.slug for d in drafts if d.slug]
        assert len(slugs) == len(drafts)

        def decided(service: MemoryService) -> dict[str, list[tuple[Any, ...]]]:
            return {
                slug: [
                    (x.older, x.status, x.confidence, x.judge, x.reason, x.entity_id, x.rules)
                    for x in service.get(slug).meta.supersede_decisions
                ]
                for slug in slugs
            }

        def edges(service: MemoryService) -> set[tuple[Any, ...]]:
            query = "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) RETURN n.slug, o.slug, r.status"
            return {tuple(r) for r in service.graph.cypher(query, {}, limit=1000).rows}

        def audited(service: MemoryService) -> list[tuple[Any, ...]]:
            return [
                (e.event_type, e.target_id, e.details)
                for e in service.audit.records_after(0)
                if e.event_type in ("record", "supersede")
            ]

        assert decided(svc) == decided(after)
        assert any(decided(svc).values())  # judging decided something here
        assert edges(svc) == edges(after)
        assert audited(svc) == audited(after)
        assert rewrites == []  # no record's file was written twice
    finally:
        after.close()


def test_a_batch_redacts_an_entity_id_its_memories_repeat_once(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extraction's entity ids and relation labels are cleaned inside the batch's
    `one_batch`: an id forty memories name is redacted once, not forty times, and the
    memories hold the same observations as when each is redacted on its own."""
    from memoryd.redact import fields, redact

    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return redact(text)

    monkeypatch.setattr(fields, "redact", counting)
    drafts = [
        MemoryDraft(
            type=MemoryType.FACT,
            title=f"Billing note {i}",
            body=f"Billing keeps invoice batch {i} in PostgreSQL.",
            scope_path=project,
        )
        for i in range(40)
    ]
    written = svc.record_many(drafts)
    ids = {o for m in written for o in m.meta.observations}
    assert "entity:tool:PostgreSQL" in ids
    assert all("entity:tool:PostgreSQL" in m.meta.observations for m in written)
    assert calls.count("entity:tool:PostgreSQL") == 1


def test_a_hub_read_only_as_far_as_judging_needs_finds_the_same_pairs(
    svc: MemoryService, project: Path
) -> None:
    """An entity more memories mention than `newest` is read newest first only that far;
    whatever `newest` and `limit`, a batch gets the pairs of full lists and of one query per
    memory (ties in time, memories sharing two names, a playbook that is never judged)."""
    names = ["PostgreSQL", "Redis", "Kafka", "DuckDB", "pytest"]
    kinds = ["decision", "fact", "preference", "playbook"]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    drafts = [
        MemoryDraft(
            type=MemoryType(kinds[i % 4]),
            title=f"Use {names[i % 5]} for part {i}",
            body=f"Part {i} moves to {names[i % 5]}"
            + (f"; {names[(i * 3) % 5]} stays beside it." if i % 3 else "."),
            scope_path=project,
            created_at=start + timedelta(minutes=i // 3),  # three to a minute: ties
        )
        for i in range(40)
    ]
    written = svc.record_many(drafts[:30])
    written += svc.record_many(drafts[30:])
    memories = [svc.get(m.slug) for m in written]
    for limit in (1, 3, 20):
        full = find_pairs_many(svc.graph, memories, limit=limit, newest=None)
        assert any(len(pairs) >= min(limit, 3) for pairs in full.values())
        for memory in memories:
            assert _same(full[memory.slug]) == _same(find_pairs(svc.graph, memory, limit=limit))
        for newest in (1, 2, 3, 5, 8):
            with queries(svc) as calls:
                cut = find_pairs_many(svc.graph, memories, limit=limit, newest=newest, hub=newest)
            assert any(" LIMIT " in q for q in calls)  # the hubs were read only that far
            assert {m: _same(p) for m, p in cut.items()} == {m: _same(p) for m, p in full.items()}


def test_a_batch_judged_before_its_write_finds_the_pairs_of_the_batch_written(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pairs a batch gets before its write (its memories among each entity's older ones,
    counted in its mentions, read with their texts from the batch) are those it gets once
    written: whatever `newest` and `limit`, with lists kept from the writes before or not;
    with ties in time, memories older than every stored one (past a hub's last row read), a
    name the graph does not know yet, and a memory the batch's own file says it replaces."""
    names = ["PostgreSQL", "Redis", "Kafka", "DuckDB", "pytest"]
    kinds = ["decision", "fact", "preference", "playbook"]
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def draft(i: int, minutes: int, tool: str | None = None) -> MemoryDraft:
        return MemoryDraft(
            type=MemoryType(kinds[i % 4]),
            title=f"Use {tool or names[i % 5]} for part {i}",
            body=f"Part {i} moves from {names[(i * 3) % 5]} to {tool or names[i % 5]}.",
            scope_path=project,
            created_at=start + timedelta(minutes=minutes),
        )

    kept = MentionLists()
    svc.record_many([draft(i, i // 3) for i in range(30)])
    batch = [draft(i, 20 + i // 3) for i in range(30, 45)]
    batch += [draft(i, -i) for i in range(45, 50)]  # older than every stored memory
    batch += [draft(i, 30, tool="Zig") for i in range(50, 53)]  # a name new to the graph
    found: dict[tuple[int, int | None, bool], dict[str, list[Pair]]] = {}

    def before(memories: list[Any], use_llm: bool) -> None:
        judged = sorted(
            (m for m in memories if m.meta.type.long_term),
            key=lambda m: (m.meta.created_at, m.slug),
        )
        first = next(m for m in judged if m.meta.type.value in supersede.JUDGED_TYPES)
        judged[-1].meta.supersedes = [first.slug]  # its file says so: no pair of them
        for limit in (1, 3, 20):
            for newest in (None, 1, 2, 5):
                for keep in (False, True):
                    found[(limit, newest, keep)] = find_pairs_batch(
                        svc.graph,
                        judged,
                        memories,
                        limit=limit,
                        newest=newest,
                        hub=newest or 0,
                        kept=kept if keep else None,
                    )
        return None  # judged once written, below

    after: dict[int, dict[str, list[Pair]]] = {}

    def written(graph: Any, newers: list[Any], *, limit: int, **kwargs: Any) -> Any:
        """The pairs once the batch is written, as `judge_written` finds them (before
        it writes its decisions), from full lists."""
        for n in (1, 3, 20):
            after[n] = find_pairs_many(graph, newers, limit=n, newest=None)
        return find_pairs_many(graph, newers, limit=limit, **kwargs)

    monkeypatch.setattr(svc, "judge_batch_unwritten", before)
    monkeypatch.setattr(supersede, "find_pairs_many", written)
    memories = svc.record_many(batch)
    assert any("entity:tool:Zig" in m.meta.observations for m in memories)
    assert all(any(len(p) >= min(n, 3) for p in pairs.values()) for n, pairs in after.items())
    for (limit, _newest, _keep), pairs in found.items():
        assert {m: _same(p) for m, p in pairs.items()} == {
            m: _same(p) for m, p in after[limit].items()
        }


def test_a_batch_answers_with_every_decision_written_into_its_files(
    svc: MemoryService, project: Path
) -> None:
    """`record_many` answers with its memories as their files hold them: a candidate
    decision (one memory replacing four at once waits for a human) shows in the answer too,
    not only an active one."""
    start = datetime(2026, 3, 1, tzinfo=UTC)
    parts = ["billing", "search", "reports", "exports"]
    svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.DECISION,
                title=f"Use Kafka for {part}",
                body=f"The {part} service publishes its events to Kafka.",
                scope_path=project,
                created_at=start + timedelta(minutes=i),
            )
            for i, part in enumerate(parts)
        ]
    )
    (newer,) = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.DECISION,
                title="Switch events to RabbitMQ",
                body="We switched from Kafka to RabbitMQ for every service's events.",
                scope_path=project,
                created_at=start + timedelta(days=1),
            )
        ]
    )
    stored = svc.get(newer.slug).meta.supersede_decisions
    assert any(d.status.value == "candidate" for d in stored)
    assert newer.meta.supersede_decisions == stored


@pytest.mark.parametrize("engine", ["kuzu", "falkordb"])
def test_a_scope_s_speakers_are_the_bodies_the_status_keywords_match(
    request: pytest.FixtureRequest, tmp_path: Path, project: Path, engine: str
) -> None:
    """The one scan of a scope for status-line speakers (plain words in the engine, the
    keywords in Python) finds exactly the judged bodies the keywords match, whatever their
    case or letters, in either engine; a playbook is not judged."""
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    graph: dict[str, Any] = {"engine": "kuzu", "buffer_pool_mb": 128}
    if engine == "falkordb":
        url = request.getfixturevalue("falkordb_url")
        graph = {"engine": "falkordb", "url": url, "name": f"sp-{tmp_path.name}"}
    svc = open_service(load_settings(tmp_path / "home", graph=graph, lock_timeout_s=1.0))
    request.addfinalizer(svc.close)
    bodies = [
        ("decision", "Status: SUPERSEDED BY ADR-2."),
        ("decision", "ſuperſeded by 0004 last week."),
        ("fact", "RETİRED in March with the old cluster."),
        ("preference", "Untıl now we used Kafka for events."),
        ("decision", "被 ADR-5 取代。"),
        ("decision", "Kafka moves to Redis streams."),
        ("fact", "Kelvin readings are stored in PostgreSQL."),
        ("playbook", "Deprecated: run the old migration script."),
    ]
    start = datetime(2026, 4, 1, tzinfo=UTC)
    written = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType(kind),
                title=f"Note {i}",
                body=body,
                scope_path=project,
                created_at=start + timedelta(minutes=i),
            )
            for i, (kind, body) in enumerate(bodies)
        ]
    )
    scope = written[0].meta.scope_hash
    svc.status_speakers.clear()
    assert svc._speakers(scope) == {m.slug for m in written[:5]}


def test_a_batch_whose_judging_fails_before_its_write_is_judged_once_written(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that fails while a batch is judged before its write loses nothing: the batch
    is written, then judged once written, to the same decisions."""
    from memoryd.errors import StorageError

    start = datetime(2026, 5, 1, tzinfo=UTC)
    older = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.DECISION,
                title="Use Jest for tests",
                body="The frontend tests run on Jest.",
                scope_path=project,
                created_at=start,
            )
        ]
    )
    calls: list[int] = []

    def failing(graph: Any, newers: Any, batch: Any, **kwargs: Any) -> Any:
        calls.append(len(newers))
        raise StorageError("the graph went away")

    monkeypatch.setattr(supersede, "find_pairs_batch", failing)
    (newer,) = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType.DECISION,
                title="Switch tests to Vitest",
                body="We switched from Jest to Vitest for the frontend tests.",
                scope_path=project,
                created_at=start + timedelta(days=1),
            )
        ]
    )
    assert calls == [1]
    assert newer.meta.supersedes == [older[0].slug]
    assert svc.get(newer.slug).meta.supersedes == [older[0].slug]
