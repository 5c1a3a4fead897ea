"""Scope keys and the `.md.enc` envelope: round trips, every way a file can be wrong, and the
keyring / passphrase / export-import paths of a key."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends.chainer import ChainerBackend
from keyring.backends.fail import Keyring as FailKeyring
from keyring.backends.null import Keyring as NullKeyring
from keyrings.alt.file import PlaintextKeyring

from memoryd.errors import EncryptedFileBroken, InvalidInput, KeyringUnavailable, MissingKey
from memoryd.sensitive import envelope, sealed
from memoryd.sensitive.envelope import HEADER_SIZE, ScopeKey
from memoryd.sensitive.keys import PASSPHRASE_ENV, KeyStore, make_key

SCOPE = "a1b2c3d4e5f6"
OTHER_SCOPE = "0123456789ab"
TEXT = b"---\ntitle: client ACME-7731 ledger\nslug: x\n---\n\nbody: host vault-7731.internal\n"


def key() -> ScopeKey:
    return make_key(os.urandom(32))


def test_seal_and_open_round_trip_with_a_fresh_nonce_each_time() -> None:
    k = key()
    one = envelope.seal(TEXT, k, SCOPE, "2026-01-01-s-aa")
    two = envelope.seal(TEXT, k, SCOPE, "2026-01-01-s-aa")
    assert one[: HEADER_SIZE - 12] == two[: HEADER_SIZE - 12]  # magic, version, key id
    assert one != two  # the nonce differs
    assert b"ACME" not in one
    assert envelope.open_(one, k, SCOPE, "2026-01-01-s-aa") == TEXT
    header = envelope.read_header(one, "f.md.enc")
    assert header.version == 1
    assert header.key_id == k.key_id


@pytest.mark.parametrize("position", [0, 5, 6, 14, HEADER_SIZE, -1])
def test_a_flipped_byte_anywhere_is_a_typed_error_naming_the_file(position: int) -> None:
    k = key()
    blob = bytearray(envelope.seal(TEXT, k, SCOPE, "s1"))
    blob[position] ^= 0x01
    with pytest.raises((EncryptedFileBroken, MissingKey)) as caught:
        envelope.open_(bytes(blob), k, SCOPE, "s1", where=Path("/v/s1.md.enc"))
    assert "/v/s1.md.enc" in str(caught.value)


@pytest.mark.parametrize("keep", [0, 10, HEADER_SIZE, HEADER_SIZE + 15, -1])
def test_a_truncated_file_is_a_typed_error_naming_the_file(keep: int) -> None:
    k = key()
    blob = envelope.seal(TEXT, k, SCOPE, "s1")
    with pytest.raises(EncryptedFileBroken, match=r"/v/s1\.md\.enc"):
        envelope.open_(blob[:keep], k, SCOPE, "s1", where="/v/s1.md.enc")


def test_a_wrong_key_is_named_as_such() -> None:
    blob = envelope.seal(TEXT, key(), SCOPE, "s1")
    with pytest.raises(MissingKey, match=r"f\.md\.enc: sealed with key"):
        envelope.open_(blob, key(), SCOPE, "s1", where="f.md.enc")


def test_a_wrong_key_with_the_same_id_fails_authentication() -> None:
    k = key()
    forged = ScopeKey(key_id=k.key_id, secret=os.urandom(32))
    blob = envelope.seal(TEXT, k, SCOPE, "s1")
    with pytest.raises(EncryptedFileBroken, match="fails authentication"):
        envelope.open_(blob, forged, SCOPE, "s1", where="f.md.enc")


def test_aad_binds_slug_and_scope_so_swapped_files_do_not_open() -> None:
    k = key()
    first = envelope.seal(b"first", k, SCOPE, "slug-a")
    second = envelope.seal(b"second", k, SCOPE, "slug-b")
    with pytest.raises(EncryptedFileBroken, match="another slug or scope"):
        envelope.open_(second, k, SCOPE, "slug-a", where="slug-a.md.enc")
    with pytest.raises(EncryptedFileBroken):
        envelope.open_(first, k, OTHER_SCOPE, "slug-a", where="slug-a.md.enc")
    assert envelope.open_(first, k, SCOPE, "slug-a") == b"first"


def test_an_unknown_version_says_to_upgrade() -> None:
    k = key()
    blob = bytearray(envelope.seal(TEXT, k, SCOPE, "s1"))
    blob[5] = 9
    with pytest.raises(EncryptedFileBroken, match="version 9") as caught:
        envelope.read_header(bytes(blob), "f.md.enc")
    assert "upgrade" in caught.value.hint


def test_the_key_repr_never_shows_the_secret() -> None:
    k = key()
    assert k.secret.hex() not in repr(k)
    assert k.key_id.hex() in repr(k)


# -- the keystore ---------------------------------------------------------------------------
def test_keyring_key_is_created_kept_and_read_back(tmp_path: Path, file_keyring: object) -> None:
    store = KeyStore(tmp_path)
    made = store.create(SCOPE)
    again = KeyStore(tmp_path).current(SCOPE)  # a new process: from the keyring, not a cache
    assert again == made
    stored = (tmp_path / "scopes" / SCOPE / "key.json").read_text()
    assert made.secret.hex() not in stored
    assert made.key_id.hex() in stored


def test_no_keyring_backend_fails_clearly_and_suggests_passphrase(
    tmp_path: Path, no_keyring: None
) -> None:
    with pytest.raises(KeyringUnavailable) as caught:
        KeyStore(tmp_path).create(SCOPE)
    assert "--passphrase" in caught.value.hint
    assert not (tmp_path / "scopes" / SCOPE / "key.json").exists()


def test_passphrase_key_is_derived_from_the_stored_salt(
    tmp_path: Path, no_keyring: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = KeyStore(tmp_path).create(SCOPE, passphrase="correct horse")
    with pytest.raises(MissingKey) as caught:  # no passphrase given: missing, data untouched
        KeyStore(tmp_path).current(SCOPE)
    assert "import-key" in caught.value.hint
    assert PASSPHRASE_ENV in caught.value.message
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    assert KeyStore(tmp_path).current(SCOPE) == made
    with pytest.raises(MissingKey, match="wrong passphrase"):
        KeyStore(tmp_path, passphrase=lambda _scope: "wrong horse").current(SCOPE)


def test_missing_key_names_import_key(tmp_path: Path, file_keyring: object) -> None:
    store = KeyStore(tmp_path)
    made = store.create(SCOPE)
    file_keyring.delete_password("memoryd-sensitive", f"{SCOPE}:{made.key_id.hex()}")  # type: ignore[attr-defined]
    with pytest.raises(MissingKey) as caught:
        KeyStore(tmp_path).current(SCOPE)
    assert "memoryd sensitive import-key" in caught.value.hint
    assert SCOPE in caught.value.message


def test_export_and_import_move_a_key_to_a_wiped_keyring(
    tmp_path: Path, file_keyring: object
) -> None:
    store = KeyStore(tmp_path)
    made = store.create(SCOPE)
    exported = store.export_keys(SCOPE, "backup phrase")
    assert made.secret.hex() not in exported.decode()
    store.drop(SCOPE, made)  # the keyring and key.json forget it: a new machine
    with pytest.raises(InvalidInput, match="not " + OTHER_SCOPE):
        KeyStore(tmp_path).import_keys(OTHER_SCOPE, exported, "backup phrase")
    with pytest.raises(MissingKey, match="passphrase does not open"):
        KeyStore(tmp_path).import_keys(SCOPE, exported, "wrong phrase")
    assert KeyStore(tmp_path).import_keys(SCOPE, exported, "backup phrase") == [made.key_id.hex()]
    assert KeyStore(tmp_path).current(SCOPE) == made


def test_a_rotated_key_keeps_the_old_one_until_dropped(
    tmp_path: Path, file_keyring: object
) -> None:
    store = KeyStore(tmp_path)
    old = store.create(SCOPE)
    new = store.create(SCOPE)
    assert store.current(SCOPE) == old  # a second key is not current until made so
    store.make_current(SCOPE, new)
    assert KeyStore(tmp_path).current(SCOPE) == new
    assert KeyStore(tmp_path).get(SCOPE, old.key_id) == old
    store.drop(SCOPE, old)
    with pytest.raises(MissingKey):
        KeyStore(tmp_path).get(SCOPE, old.key_id)


class _MemoryKeyring(KeyringBackend):
    """Stands in for an OS keyring (Secret Service, Keychain) in a chain: keeps keys in memory."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.kept.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.kept[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.kept.pop((service, username), None)


