"""Lone first names from the shipped list (`data/first_names.txt`) are weak people; everyday
words, sentence-initial verbs, speaker labels, code and tech words are not."""

from __future__ import annotations

import pytest

from memoryd.extraction import patterns
from memoryd.extraction.linking import KnownEntity
from memoryd.extraction.pipeline import (
    Extractor,
    load_everyday_nouns,
    load_first_names,
    load_lexicon,
    load_places,
)
from memoryd.extraction.wordlists import load_common_words
from memoryd.models import EntityType, Extraction


def people(result: Extraction) -> set[str]:
    return {e.name for e in result.entities if e.type is EntityType.PERSON}


# --- the shipped list --------------------------------------------------------------------------


def test_shipped_first_names_are_common_names_without_everyday_words() -> None:
    names = load_first_names()
    assert 2_500 <= len(names) <= 4_000
    assert all(n[:1].isupper() and n[1:].islower() and n.isalpha() for n in names)
    assert {"Alice", "Kyle", "Caroline", "Melanie", "Maria", "John", "Sam", "Mel", "Deb"} <= names
    # kept: the census explains their frequency, and a capital mid-sentence means the name
    assert {"Mark", "Rose", "Jack", "Frank"} <= names
    # everyday words, dates, openers and a hand-checked denylist
    for word in ("Will", "May", "Bill", "Grant", "Hope", "Faith", "Joy", "Rob", "Summer"):
        assert word not in names, word
    for word in ("June", "April", "August", "Christian", "Miles", "Julia", "Hugo", "Travis"):
        assert word not in names, word


def test_first_names_leave_lexicon_and_place_names_alone() -> None:
    names = {n.casefold() for n in load_first_names()}
    for entry in (*load_lexicon(), *load_places()):
        for surface in (entry.name, *entry.aliases):
            assert surface.casefold() not in names, surface
    for place in ("Jordan", "Austin", "Paris", "Georgia", "Victoria"):
        assert place.casefold() not in names


# --- in text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ask Alice about the migration", {"Alice"}),
        ("my son Kyle turned one", {"Kyle"}),
        ("Ask Alice about the migration.", {"Alice"}),
        ("The tests pass. Later Kyle fixed the flaky one.", {"Kyle"}),
        ("Mark, can you review the PR?", {"Mark"}),
        ("Mark's PR is merged.", {"Mark"}),
        ("Kyle fixed it. I thanked Kyle.", {"Kyle"}),
        ('She said "Kyle, come here".', {"Kyle"}),
        ("I loved the book by Amy Ellis Nutt.", {"Amy Ellis Nutt"}),
    ],
)
def test_first_names_are_people(extractor: Extractor, text: str, expected: set[str]) -> None:
    result = extractor.extract(text)
    assert people(result) == expected
    lone = [e for e in result.entities if e.name in load_first_names()]
    assert all(e.confidence == patterns.FIRST_NAME_CONFIDENCE for e in lone)


@pytest.mark.parametrize(
    "text",
    [
        "I will review it",
        "Grant access to the bucket",
        "May I ask a question?",
        "Mark the task as done.",
        "Will you merge it?",
        "Rose petals everywhere.",
        "Kyle went home.",  # an opener with no comma, no 's and no other mention
        "Add a WidgetFactory and a KyleHandler to the JavaScript code.",
        "Call Kyle.run() and foo.Kyle, then `Mark` and self.Maria",
        "Open src/Kyle/app.py and https://example.com/Alice",
        "```\nMark = 1\nprint(Alice)\n```",
        "# Alice\nThe heading is not a mention.",
        'I loved "Becoming Nicole" by a great author.',
        "We use Julia, Hugo and Travis in CI.",
        "I lived in Jordan for a year.",
        "Jordan said the build is green.",
        # addressing someone is no mention of them
        "Hey Caroline, it's been super busy here.",
        "Hi Jon, thanks Gina and cheers Sam.",
        "Thanks, Mel! That's great, John.",
    ],
)
def test_everyday_words_openers_code_and_tech_words_are_not_people(
    extractor: Extractor, text: str
) -> None:
    assert people(extractor.extract(text)) == set()


def test_a_speaker_label_is_not_a_mention(extractor: Extractor) -> None:
    result = extractor.extract("Maria: Hope you're well! I met Mel today.")
    assert people(result) == {"Mel"}
    body = "Caroline: I went to the support group yesterday."
    assert people(extractor.extract(body, title="Caroline (D1:3)")) == set()


def test_a_first_name_inside_a_longer_name_is_not_taken_alone(extractor: Extractor) -> None:
    result = extractor.extract("I met Kyle Simpson and Alice Chen at the conference.")
    assert people(result) == {"Kyle Simpson", "Alice Chen"}


def test_scan_first_names_directly() -> None:
    text = "ping Alice, then Bob Smith. Mark the PR."
    hits = patterns.scan_first_names(
        text,
        frozenset({"Alice", "Bob", "Mark"}),
        patterns.split_sentences(text),
        common_words=load_common_words(),
    )
    assert [(h.name, h.kind, h.type) for h in hits] == [("Alice", "first-name", EntityType.PERSON)]


def test_a_known_person_is_not_found_in_a_speaker_label(extractor: Extractor) -> None:
    known = [KnownEntity(id="entity:person:Maria", name="Maria", type=EntityType.PERSON)]
    result = extractor.extract("Maria: I met Mel today.", known=known)
    assert people(result) == {"Mel"}
    result = extractor.extract("I met Maria today.", known=known)
    assert "Maria" in people(result)


# --- capitalised phrases -----------------------------------------------------------------------


def test_shipped_everyday_nouns_are_lower_case_wordnet_nouns() -> None:
    nouns = load_everyday_nouns()
    assert 30_000 <= len(nouns) <= 60_000
    assert all(n.isalpha() and n.islower() and len(n) >= 3 for n in nouns)
    assert {"shepherd", "pie", "analyst", "parade", "potter", "cook"} <= nouns
    # surnames are proper nouns in WordNet, so they are not on the list
    assert not {"jones", "chen", "nguyen", "torvalds"} & nouns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a phrase ending in an everyday noun is no person...
        ("We got a German Shepherd puppy last week.", set()),
        ("I made Chicken Pot Pie for dinner.", set()),
        ("She works as a Financial Analyst at the bank.", set()),
        ("I went to the Pride Parade last week.", set()),
        # ...unless a first name opens it
        ("My favorite is Harry Potter.", {"Harry Potter"}),
        ("I heard Tim Cook speak.", {"Tim Cook"}),
        ("I went to the Pride Parade with Sarah Jones.", {"Sarah Jones"}),
        # a surname that is no English word makes a person without a known first name
        ("I emailed Wei Zhang and Alice Chen.", {"Wei Zhang", "Alice Chen"}),
        # a word capitalised only because it opens the sentence is not part of the name...
        ("Ask Linus Torvalds about it.", {"Linus Torvalds"}),
        ("Thanks. Meet Wei Zhang tomorrow.", {"Wei Zhang"}),
        # ...but a two-word name keeps its first word, and a place stays whole
        ("Grant Hughes said hi.", {"Grant Hughes"}),
        ("Golden Gate Park is nice.", set()),
    ],
)
def test_capitalised_phrases_are_people_by_first_name_or_surname(
    extractor: Extractor, text: str, expected: set[str]
) -> None:
    assert people(extractor.extract(text)) == expected
