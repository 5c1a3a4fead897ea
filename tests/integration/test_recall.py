"""Hybrid recall over real stores: entity traversal, supersedes, decay, tracking, explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.errors import InvalidInput, NotFound, PolicyDenied
from memoryd.models import DecayState, MemoryDraft
from memoryd.recall import RecallConfig
from memoryd.recall.config import DEFAULT_STAGES
from memoryd.service import MemoryService
from memoryd.wiring import open_service


def rec(svc: MemoryService, project: Path, title: str, body: str, **kw: object) -> str:
    draft = MemoryDraft.model_validate(
        {
            "type": kw.pop("type", "decision"),
            "title": title,
            "body": body,
            "scope_path": project,
            **kw,
        }
    )
    return svc.record(draft).slug


def test_extraction_fills_frontmatter(svc: MemoryService, project: Path) -> None:
    slug = rec(
        svc,
        project,
        "Switch to Solid",
        "We switched from React to Solid because the bundle was too big.",
    )
    meta = svc.get(slug).meta
    assert {"entity:library:React", "entity:library:Solid"} <= set(meta.observations)
    predicates = {(r.subject, r.predicate.value, r.object) for r in meta.relations}
    assert (None, "prefers", "entity:library:Solid") in predicates
    assert ("entity:library:Solid", "supersedes", "entity:library:React") in predicates


def test_entity_traversal_finds_memory_without_shared_words(
    svc: MemoryService, project: Path
) -> None:
    slug = rec(
        svc,
        project,
        "Database choice",
        "The orders service stores data in PostgreSQL.",
        type="fact",
    )
    rec(svc, project, "Unrelated", "We lint with ruff before every commit.", type="preference")
    result = svc.recall("postgres")  # an alias from the lexicon, not a word of the memory
    assert [h.slug for h in result.hits] == [slug]
    assert result.hits[0].stages == ["entity"]
    assert result.hits[0].paths == ["PostgreSQL → memory"]
    assert result.entities == ["entity:tool:PostgreSQL"]


def test_entity_stage_sees_a_memory_recorded_after_the_last_recall(
    svc: MemoryService, project: Path
) -> None:
    """The graph keeps each entity's mentions between recalls: a memory recorded since
    must show in the very next recall."""
    first = rec(svc, project, "Database choice", "The orders service stores data in PostgreSQL.")
    assert [h.slug for h in svc.recall("postgres", scope=project, track=False).hits] == [first]
    second = rec(svc, project, "Backups", "Nightly dumps of PostgreSQL go to the NAS.", type="fact")
    hits = svc.recall("postgres", scope=project, track=False).hits
    assert {h.slug for h in hits} == {first, second}
    assert all(h.stages == ["entity"] for h in hits)


def test_two_hop_relation(svc: MemoryService, project: Path) -> None:
    """The graph stage (opt-in: it changed no measured question) walks one relation more."""
    assert "graph" not in svc.recall_config.stages
    svc.recall_config = RecallConfig(stages=DEFAULT_STAGES | {"graph"})
    rec(svc, project, "Frontend switch", "We switched from React to Solid.", type="decision")
    signals = rec(svc, project, "Cart speed", "Solid signals make the cart fast.", type="fact")
    hits = svc.recall("react", scope=project).hits
    reached = next(h for h in hits if h.slug == signals)
    assert reached.stages == ["graph"]
    # Each path shows its relation's stored direction: Solid supersedes React.
    assert "React <-[supersedes]- Solid → memory" in reached.paths
    assert "React -[superseded_by]-> Solid → memory" in reached.paths


def test_superseded_memory_ranks_below_successor(svc: MemoryService, project: Path) -> None:
    old = rec(svc, project, "Use MySQL", "We store job metadata in MySQL.", type="preference")
    new = rec(
        svc,
        project,
        "Move to PostgreSQL",
        "Job metadata moves from MySQL to PostgreSQL for JSONB.",
        supersedes=[old],
    )
    hits = svc.recall("mysql job metadata", scope=project).hits
    order = [h.slug for h in hits]
    assert order.index(new) < order.index(old)
    assert hits[order.index(old)].superseded_by == new
    # the successor is pulled in even when only the old memory matches the words
    hits = svc.recall("mysql", scope=project).hits
    assert [h.slug for h in hits][:2] == [new, old]


def test_soft_forgotten_hidden_then_revived(svc: MemoryService, project: Path) -> None:
    slug = rec(svc, project, "Old session", "We debugged the flaky checkout test.", type="session")
    memory = svc.get(slug)
    memory.meta.decay_state = DecayState.SOFT_FORGOTTEN
    svc.vault.write(memory)
    svc.reindex()
    assert svc.recall("flaky checkout").hits == []
    revived = svc.recall("flaky checkout", include_forgotten=True).hits
    assert [h.slug for h in revived] == [slug]
    assert svc.graph.get_memory(slug).decay_state is DecayState.ALIVE  # type: ignore[union-attr]
    assert [h.slug for h in svc.recall("flaky checkout").hits] == [slug]


def test_recall_is_counted_and_saved_to_the_file(svc: MemoryService, project: Path) -> None:
    slug = rec(
        svc,
        project,
        "Cache TTL",
        "Redis cache entries expire after ten minutes.",
        type="fact",
        triggers=["redis"],
    )
    svc.recall("redis cache")
    svc.recall("redis ttl")
    assert svc.flush_recall_stats() == 1
    row = svc.graph.get_memory(slug)
    assert row is not None
    assert row.recall_count == 2
    assert row.last_recalled_at is not None
    assert svc.get(slug).meta.recall_count == 2
    stats = svc.governance.trigger_stats()
    assert [(s.trigger, s.hits) for s in stats] == [("redis", 2)]
    svc.recall("redis", track=False)
    assert svc.flush_recall_stats() == 0
    assert svc.graph.get_memory(slug).recall_count == 2  # type: ignore[union-attr]


def test_recalls_counted_before_an_edit_survive_it_and_a_restart(
    svc: MemoryService, project: Path, settings: Settings
) -> None:
    """The daemon counts recalls in the graph and writes the files later; an edit in between
    (enrichment, DURA scoring, a tag change) rewrites the memory from its file and must not
    put the file's older count back into the graph (seen as 2 of 3 counts after a stop)."""
    slug = rec(svc, project, "Cache TTL", "Redis cache entries expire after ten minutes.")
    svc.recall("redis cache")
    svc.flush_recall_counts()  # in the graph now, not yet in the file
    svc.recall("redis ttl")  # counted in memory only
    svc.update_keywords(slug, tags=["cache"])
    row = svc.graph.get_memory(slug)
    assert row is not None
    assert row.recall_count == 2
    assert svc.get(slug).meta.recall_count == 2  # the edit wrote them into the file
    svc.recall("redis expiry")
    svc.close()
    with open_service(settings) as again:
        assert again.graph.get_memory(slug).recall_count == 3  # type: ignore[union-attr]
        assert again.get(slug).meta.recall_count == 3


