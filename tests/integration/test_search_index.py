"""The full-text index against a real tantivy index in tmp_path."""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import tantivy

from memoryd.errors import InvalidInput, StorageError
from memoryd.models import DecayState, MemoryType
from memoryd.search.doc import SearchDoc
from memoryd.search.index import META_FILE, SCHEMA_VERSION, SearchIndex

SCOPE_A = "aaaaaaaaaaaa"
SCOPE_B = "bbbbbbbbbbbb"
CREATED = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def doc(slug: str, body: str = "", **fields: Any) -> SearchDoc:
    values: dict[str, Any] = {
        "slug": slug,
        "scope_hash": SCOPE_A,
        "type": MemoryType.DECISION,
        "decay_state": DecayState.ALIVE,
        "title": f"memory {slug}",
        "body": body,
        "created_at": CREATED,
    }
    values.update(fields)
    return SearchDoc(**values)


def slugs_of(index: SearchIndex, query: str, **options: Any) -> list[str]:
    return [hit.slug for hit in index.search(query, **options)]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SearchIndex]:
    with SearchIndex.open(tmp_path / "search") as opened:
        yield opened


# -- Chinese and English analysis -------------------------------------------------------------


def test_a_chinese_word_inside_an_unspaced_sentence_is_found(index: SearchIndex) -> None:
    index.upsert(
        [doc("vector-db", "我们决定采用向量数据库来存储记忆"), doc("other", "今天天气很好")]
    )
    assert slugs_of(index, "数据库") == ["vector-db"]
    assert slugs_of(index, "向量") == ["vector-db"]
    assert slugs_of(index, "存储记忆") == ["vector-db"]
    [hit] = index.search("数据库")
    assert hit.matched_terms == ["数据库"]
    assert hit.snippet == "我们决定采用向量数据库来存储记忆"


def test_a_part_of_a_chinese_word_finds_the_whole_word(index: SearchIndex) -> None:
    index.upsert([doc("vector-db", "我们决定采用向量数据库来存储记忆")])
    [hit] = index.search("数据")
    assert hit.slug == "vector-db"
    assert hit.matched_terms == ["数据"]


def test_chinese_next_to_english_words(index: SearchIndex) -> None:
    index.upsert([doc("redis", "用Redis缓存会话")])
    assert slugs_of(index, "redis") == ["redis"]
    assert slugs_of(index, "缓存") == ["redis"]
    [hit] = index.search("Redis 缓存")
    assert hit.matched_terms == ["redis", "缓存"]


def test_a_bulk_write_analyses_repeated_and_chinese_tags_as_a_single_write(
    index: SearchIndex,
) -> None:
    # One write of many memories puts each text in its base forms once, and an English
    # memory whose only Chinese text is a tag is still cut: both find as written one by one.
    docs = [
        doc(f"m{i}", "the team bought a new cache", tags=["mcp-memory", "children"])
        for i in range(5)
    ] + [doc("tagged", "plain English body", tags=["向量数据库"])]
    index.upsert(docs)
    assert sorted(slugs_of(index, "buy", limit=20)) == [f"m{i}" for i in range(5)]
    assert len(slugs_of(index, "child", limit=20)) == 5
    assert slugs_of(index, "数据库") == ["tagged"]
    with SearchIndex.in_memory("one by one") as single:
        for one in docs:
            single.upsert([one])
        for query in ("buy", "child", "数据库", "cache", "mcp"):
            assert sorted(slugs_of(single, query, limit=20)) == sorted(
                slugs_of(index, query, limit=20)
            )


@pytest.mark.parametrize("query", ["caches", "cache", "Caching", "CACHED"])
def test_english_stemming_applies_to_queries_as_to_documents(
    index: SearchIndex, query: str
) -> None:
    index.upsert([doc("caching", "We decided to use caching."), doc("other", "Use a queue.")])
    [hit] = index.search(query)
    assert hit.slug == "caching"
    assert hit.matched_terms == [query.lower()]


