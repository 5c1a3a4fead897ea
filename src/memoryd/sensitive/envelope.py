"""The `.md.enc` file format: one whole memory file, sealed with its scope's key.

```
offset  size  field
0       5     magic  b"MDENC"
5       1     version (1)
6       8     key id: which scope key sealed it (`keys.key_id`), so rotation can be resumed
14      12    nonce: random 96 bits, new for every write (sync exports derive theirs: `sync.cipher`)
26      ...   AES-256-GCM ciphertext of the markdown file (frontmatter included) + 16-byte tag
```

The additional authenticated data is the 26-byte header, the scope hash and the slug: a file
copied over another slug, or into another scope, fails to open, as does a flipped bit anywhere.
Every failure is a typed error that names the file, never a traceback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memoryd.errors import EncryptedFileBroken, MissingKey
from memoryd.sensitive.heap import scrub_freed_heap

MAGIC = b"MDENC"
VERSION = 1
KEY_ID_SIZE = 8
NONCE_SIZE = 12
TAG_SIZE = 16
HEADER_SIZE = len(MAGIC) + 1 + KEY_ID_SIZE + NONCE_SIZE
KEY_SIZE = 32


@dataclass(frozen=True)
class ScopeKey:
    """A scope's 256-bit AES key and its public id (a hash of the key, not the key)."""

    key_id: bytes
    secret: bytes = b""

    def __repr__(self) -> str:  # never print the secret
        return f"ScopeKey(key_id={self.key_id.hex()})"


@dataclass(frozen=True)
class Header:
    version: int
    key_id: bytes
    nonce: bytes


def _aad(header: bytes, scope_hash: str, slug: str) -> bytes:
    return b"\0".join((header, scope_hash.encode("utf-8"), slug.encode("utf-8")))


def seal(
    plaintext: bytes, key: ScopeKey, scope_hash: str, slug: str, *, nonce: bytes | None = None
) -> bytes:
    """The `.md.enc` bytes of `plaintext`, bound to `scope_hash` and `slug`. The nonce is
    random unless the caller derives one that is unique per plaintext (`sync.cipher`'s
    synthetic nonces: a GCM nonce must never seal two different plaintexts under one key)."""
    if nonce is not None and len(nonce) != NONCE_SIZE:
        raise ValueError(f"a nonce is {NONCE_SIZE} bytes, got {len(nonce)}")
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    scrub_freed_heap()  # this process holds a sensitive plaintext
    header = MAGIC + bytes([VERSION]) + key.key_id + (nonce or os.urandom(NONCE_SIZE))
    nonce = header[-NONCE_SIZE:]
    return header + AESGCM(key.secret).encrypt(nonce, plaintext, _aad(header, scope_hash, slug))


def read_header(blob: bytes, where: Path | str) -> Header:
    """The header of an encrypted file, checked: what `doctor` verifies without any key."""
    if len(blob) < HEADER_SIZE + TAG_SIZE:
        raise EncryptedFileBroken(
            f"{where}: encrypted file is truncated ({len(blob)} bytes; a sealed file has at"
            f" least {HEADER_SIZE + TAG_SIZE})"
        )
    if blob[: len(MAGIC)] != MAGIC:
        raise EncryptedFileBroken(f"{where}: not a memoryd encrypted file (bad magic bytes)")
    version = blob[len(MAGIC)]
    if version != VERSION:
        raise EncryptedFileBroken(
            f"{where}: encrypted file format version {version} is not known here (this"
            f" memoryd reads version {VERSION})",
            hint="upgrade memoryd on this machine",
        )
    start = len(MAGIC) + 1
    return Header(
        version=version,
        key_id=blob[start : start + KEY_ID_SIZE],
        nonce=blob[start + KEY_ID_SIZE : HEADER_SIZE],
    )


def open_(
    blob: bytes, key: ScopeKey, scope_hash: str, slug: str, *, where: Path | str | None = None
) -> bytes:
    """The plaintext sealed in `blob`; `where` (the file) is named in every error."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    place = where if where is not None else f"{scope_hash}/{slug}"
    header = read_header(blob, place)
    scrub_freed_heap()  # this process is about to hold a sensitive plaintext
    if header.key_id != key.key_id:
        raise MissingKey(
            f"{place}: sealed with key {header.key_id.hex()}, but the key given is"
            f" {key.key_id.hex()} (a wrong passphrase, or a key from another scope)"
        )
    try:
        return AESGCM(key.secret).decrypt(
            header.nonce, blob[HEADER_SIZE:], _aad(blob[:HEADER_SIZE], scope_hash, slug)
        )
    except InvalidTag as exc:
        raise EncryptedFileBroken(
            f"{place}: encrypted file fails authentication (a changed or truncated byte, or"
            f" a file copied from another slug or scope)"
        ) from exc