def test_reindex_reproduces_recall(svc: MemoryService, project: Path) -> None:
    old = rec(svc, project, "Use React", "The storefront uses React and Vite.", type="preference")
    rec(svc, project, "Switch to Solid", "We switched from React to Solid.", supersedes=[old])
    rec(svc, project, "部署", "我们决定采用 Kubernetes 部署 API。", type="decision")
    queries = ["react", "solid", "kubernetes", "部署"]
    before = [svc.recall(q, track=False).model_dump() for q in queries]
    graph_before = svc.graph.snapshot()
    svc.reindex()
    assert [svc.recall(q, track=False).model_dump() for q in queries] == before
    assert svc.graph.snapshot() == graph_before


def test_entity_alias_and_merge_survive_reindex(svc: MemoryService, project: Path) -> None:
    rec(svc, project, "Containers", "We run Docker locally.", type="fact")
    rec(svc, project, "CI containers", "CI builds images with Podman.", type="fact")
    entities = {e.name: e.id for e in svc.entities()}
    assert {"Docker", "Podman"} <= set(entities)
    svc.alias_entity("Docker", "moby")
    assert svc.resolve_entity("moby").id == entities["Docker"]
    merged = svc.merge_entities("Docker", "Podman")
    assert {"moby", "Podman"} <= set(merged.aliases)
    assert merged.mention_count == 2
    before = svc.graph.snapshot()["entities"]
    svc.reindex()
    assert svc.graph.snapshot()["entities"] == before
    assert svc.resolve_entity("podman").id == entities["Docker"]
    # a later memory naming the merged entity links to the survivor
    later = rec(svc, project, "Rootless", "Podman runs rootless here.", type="fact")
    assert entities["Podman"] not in svc.get(later).meta.observations
    with pytest.raises(NotFound):
        svc.resolve_entity("no such thing")
    with pytest.raises(InvalidInput, match="into itself"):
        svc.merge_entities("Docker", "moby")


