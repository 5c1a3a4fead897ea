"""Segmentation for full-text search: Chinese split into words, everything else untouched."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from memoryd.text import _run_words, blank_cjk, contains_cjk, query_terms, segment


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我们决定采用向量数据库", True),
        ("use Redis 缓存", True),
        ("㐀", True),  # CJK extension A
        ("𠀀", True),  # CJK extension B (outside the BMP)
        ("decided to use caching", False),
        ("ひらがな カタカナ", False),  # kana: jieba has no dictionary for it
        ("한국어", False),
        ("", False),
        ("，。！", False),  # Chinese punctuation alone is not a word
    ],
)
def test_contains_cjk(text: str, expected: bool) -> None:
    assert contains_cjk(text) is expected


def test_segment_without_chinese_returns_the_same_text() -> None:
    text = "Decided: use caching (see #12), don't   over-engineer.\n"
    assert segment(text) is text


def test_segment_splits_a_chinese_sentence_into_words_and_their_parts() -> None:
    words = segment("我们决定采用向量数据库来存储记忆").split()
    assert {"我们", "决定", "向量", "数据库", "存储", "记忆"} <= set(words)
    # Search mode also yields the parts of a long word, so "数据" finds "数据库".
    assert "数据" in words


def test_segment_separates_chinese_from_adjacent_latin_words() -> None:
    assert segment("用Redis缓存").split() == ["用", "Redis", "缓存"]


def test_segment_keeps_the_non_chinese_text_as_written() -> None:
    result = segment("Use Redis，因为它很快. See RFC-7231!")
    assert result.startswith("Use Redis")
    assert result.endswith(" . See RFC-7231!")
    assert "，" in result


def test_query_terms_are_lowercased_deduplicated_and_ordered() -> None:
    assert query_terms("Use Redis, use REDIS for caching_layer!") == [
        "use",
        "redis",
        "for",
        "caching_layer",
    ]


def test_query_terms_cut_chinese_precisely() -> None:
    # Precise mode: the long word once, not its parts.
    assert query_terms("向量数据库") == ["向量", "数据库"]
    assert query_terms("用Redis缓存 数据库") == ["用", "redis", "缓存", "数据库"]


@pytest.mark.parametrize("text", ["", "   ", "!!! ??? ()", "🙂🔥", "，。"])
def test_query_terms_of_text_without_words_is_empty(text: str) -> None:
    assert query_terms(text) == []


def test_blank_cjk_keeps_offsets() -> None:
    text = "用Redis缓存 ok"
    blanked = blank_cjk(text)
    assert len(blanked) == len(text)
    assert blanked == " Redis   ok"
    assert blank_cjk("plain") == "plain"


def test_segment_is_thread_safe_on_first_use() -> None:
    sentence = "我们决定采用向量数据库来存储记忆"
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(segment, [sentence] * 32))
    assert len(set(results)) == 1


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:memoryd", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def test_import_and_english_text_do_not_load_jieba() -> None:
    result = _run(
        "import sys, memoryd.text as t\n"
        "assert 'jieba' not in sys.modules\n"
        "assert t.segment('plain english') == 'plain english'\n"
        "assert t.query_terms('Plain English') == ['plain', 'english']\n"
        "print('jieba' in sys.modules)\n"
    )
    assert result.stdout.strip() == "False"


def test_jieba_startup_is_silent() -> None:
    # jieba prints "Building prefix dict…" to stderr on load unless its logger is quietened.
    result = _run("import memoryd.text as t\nprint(t.segment('数据库'))\n")
    assert result.stdout.split() == ["数据", "据库", "数据库"]
    assert result.stderr == ""


def _segment_afresh(text: str) -> str:
    """`segment` as jieba gives it with nothing remembered: each Han run cut where it stands."""
    import jieba

    out, pos = [], 0
    for match in re.finditer(
        "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+", text
    ):
        start, end = match.span()
        out.append(text[pos:start])
        words = " ".join(w for w in jieba.cut_for_search(match.group()) if w.strip())
        if start > 0 and not text[start - 1].isspace():
            words = " " + words
        if end < len(text) and not text[end].isspace():
            words += " "
        out.append(words)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def test_segment_remembering_runs_cuts_as_jieba_does_afresh() -> None:
    """Han runs are cut once and remembered (`_run_words`): the same runs in other texts, at
    other edges, come out as cutting them afresh gives."""
    texts = [
        "我们决定采用向量数据库",
        "用Redis缓存数据库，数据库迁移到Postgres",
        "数据库",
        "修复了消费者重复消费的问题 #12；修复了",
        "plain text",
        "中华人民共和国成立了",
        "㐀𠀀 and 向量",
    ]
    for _ in range(2):
        for text in texts:
            assert segment(text) == _segment_afresh(text)
    assert _run_words.cache_info().hits > 0
