"""`apply_extraction`: proposals into frontmatter, with entity merges followed."""

from __future__ import annotations

from datetime import UTC, datetime

from memoryd.extraction.apply import apply_extraction
from memoryd.models import (
    EntityType,
    Extraction,
    Frontmatter,
    Memory,
    MemoryType,
    Predicate,
    ProposedEntity,
    ProposedRelation,
)

KUZU = "entity:tool:Kuzu"
NEO = "entity:tool:Neo4j"
GRAPHDB = "entity:tool:GraphDB"


def _memory() -> Memory:
    meta = Frontmatter(
        title="Use Kuzu",
        slug="2026-12-05-use-kuzu",
        type=MemoryType.DECISION,
        scope_hash="0" * 12,
        source="test",
        created_at=datetime(2026, 12, 5, tzinfo=UTC),
    )
    return Memory(meta=meta, body="We use Kuzu, not Neo4j; Kuzu conflicts with Neo4j.")


def _found() -> Extraction:
    return Extraction(
        entities=[
            ProposedEntity(name="Kuzu", type=EntityType.TOOL, confidence=0.9),
            ProposedEntity(name="Neo4j", type=EntityType.TOOL, confidence=0.6),
        ],
        relations=[
            ProposedRelation(
                subject=KUZU, predicate=Predicate.CONFLICTS_WITH, object=NEO, confidence=0.7
            ),
            ProposedRelation(subject="memory", predicate=Predicate.MENTIONS, object=KUZU),
        ],
    )


def _applied(merged_into: dict[str, str] | None) -> tuple[list[str], list[tuple[object, ...]]]:
    memory = _memory()
    apply_extraction(memory, _found(), merged_into)
    relations: list[tuple[object, ...]] = [
        (r.subject, r.predicate, r.object, r.confidence) for r in memory.meta.relations
    ]
    return memory.meta.observations, relations


def test_merges_of_other_entities_change_nothing() -> None:
    plain = _applied(None)
    assert plain == (
        [KUZU],
        [(None, Predicate.MENTIONS, NEO, 0.6), (KUZU, Predicate.CONFLICTS_WITH, NEO, 0.7)],
    )
    assert _applied({}) == plain
    assert _applied({"entity:tool:Dgraph": GRAPHDB}) == plain


def test_an_entity_merged_away_is_written_as_the_one_it_was_merged_into() -> None:
    assert _applied({NEO: GRAPHDB}) == (
        [KUZU],
        [(None, Predicate.MENTIONS, GRAPHDB, 0.6), (KUZU, Predicate.CONFLICTS_WITH, GRAPHDB, 0.7)],
    )
    assert _applied({KUZU: GRAPHDB}) == (
        [GRAPHDB],
        [(None, Predicate.MENTIONS, NEO, 0.6), (GRAPHDB, Predicate.CONFLICTS_WITH, NEO, 0.7)],
    )
