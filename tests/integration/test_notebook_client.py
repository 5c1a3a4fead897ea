"""`memoryd.connect()`: the same answers through a real daemon and from a read-only embedded
open, and the embedded path neither writes nor holds anything between calls."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import memoryd
from memoryd.config import load_settings
from memoryd.errors import GraphLocked, InvalidInput, NotFound, PolicyDenied, StorageError
from memoryd.models import MemoryDraft, MemoryType, RecallResult
from memoryd.notebook import Notebook
from memoryd.wiring import open_service
from tests.daemon_harness import running

SOLID = "Switch the storefront from React to Solid"
REACT = "Use React for the storefront"


@pytest.fixture
def demo(shared_demo: Path) -> Path:
    """The demo vault, loaded once for the run; tests that write use a copy (`home_copy`)."""
    return shared_demo


@pytest.fixture
def home_copy(demo: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(demo, target, ignore=shutil.ignore_patterns("memoryd.sock", "memoryd.lock"))
    return target


@pytest.fixture
def mem(demo: Path) -> Iterator[Notebook]:
    with memoryd.connect(demo) as client:
        yield client


def files_of(home: Path) -> dict[str, tuple[int, int]]:
    """Every file under `home` with its size and mtime: any write changes this."""
    return {
        str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(home.rglob("*"))
        if p.is_file()
    }


def slug_of(client: Notebook, title: str) -> str:
    found = client.cypher("MATCH (m:Memory {title: $t}) RETURN m.slug AS slug", t=title)
    return str(found.slug.iloc[0])


def sample(client: Notebook) -> dict[str, object]:
    """What a notebook would look at, in comparable form."""
    g = client.subgraph("PostgreSQL", depth=2)
    return {
        "cypher": client.cypher(
            "MATCH (e:Entity) RETURN e.id AS id, e.mention_count AS n, e.first_seen_at AS first"
            " ORDER BY n DESC, id LIMIT 20"
        ).to_dict("list"),
        "recall": [h.slug for h in client.recall("React or Solid for the storefront", k=5).hits],
        "nodes": sorted(g.nodes(data="mention_count")),
        "edges": sorted((u, v, k) for u, v, k in g.edges(keys=True)),
        # NaN is not equal to itself: compare a missing value as None
        "chain": client.supersedes(entity="React")
        .astype(object)
        .where(lambda df: df.notna(), None)
        .to_dict("list"),
    }


# -- embedded, read-only ------------------------------------------------------------------
def test_connect_is_lazy_and_embedded_without_a_daemon(demo: Path) -> None:
    code = "import sys, memoryd; assert 'pandas' not in sys.modules, 'import memoryd loads pandas'"
    subprocess.run([sys.executable, "-c", code], check=True)
    client = memoryd.connect(demo)
    assert client.mode == "embedded"
    assert repr(client) == f"<memoryd.connect home={str(demo)!r} via embedded>"
    client.close()
    assert "closed" in repr(client)
    with pytest.raises(StorageError, match="closed"):
        client.cypher("RETURN 1")


def test_cypher_gives_a_dataframe_named_after_return(mem: Notebook) -> None:
    df = mem.cypher(
        "MATCH (m:Memory)-[:MENTIONS]->(e:Entity {name: $name}) WHERE m.type IN $types"
        " RETURN m.title AS title, m.created_at, e.mention_count ORDER BY m.created_at",
        name="PostgreSQL",
        params={"types": ["decision", "fact"]},
    )
    assert list(df.columns) == ["title", "m.created_at", "e.mention_count"]
    assert str(df["m.created_at"].dtype) == "datetime64[us, UTC]"
    assert df["m.created_at"].is_monotonic_increasing
    assert SOLID not in set(df.title)
    assert "Webshop stack overview" in set(df.title)
    assert not df.attrs["truncated"]
    few = mem.cypher("MATCH (m:Memory) RETURN m.slug", limit=3)
    assert len(few) == 3
    assert few.attrs["truncated"]


def test_recall_is_not_counted_from_a_notebook(mem: Notebook) -> None:
    result = mem.recall("React or Solid for the storefront", k=5)
    assert isinstance(result, RecallResult)
    titles = [h.title for h in result.hits]
    assert titles.index(SOLID) < titles.index(REACT)
    df = mem.recall_df("React or Solid for the storefront", k=5)
    assert list(df["rank"]) == [1, 2, 3, 4, 5]
    assert df.set_index("title").loc[REACT, "superseded_by"] == slug_of(mem, SOLID)
    assert "entity:library:React" in df.attrs["entities"]
    with pytest.raises(PolicyDenied, match="no daemon"):
        mem.recall("React", track=True)
    counts = mem.cypher("MATCH (m:Memory) RETURN sum(m.recall_count) AS n")
    assert counts.n.iloc[0] == 0


def test_subgraph_centres_on_a_resolved_entity(mem: Notebook) -> None:
    g = mem.subgraph("postgresql", depth=1, max_neighbours=5)
    centre = "entity:tool:PostgreSQL"
    assert g.graph["centre"] == centre
    assert g.nodes[centre]["name"] == "PostgreSQL"
    assert g.nodes[centre]["mention_count"] == 10
    assert g.nodes[centre]["hop"] == 0
    assert 1 < g.number_of_nodes() <= 6
    assert {"type", "kind", "first_seen_at"} <= set(g.nodes[centre])
    relation = g.get_edge_data(centre, "entity:tool:MySQL", key="supersedes")
    assert relation["kind"] == "relation"
    assert 0 < relation["confidence"] <= 1
    for _, _, data in g.edges(data=True):
        assert data["predicate"]
        assert 0 < data["confidence"] <= 1
    wide = mem.subgraph("PostgreSQL", depth=2, memories=True)
    memories = {n for n, kind in wide.nodes(data="kind") if kind == "memory"}
    assert len(memories) == 10
    assert all(wide.has_edge(slug, centre, key="mentions") for slug in memories)
    assert wide.graph["depth"] == 2


def test_subgraph_rejects_what_it_cannot_draw(mem: Notebook) -> None:
    with pytest.raises(InvalidInput, match="depth"):
        mem.subgraph("PostgreSQL", depth=4)
    with pytest.raises(NotFound):
        mem.subgraph("no-such-thing")


def test_supersedes_by_memory_and_by_entity(mem: Notebook) -> None:
    solid = slug_of(mem, SOLID)
    older = mem.get(solid).meta.supersedes[0]
    for chain in (mem.supersedes(older), mem.supersedes(entity="React")):
        assert chain[["newer", "older", "newer_title", "older_title"]].values.tolist() == [
            [solid, older, SOLID, REACT]
        ]
        assert str(chain.decided_at.dtype).startswith("datetime64")
    with pytest.raises(InvalidInput):
        mem.supersedes()


def test_the_supersede_report_and_trends_as_dataframes(mem: Notebook) -> None:
    """The demo's decisions were made by hand (no entity recorded): the report files the
    React → Solid one under React, the entity the older memory's title names."""
    solid = slug_of(mem, SOLID)
    report = mem.supersede_report_df(entity="React")
    assert report[["entity", "newer", "older_title", "decided_by"]].values.tolist() == [
        ["React", solid, REACT, "user"]
    ]
    assert isinstance(report.decided_at.dtype, pd.DatetimeTZDtype)
    whole = mem.supersede_report()
    assert "## React (library)" in whole.markdown()
    assert whole.decisions == len(mem.cypher("MATCH ()-[r:SUPERSEDES]->() RETURN r"))
    with pytest.raises(NotFound):
        mem.supersede_report(entity="no-such-entity")
    frames = mem.trends_df(366)
    expected = mem.trends(366)
    mentions = frames["mentions"]
    assert list(mentions.columns) == [series.name for series in expected.mentions]
    assert len(mentions) == 366
    assert isinstance(mentions.index, pd.DatetimeIndex)
    assert [int(mentions[c].sum()) for c in mentions.columns] == [
        sum(series.counts) for series in expected.mentions
    ]
    rising = frames["rising_entities"]
    assert rising.id.tolist() == [e.id for e in expected.rising_entities]
    assert frames["hot_recalls"].empty  # a notebook never counts recalls


