"""Scope statistics saved beside the index, so a fresh process's first recall reads them instead of
reading and analysing every memory of the scope (issue 28).

`<index>/stats/<scope>.stats` holds one scope's counts and entries (`stats.Entry`) as they were
at an index commit (its opstamp, from tantivy's `meta.json`) under a decay overlay (its digest):
binary sections (`stats_format`) a first recall reads through `mmap` without decoding one entry,
then the entries, each decoded (and its CRC-32 checked) when ranked.
`<index>/stats/<scope>.delta` holds what the commits after it changed there, one frame per
commit (the slugs it removed, the entries it wrote, and the scope's previous change): any writer
appends one under the write lock, so a write never costs the scope's whole file (a CLI `record`
into a 100k scope) and the next process still loads instead of counting.
`<index>/stats/manifest.json`, rewritten by the writer after each commit, records the opstamp it
was written at and, per scope, the last commit that changed the scope's memories (`base`:
nothing older is known). A scope's statistics count only when the manifest is not behind the
index and the file with its unbroken chain of frames reaches the scope's last change; a crash
between the index's commit and the manifest leaves the manifest behind, so every file is stale
and recounted. The files are derived like the index: a missing, stale, foreign or unreadable one
is counted again. Only an on-disk index has them (a granted sensitive scope's index lives in
memory).
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import struct
import threading
import zlib
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from memoryd.private import FILE_MODE, make_private_dir
from memoryd.search.stats import Counts, Entry, Held, SavedRows, Turn
from memoryd.search.stats_format import (
    FORMAT,
    HEAD,
    MAGIC,
    MAGIC_V2,
    decode_file,
    decode_file_v2,
    encode_file,
    entry_from,
    fields_of,
    header_of,
    header_of_v2,
    read_file,
)

logger = logging.getLogger(__name__)

STATS_DIR = "stats"
_MANIFEST_FORMAT = 1
_MANIFEST = "manifest.json"
_KINDS = ("stats", "delta")
_FRAME = struct.Struct(">IIQQ")
"""A delta frame's head: its payload's length and CRC-32, the scope's change before this
commit, and this commit's opstamp."""
Change = tuple[list[str], list[Entry]]
"""One commit's change to a scope: the slugs it removed or replaced, the entries it wrote."""
Loaded = tuple[Counts, Counts, dict[int, Held], SavedRows, list[Turn], list[Change]]
"""Visible and hidden counts, the entries by slug key (`Held`), where those still saved are,
the session memories among them (`Turn`), and the changes of the frames after the file."""


