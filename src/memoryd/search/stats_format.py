"""The bytes of one scope's saved statistics (`stats_file`): format 3, binary sections a
first recall reads without decoding one entry, then the entries (one JSON row each, with its
CRC-32); and format 2 (everything but the entries in one JSON header), still read so that a
home saved before format 3 loads once and is saved again."""

from __future__ import annotations

import itertools
import mmap
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from memoryd.models import DecayState, MemoryType
from memoryd.search.stats import Counts, Entry, Held, SavedRows, Turn

FORMAT = 3
_TYPES = {t.value: t for t in MemoryType}
_STATES = {s.value: s for s in DecayState}
MAGIC = b"memoryd scope statistics 3\n"
MAGIC_V2 = b"memoryd scope statistics 2\n"
"""A file of format 2 (all it holds in a JSON header) is still read, and saved again as 3 by
the first process that loads it (`IndexTallies._tallied`)."""
HEAD = struct.Struct(">QIQ")
"""The header's length, a CRC-32, and the opstamp (also in the header: this copy lets a writer
check a chain without reading the file). Format 3: the CRC covers the header and the
sections; each entry has its own, checked when it is decoded. Format 2: it covers the whole."""
_SECTIONS = (
    ("visible_tokens", "s"),
    ("visible_token_ends", "I"),
    ("visible_df", "q"),
    ("hidden_tokens", "s"),
    ("hidden_token_ends", "I"),
    ("hidden_df", "q"),
    ("slugs", "s"),
    ("slug_ends", "I"),
    ("keys", "Q"),
    ("row_ends", "Q"),
    ("row_crcs", "I"),
    ("turn_rows", "I"),
    ("turn_at", "q"),
    ("turn_hidden", "B"),
    ("turn_lengths", "I"),
    ("turn_texts", "s"),
    ("turn_text_ends", "I"),
)
"""Format 3's sections after its header, in this order (their sizes are in the header): the
document frequencies as a token table (UTF-8 text, each token's end in characters) and the
counts; the entries' slugs, keys, ends and CRC-32s; and the session memories the turn lines
need (their row, time in microseconds, hidden flag, body length, text). The entries (one JSON
row each, as format 2 had them) follow, decoded one at a time when asked."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _raw(rows: SavedRows | None, key: int) -> bytes:
    if rows is None:
        raise LookupError("an entry still saved, and no saved entries")
    return rows.raw(key)


def fields_of(e: Entry) -> list[Any]:
    return [
        e.type.value,
        e.hidden,
        e.at.isoformat(),
        e.title,
        e.body,
        e.text,
        e.written_title,
        e.state.value,
        e.tags,
        e.triggers,
    ]


def _encode(e: Entry) -> bytes:
    return orjson.dumps(fields_of(e))


def entry_from(scope: str, slug: str, key: int, row: list[Any]) -> Entry:
    kind, hid, at, title, body, text, written, state, tags, triggers = row
    return Entry(
        slug,
        scope,
        _TYPES[kind],
        bool(hid),
        datetime.fromisoformat(at),
        tuple(title),
        tuple(body),
        text,
        key,
        written,
        _STATES[state],
        tuple(tags),
        tuple(triggers),
    )


def read_file(path: Path) -> memoryview:
    """A scope file, mapped (a load reads its header and sections, and only the entries it
    decodes); read whole where it cannot be mapped (an empty file)."""
    with path.open("rb") as handle:
        try:
            return memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        except (ValueError, OSError):
            return memoryview(handle.read())


def _strings(text: bytes | memoryview, ends: Sequence[int]) -> list[str]:
    """The strings of a table (`_table`): its text cut at each end (in characters)."""
    whole = str(text, "utf-8")
    if (ends[-1] if ends else 0) != len(whole):
        raise ValueError("a string table that does not match its ends")
    return list(map(whole.__getitem__, map(slice, itertools.chain((0,), ends), ends)))


def _table(strings: Sequence[str]) -> tuple[bytes, bytes]:
    """Strings as one UTF-8 text and each one's end in it, in characters (`_strings`)."""
    ends = array("I", itertools.accumulate(map(len, strings)))
    return "".join(strings).encode("utf-8"), ends.tobytes()