def test_supersedes_chain_and_context(svc: MemoryService, project: Path) -> None:
    a = rec(svc, project, "Use React", "The storefront uses React.", type="preference")
    b = rec(svc, project, "Use Solid", "We moved from React to Solid.", supersedes=[a])
    c = rec(svc, project, "Use Svelte", "We moved from Solid to Svelte.", supersedes=[b])
    chain = svc.supersedes_chain(a)
    assert [(r.newer, r.older) for r in chain] == [(b, a), (c, b)]
    context = svc.entity_context("Solid")
    assert context.memories[0].slug == c
    assert b in context.superseded


def test_cli_recall_entity_graph(home: Path, project: Path) -> None:
    runner = CliRunner()
    args = ["--home", str(home)]
    result = runner.invoke(
        app,
        [
            "record",
            "--type",
            "decision",
            "--title",
            "Switch to Solid",
            "--body",
            "We switched from React to Solid.",
            "--scope",
            str(project),
            *args,
        ],
    )
    assert result.exit_code == 0, result.stderr
    out = runner.invoke(app, ["recall", "react", "--json", *args])
    data = json.loads(out.stdout)
    assert data["hits"][0]["title"] == "Switch to Solid"
    assert "entity" in data["hits"][0]["stages"]
    assert "React → memory" in data["hits"][0]["paths"]
    out = runner.invoke(app, ["recall", "react", "--explain", *args])
    assert "linked entities: entity:library:React" in out.stdout
    out = runner.invoke(app, ["entity", "show", "solid", "--json", *args])
    assert json.loads(out.stdout)["entity"]["id"] == "entity:library:Solid"
    out = runner.invoke(app, ["graph", "neighbors", "React", "--json", *args])
    assert ["entity:library:React", "supersedes", "entity:library:Solid"] in [
        r[:3] for r in json.loads(out.stdout)["rows"]
    ] or ["entity:library:Solid", "supersedes", "entity:library:React"] in [
        r[:3] for r in json.loads(out.stdout)["rows"]
    ]
    out = runner.invoke(app, ["graph", "query", "MATCH (m:Memory) RETURN m.title", "--json", *args])
    assert json.loads(out.stdout)["rows"] == [["Switch to Solid"]]
    out = runner.invoke(app, ["graph", "query", "MATCH (m:Memory) DETACH DELETE m", *args])
    assert out.exit_code == 5
    assert "read-only" in out.stderr
    out = runner.invoke(app, ["graph", "query", "RETURN $x", "--params", "[1]", *args])
    assert out.exit_code == 2


def test_write_cypher_is_refused_by_the_service(svc: MemoryService) -> None:
    with pytest.raises(PolicyDenied):
        svc.cypher("CREATE (m:Memory {slug: 'x'})")


def test_recall_finds_a_memory_by_its_triggers_and_tags(svc: MemoryService, project: Path) -> None:
    """Triggers and tags are the words a memory asked to be recalled by: a query naming one
    finds it even when its title and body never say the word, above memories that only
    share a common word, and an edit of them counts at once."""
    slug = rec(
        svc,
        project,
        "ALTER TYPE cannot run inside a transaction block",
        "Adding a value to a Postgres enum failed in CI: each Alembic revision runs in one"
        " transaction. Wrap the statement in op.get_context().autocommit_block().",
        type="warning",
        tags=["schema-change", "ci"],
        triggers=["enum migration", "add enum value"],
    )
    rec(
        svc,
        project,
        "Migrations run before the deploy",
        "The release job applies every pending migration, then restarts the web workers.",
        type="fact",
    )
    rec(
        svc,
        project,
        "Status values are plain strings",
        "Order status is a TEXT column with a check constraint, so a new value needs a migration.",
        type="decision",
    )
    hits = [h.slug for h in svc.recall("enum migration").hits]
    assert hits[0] == slug
    assert "enum" in svc.recall("enum migration").hits[0].matched_terms
    assert [h.slug for h in svc.recall("schema-change").hits] == [slug]

    svc.update_keywords(slug, tags=["flaky-deploy"])
    assert [h.slug for h in svc.recall("flaky deploy").hits][:1] == [slug]
    assert slug not in [h.slug for h in svc.recall("schema-change").hits]
