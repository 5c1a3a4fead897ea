"""JSON input is parsed with its nesting bounded: brackets inside strings do not count, and
nothing deeper than the limit reaches `json.loads` (which would raise `RecursionError`)."""

from __future__ import annotations

import json

import pytest

from memoryd import jsondepth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("[" * 65 + "]" * 65, 65),
        ('{"a":' * 70 + "1" + "}" * 70, 70),
        ("[" * 200_000 + "]" * 200_000, 200_000),
        ("[" * 200_000, 200_000),  # unclosed: still refused by depth, never parsed
    ],
)
def test_deeper_than_the_limit_is_refused_with_the_depth(text: str, depth: int) -> None:
    with pytest.raises(jsondepth.TooDeep) as caught:
        jsondepth.loads(text)
    assert caught.value.depth == depth
    assert "deeper than 64 levels" in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 64 + "]" * 64,
        '["' + "[" * 1000 + '"]',  # brackets in a string
        '["\\"' + "{" * 1000 + '"]',  # after an escaped quote, still in the string
        "[" + '{"a": [1, 2]}, ' * 500 + "0]",  # many brackets, shallow
    ],
)
def test_within_the_limit_parses(text: str) -> None:
    assert jsondepth.loads(text) == json.loads(text)
