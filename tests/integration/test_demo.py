"""`memoryd demo`: the shipped demo vault loads through the real stores and its searches work."""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from memoryd.config import load_settings
from memoryd.demo import PROJECTS, load_demo_data, run_demo
from memoryd.errors import Conflict, InvalidInput
from memoryd.models import MemoryType

HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


def test_import_has_no_side_effects() -> None:
    code = (
        "import sys, memoryd.demo; "
        "heavy = ('memoryd.wiring', 'kuzu', 'tantivy', 'jieba'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
    assert result.stderr == ""


def test_demo_data_is_well_formed() -> None:
    data = load_demo_data()
    assert 36 <= len(data.memories) <= 44
    assert {m.type for m in data.memories} == set(MemoryType)
    assert {m.scope for m in data.memories} == set(PROJECTS)
    assert sum(bool(m.supersedes) for m in data.memories) >= 2
    assert {m.scope for m in data.memories if m.supersedes} == set(PROJECTS)
    ingest = [m for m in data.memories if m.scope == "ingest-pipeline"]
    chinese = [m for m in ingest if HAN.search(m.title + m.body)]
    assert len(chinese) >= len(ingest) // 3
    assert any(HAN.search(q.text) for q in data.queries)
    assert any(not HAN.search(q.text) for q in data.queries)


def test_bad_demo_data_names_the_entry() -> None:
    text = """
queries: [{text: x}]
memories:
  - {key: good, scope: webshop, type: fact, title: T, body: B,
     created_at: "2026-01-01T00:00:00Z", source: manual}
  - {key: broken-one, scope: webshop, type: rumour, title: T, body: B2,
     created_at: "2026-01-02T00:00:00Z", source: manual}
"""
    with pytest.raises(InvalidInput, match="broken-one"):
        load_demo_data(text)
    newer_first = """
queries: []
memories:
  - {key: old, scope: webshop, type: fact, title: T, body: B,
     created_at: "2026-02-01T00:00:00Z", source: manual}
  - {key: new, scope: webshop, type: decision, title: T2, body: B2,
     created_at: "2026-01-01T00:00:00Z", source: manual, supersedes: [old]}
"""
    with pytest.raises(InvalidInput, match="'new' supersedes 'old'"):
        load_demo_data(newer_first)


def test_run_demo_records_and_searches(tmp_path: Path) -> None:
    from memoryd.wiring import open_service

    home = tmp_path / "home"
    buffer = io.StringIO()
    report = run_demo(home, as_json=False, console=Console(file=buffer, width=200))
    data = load_demo_data()
    output = buffer.getvalue()

    assert report.recorded == len(data.memories)
    assert set(report.slugs) == {m.key for m in data.memories}
    assert str(home) in output
    assert "memoryd recall" in output
    assert "recall 'bundle size' in webshop" in output

    with open_service(load_settings(home)) as svc:
        rows = svc.list_memories(limit=1000)
        assert len(rows) == len(data.memories)
        assert {r.type for r in rows} == set(MemoryType)
        hash_of = {name: svc.scope_show(path).scope_hash for name, path in report.projects.items()}
        assert len(set(hash_of.values())) == len(PROJECTS)
        assert {r.scope_hash for r in rows} == set(hash_of.values())

        for memory in data.memories:
            if memory.supersedes:
                stored = svc.get(report.slugs[memory.key])
                assert stored.meta.supersedes == [report.slugs[k] for k in memory.supersedes]

    assert all(result.hits for result in report.queries), "every demo query should find something"
    for result in report.queries:
        if result.scope is not None:
            assert {hit.scope_hash for hit in result.hits} == {hash_of[result.scope]}
    chinese_hits = [
        hit for result in report.queries if HAN.search(result.text) for hit in result.hits
    ]
    assert any(HAN.search(hit.title) for hit in chinese_hits)


def test_the_demo_shows_the_product_at_its_best(tmp_path: Path) -> None:
    """Issue 29: the demo's dates end just before now (Trends has a week to show, the digest
    has no demo session fading), its supersede chains are the declared ones with no false
    candidate, each question's top hit is a memory that answers it, and a relevance column
    out of rank order says why."""
    from memoryd.demo import DEMO_SPAN
    from memoryd.models import RELEVANCE_NOTE
    from memoryd.wiring import open_service

    home = tmp_path / "home"
    before = datetime.now(UTC)
    buffer = io.StringIO()
    report = run_demo(home, as_json=False, console=Console(file=buffer, width=200))
    data = load_demo_data()
    key_of = {slug: key for key, slug in report.slugs.items()}
    for query, result in zip(data.queries, report.queries, strict=True):
        assert query.expect, query.text
        top = key_of[result.hits[0].slug]
        assert top in query.expect, (query.text, top, [key_of[h.slug] for h in result.hits])
        if any(a.score < b.score for a, b in itertools.pairwise(result.hits)):
            assert RELEVANCE_NOTE in " ".join(buffer.getvalue().split())
    with open_service(load_settings(home)) as svc:
        rows = svc.list_memories(limit=1000)
        created = [r.created_at for r in rows]
        assert min(created) >= before - DEMO_SPAN - timedelta(minutes=1)
        assert max(created) <= datetime.now(UTC)
        trends = svc.trends(7)
        assert trends.rising_entities, "the last week of the demo shows in Trends"
        assert svc.digest().fading == []
        assert svc.supersede_candidates() == []
        declared = {
            (report.slugs[m.key], report.slugs[old]) for m in data.memories for old in m.supersedes
        }
        chains = svc.cypher("MATCH (n:Memory)-[:SUPERSEDES]->(o:Memory) RETURN n.slug, o.slug").rows
        assert {(newer, older) for newer, older in chains} == declared


def test_demo_command_json_and_refuses_a_used_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.cli.main import app

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    home = Path(report["home"])
    assert home.parent == tmp_path
    assert home.name.startswith("memoryd-demo-")
    assert report["recorded"] == len(load_demo_data().memories)
    assert len(report["queries"]) == len(load_demo_data().queries)

    again = runner.invoke(app, ["demo", "--home", str(home)])
    assert again.exit_code == 4
    with pytest.raises(Conflict, match="already holds memories"):
        run_demo(home, as_json=True, console=Console(file=io.StringIO()))


def test_reindex_of_the_demo_vault_changes_nothing(tmp_path: Path) -> None:
    """`memoryd reindex` rebuilds from the vault alone: graph, search and recall stay identical."""
    from memoryd.wiring import open_service

    home = tmp_path / "home"
    report = run_demo(home, as_json=False, console=Console(file=io.StringIO()))
    data = load_demo_data()
    queries = [(q.text, report.projects[q.scope] if q.scope else None) for q in data.queries]
    queries += [("React", None), ("PostgreSQL", None), ("部署", None)]
    with open_service(load_settings(home)) as svc:
        graph = svc.graph.snapshot()
        assert graph["entities"]
        assert graph["supersedes"]
        search = [svc.search(text, scope=scope, k=10) for text, scope in queries]
        recall = [svc.recall(text, scope=scope, k=10, track=False) for text, scope in queries]
        report_ = svc.reindex()
        assert report_.indexed == len(data.memories)
        assert report_.skipped == []
        assert svc.graph.snapshot() == graph
        assert [svc.search(text, scope=scope, k=10) for text, scope in queries] == search
        assert [
            svc.recall(text, scope=scope, k=10, track=False) for text, scope in queries
        ] == recall
        assert svc.consistency() == (set(), set(), set())
