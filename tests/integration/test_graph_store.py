"""The graph store contract, on every engine. kuzu and ladybug cannot share a process, so
the embedded engine comes from MEMORYD_TEST_ENGINE (`make test` runs this file once per
engine); the kuzu run also runs every contract test on FalkorDB, against the suite's server
(`falkordb_url`). A test of a Kuzu-only behaviour is marked `kuzu_only` and skipped there;
its FalkorDB counterpart, where one exists, follows it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.errors import GraphLocked, InvalidInput, PolicyDenied, StorageError
from memoryd.graph import falkordb_store
from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.falkordb_store import FalkorGraphStore
from memoryd.graph.kuzu_store import SCHEMA_VERSION, KuzuGraphStore
from memoryd.graph.store import refused_call, write_clause
from memoryd.models import DecayState, Frontmatter, Memory, MemoryType
from tests.conftest import ENGINE
from tests.waiting import wait_until

SCOPE = "0123456789ab"


def memory(slug: str, body: str = "", **meta: object) -> Memory:
    fields: dict[str, object] = {
        "title": slug.replace("-", " "),
        "slug": slug,
        "type": "decision",
        "scope_hash": SCOPE,
        "source": "manual",
        "created_at": datetime(2026, 5, 1, tzinfo=UTC),
    }
    fields.update(meta)
    return Memory(meta=Frontmatter.model_validate(fields), body=body or f"body of {slug}")


ENGINES = [ENGINE, "falkordb"] if ENGINE == "kuzu" else [ENGINE]
Opener = Callable[..., CypherGraphStore]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("kuzu_only")
    if request.param == "falkordb" and marker is not None:
        pytest.skip(f"Kuzu only: {marker.args[0]}")
    return str(request.param)


@pytest.fixture
def open_store(engine: str, request: pytest.FixtureRequest) -> Iterator[Opener]:
    """Opens a store of the engine under test in a directory (the same graph again for the
    same directory); closes them all at the end."""
    opened: list[CypherGraphStore] = []
    names: dict[Path, str] = {}

    def open_(directory: Path, **options: Any) -> CypherGraphStore:
        store: CypherGraphStore
        if engine == "falkordb":
            options.pop("buffer_pool_mb", None)
            name = names.setdefault(directory, f"test-{uuid.uuid4().hex[:12]}")
            url = request.getfixturevalue("falkordb_url")
            store = FalkorGraphStore(directory, url=url, name=name, **options)
        else:
            options.setdefault("buffer_pool_mb", 128)
            store = KuzuGraphStore(directory, engine=engine, **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def graph(open_store: Opener, tmp_path: Path) -> CypherGraphStore:
    return open_store(tmp_path / "graph")


def schema_version(engine: str) -> int:
    return falkordb_store.SCHEMA_VERSION if engine == "falkordb" else SCHEMA_VERSION


def test_schema_is_migrated_and_reopens(open_store: Opener, engine: str, tmp_path: Path) -> None:
    store = open_store(tmp_path / "g")
    assert store.schema_version() == schema_version(engine)
    store.upsert_memories([memory("a-1")])
    store.close()
    again = open_store(tmp_path / "g")
    assert again.schema_version() == schema_version(engine)
    assert again.count_memories() == 1


def test_upsert_writes_memory_entities_and_edges(graph: CypherGraphStore) -> None:
    older = memory(
        "use-react",
        observations=["entity:library:React"],
        created_at=datetime(2026, 3, 1, tzinfo=UTC),
    )
    newer = memory(
        "use-solid",
        observations=["entity:library:React", "entity:library:Solid"],
        relations=[
            "prefers:entity:library:Solid",
            {
                "subject": "entity:library:Solid",
                "predicate": "supersedes",
                "object": "entity:library:React",
                "confidence": 0.7,
            },
        ],
        supersedes=["use-react"],
        created_at=datetime(2026, 6, 1, tzinfo=UTC),
    )
    graph.upsert_memories([older])
    graph.upsert_memories([newer])
    react = graph.get_entity("entity:library:React")
    assert react is not None
    assert react.mention_count == 2
    assert react.first_seen_at == datetime(2026, 3, 1, tzinfo=UTC)
    assert react.last_seen_at == datetime(2026, 6, 1, tzinfo=UTC)
    snap = graph.snapshot()
    assert [r[:2] for r in snap["supersedes"]] == [["use-solid", "use-react"]]
    predicates = sorted(r[2] for r in snap["relates"])
    assert predicates == ["prefers", "supersedes"]
    row = graph.get_memory("use-solid")
    assert row is not None
    assert row.type is MemoryType.DECISION
    assert row.body == "body of use-solid"


def test_reupsert_replaces_edges_not_duplicates(graph: CypherGraphStore) -> None:
    m = memory("m-1", observations=["entity:tool:Docker"], relations=["uses:entity:tool:Docker"])
    graph.upsert_memories([m])
    first = graph.snapshot()
    graph.upsert_memories([m])
    assert graph.snapshot() == first
    changed = memory("m-1", observations=["entity:tool:Podman"])
    graph.upsert_memories([changed])
    docker = graph.get_entity("entity:tool:Docker")
    assert docker is not None
    assert docker.mention_count == 0
    assert graph.snapshot()["relates"] == []


def test_merging_entities_leaves_one_mention_per_memory(graph: CypherGraphStore) -> None:
    both = memory("both", observations=["entity:tool:Docker", "entity:tool:Podman"])
    graph.upsert_memories([both, memory("one", observations=["entity:tool:Podman"])])
    graph.merge_entities("entity:tool:Docker", "entity:tool:Podman")
    edges = graph.cypher(
        "MATCH (m:Memory)-[r:MENTIONS]->(e:Entity) RETURN m.slug, e.id, count(r) ORDER BY m.slug"
    ).rows
    assert [list(row) for row in edges] == [
        ["both", "entity:tool:Docker", 1],
        ["one", "entity:tool:Docker", 1],
    ]
    docker = graph.get_entity("entity:tool:Docker")
    assert docker is not None
    assert docker.mention_count == 2  # a recount: each memory once


def test_delete_detaches_and_updates_counts(graph: CypherGraphStore) -> None:
    graph.upsert_memories([memory("a", observations=["entity:tool:git"]), memory("b")])
    graph.delete_memories(["a"])
    assert graph.memory_slugs() == {"b"}
    git = graph.get_entity("entity:tool:git")
    assert git is not None
    assert git.mention_count == 0


def test_deleting_some_memories_leaves_the_graph_the_rest_alone_would_write(
    graph: CypherGraphStore, open_store: Opener, tmp_path: Path
) -> None:
    """Deleted memories take their edges, in either direction, and the relations they sourced
    with them, whether or not they had edges; the rest keep theirs and entity counts follow."""
    day = datetime(2026, 3, 1, tzinfo=UTC)
    memories = [
        memory("bare-1", type="session"),
        memory("bare-2", type="session"),
        memory("mentions-git", observations=["entity:tool:git"], created_at=day),
        memory(
            "relates-tools",
            observations=["entity:tool:git", "entity:tool:jj"],
            relations=[
                "uses:entity:tool:jj",
                {"subject": "entity:tool:jj", "predicate": "runs_on", "object": "entity:tool:git"},
            ],
        ),
        memory("old-rule", observations=["entity:tool:jj"]),
        memory("new-rule", supersedes=["old-rule"], observations=["entity:tool:jj"]),
        memory("session-x", type="session"),
        memory("promoted-x", promoted_from="session-x"),
        memory("keeps-git", observations=["entity:tool:git"]),
    ]
    graph.upsert_memories(memories)
    gone = ["bare-1", "mentions-git", "relates-tools", "old-rule", "session-x", "no-such-slug"]
    graph.delete_memories(gone)
    survivors = [m for m in memories if m.meta.slug not in gone]
    fresh = open_store(tmp_path / "fresh")
    fresh.upsert_memories(survivors)
    expected = fresh.snapshot()
    got = graph.snapshot()
    for part in ("memories", "mentions", "relates", "supersedes", "promoted_from"):
        assert got[part] == expected[part], part
    assert got["relates"] == []
    written = {row[0] for row in expected["entities"]}
    assert [row for row in got["entities"] if row[0] in written] == expected["entities"]
    assert graph.memory_slugs() == {"bare-2", "new-rule", "promoted-x", "keeps-git"}


def test_decay_states_move_each_memory_to_its_own_state(graph: CypherGraphStore) -> None:
    graph.upsert_memories([memory(f"s-{i}", type="session", ttl_days=90) for i in range(5)])
    graph.set_decay_states({})
    graph.set_decay_states(
        {"s-0": DecayState.DIM, "s-1": DecayState.SOFT_FORGOTTEN, "s-3": DecayState.DIM}
    )
    states = {}
    for i in range(5):
        row = graph.get_memory(f"s-{i}")
        assert row is not None
        states[row.slug] = row.decay_state
    assert states == {
        "s-0": DecayState.DIM,
        "s-1": DecayState.SOFT_FORGOTTEN,
        "s-2": DecayState.ALIVE,
        "s-3": DecayState.DIM,
        "s-4": DecayState.ALIVE,
    }


def test_list_filters_and_pages(graph: CypherGraphStore) -> None:
    graph.upsert_memories(
        [
            memory(
                f"m-{i}",
                type="fact" if i % 2 else "warning",
                created_at=datetime(2026, 1, i + 1, tzinfo=UTC),
            )
            for i in range(6)
        ]
    )
    facts = graph.list_memories(type=MemoryType.FACT)
    assert [m.slug for m in facts] == ["m-5", "m-3", "m-1"]
    assert [m.slug for m in graph.list_memories(limit=2, offset=1)] == ["m-4", "m-3"]
    assert graph.list_memories(decay_state=DecayState.DIM) == []


def test_pages_past_the_end_are_empty_and_bounds_are_checked(tmp_path: Path) -> None:
    """Issue 26: `ORDER BY … SKIP n` with n past the sorted rows segfaulted the engine (2 runs
    in 3 at 50,000 over one memory). Every paged store read, at offsets and limits from 0 to
    past int64, in a subprocess so a crash shows as its signal; negative bounds are refused."""
    script = textwrap.dedent(
        f"""
        from datetime import UTC, datetime
        from pathlib import Path
        from memoryd.graph.kuzu_store import KuzuGraphStore
        from memoryd.models import Frontmatter, Memory
        graph = KuzuGraphStore(Path({str(tmp_path / "graph")!r}), engine={ENGINE!r})
        meta = dict(type="decision", scope_hash="0123456789ab", source="manual",
                    created_at=datetime(2026, 5, 1, tzinfo=UTC))
        graph.upsert_memories([Memory(meta=Frontmatter.model_validate(
            dict(meta, title=f"m {{i}}", slug=f"m-{{i}}",
                 observations=[f"entity:library:L{{i}}"],
                 relations=[f"uses:entity:library:L{{i}}"])), body="b") for i in range(3)])
        reads = (graph.list_memories, graph.list_entities, graph.relation_rows)
        for read in reads:
            assert len(read()) == 3, read
            assert len(read(limit=2**70)) == 3, read
            assert len(read(offset=2, limit=2**63)) == 1, read
            for offset in (3, 4, 9_000, 50_000, 888_328, 2**31, 2**63 - 1, 2**63, 2**70):
                for _ in range(3):
                    assert read(offset=offset) == [], (read, offset)
            assert read(limit=0) == [], read
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.strip() == "ok"
    graph = KuzuGraphStore(tmp_path / "graph", engine=ENGINE, buffer_pool_mb=128)
    try:
        for limit, offset in ((-1, 0), (0, -1), (-(2**63), -(2**70))):
            with pytest.raises(InvalidInput, match="limit and offset must be 0 or more"):
                graph.list_memories(limit=limit, offset=offset)
            with pytest.raises(InvalidInput, match="limit and offset must be 0 or more"):
                graph.list_entities(limit=limit, offset=offset)
            with pytest.raises(InvalidInput, match="limit and offset must be 0 or more"):
                graph.relation_rows(limit=limit, offset=offset)
    finally:
        graph.close()


