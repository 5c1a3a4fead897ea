"""The offline extraction stage on conversational text: chat openers, dates and titles are not
people, and the shipped gazetteer finds places."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from memoryd.extraction.pipeline import (
    REGISTRY_SOURCES,
    Extractor,
    load_first_names,
    load_lexicon,
    load_places,
)
from memoryd.models import EntityType, Extraction


def names(result: Extraction) -> set[tuple[str, EntityType]]:
    return {(e.name, e.type) for e in result.entities}


# --- chat openers, dates and titles ------------------------------------------------------------

JUNK_PHRASES = [
    "Hey Caroline, it's been super busy here.",
    "Hey Mel! How are you?",
    "Yeah Mel, family's super important to me.",
    "Wow Mel, that looks great.",
    "Congrats Caroline! You did it.",
    "Bye Caroline, see you soon.",
    "Woohoo Melanie, well done!",
    "Hi Jon, thanks Gina and cheers Sam.",
    "Aww Melanie, Oh Caroline, Sure Nate, Thanks Joanna, Welcome Tim, Dear Audrey",
    "Last Fri I finally took my kids to a pottery workshop.",
    "See you Next Monday or on Sat Jan 5.",
    'I loved "Becoming Nicole" by a great author.',
    "Our group, 'Connected LGBTQ Activists', meets weekly.",
    "Is Pepper ok?",
]


@pytest.mark.parametrize("text", JUNK_PHRASES)
def test_chat_openers_dates_and_quoted_titles_are_not_people(
    extractor: Extractor, text: str
) -> None:
    """The greeted name alone is a person (a first name); the opener is never part of it."""
    first_names = load_first_names()
    for entity in extractor.extract(text).entities:
        assert entity.type is EntityType.PERSON
        assert entity.name in first_names, entity.name


def test_a_name_after_a_quoted_title_is_still_a_person(extractor: Extractor) -> None:
    result = extractor.extract('I loved "Becoming Nicole" by Amy Ellis Nutt.')
    assert names(result) == {("Amy Ellis Nutt", EntityType.PERSON)}


def test_a_two_word_name_after_a_greeting_keeps_its_surname(extractor: Extractor) -> None:
    result = extractor.extract("Hey Alice Chen, the review is done.")
    assert ("Alice Chen", EntityType.PERSON) in names(result)


def test_landmarks_are_places_by_shape(extractor: Extractor) -> None:
    result = extractor.extract("They enjoyed the Grand Canyon and the Pacific Northwest a lot!")
    assert names(result) == {
        ("Grand Canyon", EntityType.PLACE),
        ("Pacific Northwest", EntityType.PLACE),
    }


# --- the gazetteer -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We went to Rome and then Paris last summer", {"Rome", "Paris"}),
        ("my family took a road trip to Oregon", {"Oregon"}),
        ("I moved from Sweden 4 years ago", {"Sweden"}),
        ("She grew up in England and studied in Scotland.", {"England", "Scotland"}),
        (
            "We flew from the USA to the UK via NYC.",
            {"United States", "United Kingdom"} | {"New York City"},
        ),
        ("Is São Paulo bigger than Sao Paulo?", {"São Paulo"}),
        ("I lived in Jordan for a year.", {"Jordan"}),
    ],
)
def test_gazetteer_names_places(extractor: Extractor, text: str, expected: set[str]) -> None:
    result = extractor.extract(text)
    assert {e.name for e in result.entities} == expected
    assert all(e.type is EntityType.PLACE for e in result.entities)


@pytest.mark.parametrize(
    "text",
    [
        "Reading the docs",
        "Nice work",
        "The mobile app has a nice split view.",
        "I bought some china and a turkey.",
        "Jordan said the build is green.",
        "Paris Hilton was on TV.",
        "Boston Dynamics makes robots.",
    ],
)
def test_everyday_words_first_names_and_longer_names_are_not_places(
    extractor: Extractor, text: str
) -> None:
    result = extractor.extract(text)
    assert not [e for e in result.entities if e.type is EntityType.PLACE]


def test_coding_text_keeps_its_tools_and_gains_places(extractor: Extractor) -> None:
    result = extractor.extract("We moved the API from Heroku to Fly.io, hosted in Toronto.")
    assert names(result) == {
        ("Heroku", EntityType.TOOL),
        ("Fly.io", EntityType.TOOL),
        ("Toronto", EntityType.PLACE),
    }


def test_shipped_gazetteer_is_well_formed() -> None:
    places = load_places()
    kinds = {p.kind for p in places}
    assert kinds == {"country", "region", "city"}
    assert all(p.type is EntityType.PLACE for p in places)
    by_name = {p.name: p for p in places}
    assert by_name["United States"].kind == "country"
    assert {"USA", "US", "America"} <= set(by_name["United States"].aliases)
    assert {"UK", "Britain"} <= set(by_name["United Kingdom"].aliases)
    for nation in ("England", "Scotland", "Wales"):
        assert by_name[nation].kind == "country"
    assert by_name["Oregon"].kind == "region"
    assert by_name["Ontario"].kind == "region"
    assert by_name["Tokyo"].kind == "city"
    for capital in ("Canberra", "Ottawa", "Wellington", "Reykjavík", "Port Vila"):
        assert by_name[capital].kind == "city"
    assert "Reykjavik" in by_name["Reykjavík"].aliases
    assert "Jordan" in by_name["Jordan"].first_names
    for everyday in ("Reading", "Nice", "Mobile", "Bath", "Split", "Of"):
        assert everyday not in by_name
    surfaces: dict[str, str] = {}
    for entry in (*load_lexicon(), *places):
        for surface in (entry.name, *entry.aliases):
            assert surfaces.setdefault(surface.casefold(), entry.name) == entry.name, surface


def test_curated_lexicon_entries_carry_a_kind() -> None:
    chosen = [e for e in load_lexicon() if e.source not in REGISTRY_SOURCES]
    assert len(chosen) > 300
    assert all(e.kind for e in chosen)  # the curated list and the alias lexicon
    assert not any(e.kind for e in load_lexicon() if e.source in REGISTRY_SOURCES)
    data = resources.files("memoryd.extraction").joinpath("data", "lexicon.jsonl")
    first = json.loads(data.read_text(encoding="utf-8").splitlines()[0])
    assert list(first)[:3] == ["name", "type", "kind"]


def test_entries_carry_their_kind() -> None:
    kinds = {e.name: (e.type.value, e.kind) for e in (*load_lexicon(), *load_places()) if e.kind}
    assert kinds["Paris"] == ("place", "city")
    assert kinds["Oregon"] == ("place", "region")
    assert kinds["Sweden"] == ("place", "country")
    assert kinds["PostgreSQL"] == ("tool", "database")
    assert kinds["Python"] == ("tool", "language")
    assert kinds["FastAPI"] == ("library", "framework")
    assert kinds["AWS"] == ("tool", "cloud")
    assert kinds["Neovim"] == ("tool", "editor")
    assert "typing-extensions" not in kinds
