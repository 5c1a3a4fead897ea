"""The lexicon's phrases as tokens, kept between processes (derived data, safe to delete).

Building the lexicon's matchers means tokenizing its ~8,000 surfaces per language, which
took most of a second of CPU (more for Chinese, through jieba) in every process that
extracts: each daemon and each embedded `record`. The tokens depend only on the phrases and
the tokenizer, so one file per language under the user's cache dir holds them, keyed by a
digest of both (`fingerprint`): a changed lexicon, spaCy, jieba or memoryd never reads
another's tokens. A file that is unreadable, torn or altered is rebuilt with a warning in the
log; the cache never makes extraction fail, and an unwritable cache dir only costs the time.

File: one JSON header line (`format`, `key`, `sha256` of the rest), then the token lists as
JSON (orjson keeps the 64-bit hashes exact).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import orjson

from memoryd import __version__
from memoryd.inbox import write_atomically

log = logging.getLogger(__name__)

FORMAT = 1
MAX_HASH = 2**64


class CorruptCache(ValueError):
    """A cache file that cannot be what this module wrote."""


def fingerprint(tokenizer: str, phrases: Sequence[tuple[str, bool]]) -> str:
    """The cache key of `phrases` ((text, exact-case?) in order) under `tokenizer`."""
    digest = hashlib.sha256()
    digest.update(orjson.dumps({"format": FORMAT, "memoryd": __version__, "tok": tokenizer}))
    for text, exact in phrases:
        digest.update(b"\x01" if exact else b"\x00")
        digest.update(text.encode("utf-8"))
        digest.update(b"\xff")  # never inside UTF-8: each phrase ends where it ends
    return digest.hexdigest()


class TokenCache:
    """Phrase tokens by name ("lexicon_en") in `directory`; None turns caching off."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def path(self, name: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{name}.tokens"

    def load(self, name: str, key: str, count: int) -> list[tuple[int, ...]] | None:
        """The `count` token tuples saved under `key`, or None (missing, stale or corrupt)."""
        path = self.path(name)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            log.warning("cannot read the phrase-token cache %s (%s); rebuilding it", path, exc)
            return None
        try:
            header, payload = _split(data)
            if header.get("key") != key:
                log.info("phrase-token cache %s is for other phrases or versions; rebuilding", path)
                return None
            tokens = _tokens(payload, header, count)
        except CorruptCache as exc:
            log.warning("phrase-token cache %s is corrupt (%s); rebuilding it", path, exc)
            return None
        return tokens

    def save(self, name: str, key: str, tokens: Sequence[tuple[int, ...]]) -> None:
        """Write atomically (readers see the old file or the new one); a failure is logged."""
        path = self.path(name)
        if path is None:
            return
        payload = orjson.dumps(tokens)
        header = orjson.dumps(
            {"format": FORMAT, "key": key, "sha256": hashlib.sha256(payload).hexdigest()}
        )
        try:
            write_atomically(path, header + b"\n" + payload, sync=False)
        except OSError as exc:
            log.warning(
                "cannot write the phrase-token cache %s (%s); continuing without", path, exc
            )


def _split(data: bytes) -> tuple[dict[str, object], bytes]:
    head, newline, payload = data.partition(b"\n")
    if not newline:
        raise CorruptCache("no header line")
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise CorruptCache(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CorruptCache("header is not this format's")
    return header, payload


def _tokens(payload: bytes, header: dict[str, object], count: int) -> list[tuple[int, ...]]:
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CorruptCache("its checksum does not match")
    try:
        rows = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise CorruptCache(f"tokens are not JSON: {exc}") from None
    if not isinstance(rows, list) or len(rows) != count:
        raise CorruptCache(f"expected {count} phrases")
    tokens: list[tuple[int, ...]] = []
    for row in rows:
        if not isinstance(row, list):
            raise CorruptCache("a phrase whose tokens are not a list")
        if not all(type(h) is int and 0 <= h < MAX_HASH for h in row):
            raise CorruptCache("a token that is not a 64-bit hash")
        tokens.append(tuple(row))
    return tokens
