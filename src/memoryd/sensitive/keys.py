"""Scope keys: where each sensitive scope's 256-bit key lives, and how to get it back.

A scope's `key.json` (in `scopes/<hash>/`, never secret) lists its keys by id and says where
each one is: `keyring` (a random key in the OS keyring, service `memoryd-sensitive`, user
`<scope_hash>:<key id>`) or `passphrase` (derived with scrypt from a passphrase and the salt
stored here: for machines without a keyring, and for sync). `current` is the key new files
are sealed with; a file's header names its own key, so a rotation cut short still reads.

The passphrase comes from a `PassphraseSource` (the CLI asks for it; the daemon reads
`MEMORYD_SENSITIVE_PASSPHRASE`). Keys are cached for the life of the `KeyStore`.
`keyring` is imported only when a key is needed: the capture hook never loads it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd import jsondepth
from memoryd.errors import InvalidInput, KeyringUnavailable, MissingKey, StorageError
from memoryd.keyrings import backend_name, real_backends
from memoryd.sensitive.envelope import KEY_SIZE, ScopeKey
from memoryd.vault import atomic_write

KEYRING_SERVICE = "memoryd-sensitive"
KEY_FILE = "key.json"
PASSPHRASE_ENV = "MEMORYD_SENSITIVE_PASSPHRASE"
EXPORT_FORMAT = "memoryd-scope-keys"
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1

PassphraseSource = Callable[[str], str | None]
"""scope_hash → the passphrase of that scope's passphrase-mode key, or None when unknown."""


def env_passphrase(scope_hash: str) -> str | None:
    """The daemon's source: one passphrase for every passphrase-mode scope, from the env."""
    return os.environ.get(PASSPHRASE_ENV) or None


def key_id(secret: bytes) -> bytes:
    """A key's public name: 8 bytes of a domain-separated hash (says nothing about the key)."""
    return hashlib.sha256(b"memoryd scope key id\0" + secret).digest()[:8]


def make_key(secret: bytes) -> ScopeKey:
    if len(secret) != KEY_SIZE:
        raise InvalidInput(f"a scope key is {KEY_SIZE} bytes, got {len(secret)}")
    return ScopeKey(key_id=key_id(secret), secret=secret)


def derive(passphrase: str, salt: bytes, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = 1) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    if not passphrase:
        raise InvalidInput("the passphrase is empty", hint="give a non-empty passphrase")
    return Scrypt(salt=salt, length=KEY_SIZE, n=n, r=r, p=p).derive(passphrase.encode("utf-8"))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise InvalidInput(f"{what} is not valid base64") from exc


@dataclass
class KeyFile:
    """`scopes/<hash>/key.json`: the scope's keys by hex id and the current one."""

    current: str
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        data = {"version": 1, "current": self.current, "keys": self.keys}
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


