"""Scope statistics saved beside the index, so a fresh process's first recall reads them
instead of reading and analysing every memory of the scope (issue 28).

`<index>/stats/<scope>.json` holds one scope's counts and entries (`stats.Entry`) as they were
at an index commit (its opstamp, from tantivy's `meta.json`) under a decay overlay (its
digest). `<index>/stats/manifest.json`, rewritten by the writer after each commit, records the
opstamp it was written at and, per scope, the last commit that changed the scope's memories
(`base`: nothing older is known). A scope file counts only when the manifest is not behind the
index and no commit changed the scope after the file's opstamp; a crash between the index's
commit and the manifest leaves the manifest behind, so every file is stale and recounted. The
files are derived like the index: a missing, stale, foreign or unreadable one is counted again.
Only an on-disk index has them (a granted sensitive scope's index lives in memory).
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import shutil
import struct
import threading
import zlib
from collections.abc import Callable, Collection
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from memoryd.models import DecayState, MemoryType
from memoryd.private import FILE_MODE, make_private_dir
from memoryd.search.stats import Counts, Entry, Held, SavedRows

logger = logging.getLogger(__name__)

STATS_DIR = "stats"
_FORMAT = 1
_MANIFEST = "manifest.json"
_TYPES = {t.value: t for t in MemoryType}
_STATES = {s.value: s for s in DecayState}
_MAGIC = b"memoryd scope statistics\n"
_HEAD = struct.Struct(">QI")
"""The header's length and the CRC-32 of the header and the entries after it."""
Loaded = tuple[Counts, Counts, dict[int, Held], SavedRows, list[Entry]]
"""Visible and hidden counts, the entries by slug key (`Held`), where those still saved are,
and the session memories among them (decoded)."""


