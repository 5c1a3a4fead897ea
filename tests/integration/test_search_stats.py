"""Scope statistics kept up to date write by write equal a recount of the live memories."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import memoryd.search.engine as search_engine
import memoryd.search.tallies as search_tallies
from memoryd.models import DecayState, MemoryType
from memoryd.recall.conversation import is_turn
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.search.stats import TurnTest

SCOPES = ("aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc")
WORDS = [
    "redis",
    "cache",
    "postgres",
    "migration",
    "deploy",
    "kafka",
    "consumer",
    "lag",
    "pytest",
    "flaky",
    "fixture",
    "nginx",
    "proxy",
    "timeout",
    "数据库",
    "迁移",
    "部署",
    "缓存",
    "went",
    "bought",
    "children",
]
START = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)
TESTS: tuple[TurnTest | None, ...] = (is_turn, None)


def random_doc(rng: random.Random, slug: str) -> SearchDoc:
    kind = rng.choice([MemoryType.SESSION, MemoryType.SESSION, MemoryType.DECISION])
    lines = rng.choice([1, 1, 5])  # a short turn, or a whole session (not a turn)
    body = "\n".join(" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(lines))
    return SearchDoc(
        slug=slug,
        scope_hash=rng.choice(SCOPES),
        type=kind,
        decay_state=rng.choice(
            [DecayState.ALIVE, DecayState.ALIVE, DecayState.SOFT_FORGOTTEN, DecayState.FORGOTTEN]
        ),
        title=" ".join(rng.choices(WORDS, k=rng.randint(0, 4))),
        body=body,
        # Turns minutes apart, some at the same instant, some beyond the context window.
        created_at=START + timedelta(minutes=rng.choice([0, 5, 10, 20, 45, 90, 200])),
    )


def views(index: SearchIndex) -> list[object]:
    """Every statistic recall may ask of the index, in every combination."""
    wanted: list[list[str] | None] = [None, [SCOPES[0]], [SCOPES[1], SCOPES[2]]]
    return [
        index.statistics(scopes, include_forgotten=hidden, is_turn=test)
        for scopes in wanted
        for hidden in (False, True)
        for test in TESTS
    ]


def recounted(directory: Path) -> list[object]:
    """The statistics counted from scratch (the saved ones left unread)."""
    with SearchIndex.open(directory) as fresh:
        fresh._files = None
        return views(fresh)


def rankings(index: SearchIndex) -> list[tuple[object, ...]]:
    """The hits, word shares and documents of a few recalls (the documents are the entries
    the statistics keep: they must be those written last)."""
    return [
        index.local_bm25(query, scope_hashes=scopes, is_turn=is_turn, context_boost=0.15, limit=20)[
            :3
        ]
        for query in ("redis cache", "数据库 迁移", "flaky pytest fixture", "bought children")
        for scopes in ([SCOPES[0]], None)
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_statistics_kept_by_writes_equal_a_recount(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    directory = tmp_path / "search"
    live: dict[str, SearchDoc] = {}
    with SearchIndex.open(directory) as index:
        index.upsert([random_doc(rng, f"m{i}") for i in range(8)])
        assert views(index) == recounted(directory)  # every scope counted, on the first ask
        serial = 8
        for step in range(60):
            live = {slug: doc for slug, doc in index.stored(sorted(index.slugs())).items()}
            action = rng.random()
            if action < 0.4 or not live:
                batch = [random_doc(rng, f"m{serial + i}") for i in range(rng.randint(1, 3))]
                serial += len(batch)
                index.upsert(batch)
            elif action < 0.75:  # rewrites: new text, state, time or scope, or the same again
                chosen = rng.sample(sorted(live), k=min(len(live), rng.randint(1, 3)))
                changes: list[Callable[[SearchDoc], SearchDoc]] = [
                    lambda d: random_doc(rng, d.slug),
                    lambda d: d.model_copy(update={"decay_state": DecayState.SOFT_FORGOTTEN}),
                    lambda d: d.model_copy(update={"decay_state": DecayState.ALIVE}),
                    lambda d: d,
                ]
                index.upsert([rng.choice(changes)(live[slug]) for slug in chosen])
            elif action < 0.95:
                index.delete(rng.sample(sorted(live), k=min(len(live), rng.randint(1, 2))))
            else:
                index.delete(["never-written"])
            if step % 10 == 9:
                assert views(index) == recounted(directory), f"after step {step}"
        kept = rankings(index)
        assert views(index) == recounted(directory)
    with SearchIndex.open(directory) as fresh:
        assert rankings(fresh) == kept


@pytest.mark.parametrize("seed", [4, 5])
def test_a_reader_refreshed_by_the_writers_changes_equals_a_recount(
    tmp_path: Path, seed: int
) -> None:
    """A reader process's index (`refresh(changes_since)`) keeps its tallies by the slugs
    the writer's commits name, without counting a scope again, and they equal a recount."""
    rng = random.Random(seed)
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index, SearchIndex.open(directory) as reader:
        index.upsert([random_doc(rng, f"m{i}") for i in range(12)])
        reader.refresh()
        assert views(reader) == recounted(directory)
        seen = index.generation
        counted: list[object] = []
        original = reader._stats.load

        def load(*args: Any) -> None:
            counted.append(args)
            original(*args)

        reader._stats.load = load  # type: ignore[method-assign,assignment]
        serial = 12
        for step in range(40):
            live = sorted(index.slugs())
            action = rng.random()
            if action < 0.4 or not live:
                index.upsert([random_doc(rng, f"m{serial}")])
                serial += 1
            elif action < 0.8:
                chosen = rng.sample(live, k=min(len(live), rng.randint(1, 3)))
                index.upsert([random_doc(rng, slug) for slug in chosen])
            else:
                index.delete(rng.sample(live, k=1))
            if step % 3 == 2:
                changes = index.changes_since(seen)
                assert changes is not None
                reader.refresh(changes)
                seen = index.generation
                assert views(reader) == recounted(directory), f"after step {step}"
        reader.refresh(index.changes_since(seen))
        assert counted == []
        assert rankings(reader) == rankings(index)
        assert index.changes_since(index.generation) == frozenset()
        assert index.changes_since(-5) is None  # from before the oldest commit kept


