"""JSON from a user, parsed with its nesting bounded.

`json.loads` recurses once per nested array or object: a 200,000-deep file raises
`RecursionError` (a traceback, not an error a surface can translate), and one just under the
interpreter's limit still breaks whatever walks the tree afterwards. Every JSON input memoryd
takes from a user (`sync import`, `import mcp-memory`, a key export, an HTTP body) is checked
first: brackets are counted outside strings, at C speed, before any parse.
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
"""The deepest nesting accepted. memoryd's own files nest 5 deep, mcp-memory-service's
metadata a few more; 64 leaves room for hand-made metadata and stays far from the
interpreter's recursion limit."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_ALL = bytes(range(256))
_NOT_BRACKETS = bytes(b for b in _ALL if b not in b"[]{}")
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class TooDeep(ValueError):
    """JSON nested deeper than the limit; `depth` is where the count stopped."""

    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"nested deeper than {limit} levels (the limit for JSON input)")
        self.depth = depth
        self.limit = limit


def check_depth(raw: bytes | str, limit: int = MAX_DEPTH) -> None:
    """Raise `TooDeep` when `raw` nests arrays and objects more than `limit` deep."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= limit:
        return  # cannot be deeper than it has brackets
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return
    deepest = max(accumulate(array("b", brackets.translate(_SIGNS))))
    if deepest > limit:
        raise TooDeep(deepest, limit)


def loads(raw: bytes | str, limit: int = MAX_DEPTH) -> Any:
    """`json.loads` after `check_depth`: `TooDeep` (a `ValueError`) instead of a recursion."""
    check_depth(raw, limit)
    return json.loads(raw)
