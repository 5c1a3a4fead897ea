"""A sensitive scope's view snapshot: what a grant decrypted last time, sealed in one file.

Decrypting and parsing 10k memory files one by one is most of what a grant costs, so the
service keeps, beside them, one `.md.enc`-format file (`scopes/<hash>/view.enc`) holding the
parsed scope, sealed with the scope's key like every memory file: no plaintext on disk.
Its AAD binds it to its scope and to a slug no memory has, so it cannot stand in for a memory
file or for another scope's snapshot.

It is a cache, never the truth: each memory in it carries the fingerprint of the file it was
read from (inode, size, modification and change times, `Fingerprint`), and a grant uses it
only for the files whose fingerprint is the same now; any other file is decrypted again, and
a memory whose file is gone is dropped. A file is always replaced by a rename (a new inode
and change time), and its change time cannot be set back, so an edited, added, removed or
restored file never matches, whatever an old or replayed snapshot says. A snapshot that does
not open (a flipped byte, a truncated file, a key no longer held) is reported and ignored.

What the payload holds is the domain's business (`recall.granted`); this module seals, opens
and fingerprints.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import NamedTuple

from memoryd.errors import NotFound
from memoryd.sensitive import envelope
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.files import MEMORY_DIRS, ScopeCipher
from memoryd.sensitive.keys import KeyStore
from memoryd.vault import ENCRYPTED_SUFFIX, atomic_write, storage_error

SNAPSHOT_FILE = "view.enc"
SNAPSHOT_SLUG = ".view-snapshot"
"""Bound into the snapshot's AAD: no memory file has this slug (slugs never start with a dot,
and files that do are never read as memories)."""


class Fingerprint(NamedTuple):
    """What a file's inode says of it: any rewrite, rename over it or restore changes it."""

    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Fingerprint:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def snapshot_path(home: Path, scope_hash: str) -> Path:
    return home / "scopes" / scope_hash / SNAPSHOT_FILE


def scan(home: Path, scope_hash: str) -> dict[str, Fingerprint]:
    """Every `.md.enc` memory file of the scope (`<type dir>/<name>`, in `encrypted_files`'
    order) with its fingerprint now."""
    scope = home / "scopes" / scope_hash
    found: dict[str, Fingerprint] = {}
    for sub in MEMORY_DIRS:
        try:
            entries = sorted(
                (e for e in os.scandir(scope / sub) if e.name.endswith(ENCRYPTED_SUFFIX)),
                key=lambda e: e.name,
            )
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                found[f"{sub}/{entry.name}"] = Fingerprint.of(entry.stat())
            except FileNotFoundError:  # removed since the listing: it is gone
                continue
    return found


def read_fingerprinted(path: Path) -> tuple[Fingerprint, bytes]:
    """A file's bytes and the fingerprint of the very inode they were read from (a file
    replaced meanwhile gives the new one's, so the pair always agrees)."""
    try:
        with open(path, "rb") as handle:
            return Fingerprint.of(os.fstat(handle.fileno())), handle.read()
    except FileNotFoundError as exc:
        raise NotFound(f"memory file {path} is gone (removed while it was read)") from exc
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc


def seal_snapshot(home: Path, scope_hash: str, key: ScopeKey, payload: bytes) -> Path:
    """Write the scope's snapshot (`payload`, sealed with `key`) atomically."""
    path = snapshot_path(home, scope_hash)
    atomic_write(path, envelope.seal(payload, key, scope_hash, SNAPSHOT_SLUG), sync=False)
    return path


def open_snapshot(home: Path, scope_hash: str, keys: KeyStore) -> bytes | None:
    """The scope's snapshot payload, or None when there is none. A snapshot that fails to
    open raises `EncryptedFileBroken` (damaged, or not this scope's) or `MissingKey` (sealed
    with a key this machine no longer holds), naming the file."""
    path = snapshot_path(home, scope_hash)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    return ScopeCipher(keys).open(blob, scope_hash, SNAPSHOT_SLUG, path)


def remove_snapshot(home: Path, scope_hash: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        snapshot_path(home, scope_hash).unlink()
