"""Scope statistics saved beside the index (`search/stats_file.py`): a fresh index loads them
instead of counting, and what it loads always equals a count from scratch."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from memoryd.models import DecayState, MemoryType
from memoryd.search import stats_format, tallies
from memoryd.search.engine import SCHEMA_VERSION
from memoryd.search.index import Placed, SearchIndex
from memoryd.search.stats import Turn
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


def test_a_fresh_index_decodes_only_the_entries_it_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tallies, "_DELTA_MIN_BYTES", 0)  # a write folds the frames in
    rng = random.Random(3)
    directory = tmp_path / "search"
    with SearchIndex.open(directory) as index:
        index.upsert([random_doc(rng, f"m{i}") for i in range(60)])
        listed_views(index)
        for i, scope in enumerate(SCOPES):  # each scope's file saved whole, with a frame
            index.upsert([random_doc(rng, f"m{60 + i}").model_copy(update={"scope_hash": scope})])
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
    # Flipped bits in the header and sections (a corrupt entry: the test after the next).
    at = len(stats_format.MAGIC) + stats_format.HEAD.size + 20
    files[0].write_bytes(raw[:at] + bytes(b ^ 1 for b in raw[at : at + 10]) + raw[at + 10 :])
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
        assert not list((directory / STATS_DIR).glob("*.stats"))  # the manifest alone
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


def test_small_writes_append_frames_and_never_save_a_whole_file(tmp_path: Path) -> None:
    """Saving a scope costs what writing its whole file costs: a burst of small writes
    appends a frame per commit instead (even when saving is not due), and a fresh index
    loads the file with its frames, as a count finds them."""
    directory = tmp_path / "search"
    index = _tallied_home(directory, 14)
    assert index._files is not None
    saves: list[str] = []
    original = index._files.save

    def save(scope: str, *args: Any, **kwargs: Any) -> None:
        saves.append(scope)
        original(scope, *args, **kwargs)

    index._files.save = save  # type: ignore[method-assign]
    rng = random.Random(15)
    index._save_next = time.monotonic() + 3600  # the last save was slow
    for i in range(10):
        index.upsert([random_doc(rng, f"burst{i}")])
    assert saves == []
    loaded, counted = fresh_views(directory)
    assert counted == 0
    assert loaded == from_scratch(directory)
    index.close()
    assert saves == []  # nothing left behind to save
    assert fresh_views(directory) == (loaded, 0)


def test_memories_leaving_the_index_leave_nothing_in_the_saved_files(tmp_path: Path) -> None:
    """A scope whose memories are taken out of the index (a scope marked sensitive: the
    on-disk index then holds nothing of it) keeps no copy of them beside it."""
    directory = tmp_path / "search"
    index = _tallied_home(directory, 16)
    index.close()
    with SearchIndex.open(directory) as writer:
        gone = [
            d.slug
            for d in writer.stored(sorted(writer.slugs())).values()
            if d.scope_hash == SCOPES[0]
        ]
        assert gone
        assert all(slug.encode() in saved_bytes(directory, SCOPES[0]) for slug in gone)
        writer.delete(gone)
        # A writer that never recalled: saved again without them (an empty scope).
        assert not any(slug.encode() in saved_bytes(directory, SCOPES[0]) for slug in gone)
    with SearchIndex.open(directory) as writer:
        listed_views(writer)  # tallied: the next commit saves what is left
        writer.upsert(
            [
                random_doc(random.Random(17), "elsewhere").model_copy(
                    update={"scope_hash": SCOPES[1]}
                )
            ]
        )
    held = saved_bytes(directory, SCOPES[0])
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


def test_a_writer_that_never_recalls_keeps_the_files_current(tmp_path: Path) -> None:
    """A short-lived writer (a CLI command) tallies nothing and loads no file to write: it
    appends a frame of its change, so the next recall loads the scope instead of counting."""
    directory = tmp_path / "search"
    _tallied_home(directory, 23).close()
    with SearchIndex.open(directory) as index:
        index.upsert([random_doc(random.Random(24), "one-more")])
        assert index._stats.tallied() == []
    loaded, counted = fresh_views(directory)
    assert counted == 0
    assert loaded == from_scratch(directory)


def saved_bytes(directory: Path, scope: str) -> bytes:
    """Everything saved beside the index of `scope` (its file and its frames)."""
    held = [directory / STATS_DIR / f"{scope}.{kind}" for kind in ("stats", "delta")]
    return b"".join(path.read_bytes() for path in held if path.exists())


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_writes_from_processes_that_never_recall_keep_every_scope_loadable(
    tmp_path: Path, seed: int
) -> None:
    """Each write in a fresh index that never recalls (a CLI `record`, `import`, `sync
    import`, `forget`, a decay sweep): the next fresh index loads every scope and finds
    what a count finds. A sweep that deletes memories it read without their text is the
    one write whose scope is counted again."""
    rng = random.Random(seed)
    directory = tmp_path / "search"
    _tallied_home(directory, seed).close()
    serial = 0
    for step in range(14):
        with SearchIndex.open(directory) as index:
            live = sorted(index.slugs())
            action = rng.random()
            light = False
            if action < 0.3:
                index.upsert([random_doc(rng, f"w{serial + i}") for i in range(3)])
                serial += 3
            elif action < 0.45:  # an edit: other words over the old ones
                index.upsert([random_doc(rng, slug) for slug in rng.sample(live, k=2)])
            elif action < 0.55:  # the same words, another state (a supersede)
                stored = index.stored(rng.sample(live, k=2))
                index.upsert(
                    [d.model_copy(update={"decay_state": DecayState.DIM}) for d in stored.values()]
                )
            elif action < 0.65:
                index.delete(rng.sample(live, k=1))
            elif action < 0.8:  # a sweep that reads what it moves
                states = [DecayState.SOFT_FORGOTTEN, DecayState.DIM, DecayState.ALIVE]
                index.set_decay_states({slug: rng.choice(states) for slug in rng.sample(live, k=3)})
            else:  # a sweep given where its memories stand: read without their text
                stored = index.stored(rng.sample(live, k=2))
                places = {
                    d.slug: Placed(d.scope_hash, d.decay_state, d.created_at)
                    for d in stored.values()
                }
                moved, gone = sorted(places)
                index.set_decay_states({moved: DecayState.DIM}, [gone], places)
                light = True
            assert index._stats.tallied() == []
        loaded, counted = fresh_views(directory)
        assert loaded == from_scratch(directory), f"after step {step}"
        if not light:
            assert counted == 0, f"step {step} left a scope to count"


def test_frames_fold_into_the_file_once_they_outgrow_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loader decodes every frame: once they outgrow a quarter of the file, the writer
    saves the file again with them, by its close at the latest (and keeps no tally of the
    scope after)."""
    monkeypatch.setattr(tallies, "_DELTA_MIN_BYTES", 0)
    directory = tmp_path / "search"
    _tallied_home(directory, 41).close()
    delta = directory / STATS_DIR / f"{SCOPES[0]}.delta"
    rng = random.Random(42)
    sizes = []
    for i in range(12):
        with SearchIndex.open(directory) as index:
            doc = random_doc(rng, f"f{i}").model_copy(update={"scope_hash": SCOPES[0]})
            index.upsert([doc])
        assert index._stats.tallied() == []
        sizes.append(delta.stat().st_size if delta.exists() else 0)
        assert fresh_views(directory) == (from_scratch(directory), 0)
    assert 0 in sizes[1:]  # folded at least once
    base = (directory / STATS_DIR / f"{SCOPES[0]}.stats").stat().st_size
    assert max(sizes) <= base  # never let grow past the file