@pytest.mark.parametrize(
    "word",
    ["Running", "ponies", "généralement", "Naïve", "x86_64", "HTTP2", "don't", "e-mail", "Ünïcødé"],
)
def test_query_analysis_matches_the_index_analysis(index: SearchIndex, word: str) -> None:
    # The query side replicates tantivy's en_stem in Python; a drift would lose these.
    index.upsert([doc("w", f"a text with {word} inside"), doc("other", "nothing here")])
    assert slugs_of(index, word) == ["w"]


def test_tokens_too_long_to_index_find_nothing(index: SearchIndex) -> None:
    long_word = "x" * 60
    index.upsert([doc("long", f"{long_word} short")])
    assert index.search(long_word) == []
    assert slugs_of(index, "short") == ["long"]


def test_title_tags_and_triggers_are_searched_and_title_weighs_more(index: SearchIndex) -> None:
    index.upsert(
        [
            doc("in-body", "postgres is our database", title="storage choice"),
            doc("in-title", "we picked it for storage", title="postgres choice"),
            doc("in-tags", "nothing else", title="a", tags=["kubernetes"]),
            doc("in-triggers", "nothing else", title="b", triggers=["deploy to staging"]),
        ]
    )
    assert slugs_of(index, "postgres") == ["in-title", "in-body"]
    assert slugs_of(index, "kubernetes") == ["in-tags"]
    assert slugs_of(index, "staging") == ["in-triggers"]
    [hit] = index.search("kubernetes")
    assert hit.matched_terms == ["kubernetes"]


def test_more_matching_terms_rank_higher(index: SearchIndex) -> None:
    index.upsert(
        [
            doc("one", "redis handles the session cache"),
            doc("two", "redis cluster handles failover for the session cache"),
            doc("none", "a different topic entirely"),
        ]
    )
    assert slugs_of(index, "redis failover") == ["two", "one"]


# -- filters ----------------------------------------------------------------------------------


def test_scope_filter_keeps_any_of_the_given_scopes(index: SearchIndex) -> None:
    index.upsert(
        [
            doc("a", "shared words", scope_hash=SCOPE_A),
            doc("b", "shared words", scope_hash=SCOPE_B),
            doc("c", "shared words", scope_hash="cccccccccccc"),
        ]
    )
    assert slugs_of(index, "shared", scope_hashes=[SCOPE_A]) == ["a"]
    assert slugs_of(index, "shared", scope_hashes=[SCOPE_A, SCOPE_B]) == ["a", "b"]
    assert slugs_of(index, "shared") == ["a", "b", "c"]
    assert index.search("shared", scope_hashes=[]) == []
    assert index.search("shared", scope_hashes=["dddddddddddd"]) == []


def test_type_filter_keeps_any_of_the_given_types(index: SearchIndex) -> None:
    index.upsert(
        [
            doc("d", "shared words", type=MemoryType.DECISION),
            doc("f", "shared words", type=MemoryType.FACT),
            doc("s", "shared words", type=MemoryType.SESSION),
        ]
    )
    assert slugs_of(index, "shared", types=[MemoryType.FACT]) == ["f"]
    assert slugs_of(index, "shared", types=[MemoryType.FACT, MemoryType.SESSION]) == ["f", "s"]
    assert index.search("shared", types=[]) == []


def test_forgotten_memories_are_hidden_unless_asked(index: SearchIndex) -> None:
    index.upsert([doc(state.value, "shared words", decay_state=state) for state in DecayState])
    assert slugs_of(index, "shared") == ["alive", "dim"]
    assert slugs_of(index, "shared", include_forgotten=True) == [
        "alive",
        "dim",
        "forgotten",
        "soft-forgotten",
    ]


def test_filters_combine_and_do_not_change_the_score(index: SearchIndex) -> None:
    index.upsert(
        [
            doc("a", "shared words", type=MemoryType.FACT),
            doc("b", "shared words", type=MemoryType.FACT, scope_hash=SCOPE_B),
            doc("c", "shared words", type=MemoryType.WARNING),
        ]
    )
    [unfiltered] = [h for h in index.search("shared", include_forgotten=True) if h.slug == "a"]
    [filtered] = index.search("shared", scope_hashes=[SCOPE_A], types=[MemoryType.FACT])
    assert filtered.slug == "a"
    assert filtered.score == unfiltered.score


