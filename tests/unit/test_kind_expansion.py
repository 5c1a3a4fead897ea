"""Kind expansion only for a noun in a "what / which <kind>" frame, never a verb, never a word
whose first sense is not what a coding user means (issue 13: "What file holds the config?" →
cuddle, hug, nelson; "What server do we deploy to?" → bunny, waitress; tool → saw)."""

from __future__ import annotations

import pytest

from memoryd.extraction.pipeline import load_hyponyms
from memoryd.recall import asked_kind


@pytest.mark.parametrize(
    "query",
    [
        "What file holds the config?",
        "What server do we deploy to?",
        "What tool do we use for linting?",
        "Which server runs the nightly reindex?",
        "What shows the error in the logs?",
    ],
)
def test_coding_questions_ask_for_no_everyday_kind(query: str) -> None:
    assert asked_kind(query, load_hyponyms()) is None


def test_the_word_after_a_noun_is_its_verb_not_a_kind() -> None:
    kinds = {"hold": ("cuddle", "hug", "nelson"), "activity": ("hiking",)}
    assert asked_kind("What file holds the config?", kinds) is None
    assert asked_kind("What outdoor activities does Mel enjoy?", kinds) == "activity"


@pytest.mark.parametrize(
    ("query", "kind", "instance"),
    [
        ("What sports does John like?", "sport", "surfing"),
        ("Which board games has Nate played?", "board game", "chess"),
        ("What drinks does he order?", "drink", "milkshake"),
        ("What musical instruments does she play?", "musical instrument", "violin"),
    ],
)
def test_everyday_kinds_still_expand(query: str, kind: str, instance: str) -> None:
    kinds = load_hyponyms()
    assert asked_kind(query, kinds) == kind
    assert instance in kinds[kind]


def test_shipped_kinds_hold_no_verbs_and_no_software_words() -> None:
    kinds = load_hyponyms()
    for verb in ("hold", "show", "play", "run", "fly"):
        assert verb not in kinds, verb  # mostly a verb in WordNet's tagged uses
    for word in ("server", "tool", "file", "computer", "editor", "platform", "shell"):
        assert word not in kinds, word  # software in a coding session, not a waiter or a saw
    assert {"drink", "sport", "game", "store"} <= set(kinds)  # nouns with everyday instances