def test_a_recall_after_a_write_counts_nothing_again(tmp_path: Path) -> None:
    """Once a scope is counted, a write changes its tallies without reading the scope."""
    with SearchIndex.open(tmp_path / "search") as index:
        rng = random.Random(7)
        index.upsert([random_doc(rng, f"m{i}") for i in range(30)])
        before = index.statistics(list(SCOPES), is_turn=is_turn)
        counted: list[object] = []
        original = index._stats.load

        def load(*args: Any) -> None:  # the real count, watched
            counted.append(args)
            original(*args)

        index._stats.load = load  # type: ignore[method-assign,assignment]
        index.upsert([random_doc(rng, "extra")])
        index.delete(["m0"])
        after = index.statistics(list(SCOPES), is_turn=is_turn)
        assert counted == []
        assert after != before
        assert after == recounted(tmp_path / "search")[0]


def test_clear_leaves_every_scope_counted_empty(tmp_path: Path) -> None:
    with SearchIndex.open(tmp_path / "search") as index:
        rng = random.Random(11)
        index.upsert([random_doc(rng, f"m{i}") for i in range(10)])
        assert index.statistics().docs > 0
        index.clear()
        assert index.statistics().docs == 0
        index.upsert([random_doc(rng, "again")])
        assert views(index) == recounted(tmp_path / "search")


def test_a_decay_sweeps_deletions_keep_the_statistics_true(tmp_path: Path) -> None:
    """A sweep deletes most of a vault: in a scope whose statistics are not counted yet the
    deleted documents' text is not even decoded, in a counted one their words are
    subtracted; either way the next recall's statistics are those of a fresh count and of
    an index built with only what the sweep left."""
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index:
        rng = random.Random(11)
        docs = [random_doc(rng, f"m{i}") for i in range(60)]
        index.upsert(docs)
        index.statistics([SCOPES[0]], is_turn=is_turn)  # one scope counted, the others not
        gone = [d.slug for d in docs[::2]]
        states = {d.slug: DecayState.SOFT_FORGOTTEN for d in docs[1::4]}
        index.set_decay_states(states, gone)
        assert views(index) == recounted(directory)
        assert index.slugs() == {d.slug for d in docs} - set(gone)
        rebuilt = tmp_path / "rebuilt"
        with SearchIndex.open(rebuilt) as fresh:
            fresh.upsert(
                [
                    d.model_copy(update={"decay_state": states.get(d.slug, d.decay_state)})
                    for d in docs
                    if d.slug not in gone
                ]
            )
            assert views(fresh) == views(index)


class _CountedSearcher:
    """A real searcher whose stored-document reads are counted."""

    def __init__(self, inner: Any, reads: list[object]) -> None:
        self._inner = inner
        self._reads = reads

    def doc(self, address: Any) -> Any:
        self._reads.append(address)
        return self._inner.doc(address)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _CountedIndex:
    def __init__(self, inner: Any, reads: list[object]) -> None:
        self._inner = inner
        self._reads = reads

    def searcher(self) -> _CountedSearcher:
        return _CountedSearcher(self._inner.searcher(), self._reads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_counted_scope_ranks_its_candidates_without_reading_them_back(tmp_path: Path) -> None:
    """Once a scope is counted, recall finds each candidate among the kept entries by its slug
    key: the store is read to count a scope, never per candidate, before or after writes."""
    with SearchIndex.open(tmp_path / "search") as index:
        rng = random.Random(5)
        index.upsert([random_doc(rng, f"m{i}") for i in range(40)])
        reads: list[object] = []
        index._index = _CountedIndex(index._index, reads)  # type: ignore[assignment]
        first = rankings(index)
        assert reads  # the first recall of each scope counts it from its documents
        reads.clear()
        assert rankings(index) == first
        index.upsert([random_doc(rng, "m3"), random_doc(rng, "late")])
        index.delete(["m4"])
        reads.clear()  # a write reads what it replaces; the recalls after it read nothing
        after = rankings(index)
        assert reads == []
        assert any(ranking[0] for ranking in after)
    with SearchIndex.open(tmp_path / "search") as fresh:
        assert rankings(fresh) == after


def test_memories_that_share_a_slug_key_are_read_and_rank_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 bits of a hash may collide: hits whose key two memories of the searched scopes share
    are read from the store, so the ranking is the one distinct keys give."""
    rng = random.Random(9)
    docs = [random_doc(rng, f"m{i}") for i in range(40)]
    with SearchIndex.open(tmp_path / "distinct") as index:
        index.upsert(docs)
        expected = rankings(index)
    for module in (search_engine, search_tallies):  # the documents' keys and the entries'
        monkeypatch.setattr(module, "slug_key", lambda slug: 7)
    with SearchIndex.open(tmp_path / "shared") as index:
        index.upsert(docs)
        reads: list[object] = []
        rankings(index)
        index._index = _CountedIndex(index._index, reads)  # type: ignore[assignment]
        assert rankings(index) == expected
        assert any(ranking[0] for ranking in expected)
        assert reads  # every hit shares key 7 with the others, so each is read