def test_a_torn_frame_is_counted_again_and_not_built_on(tmp_path: Path) -> None:
    directory = tmp_path / "search"
    _tallied_home(directory, 43).close()
    rng = random.Random(44)
    for i in range(2):
        with SearchIndex.open(directory) as index:
            index.upsert([random_doc(rng, f"t{i}").model_copy(update={"scope_hash": SCOPES[1]})])
    delta = directory / STATS_DIR / f"{SCOPES[1]}.delta"
    delta.write_bytes(delta.read_bytes()[:-3])  # the last append cut short (a crash)
    loaded, counted = fresh_views(directory)
    assert counted == 1
    assert loaded == from_scratch(directory)
    with SearchIndex.open(directory) as index:  # a writer does not append after it
        index.upsert([random_doc(rng, "t2").model_copy(update={"scope_hash": SCOPES[1]})])
    assert fresh_views(directory)[0] == from_scratch(directory)


def test_an_edit_leaves_nothing_of_the_old_words_beside_the_index(tmp_path: Path) -> None:
    """Frames only add: a write that takes words out of a scope (an edit, a delete) saves
    the scope's file again without them, in a writer that never recalled as well."""
    directory = tmp_path / "search"
    _tallied_home(directory, 45).close()
    with SearchIndex.open(directory) as index:
        first = index.stored(sorted(index.slugs()))
        doc = next(d for d in first.values() if d.scope_hash == SCOPES[2])
        secret = "zanzibarquokka"
        index.upsert([doc.model_copy(update={"body": f"{doc.body} {secret}"})])
    assert secret.encode() in saved_bytes(directory, SCOPES[2])
    with SearchIndex.open(directory) as index:
        index.upsert([doc.model_copy(update={"body": "the words now"})])
        assert index._stats.tallied() == []
    assert secret.encode() not in saved_bytes(directory, SCOPES[2])
    assert fresh_views(directory) == (from_scratch(directory), 0)


