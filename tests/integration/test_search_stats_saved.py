"""Scope statistics saved beside the index (`search/stats_file.py`): a fresh index loads them
instead of counting, and what it loads always equals a count from scratch."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.models import DecayState
from memoryd.search.index import Placed, SearchIndex
from memoryd.search.stats_file import STATS_DIR, index_opstamp
from tests.integration.test_search_stats import SCOPES, TESTS, random_doc

LISTED: list[list[str]] = [[SCOPES[0]], [SCOPES[1], SCOPES[2]], list(SCOPES)]


def listed_views(index: SearchIndex) -> list[object]:
    """The statistics of the scopes a recall names (the ones saved files answer)."""
    views: list[object] = [
        index.statistics(scopes, include_forgotten=hidden, is_turn=test)
        for scopes in LISTED
        for hidden in (False, True)
        for test in TESTS
    ]
    views += [
        index.local_bm25(query, scope_hashes=list(SCOPES), is_turn=TESTS[0], limit=20)[:5]
        for query in ("redis cache", "数据库 迁移", "bought children")
    ]
    return views


def from_scratch(directory: Path) -> list[object]:
    with SearchIndex.open(directory) as fresh:
        fresh._files = None
        return listed_views(fresh)


def fresh_views(directory: Path) -> tuple[list[object], int]:
    """A fresh index's statistics, and how many scopes it counted rather than loaded."""
    counted: list[str] = []
    with SearchIndex.open(directory) as fresh:
        original = fresh._stats.load

        def load(entries: Any, scopes: Any) -> None:
            counted.extend(scopes or ["<all>"])
            original(entries, scopes)

        fresh._stats.load = load  # type: ignore[method-assign,assignment]
        return listed_views(fresh), len(counted)


