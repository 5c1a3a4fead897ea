"""How the daemon calls the (synchronous) service from the event loop.

- Writes go through ONE writer thread, in arrival order: Kuzu allows one write transaction at
  a time and the audit chain wants one appender, so a queue is simpler and fairer than a lock.
- Reads run concurrently on the threadpool (each thread has its own graph connection).
- Exclusive calls (reindex swaps the graph and the search index underneath everyone) run on
  the writer thread and also shut reads out with a read/write gate.
- Background work (the enrichment worker, supersede judging, scheduled sweeps) waits, between
  its steps, until no request is in flight (`yield_to_requests`; the requests are counted by
  `CountRequests` around the app), so a user's recall or write never queues behind it; and
  within a step, before each graph statement (`background`): the embedded engine holds the
  GIL for a whole statement, so a request arriving mid-step would otherwise wait for every
  statement the step has left. It also runs on threads of a lower OS priority
  (`BACKGROUND_NICENESS`): a background write holds the writer's turn while a low-priority
  thread carries it out, so a hook in another process (`memoryd capture`, which never asks
  the daemon and so is no request it could wait for) gets the cores first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any, Generic, ParamSpec, TypeVar

import anyio.to_thread

from memoryd.errors import StorageError
from memoryd.native import lower_thread_priority, yielding_to

logger = logging.getLogger(__name__)

QUIET_S = 0.05
"""Background work starts a step only once no request arrived or ended for this long, or
for twice the recent spacing of requests if that is longer (at most `BURST_S`): an agent's
calls come in bursts, and a step started in a pause would overlap the burst's next call."""
BURST_S = 1.0
"""Requests further apart than this belong to no burst (they do not lengthen the wait)."""
STARVE_S = 5.0
"""...and at the latest after waiting this long, so a steady stream of requests cannot hold
the queue back for ever (one step, a few tens of milliseconds, then it waits again)."""

PAUSE_S = 0.5
"""The longest one background graph statement waits for requests in flight (`background`):
a request that waits on what the paused step holds cannot hold it for longer."""
PAUSE_POLL_S = 0.002

WRITER_THREAD = "memoryd-writer"
BACKGROUND_THREAD = "memoryd-background"

BACKGROUND_NICENESS = 10
"""How far below the daemon's own OS priority its background threads run: a busy core goes
to a user's hook or request first, while an idle one still does the background work."""

P = ParamSpec("P")
T = TypeVar("T")
ItemT = TypeVar("ItemT")


