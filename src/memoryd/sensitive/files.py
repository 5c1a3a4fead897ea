"""A sensitive scope's files: the vault's cipher, listing them, sealing and re-sealing them,
and the scope's capture key pair (a grant reads them through `snapshot` and the domain's
`guarding`).

This is the encrypted half of the vault (it builds on the vault's file format), so it sits
in the stores layer beside it; it never touches the graph or the index: what they may hold
of a sensitive memory is the domain's decision (`domain/sensitivity.py`).
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from memoryd.errors import BrokenMemoryFile, MissingKey
from memoryd.models import Memory, MemoryType
from memoryd.sensitive import envelope
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.keys import KeyStore
from memoryd.sensitive.sealed import SEAL_KEY, SEAL_KEY_SLUG, SEAL_PUB, open_sealed
from memoryd.vault import ENCRYPTED_SUFFIX, FORGOTTEN_DIR, Vault, atomic_write

logger = logging.getLogger(__name__)

MEMORY_DIRS = (*sorted(t.dir_name for t in MemoryType), FORGOTTEN_DIR)


def opaque_slug(when: datetime) -> str:
    """`2026-05-18-s-3f9a1c0b7d2e`: a sensitive memory's slug says when, never what."""
    return f"{when.strftime('%Y-%m-%d')}-s-{secrets.token_hex(6)}"


def slug_of(path: Path) -> str:
    return path.name.removesuffix(ENCRYPTED_SUFFIX).removesuffix(".md")


class ScopeCipher:
    """The vault's `FileCipher`: seals with the scope's current key, opens with the key the
    file's header names (so files from before a rotation that was cut short still open)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys

    def seal(self, plaintext: bytes, scope_hash: str, slug: str) -> bytes:
        return envelope.seal(plaintext, self.keys.current(scope_hash), scope_hash, slug)

    def open(self, blob: bytes, scope_hash: str, slug: str, path: Path) -> bytes:
        header = envelope.read_header(blob, path)
        try:
            key = self.keys.get(scope_hash, header.key_id)
        except MissingKey as exc:
            raise MissingKey(f"{path}: {exc.message}", hint=exc.hint) from exc
        return envelope.open_(blob, key, scope_hash, slug, where=path)


def encrypted_files(home: Path, scope_hash: str) -> list[Path]:
    """Every `.md.enc` memory file of the scope, in a stable order."""
    scope = home / "scopes" / scope_hash
    found: list[Path] = []
    for sub in MEMORY_DIRS:
        folder = scope / sub
        if folder.is_dir():
            found += sorted(
                p
                for p in folder.iterdir()
                if p.name.endswith(ENCRYPTED_SUFFIX) and not p.name.startswith(".")
            )
    return found


def plain_files(home: Path, scope_hash: str) -> list[Path]:
    """Every plaintext `.md` memory file of the scope (what marking encrypts)."""
    scope = home / "scopes" / scope_hash
    found: list[Path] = []
    for sub in MEMORY_DIRS:
        folder = scope / sub
        if folder.is_dir():
            found += sorted(
                p for p in folder.iterdir() if p.suffix == ".md" and not p.name.startswith(".")
            )
    return found


def decrypt_scope(home: Path, scope_hash: str, keys: KeyStore) -> Iterator[Memory]:
    """The scope's memories in plaintext, in memory only (the gate's view under a grant).

    A file that fails to open is logged (its name, never its content) and skipped; a key that
    is missing raises `MissingKey`, since then no file of the scope can be read."""
    vault = Vault(home, cipher=ScopeCipher(keys))
    for path in encrypted_files(home, scope_hash):
        try:
            yield vault.read(path)
        except MissingKey:
            raise
        except BrokenMemoryFile as exc:
            logger.warning("skipped an unreadable sensitive file: %s", exc.message)


def reseal(
    path: Path, keys: KeyStore, new_key: ScopeKey, scope_hash: str = "", slug: str = ""
) -> bytes:
    """Seal one encrypted file again under `new_key` (rotation), atomically; the plaintext
    it holds. A memory file's scope and slug come from its path."""
    scope_hash = scope_hash or path.parent.parent.name
    slug = slug or slug_of(path)
    plaintext = ScopeCipher(keys).open(path.read_bytes(), scope_hash, slug, path)
    atomic_write(path, envelope.seal(plaintext, new_key, scope_hash, slug), sync=False)
    return plaintext


# -- the capture key pair ---------------------------------------------------------------
def create_seal_pair(home: Path, scope_hash: str, key: ScopeKey) -> bytes:
    """A new X25519 pair: the public key in plain, the private key sealed by `key`."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    private = X25519PrivateKey.generate()
    scope = home / "scopes" / scope_hash
    raw_private = private.private_bytes_raw()
    public = private.public_key().public_bytes_raw()
    atomic_write(scope / SEAL_KEY, envelope.seal(raw_private, key, scope_hash, SEAL_KEY_SLUG))
    atomic_write(scope / SEAL_PUB, base64.b64encode(public) + b"\n")
    return public


def seal_private_key(home: Path, scope_hash: str, keys: KeyStore) -> bytes:
    path = home / "scopes" / scope_hash / SEAL_KEY
    try:
        blob = path.read_bytes()
    except FileNotFoundError as exc:
        raise MissingKey(
            f"{path} is missing: sealed captures of scope {scope_hash} cannot be opened",
            hint="run `memoryd sensitive rotate-key PATH` to make a new capture key pair",
        ) from exc
    return ScopeCipher(keys).open(blob, scope_hash, SEAL_KEY_SLUG, path)


def open_capture(home: Path, scope_hash: str, keys: KeyStore, path: Path) -> bytes:
    """The plaintext of a sealed capture in `inbox/sealed/`."""
    return open_sealed(
        path.read_bytes(), seal_private_key(home, scope_hash, keys), scope_hash, path
    )


def reseal_seal_key(home: Path, scope_hash: str, keys: KeyStore, new_key: ScopeKey) -> None:
    path = home / "scopes" / scope_hash / SEAL_KEY
    if path.is_file():
        reseal(path, keys, new_key, scope_hash, SEAL_KEY_SLUG)


def remove_seal_pair(home: Path, scope_hash: str) -> None:
    scope = home / "scopes" / scope_hash
    for name in (SEAL_KEY, SEAL_PUB):
        (scope / name).unlink(missing_ok=True)


def fsync_all() -> None:
    """One sync at the end of a bulk re-seal (each file skipped its own fsync)."""
    os.sync()