@pytest.mark.kuzu_only("the engine crashes on a SKIP past the rows; FalkorDB does not")
def test_memoryds_own_cypher_may_not_skip(graph: KuzuGraphStore) -> None:
    """Only the sandbox's copy runs SKIP (users' queries, where a crash ends the sandbox's
    process); memoryd's own queries page through `_page`, which never skips past the rows."""
    with pytest.raises(InvalidInput, match="may not SKIP"):
        graph.cypher("MATCH (m:Memory) RETURN m.slug ORDER BY m.slug SKIP 5 LIMIT 1")
    graph.cypher("MATCH (m:Memory) WHERE m.title = 'SKIP' RETURN m.slug")  # text, not a clause


def test_fingerprint_lookup(graph: CypherGraphStore) -> None:
    m = memory("dup", body="same text")
    graph.upsert_memories([m])
    assert graph.find_by_fingerprint(SCOPE, m.fingerprint) == "dup"
    assert graph.find_by_fingerprint("ffffffffffff", m.fingerprint) is None


def test_a_batch_of_fingerprints_finds_the_oldest_holder_in_the_scope(
    graph: CypherGraphStore,
) -> None:
    day = datetime(2026, 3, 1, tzinfo=UTC)
    graph.upsert_memories(
        [
            memory("later", body="same text", created_at=day.replace(month=5)),
            memory("first", body="same text", created_at=day),
            memory("elsewhere", body="other text", scope_hash="ffffffffffff"),
            memory("single", body="one of a kind"),
        ]
    )
    same, other, single = (
        memory(slug, body=body).fingerprint
        for slug, body in (("a", "same text"), ("b", "other text"), ("c", "one of a kind"))
    )
    found = graph.find_fingerprints(SCOPE, [same, other, single, same, "0" * 40])
    assert found == {same: "first", single: "single"}