@pytest.fixture
def plaintext_keyring(tmp_path: Path) -> Iterator[PlaintextKeyring]:
    """keyrings.alt's plaintext file backend, as the dev extras install it: not allowed."""
    previous = keyring.get_keyring()
    ring = PlaintextKeyring()
    ring.file_path = str(tmp_path / "python_keyring" / "keyring_pass.cfg")
    keyring.set_keyring(ring)
    try:
        yield ring
    finally:
        keyring.set_keyring(previous)


def test_a_plaintext_keyring_is_refused_and_keeps_no_key(
    tmp_path: Path, plaintext_keyring: PlaintextKeyring
) -> None:
    with pytest.raises(KeyringUnavailable) as caught:
        KeyStore(tmp_path).create(SCOPE)
    assert "keyrings.alt.file.PlaintextKeyring" in caught.value.message
    assert "--passphrase" in caught.value.hint
    assert "Secret Service" in caught.value.hint
    assert not Path(plaintext_keyring.file_path).exists()
    assert not (tmp_path / "scopes" / SCOPE / "key.json").exists()
    # A key someone put there already is not read from it either; a passphrase key still opens.
    made = KeyStore(tmp_path).create(SCOPE, passphrase="pass phrase")
    plaintext_keyring.set_password("memoryd-sensitive", f"{SCOPE}:{'00' * 8}", "AAAA")
    with pytest.raises(MissingKey, match="PlaintextKeyring"):
        KeyStore(tmp_path).get(SCOPE, bytes(8))
    assert KeyStore(tmp_path, passphrase=lambda _s: "pass phrase").current(SCOPE) == made