# -- writes -----------------------------------------------------------------------------------


def test_upsert_replaces_the_document_of_a_slug(index: SearchIndex) -> None:
    index.upsert([doc("m", "old wording about sqlite")])
    index.upsert([doc("m", "new wording about postgres", decay_state=DecayState.DIM)])
    assert index.count() == 1
    assert index.search("sqlite") == []
    [hit] = index.search("wording")
    assert hit.slug == "m"
    assert hit.decay_state is DecayState.DIM


def test_the_last_document_of_a_slug_in_one_batch_wins(index: SearchIndex) -> None:
    index.upsert([doc("m", "first version"), doc("m", "second version")])
    assert index.count() == 1
    assert index.search("first") == []
    assert slugs_of(index, "version") == ["m"]


def test_delete_removes_only_the_given_slugs(index: SearchIndex) -> None:
    index.upsert([doc("a", "shared"), doc("b", "shared"), doc("c", "shared")])
    index.delete(["a", "c", "never-indexed"])
    assert slugs_of(index, "shared") == ["b"]
    assert index.slugs() == {"b"}
    assert index.count() == 1
    index.delete([])
    assert index.count() == 1


def test_clear_removes_every_document_and_the_index_stays_usable(index: SearchIndex) -> None:
    index.upsert([doc(f"m{i}", "shared") for i in range(20)])
    index.clear()
    assert index.count() == 0
    assert index.slugs() == set()
    assert index.search("shared") == []
    index.upsert([doc("again", "shared")])
    assert slugs_of(index, "shared") == ["again"]


def test_slugs_lists_live_documents(index: SearchIndex) -> None:
    index.upsert([doc(f"memory-{i:04d}", f"text {i}") for i in range(2_000)])
    index.delete([f"memory-{i:04d}" for i in range(0, 2_000, 2)])
    assert index.slugs() == {f"memory-{i:04d}" for i in range(1, 2_000, 2)}
    assert index.count() == 1_000


def test_empty_upsert_is_a_no_op(index: SearchIndex) -> None:
    index.upsert([])
    assert index.count() == 0


# -- user queries -----------------------------------------------------------------------------