def index_opstamp(directory: Path) -> int | None:
    """The opstamp of the index's last commit as tantivy's `meta.json` says (None: unreadable)."""
    try:
        stamp = orjson.loads((directory / "meta.json").read_bytes())["opstamp"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return stamp if isinstance(stamp, int) else None


class StatsFiles:
    """The saved statistics of one on-disk index (`analysis`: the analyser's version; tokens
    counted by another are foreign)."""

    def __init__(
        self,
        directory: Path,
        analysis: Callable[[], str],
        identity: str | None,
        *,
        writable: bool = True,
    ) -> None:
        self._dir = directory / STATS_DIR
        self._analysis_of = analysis
        self.identity = identity
        """The index's identity (its `index_meta.json`): None for an index from before there
        were any, whose files are neither read nor written until its writer gives it one."""
        self.writable = writable
        """False in a process that must write nothing (a notebook's embedded read): it loads
        the saved files and saves none."""

    @property
    def _analysis(self) -> str:
        return self._analysis_of()

    @staticmethod
    def remove_in(directory: Path) -> None:
        """Drop every file of the index in `directory` (a new index: none describes it)."""
        shutil.rmtree(directory / STATS_DIR, ignore_errors=True)

    def drop(self, scopes: Collection[str] | None) -> None:
        """Remove the files of `scopes` (all when None): a commit is changing them, so they
        could never be taken again, and a scope whose memories leave the index (marked
        sensitive, forgotten) leaves nothing of them here."""
        try:
            paths = (
                list(self._dir.glob("*.stats"))
                if scopes is None
                else [self._dir / f"{scope}.stats" for scope in scopes]
            )
            for path in paths:
                path.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("cannot remove saved statistics in %s: %s", self._dir, exc)

    def _manifest(self) -> dict[str, Any] | None:
        try:
            data = orjson.loads((self._dir / _MANIFEST).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            return None
        if self.identity is None or data.get("index") != self.identity:
            return None
        if data.get("analysis") != self._analysis:
            return None
        return data

    def committed(
        self, before: int | None, after: int, overlay: str, scopes: Collection[str] | None
    ) -> None:
        """Record a commit from opstamp `before` to `after` that changed the memories of
        `scopes` (None: all of them, as a clear does) under the overlay with digest `overlay`."""
        manifest = self._manifest()
        if manifest is None or scopes is None or before is None or manifest["opstamp"] != before:
            manifest = {
                "format": _FORMAT,
                "index": self.identity,
                "analysis": self._analysis,
                "base": after,
                "changed": {},
            }
        changed = manifest["changed"]
        for scope in scopes or ():
            changed[scope] = after
        manifest["opstamp"] = after
        manifest["overlay"] = overlay
        self._write(_MANIFEST, manifest)

    def fresh_at(self, opstamp: int, overlay: str) -> bool:
        """Whether the manifest describes the index at `opstamp` under `overlay` (a process
        there may save what it counted)."""
        manifest = self._manifest()
        return manifest is not None and (manifest["opstamp"], manifest["overlay"]) == (
            opstamp,
            overlay,
        )

    def load(self, scope: str, opstamp: int) -> Loaded | None:
        """The saved statistics of `scope` as the index holds it at `opstamp`, or None when
        there are none that are sure to be those."""
        manifest = self._manifest()
        if manifest is None or opstamp > manifest["opstamp"]:
            return None
        # Decoding makes ~3 objects per memory, all kept: the collector's passes over them
        # would find nothing to free.
        collecting = gc.isenabled()
        gc.disable()
        try:
            raw = (self._dir / f"{scope}.stats").read_bytes()
            if not raw.startswith(_MAGIC):
                return None
            size, checksum = _HEAD.unpack_from(raw, len(_MAGIC))
            body = memoryview(raw)[len(_MAGIC) + _HEAD.size :]
            if zlib.crc32(body) != checksum or size > len(body):
                return None
            data = orjson.loads(body[:size])
            if (
                data["format"] != _FORMAT
                or data["index"] != manifest["index"]
                or data["analysis"] != self._analysis
                or data["scope"] != scope
            ):
                return None
            last = max(manifest["base"], manifest["changed"].get(scope, 0))
            if last > min(data["opstamp"], opstamp):
                return None
            return _decode(scope, data, body[size:])
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
            return None
        except struct.error:
            return None
        finally:
            if collecting:
                gc.enable()

    def save(
        self,
        scope: str,
        opstamp: int,
        visible: Counts,
        hidden: Counts,
        entries: list[tuple[int, Entry | str]],
        rows: SavedRows | None,
    ) -> None:
        """Replace the file of `scope` with its statistics at `opstamp` (best effort: a file
        that cannot be written is counted again by the next process). Entries still saved
        as they were read are copied without decoding them."""
        if self.identity is None or not self.writable:
            return
        encoded = [
            _encode(held) if isinstance(held, Entry) else _raw(rows, key) for key, held in entries
        ]
        ends = list(itertools.accumulate(map(len, encoded)))
        header = orjson.dumps(
            {
                "format": _FORMAT,
                "index": self.identity,
                "analysis": self._analysis,
                "scope": scope,
                "opstamp": opstamp,
                "counts": [_counts(visible), _counts(hidden)],
                "slugs": [held if isinstance(held, str) else held.slug for _, held in entries],
                "keys": [key for key, _ in entries],
                "ends": ends,
                "turns": [
                    i
                    for i, (_, held) in enumerate(entries)
                    if isinstance(held, Entry) and held.type is MemoryType.SESSION
                ],
            }
        )
        body = header + b"".join(encoded)
        try:
            self._write_bytes(
                f"{scope}.stats", _MAGIC + _HEAD.pack(len(header), zlib.crc32(body)) + body
            )
        except OSError as exc:
            logger.warning("cannot save the statistics of scope %s: %s", scope, exc)

    def _write(self, name: str, body: dict[str, Any]) -> None:
        self._write_bytes(name, orjson.dumps(body))

    def _write_bytes(self, name: str, raw: bytes) -> None:
        make_private_dir(self._dir)
        path = self._dir / name
        tmp = path.with_name(f"{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(raw)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise


def _counts(counts: Counts) -> list[Any]:
    return [counts.docs, counts.titles, counts.bodies, counts.df]


def _raw(rows: SavedRows | None, key: int) -> bytes:
    if rows is None:
        raise LookupError("an entry still saved, and no saved entries")
    return rows.raw(key)


def _encode(e: Entry) -> bytes:
    return orjson.dumps(
        [
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
    )


class _Rows:
    """The entries of one scope file, decoded when asked (`SavedRows`)."""

    __slots__ = ("_blob", "_ends", "_keys", "_row_of", "_scope", "_slugs")

    def __init__(
        self, scope: str, blob: memoryview, slugs: list[str], keys: list[int], ends: list[int]
    ) -> None:
        self._scope = scope
        self._blob = blob
        self._slugs = slugs
        self._keys = keys
        self._ends = ends
        self._row_of = dict(zip(keys, range(len(keys)), strict=True))

    def raw(self, key: int) -> bytes:
        row = self._row_of[key]
        return bytes(self._blob[self._ends[row - 1] if row else 0 : self._ends[row]])

    def entry(self, key: int) -> Entry:
        return self.at(self._row_of[key])

    def at(self, row: int) -> Entry:
        kind, hid, at, title, body, text, written, state, tags, triggers = orjson.loads(
            self._blob[self._ends[row - 1] if row else 0 : self._ends[row]]
        )
        return Entry(
            self._slugs[row],
            self._scope,
            _TYPES[kind],
            bool(hid),
            datetime.fromisoformat(at),
            tuple(title),
            tuple(body),
            text,
            self._keys[row],
            written,
            _STATES[state],
            tuple(tags),
            tuple(triggers),
        )


def _decode(scope: str, data: dict[str, Any], blob: memoryview) -> Loaded:
    made = []
    for docs, titles, bodies, df in data["counts"]:
        counts = Counts()
        counts.docs, counts.titles, counts.bodies = int(docs), int(titles), int(bodies)
        if not isinstance(df, dict):
            raise TypeError("df is no mapping")
        counts.df = df
        made.append(counts)
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
        turns.append(entry)
    return visible, hidden, keyed, rows, turns
