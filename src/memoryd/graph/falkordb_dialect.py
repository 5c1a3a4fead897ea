"""memoryd's own Cypher, written in Kuzu's dialect, as FalkorDB reads it.

memoryd writes each statement once (`cypher_reads`, `cypher_store`, the governance jobs) and
FalkorDB runs it translated: no `CAST` (a typed value is its own type; a timestamp is a
`localdatetime`), `lower` is `toLower`, a node's label is `labels(n)[0]`, a substring's
start counts from 0, `to_days(n)` is `duration({days: n})`, a DATE is built from its parts,
`EXISTS { MATCH … }` is a pattern predicate, and a datetime
parameter travels as ISO text (the client sends parameters as query text and has no datetime
literal) that the statement turns back into a `localdatetime`. Lists and substrings that start
at 1 in Kuzu are the stores' `FIRST`, not a translation. Users' Cypher is never translated.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

FALKOR_MARKER = "falkordb.json"
"""The file in a graph directory naming the FalkorDB key that holds its graph."""
FALKOR_DIR = "falkordb"
"""The local server's directory in a data dir (`memoryd setup falkordb`)."""
FALKOR_SOCKET = "falkordb.sock"

_CAST = re.compile(
    r"\bCAST\(\s*((?:[^()]|\([^()]*\))+?)\s+AS\s+([A-Za-z0-9_]+(?:\[\])?)\s*\)", re.IGNORECASE
)
_LOWER = re.compile(r"(?<![\w.])lower\(", re.IGNORECASE)
_LABEL = re.compile(r"(?<![\w.])label\((\w+)\)")
_SUBSTRING = re.compile(r"(?<![\w.])substring\(([^,()]+),\s*(\d+)\s*,", re.IGNORECASE)
_EXISTS = re.compile(r"\bEXISTS\s*\{\s*MATCH\s+([^{}]+?)\s*\}", re.IGNORECASE)
_REGEXP = re.compile(r"(?<![\w.])regexp_matches\([^()]*\)", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def translate(statement: str) -> str:
    """`statement` (memoryd's, in Kuzu's dialect) in FalkorDB's."""
    out = _CAST.sub(_cast, statement)
    out = _call(out, "to_days", lambda days: f"duration({{days: {days}}})")
    out = _LOWER.sub("toLower(", out)
    out = _SUBSTRING.sub(lambda m: f"substring({m[1]}, {int(m[2]) - 1},", out)
    out = _EXISTS.sub(_exists, out)
    # No regular expressions in FalkorDB: the filter keeps every row. memoryd uses one only
    # to narrow what it then matches again in Python (`domain.superseding._speakers`).
    out = _REGEXP.sub("true", out)
    return _LABEL.sub(r"labels(\1)[0]", out)


def _cast(match: re.Match[str]) -> str:
    value, kind = match[1], match[2].upper()
    if kind == "TIMESTAMP":
        return f"localdatetime({value})"
    if kind == "DATE":
        return f"date({{year: ({value}).year, month: ({value}).month, day: ({value}).day}})"
    return f"({value})"


def _call(text: str, name: str, rewrite: Callable[[str], str]) -> str:
    """`text` with each call `name(args)` (args may nest parentheses) as `rewrite(args)`."""
    pattern = re.compile(rf"(?<![\w.]){name}\(", re.IGNORECASE)
    while match := pattern.search(text):
        depth, end = 1, match.end()
        while depth and end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        text = text[: match.start()] + rewrite(text[match.end() : end - 1]) + text[end:]
    return text


def _exists(match: re.Match[str]) -> str:
    """`EXISTS { MATCH p }` as the pattern predicate `p`; with a WHERE, as the size of a
    pattern comprehension (FalkorDB cannot always resolve a comprehension's aliases
    beside another one, so the plain predicate is used where it can be)."""
    pattern = match[1]
    if re.search(r"\bWHERE\b", pattern, re.IGNORECASE):
        return f"size([{pattern} | 1]) > 0"
    return pattern


def text_time(value: datetime) -> str:
    """A datetime as the ISO text FalkorDB's `localdatetime()` reads (UTC, no zone)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat()


def _as_text(value: Any) -> Any:
    if isinstance(value, datetime):
        return text_time(value)
    if isinstance(value, Mapping):
        return {k: _as_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_text(v) for v in value]
    return value


def bind(statement: str, params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The statement and parameters FalkorDB is sent: every datetime as ISO text, and each
    top-level datetime parameter read back as `localdatetime($name)` where it is used (one
    inside rows is read back by the statement's own CAST)."""
    if not params:
        return statement, {}
    for name, value in params.items():
        if isinstance(value, datetime):
            statement = re.sub(
                rf"(?<!localdatetime\()\${re.escape(name)}\b", f"localdatetime(${name})", statement
            )
    return statement, {name: _as_text(value) for name, value in params.items()}