HOSTILE_QUERIES = [
    "",
    "   ",
    '"',
    '"unbalanced',
    "title:",
    "title:caching",
    "slug:m",
    "(",
    ")",
    "(caching",
    "AND",
    "OR NOT AND",
    "caching AND",
    "*",
    "cach*",
    "?",
    "~2",
    "caching~",
    "^2",
    "caching^10",
    "[a TO z]",
    "{}",
    "+-!&&||",
    "\\",
    "\x00",
    "🙂🔥",
    '数据库: ("向量"',
    "'; DROP TABLE memories; --",
    "caching " * 5_000,
    "x" * 100_000,
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_any_user_text_is_a_valid_query(index: SearchIndex, query: str) -> None:
    index.upsert([doc("caching", "We decided to use caching."), doc("db", "向量数据库")])
    hits = index.search(query, scope_hashes=[SCOPE_A], types=[MemoryType.DECISION])
    assert isinstance(hits, list)


@pytest.mark.parametrize("query", ["", "   ", "🙂🔥", "()[]{}", "*", "，。！"])
def test_a_query_without_words_finds_nothing(index: SearchIndex, query: str) -> None:
    index.upsert([doc("caching", "We decided to use caching.")])
    assert index.search(query) == []


@pytest.mark.parametrize(
    "query", ['"caching"', "title:caching", "(caching", "caching AND", "cach*"]
)
def test_query_syntax_is_read_as_words(index: SearchIndex, query: str) -> None:
    index.upsert([doc("caching", "We decided to use caching."), doc("other", "nothing relevant")])
    assert slugs_of(index, query) == ["caching"]


def test_limit_and_offset_are_checked(index: SearchIndex) -> None:
    index.upsert([doc("a", "shared")])
    assert index.search("shared", limit=0) == []
    with pytest.raises(InvalidInput):
        index.search("shared", limit=-1)
    with pytest.raises(InvalidInput):
        index.search("shared", offset=-1)


def test_a_huge_limit_returns_every_hit(index: SearchIndex) -> None:
    index.upsert([doc(f"m{i}", "shared") for i in range(5)])
    assert slugs_of(index, "shared", limit=10**12) == [f"m{i}" for i in range(5)]
    assert slugs_of(index, "shared", limit=10**12, offset=3) == ["m3", "m4"]


def test_a_lone_string_is_one_value_not_its_characters(index: SearchIndex) -> None:
    index.upsert(
        [
            doc("a", "shared", type=MemoryType.FACT),
            doc("b", "shared", scope_hash=SCOPE_B),
        ]
    )
    assert slugs_of(index, "shared", scope_hashes=SCOPE_B) == ["b"]
    assert slugs_of(index, "shared", types=MemoryType.FACT) == ["a"]
    index.delete("a")
    assert index.slugs() == {"b"}


def test_an_unknown_type_is_invalid_input(index: SearchIndex) -> None:
    with pytest.raises(InvalidInput, match="bogus"):
        index.search("shared", types=["bogus"])  # type: ignore[list-item]


# -- ordering ---------------------------------------------------------------------------------


def test_equal_scores_are_ordered_by_slug_across_pages(index: SearchIndex) -> None:
    slugs = [f"tie-{i:02d}" for i in range(30)]
    shuffled = random.Random(7).sample(slugs, len(slugs))
    # Several commits: several segments, so tantivy's own order is by segment, not slug.
    for start in range(0, 30, 7):
        index.upsert(
            [doc(slug, "identical text", title="same") for slug in shuffled[start : start + 7]]
        )
    index.upsert([doc("best", "identical text identical text", title="identical")])
    everything = slugs_of(index, "identical", limit=100)
    assert everything == ["best", *slugs]
    pages = [slugs_of(index, "identical", limit=4, offset=offset) for offset in range(0, 31, 4)]
    assert [slug for page in pages for slug in page] == everything


def test_hits_are_the_same_after_reopening(tmp_path: Path) -> None:
    docs = [doc(f"m{i:03d}", f"word{i % 7} common text {i}") for i in range(200)]
    with SearchIndex.open(tmp_path / "one") as first:
        for start in range(0, 200, 50):
            first.upsert(docs[start : start + 50])
        before = [hit.model_dump() for hit in first.search("common word3", limit=50)]
    with SearchIndex.open(tmp_path / "one") as again:
        after = [hit.model_dump() for hit in again.search("common word3", limit=50)]
    assert before == after


# -- hits -------------------------------------------------------------------------------------


def test_a_hit_carries_what_was_indexed(index: SearchIndex) -> None:
    created = datetime(2024, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=8)))
    index.upsert(
        [
            doc(
                "m",
                "向量数据库 keeps the memories",
                title="选择 Vector store",
                type=MemoryType.FACT,
                decay_state=DecayState.DIM,
                scope_hash=SCOPE_B,
                created_at=created,
            )
        ]
    )
    [hit] = index.search("memories")
    assert hit.slug == "m"
    assert hit.title == "选择 Vector store"  # as written, not segmented
    assert hit.type is MemoryType.FACT
    assert hit.decay_state is DecayState.DIM
    assert hit.scope_hash == SCOPE_B
    assert hit.created_at == created
    assert hit.created_at.utcoffset() == timedelta(0)
    assert hit.score > 0


def test_matched_terms_are_the_query_terms_in_the_document(index: SearchIndex) -> None:
    index.upsert([doc("m", "Redis caches sessions", title="Session store", tags=["infra"])])
    [hit] = index.search("session caching kafka infra 数据库")
    assert hit.matched_terms == ["session", "caching", "infra"]


