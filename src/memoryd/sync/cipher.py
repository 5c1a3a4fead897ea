"""Sensitive memories in memories.json: sealed whole, under a key made from a passphrase.

A sensitive memory never goes to `memories[]` (mcp-memory-service's reader sees only that
list, FORMATS.md §1.10 rule 6); it is the `cipher_blob` of one entry of the top-level
`encryption` block:

```
"encryption": {"mode": "passphrase", "cipher": "AES-256-GCM", "version": 2,
               "nonce": "hmac-sha256-synthetic",
               "kdf": {"name": "scrypt", "salt": b64, "n": 32768, "r": 8, "p": 1, "length": 32},
               "memories": [{"id": slug, "scope": scope_hash, "cipher_blob": b64,
                             "open_conflicts": [{"source": machine, "body_hmac": hex}]}, ...]}
```

The blob is the `.md.enc` envelope (`sensitive.envelope`: header with the key id and the
nonce, AES-256-GCM, AAD = header + scope hash + slug) of the whole memory file (frontmatter
and body), so a blob moved to another slug or scope, or one changed byte, fails to open.

Version 2 is deterministic: the same state gives the same block, byte for byte (issue 18),
without weakening what version 1 gave:
- The scrypt salt is the data dir's own (`<home>/sync/export-salt`: 16 random bytes drawn at
  its first sealed export, public in every file). A salt makes each passphrase guess
  specific to one target; a per-dir salt does that as well as a per-export one. What it
  gives up is only that two exports of one data dir are seen to be under one key, which
  byte-identical files show anyway. (A read-only service with no salt yet draws a random
  one and does not keep it: that export is not reproducible.)
- scrypt's output is a master key, never used directly: HKDF-SHA256 expands it into the
  AES-256-GCM key, the nonce key and the conflict-mark key (one key per use).
- The nonce is synthetic, as in SIV (RFC 5297) and AES-GCM-SIV: the first 96 bits of
  HMAC-SHA256(nonce key, scope, slug, plaintext). GCM breaks when one nonce seals two
  different plaintexts under one key; here two blobs share a nonce only when they seal the
  same scope, slug and plaintext, and then they are the same blob. Two different ones
  collide only on a 96-bit HMAC collision (about 2^-63 for 100k memories). What an
  observer of two files learns is which memories changed between them, which a diff of
  deterministic exports is meant to show, and nothing about their content.
- A sealed memory's open conflicts (`_conflicts/<slug>.<machine>.md.enc` on the exporting
  side) travel as HMAC-SHA256(conflict key, slug, body) per disputed body, where a plain
  memory carries the body's sha256: the importing side, which has the passphrase, can
  tell whether its body is one of them; anyone else learns only that the slug has a
  conflict (a bare hash would let a guessed body be confirmed).

Version 1 files (no `version`: scrypt's output is the AES key, random salt and nonces, no
conflict marks) are still read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.errors import EncryptedFileBroken, MemorydError, MissingKey
from memoryd.models import Memory
from memoryd.sensitive import envelope
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.keys import SCRYPT_N, SCRYPT_P, SCRYPT_R, derive, make_key
from memoryd.vault import atomic_write, parse, render

logger = logging.getLogger(__name__)

MODE = "passphrase"
CIPHER = "AES-256-GCM"
VERSION = 2
NONCE = "hmac-sha256-synthetic"
SALT_BYTES = 16
SALT_FILE = Path("sync") / "export-salt"
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
    conflicts: tuple[str, ...] = ()
    """`body_hmac` of each body the exporting side holds an open conflict with."""


@dataclass(frozen=True)
class Encryption:
    """The `encryption` block of a file, checked, its memories still sealed."""

    salt: bytes
    n: int
    r: int
    p: int
    memories: list[SealedMemory]
    version: int = 1


@dataclass(frozen=True)
class FileKeys:
    """The keys of one file's block: the AEAD key, and (version 2) the nonce and
    conflict-mark keys expanded beside it."""

    aead: ScopeKey
    nonce: bytes = b""
    conflict: bytes = b""

    def __repr__(self) -> str:  # never print a secret
        return f"FileKeys({self.aead!r})"

    def conflict_mark(self, slug: str, body: str) -> str:
        """What a disputed body of `slug` is named by in the file (not its hash: see above)."""
        text = f"{slug}\0{body}".encode()
        return hmac.new(self.conflict, text, hashlib.sha256).hexdigest()

    def synthetic_nonce(self, scope_hash: str, slug: str, plaintext: bytes) -> bytes:
        mac = hmac.new(self.nonce, f"{scope_hash}\0{slug}\0".encode(), hashlib.sha256)
        mac.update(plaintext)
        return mac.digest()[: envelope.NONCE_SIZE]


def _expand(master: bytes, purpose: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    info = f"memoryd sync v{VERSION} {purpose}".encode()
    return HKDFExpand(algorithm=hashes.SHA256(), length=envelope.KEY_SIZE, info=info).derive(master)


def file_keys(master: bytes, version: int) -> FileKeys:
    """The keys scrypt's output gives: itself as the AES key in version 1, three keys
    expanded from it (HKDF-SHA256, one per use) in version 2."""
    if version == 1:
        return FileKeys(aead=make_key(master))
    return FileKeys(
        aead=make_key(_expand(master, "aead")),
        nonce=_expand(master, "nonce"),
        conflict=_expand(master, "conflict mark"),
    )


def home_salt(home: Path, *, keep: bool) -> bytes:
    """The data dir's export salt, drawn and kept (`keep`) at its first sealed export."""
    path = home / SALT_FILE
    try:
        salt = path.read_bytes()
        if len(salt) == SALT_BYTES:
            return salt
        logger.warning("%s is not %d bytes: drawing a new export salt", path, SALT_BYTES)
    except FileNotFoundError:
        pass
    salt = os.urandom(SALT_BYTES)
    if keep:
        atomic_write(path, salt)
    return salt