def test_tables_for_browsing(mem: Notebook) -> None:
    entities = mem.entities(type="library", limit=5)
    assert set(entities.type) == {"library"}
    assert len(entities) == 5
    decisions = mem.memories(type=MemoryType.DECISION)
    assert set(decisions.type) == {"decision"}
    assert isinstance(decisions.created_at.dtype, pd.DatetimeTZDtype)
    assert mem.entity("React").entity.id == "entity:library:React"
    assert "predicate" in mem.neighbours("React").columns


def test_embedded_reads_write_nothing_and_hold_nothing(home_copy: Path) -> None:
    before = files_of(home_copy)
    with memoryd.connect(home_copy) as client:
        sample(client)
        with pytest.raises(PolicyDenied, match="write clause"):
            client.cypher("MATCH (e:Entity) SET e.context = 'x'")
        assert files_of(home_copy) == before
        # Between calls nothing is open: a writer gets the data dir at once.
        with open_service(load_settings(home_copy, lock_timeout_s=0.5)) as svc:
            assert svc.graph.count_memories() == 40
        assert client.cypher("MATCH (m:Memory) RETURN count(*) AS n").n.iloc[0] == 40


def test_read_only_service_refuses_writes_before_touching_anything(home_copy: Path) -> None:
    before = files_of(home_copy)
    settings = load_settings(home_copy)
    with open_service(settings, read_only=True) as svc:
        draft = MemoryDraft(type=MemoryType.FACT, title="t", body="b", scope_path=home_copy)
        with pytest.raises(PolicyDenied, match="read-only"):
            svc.record(draft)
        solid = svc.cypher("MATCH (m:Memory {title: $t}) RETURN m.slug", {"t": SOLID}).rows[0][0]
        with pytest.raises(PolicyDenied, match="read-only"):
            svc.archive(solid)
        with pytest.raises(PolicyDenied):
            svc.reindex()
        with pytest.raises(PolicyDenied):
            svc.drain_inbox()
        hits = svc.recall("React", k=3)  # track defaults to True: ignored when read-only
        assert hits.hits
    assert files_of(home_copy) == before
    assert not (home_copy / "memoryd.lock").exists()  # no data-dir lock was taken