def test_snippet_is_short_plain_and_around_the_first_match(index: SearchIndex) -> None:
    filler = "lorem ipsum dolor sit amet " * 40
    body = f"{filler}\n\n## Decision\nWe chose **postgres** for durability.\n{filler}"
    index.upsert([doc("m", body)])
    [hit] = index.search("postgres")
    assert len(hit.snippet) <= 200
    assert "postgres" in hit.snippet
    assert "\n" not in hit.snippet
    assert hit.snippet.startswith("…")
    assert hit.snippet.endswith("…")


def test_snippet_of_a_title_match_is_the_start_of_the_body(index: SearchIndex) -> None:
    index.upsert([doc("m", "Short body.", title="Kafka")])
    [hit] = index.search("kafka")
    assert hit.snippet == "Short body."


def test_snippet_around_a_chinese_match(index: SearchIndex) -> None:
    body = "无关的句子。" * 40 + "我们决定采用向量数据库来存储记忆。" + "其他内容。" * 40
    index.upsert([doc("m", body)])
    [hit] = index.search("数据库")
    assert len(hit.snippet) <= 200
    assert "向量数据库" in hit.snippet


# -- lifecycle --------------------------------------------------------------------------------


def test_open_creates_a_missing_directory(tmp_path: Path) -> None:
    directory = tmp_path / "deep" / "er" / "search"
    with SearchIndex.open(directory) as index:
        assert index.count() == 0
    meta = json.loads((directory / META_FILE).read_text())
    assert meta["schema_version"] == SCHEMA_VERSION
    assert len(meta["index_id"]) == 32  # what saved statistics name (`stats_file`)


def test_documents_persist_across_reopen(tmp_path: Path) -> None:
    with SearchIndex.open(tmp_path / "s") as index:
        index.upsert([doc("vector-db", "我们决定采用向量数据库来存储记忆")])
    with SearchIndex.open(tmp_path / "s") as index:
        assert index.count() == 1
        assert slugs_of(index, "数据库") == ["vector-db"]
        index.upsert([doc("second", "more text")])
        assert index.slugs() == {"vector-db", "second"}


def test_upsert_after_reopen_replaces_the_persisted_document(tmp_path: Path) -> None:
    with SearchIndex.open(tmp_path / "s") as index:
        index.upsert([doc("m", "old wording")])
    with SearchIndex.open(tmp_path / "s") as index:
        index.upsert([doc("m", "new wording")])
        assert index.count() == 1
        assert index.search("old") == []


def test_a_handle_opened_before_another_wrote_still_replaces(tmp_path: Path) -> None:
    late = SearchIndex.open(tmp_path / "s")
    with SearchIndex.open(tmp_path / "s") as early:
        early.upsert([doc("m", "old wording")])
    # `late` has not searched since; its first write must still see the committed slug.
    with late:
        late.upsert([doc("m", "new wording")])
        assert late.count() == 1
        assert slugs_of(late, "wording") == ["m"]
        assert late.search("old") == []


