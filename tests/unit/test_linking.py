"""Entity linking: the normalised merge key, and mapping proposals onto known entities."""

from __future__ import annotations

import pytest

from memoryd.extraction.linking import (
    LINKED_MIN_CONFIDENCE,
    KnownEntity,
    KnownIndex,
    link,
    normalise_name,
)
from memoryd.models import EntityType, ProposedEntity


def proposal(
    name: str,
    etype: EntityType = EntityType.LIBRARY,
    confidence: float = 0.9,
    spans: list[tuple[int, int]] | None = None,
    aliases: list[str] | None = None,
) -> ProposedEntity:
    return ProposedEntity(
        name=name,
        type=etype,
        confidence=confidence,
        spans=spans or [],
        aliases=aliases or [],
        stage="lexicon",
    )


POSTGRES = KnownEntity(
    id="entity:tool:PostgreSQL", name="PostgreSQL", type=EntityType.TOOL, aliases=["Postgres"]
)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("FastAPI", "fastapi"),
        ("FastAPI", "FastAPIs"),
        ("FastAPI", "Fast-API"),
        ("FastAPI", "fast api"),
        ("FastAPI", "ＦａｓｔＡＰＩ"),  # full-width, as an IME types it
        ("Node.js", "NodeJS"),
        ("VS Code", "vscode"),
        ("@alice", "alice"),
        ("libraries", "library"),
        ("記憶引擎", "记忆引擎"),
        ("GitHub Actions", "github action"),
    ],
)
def test_normalise_name_merges_spellings(left: str, right: str) -> None:
    assert normalise_name(left) == normalise_name(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("C++", "C"),
        ("C#", "C"),
        ("Go", "Gos"),  # plural stripping needs 4+ letters
        ("React", "Preact"),
    ],
)
def test_normalise_name_keeps_different_names_apart(left: str, right: str) -> None:
    assert normalise_name(left) != normalise_name(right)


@pytest.mark.parametrize("word", ["class", "Redis", "status", "analysis", "bus", "uvs"])
def test_singular_leaves_non_plurals_alone(word: str) -> None:
    assert normalise_name(word) == word.lower()


def test_duplicate_spellings_in_one_text_merge_into_one_entity() -> None:
    merged = link(
        [
            proposal("FastAPIs", spans=[(0, 8)]),
            proposal("fastapi", confidence=0.85, spans=[(20, 27)]),
            proposal("FastAPI", spans=[(40, 47)]),
        ],
        [],
    )
    assert len(merged) == 1
    entity = merged[0]
    assert entity.name == "FastAPI"
    assert entity.confidence == 0.9
    assert set(entity.aliases) == {"FastAPIs", "fastapi"}
    assert entity.spans == [(0, 8), (20, 27), (40, 47)]


def test_traditional_and_simplified_chinese_merge() -> None:
    merged = link(
        [
            proposal("記憶引擎", EntityType.CONCEPT, 0.7, [(0, 4)]),
            proposal("记忆引擎", EntityType.CONCEPT, 0.7, [(10, 14)]),
        ],
        [],
    )
    assert [e.name for e in merged] == ["記憶引擎"]
    assert merged[0].aliases == ["记忆引擎"]
    assert merged[0].spans == [(0, 4), (10, 14)]


def test_alias_links_to_known_entity_and_keeps_surface_as_alias() -> None:
    [entity] = link([proposal("Postgres", EntityType.TOOL, 0.6, [(3, 11)])], [POSTGRES])
    assert entity.id == POSTGRES.id
    assert entity.name == "PostgreSQL"
    assert entity.aliases == ["Postgres"]
    assert entity.confidence == LINKED_MIN_CONFIDENCE
    assert entity.spans == [(3, 11)]


def test_known_type_wins_over_proposed_type() -> None:
    known = KnownEntity(id="entity:library:Kuzu", name="Kuzu", type=EntityType.LIBRARY)
    [entity] = link([proposal("kuzu", EntityType.TOOL)], [known])
    assert entity.id == "entity:library:Kuzu"
    assert entity.aliases == ["kuzu"]


def test_link_by_id_keeps_known_name() -> None:
    [entity] = link([proposal("PostgreSQL", EntityType.TOOL)], [POSTGRES])
    assert entity.id == POSTGRES.id
    assert entity.aliases == []