class KeyStore:
    """Every sensitive scope's keys on this machine (the keyring, or passphrase + salt)."""

    def __init__(self, home: Path, passphrase: PassphraseSource | None = env_passphrase) -> None:
        self.home = home
        self.passphrase = passphrase
        self._cache: dict[tuple[str, bytes], ScopeKey] = {}
        self._current: dict[str, tuple[tuple[int, int, int], bytes]] = {}
        """scope → (key.json's inode, mtime, size when read, the current key id)."""
        self._lock = threading.Lock()

    # -- key.json -------------------------------------------------------------------------
    def key_file_path(self, scope_hash: str) -> Path:
        return self.home / "scopes" / scope_hash / KEY_FILE

    def read_key_file(self, scope_hash: str) -> KeyFile | None:
        path = self.key_file_path(scope_hash)
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StorageError(
                f"{path}: unreadable ({exc})",
                hint="restore key.json from a backup, or import the key again with"
                " `memoryd sensitive import-key`",
            ) from exc
        if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
            raise StorageError(f"{path}: not a memoryd key file (no `keys` mapping)")
        return KeyFile(current=str(data.get("current", "")), keys=dict(data["keys"]))

    def write_key_file(self, scope_hash: str, keys: KeyFile) -> None:
        atomic_write(self.key_file_path(scope_hash), keys.to_json())

    def has_keys(self, scope_hash: str) -> bool:
        return self.key_file_path(scope_hash).is_file()

    # -- reading keys ---------------------------------------------------------------------
    def current(self, scope_hash: str) -> ScopeKey:
        """The key new files of this scope are sealed with (key.json is read again only when
        it changed: a bulk seal asks once per file)."""
        path = self.key_file_path(scope_hash)
        try:
            stat = path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            known = self._current.get(scope_hash)
        if stamp is not None and known is not None and known[0] == stamp:
            return self.get(scope_hash, known[1])
        keys = self.read_key_file(scope_hash)
        if keys is None or not keys.current:
            raise MissingKey(f"sensitive scope {scope_hash} has no key file ({KEY_FILE})")
        wanted = bytes.fromhex(keys.current)
        key = self.get(scope_hash, wanted)
        if stamp is not None:
            with self._lock:
                self._current[scope_hash] = (stamp, wanted)
        return key

    def get(self, scope_hash: str, wanted: bytes) -> ScopeKey:
        """The key with this id, from the cache, the keyring or the passphrase."""
        with self._lock:
            cached = self._cache.get((scope_hash, wanted))
        if cached is not None:
            return cached
        keys = self.read_key_file(scope_hash)
        entry = (keys.keys.get(wanted.hex()) if keys else None) or {"mode": "keyring"}
        try:
            secret = _keyring_get(f"{scope_hash}:{wanted.hex()}")
        except MissingKey:
            if entry.get("mode") != "passphrase":
                raise
            secret = None  # a passphrase key needs no keyring
        if secret is None and entry.get("mode") == "passphrase":
            secret = self._from_passphrase(scope_hash, entry, wanted)
        if secret is None:
            raise MissingKey(
                f"the key {wanted.hex()} of sensitive scope {scope_hash} is not on this machine"
                f" (no keyring entry {KEYRING_SERVICE}/{scope_hash}:{wanted.hex()})"
                + (
                    f" and no passphrase in {PASSPHRASE_ENV}"
                    if entry["mode"] == "passphrase"
                    else ""
                )
            )
        key = make_key(secret)
        if key.key_id != wanted:
            raise MissingKey(
                f"the key found for sensitive scope {scope_hash} is not key {wanted.hex()}"
                " (a wrong passphrase, or a keyring entry from another machine)",
                hint="give the right passphrase, or import the exported key with"
                " `memoryd sensitive import-key`",
            )
        self._remember(scope_hash, key)
        return key

    def _from_passphrase(
        self, scope_hash: str, entry: dict[str, Any], wanted: bytes
    ) -> bytes | None:
        phrase = self.passphrase(scope_hash) if self.passphrase is not None else None
        if not phrase:
            return None
        salt = _unb64(str(entry.get("salt", "")), f"the salt of key {wanted.hex()}")
        return derive(
            phrase,
            salt,
            int(entry.get("n", SCRYPT_N)),
            int(entry.get("r", SCRYPT_R)),
            int(entry.get("p", SCRYPT_P)),
        )

    def _remember(self, scope_hash: str, key: ScopeKey) -> None:
        with self._lock:
            self._cache[(scope_hash, key.key_id)] = key

    # -- making keys ----------------------------------------------------------------------
    def create(self, scope_hash: str, *, passphrase: str | None = None) -> ScopeKey:
        """A new key for the scope, listed in key.json (made current when there is none).

        Keyring mode fails with `KeyringUnavailable` (suggesting `--passphrase`) when no
        keyring backend can keep it; nothing is written then."""
        keys = self.read_key_file(scope_hash) or KeyFile(current="")
        if passphrase is not None:
            salt = os.urandom(16)
            key = make_key(derive(passphrase, salt))
            entry: dict[str, Any] = {
                "mode": "passphrase",
                "salt": _b64(salt),
                "n": SCRYPT_N,
                "r": SCRYPT_R,
                "p": SCRYPT_P,
            }
        else:
            key = make_key(os.urandom(KEY_SIZE))
            _keyring_store(f"{scope_hash}:{key.key_id.hex()}", key.secret)
            entry = {"mode": "keyring"}
        keys.keys[key.key_id.hex()] = entry
        if not keys.current:
            keys.current = key.key_id.hex()
        self.write_key_file(scope_hash, keys)
        self._remember(scope_hash, key)
        return key

    def make_current(self, scope_hash: str, key: ScopeKey) -> None:
        keys = self.read_key_file(scope_hash)
        if keys is None or key.key_id.hex() not in keys.keys:
            raise MissingKey(f"key {key.key_id.hex()} is not a key of scope {scope_hash}")
        keys.current = key.key_id.hex()
        self.write_key_file(scope_hash, keys)

    def drop(self, scope_hash: str, key: ScopeKey) -> None:
        """Forget a key no file uses any more (after a rotation, or an unmark)."""
        keys = self.read_key_file(scope_hash)
        if keys is not None:
            keys.keys.pop(key.key_id.hex(), None)
            if keys.current == key.key_id.hex():
                keys.current = ""
            if keys.keys:
                self.write_key_file(scope_hash, keys)
            else:
                self.key_file_path(scope_hash).unlink(missing_ok=True)
        _keyring_delete(f"{scope_hash}:{key.key_id.hex()}")
        with self._lock:
            self._cache.pop((scope_hash, key.key_id), None)

    # -- export and import ----------------------------------------------------------------
    def export_keys(self, scope_hash: str, passphrase: str) -> bytes:
        """Every key of the scope, wrapped by a key derived from `passphrase` (a backup)."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        keys = self.read_key_file(scope_hash)
        if keys is None:
            raise MissingKey(f"sensitive scope {scope_hash} has no keys to export")
        salt = os.urandom(16)
        wrap = AESGCM(derive(passphrase, salt))
        wrapped = []
        for hex_id in sorted(keys.keys):
            key = self.get(scope_hash, bytes.fromhex(hex_id))
            nonce = os.urandom(12)
            sealed = wrap.encrypt(nonce, key.secret, f"{scope_hash}:{hex_id}".encode())
            wrapped.append({"id": hex_id, "wrapped": _b64(nonce + sealed)})
        data = {
            "format": EXPORT_FORMAT,
            "version": 1,
            "scope_hash": scope_hash,
            "kdf": {"salt": _b64(salt), "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P},
            "current": keys.current,
            "key_file": keys.keys,
            "keys": wrapped,
        }
        return (json.dumps(data, indent=2) + "\n").encode("utf-8")

    def import_keys(self, scope_hash: str, exported: bytes, passphrase: str) -> list[str]:
        """Put the exported keys into this machine's keyring; returns their ids."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            data = jsondepth.loads(exported)
        except jsondepth.TooDeep as exc:
            raise InvalidInput(f"the key file is not a key export: {exc}") from None
        except ValueError as exc:
            raise InvalidInput("the key file is not JSON (was it made by export-key?)") from exc
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise InvalidInput("not a memoryd key export (made by `memoryd sensitive export-key`)")
        if data.get("scope_hash") != scope_hash:
            raise InvalidInput(
                f"the key file holds the keys of scope {data.get('scope_hash')}, not {scope_hash}",
                hint="import it for the project it was exported from",
            )
        kdf = data["kdf"]
        wrap = AESGCM(
            derive(
                passphrase, _unb64(kdf["salt"], "the export's salt"), kdf["n"], kdf["r"], kdf["p"]
            )
        )
        imported: list[ScopeKey] = []
        for item in data["keys"]:
            blob = _unb64(item["wrapped"], f"key {item['id']}")
            try:
                secret = wrap.decrypt(blob[:12], blob[12:], f"{scope_hash}:{item['id']}".encode())
            except InvalidTag as exc:
                raise MissingKey(
                    "the passphrase does not open this key file (or the file was changed)",
                    hint="give the passphrase used with `memoryd sensitive export-key`",
                ) from exc
            key = make_key(secret)
            if key.key_id.hex() != item["id"]:
                raise InvalidInput(f"key {item['id']} in the key file does not match its id")
            imported.append(key)
        for key in imported:
            _keyring_store(f"{scope_hash}:{key.key_id.hex()}", key.secret)
            self._remember(scope_hash, key)
        keys = self.read_key_file(scope_hash) or KeyFile(current=str(data.get("current", "")))
        for key in imported:
            keys.keys[key.key_id.hex()] = {"mode": "keyring"}
        self.write_key_file(scope_hash, keys)
        return [k.key_id.hex() for k in imported]