def test_a_schema_version_mismatch_refuses_to_open(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with SearchIndex.open(directory) as index:
        index.upsert([doc("m", "text")])
    (directory / META_FILE).write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(StorageError, match="schema version") as info:
        SearchIndex.open(directory)
    assert "memoryd reindex" in info.value.hint


def test_an_index_with_another_schema_under_the_same_version_refuses_to_open(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "s"
    directory.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("slug", stored=True, tokenizer_name="raw")
    tantivy.Index(builder.build(), path=str(directory))
    (directory / META_FILE).write_text(json.dumps({"schema_version": SCHEMA_VERSION}))
    with pytest.raises(StorageError, match="another schema") as info:
        SearchIndex.open(directory)
    assert "memoryd reindex" in info.value.hint


@pytest.mark.parametrize("meta", [None, "not json", "{}"])
def test_a_missing_or_broken_meta_file_refuses_to_open(tmp_path: Path, meta: str | None) -> None:
    directory = tmp_path / "s"
    SearchIndex.open(directory).close()
    if meta is None:
        (directory / META_FILE).unlink()
    else:
        (directory / META_FILE).write_text(meta)
    with pytest.raises(StorageError) as info:
        SearchIndex.open(directory)
    assert "memoryd reindex" in info.value.hint


def test_an_unreadable_index_refuses_to_open_and_can_be_recreated(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    with SearchIndex.open(directory) as index:
        index.upsert([doc("m", "text")])
    (directory / "meta.json").write_text("{ corrupted")
    with pytest.raises(StorageError, match=str(directory)) as info:
        SearchIndex.open(directory)
    assert "memoryd reindex" in info.value.hint
    (directory / "unrelated.txt").write_text("kept")
    with SearchIndex.recreate(directory) as index:
        assert index.count() == 0
        index.upsert([doc("m", "text")])
        assert slugs_of(index, "text") == ["m"]
    assert (directory / "unrelated.txt").read_text() == "kept"


def test_lost_index_files_refuse_to_open(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    SearchIndex.open(directory).close()
    (directory / "meta.json").unlink()
    with pytest.raises(StorageError, match="lost its files"):
        SearchIndex.open(directory)


def test_only_one_writer_at_a_time(tmp_path: Path) -> None:
    with SearchIndex.open(tmp_path / "s") as writer, SearchIndex.open(tmp_path / "s") as other:
        writer.upsert([doc("m", "text")])
        with pytest.raises(StorageError, match="another process") as info:
            other.upsert([doc("n", "text")])
        assert "memoryd serve" in info.value.hint
        # A second handle can still read what the writer committed.
        other_reader = SearchIndex.open(tmp_path / "s")
        assert slugs_of(other_reader, "text") == ["m"]
        other_reader.close()


def _thread_niceness(prefix: str) -> list[int]:
    tasks = Path("/proc/self/task")
    return [
        os.getpriority(os.PRIO_PROCESS, int(task.name))
        for task in tasks.iterdir()
        if (task / "comm").read_text().startswith(prefix)
    ]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names from /proc")
def test_merges_run_below_requests_and_every_write_reads_back(tmp_path: Path) -> None:
    # One commit per write: the 8th segment makes tantivy merge them all, on its merge threads.
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with SearchIndex.open(tmp_path / "search") as index:
        for i in range(20):
            index.upsert([doc(f"m{i}", f"decision number{i} about queues")])
            assert slugs_of(index, f"number{i}") == [f"m{i}"]
        merges = _thread_niceness("merge_thread_")
        assert merges
        assert all(nice >= min(own + 10, 19) for nice in merges)
        assert os.getpriority(os.PRIO_PROCESS, 0) == own
    with SearchIndex.open(tmp_path / "search") as reopened:
        assert sorted(slugs_of(reopened, "queues", limit=50)) == sorted(f"m{i}" for i in range(20))


def test_a_closed_index_refuses_work_and_close_is_idempotent(tmp_path: Path) -> None:
    index = SearchIndex.open(tmp_path / "s")
    index.upsert([doc("m", "text")])
    index.close()
    index.close()
    with pytest.raises(StorageError, match="closed"):
        index.search("text")
    with pytest.raises(StorageError, match="closed"):
        index.upsert([doc("n", "text")])
    # Closing released the writer lock.
    with SearchIndex.open(tmp_path / "s") as reopened:
        reopened.upsert([doc("n", "text")])
        assert reopened.count() == 2


def test_concurrent_searches_while_writing(index: SearchIndex) -> None:
    index.upsert([doc(f"seed-{i}", "concurrent shared text") for i in range(50)])
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                hits = index.search("shared", limit=20)
                assert len(hits) == 20
                assert len({hit.slug for hit in hits}) == 20
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    def writer(worker: int) -> None:
        try:
            for batch in range(10):
                index.upsert([doc(f"w{worker}-{batch}-{i}", "shared words") for i in range(5)])
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(4)]
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    assert errors == []
    assert index.count() == 50 + 2 * 10 * 5