class ReadWriteGate:
    """Many readers or one exclusive holder; a waiting exclusive holder blocks new readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._readers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class ServiceRunner:
    """Runs service calls off the event loop: reads in parallel, writes one by one."""

    def __init__(self) -> None:
        self.gate = ReadWriteGate()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=WRITER_THREAD)
        # Background work's threads, at a lower OS priority from their start: the writes'
        # (one, used only while it holds the writer's turn) and the reads'.
        self._background_writer = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=f"{WRITER_THREAD}-background",
            initializer=lower_thread_priority,
            initargs=(BACKGROUND_NICENESS,),
        )
        self._background_reads = ThreadPoolExecutor(
            max_workers=2,
            thread_name_prefix=BACKGROUND_THREAD,
            initializer=lower_thread_priority,
            initargs=(BACKGROUND_NICENESS,),
        )
        self._closed = False
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._requests = 0
        self._last_request = 0.0
        self._last_start = 0.0
        self._spacing = 0.0
        """The recent spacing of requests within a burst (moving average of their gaps)."""
        self._no_requests: asyncio.Event | None = None

    # -- requests in flight (event-loop thread only) --------------------------------------
    @property
    def requests_in_flight(self) -> int:
        return self._requests

    def request_started(self) -> None:
        now = time.monotonic()
        gap, self._last_start = now - self._last_start, now
        # Gaps past BURST_S are pauses between bursts: they let the spacing decay.
        self._spacing = 0.7 * self._spacing + 0.3 * (gap if gap < BURST_S else 0.0)
        self._requests += 1
        if self._no_requests is not None:
            self._no_requests.clear()

    def request_ended(self) -> None:
        self._requests -= 1
        self._last_request = time.monotonic()
        if not self._requests and self._no_requests is not None:
            self._no_requests.set()

    async def yield_to_requests(
        self, quiet_s: float = QUIET_S, starve_s: float = STARVE_S
    ) -> float:
        """Wait until no request is in flight and none ended in the last `quiet_s` (or twice
        the recent spacing of requests, see `QUIET_S`), or `starve_s` went by; background
        work calls it before each step. Returns the wait."""
        started = time.monotonic()
        deadline = started + starve_s
        if self._no_requests is None:
            self._no_requests = asyncio.Event()
            if not self._requests:
                self._no_requests.set()
        while (now := time.monotonic()) < deadline:
            if self._requests:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._no_requests.wait(), deadline - now)
                continue
            wait = max(quiet_s, min(2.0 * self._spacing, BURST_S))
            quiet = self._last_request + wait - now
            if quiet <= 0:
                break
            await asyncio.sleep(min(quiet, deadline - now))
        return time.monotonic() - started

    def background(self, fn: Callable[P, T]) -> Callable[P, T]:
        """`fn` as background work: each graph statement it runs first waits while a request
        is in flight (`courtesy_wait`), and `read` or `write` run it on a low-priority thread.
        Pass the result to `read` or `write`."""
        return _Background(fn, self.courtesy_wait)

    def courtesy_wait(self) -> None:
        """Before a background graph statement: wait while a request is in flight, at most
        `PAUSE_S`. On the writer thread, not while another write is queued behind this one
        (it may be the request's own, and it waits for this one to finish)."""
        if not self._requests:
            return
        deadline = time.monotonic() + PAUSE_S
        on_writer = threading.current_thread().name.startswith(WRITER_THREAD)
        while self._requests and time.monotonic() < deadline:
            if on_writer and self._pending > 1:
                return
            time.sleep(PAUSE_POLL_S)

    @property
    def pending_writes(self) -> int:
        """Writes queued or running (for /v1/health and for shutdown logs)."""
        return self._pending

    async def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        call = functools.partial(self._shared, functools.partial(fn, *args, **kwargs))
        if isinstance(fn, _Background):
            return await asyncio.wrap_future(self._background_reads.submit(call))
        return await anyio.to_thread.run_sync(call)

    async def write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        call: Callable[[], T] = functools.partial(fn, *args, **kwargs)
        if isinstance(fn, _Background):
            call = functools.partial(self._low_priority, call)
        return await self._submit(self._shared, call)

    async def exclusive(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._submit(self._alone, functools.partial(fn, *args, **kwargs))

    def write_later(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue a write nobody waits for (recall counts); a failure is logged, not raised."""
        future = self._queue(self._shared, functools.partial(fn, *args, **kwargs))
        future.add_done_callback(_log_failure)

    def run_write(self, fn: Callable[[], T]) -> T:
        """A write from a plain thread (daemon start-up): same queue, waits for the result."""
        return self._queue(self._shared, fn).result()

    def close(self) -> None:
        """Refuse new writes, then finish every write already queued."""
        self._closed = True
        if self._pending:
            logger.info("finishing %d queued write(s) before shutdown", self._pending)
        self._writer.shutdown(wait=True)
        self._background_writer.shutdown(wait=True)
        self._background_reads.shutdown(wait=True)

    # -- plumbing -------------------------------------------------------------------------
    async def _submit(self, runner: Callable[[Callable[[], T]], T], call: Callable[[], T]) -> T:
        # A client that goes away does not cancel its write: once queued it is carried out, so
        # an acknowledged-or-not write never half-happens because of a dropped connection.
        return await asyncio.shield(asyncio.wrap_future(self._queue(runner, call)))

    def _queue(self, runner: Callable[[Callable[[], T]], T], call: Callable[[], T]) -> Future[T]:
        if self._closed:
            raise StorageError(
                "the daemon is shutting down and takes no more writes",
                hint="retry once `memoryd serve` runs again",
            )
        with self._pending_lock:
            self._pending += 1
        try:
            future = self._writer.submit(runner, call)
        except RuntimeError as exc:  # the executor shut down between the check and submit
            with self._pending_lock:
                self._pending -= 1
            raise StorageError("the daemon is shutting down and takes no more writes") from exc
        future.add_done_callback(self._done)
        return future

    def _done(self, _: object) -> None:
        with self._pending_lock:
            self._pending -= 1

    def _shared(self, call: Callable[[], T]) -> T:
        with self.gate.shared():
            return call()

    def _alone(self, call: Callable[[], T]) -> T:
        with self.gate.exclusive():
            return call()

    def _low_priority(self, call: Callable[[], T]) -> T:
        """On the writer thread: carry out a background write on the low-priority writer
        thread and wait for it. The writer's turn is held meanwhile, so writes stay one at a
        time and in order; only the thread the CPU sees differs. When a write already waits
        behind it (it may be a user's), it runs here at the daemon's priority: a lowered
        thread cannot be raised again, and the waiting write must not wait on one."""
        if self._pending > 1:
            return call()
        return self._background_writer.submit(call).result()


class _Background(Generic[P, T]):
    """A function run as background work (`ServiceRunner.background`)."""

    def __init__(self, fn: Callable[P, T], wait: Callable[[], None]) -> None:
        self._fn = fn
        self._wait = wait
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T:
        with yielding_to(self._wait):
            return self._fn(*args, **kwargs)


UNCOUNTED = frozenset({"/v1/health", "/v1/events"})


class CountRequests:
    """ASGI wrapper: counts the HTTP requests in flight on the runner (health probes and the
    page's event stream, which stays open, aside), for `ServiceRunner.yield_to_requests`."""

    def __init__(self, app: Any, runner: ServiceRunner) -> None:
        self.app = app
        self.runner = runner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in UNCOUNTED:
            await self.app(scope, receive, send)
            return
        self.runner.request_started()
        try:
            await self.app(scope, receive, send)
        finally:
            self.runner.request_ended()


def _log_failure(future: Future[Any]) -> None:
    exc = future.exception()
    if exc is not None:
        logger.error("a background write failed: %s", exc, exc_info=exc)


class Batcher(Generic[ItemT]):
    """Writes nobody waits for, gathered: at most one batch is queued on the writer at a time.

    Under load every recall would otherwise queue its own small write and the writer would
    fall behind; batched, whatever arrived while one batch ran is written as the next. A
    batch holds at most `max_batch` items and the rest is queued again behind it, so writes
    somebody waits for (a `record`) never sit behind one long batch.
    """

    def __init__(
        self,
        runner: ServiceRunner,
        write: Callable[[list[ItemT]], object],
        *,
        max_batch: int = 16,
    ) -> None:
        self._runner = runner
        self._write = write
        self._max_batch = max_batch
        self._items: list[ItemT] = []
        self._queued = False
        self._lock = threading.Lock()

    def add(self, item: ItemT) -> None:
        with self._lock:
            self._items.append(item)
            if self._queued:
                return
            self._queued = True
        try:
            self._runner.write_later(self._flush)
        except StorageError:
            with self._lock:
                self._queued = False
            raise

    def _flush(self) -> None:
        with self._lock:
            items = self._items[: self._max_batch]
            self._items = self._items[self._max_batch :]
            again = self._queued = bool(self._items)
        if again:
            try:
                self._runner.write_later(self._flush)  # behind whatever was queued meanwhile
            except StorageError:  # shutting down: there is no later, so write it all now
                with self._lock:
                    items, self._items, self._queued = items + self._items, [], False
        if items:
            self._write(items)