def test_sensitive_memory_body_never_reaches_graph(graph: CypherGraphStore) -> None:
    secret = memory("s-1", body="the vault password is hunter2")
    secret.sensitive = True
    graph.upsert_memories([secret])
    row = graph.get_memory("s-1")
    assert row is not None
    assert row.body == ""
    assert "hunter2" not in repr(graph.snapshot())


def test_cypher_is_read_only(graph: CypherGraphStore) -> None:
    graph.upsert_memories([memory("x")])
    result = graph.cypher("MATCH (m:Memory) RETURN m.slug AS slug")
    assert result.columns == ["slug"]
    assert result.rows == [["x"]]
    for query in (
        "MATCH (m) DETACH DELETE m",
        "CREATE (m:Memory {slug: 'y'})",
        "MATCH (m:Memory) SET m.title = 'z'",
    ):
        with pytest.raises(PolicyDenied, match="read-only"):
            graph.cypher(query)
    with pytest.raises(InvalidInput, match="invalid Cypher"):
        graph.cypher("MATCH (m:Memory RETURN m")
    assert graph.count_memories() == 1
    # a keyword inside a string literal is not a write clause
    assert graph.cypher("MATCH (m:Memory) WHERE m.title <> 'CREATE' RETURN count(m)").rows == [[1]]