def test_a_new_index_keeps_the_statistics_of_its_first_writes(tmp_path: Path) -> None:
    """A scope written from the first commit on (an import into a new home) has a file to
    load before any recall counted it."""
    directory = tmp_path / "search"
    rng = random.Random(46)
    with SearchIndex.open(directory) as index:
        for start in range(0, 40, 10):
            index.upsert([random_doc(rng, f"i{start + i}") for i in range(10)])
        assert index._stats.tallied() == []
    assert fresh_views(directory) == (from_scratch(directory), 0)


def test_an_index_from_before_the_saved_statistics_saves_what_its_first_recall_counts(
    tmp_path: Path,
) -> None:
    """An index without a manifest (written before there were saved statistics, and not
    written since) gets one on open: its first recall saves what it counts, and the next
    process loads it."""
    directory = tmp_path / "search"
    _tallied_home(directory, 47).close()
    shutil.rmtree(directory / STATS_DIR)
    meta = {"schema_version": SCHEMA_VERSION}  # an index from before identities, too
    (directory / "index_meta.json").write_text(json.dumps(meta))
    assert fresh_views(directory)[1] > 0  # counts, and saves
    assert fresh_views(directory) == (from_scratch(directory), 0)


def _format_2(path: Path, identity: str, analysis: str, scope: str, tally: Any) -> None:
    """Write a scope's file as format 2 held it (everything but the entries in one JSON
    header), from a tally: a home saved before format 3."""
    entries = [(key, tally.held(key)) for key in tally.keyed]
    rows = [orjson.dumps(stats_format.fields_of(entry)) for _, entry in entries]
    opstamp = index_opstamp(path.parent.parent)
    assert opstamp is not None
    header = orjson.dumps(
        {
            "format": 2,
            "index": identity,
            "analysis": analysis,
            "scope": scope,
            "opstamp": opstamp,
            "counts": [[c.docs, c.titles, c.bodies, c.df] for c in (tally.visible, tally.hidden)],
            "slugs": [entry.slug for _, entry in entries],
            "keys": [key for key, _ in entries],
            "ends": list(itertools.accumulate(map(len, rows))),
            "turns": [i for i, (_, e) in enumerate(entries) if e.type is MemoryType.SESSION],
        }
    )
    body = header + b"".join(rows)
    head = struct.pack(">QIQ", len(header), zlib.crc32(body), opstamp)
    path.write_bytes(b"memoryd scope statistics 2\n" + head + body)


def test_the_saved_file_holds_every_count_entry_and_turn_as_counted(tmp_path: Path) -> None:
    """Format 3 (binary sections) round-trips exactly: each scope's document frequencies,
    lengths and counts, every entry, and the turns the lines are filled from; saved from a
    count (entries decoded) and again from a load (entries copied as they were saved)."""
    directory = tmp_path / "search"
    _tallied_home(directory, 51).close()
    with SearchIndex.open(directory) as counted:
        files, stamp = counted._files, counted._opstamp
        assert files is not None
        assert stamp is not None
        counted._files = None
        listed_views(counted)
        for scope in SCOPES:
            tally = counted._stats._scopes[scope]
            sessions = [tally.held(key) for key in tally.keyed]
            expected = {
                Turn(e.slug, e.key, e.at, e.hidden, e.text, len(e.body))
                for e in sessions
                if e is not None and e.type is MemoryType.SESSION
            }
            saved = counted._stats.saved(scope)
            for _ in range(2):  # from the count, then from the load (nothing decoded)
                assert saved is not None
                files.save(scope, stamp, *saved, writer=True)
                path = directory / STATS_DIR / f"{scope}.stats"
                assert path.read_bytes().startswith(b"memoryd scope statistics 3\n")
                loaded = files.load(scope, stamp)
                assert loaded is not None
                visible, hidden, keyed, rows, turns, changes = loaded
                assert changes == []
                for got, want in ((visible, tally.visible), (hidden, tally.hidden)):
                    assert (got.docs, got.titles, got.bodies) == (
                        want.docs,
                        want.titles,
                        want.bodies,
                    )
                    assert got.df == want.df
                assert keyed.keys() == tally.keyed.keys()
                assert all(rows.entry(key) == tally.held(key) for key in keyed)
                assert sorted(turns) == sorted(expected)
                saved = (visible, hidden, list(keyed.items()), rows)  # type: ignore[arg-type]