class Sealer:
    """Seals the sensitive memories of one export under one passphrase-derived key, the
    same bytes for the same memories (version 2, above)."""

    def __init__(self, passphrase: str, salt: bytes) -> None:
        self.salt = salt
        self.keys = file_keys(derive(passphrase, self.salt), VERSION)
        self.sealed: list[dict[str, Any]] = []

    def add(self, memory: Memory, conflicts: Sequence[tuple[str, str]] = ()) -> None:
        """Seal one memory; `conflicts` are the (machine, body) of its open conflicts here."""
        meta = memory.meta
        plaintext = render(memory).encode("utf-8")
        nonce = self.keys.synthetic_nonce(meta.scope_hash, meta.slug, plaintext)
        blob = envelope.seal(plaintext, self.keys.aead, meta.scope_hash, meta.slug, nonce=nonce)
        entry: dict[str, Any] = {"id": meta.slug, "scope": meta.scope_hash}
        entry["cipher_blob"] = _b64(blob)
        if conflicts:
            entry["open_conflicts"] = [
                {"source": source, "body_hmac": self.keys.conflict_mark(meta.slug, body)}
                for source, body in sorted(conflicts)
            ]
        self.sealed.append(entry)

    def block(self) -> dict[str, Any] | None:
        """The `encryption` block (memories by scope, then slug), None when nothing was sealed."""
        if not self.sealed:
            return None
        return {
            "mode": MODE,
            "cipher": CIPHER,
            "version": VERSION,
            "nonce": NONCE,
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
    version = _version(value.get("version", 1))
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
        conflicts = _conflict_marks(item.get("open_conflicts"), f"{where}.open_conflicts")
        memories.append(
            SealedMemory(index=i, slug=slug, scope_hash=scope, blob=blob, conflicts=conflicts)
        )
    return Encryption(salt=salt, n=n, r=r, p=p, memories=memories, version=version)


def _version(version: Any) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BadBlock("encryption.version", "must be a positive integer")
    if version > VERSION:
        raise BadBlock(
            "encryption.version",
            f"{version} is from a newer memoryd (this one reads up to {VERSION})",
            hint="upgrade memoryd on this machine, then import again",
        )
    return version


def _conflict_marks(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    marks = []
    for i, entry in enumerate(value if isinstance(value, list) else [None]):
        mark = entry.get("body_hmac") if isinstance(entry, dict) else None
        if not isinstance(mark, str) or not re.fullmatch(r"[0-9a-f]{64}", mark):
            raise BadBlock(f"{where}[{i}]", "must be an object with body_hmac (64 hex digits)")
        marks.append(mark)
    return tuple(marks)


def _unb64(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise BadBlock(where, "missing or not a string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise BadBlock(where, "not valid base64") from exc


def key_for(block: Encryption, passphrase: str) -> FileKeys:
    """The keys the file's blobs were sealed with, if `passphrase` is the one it was
    exported with (a wrong one shows when the first blob does not open)."""
    return file_keys(derive(passphrase, block.salt, block.n, block.r, block.p), block.version)


def open_memory(item: SealedMemory, keys: FileKeys) -> Memory:
    """The memory sealed in one entry; a wrong passphrase, a changed blob, or a blob moved to
    another entry is a `BadBlock` naming the entry."""
    where = f"encryption.memories[{item.index}]"
    try:
        plaintext = envelope.open_(item.blob, keys.aead, item.scope_hash, item.slug, where=where)
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
