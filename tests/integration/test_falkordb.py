"""FalkorDB as the graph engine: what differs from the embedded engines (the writer lease,
users' Cypher on the server, the dialect translation) and one service scenario that must
give the same answers on Kuzu and on FalkorDB. The contract itself runs on FalkorDB in
test_graph_store.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import load_settings
from memoryd.errors import GraphLocked, PolicyDenied, QueryLimitExceeded, StorageError
from memoryd.graph.falkordb_dialect import bind, runaway, translate
from memoryd.graph.falkordb_server import start_local
from memoryd.graph.falkordb_store import FalkorGraphStore
from memoryd.graph.store import cypher_code
from memoryd.models import Frontmatter, Memory
from memoryd.wiring import open_service
from tests.conftest import ENGINE
from tests.integration.test_supersede import draft

pytestmark = pytest.mark.skipif(ENGINE != "kuzu", reason="runs beside the kuzu leg only")


def memory(slug: str, **meta: object) -> Memory:
    fields: dict[str, object] = {
        "title": slug,
        "slug": slug,
        "type": "decision",
        "scope_hash": "0123456789ab",
        "source": "manual",
        "created_at": datetime(2026, 5, 1, tzinfo=UTC),
    }
    fields.update(meta)
    return Memory(meta=Frontmatter.model_validate(fields), body=f"body of {slug}")


@pytest.fixture
def store(falkordb_url: str, tmp_path: Path) -> Iterator[FalkorGraphStore]:
    graph = FalkorGraphStore(tmp_path / "graph", url=falkordb_url, name=f"t-{uuid.uuid4().hex}")
    yield graph
    graph.close()


def test_the_dialect_translation() -> None:
    assert translate("SET m.x = CAST(r.at AS TIMESTAMP), m.y = CAST(r.n AS INT64)") == (
        "SET m.x = localdatetime(r.at), m.y = (r.n)"
    )
    assert translate("SET e.aliases = coalesce(e.aliases, CAST([] AS STRING[]))") == (
        "SET e.aliases = coalesce(e.aliases, ([]))"
    )
    assert translate("RETURN label(a), lower(e.name), m.lower") == (
        "RETURN labels(a)[0], toLower(e.name), m.lower"
    )
    assert translate("RETURN substring(o.body, 1, 600)") == (
        "RETURN substring(o.body, 0, CASE WHEN size(o.body) - (0) < (600) THEN CASE WHEN"
        " size(o.body) - (0) < 0 THEN 0 ELSE size(o.body) - (0) END ELSE (600) END)"
    )  # the length cut to what is left: tests/integration/test_falkordb_text.py
    assert translate("WHERE NOT EXISTS { MATCH (o)-[:SUPERSEDES]->(n) } RETURN 1") == (
        "WHERE NOT (o)-[:SUPERSEDES]->(n) RETURN 1"
    )
    assert translate("RETURN EXISTS { MATCH (:M)-[s:S]->(m) WHERE s.x = 1 } AS y") == (
        "RETURN size([(:M)-[s:S]->(m) WHERE s.x = 1 | 1]) > 0 AS y"
    )
    assert translate("WHERE a AND regexp_matches(o.body, $w) RETURN o") == (
        "WHERE a AND true RETURN o"
    )
    assert translate("RETURN t + to_days(CASE x WHEN 1 THEN (a + 1) ELSE b END) AS due") == (
        "RETURN t + duration({days: CASE x WHEN 1 THEN (a + 1) ELSE b END}) AS due"
    )
    # a pattern out of a node found by an indexed key is read from that node
    assert translate(
        "UNWIND $ids AS i MATCH (e:Entity {id: i})<-[:MENTIONS]-(o:Memory) WHERE o.x RETURN o"
    ) == (
        "UNWIND $ids AS i MATCH (e:Entity {id: i}) WITH * MATCH (e)<-[:MENTIONS]-(o:Memory)"
        " WHERE o.x RETURN o"
    )
    assert translate("MATCH (o:Memory)-[:MENTIONS]->(e:Entity {id: $id}) RETURN o") == (
        "MATCH (e:Entity {id: $id}) WITH * MATCH (o:Memory)-[:MENTIONS]->(e) RETURN o"
    )
    for kept in (
        "OPTIONAL MATCH (m:Memory {slug: $s})-[:MENTIONS]->(e) RETURN e",  # may be missing
        "MATCH (a:Memory {slug: $a}), (b:Memory {slug: $b}) RETURN a, b",  # no edge
        "MATCH (m:Memory {title: $t})-[:MENTIONS]->(e) RETURN e",  # not an indexed key
    ):
        assert translate(kept) == kept
    assert translate("RETURN CAST(m.created_at AS DATE)") == (
        "RETURN date({year: (m.created_at).year, month: (m.created_at).month,"
        " day: (m.created_at).day})"
    )
    at = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
    text, params = bind("WHERE m.t <= $at AND m.u <= localdatetime($at)", {"at": at})
    assert text == "WHERE m.t <= localdatetime($at) AND m.u <= localdatetime($at)"
    assert params == {"at": "2026-05-01T09:30:00"}
    _, rows = bind("UNWIND $rows AS r", {"rows": [{"at": at, "n": 1}]})
    assert rows == {"rows": [{"at": "2026-05-01T09:30:00", "n": 1}]}


def test_a_second_writer_is_refused(store: FalkorGraphStore, tmp_path: Path) -> None:
    """One writer per graph: a second store (here another process, as a second daemon would
    be) is refused with GraphLocked, which the CLI exits 6 with, naming the holder; a
    reader is not; once the writer closes, the lease is free."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from memoryd.errors import GraphLocked
        from memoryd.graph.falkordb_store import FalkorGraphStore
        try:
            FalkorGraphStore(Path({str(tmp_path / "other")!r}), url={store.url!r},
                             name={store.name!r})
        except GraphLocked as exc:
            print(exc)
            sys.exit(6)
        sys.exit(0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 6, result.stderr
    assert f"another memoryd writes the graph {store.name}" in result.stdout
    assert f"pid {__import__('os').getpid()}" in result.stdout  # the holder, named
    store.upsert_memories([memory("m-1")])
    reader = FalkorGraphStore(store.directory, url=store.url, name=store.name, read_only=True)
    assert reader.count_memories() == 1
    reader.close()
    with pytest.raises(GraphLocked):
        FalkorGraphStore(tmp_path / "third", url=store.url, name=store.name)
    store.close()
    again = FalkorGraphStore(store.directory, url=store.url, name=store.name)
    assert again.count_memories() == 1
    again.close()


def test_a_replaced_graph_is_deleted_once_no_directory_names_it(
    falkordb_url: str, tmp_path: Path
) -> None:
    """Reindex's steps: the live graph closes, a new one builds in graph.rebuild (its own
    key), the directories swap and the old one is removed; the next writer open deletes
    the old key from the server, and only a name this home owns is cleaned."""
    name = f"t-{uuid.uuid4().hex}"
    live = FalkorGraphStore(tmp_path / "graph", url=falkordb_url, name=name, owns_name=True)
    live.upsert_memories([memory("old")])
    old_key = live.key
    live.close()
    fresh = FalkorGraphStore(tmp_path / "graph.rebuild", url=falkordb_url, name=name)
    fresh.upsert_memories([memory("new")])
    new_key = fresh.key
    fresh.close()
    (tmp_path / "graph").rename(tmp_path / "graph.old")
    (tmp_path / "graph.rebuild").rename(tmp_path / "graph")
    shared = FalkorGraphStore(tmp_path / "graph", url=falkordb_url, name=name)
    assert shared._redis.exists(old_key)  # a name shared with other homes: left alone
    shared.close()
    shutil.rmtree(tmp_path / "graph.old")
    again = FalkorGraphStore(tmp_path / "graph", url=falkordb_url, name=name, owns_name=True)
    try:
        assert again.key == new_key
        assert again.memory_slugs() == {"new"}
        assert not again._redis.exists(old_key)
        assert again._redis.exists(new_key)
    finally:
        again.close()


def _lose_writes_after(store: FalkorGraphStore, saved: str) -> None:
    """What a server that crashed before its fsync comes back with: the graph as it was
    when `saved` was copied (GRAPH.COPY), the writes after it gone."""
    store._redis.rename(saved, store.key)


def test_writes_the_server_lost_are_replayed_on_open(
    store: FalkorGraphStore, falkordb_url: str
) -> None:
    """Each write's MULTI sets the graph's sequence number, and the statements it sent go
    to the directory's redo log (fsynced) once EXEC returned. A server that lost its last
    writes (here: the graph rolled back to a copy taken before them) gets exactly those
    writes replayed on the next open, once each: the graph equals the one before the loss,
    and equals it again after a second open."""
    store.upsert_memories([memory("m-1", observations=["entity:tool:git"])])
    saved = f"{store.key}:saved"
    store._redis.execute_command("GRAPH.COPY", store.key, saved)
    store.upsert_memories([memory("m-2", observations=["entity:tool:git"])])
    store.upsert_memories([memory(f"bulk-{i}") for i in range(50)], new=True)
    store.delete_memories(["m-1"])
    store.upsert_memories([memory("m-2", observations=["entity:tool:docker"])])
    before = store.snapshot()
    directory, name = store.directory, store.name
    store.close()
    _lose_writes_after(store, saved)
    again = FalkorGraphStore(directory, url=falkordb_url, name=name)
    try:
        assert again.snapshot() == before
        assert again._held()[0] == again._commits
    finally:
        again.close()
    third = FalkorGraphStore(directory, url=falkordb_url, name=name)
    try:
        assert third.snapshot() == before  # nothing replayed twice
        third.upsert_memories([memory("m-9")])  # numbers go on
        assert third.count_memories() == len(before["memories"]) + 1
    finally:
        third.close()


def test_writes_a_server_lost_under_a_live_writer_are_replayed_before_the_next(
    store: FalkorGraphStore,
) -> None:
    """A server that crashed and came back without its last writes while the writer stayed
    up: each transaction WATCHes the key and checks the graph's number before it reads, so
    the next write finds the gap, replays the lost writes from the redo log, then applies.
    A write by another client between the check and EXEC aborts the commit instead."""
    store.upsert_memories([memory("m-1")])
    saved = f"{store.key}:saved"
    store._redis.execute_command("GRAPH.COPY", store.key, saved)
    store.upsert_memories([memory("m-2", observations=["entity:tool:git"])])
    store.delete_memories(["m-1"])
    _lose_writes_after(store, saved)
    assert store.memory_slugs() == {"m-1"}  # what the server came back with
    assert not store.trim_log()  # the lost writes stay in the log, confirmed or not
    store.upsert_memories([memory("m-3")])
    assert store.memory_slugs() == {"m-2", "m-3"}
    assert store._held()[0] == store._commits
    with pytest.raises(StorageError, match="changed under its writer"):
        _write_while_another_client_writes(store)
    assert store.memory_slugs() == {"m-2", "m-3", "intruder"}


def _write_while_another_client_writes(store: FalkorGraphStore) -> None:
    with store._transaction() as tx:
        tx.execute("MERGE (:Memory {slug: 'm-4'})")
        store._redis.execute_command("GRAPH.QUERY", store.key, "MERGE (:Memory {slug: 'intruder'})")


def test_writes_lost_past_what_the_server_confirmed_are_refused(
    store: FalkorGraphStore, falkordb_url: str
) -> None:
    """Once the server confirmed the writes on its disk (`WAITAOF`) the redo log drops
    them; a graph that lost them anyway (its disk, not its last second) is refused on open,
    naming reindex."""
    store.upsert_memories([memory("m-1")])
    saved = f"{store.key}:saved"
    store._redis.execute_command("GRAPH.COPY", store.key, saved)
    store.upsert_memories([memory("m-2")])
    store.upsert_memories([memory("m-3")])
    assert store.trim_log()
    assert store._log.read().entries == []
    directory, name = store.directory, store.name
    store.close()
    _lose_writes_after(store, saved)
    with pytest.raises(StorageError, match=r"lost 2 acknowledged writes") as lost:
        FalkorGraphStore(directory, url=falkordb_url, name=name)
    assert "memoryd reindex" in (lost.value.hint or "")


def test_a_server_without_an_append_only_file_confirms_nothing(tmp_path: Path) -> None:
    """A server with `appendonly no` cannot confirm a write on disk (WAITAOF refuses): the
    redo log keeps its writes (until it passes its size cap), and reindex's swap still
    goes ahead."""
    server = start_local(Path(tempfile.mkdtemp(prefix="mdfk-noaof-", dir="/tmp")) / "s")
    try:
        live = FalkorGraphStore(tmp_path / "graph", url=server.url, name="noaof")
        live._redis.config_set("appendonly", "no")
        live.upsert_memories([memory("old")])
        assert not live.trim_log()
        assert live._no_aof
        assert [seq for seq, _ in live._log.read().entries][-1] == live._commits
        live.close()
        fresh = FalkorGraphStore(tmp_path / "graph.rebuild", url=server.url, name="noaof")
        fresh.upsert_memories([memory("new")])
        fresh.close()
        live.replace_with(tmp_path / "graph.rebuild")
        again = FalkorGraphStore(tmp_path / "graph", url=server.url, name="noaof")
        assert (again.key, again.memory_slugs()) == (live.key, {"new"})
        again.close()
    finally:
        server.stop()
        shutil.rmtree(server.directory.parent, ignore_errors=True)


def test_runaway_lists_are_named_before_the_server_sees_them() -> None:
    """What FalkorDB 4.16 would build past its limits, read from the query's structure:
    strings and property names do not count, parameters do."""
    assert runaway(cypher_code("RETURN 'range(1, 9999999999)', m.range(1, 2)"), None) is None
    assert runaway("UNWIND range(0, 999999) AS x RETURN x", None) is None
    assert runaway("RETURN range(10, 1, -1)", None) is None
    assert "makes 1,000,001 values" in (runaway("RETURN range(0, 1000000)", None) or "")
    assert "not numbers" in (runaway("RETURN range(1, $n)", {"n": "9"}) or "")
    assert "step of 0" in (runaway("RETURN range(1, 5, 0)", None) or "")
    assert runaway("RETURN range(1, $n, $s)", {"n": 10**9, "s": 1000}) is None
    assert "reduce" in (runaway("RETURN reduce(a = 0, x IN [1] | a + x)", None) or "")
    nested = "RETURN [x IN [1, 2] | [y IN [3] | y]]"
    assert "inside another" in (runaway(nested, None) or "")
    assert runaway("RETURN [x IN [1, 2] | x], [y IN [3] | y]", None) is None


def test_a_reader_during_reindex_sees_the_old_graph_or_the_new_one(
    tmp_path: Path, falkordb_url: str, project: Path
) -> None:
    """Reindex builds the new graph under a key of its own and RENAMEs it over the live
    one. A reader in another store (a notebook, another process) reads the key the live
    directory names the whole time: each of its reads sees the old graph (here with one
    stray memory reindex drops) or the new one, whole, never an error or a half graph; and
    after the reindex it reads the new one. The live marker keeps its key."""
    settings = load_settings(
        tmp_path / "home", graph={"engine": "falkordb", "url": falkordb_url}, lock_timeout_s=1.0
    )
    svc = open_service(settings)
    stop = threading.Event()
    seen: list[int | str] = []
    try:
        drafts = [
            draft(project, f"Decision {i}", f"Service {i} uses Redis.", "decision", 1 + i % 27)
            for i in range(300)
        ]
        svc.record_many(drafts)
        graph = svc.graph
        assert isinstance(graph, FalkorGraphStore)
        live_key = graph.key
        graph._redis.execute_command("GRAPH.QUERY", live_key, "CREATE (:Memory {slug: 'stray'})")
        reader = FalkorGraphStore(
            graph.directory, url=falkordb_url, name=graph.name, read_only=True
        )

        def read() -> None:
            while not stop.is_set():
                try:
                    seen.append(reader.count_memories())
                except StorageError as exc:
                    seen.append(str(exc))

        thread = threading.Thread(target=read)
        thread.start()
        try:
            svc.reindex()
            after = reader.count_memories()
        finally:
            stop.set()
            thread.join()
            reader.close()
        assert svc.graph.key == live_key  # type: ignore[attr-defined]
        assert after == 300
        assert set(seen) <= {300, 301}, sorted(set(seen), key=str)
        assert 301 in seen
        graphs = graph._redis.scan_iter(match=f"{graph.name}:*", _type="graphdata")
        assert list(graphs) == [live_key]  # the rebuilt graph's own key is gone
    finally:
        stop.set()
        svc.close()


def test_a_read_out_of_a_keyed_node_starts_at_its_index(store: FalkorGraphStore) -> None:
    """Judging's read of the memories naming a batch's entities starts at each entity's
    index entry: FalkorDB planned the pattern as it is written from a scan of every memory
    once per entity (a 2,000-memory batch at 10k memories ran past its 10 s limit)."""
    from memoryd.governance.supersede_graph import _MENTIONED_BY

    store.upsert_memories([memory("m-1", observations=["entity:tool:git"])])
    params = {"ids": ["entity:tool:git"], "scopes": ["0123456789ab"], "types": ["decision"]}
    text, values = bind(translate(_MENTIONED_BY), params)
    header = store._graph._build_params_header(values)  # as the client sends a query
    plan = "\n".join(store._redis.execute_command("GRAPH.EXPLAIN", store.key, header + text))
    assert "Node By Index Scan | (e:Entity)" in plan
    assert "Label Scan" not in plan
    rows = store.cypher(_MENTIONED_BY, params).rows
    assert [row[:3] for row in rows] == [["entity:tool:git", "0123456789ab", "m-1"]]


def test_a_read_past_its_time_limit_is_an_error_never_a_cut_answer(
    store: FalkorGraphStore,
) -> None:
    """A read the server stops at its TIMEOUT raises QueryLimitExceeded; one that answers
    answers whole. Limits from 1 ms up, over reads of 100k-1M rows that stream, sort and
    aggregate: each ends on one side of its limit or the other, never with part of its rows.
    A limit past the server's TIMEOUT_MAX is refused before the query runs: said as such,
    not as a query that ran out of time."""
    reads = [
        ("UNWIND range(1, $n) AS x RETURN x", {"n": 100_000}),
        ("UNWIND range(1, $n) AS x RETURN x ORDER BY x DESC", {"n": 100_000}),
        ("UNWIND range(1, $n) AS x RETURN count(x), sum(x)", {"n": 1_000_000}),
    ]
    whole = [store.cypher(q, p, limit=10**7, timeout_ms=60_000).rows for q, p in reads]
    outcomes = set()
    for timeout_ms in (1, 3, 10, 30, 100, 300):
        for (query, params), rows in zip(reads, whole, strict=True):
            try:
                got = store.cypher(query, params, limit=10**7, timeout_ms=timeout_ms).rows
            except QueryLimitExceeded as exc:
                outcomes.add(f"stopped at its {exc.limit} limit")
            else:
                assert got == rows, f"{query} at {timeout_ms} ms: {len(got)} of {len(rows)} rows"
                outcomes.add("whole")
    assert outcomes <= {"whole", "stopped at its time limit"}
    assert "stopped at its time limit" in outcomes  # the limit was met
    store._timeout_max = 0  # as against a server that does not say its TIMEOUT_MAX
    with pytest.raises(StorageError, match="TIMEOUT_MAX") as refused:
        store.cypher("RETURN 1", timeout_ms=61_000)
    assert "61,000 ms" in refused.value.message


def test_user_cypher_on_the_server(store: FalkorGraphStore) -> None:
    """A write clause, a procedure off the allow-list and a runaway query are refused or
    stopped, and the server keeps serving."""
    store.upsert_memories([memory("m-1", observations=["entity:tool:git"])])
    store.upsert_memories([memory(f"many-{i}") for i in range(300)], new=True)
    for query in (
        "MATCH (m) DETACH DELETE m",
        "CREATE (:Memory {slug: 'x'})",
        "CALL algo.pageRank('Memory', 'MENTIONS') YIELD node RETURN node",
        "CALL db.idx.fulltext.createNodeIndex('Memory', 'title')",
    ):
        with pytest.raises(PolicyDenied, match="read-only"):
            store.user_cypher(query)
    # the server refuses a write too, past the text checks
    with pytest.raises(PolicyDenied):
        store._query("CREATE (:Memory {slug: 'y'})", None)
    labels = {row[0] for row in store.user_cypher("CALL db.labels()").rows}
    assert {"Memory", "Entity"} <= labels
    node = store.user_cypher("MATCH (m:Memory) RETURN m").rows[0][0]
    assert (node["_labels"], node["slug"]) == (["Memory"], "m-1")
    with pytest.raises(QueryLimitExceeded) as slow:
        store.user_cypher(
            "MATCH (a:Memory), (b:Memory), (c:Memory), (d:Memory) RETURN count(*)", timeout_ms=200
        )
    assert slow.value.limit == "time"
    with pytest.raises(QueryLimitExceeded) as big:
        store.user_cypher(
            "UNWIND range(1, 1000000) AS x UNWIND range(1, 10) AS y"
            " RETURN collect([x, y, x, y, x, y, x, y])",
            timeout_ms=60_000,  # the memory cap, not the clock of a busy machine, stops it
        )
    assert big.value.limit == "memory"
    # what FalkorDB 4.16 builds in one go, past both limits, is refused before it runs
    for query, params in (
        ("RETURN size(range(1, 2000000000))", None),
        ("UNWIND range(1, $n) AS x RETURN count(x)", {"n": 10**10}),
        ("RETURN range(1, toInteger('2000000000'))", None),
        ("WITH range(1, 100000) AS r RETURN size([x IN r | [y IN r | 1]])", None),
        ("RETURN size(reduce(l = [1], x IN range(1, 40) | l + l))", None),
    ):
        with pytest.raises(QueryLimitExceeded, match="would build") as runaway:
            store.user_cypher(query, params)
        assert runaway.value.limit == "memory"
    assert store.user_cypher("RETURN size(range(1, 1000000, 2))").rows == [[500000]]
    assert store.count_memories() == 301  # still serving
    assert store.user_cypher("MATCH (m:Memory) RETURN count(m)").rows == [[301]]


def test_judging_left_undone_shows_in_doctor(
    falkordb_url: str, tmp_path: Path, project: Path
) -> None:
    """A write whose supersede judging failed part-way (here a server that does not say its
    TIMEOUT_MAX refuses the status-line scan's longer limit) is written, and `doctor` says
    judging was left undone and why, not only the log."""
    from memoryd.doctor import service_checks

    settings = load_settings(
        tmp_path / "home",
        graph={"engine": "falkordb", "url": falkordb_url, "name": f"j-{uuid.uuid4().hex}"},
    )
    svc = open_service(settings)
    try:
        checks = {c.name: c for c in service_checks(svc, settings)}
        assert checks["supersede judging"].ok
        svc.graph._timeout_max = 0  # type: ignore[attr-defined]
        written = svc.record_many(
            [draft(project, f"Decision {i}", f"Use tool {i}.", "decision", i) for i in (1, 2)]
        )
        assert len(written) == 2
        check = {c.name: c for c in service_checks(svc, settings)}["supersede judging"]
        assert not check.ok
        assert "1 writes partly left unjudged" in check.detail
        assert "status lines of scope" in check.detail
        assert "TIMEOUT_MAX" in check.detail
    finally:
        svc.close()


# ----------------------------------------------------------------------- one scenario


def _scenario(settings: Any, project: Path) -> dict[str, Any]:
    """Record, extract, supersede, recall, Cypher, reindex: what each step answers."""
    svc = open_service(settings)
    try:
        older = svc.record(
            draft(project, "Frontend framework", "Prefer React for the dashboard.", "preference", 1)
        )
        newer = svc.record(
            draft(
                project,
                "Dashboard moves to Solid",
                "Switched the dashboard from React to Solid; the bundle is 40% smaller.",
                "decision",
                20,
            )
        )
        db = svc.record(
            draft(
                project,
                "Database",
                "We keep Postgres 16 for the billing service and run migrations with Alembic.",
                "decision",
                3,
            )
        )
        out: dict[str, Any] = {
            "superseded": svc.graph.superseded_by([older.slug]),
            "chain": [
                (r.newer, r.older, r.status, r.decided_by) for r in svc.supersedes_chain(older.slug)
            ],
            "recall": [
                (h.slug, h.superseded_by)
                for h in svc.recall("React dashboard", scope=str(project)).hits
            ],
            "recall_db": [h.slug for h in svc.recall("billing database", scope=str(project)).hits],
            "entities": sorted(e.id for e in svc.graph.entity_catalogue()),
            "cypher": svc.cypher(
                "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) RETURN m.slug AS slug, e.id AS id"
                " ORDER BY slug, id"
            ).rows,
            "snapshot": svc.graph.snapshot(),
        }
        svc.reindex()
        out["reindexed"] = svc.graph.snapshot()
        names = {older.slug: "OLDER", newer.slug: "NEWER", db.slug: "DB", str(settings.home): "~"}
        return {key: _renamed(value, names) for key, value in out.items()}
    finally:
        svc.close()


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """`value` with each home's own names (slugs carry a random part, paths the home) as
    placeholders, and the run's clock (any time after the scenario's May) as NOW, so two
    homes' answers compare."""
    if isinstance(value, datetime) and value > datetime(2026, 6, 1, tzinfo=UTC):
        return "NOW"
    if isinstance(value, str):
        for old, new in names.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {_renamed(k, names): _renamed(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_renamed(v, names) for v in value)
    return value


def test_one_scenario_gives_equal_results_on_kuzu_and_falkordb(
    tmp_path: Path, falkordb_url: str, project: Path
) -> None:
    kuzu = load_settings(
        tmp_path / "kuzu", graph={"engine": "kuzu", "buffer_pool_mb": 128}, lock_timeout_s=1.0
    )
    falkor = load_settings(
        tmp_path / "falkor",
        graph={"engine": "falkordb", "url": falkordb_url, "name": f"s-{uuid.uuid4().hex}"},
        lock_timeout_s=1.0,
    )
    on_kuzu = _scenario(kuzu, project)
    on_falkor = _scenario(falkor, project)
    assert on_kuzu["superseded"] == {"OLDER": "NEWER"}
    assert on_kuzu["recall"][:2] == [("NEWER", None), ("OLDER", "NEWER")]
    assert on_kuzu["recall_db"][0] == "DB"
    assert len(on_kuzu["entities"]) >= 3, "extraction found the entities"
    for part, rows in on_kuzu["snapshot"].items():
        for mine, theirs in zip(on_falkor["snapshot"][part], rows, strict=True):
            assert mine == theirs, part
    assert on_falkor == on_kuzu
    assert on_falkor["reindexed"] == on_falkor["snapshot"]


def test_setup_falkordb_starts_a_local_server_the_cli_then_uses() -> None:
    """`memoryd setup falkordb` starts a detached server in <home>/falkordb/; with
    graph.engine = "falkordb" the CLI records, queries and checks against it; --stop ends it."""
    import json
    import os
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="mdfk-home-", dir="/tmp"))
    env = {**os.environ, "MEMORYD_GRAPH__ENGINE": "falkordb"}

    def memoryd(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "memoryd", *args, "--home", str(home)]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    try:
        started = memoryd("setup", "falkordb", "--json")
        assert started.returncode == 0, started.stderr
        info = json.loads(started.stdout)
        assert info["url"] == f"unix://{home / 'falkordb' / 'falkordb.sock'}"
        assert (home / "falkordb").stat().st_mode & 0o077 == 0
        recorded = memoryd(
            "record", "--type", "decision", "--title", "Database", "--body", "We keep Postgres."
        )
        assert recorded.returncode == 0, recorded.stderr
        rows = memoryd("graph", "query", "MATCH (m:Memory) RETURN m.title", "--json")
        assert rows.returncode == 0, rows.stderr
        assert "Database" in rows.stdout
        refused = memoryd("graph", "query", "CREATE (:Memory {slug: 'x'})")
        assert refused.returncode == 5
        runaway = memoryd("graph", "query", "RETURN size(range(1, 2000000000))")
        assert runaway.returncode == 5, runaway.stderr
        assert "makes 2,000,000,000 values" in runaway.stderr
        again = memoryd("graph", "query", "MATCH (m:Memory) RETURN count(m) AS n", "--json")
        assert again.returncode == 0, again.stderr  # the server still serves
        assert json.loads(again.stdout)["rows"] == [[1]]
        doctor = memoryd("doctor", "--json")
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    finally:
        stopped = memoryd("setup", "falkordb", "--stop")
        shutil.rmtree(home, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the server" in stopped.stdout
