"""What counts as one turn of a conversation (`recall.conversation.is_turn`), at its limits:
the word count stops at the limit, and says the same as counting every word."""

from __future__ import annotations

import pytest

from memoryd.models import MemoryType
from memoryd.recall.conversation import TURN_MAX_LINES, TURN_MAX_WORDS, is_turn


@pytest.mark.parametrize("tail", ["", " ", "  \t", "\u3000"])
@pytest.mark.parametrize("extra", [-1, 0, 1, 2, 500])
def test_a_turn_has_at_most_the_limits_words(tail: str, extra: int) -> None:
    words = TURN_MAX_WORDS + extra
    body = " \t ".join(f"w{i}" for i in range(words)) + tail
    assert is_turn(MemoryType.SESSION, body) is (words <= TURN_MAX_WORDS)
    assert is_turn(MemoryType.SESSION, body) is (len(body.split()) <= TURN_MAX_WORDS)


def test_a_turn_is_a_session_memory_of_few_lines() -> None:
    assert is_turn(MemoryType.SESSION, "user: does Redis fit?")
    assert not is_turn(MemoryType.DECISION, "user: does Redis fit?")
    assert not is_turn(MemoryType.SESSION, "line\n" * TURN_MAX_LINES)