def test_ambiguous_name_across_types_is_not_linked() -> None:
    known = [
        KnownEntity(id="entity:person:Mercury", name="Mercury", type=EntityType.PERSON),
        KnownEntity(id="entity:place:Mercury", name="Mercury", type=EntityType.PLACE),
    ]
    [entity] = link([proposal("mercury", EntityType.CONCEPT, 0.4)], known)
    assert entity.id == "entity:concept:mercury"
    assert entity.confidence == 0.4


def test_same_type_match_is_preferred_when_names_collide() -> None:
    known = [
        KnownEntity(id="entity:person:Mercury", name="Mercury", type=EntityType.PERSON),
        KnownEntity(id="entity:place:Mercury", name="Mercury", type=EntityType.PLACE),
    ]
    [entity] = link([proposal("mercury", EntityType.PLACE, 0.5)], known)
    assert entity.id == "entity:place:Mercury"


def test_unlinked_spelling_joins_the_linked_entity() -> None:
    merged = link(
        [
            proposal("Postgres", EntityType.TOOL, 0.95, [(0, 8)]),
            proposal("postgres", EntityType.CONCEPT, 0.4, [(30, 38)]),
        ],
        [POSTGRES],
    )
    assert [e.id for e in merged] == [POSTGRES.id]
    assert merged[0].spans == [(0, 8), (30, 38)]
    assert "PostgreSQL" not in merged[0].aliases


def test_unlinked_duplicates_take_the_most_confident_type() -> None:
    merged = link(
        [
            proposal("kuzu", EntityType.CONCEPT, 0.4, [(0, 4)]),
            proposal("Kuzu", EntityType.TOOL, 0.9, [(10, 14)]),
        ],
        [],
    )
    assert [e.id for e in merged] == ["entity:tool:Kuzu"]


def test_order_of_first_appearance_is_kept() -> None:
    merged = link(
        [proposal("React", spans=[(0, 5)]), proposal("Solid"), proposal("react", spans=[(9, 14)])],
        [],
    )
    assert [e.name for e in merged] == ["React", "Solid"]


def test_known_entities_with_chinese_aliases_link() -> None:
    known = KnownEntity(
        id="entity:project:memoryd",
        name="memoryd",
        type=EntityType.PROJECT,
        aliases=["記憶引擎"],
    )
    [entity] = link([proposal("记忆引擎", EntityType.CONCEPT, 0.7)], [known])
    assert entity.id == "entity:project:memoryd"
    assert entity.aliases == ["记忆引擎"]


def test_a_shared_key_links_to_the_same_known_entity_whatever_order_the_index_grew_in() -> None:
    """Two known tools share a merge key ("VS Code" and an alias "VSCode" of another): a
    proposal links to the one named so, whether the index was built at once or grown, and
    whatever order the graph listed them in."""
    editor = KnownEntity(id="entity:tool:VS Code", name="VS Code", type=EntityType.TOOL)
    fork = KnownEntity(
        id="entity:tool:VSCodium", name="VSCodium", type=EntityType.TOOL, aliases=["VSCode"]
    )
    proposal = ProposedEntity(name="vscode", type=EntityType.TOOL, confidence=0.4)
    grown = KnownIndex([fork])
    grown.add([editor])
    found = [
        index.find(proposal)
        for index in (KnownIndex([editor, fork]), KnownIndex([fork, editor]), grown)
    ]
    assert found == [editor, editor, editor]


def test_link_builds_new_entities_and_leaves_its_proposals_as_they_were() -> None:
    """Linking works on its own records and builds each merged entity once: the caller's
    proposals keep their names, aliases and spans, and every field of the result is set."""
    given = [
        proposal("postgres", EntityType.TOOL, 0.6, spans=[(10, 18)], aliases=["pg"]),
        proposal("Postgres", EntityType.TOOL, 0.7, spans=[(0, 8)]),
        proposal("Vite", spans=[(30, 34)]),
    ]
    before = [p.model_dump() for p in given]
    linked = link(given, [POSTGRES])
    assert [p.model_dump() for p in given] == before
    pg, vite = linked
    assert (pg.id, pg.aliases, pg.spans) == (
        "entity:tool:PostgreSQL",
        ["pg", "postgres", "Postgres"],
        [(0, 8), (10, 18)],
    )
    assert pg.confidence == LINKED_MIN_CONFIDENCE
    assert pg.model_fields_set == set(ProposedEntity.model_fields)
    assert vite.model_dump() == {**given[2].model_dump(), "spans": [(30, 34)]}
    assert all(e is not p for e in linked for p in given)