def test_an_empty_home_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no memoryd data") as caught:
        memoryd.connect(tmp_path / "nothing").cypher("RETURN 1")
    assert "memoryd serve" in caught.value.hint
    assert not (tmp_path / "nothing").exists()


def test_a_graph_held_by_another_process_points_to_the_daemon(home_copy: Path) -> None:
    holder = textwrap.dedent(
        f"""
        import sys
        from memoryd.config import load_settings
        from memoryd.wiring import open_service
        with open_service(load_settings({str(home_copy)!r})):
            print("ready", flush=True)
            sys.stdin.read()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdin is not None
            assert process.stdout.readline().strip() == "ready"
            with pytest.raises(GraphLocked, match="another memoryd process") as caught:
                memoryd.connect(home_copy).cypher("RETURN 1")
            assert "memoryd serve" in caught.value.hint
            process.stdin.close()
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
    assert memoryd.connect(home_copy).cypher("RETURN 1 AS one").one.iloc[0] == 1


# -- through the daemon -------------------------------------------------------------------
def test_the_daemon_gives_the_same_answers_and_can_count(home_copy: Path) -> None:
    # The demo leaves its captured sessions queued for enrichment. A daemon's worker would
    # enrich them while the answers are compared, so run the rules here first: the daemon
    # then serves the data dir as the embedded read found it.
    with open_service(load_settings(home_copy)) as svc:
        assert svc.enrich_pending(use_llm=False) > 0
    with memoryd.connect(home_copy) as client:
        embedded = sample(client)
        with running(home_copy):
            assert client.mode == "daemon"
            assert "via daemon" in repr(client)
            assert sample(client) == embedded
            with pytest.raises(PolicyDenied, match="write clause"):
                client.cypher("MATCH (e:Entity) DETACH DELETE e")
            # the daemon may count: each hit it returned once
            hits = client.recall(REACT, k=3, track=True).hits
            counted = len(hits)
            assert counted >= 1
            query = "MATCH (m:Memory) RETURN sum(m.recall_count) AS n"
            deadline = time.monotonic() + 20  # the daemon counts on its writer, in batches
            while client.cypher(query).n.iloc[0] < counted and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.cypher(query).n.iloc[0] == counted
            # A rewrite from the file while the count is only in the graph (as the daemon's
            # enrichment and DURA scoring do in the background).
            with memoryd.open(home_copy) as api:
                api.update_keywords(hits[0].slug, tags=["storefront"])
        # the daemon is gone: the same client falls back to reading the data dir itself
        assert client.mode == "embedded"
        # Every count survives the edit and the stop (test_recall.py has the in-process case).
        assert client.cypher(query).n.iloc[0] == counted


def test_notebook_counts_from_zero_to_past_int64(mem: Notebook) -> None:
    """Issue 26 on the notebook surface: a huge limit reads what there is (it reached kuzu
    as a LIMIT it could not bind: a graph error); a negative one names the bounds."""
    everything = mem.memories(limit=10**6)
    assert len(mem.memories(limit=2**70)) == len(everything) > 0
    assert len(mem.entities(limit=2**70)) == len(mem.entities(limit=10**6)) > 0
    for read in (mem.memories, mem.entities):
        with pytest.raises(InvalidInput, match="limit and offset must be 0 or more"):
            read(limit=-1)