# -- the OS keyring ---------------------------------------------------------------------
REAL_KEYRING_HINT = (
    "install or unlock a real OS keyring (Secret Service: GNOME Keyring or KWallet on Linux,"
    " the macOS Keychain, the Windows Credential Locker), or derive the key from a passphrase"
    " with `memoryd sensitive mark PATH --passphrase`"
)


def _refuse(refused: list[str], doing: str) -> KeyringUnavailable:
    return KeyringUnavailable(
        f"refusing to {doing} a scope key: the only keyring backend is "
        + "; ".join(refused or ["none"]),
        hint=REAL_KEYRING_HINT,
    )


def _keyring_get(user: str) -> bytes | None:
    """The key from a real keyring, None when none holds it. A plaintext keyring is refused
    (`MissingKey`, so every reader treats the scope as keyless, data untouched): a key there
    was kept where it must not be."""
    import keyring.errors

    real, refused = real_backends()
    if not real and any(name.startswith("keyrings.alt.file.Plaintext") for name in refused):
        raise MissingKey(
            "refusing to read a scope key from the keyring backend " + "; ".join(refused),
            hint=f"{REAL_KEYRING_HINT}; move the entry {KEYRING_SERVICE}/{user} into the real"
            " keyring (`keyring get` / `keyring set`) and delete it from the plaintext file,"
            " or import the key with `memoryd sensitive import-key`",
        )
    value = None
    for backend in real:
        try:
            value = backend.get_password(KEYRING_SERVICE, user)
        except keyring.errors.KeyringError:
            continue
        if value:
            break
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return None