def encode_file(
    names: tuple[str, str, str, int],
    visible: Counts,
    hidden: Counts,
    entries: list[tuple[int, Entry | str]],
    rows: SavedRows | None,
) -> tuple[bytes, SavedRows]:
    """A scope file of format 3 (`_SECTIONS`), and its entries as a load would find them;
    `names`: the index, the analysis, the scope and the opstamp."""
    index, analysis, scope, opstamp = names
    encoded = [
        _encode(held) if isinstance(held, Entry) else _raw(rows, key) for key, held in entries
    ]
    turns: list[tuple[int, Turn]] = []
    for row, (key, held) in enumerate(entries):
        if isinstance(held, Entry):
            if held.type is MemoryType.SESSION:
                turn = Turn(held.slug, key, held.at, held.hidden, held.text, len(held.body))
                turns.append((row, turn))
        elif rows is not None and (saved := rows.turn(key)) is not None:
            turns.append((row, saved))
    sections: dict[str, bytes] = {}
    for name, counts in (("visible", visible), ("hidden", hidden)):
        sections[f"{name}_tokens"], sections[f"{name}_token_ends"] = _table(list(counts.df))
        sections[f"{name}_df"] = array("q", counts.df.values()).tobytes()
    slugs = [held if isinstance(held, str) else held.slug for _, held in entries]
    sections["slugs"], sections["slug_ends"] = _table(slugs)
    keys = [key for key, _ in entries]
    ends = array("Q", itertools.accumulate(map(len, encoded)))
    crcs = array("I", map(zlib.crc32, encoded))
    sections["keys"] = array("Q", keys).tobytes()
    sections["row_ends"], sections["row_crcs"] = ends.tobytes(), crcs.tobytes()
    sections["turn_rows"] = array("I", [row for row, _ in turns]).tobytes()
    sections["turn_at"] = array("q", [(t.at - _EPOCH) // _MICROSECOND for _, t in turns]).tobytes()
    sections["turn_hidden"] = bytes(t.hidden for _, t in turns)
    sections["turn_lengths"] = array("I", [t.length for _, t in turns]).tobytes()
    sections["turn_texts"], sections["turn_text_ends"] = _table([t.text for _, t in turns])
    parts = [sections[name] for name, _ in _SECTIONS]
    header = orjson.dumps(
        {
            "format": FORMAT,
            "index": index,
            "analysis": analysis,
            "scope": scope,
            "opstamp": opstamp,
            "order": sys.byteorder,
            "counts": [[c.docs, c.titles, c.bodies] for c in (visible, hidden)],
            "sections": [len(part) for part in parts],
        }
    )
    checksum = zlib.crc32(header)
    for part in parts:
        checksum = zlib.crc32(part, checksum)
    head = MAGIC + HEAD.pack(len(header), checksum, opstamp)
    raw = b"".join([head, header, *parts, *encoded])
    blob = memoryview(raw)[len(raw) - (ends[-1] if ends else 0) :]
    rows = _Rows(scope, blob, slugs, keys, ends, crcs)
    rows._turns = {turn.key: turn for _, turn in turns}
    return raw, rows


def header_of(whole: memoryview) -> dict[str, Any] | None:
    """A format 3 file's header, when it and its sections are intact (`at`: where they start)."""
    size, checksum, _ = HEAD.unpack_from(whole, len(MAGIC))
    start = len(MAGIC) + HEAD.size
    data = orjson.loads(whole[start : start + size])
    if not isinstance(data, dict) or data.get("order") != sys.byteorder:
        return None
    sizes = data["sections"]
    if len(sizes) != len(_SECTIONS) or not all(isinstance(n, int) and n >= 0 for n in sizes):
        return None
    ends = start + size + sum(sizes)
    if ends > len(whole) or zlib.crc32(whole[start:ends]) != checksum:
        return None
    data["at"] = start + size
    return data


def header_of_v2(whole: memoryview) -> dict[str, Any] | None:
    """A format 2 file's JSON header, when the file is intact (`at`: where its entries start)."""
    size, checksum, _ = HEAD.unpack_from(whole, len(MAGIC))
    body = whole[len(MAGIC) + HEAD.size :]
    if zlib.crc32(body) != checksum or size > len(body):
        return None
    data = orjson.loads(body[:size])
    if not isinstance(data, dict):
        return None
    data["at"] = len(MAGIC) + HEAD.size + size
    return data


class _Rows:
    """The entries of one scope file, decoded when asked (`SavedRows`); each checked against
    its CRC-32 when there are (format 3)."""

    __slots__ = ("_blob", "_crcs", "_ends", "_keys", "_row_of", "_scope", "_slugs", "_turns")

    def __init__(
        self,
        scope: str,
        blob: memoryview,
        slugs: list[str],
        keys: list[int],
        ends: Sequence[int],
        crcs: Sequence[int] | None = None,
    ) -> None:
        self._scope = scope
        self._blob = blob
        self._slugs = slugs
        self._keys = keys
        self._ends = ends
        self._crcs = crcs
        self._row_of = dict(zip(keys, range(len(keys)), strict=True))
        self._turns: dict[int, Turn] = {}

    def _bytes(self, row: int) -> bytes:
        raw = bytes(self._blob[self._ends[row - 1] if row else 0 : self._ends[row]])
        if self._crcs is not None and zlib.crc32(raw) != self._crcs[row]:
            raise ValueError(f"the saved entry of {self._slugs[row]} is corrupt")
        return raw

    def raw(self, key: int) -> bytes:
        return self._bytes(self._row_of[key])

    def entry(self, key: int) -> Entry:
        return self.at(self._row_of[key])

    def at(self, row: int) -> Entry:
        fields = orjson.loads(self._bytes(row))
        return entry_from(self._scope, self._slugs[row], self._keys[row], fields)

    def turn(self, key: int) -> Turn | None:
        return self._turns.get(key)

    def check(self, rows: Sequence[int]) -> None:
        """Check the CRC-32 of the entries at `rows` (the turns, fetched when asked)."""
        crcs = self._crcs
        if crcs is None:
            return
        for row in rows:
            if (
                zlib.crc32(self._blob[self._ends[row - 1] if row else 0 : self._ends[row]])
                != (crcs[row])
            ):
                raise ValueError(f"the saved entry of {self._slugs[row]} is corrupt")


def _counted(totals: Sequence[Any], df: dict[str, int]) -> Counts:
    docs, titles, bodies = totals
    counts = Counts()
    counts.docs, counts.titles, counts.bodies = int(docs), int(titles), int(bodies)
    counts.df = df
    return counts


def decode_file(
    scope: str, data: dict[str, Any], body: memoryview
) -> tuple[Counts, Counts, dict[int, Held], SavedRows, list[Turn]]:
    """A format 3 file's statistics (`body`: its sections and entries)."""
    at, parts = 0, dict[str, Any]()
    for (name, code), size in zip(_SECTIONS, data["sections"], strict=True):
        chunk = body[at : at + size]
        at += size
        if code == "s":
            parts[name] = chunk
        else:
            values = array(code)
            values.frombytes(chunk)
            parts[name] = values
    made = []
    for name, totals in zip(("visible", "hidden"), data["counts"], strict=True):
        tokens = _strings(parts[f"{name}_tokens"], parts[f"{name}_token_ends"])
        df = parts[f"{name}_df"].tolist()
        if len(df) != len(tokens):
            raise ValueError("a token table that does not match its counts")
        made.append(_counted(totals, dict(zip(tokens, df, strict=True))))
    visible, hidden = made
    slugs = _strings(parts["slugs"], parts["slug_ends"])
    keys: list[int] = parts["keys"].tolist()
    ends, crcs, blob = parts["row_ends"], parts["row_crcs"], body[at:]
    if not len(slugs) == len(keys) == len(ends) == len(crcs) == visible.docs + hidden.docs:
        raise ValueError("the counts do not match the entries")
    if ends and ends[-1] != len(blob):
        raise ValueError("the entries are cut short")
    rows = _Rows(scope, blob, slugs, keys, ends, crcs)
    keyed: dict[int, Held] = dict(zip(keys, slugs, strict=True))
    if len(keyed) != len(slugs):
        raise ValueError("two entries share a slug key")
    at_rows: list[int] = parts["turn_rows"].tolist()
    texts = _strings(parts["turn_texts"], parts["turn_text_ends"])
    columns = (parts["turn_at"], parts["turn_hidden"], parts["turn_lengths"], texts)
    if not all(len(column) == len(at_rows) for column in columns):
        raise ValueError("the turns' columns do not match")
    rows.check(at_rows)
    turns = list(
        map(
            Turn,
            map(slugs.__getitem__, at_rows),
            map(keys.__getitem__, at_rows),
            [_EPOCH + timedelta(microseconds=us) for us in parts["turn_at"]],
            map(bool, parts["turn_hidden"]),
            texts,
            parts["turn_lengths"],
        )
    )
    rows._turns = {turn.key: turn for turn in turns}
    return visible, hidden, keyed, rows, turns


def decode_file_v2(
    scope: str, data: dict[str, Any], body: memoryview
) -> tuple[Counts, Counts, dict[int, Held], SavedRows, list[Turn]]:
    """A format 2 file's statistics (`body`: its entries; the rest is in its JSON header)."""
    blob = body
    made = []
    for docs, titles, bodies, df in data["counts"]:
        if not isinstance(df, dict):
            raise TypeError("df is no mapping")
        made.append(_counted((docs, titles, bodies), df))
    visible, hidden = made
    slugs, keys, ends = data["slugs"], data["keys"], data["ends"]
    if not len(slugs) == len(keys) == len(ends) == visible.docs + hidden.docs:
        raise ValueError("the counts do not match the entries")
    if ends and ends[-1] != len(blob):
        raise ValueError("the entries are cut short")
    rows = _Rows(scope, blob, slugs, keys, ends)
    keyed: dict[int, Held] = dict(zip(keys, slugs, strict=True))
    if len(keyed) != len(slugs) or not all(isinstance(slug, str) for slug in slugs):
        raise ValueError("two entries share a slug key")
    turns = []
    for row in data["turns"]:
        entry = rows.at(row)
        if entry.type is not MemoryType.SESSION:
            raise ValueError("a turn that is no session memory")
        keyed[entry.key] = entry
        turns.append(
            Turn(entry.slug, entry.key, entry.at, entry.hidden, entry.text, len(entry.body))
        )
    return visible, hidden, keyed, rows, turns