class Chain(NamedTuple):
    """A scope's saved statistics as a writer sees them without reading them: the file's
    opstamp and size, and the opstamp its unbroken chain of frames reaches, and their size."""

    base: int
    base_size: int
    end: int
    delta_size: int


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
                [*self._dir.glob("*.stats"), *self._dir.glob("*.delta")]
                if scopes is None
                else [self._dir / f"{scope}.{kind}" for scope in scopes for kind in _KINDS]
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
        if not isinstance(data, dict) or data.get("format") != _MANIFEST_FORMAT:
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
                "format": _MANIFEST_FORMAT,
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

    def describe(self, opstamp: int, overlay: str) -> None:
        """Write a manifest for the index at `opstamp` when there is none (nothing older is
        known of it). A writer's next commit rewrites it whole if the index moved on."""
        if self.writable and not (self._dir / _MANIFEST).exists():
            self.committed(None, opstamp, overlay, None)

    def last_changes(self, opstamp: int) -> Callable[[str], int] | None:
        """Scope → the last commit that changed it, as the manifest says when it describes
        the index at `opstamp` (None otherwise: nothing saved can be trusted)."""
        manifest = self._manifest()
        if manifest is None or manifest["opstamp"] != opstamp:
            return None
        base, changed = manifest["base"], manifest["changed"]
        return lambda scope: max(base, changed.get(scope, 0))

    def fresh_at(self, opstamp: int, overlay: str) -> bool:
        """Whether the manifest describes the index at `opstamp` under `overlay` (a process
        there may save what it counted)."""
        manifest = self._manifest()
        return manifest is not None and (manifest["opstamp"], manifest["overlay"]) == (
            opstamp,
            overlay,
        )

    def load(self, scope: str, opstamp: int) -> Loaded | None:
        """The saved statistics of `scope` as the index holds it at `opstamp` (the file and
        the frames after it that commits up to `opstamp` appended), or None when there are
        none that are sure to be those."""
        manifest = self._manifest()
        if manifest is None or opstamp > manifest["opstamp"]:
            return None
        # Decoding makes ~3 objects per memory, all kept: the collector's passes over them
        # would find nothing to free.
        collecting = gc.isenabled()
        gc.disable()
        try:
            whole = read_file(self._dir / f"{scope}.stats")
            if whole[: len(MAGIC)] == MAGIC:
                data, decode = header_of(whole), decode_file
            elif whole[: len(MAGIC)] == MAGIC_V2:
                data, decode = header_of_v2(whole), decode_file_v2
            else:
                return None
            if data is None:
                return None
            if (
                data["format"] not in (2, FORMAT)
                or data["index"] != manifest["index"]
                or data["analysis"] != self._analysis
                or data["scope"] != scope
            ):
                return None
            reached, payloads = data["opstamp"], []
            for prev, after, payload in self._frames(scope):
                if after <= reached:
                    continue  # a change the file holds already
                if prev > reached or after > opstamp:
                    break  # a gap, or a commit our reader does not show yet
                payloads.append(payload)
                reached = after
            last = max(manifest["base"], manifest["changed"].get(scope, 0))
            if last > min(reached, opstamp):
                return None
            decoded = decode(scope, data, whole[data["at"] :])
            return (*decoded, [_change(scope, p) for p in payloads])
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
            return None
        except struct.error:
            return None
        finally:
            if collecting:
                gc.enable()

    def _frames(self, scope: str, *, payloads: bool = True) -> list[tuple[int, int, bytes]]:
        """The whole, intact frames of the scope's delta file, in order (a torn or corrupt
        frame ends them); their payloads are read only when asked."""
        frames: list[tuple[int, int, bytes]] = []
        try:
            with (self._dir / f"{scope}.delta").open("rb") as handle:
                ends = os.fstat(handle.fileno()).st_size
                while len(head := handle.read(_FRAME.size)) == _FRAME.size:
                    size, checksum, prev, after = _FRAME.unpack(head)
                    if not payloads:
                        if handle.seek(size, os.SEEK_CUR) > ends:
                            break  # torn
                        frames.append((prev, after, b""))
                        continue
                    payload = handle.read(size)
                    if len(payload) != size or zlib.crc32(payload) != checksum:
                        break
                    frames.append((prev, after, payload))
        except FileNotFoundError:
            pass
        return frames

    def chain(self, scope: str) -> Chain | None:
        """Where the saved statistics of `scope` reach (a writer's check before it appends a
        frame), without reading them: None when there is no file."""
        path = self._dir / f"{scope}.stats"
        try:
            with path.open("rb") as handle:
                head = handle.read(len(MAGIC) + HEAD.size)
            base_size = path.stat().st_size
            delta = self._dir / f"{scope}.delta"
            delta_size = delta.stat().st_size if delta.exists() else 0
        except OSError:
            return None
        if len(head) != len(MAGIC) + HEAD.size or not head.startswith((MAGIC, MAGIC_V2)):
            return None
        _, _, base = HEAD.unpack_from(head, len(MAGIC))
        reached = base
        for prev, after, _ in self._frames(scope, payloads=False):
            if after <= reached:
                continue
            if prev > reached:
                break
            reached = after
        return Chain(base, base_size, reached, delta_size)

    def outdated(self, scope: str) -> bool:
        """Whether the file of `scope` is of an older format (to save again in this one)."""
        try:
            with (self._dir / f"{scope}.stats").open("rb") as handle:
                return handle.read(len(MAGIC_V2)) == MAGIC_V2
        except OSError:
            return False

    @staticmethod
    def frame(change: Change) -> bytes:
        """One commit's change to a scope, encoded for `append`."""
        removed, added = change
        return orjson.dumps([removed, [[e.slug, e.key, *fields_of(e)] for e in added]])

    def append(self, scope: str, prev: int, after: int, payload: bytes, fresh: bool) -> None:
        """Add the frame of one commit (opstamp `after`; the scope's change before it was at
        `prev`; its change encoded by `frame`) to the scope's delta file (`fresh`: start the
        file anew, none of its frames being needed). Best effort: a frame that cannot be
        written leaves the chain short, and the next process counts the scope."""
        if self.identity is None or not self.writable:
            return
        frame = _FRAME.pack(len(payload), zlib.crc32(payload), prev, after) + payload
        path = self._dir / f"{scope}.delta"
        try:
            make_private_dir(self._dir)
            flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if fresh else os.O_APPEND)
            fd = os.open(path, flags, FILE_MODE)
            with os.fdopen(fd, "wb") as handle:
                handle.write(frame)
        except OSError as exc:
            logger.warning("cannot save the change of scope %s: %s", scope, exc)

    def save(
        self,
        scope: str,
        opstamp: int,
        visible: Counts,
        hidden: Counts,
        entries: list[tuple[int, Entry | str]],
        rows: SavedRows | None,
        *,
        writer: bool = False,
    ) -> SavedRows | None:
        """Replace the file of `scope` with its statistics at `opstamp` (best effort: a file
        that cannot be written is counted again by the next process). Entries still saved
        as they were read are copied without decoding them. The index's `writer` also drops
        the scope's frames, which the file now holds (no other process appends meanwhile).
        Returns the entries as saved (None: nothing saved), for the next save to copy."""
        if self.identity is None or not self.writable:
            return None
        try:
            raw, saved = encode_file(
                (self.identity, self._analysis, scope, opstamp), visible, hidden, entries, rows
            )
        except (LookupError, ValueError) as exc:  # an entry still saved that is corrupt
            logger.warning("cannot save the statistics of scope %s: %s", scope, exc)
            self.drop([scope])
            return None
        try:
            self._write_bytes(f"{scope}.stats", raw)
            if writer:
                (self._dir / f"{scope}.delta").unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("cannot save the statistics of scope %s: %s", scope, exc)
            return None
        return saved

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


def _change(scope: str, payload: bytes) -> Change:
    removed, added = orjson.loads(payload)
    if not all(isinstance(slug, str) for slug in removed):
        raise TypeError("a removed slug that is no string")
    return list(removed), [entry_from(scope, slug, int(key), row) for slug, key, *row in added]