def test_a_format_2_file_is_read_once_then_saved_as_format_3(tmp_path: Path) -> None:
    """A home saved before format 3 keeps loading (no count) and its first recall saves
    the file again in the new format; a frame appended after the old file still applies."""
    directory = tmp_path / "search"
    _tallied_home(directory, 53).close()
    with SearchIndex.open(directory) as counted:
        counted._files = None
        listed_views(counted)
        files = SearchIndex.open(directory)
        assert files._files is not None
        assert files._files.identity is not None
        identity, analysis = files._files.identity, files._files._analysis
        files.close()
        for scope in SCOPES:
            path = directory / STATS_DIR / f"{scope}.stats"
            (directory / STATS_DIR / f"{scope}.delta").unlink(missing_ok=True)
            _format_2(path, identity, analysis, scope, counted._stats._scopes[scope])
    with SearchIndex.open(directory) as writer:  # a frame after the old file
        writer.upsert(
            [random_doc(random.Random(54), "after").model_copy(update={"scope_hash": SCOPES[0]})]
        )
    old = b"memoryd scope statistics 2\n"
    assert all((directory / STATS_DIR / f"{s}.stats").read_bytes().startswith(old) for s in SCOPES)
    assert fresh_views(directory) == (from_scratch(directory), 0)
    new = b"memoryd scope statistics 3\n"
    assert all((directory / STATS_DIR / f"{s}.stats").read_bytes().startswith(new) for s in SCOPES)
    assert fresh_views(directory) == (from_scratch(directory), 0)


def test_a_corrupt_entry_is_read_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each entry has its CRC-32, checked when it is decoded (a load reads none but the
    turns'): a recall that ranks a corrupt one reads its document instead."""
    monkeypatch.setattr(tallies, "_DELTA_MIN_BYTES", 0)  # the files saved whole on close
    directory = tmp_path / "search"
    _tallied_home(directory, 55).close()
    corrupt: dict[str, list[int]] = {}
    with SearchIndex.open(directory) as index:
        assert index._files is not None
        assert index._opstamp is not None
        for scope in SCOPES:
            loaded = index._files.load(scope, index._opstamp)
            assert loaded is not None
            sessions = {turn.key for turn in loaded[4]}
            keys = [key for key in loaded[2] if key not in sessions]
            path = directory / STATS_DIR / f"{scope}.stats"
            whole = path.read_bytes()
            for key in keys:
                raw = loaded[3].raw(key)
                at = whole.rindex(raw)
                whole = whole[:at] + raw.replace(b'"', b"'", 1) + whole[at + len(raw) :]
            path.write_bytes(whole)
            corrupt[scope] = keys
    assert any(corrupt.values())
    loaded_views, counted = fresh_views(directory)
    assert counted == 0
    assert loaded_views == from_scratch(directory)
    with SearchIndex.open(directory) as index:
        listed_views(index)
        for scope, keys in corrupt.items():
            view = index._stats.view([scope], True, TESTS[0])
            assert all(view.entry(key) is None for key in keys)


def test_bulk_writes_append_frames_and_save_the_file_once_they_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's writer during an import: each batch's frame keeps the scope's file
    current for any reader that starts, and the whole file, whose share the frames
    outgrow, is saved again once the writes pause (no commit between two calls of
    `save_statistics`), or on close; not every few batches."""
    monkeypatch.setattr(tallies, "_DELTA_MIN_BYTES", 0)
    directory = tmp_path / "search"
    rng = random.Random(57)
    docs = [random_doc(rng, f"a{i}") for i in range(90)]
    with SearchIndex.open(directory) as index:
        index.upsert(
            [d.model_copy(update={"scope_hash": SCOPES[i % 3]}) for i, d in enumerate(docs)]
        )
    saves: list[str] = []
    with SearchIndex.open(directory) as index:
        index.keeps_saved = True
        assert index._files is not None
        original = index._files.save

        def save(scope: str, *args: Any, **kwargs: Any) -> None:
            saves.append(scope)
            original(scope, *args, **kwargs)

        index._files.save = save  # type: ignore[method-assign]
        for batch in range(5):
            index._save_next = 0.0  # saving is due: the share of the time is not what waits
            docs = [random_doc(rng, f"b{batch}-{i}") for i in range(5)]
            index.upsert([d.model_copy(update={"scope_hash": SCOPES[0]}) for d in docs])
            index.save_statistics()  # the daemon calls it every few seconds: writes go on
            assert fresh_views(directory) == (from_scratch(directory), 0), f"batch {batch}"
        assert saves == []
        index.save_statistics()  # no commit since the last call
        assert saves == [SCOPES[0]]
        assert not (directory / STATS_DIR / f"{SCOPES[0]}.delta").exists()
        assert fresh_views(directory) == (from_scratch(directory), 0)
        index.upsert([random_doc(rng, "last").model_copy(update={"scope_hash": SCOPES[0]})])
    assert fresh_views(directory) == (from_scratch(directory), 0)
