"""Text preparation for full-text search: the one home of `jieba`.

Full-text engines split words on spaces and punctuation, which Chinese does not use, so every run
of Chinese characters is segmented into words before it is indexed or searched. jieba is imported
lazily (it costs about a second to load its dictionary) and only when a text contains Chinese.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

# Han ideographs: unified (with extension A), compatibility, and the supplementary planes
# (extensions B onwards). Kana and Hangul are left alone: jieba has no dictionary for them.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_HAN_RUN = re.compile(f"[{_HAN}]+")
HAN_CLASS = f"[{_HAN}]"
"""One Han character, as a regular expression (the search index looks for Chinese words)."""
_WORD = re.compile(r"\w+")

_jieba_lock = threading.Lock()
_jieba_module: Any = None


def contains_cjk(text: str) -> bool:
    """Whether `text` holds a Chinese (Han) character, i.e. needs jieba before indexing."""
    # isascii() is C-fast and settles most English text without running the regex.
    return not text.isascii() and _HAN_RUN.search(text) is not None


def blank_cjk(text: str) -> str:
    """`text` with every Han character replaced by a space, so offsets still point into `text`.

    Lets a tokenizer that does not know Chinese see the other words of a mixed text
    (`用Redis缓存` would otherwise be one token) without paying for jieba.
    """
    if text.isascii():
        return text
    return _HAN_RUN.sub(lambda match: " " * len(match.group()), text)


def load_segmenter() -> None:
    """Load jieba's dictionary now (a recall reader over Chinese memories, before its first
    call: loading takes hundreds of milliseconds, which would otherwise fall on a recall)."""
    _jieba()


def _jieba() -> Any:
    """jieba, with its dictionary loaded once for the process and its startup chatter silenced."""
    global _jieba_module
    if _jieba_module is None:
        with _jieba_lock:
            if _jieba_module is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                logger.debug("jieba dictionary loaded")
                _jieba_module = jieba
    return _jieba_module


@functools.lru_cache(maxsize=16384)
def _run_words(run: str) -> str:
    """One Han run cut in search mode, its words joined by spaces; remembered, as the same
    runs (a clause between punctuation, a tag, a name) come back across a bulk write's texts
    (jieba's dictionary is never changed after it is loaded)."""
    return " ".join(word for word in _jieba().cut_for_search(run) if word.strip())


def _spaced(text: str, cut: Any) -> Iterator[str]:
    """`text` in pieces, each Han run replaced by `cut(run)`, its words joined by spaces.

    A space is put between a Han run and an adjacent letter or digit, so `用Redis缓存` becomes
    `用 Redis 缓存` and not one token.
    """
    pos = 0
    for match in _HAN_RUN.finditer(text):
        start, end = match.span()
        yield text[pos:start]
        words = cut(match.group())
        if start > 0 and not text[start - 1].isspace():
            words = " " + words
        if end < len(text) and not text[end].isspace():
            words += " "
        yield words
        pos = end
    yield text[pos:]


def segment(text: str) -> str:
    """`text` ready for an engine that splits on spaces and punctuation.

    Han runs are cut with jieba's search mode, which yields a long word and its parts
    (`数据库` → `数据 据库 数据库`), so a query for either finds the document. Everything else is
    left as it is; text without Chinese is returned unchanged without loading jieba.
    """
    if not contains_cjk(text):
        return text
    return "".join(_spaced(text, _run_words))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def query_terms(text: str) -> list[str]:
    """The lowercased words of a query, first occurrence first, for explaining a match.

    Chinese is cut in precise mode (one word per span, no overlapping parts); other text is
    split on non-word characters.
    """
    lowered = text.lower()
    if not contains_cjk(lowered):
        return _unique(_WORD.findall(lowered))
    cut = _jieba().cut
    terms: list[str] = []
    pos = 0
    for match in _HAN_RUN.finditer(lowered):
        terms.extend(_WORD.findall(lowered[pos : match.start()]))
        terms.extend(word for word in cut(match.group()) if word.strip())
        pos = match.end()
    terms.extend(_WORD.findall(lowered[pos:]))
    return _unique(terms)