@pytest.mark.parametrize("seed", [1, 2])
def test_loaded_statistics_equal_a_count_after_writes_deletes_and_decay(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    directory = tmp_path / "search"
    loaded_whole = 0
    with SearchIndex.open(directory) as index:
        index.upsert([random_doc(rng, f"m{i}") for i in range(20)])
        serial = 20
        for step in range(30):
            if rng.random() < 0.4:
                index._stats.forget()  # a writer that never recalled (the daemon's)
            live = sorted(index.slugs())
            action = rng.random()
            if action < 0.3 or not live:
                index.upsert([random_doc(rng, f"m{serial + i}") for i in range(3)])
                serial += 3
            elif action < 0.5:
                index.upsert([random_doc(rng, slug) for slug in rng.sample(live, k=2)])
            elif action < 0.65:
                index.delete(rng.sample(live, k=1))
            else:  # a decay sweep: states into the overlay, some memories gone
                states = [DecayState.SOFT_FORGOTTEN, DecayState.DIM, DecayState.ALIVE]
                moved = {slug: rng.choice(states) for slug in rng.sample(live, k=3)}
                index.set_decay_states(moved, gone=rng.sample(live, k=1))
            if rng.random() < 0.5:
                listed_views(index)  # the writer tallies: its next commits save the files
            if step % 3 == 2:
                loaded, counted = fresh_views(directory)
                assert loaded == from_scratch(directory), f"after step {step}"
                loaded_whole += counted == 0
        listed_views(index)
        index.upsert([random_doc(rng, "last")])
    loaded, counted = fresh_views(directory)
    assert counted == 0  # the writer's last commit saved every scope
    assert loaded == from_scratch(directory)
    assert loaded_whole > 0


def test_a_fresh_index_decodes_only_the_entries_it_ranks(tmp_path: Path) -> None:
    rng = random.Random(3)
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index:
        index.upsert([random_doc(rng, f"m{i}") for i in range(60)])
        listed_views(index)
        index.upsert([random_doc(rng, "m60")])
    with SearchIndex.open(directory) as fresh:
        fresh.local_bm25("flaky pytest fixture", scope_hashes=[SCOPES[0]], limit=3)
        held = fresh._stats._scopes[SCOPES[0]].keyed.values()
        assert any(isinstance(entry, str) for entry in held)  # still saved, not decoded
    assert fresh_views(directory)[1] == 0


def _tallied_home(directory: Path, seed: int, last_body: str = "") -> SearchIndex:
    rng = random.Random(seed)
    index = SearchIndex.open(directory)
    index.upsert([random_doc(rng, f"m{i}") for i in range(30)])
    listed_views(index)
    last = [random_doc(rng, f"n{i}") for i in range(3)]
    if last_body:  # other words, the same operations (so the same opstamps)
        last = [doc.model_copy(update={"body": last_body}) for doc in last]
    index.upsert(last)
    return index


def test_a_crash_between_the_commit_and_the_saved_statistics_is_counted_again(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "search"
    index = _tallied_home(directory, 5)
    assert fresh_views(directory)[1] == 0
    index._save_stats = lambda *args: None  # type: ignore[method-assign]  # dies after commit
    index.upsert([random_doc(random.Random(6), "after-the-commit")])
    index.delete(["m3"])
    index.close()
    loaded, counted = fresh_views(directory)
    assert counted > 0
    assert loaded == from_scratch(directory)


def test_a_corrupt_cut_or_foreign_file_is_counted_again(tmp_path: Path) -> None:
    directory = tmp_path / "search"
    _tallied_home(directory, 7).close()
    files = sorted((directory / STATS_DIR).glob("*.stats"))
    assert len(files) == len(SCOPES)
    raw = files[0].read_bytes()
    files[0].write_bytes(raw[:-10] + bytes(b ^ 1 for b in raw[-10:]))  # flipped bits
    files[1].write_bytes(raw[: len(raw) // 2])  # cut short
    loaded, counted = fresh_views(directory)
    assert counted == 2
    assert loaded == from_scratch(directory)

    # Another index written the same way reaches the same opstamps: its files are foreign.
    other = tmp_path / "other"
    _tallied_home(other, 7, last_body="kafka consumer lag kafka").close()
    assert index_opstamp(other) == index_opstamp(directory)
    shutil.rmtree(directory / STATS_DIR)
    shutil.copytree(other / STATS_DIR, directory / STATS_DIR)
    loaded, counted = fresh_views(directory)
    assert counted > 0
    assert loaded == from_scratch(directory)


def test_reindex_drops_the_saved_statistics(tmp_path: Path) -> None:
    directory = tmp_path / "search"
    _tallied_home(directory, 9).close()
    with SearchIndex.recreate(directory) as index:
        assert not (directory / STATS_DIR).exists()
        rng = random.Random(10)
        index.upsert([random_doc(rng, f"r{i}") for i in range(12)])
        listed_views(index)
        index.upsert([random_doc(rng, "r12")])
    loaded, counted = fresh_views(directory)
    assert counted == 0
    assert loaded == from_scratch(directory)


def test_a_reader_behind_the_writer_never_loads_newer_statistics(tmp_path: Path) -> None:
    """A reader process opened before the writer's commits counts, or loads, the scopes as
    its own view of the index holds them."""
    directory = tmp_path / "search"
    writer = _tallied_home(directory, 11)
    with SearchIndex.open(directory) as reader:
        before = listed_views(reader)
        writer._save_next = 0.0  # saving is due (on a busy machine the last save was slow)
        writer.upsert([random_doc(random.Random(12), f"late{i}") for i in range(4)])
        listed_views(writer)
        assert fresh_views(directory)[1] == 0
        reader._stats.forget()
        assert listed_views(reader) == before  # its searcher still shows the older commit
        reader.refresh()
        assert listed_views(reader) == from_scratch(directory)
    writer.close()


def test_an_in_memory_index_saves_nothing() -> None:
    with SearchIndex.in_memory("granted") as index:
        index.upsert([random_doc(random.Random(13), f"s{i}") for i in range(5)])
        listed_views(index)
        assert index._files is None


def test_small_writes_save_the_statistics_now_and_then_and_on_close(tmp_path: Path) -> None:
    """Saving a scope costs what writing its whole file costs: a burst of small writes saves
    it once at the start, and closing saves what is left."""
    directory = tmp_path / "search"
    index = _tallied_home(directory, 14)
    assert index._files is not None
    saves: list[str] = []
    original = index._files.save

    def save(scope: str, *args: Any) -> None:
        saves.append(scope)
        original(scope, *args)

    index._files.save = save  # type: ignore[method-assign,assignment]
    index._save_next = 0.0
    index._flush_stats(force=False)
    rng = random.Random(15)
    index._save_next = time.monotonic() + 3600  # the last save was slow
    for i in range(10):
        index.upsert([random_doc(rng, f"burst{i}")])
    assert saves == []
    assert fresh_views(directory)[1] > 0  # behind: counted afresh, never loaded stale
    index.close()
    assert saves  # on close
    loaded, counted = fresh_views(directory)
    assert counted == 0
    assert loaded == from_scratch(directory)


def test_memories_leaving_the_index_leave_nothing_in_the_saved_files(tmp_path: Path) -> None:
    """A scope whose memories are taken out of the index (a scope marked sensitive: the
    on-disk index then holds nothing of it) keeps no copy of them beside it."""
    directory = tmp_path / "search"
    index = _tallied_home(directory, 16)
    index.close()
    path = directory / STATS_DIR / f"{SCOPES[0]}.stats"
    with SearchIndex.open(directory) as writer:
        gone = [
            d.slug
            for d in writer.stored(sorted(writer.slugs())).values()
            if d.scope_hash == SCOPES[0]
        ]
        assert gone
        assert all(slug.encode() in path.read_bytes() for slug in gone)
        writer.delete(gone)
        assert not path.exists()  # a writer that never recalled: dropped, not saved
    with SearchIndex.open(directory) as writer:
        listed_views(writer)  # tallied: the next commit saves what is left
        writer.upsert(
            [
                random_doc(random.Random(17), "elsewhere").model_copy(
                    update={"scope_hash": SCOPES[1]}
                )
            ]
        )
    held = path.read_bytes() if path.exists() else b""
    assert not any(slug.encode() in held for slug in gone)
    assert fresh_views(directory)[0] == from_scratch(directory)


@pytest.mark.parametrize("seed", [21, 22])
def test_a_writer_that_keeps_the_files_updates_them_without_recalling(
    tmp_path: Path, seed: int
) -> None:
    """The daemon's writer (`keeps_saved`) seldom recalls itself: its readers do. Its commits
    update and save the files of the scopes they change instead of only dropping them, so a
    fresh reader loads every scope rather than counting it, and loads what a count finds."""
    rng = random.Random(seed)
    directory = tmp_path / "search"
    _tallied_home(directory, seed).close()
    with SearchIndex.open(directory) as index:
        index.keeps_saved = True
        serial = 0
        for step in range(12):
            live = sorted(index.slugs())
            action = rng.random()
            if action < 0.35:
                index.upsert([random_doc(rng, f"w{serial + i}") for i in range(2)])
                serial += 2
            elif action < 0.55:
                index.upsert([random_doc(rng, slug) for slug in rng.sample(live, k=2)])
            elif action < 0.75:
                index.delete(rng.sample(live, k=1))
            else:  # a sweep that reads what it moves (no places given, nothing deleted)
                states = [DecayState.SOFT_FORGOTTEN, DecayState.DIM, DecayState.ALIVE]
                index.set_decay_states({slug: rng.choice(states) for slug in rng.sample(live, k=3)})
            index._save_next = 0.0  # saving is due (the share it may take is tested above)
            index.save_statistics()
            loaded, counted = fresh_views(directory)
            assert counted == 0, f"step {step} left a scope to count"
            assert loaded == from_scratch(directory), f"after step {step}"

    # A sweep given where its memories stand (as the daemon's is) reads them whole in a
    # scope whose file it takes: kept as well. One it deletes unplaced it reads without text
    # (in a scope not tallied yet): that scope's words cannot be taken out, so its file is
    # dropped and counted again by the next reader.
    with SearchIndex.open(directory) as index:
        index.keeps_saved = True
        stored = index.stored(sorted(index.slugs()))
        moved, gone = (stored[slug] for slug in sorted(stored)[:2])
        places = {d.slug: Placed(d.scope_hash, d.decay_state, d.created_at) for d in (moved, gone)}
        index.set_decay_states({moved.slug: DecayState.DIM}, [gone.slug], places)
        index._save_next = 0.0
        index.save_statistics()
        assert fresh_views(directory) == (from_scratch(directory), 0)
    with SearchIndex.open(directory) as index:
        index.keeps_saved = True
        index.set_decay_states({}, [sorted(index.slugs())[-1]])
        index._save_next = 0.0
        index.save_statistics()
        loaded, counted = fresh_views(directory)
        assert counted == 1
        assert loaded == from_scratch(directory)


def test_a_writer_that_does_not_keep_the_files_drops_them(tmp_path: Path) -> None:
    """A short-lived writer (a CLI command) loads no file to write: it drops the files of the
    scopes it changes, and the next recall counts those."""
    directory = tmp_path / "search"
    _tallied_home(directory, 23).close()
    with SearchIndex.open(directory) as index:
        index.upsert([random_doc(random.Random(24), "one-more")])
        assert index._stats.tallied() == []
    loaded, counted = fresh_views(directory)
    assert counted == 1
    assert loaded == from_scratch(directory)
