"""Decay states the search index keeps beside its documents (`SearchIndex.set_decay_states`).

A decay sweep changes a memory's state and nothing of its text. tantivy cannot change a
field in place, so writing the state into the document meant deleting it and adding it again,
its text analysed anew and its context rebuilt: for the 24.7k memories a 100k first sweep
dims or soft-forgets, two thirds of the index's part of the sweep. Instead the index records
here, slug by slug, the state of each memory whose document holds an older one. Every read
of the index applies it (a hit, a statistics entry and a session view see the state this
holds), and every search that leaves soft-forgotten memories out leaves out those this
hides, by their slug keys (`SLUG_KEY_FIELD`, read from a column). A memory's entry goes as
soon as its document is written again (a revival, an update) or deleted, since the document
then holds its state itself; `reindex` starts with none.

The file (`OVERLAY_FILE`, JSON) is replaced whole, atomically, after each commit that changes
it, so a reader process that reloads the index reads the states of that commit. It is as
derived as the index: a crash before it lands leaves the sweep's write intents, and the
next start writes the states again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from memoryd.errors import StorageError
from memoryd.models import DecayState
from memoryd.private import FILE_MODE

OVERLAY_FILE = "decay_states.json"
_FORMAT = 1
_STATES = {state.value: state for state in DecayState}


def slug_key(slug: str) -> int:
    """The first 64 bits of the slug's BLAKE2b (`SLUG_KEY_FIELD`)."""
    return int.from_bytes(hashlib.blake2b(slug.encode("utf-8"), digest_size=8).digest(), "big")


class DecayOverlay:
    """slug → the decay state of a memory whose indexed document holds an older one."""

    def __init__(
        self, directory: Path | None, states: dict[str, DecayState], digest: str = ""
    ) -> None:
        self._path = None if directory is None else directory / OVERLAY_FILE
        self.states: Mapping[str, DecayState] = states
        self.hidden_slugs: frozenset[str] = frozenset(
            slug for slug, state in states.items() if not state.visible_by_default
        )
        """The memories this hides (soft-forgotten)."""
        self.hidden_keys: frozenset[int] = frozenset(map(slug_key, self.hidden_slugs))
        """Their slug keys: what a search that leaves them out looks its hits up in."""
        self._stamp = self._file_stamp()
        self.digest = digest
        """The BLAKE2b of the file as read or saved ("" for none): saved statistics name the
        overlay they were counted under (`stats_file`)."""

    @classmethod
    def load(cls, directory: Path | None, hint: str) -> DecayOverlay:
        """The overlay of the index in `directory` (none: an in-memory index, or no sweep yet).
        An unreadable file is a StorageError with `hint` (the index is derived)."""
        if directory is None:
            return cls(None, {})
        path = directory / OVERLAY_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(directory, {})
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}", hint=hint) from exc
        try:
            data = json.loads(raw)
            if data["format"] != _FORMAT:
                raise ValueError(f"format {data['format']!r}, this memoryd reads {_FORMAT}")
            states = {str(slug): _STATES[value] for slug, value in data["states"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(f"{path} is not a decay-state overlay: {exc}", hint=hint) from exc
        return cls(directory, states, _digest(raw))

    def reload(self, hint: str) -> DecayOverlay:
        """This overlay, or the one on disk if the file changed since it was read."""
        if self._path is None or self._file_stamp() == self._stamp:
            return self
        return DecayOverlay.load(self._path.parent, hint)

    def changed(
        self, moved: Mapping[str, DecayState], written: Iterable[str]
    ) -> DecayOverlay | None:
        """The overlay once `moved` (slug → its new state; documents left as they are) and
        the `written` slugs (documents written again or deleted: they hold their state) are
        committed, or None if that changes nothing."""
        written = list(written)
        if not moved and not any(slug in self.states for slug in written):
            return None  # most writes: no copy of the overlay
        states = {**self.states, **moved}
        for slug in written:
            states.pop(slug, None)
        if states == self.states:
            return None
        directory = None if self._path is None else self._path.parent
        return DecayOverlay(directory, states)

    def save(self) -> None:
        """Replace the file with this overlay (no file for an empty one)."""
        if self._path is None:
            return
        path = self._path
        try:
            if not self.states:
                path.unlink(missing_ok=True)
                self.digest = ""
            else:
                body = {"format": _FORMAT, "states": {s: v.value for s, v in self.states.items()}}
                raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                tmp = path.with_name(path.name + ".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(raw)
                os.replace(tmp, path)
                self.digest = _digest(raw)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if self._path is None:
            return None
        try:
            stat = self._path.stat()
        except OSError:
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _digest(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()
