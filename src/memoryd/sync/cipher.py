"""Sensitive memories in memories.json: sealed whole, under a key made from a passphrase.

A sensitive memory never goes to `memories[]` (mcp-memory-service's reader sees only that
list, FORMATS.md §1.10 rule 6); it is the `cipher_blob` of one entry of the top-level
`encryption` block:

```
"encryption": {"mode": "passphrase", "cipher": "AES-256-GCM",
               "kdf": {"name": "scrypt", "salt": b64, "n": 32768, "r": 8, "p": 1, "length": 32},
               "memories": [{"id": slug, "scope": scope_hash, "cipher_blob": b64}, ...]}
```

The blob is the `.md.enc` envelope (`sensitive.envelope`: header with the key id and a fresh
nonce, AES-256-GCM, AAD = header + scope hash + slug) of the whole memory file (frontmatter
and body), so a blob moved to another slug or scope, or one changed byte, fails to open. The
key is scrypt(passphrase, salt) as for a passphrase-mode scope key (`sensitive.keys.derive`);
salt and nonces are new on every export, so this block (only) differs between two exports of
the same state.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.errors import EncryptedFileBroken, MemorydError, MissingKey
from memoryd.models import Memory
from memoryd.sensitive import envelope
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.keys import SCRYPT_N, SCRYPT_P, SCRYPT_R, derive, make_key
from memoryd.vault import parse, render

MODE = "passphrase"
CIPHER = "AES-256-GCM"
SALT_BYTES = 16
MAX_N = 2**20
"""The most scrypt work a file may ask of the importing machine (1 GiB at r=8): a file
asking more is refused, not obeyed."""
_SCOPE = re.compile(r"[0-9a-f]{12}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class SealedMemory:
    """One entry of `encryption.memories[]`, as read (still sealed)."""

    index: int
    slug: str
    scope_hash: str
    blob: bytes


@dataclass(frozen=True)
class Encryption:
    """The `encryption` block of a file, checked, its memories still sealed."""

    salt: bytes
    n: int
    r: int
    p: int
    memories: list[SealedMemory]


class Sealer:
    """Seals the sensitive memories of one export under one passphrase-derived key."""

    def __init__(self, passphrase: str) -> None:
        self.salt = os.urandom(SALT_BYTES)
        self.key = make_key(derive(passphrase, self.salt))
        self.sealed: list[dict[str, str]] = []

    def add(self, memory: Memory) -> None:
        meta = memory.meta
        blob = envelope.seal(render(memory).encode("utf-8"), self.key, meta.scope_hash, meta.slug)
        self.sealed.append({"id": meta.slug, "scope": meta.scope_hash, "cipher_blob": _b64(blob)})

    def block(self) -> dict[str, Any] | None:
        """The `encryption` block (memories by scope, then slug), None when nothing was sealed."""
        if not self.sealed:
            return None
        return {
            "mode": MODE,
            "cipher": CIPHER,
            "kdf": {
                "name": "scrypt",
                "salt": _b64(self.salt),
                "n": SCRYPT_N,
                "r": SCRYPT_R,
                "p": SCRYPT_P,
                "length": envelope.KEY_SIZE,
            },
            "memories": sorted(self.sealed, key=lambda s: (s["scope"], s["id"])),
        }


class BadBlock(Exception):
    """What `read_block` and `open_memory` found wrong, with its JSON path (the document
    turns it into its `bad` error)."""

    def __init__(self, where: str, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem
        self.hint = hint


def read_block(value: Any) -> Encryption:
    """The `encryption` block checked whole (mode, scrypt parameters, every entry's fields
    and base64); nothing is decrypted yet."""
    if not isinstance(value, dict):
        raise BadBlock("encryption", "must be an object")
    if value.get("mode") != MODE:
        raise BadBlock(
            "encryption.mode",
            f"{value.get('mode')!r} is not known here (this memoryd reads {MODE!r})",
            hint="upgrade memoryd on this machine",
        )
    if value.get("cipher", CIPHER) != CIPHER:
        raise BadBlock("encryption.cipher", f"{value.get('cipher')!r} is not {CIPHER}")
    kdf = value.get("kdf")
    if not isinstance(kdf, dict) or kdf.get("name") != "scrypt":
        raise BadBlock("encryption.kdf", "must be an object naming scrypt")
    params = {}
    for name in ("n", "r", "p"):
        got = kdf.get(name)
        if isinstance(got, bool) or not isinstance(got, int) or got < 1:
            raise BadBlock(f"encryption.kdf.{name}", "must be a positive integer")
        params[name] = got
    n, r, p = params["n"], params["r"], params["p"]
    if n < 2 or n & (n - 1) or n > MAX_N or r > 32 or p > 16:
        raise BadBlock(
            "encryption.kdf",
            f"scrypt n={n} r={r} p={p} is out of bounds (n a power of 2 up to {MAX_N},"
            " r up to 32, p up to 16)",
        )
    salt = _unb64(kdf.get("salt"), "encryption.kdf.salt")
    if len(salt) < 8:
        raise BadBlock("encryption.kdf.salt", f"{len(salt)} bytes; a salt has at least 8")
    items = value.get("memories")
    if not isinstance(items, list):
        raise BadBlock("encryption.memories", "missing or not a list")
    memories = []
    for i, item in enumerate(items):
        where = f"encryption.memories[{i}]"
        if not isinstance(item, dict):
            raise BadBlock(where, "not a JSON object")
        slug, scope = item.get("id"), item.get("scope")
        if not isinstance(slug, str) or not slug.strip():
            raise BadBlock(f"{where}.id", "missing: the memory's slug")
        if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
            raise BadBlock(f"{where}.scope", "must be a 12-hex scope hash")
        blob = _unb64(item.get("cipher_blob"), f"{where}.cipher_blob")
        memories.append(SealedMemory(index=i, slug=slug, scope_hash=scope, blob=blob))
    return Encryption(salt=salt, n=n, r=r, p=p, memories=memories)


def _unb64(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise BadBlock(where, "missing or not a string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise BadBlock(where, "not valid base64") from exc


def key_for(block: Encryption, passphrase: str) -> ScopeKey:
    """The key the file's blobs were sealed with, if `passphrase` is the one it was
    exported with (a wrong one shows when the first blob does not open)."""
    return make_key(derive(passphrase, block.salt, block.n, block.r, block.p))


def open_memory(item: SealedMemory, key: ScopeKey) -> Memory:
    """The memory sealed in one entry; a wrong passphrase, a changed blob, or a blob moved to
    another entry is a `BadBlock` naming the entry."""
    where = f"encryption.memories[{item.index}]"
    try:
        plaintext = envelope.open_(item.blob, key, item.scope_hash, item.slug, where=where)
    except MissingKey as exc:
        raise BadBlock(
            where,
            "does not open with this passphrase (its key id differs): a wrong passphrase",
            hint="give the passphrase the file was exported with",
        ) from exc
    except EncryptedFileBroken as exc:
        raise BadBlock(
            where,
            "fails authentication: the blob, its id or its scope was changed after export",
            hint="export the file again on the other machine",
        ) from exc
    try:
        memory = parse(plaintext.decode("utf-8"), Path(where))
    except (UnicodeDecodeError, MemorydError) as exc:
        raise BadBlock(where, "opens, but holds no memory file") from exc
    if memory.meta.slug != item.slug or memory.meta.scope_hash != item.scope_hash:
        raise BadBlock(where, "the sealed memory's slug or scope differs from its entry's")
    memory.sensitive = True
    return memory