def test_cypher_row_limit(graph: CypherGraphStore) -> None:
    graph.upsert_memories([memory(f"r-{i}") for i in range(5)])
    result = graph.cypher("MATCH (m:Memory) RETURN m.slug ORDER BY m.slug", limit=3)
    assert len(result.rows) == 3
    assert result.truncated


def test_write_clause_detection() -> None:
    assert write_clause("match (n) return n") is None
    assert write_clause("MATCH (n) MERGE (m)") == "MERGE"
    assert write_clause("RETURN 'DROP TABLE x'") is None


@pytest.mark.kuzu_only("the file lock; FalkorDB: test_a_second_writer_is_refused")
def test_second_process_gets_graph_locked(graph: KuzuGraphStore, tmp_path: Path) -> None:
    """Kuzu allows one read-write process: the second must get a clear, typed error."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from memoryd.errors import GraphLocked
        from memoryd.graph.kuzu_store import KuzuGraphStore
        try:
            KuzuGraphStore(Path({str(tmp_path / "graph")!r}), engine={ENGINE!r})
        except GraphLocked as exc:
            print(exc)
            sys.exit(3)
        sys.exit(0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if ENGINE == "ladybug" and result.returncode == 0:
        pytest.skip("this ladybug build lets a second process open beside the writer")
    assert result.returncode == 3, result.stderr
    assert "another memoryd process holds the graph" in result.stdout


def test_buffer_pool_exhaustion_is_a_clear_error(tmp_path: Path) -> None:
    store = KuzuGraphStore(tmp_path / "tiny", engine=ENGINE, buffer_pool_mb=64)
    big = [memory(f"big-{i}", body=("lorem ipsum " * 300) + str(i)) for i in range(30_000)]

    def fill() -> None:
        for start in range(0, len(big), 10_000):
            store.upsert_memories(big[start : start + 10_000])

    with pytest.raises(StorageError) as info:
        fill()
    assert "buffer pool" in str(info.value)
    assert "buffer_pool_mb" in info.value.hint
    # the store is still usable after the failure
    assert store.count_memories() >= 0
    store.close()


def test_unknown_engine_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="unknown graph engine"):
        KuzuGraphStore(tmp_path / "g", engine="neo4j")


def test_read_only_open_refuses_writes(open_store: Opener, tmp_path: Path) -> None:
    writer = open_store(tmp_path / "g")
    writer.upsert_memories([memory("ro")])
    writer.close()
    reader = open_store(tmp_path / "g", read_only=True)
    assert reader.count_memories() == 1
    with pytest.raises(PolicyDenied):
        reader.upsert_memories([memory("no")])


def test_locked_error_type_is_storage_error() -> None:
    assert issubclass(GraphLocked, StorageError)


@pytest.mark.kuzu_only("Kuzu's procedures; FalkorDB: test_user_cypher_on_the_server")
def test_engine_settings_and_other_procedures_are_refused(graph: KuzuGraphStore) -> None:
    """Issue 12: `CALL checkpoint_threshold=1` and friends were accepted and persisted."""
    before = graph.cypher("CALL current_setting('checkpoint_threshold') RETURN *").rows
    for query in (
        "CALL checkpoint_threshold=1",
        "CALL threads=1",
        "CALL home_directory='/etc'",
        "CALL file_search_path='/etc'",
        "CALL spill_to_disk=false",
        "CALL timeout=0",
        "call  THREADS = 4",
        "CALL `threads`=1",
        "CALL/* hidden */timeout=0",
        "RETURN 1 /* ' */ ; CALL threads=1 // '",
        "CALL read_csv('/etc/passwd') RETURN *",
        "CALL clear_warnings() RETURN *",
        "CALL project_graph('g', ['Entity'], ['RELATES']) RETURN *",
    ):
        with pytest.raises(PolicyDenied, match="read-only"):
            graph.cypher(query)
    assert graph.cypher("CALL current_setting('checkpoint_threshold') RETURN *").rows == before
    # read-only procedures still run, and a keyword in a string or a property is no CALL
    names = {row[0] for row in graph.cypher("CALL show_tables() RETURN name").rows}
    assert {"Memory", "Entity"} <= names
    assert graph.cypher("CALL table_info('Memory') RETURN count(*)").rows[0][0] > 10
    assert graph.cypher("CALL db_version() RETURN *").rows
    assert graph.cypher("RETURN 'CALL threads=1' AS text").rows == [["CALL threads=1"]]


def test_cypher_text_checks() -> None:
    assert write_clause("MATCH (n) RETURN n // then DELETE it") is None
    assert write_clause("MATCH (n) /* MERGE */ RETURN n") is None
    assert write_clause("MATCH (n) RETURN n.set, $create") is None
    assert write_clause("MATCH (n) RETURN n /* ' */ DETACH DELETE n //'") == "DETACH"
    assert write_clause("MATCH (n) RETURN n.`x` SET n.y = 1") == "SET"
    assert refused_call("CALL show_tables() RETURN *") is None
    assert refused_call("CALL SHOW_TABLES() RETURN *") is None
    assert refused_call("MATCH (n) RETURN n.call") is None
    assert refused_call("CALL threads=1") == "CALL threads=… changes an engine setting"
    assert refused_call("CALL `threads` = 1") == "CALL threads=… changes an engine setting"
    assert "not a read-only procedure" in (refused_call("CALL read_parquet('x') RETURN *") or "")
    assert refused_call("CALL") is not None


def test_one_statement_and_its_parameters(graph: CypherGraphStore) -> None:
    """A user's parameter mistakes are invalid input, on both engines (kuzu called an unused
    one a storage failure, ladybug ignored it, and both read a missing one as null)."""
    with pytest.raises(InvalidInput, match=r"parameter \$n is given but the query does not use"):
        graph.cypher("RETURN 1", {"n": 1})
    with pytest.raises(InvalidInput, match=r"uses \$slug but no value"):
        graph.cypher("MATCH (m:Memory {slug: $slug}) RETURN m")
    with pytest.raises(InvalidInput, match="one statement"):
        graph.cypher("RETURN 1; RETURN 2")
    assert graph.cypher("RETURN $n + 1 AS n;", {"n": 1}).rows == [[2]]
    assert graph.cypher("RETURN '$x' AS text // $y").rows == [["$x"]]
    with pytest.raises(InvalidInput, match="invalid Cypher"):
        graph.cypher("RETURN $n * 2", {"n": "one"})


@pytest.mark.kuzu_only("the sandbox copy; FalkorDB runs users' Cypher on the server")
def test_copy_is_private_and_holds_every_commit(graph: KuzuGraphStore, tmp_path: Path) -> None:
    """The copy user Cypher reads (memoryd.graph.sandbox) is checkpointed and needs no WAL
    replay (on kuzu 0.11.3 a replay lost a MENTIONS edge after test_mcp.py's delete tools)."""
    graph.upsert_memories(
        [
            memory("c-1", observations=["entity:library:Kuzu", "entity:project:memoryd"]),
            memory("c-2", observations=["entity:project:memoryd"]),
        ]
    )
    graph.delete_entity("entity:library:Kuzu")
    graph.upsert_memories([memory("c-3", observations=["entity:project:memoryd"])])
    (tmp_path / "copies").mkdir(mode=0o700)
    copy = graph.copy_to(tmp_path / "copies" / "1")
    assert copy.generation == graph.generation
    assert [p.name for p in copy.directory.iterdir()] == ["memoryd.kz"]
    for path in [copy.directory, *copy.directory.iterdir()]:
        assert path.stat().st_mode & 0o077 == 0, path
    edges = "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) RETURN m.slug, e.id ORDER BY m.slug"
    live = graph.cypher(edges).rows
    assert len(live) == 3
    reader = KuzuGraphStore(copy.directory, engine=ENGINE, buffer_pool_mb=64, read_only=True)
    try:
        assert reader.cypher(edges).rows == live
    finally:
        reader.close()
    with pytest.raises(StorageError, match="cannot create"):
        graph.copy_to(copy.directory)


@pytest.mark.kuzu_only("the sandbox copy and checkpoints")
def test_copy_checkpoints_beside_a_stream_of_reads(graph: KuzuGraphStore, tmp_path: Path) -> None:
    """The engine's checkpoint waits for a moment with no open transaction and timed out
    after 5 s beside four threads reading in a loop (10 of 10 attempts)."""
    graph.upsert_memories([memory(f"r-{i}") for i in range(50)])
    stop = threading.Event()
    reads = [0] * 4

    def read(n: int) -> None:
        while not stop.is_set():
            assert graph.count_memories() >= 50
            reads[n] += 1

    readers = [threading.Thread(target=read, args=(n,)) for n in range(4)]
    for reader in readers:
        reader.start()
    try:
        wait_until(lambda: min(reads) > 0, what="every reader to read once")
        (tmp_path / "copies").mkdir()
        for n in range(3):
            graph.upsert_memories([memory(f"w-{n}")])
            started = time.monotonic()
            copy = graph.copy_to(tmp_path / "copies" / str(n))
            assert time.monotonic() - started < 2
            assert copy.generation == graph.generation
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert min(reads) > 0


def test_commits_past_the_checkpoint_threshold_beside_readers(tmp_path: Path) -> None:
    """The engine's checkpoint at commit (past 16 MB of WAL) failed the COMMIT after 5 s when
    a thread was reading, with the transaction already committed: a write reported as lost
    that was not. Commits are followed by our own checkpoint, with reads held back."""
    store = KuzuGraphStore(
        tmp_path / "g", engine=ENGINE, buffer_pool_mb=64, checkpoint_bytes=64 * 1024
    )
    stop = threading.Event()
    reads = [0, 0]

    def read(n: int) -> None:
        while not stop.is_set():
            store.memory_slugs()
            reads[n] += 1

    readers = [threading.Thread(target=read, args=(n,)) for n in range(2)]
    for reader in readers:
        reader.start()
    try:
        started = time.monotonic()
        for n in range(40):
            store.upsert_memories([memory(f"big-{n}", body="lorem ipsum " * 400 + str(n))])
        assert time.monotonic() - started < 20
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert min(reads) > 0
    assert store.count_memories() == 40
    wal = tmp_path / "g" / "memoryd.kz.wal"
    assert not wal.exists() or wal.stat().st_size < 2 * 64 * 1024  # checkpointed as it grew
    store.close()


def test_relation_label_and_entity_delete(graph: CypherGraphStore) -> None:
    labelled = {
        "predicate": "mentions",
        "subject": "entity:tool:uv",
        "object": "entity:tool:pip",
        "label": "inspired by",
    }
    graph.upsert_memories([memory("m-1", observations=["entity:tool:uv"], relations=[labelled])])
    rows = graph.cypher("MATCH ()-[r:RELATES]->() RETURN r.predicate, r.label").rows
    assert rows == [["mentions", "inspired by"]]
    assert graph.snapshot()["relates"][0][-1] == "inspired by"
    graph.delete_entity("entity:tool:uv")
    graph.delete_entity("entity:tool:nothing")  # unknown: nothing to do
    assert graph.get_entity("entity:tool:uv") is None
    assert graph.snapshot()["relates"] == []
    assert graph.get_entity("entity:tool:pip") is not None


def test_record_recalls_adds_counts_and_revives(graph: CypherGraphStore) -> None:
    dim = memory("dim-one")
    dim.meta.decay_state = DecayState.DIM
    graph.upsert_memories([dim, memory("alive-one")])
    at = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    counted = graph.record_recalls({"dim-one": (1, at), "alive-one": (3, at), "missing": (1, at)})
    assert counted == {"dim-one": 1, "alive-one": 3}
    assert graph.record_recalls({"dim-one": (2, at)}) == {"dim-one": 3}
    row = graph.get_memory("dim-one")
    assert row is not None
    assert row.decay_state is DecayState.ALIVE
    assert row.last_recalled_at == at


def test_the_supersede_map_is_read_again_only_after_writes_that_may_change_it(
    graph: CypherGraphStore,
) -> None:
    """Every recall asks which candidates are superseded; the map costs a scan of the Memory
    table, so a recall count, a scope or an unrelated memory must not make the next recall
    read it again, while every write that may change an edge does."""
    graph.upsert_memories([memory("old-a")])
    graph.upsert_memories([memory("new-a", supersedes=["old-a"])])
    reads: list[str] = []
    original = graph._rows

    def rows(query: str, *args: Any, **kwargs: Any) -> list[list[Any]]:  # the real read, watched
        if "SUPERSEDES" in query:
            reads.append(query)
        return original(query, *args, **kwargs)

    graph._rows = rows  # type: ignore[method-assign]
    assert graph.superseded_by(["old-a", "new-a"]) == {"old-a": "new-a"}
    at = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    graph.record_recalls({"old-a": (1, at), "new-a": (2, at)})
    graph.set_recall("old-a", recall_count=4, last_recalled_at=at, decay_state=DecayState.ALIVE)
    graph.upsert_scope(SCOPE, "/work/shop", False, [])
    graph.upsert_memories([memory("other")], new=True)
    graph.upsert_memories([memory("other", body="rewritten")])
    assert graph.superseded_by(["old-a", "other"]) == {"old-a": "new-a"}
    assert len(reads) == 1
    graph.upsert_memories([memory("newer-b", supersedes=["other"])])
    assert graph.superseded_by(["old-a", "other"]) == {"old-a": "new-a", "other": "newer-b"}
    graph.upsert_memories([memory("new-a", body="no longer supersedes")])
    assert graph.superseded_by(["old-a", "other"]) == {"other": "newer-b"}
    graph.delete_memories(["newer-b"])
    assert graph.superseded_by(["old-a", "other"]) == {}
    assert len(reads) == 4


def test_mentioning_and_related_answer_many_entities_capped_each(
    open_store: Opener, tmp_path: Path
) -> None:
    """One statement serves every entity asked; each keeps at most `max_fanout` rows, the
    newest memories (mentioning) or the most confident relations (related) first."""
    store = open_store(tmp_path / "g", max_fanout=2)
    try:
        store.upsert_memories(
            [
                memory(
                    f"rome-{day}",
                    observations=["entity:place:Rome"],
                    created_at=datetime(2026, 5, day, tzinfo=UTC),
                )
                for day in (1, 2, 3)
            ]
            + [
                memory(
                    "paris",
                    observations=["entity:place:Paris"],
                    relations=[
                        {
                            "subject": "entity:place:Paris",
                            "predicate": "located_at",
                            "object": obj,
                            "confidence": conf,
                        }
                        for obj, conf in (
                            ("entity:place:France", 0.9),
                            ("entity:place:Europe", 0.5),
                            ("entity:place:Seine", 0.7),
                        )
                    ],
                )
            ]
        )
        rows = store.mentioning(["entity:place:Rome", "entity:place:Paris", "entity:place:Oslo"])
        assert [(e.split(":")[-1], slug) for e, slug, _ in rows] == [
            ("Rome", "rome-3"),
            ("Rome", "rome-2"),
            ("Paris", "paris"),
        ]
        other_scope = store.mentioning(["entity:place:Rome"], scope_hashes=["ffffffffffff"])
        assert other_scope == []
        related = store.related_entities(["entity:place:Paris", "entity:place:Rome"])
        assert [(dst.split(":")[-1], conf) for _, dst, _, conf in related] == [
            ("France", 0.9),
            ("Seine", 0.7),
        ]
    finally:
        store.close()


def test_newest_mentioning_is_mentioning_summed_up_sorted_in_the_engine(
    open_store: Opener, tmp_path: Path
) -> None:
    """An entity's newest memories in one read (the entity view's list): the ones
    `mentioning` keeps, in its order (newest first, one instant by slug), forgotten ones out,
    each summed up as `memory_rows` has it."""
    store = open_store(tmp_path / "g", max_fanout=3)
    try:
        store.upsert_memories(
            [
                memory(
                    slug,
                    observations=["entity:place:Rome"],
                    created_at=datetime(2026, 5, day, tzinfo=UTC),
                    tags=[slug],
                )
                for slug, day in (("rome-b", 4), ("rome-a", 4), ("rome-1", 1), ("rome-3", 3))
            ]
            + [memory("rome-gone", observations=["entity:place:Rome"])]
        )
        store.set_decay_states({"rome-gone": DecayState.FORGOTTEN})
        newest = store.newest_mentioning("entity:place:Rome", store.max_fanout)
        assert [m.slug for m in newest] == ["rome-a", "rome-b", "rome-3"]
        assert [m.slug for m in newest] == [
            s for _, s, _ in store.mentioning(["entity:place:Rome"])
        ]
        rows = store.memory_rows([m.slug for m in newest])
        for m in newest:
            row = rows[m.slug]
            assert (m.title, m.type, m.created_at, m.tags, m.scope_hash) == (
                row.title,
                row.type,
                row.created_at,
                row.tags,
                row.scope_hash,
            )
        assert store.newest_mentioning("entity:place:Oslo", 3) == []
    finally:
        store.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.kuzu_only("Kuzu connections keep what they prepared")
def test_repeated_statements_do_not_grow_the_heap(graph: KuzuGraphStore) -> None:
    """kuzu 0.11.3 keeps what a connection prepared, parameter values too, until it closes:
    30 writes and 100 reads of 5,000 slugs each grew the process by about 190 MB before
    the store replaced its connections (a 100k import held 800 MB of it)."""
    slugs = [f"2026-05-01-no-such-memory-{i}" for i in range(5000)]
    graph.delete_memories(slugs)
    graph.find_fingerprints(SCOPE, slugs)
    before = _rss_mb()
    for _ in range(30):
        graph.delete_memories(slugs)
    for _ in range(100):
        graph.find_fingerprints(SCOPE, slugs)
    assert _rss_mb() - before < 40


def _bulk_memory(n: int, prefix: str) -> Memory:
    """A memory with every column the graph keeps set, or left empty on alternate ones."""
    return memory(
        f"{prefix}-{n:03d}",
        f"body {n} 数据库迁移",
        title=f"memory {n}",
        type=list(MemoryType)[n % len(MemoryType)],
        tags=[f"tag{n}", "shared"] if n % 2 else [],
        triggers=["trigger"] if n % 3 else [],
        category="ops" if n % 2 else None,
        updated_at=datetime(2026, 5, 2, 3, 4, 5, 678000, tzinfo=UTC) if n % 2 else None,
        last_recalled_at=datetime(2026, 5, 3, tzinfo=UTC) if n % 3 else None,
        recall_count=n,
        ttl_days=None if n % 4 else 30,
        observations=[f"entity:library:Lib{n % 5}", "entity:tool:uv"],
    )


def _stored(graph: CypherGraphStore, prefix: str) -> list[list[Any]]:
    """Every column of the memories whose slug starts with `prefix`, and their mentions."""
    rows = graph.cypher(
        "MATCH (m:Memory) WHERE m.slug STARTS WITH $p OPTIONAL MATCH (m)-[r:MENTIONS]->(e)"
        " WITH m, collect(e.id + ' ' + CAST(r.confidence AS STRING)) AS mentions"
        " RETURN m, mentions ORDER BY m.slug",
        {"p": prefix},
        limit=10_000,
    ).rows
    for row in rows:
        row[0] = {k: v for k, v in row[0].items() if not k.startswith("_")}
        row[0]["slug"] = row[0]["slug"].removeprefix(prefix)
        row[1] = sorted(row[1])
    return rows


def test_bulk_new_memories_are_stored_as_one_at_a_time(graph: CypherGraphStore) -> None:
    """A write of many new memories (their rows bound as columns on Kuzu), a small one and
    an update by MERGE store the same columns, mentions and entity statistics."""
    count = 80  # over COLUMN_ROWS: the bulk path
    graph.upsert_memories([_bulk_memory(n, "bulk") for n in range(count)], new=True)
    for n in range(count):
        graph.upsert_memories([_bulk_memory(n, "single")], new=True)
    graph.upsert_memories([_bulk_memory(n, "merged") for n in range(count)])
    bulk = _stored(graph, "bulk")
    assert len(bulk) == count
    assert bulk == _stored(graph, "single") == _stored(graph, "merged")
    uv = graph.get_entity("entity:tool:uv")
    assert uv is not None
    assert uv.mention_count == 3 * count


@pytest.mark.kuzu_only("the WAL and the checkpoint")
def test_a_bulk_write_goes_to_the_wal_not_a_checkpoint(graph: KuzuGraphStore) -> None:
    """A bulk write's new memories wait in the WAL for the checkpoint that a later write
    passing `checkpoint_bytes` runs: written by COPY, kuzu 0.11.3 checkpointed at every such
    COMMIT (re-laying the hub entities' edges: most of a batch's graph CPU at 100k)."""
    graph.upsert_memories([_bulk_memory(n, "bulk") for n in range(80)], new=True)
    assert graph._wal.exists()
    assert graph._wal.stat().st_size > 0
    assert len(_stored(graph, "bulk")) == 80


@pytest.mark.kuzu_only("the WAL replayed on open")
def test_a_bulk_write_outlives_a_crash_before_its_checkpoint(
    graph: KuzuGraphStore, tmp_path: Path
) -> None:
    """A process that dies after a bulk write, before any checkpoint, leaves it in the WAL:
    the next open replays it whole (tags, times, mentions and counts as written)."""
    graph.upsert_memories([_bulk_memory(n, "kept") for n in range(80)], new=True)
    expected = _stored(graph, "kept")
    crashed = tmp_path / "crashed"
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from tests.integration.test_graph_store import _bulk_memory
        from memoryd.graph.kuzu_store import KuzuGraphStore
        store = KuzuGraphStore(Path({str(crashed)!r}), engine={ENGINE!r}, buffer_pool_mb=128)
        store.upsert_memories([_bulk_memory(n, "kept") for n in range(80)], new=True)
        assert store._wal.stat().st_size > 0
        os._exit(0)  # no close, no checkpoint
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    reopened = KuzuGraphStore(crashed, engine=ENGINE, buffer_pool_mb=128)
    try:
        assert _stored(reopened, "kept") == expected
        uv = reopened.get_entity("entity:tool:uv")
        assert uv is not None
        assert uv.mention_count == 80
    finally:
        reopened.close()


def test_bulk_write_refuses_a_slug_already_stored(graph: CypherGraphStore) -> None:
    graph.upsert_memories([memory("taken-001")])
    batch = [_bulk_memory(n, "taken") for n in range(80)]
    with pytest.raises(StorageError, match="taken-001 is already stored"):
        graph.upsert_memories(batch, new=True)
    twice = [_bulk_memory(n, "twice") for n in range(80)] + [_bulk_memory(5, "twice")]
    with pytest.raises(StorageError, match="twice-005 is already stored"):
        graph.upsert_memories(twice, new=True)
    for few in ([memory("taken-001")], [memory("few-1"), memory("taken-001")]):
        with pytest.raises(StorageError, match="taken-001 is already stored"):
            graph.upsert_memories(few, new=True)
    assert graph.count_memories() == 1  # every write rolled back whole


def test_mentioning_and_related_are_read_again_after_every_write(graph: CypherGraphStore) -> None:
    """A recall asks the same entities again and again (a conversation's speakers), so their
    rows are kept between recalls; any committed write (a new mention, a forgotten memory, a
    new relation) must show in the next answer, and the one before it must not read again."""
    rome = "entity:place:Rome"
    graph.upsert_memories(
        [memory("rome-1", observations=[rome], created_at=datetime(2026, 5, 1, tzinfo=UTC))]
    )
    reads: list[str] = []
    original = graph._rows

    def rows(query: str, *args: Any, **kwargs: Any) -> list[list[Any]]:  # the real read, watched
        reads.append(query)
        return original(query, *args, **kwargs)

    graph._rows = rows  # type: ignore[method-assign]
    assert [slug for _, slug, _ in graph.mentioning([rome], scope_hashes=[SCOPE])] == ["rome-1"]
    assert [slug for _, slug, _ in graph.mentioning([rome], scope_hashes=[SCOPE])] == ["rome-1"]
    assert graph.related_entities([rome]) == graph.related_entities([rome]) == []
    assert len(reads) == 2
    graph.upsert_memories(
        [
            memory(
                "rome-2",
                observations=[rome],
                created_at=datetime(2026, 5, 2, tzinfo=UTC),
                relations=[
                    {
                        "subject": rome,
                        "predicate": "located_at",
                        "object": "entity:place:Italy",
                        "confidence": 0.9,
                    }
                ],
            )
        ],
        new=True,
    )
    mentions = graph.mentioning([rome], scope_hashes=[SCOPE])
    assert [slug for _, slug, _ in mentions] == ["rome-2", "rome-1"]
    assert [dst for _, dst, _, _ in graph.related_entities([rome])] == ["entity:place:Italy"]
    at = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    graph.set_recall(
        "rome-2", recall_count=0, last_recalled_at=at, decay_state=DecayState.FORGOTTEN
    )
    assert [slug for _, slug, _ in graph.mentioning([rome], scope_hashes=[SCOPE])] == ["rome-1"]
    # Cached per entity and scope: another scope, or another entity beside a cached one, reads
    # only what it lacks.
    assert graph.mentioning([rome], scope_hashes=["ffffffffffff"]) == []
    reads.clear()
    both = graph.mentioning(["entity:place:Italy", rome], scope_hashes=[SCOPE])
    assert [slug for _, slug, _ in both] == ["rome-1"]
    assert len(reads) == 1