def test_a_null_keyring_is_refused(tmp_path: Path) -> None:
    previous = keyring.get_keyring()
    keyring.set_keyring(NullKeyring())
    try:
        with pytest.raises(KeyringUnavailable, match=r"null\.Keyring"):
            KeyStore(tmp_path).create(SCOPE)
    finally:
        keyring.set_keyring(previous)


def test_a_chain_keeps_the_key_in_its_real_keyring_never_the_plaintext_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = PlaintextKeyring()
    plain.file_path = str(tmp_path / "keyring_pass.cfg")
    real = _MemoryKeyring()
    previous = keyring.get_keyring()
    chainer = ChainerBackend()
    monkeypatch.setattr(ChainerBackend, "backends", [plain, real])  # plaintext ranked first
    keyring.set_keyring(chainer)
    try:
        made = KeyStore(tmp_path).create(SCOPE)
        assert KeyStore(tmp_path).current(SCOPE) == made
        assert list(real.kept) == [("memoryd-sensitive", f"{SCOPE}:{made.key_id.hex()}")]
        assert not Path(plain.file_path).exists()
        monkeypatch.setattr(ChainerBackend, "backends", [plain, FailKeyring()])
        with pytest.raises(KeyringUnavailable) as caught:
            KeyStore(tmp_path).create(OTHER_SCOPE)
        assert "PlaintextKeyring" in caught.value.message
        assert "fail.Keyring" in caught.value.message
        assert not Path(plain.file_path).exists()
    finally:
        keyring.set_keyring(previous)


# -- sealed captures ------------------------------------------------------------------------
def test_a_sealed_box_opens_only_with_the_scope_private_key() -> None:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    private = X25519PrivateKey.generate()
    public = private.public_key().public_bytes_raw()
    box = sealed.seal_for(public, TEXT, SCOPE)
    assert b"ACME" not in box
    assert sealed.open_sealed(box, private.private_bytes_raw(), SCOPE, "b.sealed") == TEXT
    with pytest.raises(sealed.SealError, match=r"b\.sealed"):
        sealed.open_sealed(box, X25519PrivateKey.generate().private_bytes_raw(), SCOPE, "b.sealed")
    with pytest.raises(sealed.SealError, match="another scope"):
        sealed.open_sealed(box, private.private_bytes_raw(), OTHER_SCOPE, "b.sealed")
    with pytest.raises(sealed.SealError, match="truncated"):
        sealed.open_sealed(box[:40], private.private_bytes_raw(), SCOPE, "b.sealed")


def test_the_stdlib_hkdf_of_sealed_boxes_is_cryptographys() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    for n in range(20):
        shared, ephemeral, recipient = bytes([n]) * 32, bytes([n + 1]) * 32, bytes([n + 2]) * 32
        expected = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=ephemeral + recipient,
            info=b"memoryd sealed capture v1\0" + SCOPE.encode("ascii"),
        ).derive(shared)
        assert sealed._box_key(shared, ephemeral, recipient, SCOPE) == expected


def test_a_box_sealed_through_the_public_x25519_api_opens() -> None:
    """Boxes already on disk were made with `X25519PrivateKey.generate()` and
    `cryptography`'s HKDF: they still open."""
    import os

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    private = X25519PrivateKey.generate()
    public = private.public_key().public_bytes_raw()
    ephemeral = X25519PrivateKey.generate()
    ephemeral_pub = ephemeral.public_key().public_bytes_raw()
    shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(public))
    header = sealed.MAGIC + bytes([sealed.VERSION]) + ephemeral_pub + os.urandom(12)
    key = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=ephemeral_pub + public,
        info=b"memoryd sealed capture v1\0" + SCOPE.encode("ascii"),
    ).derive(shared)
    box = header + AESGCM(key).encrypt(header[-12:], TEXT, header)
    assert sealed.open_sealed(box, private.private_bytes_raw(), SCOPE, "old.sealed") == TEXT
