"""The files shipped in `extraction/data/` and the everyday-words list that the extraction
pipeline and entity linking (`linking.query_name_grams`) both read."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any


def data_file(name: str) -> Any:
    return resources.files("memoryd.extraction").joinpath("data", name)


@cache
def load_common_words() -> frozenset[str]:
    """Everyday English words; shape-based guesses made of them are not entities."""
    text = data_file("common_words.txt").read_text(encoding="utf-8")
    return frozenset(word.strip() for word in text.splitlines() if word.strip())


@cache
def load_common_words_ranked() -> dict[str, int]:
    """`load_common_words` with each word's frequency rank (0 is the commonest)."""
    text = data_file("common_words.txt").read_text(encoding="utf-8")
    words = [word.strip() for word in text.splitlines() if word.strip()]
    return {word: rank for rank, word in reversed(list(enumerate(words)))}
