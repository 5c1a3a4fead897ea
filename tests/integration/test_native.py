"""Native-heap tuning: glibc's arenas are capped in every process that opens the graph."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import weakref

import pytest

from memoryd.native import ARENAS, child_environment


def test_a_background_daemon_starts_with_capped_arenas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert child_environment()["MALLOC_ARENA_MAX"] == str(ARENAS)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert child_environment()["MALLOC_ARENA_MAX"] == "4"  # the user's choice wins


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_capping_in_process_keeps_threads_to_two_arenas() -> None:
    """Eight threads allocating at once after the cap share two arenas (glibc's
    malloc_stats prints one "Arena N:" block per arena on stderr)."""
    code = (
        "from memoryd.native import limit_malloc_arenas\n"
        "limit_malloc_arenas()\n"
        "import threading\n"
        "out = []\n"
        "def work():\n"
        "    out.append(sum(len(bytes(1000)) for _ in range(20000)))\n"
        "threads = [threading.Thread(target=work) for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(len(out), out[0])\n"
        "import ctypes; ctypes.CDLL('libc.so.6').malloc_stats()\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "MALLOC_ARENA_MAX"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["8", "20000000"]
    arenas = [line for line in proc.stderr.splitlines() if line.startswith("Arena ")]
    assert 1 <= len(arenas) <= ARENAS


def test_a_bulk_write_collects_less_often_and_puts_the_collector_back() -> None:
    from memoryd.native import fewer_collections

    before = gc.get_threshold()
    with fewer_collections(young=before[0] * 10):
        assert gc.get_threshold() == (before[0] * 10, *before[1:])
        assert gc.get_freeze_count() > 0  # what lived before the write is not walked again
        cycle = _Node()
        cycle.me = cycle
        made_inside = weakref.ref(cycle)
        del cycle
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert made_inside() is None  # a cycle made during the write is still collected


def test_a_write_inside_another_leaves_the_collector_to_the_outer_one() -> None:
    """`record` holds the collector for its whole write, and the batch write inside it
    does too: the inner one neither unfreezes nor puts the threshold back early."""
    from memoryd.native import fewer_collections

    before = gc.get_threshold()
    with fewer_collections(young=before[0] * 10):
        assert gc.get_freeze_count() > 0
        with fewer_collections():
            pass
        # Still frozen: an unfreeze empties the permanent generation. (Not the same count: a
        # frozen object freed meanwhile, by this thread or another, leaves it.)
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (before[0] * 10, *before[1:])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_another_threads_hold_neither_changes_nor_restores_the_collector() -> None:
    """A recall thread loads its tables under `fewer_collections` while the writer may run a
    bulk write under its own: only the first holder changes the collector's settings and puts
    them back, so none is left raised for good whichever ends first."""
    from memoryd.native import fewer_collections

    before = gc.get_threshold()
    inside, leave = threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def other() -> None:
        with fewer_collections(young=before[0] * 7):
            seen.append(gc.get_threshold())
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with fewer_collections(young=before[0] * 3):  # the other thread holds it
        assert gc.get_threshold() == (before[0] * 7, *before[1:])
    assert gc.get_threshold() == (before[0] * 7, *before[1:])  # still the holder's
    leave.set()
    thread.join(10)
    assert seen == [(before[0] * 7, *before[1:])]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


class _Node:
    me: object
