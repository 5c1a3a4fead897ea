"""A decay sweep's states live beside the indexed documents (`memoryd.search.overlay`):
every read applies them, every search that leaves hidden memories out drops those they
hide, they survive a reopen and reach a reader process, and a memory written again or
deleted holds its own state."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from memoryd.errors import StorageError
from memoryd.models import DecayState, MemoryType
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.search.overlay import OVERLAY_FILE
from tests.integration.test_search_index import CREATED, SCOPE_A, SCOPE_B, doc, slugs_of

DIM, SOFT = DecayState.DIM, DecayState.SOFT_FORGOTTEN


def session(slug: str, minute: int, body: str, scope: str = SCOPE_A) -> SearchDoc:
    return doc(
        slug,
        body,
        type=MemoryType.SESSION,
        scope_hash=scope,
        created_at=CREATED + timedelta(minutes=minute),
    )


def corpus() -> list[SearchDoc]:
    """Redis memories that score in order (more mentions, higher) across two scopes, and
    session turns far apart (no shared context)."""
    return [
        doc(f"redis-{i:02d}", "redis " * (i + 1) + "cache", scope_hash=(SCOPE_A, SCOPE_B)[i % 2])
        for i in range(30)
    ] + [session(f"turn-{i}", 120 * i, f"kafka consumer lag topic{i}") for i in range(6)]


def test_moved_memories_read_in_their_new_state_without_rewriting_their_documents(
    tmp_path: Path,
) -> None:
    with SearchIndex.open(tmp_path / "search") as index:
        index.upsert(corpus())
        written = index.generation
        index.set_decay_states({"redis-29": SOFT, "redis-28": DIM, "turn-1": SOFT})
        assert index.generation == written + 1
        # The soft-forgotten memory is gone from plain search, the dim one shows as dim.
        hits = {hit.slug: hit for hit in index.search("redis", limit=40)}
        assert "redis-29" not in hits
        assert hits["redis-28"].decay_state is DIM
        assert "redis-29" in slugs_of(index, "redis", limit=40, include_forgotten=True)
        assert index.stored(["redis-29"])["redis-29"].decay_state is SOFT
        assert "turn-1" not in slugs_of(index, "kafka", limit=10)
        assert index.statistics([SCOPE_A]).docs == 16 - 1 + 5  # turn-1 hidden, redis-28 dim
        states = json.loads((tmp_path / "search" / OVERLAY_FILE).read_text())["states"]
        assert states == {"redis-29": SOFT.value, "redis-28": DIM.value, "turn-1": SOFT.value}


def test_a_page_of_hits_is_full_when_hidden_memories_score_highest(tmp_path: Path) -> None:
    """The best hits are hidden by the overlay: each page is still what an index written with
    those states holds, in the same order."""
    hidden = {f"redis-{i:02d}": SOFT for i in range(12, 30)}  # the 18 best
    with (
        SearchIndex.open(tmp_path / "swept") as swept,
        SearchIndex.open(tmp_path / "fresh") as fresh,
    ):
        swept.upsert(corpus())
        swept.set_decay_states(hidden)
        fresh.upsert(
            [
                d.model_copy(update={"decay_state": hidden.get(d.slug, d.decay_state)})
                for d in corpus()
            ]
        )
        for limit, offset in ((1, 0), (5, 0), (5, 5), (20, 0)):
            page = slugs_of(swept, "redis cache", limit=limit, offset=offset)
            assert page == slugs_of(fresh, "redis cache", limit=limit, offset=offset)
        assert slugs_of(swept, "redis", limit=3) == ["redis-11", "redis-10", "redis-09"]
        for limit in (3, 12):
            ranked = swept.local_bm25("redis cache", limit=limit)
            assert len(ranked.hits) == limit
            assert not {hit.slug for hit in ranked.hits} & set(hidden)
            assert ranked.hits == fresh.local_bm25("redis cache", limit=limit).hits


def test_the_states_survive_a_reopen_and_reach_a_reader_process(tmp_path: Path) -> None:
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as writer, SearchIndex.open(directory) as reader:
        writer.upsert(corpus())
        reader.refresh()
        assert "redis-29" in slugs_of(reader, "redis", limit=40)
        writer.set_decay_states({"redis-29": SOFT, "redis-27": DIM})
        reader.refresh()  # what a reader process does after each write (`daemon.readers`)
        assert "redis-29" not in slugs_of(reader, "redis", limit=40)
        assert reader.stored(["redis-27"])["redis-27"].decay_state is DIM
    with SearchIndex.open(directory) as reopened:
        assert "redis-29" not in slugs_of(reopened, "redis", limit=40)
        assert reopened.stored(["redis-27"])["redis-27"].decay_state is DIM


def test_a_memory_written_again_or_deleted_leaves_the_overlay(tmp_path: Path) -> None:
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index:
        index.upsert(corpus())
        index.set_decay_states({"redis-29": SOFT, "redis-28": SOFT, "redis-27": DIM})
        # A recall revives redis-29: the service writes it again, alive.
        revived = next(d for d in corpus() if d.slug == "redis-29")
        index.upsert([revived])
        assert slugs_of(index, "redis", limit=1) == ["redis-29"]
        index.delete(["redis-28"])
        states = json.loads((directory / OVERLAY_FILE).read_text())["states"]
        assert states == {"redis-27": DIM.value}
        index.upsert([next(d for d in corpus() if d.slug == "redis-27")])
        assert not (directory / OVERLAY_FILE).exists()  # nothing left to hold
        assert index.stored(["redis-27"])["redis-27"].decay_state is DecayState.ALIVE
        index.set_decay_states({"redis-26": SOFT})
        index.clear()
        assert not (directory / OVERLAY_FILE).exists()


def test_a_turn_beside_a_faded_one_is_rewritten_with_its_new_context(tmp_path: Path) -> None:
    """The turns next to one that fades lose its words from their context (a fresh index
    of the result gives them the same), and a dim neighbour written again for that keeps
    its new state in its document."""
    chat = [session(f"t{i}", i, f"word{i}") for i in range(3)]
    with SearchIndex.open(tmp_path / "search") as index:
        index.upsert(chat)
        assert set(slugs_of(index, "word1", context_boost=0.5)) == {"t0", "t1", "t2"}
        index.set_decay_states({"t1": SOFT, "t2": DIM})
        assert slugs_of(index, "word1", context_boost=0.5) == []
        # t0 and t2 are each other's nearest visible turns now.
        assert set(slugs_of(index, "word2", context_boost=0.5)) == {"t0", "t2"}
        assert set(slugs_of(index, "word0", context_boost=0.5)) == {"t0", "t2"}
        states = json.loads((tmp_path / "search" / OVERLAY_FILE).read_text())["states"]
        assert states == {"t1": SOFT.value}  # t2 was rewritten, dim in its document
        assert index.stored(["t2"])["t2"].decay_state is DIM
        assert index.near_in_time(
            scope_hash=SCOPE_A,
            type=MemoryType.SESSION,
            at=chat[1].created_at,
            window=timedelta(minutes=30),
            exclude="t1",
        ) == (["t0"], ["t2"])


@pytest.mark.parametrize("content", ["{not json", '{"format": 9, "states": {}}', '{"states": 3}'])
def test_an_unreadable_overlay_refuses_to_open_with_the_reindex_hint(
    tmp_path: Path, content: str
) -> None:
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index:
        index.upsert(corpus())
        index.set_decay_states({"redis-29": SOFT})
    (directory / OVERLAY_FILE).write_text(content)
    with pytest.raises(StorageError, match=OVERLAY_FILE) as raised:
        SearchIndex.open(directory)
    assert "memoryd reindex" in str(raised.value.hint)
    with SearchIndex.recreate(directory) as rebuilt:
        assert not (directory / OVERLAY_FILE).exists()
        assert rebuilt.count() == 0


def test_a_failed_overlay_write_is_an_error_and_the_next_write_lands_it(tmp_path: Path) -> None:
    """The commit stands; the states hold in this process; a retry (the sweep's recovery)
    writes the file."""
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index:
        index.upsert(corpus())
        (directory / f"{OVERLAY_FILE}.tmp").mkdir()  # the temp file cannot be created
        with pytest.raises(StorageError, match=OVERLAY_FILE):
            index.set_decay_states({"redis-29": SOFT})
        assert "redis-29" not in slugs_of(index, "redis", limit=40)
        os.rmdir(directory / f"{OVERLAY_FILE}.tmp")
        index.set_decay_states({"redis-29": SOFT})
    with SearchIndex.open(directory) as reopened:
        assert "redis-29" not in slugs_of(reopened, "redis", limit=40)