def _keyring_store(user: str, secret: bytes) -> None:
    """Keep the key in the best real keyring, read it back; refuse a plaintext, null or fail
    backend (even when a chainer would fall back to one) with the fix in the hint."""
    import keyring.errors

    real, refused = real_backends()
    if not real:
        raise _refuse(refused, "store")
    errors: list[str] = []
    for backend in real:
        try:
            backend.set_password(KEYRING_SERVICE, user, _b64(secret))
            stored = backend.get_password(KEYRING_SERVICE, user)
        except (keyring.errors.KeyringError, NotImplementedError) as exc:
            errors.append(f"{backend_name(backend)}: {type(exc).__name__}: {exc}")
            continue
        if stored != _b64(secret):
            raise KeyringUnavailable(
                f"the OS keyring {backend_name(backend)} did not keep the scope key"
                " (read back differs)"
            )
        return
    raise KeyringUnavailable(
        f"no usable OS keyring to keep the scope key in ({'; '.join(errors)})",
        hint=REAL_KEYRING_HINT,
    )


def _keyring_delete(user: str) -> None:
    """Forget the key everywhere the backend (or its chain) may hold it, plaintext included."""
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(KEYRING_SERVICE, user)
    except (keyring.errors.KeyringError, NotImplementedError):
        return  # already gone (PasswordDeleteError), or no keyring: nothing to delete
