"""Sealed captures: the hook encrypts a sensitive session for the scope's public key.

The hook must neither wait for nor hold a secret, so each sensitive scope has an X25519 key
pair: `scopes/<hash>/seal.pub` (the public key, base64, not secret) and `seal.key.enc` (the
private key, sealed by the scope key like any `.md.enc` file). A sealed box is

```
0   6   magic b"MDSEAL"
6   1   version (1)
7   32  the sender's ephemeral X25519 public key
39  12  nonce
51  ... AES-256-GCM ciphertext + tag; key = HKDF-SHA256(ECDH(ephemeral, scope public key),
        salt = ephemeral public + scope public, info = "memoryd sealed capture v1" + scope hash)
```

Stdlib at import: `cryptography` loads only when a box is made or opened, so a hook in a plain
scope pays nothing for it (measured in `bench/capture.py`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SEAL_PUB = "seal.pub"
SEAL_KEY = "seal.key.enc"
SEAL_KEY_SLUG = "seal.key"
"""The slug the private key is sealed under (its AAD), so it cannot pass for a memory."""
MAGIC = b"MDSEAL"
VERSION = 1
_PUB = 32
_NONCE = 12
HEADER_SIZE = len(MAGIC) + 1 + _PUB + _NONCE
SEALED_SUFFIX = ".sealed"


SEALED_DIR = "sealed"
"""`inbox/sealed/<scope_hash>/<slug>.sealed`: sessions of sensitive scopes waiting for the
daemon (which holds the key) to merge them into their encrypted memories."""


def sealed_capture_path(home: Path, scope_hash: str, slug: str) -> Path:
    return home / "inbox" / SEALED_DIR / scope_hash / f"{slug}{SEALED_SUFFIX}"


def waiting_captures(home: Path) -> list[tuple[str, Path]]:
    """(scope_hash, box) of every sealed capture waiting, oldest first."""
    root = home / "inbox" / SEALED_DIR
    found: list[tuple[float, str, Path]] = []
    try:
        scopes = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []
    for scope in scopes:
        for box in scope.glob(f"*{SEALED_SUFFIX}"):
            try:
                found.append((box.stat().st_mtime, scope.name, box))
            except OSError:
                continue
    return [(scope_hash, box) for _, scope_hash, box in sorted(found)]


FAILED_PAYLOAD = re.compile(r"^\d{8}T\d{6}-(?P<scope>[0-9a-f]{12})-[0-9a-f]{8}\.sealed$")
"""`inbox/failed/<when>-<scope>-<random>.sealed`: a payload the hook could not capture."""
SET_ASIDE_BOX = re.compile(r"^(?P<scope>[0-9a-f]{12})-(?P<name>[^/]+\.sealed)$")
"""`inbox/failed/<scope>-<slug>.sealed`: a sealed session the drain could not merge."""


def failed_payload_path(home: Path, scope_hash: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return home / "inbox" / "failed" / f"{stamp}-{scope_hash}-{os.urandom(4).hex()}.sealed"


def failed_scope(path: Path) -> str:
    """The scope a sealed file of `inbox/failed/` is sealed for, from its name."""
    for pattern in (FAILED_PAYLOAD, SET_ASIDE_BOX):
        found = pattern.match(path.name)
        if found:
            return found["scope"]
    raise SealError(f"{path}: not a sealed capture memoryd kept (its name says no scope)")


class SealError(Exception):
    """A sealed box that cannot be opened (named by its file); the daemon keeps it aside."""


def public_key_path(home: Path, scope_hash: str) -> Path:
    return home / "scopes" / scope_hash / SEAL_PUB


def read_public_key(home: Path, scope_hash: str) -> bytes | None:
    """The scope's public key, or None when the scope has none (not marked by this memoryd)."""
    try:
        raw = base64.b64decode(public_key_path(home, scope_hash).read_bytes().strip())
    except (OSError, ValueError):
        return None
    return raw if len(raw) == _PUB else None


def _box_key(shared: bytes, ephemeral: bytes, recipient: bytes, scope_hash: str) -> bytes:
    """HKDF-SHA256 (RFC 5869) to one 32-byte block, in the stdlib: the same bytes as
    `cryptography`'s HKDF (a test checks it) without importing its KDF modules in the hook."""
    salt = ephemeral + recipient
    info = b"memoryd sealed capture v1\0" + scope_hash.encode("ascii")
    prk = hmac.new(salt, shared, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def _x25519() -> Any:
    """The X25519 functions (`generate_key`, `from_public_bytes`, `from_private_bytes`).

    `X25519PrivateKey.generate()` and `from_public_bytes()` import the whole OpenSSL backend
    (RSA, EC, cipher modes) only to ask whether X25519 is supported, a cost in every sealed
    hook call (bench/RESULTS.md). They then call these Rust functions, which
    return the same key objects; the public API is the fallback should they move."""
    try:
        from cryptography.hazmat.bindings._rust import openssl as rust_openssl

        functions = rust_openssl.x25519
        for name in ("generate_key", "from_public_bytes", "from_private_bytes"):
            getattr(functions, name)
        return functions
    except (ImportError, AttributeError):
        from cryptography.hazmat.primitives.asymmetric.x25519 import (
            X25519PrivateKey,
            X25519PublicKey,
        )

        class _Public:
            generate_key = staticmethod(X25519PrivateKey.generate)
            from_public_bytes = staticmethod(X25519PublicKey.from_public_bytes)
            from_private_bytes = staticmethod(X25519PrivateKey.from_private_bytes)

        return _Public


def seal_for(public: bytes, plaintext: bytes, scope_hash: str) -> bytes:
    """A sealed box of `plaintext` that only the scope's private key opens."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    x25519 = _x25519()
    ephemeral = x25519.generate_key()
    ephemeral_pub: bytes = ephemeral.public_key().public_bytes_raw()
    shared: bytes = ephemeral.exchange(x25519.from_public_bytes(public))
    header = MAGIC + bytes([VERSION]) + ephemeral_pub + os.urandom(_NONCE)
    key = _box_key(shared, ephemeral_pub, public, scope_hash)
    return header + AESGCM(key).encrypt(header[-_NONCE:], plaintext, header)


def open_sealed(blob: bytes, private: bytes, scope_hash: str, where: Path | str) -> bytes:
    """The plaintext of a sealed box; `SealError` names `where` when it cannot be opened."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from memoryd.sensitive.heap import scrub_freed_heap

    scrub_freed_heap()  # this process is about to hold a sensitive plaintext
    if len(blob) < HEADER_SIZE + 16 or blob[: len(MAGIC)] != MAGIC:
        raise SealError(f"{where}: not a sealed capture, or truncated ({len(blob)} bytes)")
    if blob[len(MAGIC)] != VERSION:
        raise SealError(f"{where}: sealed capture version {blob[len(MAGIC)]} is not known here")
    start = len(MAGIC) + 1
    ephemeral_pub = blob[start : start + _PUB]
    secret = X25519PrivateKey.from_private_bytes(private)
    recipient = secret.public_key().public_bytes_raw()
    shared = secret.exchange(X25519PublicKey.from_public_bytes(ephemeral_pub))
    key = _box_key(shared, ephemeral_pub, recipient, scope_hash)
    try:
        return AESGCM(key).decrypt(
            blob[HEADER_SIZE - _NONCE : HEADER_SIZE], blob[HEADER_SIZE:], blob[:HEADER_SIZE]
        )
    except InvalidTag as exc:
        raise SealError(
            f"{where}: sealed capture fails authentication (changed, truncated, or sealed for"
            " another scope's key)"
        ) from exc
