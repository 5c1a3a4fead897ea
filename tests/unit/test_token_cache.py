"""The lexicon's phrase tokens kept in the user's cache dir (`memoryd.extraction.token_cache`):
a process that reads them extracts exactly what one that tokenized the lexicon itself does,
and a cache that is stale, torn or altered is rebuilt, never trusted and never an error."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from memoryd.extraction.linking import KnownEntity
from memoryd.extraction.pipeline import Extractor
from memoryd.extraction.token_cache import TokenCache, fingerprint
from memoryd.models import EntityType
from tests.entity_gold import load_items

KUZU = KnownEntity(id="entity:tool:Kuzu", name="Kuzu", type=EntityType.TOOL, aliases=["kuzudb"])
CACHE_LOG = "memoryd.extraction"


def texts(lang: str) -> list[str]:
    """The labelled sentences of one language (only its pipeline is built), plus a longer note
    that touches both matchers (exact-case places, case-insensitive tools) and a known entity."""
    found = [item.text for item in load_items((lang,))]
    note = (
        "Alice moved the API from MySQL to PostgreSQL in Paris; kuzudb holds the graph, and "
        "Jordan wrote the react hooks with Vite and pytest."
    )
    found.append(note if lang == "en" else f"{note} 我们在北京用 Redis 做缓存。")
    return found


def extract_all(x: Extractor, lang: str) -> list[str]:
    return [x.extract(text, known=[KUZU]).model_dump_json() for text in texts(lang)]


def cache_file(directory: Path, lang: str) -> Path:
    return directory / "extraction" / f"lexicon_{lang}.tokens"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    """A cache dir filled by a first extractor, and what that extractor (which tokenized the
    whole lexicon itself) found in each language."""
    directory = tmp_path_factory.mktemp("token-cache")
    x = Extractor(cache_dir=directory)
    return directory, {lang: extract_all(x, lang) for lang in ("en", "zh")}


def copy_of(built: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> Path:
    source, _ = built
    directory = tmp_path / "cache"
    for lang in ("en", "zh"):
        target = cache_file(directory, lang)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(cache_file(source, lang).read_bytes())
    return directory


def from_cache(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "tokens from the cache" in r.getMessage()]


def test_a_cache_hit_extracts_exactly_what_a_fresh_build_does(
    built: tuple[Path, dict[str, list[str]]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = copy_of(built, tmp_path)
    x = Extractor(cache_dir=directory)
    with caplog.at_level(logging.DEBUG, logger=CACHE_LOG):
        found = {lang: extract_all(x, lang) for lang in ("en", "zh")}
    assert [m.split(":")[0] for m in from_cache(caplog)] == ["lexicon_en", "lexicon_zh"]
    assert found == built[1]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_cache_for_another_spacy_version_is_rebuilt(
    built: tuple[Path, dict[str, list[str]]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spacy import about

    directory = copy_of(built, tmp_path)
    before = cache_file(directory, "en").read_bytes()
    monkeypatch.setattr(about, "__version__", "99.0.0")  # as after an upgrade
    with caplog.at_level(logging.DEBUG, logger=CACHE_LOG):
        assert extract_all(Extractor(cache_dir=directory), "en") == built[1]["en"]
    assert from_cache(caplog) == []
    assert any("other phrases or versions; rebuilding" in r.getMessage() for r in caplog.records)
    after = cache_file(directory, "en").read_bytes()
    assert after != before  # rewritten under the new key ...
    assert after.partition(b"\n")[2] == before.partition(b"\n")[2]  # ... with the same tokens
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=CACHE_LOG):
        assert extract_all(Extractor(cache_dir=directory), "en") == built[1]["en"]
    assert len(from_cache(caplog)) == 1  # the rebuilt file is read by the next process


def test_the_key_names_the_phrases_their_case_and_the_tokenizer() -> None:
    phrases = [("PostgreSQL", False), ("Nice", True)]
    key = fingerprint("spacy 3.8 en", phrases)
    assert key == fingerprint("spacy 3.8 en", list(phrases))
    assert key != fingerprint("spacy 3.9 en", phrases)
    assert key != fingerprint("spacy 3.8 en", [("PostgreSQL", False), ("Nice", False)])
    assert key != fingerprint("spacy 3.8 en", [("PostgreSQL", False), ("Nice", True), ("x", True)])
    assert key != fingerprint("spacy 3.8 en", list(reversed(phrases)))
    assert fingerprint("t", [("ab", False)]) != fingerprint("t", [("a", False), ("b", False)])


def _garbage(data: bytes) -> bytes:
    return b"\x00\x9f not a cache at all"


def _torn(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _empty(data: bytes) -> bytes:
    return b""


def _altered_token(data: bytes) -> bytes:
    """One digit of one hash changed: still valid JSON, the checksum tells."""
    head, _, payload = data.partition(b"\n")
    at = payload.index(b"[[") + 2
    digit = payload[at : at + 1]
    return head + b"\n" + payload[:at] + (b"1" if digit != b"1" else b"2") + payload[at + 1 :]


def _header_only(data: bytes) -> bytes:
    return data.partition(b"\n")[0]


@pytest.mark.parametrize(
    "corrupt", [_garbage, _torn, _empty, _altered_token, _header_only], ids=lambda f: f.__name__
)
def test_a_corrupt_cache_is_rebuilt_with_a_warning(
    corrupt: Callable[[bytes], bytes],
    built: tuple[Path, dict[str, list[str]]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    directory = copy_of(built, tmp_path)
    path = cache_file(directory, "en")
    good = path.read_bytes()
    path.write_bytes(corrupt(good))
    with caplog.at_level(logging.DEBUG, logger=CACHE_LOG):
        assert extract_all(Extractor(cache_dir=directory), "en") == built[1]["en"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0]
    assert "is corrupt" in warnings[0]
    assert "rebuilding it" in warnings[0]
    assert from_cache(caplog) == []
    assert path.read_bytes() == good  # rebuilt as it was


def test_a_cache_dir_that_cannot_be_written_costs_only_time(
    built: tuple[Path, dict[str, list[str]]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir would go\n")
    with caplog.at_level(logging.WARNING, logger=CACHE_LOG):
        assert extract_all(Extractor(cache_dir=blocker), "en") == built[1]["en"]
    [warning] = [r.getMessage() for r in caplog.records]
    assert "cannot write the phrase-token cache" in warning
    assert blocker.read_text() == "a file where the cache dir would go\n"


def test_a_missing_cache_is_written_and_read_back(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path / "c")
    tokens: Sequence[tuple[int, ...]] = [(2**64 - 1, 0), (17956708691072489762,), ()]
    assert cache.load("lexicon_en", "k", 3) is None
    cache.save("lexicon_en", "k", tokens)
    assert cache.load("lexicon_en", "k", 3) == list(tokens)
    assert cache.load("lexicon_en", "other", 3) is None
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["lexicon_en.tokens"]  # no temp left


def test_the_default_cache_is_the_users_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    Extractor().extract("PostgreSQL holds the rows.")
    assert cache_file(tmp_path / "xdg-cache" / "memoryd", "en").is_file()
