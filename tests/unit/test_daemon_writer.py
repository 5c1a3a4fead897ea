"""The writer queue: one write at a time, in order; batches of background writes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from memoryd.api.runner import Batcher, ServiceRunner
from memoryd.errors import StorageError
from tests.waiting import wait_until


def test_writes_run_one_at_a_time_in_arrival_order() -> None:
    runner = ServiceRunner()
    running = 0
    overlap = False
    order: list[int] = []
    lock = threading.Lock()

    def write(n: int) -> int:
        nonlocal running, overlap
        with lock:
            running += 1
            overlap = overlap or running > 1
        time.sleep(0.002)
        order.append(n)
        with lock:
            running -= 1
        return n

    async def many() -> list[int]:
        return await asyncio.gather(*(runner.write(write, n) for n in range(30)))

    try:
        assert asyncio.run(many()) == list(range(30))
    finally:
        runner.close()
    assert order == list(range(30))
    assert not overlap


def test_a_closed_runner_refuses_writes_but_finished_queued_ones() -> None:
    runner = ServiceRunner()
    done: list[int] = []

    def write(n: int) -> None:
        time.sleep(0.01)  # a write that takes a while: the queue must wait for it
        done.append(n)

    for n in range(5):
        runner.write_later(write, n)
    runner.close()
    assert done == [0, 1, 2, 3, 4]
    with pytest.raises(StorageError, match="shutting down"):
        runner.write_later(done.append, 5)


def test_batcher_gathers_and_bounds_batches() -> None:
    runner = ServiceRunner()
    batches: list[list[int]] = []
    release = threading.Event()
    runner.write_later(release.wait)  # hold the writer so items pile up
    batcher = Batcher(runner, batches.append, max_batch=4)
    for n in range(10):
        batcher.add(n)
    assert runner.pending_writes == 2  # the blocker and ONE batch, however many items
    release.set()
    wait_until(lambda: not runner.pending_writes, what="the batches to be written")
    runner.close()
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_batcher_writes_everything_when_the_runner_closes() -> None:
    runner = ServiceRunner()
    batches: list[list[int]] = []
    release = threading.Event()
    runner.write_later(release.wait)
    batcher = Batcher(runner, batches.append, max_batch=2)
    for n in range(5):
        batcher.add(n)
    closer = threading.Thread(target=runner.close)
    closer.start()  # closes the queue while the first batch still waits
    wait_until(lambda: runner._closed, what="the runner to start closing")
    release.set()
    closer.join()
    assert [n for batch in batches for n in batch] == [0, 1, 2, 3, 4]
