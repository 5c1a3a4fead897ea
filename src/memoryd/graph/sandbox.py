"""User Cypher in a sandbox: a child process with its own memory cap, over a private copy.

A user's query can ask the engine for anything. `UNWIND range(1, 10^8)` builds its list with
plain allocations outside the buffer pool (the daemon grew to 23 GB and was killed), a cross
product of every node fills the buffer pool the writer needs, and the engine's timeout does
not fire while a list is being built. No check of the query text can tell which query will
do that, so user Cypher (`memoryd graph query`, `POST /v1/graph/cypher`,
`memoryd.connect().cypher`) never runs in the process that writes:

- the process that owns the graph checkpoints it and copies its data file into a private
  directory, under the write lock, and again only after the graph committed something;
- a worker process (`python -m memoryd.graph.sandbox`) opens that copy read-only with a small
  buffer pool and a bounded address-space reservation, caps itself with RLIMIT_AS at its
  size after opening plus the rest of `graph.cypher_memory_mb`, and runs one query at a time
  under the engine's timeout (`graph.cypher_timeout_ms`);
- the parent waits for the timeout plus a grace period and reads at most
  `graph.cypher_result_mb` of result; a worker past either, or dead, is killed and replaced.

Kuzu cannot open a database read-only while another process writes it (DESIGN.md §2).
LadybugDB can, but a reader kept open while the writer checkpoints is unsynchronised
(LadybugDB issue #666), so both engines read a copy.

    python -m memoryd.graph.sandbox FD     # started by CypherSandbox, never by hand
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd import errors
from memoryd.errors import (
    InvalidInput,
    MemorydError,
    QueryLimitExceeded,
    ResourceExhausted,
    StorageError,
)
from memoryd.graph.store import (
    MEMORY_HINT,
    TIME_HINT,
    CypherResult,
    GraphCopy,
    GraphStore,
    check_cypher,
)
from memoryd.native import spawn_child

if TYPE_CHECKING:  # pickle and the connection load with the first query's process
    from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)

MODULE = "memoryd.graph.sandbox"
START_TIMEOUT_S = 60.0
OPEN_TIMEOUT_S = 120.0
"""Opening a copy replays its WAL: bounded, but not by the query's timeout."""
GRACE_S = 2.0
"""How long past its timeout a query may take before its worker is killed: the engine checks
its timeout between steps, and one step (building a list) can take seconds."""
IDLE_S = 300.0
"""A worker idle this long is stopped: its buffer pool and heap go back to the OS."""
NICENESS = 10
"""User queries yield the CPU to the writer and to recall."""
_MIB = 1024 * 1024


@dataclass(frozen=True)
class CypherLimits:
    """What one user graph query may use (config: `graph.cypher_*`)."""

    memory_mb: int = 1024
    """The worker's memory beyond what opening the graph copy takes: a quarter is its buffer
    pool (a cross product fails there), the rest its heap (a long list fails there)."""
    timeout_ms: int = 10_000
    """The default and the most a caller may ask for."""
    result_mb: int = 32
    """The most result a query may send back (pickled); past it the query is refused."""

    @property
    def buffer_pool_mb(self) -> int:
        return max(64, self.memory_mb // 4)

    @property
    def heap_mb(self) -> int:
        return max(64, self.memory_mb - self.buffer_pool_mb)


class CypherSandbox:
    """Runs user Cypher in one worker process over a private copy of `graph`.

    One query runs at a time; the copy is refreshed when the graph has committed since it was
    taken, so a query sees every write acknowledged before it was asked.
    """

    def __init__(self, workdir: Path | None, limits: CypherLimits) -> None:
        """`workdir`: where the copies go (None: the system's temp dir, for a service that
        must not write into its data dir)."""
        self.limits = limits
        self._workdir = workdir
        self._root: Path | None = None
        self._lock = threading.Lock()
        self._copy: GraphCopy | None = None
        self._source: GraphStore | None = None
        self._worker: _Worker | None = None
        self._names = itertools.count(1)
        self._idle: threading.Timer | None = None
        self._closed = False

    @property
    def worker_pid(self) -> int | None:
        """The worker's pid while one runs."""
        worker = self._worker
        return worker.process.pid if worker is not None and worker.alive() else None

    def run(
        self,
        graph: GraphStore,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """Run one read-only query over `graph` in the worker; see the module docstring. A
        server engine (FalkorDB) runs it itself, under the server's limits."""
        timeout = self._timeout(timeout_ms)
        on_server = getattr(graph, "user_cypher", None)
        if on_server is not None:
            result: CypherResult = on_server(query, params, limit=limit, timeout_ms=timeout)
            return result
        check_cypher(query, params)
        wait_s = 2 * (self.limits.timeout_ms / 1000 + GRACE_S)
        if not self._lock.acquire(timeout=wait_s):
            raise ResourceExhausted(
                f"another graph query has been running for {wait_s:.0f} s; one runs at a time",
                hint="retry when it has finished",
            )
        try:
            if self._closed:
                raise StorageError("the graph query sandbox is closed")
            if self._idle is not None:
                self._idle.cancel()
            copy = self._current_copy(graph)
            worker = self._worker_on(copy)
            try:
                return worker.query(query, params or {}, limit, timeout, self.limits)
            except QueryLimitExceeded as exc:
                if exc.limit == "memory":  # its heap stays grown: start afresh next time
                    self._stop_worker()
                raise
            except StorageError:
                self._stop_worker()
                raise
        finally:
            if not self._closed:
                self._idle = threading.Timer(IDLE_S, self._stop_if_idle)
                self._idle.daemon = True
                self._idle.start()
            self._lock.release()

    def close(self) -> None:
        """Stop the worker and delete the copies."""
        with self._lock:
            self._closed = True
            if self._idle is not None:
                self._idle.cancel()
            self._stop_worker()
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None
            self._copy = None
            self._source = None

    # -- plumbing -------------------------------------------------------------------------
    def _timeout(self, timeout_ms: int | None) -> int:
        if timeout_ms is None:
            return self.limits.timeout_ms
        if timeout_ms < 1 or timeout_ms > self.limits.timeout_ms:
            raise InvalidInput(
                f"timeout_ms {timeout_ms:,} is outside 1…{self.limits.timeout_ms:,}, the"
                " longest a graph query may run",
                hint="ask for less, or raise graph.cypher_timeout_ms in config.toml",
            )
        return timeout_ms

    def _current_copy(self, graph: GraphStore) -> GraphCopy:
        copy = self._copy
        same_graph = self._source is graph
        if copy is not None and same_graph and copy.generation == graph.generation:
            return copy
        fresh = graph.copy_to(self._copies_dir() / f"copy-{next(self._names)}")
        self._copy, self._source = fresh, graph
        return fresh

    def _copies_dir(self) -> Path:
        if self._root is None:
            self._root = private_workdir(self._workdir)
        return self._root

    def _worker_on(self, copy: GraphCopy) -> _Worker:
        worker = self._worker
        if worker is None or not worker.alive():
            self._stop_worker()
            worker = self._worker = _Worker()
        if worker.opened != copy.directory:
            try:
                worker.open(copy, self.limits)
            except MemorydError:
                self._stop_worker()
                raise
            for stale in self._copies_dir().iterdir():
                if stale != copy.directory:
                    shutil.rmtree(stale, ignore_errors=True)
        return worker

    def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    def _stop_if_idle(self) -> None:
        if self._lock.acquire(blocking=False):
            try:
                self._stop_worker()
            finally:
                self._lock.release()


def private_workdir(parent: Path | None) -> Path:
    """A new 0700 directory under `parent` (None: the system's temp dir) named after this
    process; directories left by processes that no longer run (a daemon killed -9) are
    removed first."""
    prefix = "cypher-" if parent is not None else "memoryd-cypher-"
    try:
        if parent is not None:
            parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        where = parent if parent is not None else Path(tempfile.gettempdir())
        for old in where.glob(f"{prefix}*"):
            pid = old.name.removeprefix(prefix).split("-")[0]
            mine = old.stat().st_uid == os.getuid()
            if mine and pid.isdigit() and not _running(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where))
    except OSError as exc:
        raise StorageError(
            f"cannot make a private directory for graph queries in {parent}: {exc.strerror}",
            hint="check that the data dir is writable and has free space",
        ) from exc


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Worker:
    """One worker process and the parent's end of its connection."""

    def __init__(self) -> None:
        try:
            self.process, self.conn = spawn_child(MODULE)
        except OSError as exc:
            raise StorageError(f"cannot start the graph query process: {exc}") from exc
        self.opened: Path | None = None
        try:
            self._reply(START_TIMEOUT_S, "start", None)
        except MemorydError:
            self.close()
            raise

    def alive(self) -> bool:
        return self.process.poll() is None

    def open(self, copy: GraphCopy, limits: CypherLimits) -> None:
        self.opened = None
        sent = vars(limits)  # a dict: the worker runs this module as __main__
        self.conn.send(("open", str(copy.directory), copy.engine, reservation_mb(copy), sent))
        self._reply(OPEN_TIMEOUT_S, "open the graph copy", limits)
        self.opened = copy.directory

    def query(
        self,
        query: str,
        params: dict[str, Any],
        limit: int,
        timeout_ms: int,
        limits: CypherLimits,
    ) -> CypherResult:
        self.conn.send(("query", query, params, limit, timeout_ms))
        wait_s = timeout_ms / 1000 + GRACE_S
        return CypherResult.model_validate(self._reply(wait_s, "query", limits, timeout_ms))

    def _reply(
        self, wait_s: float, doing: str, limits: CypherLimits | None, timeout_ms: int = 0
    ) -> Any:
        try:
            if not self.conn.poll(wait_s):
                self.kill()
                if doing == "query":
                    raise QueryLimitExceeded(
                        f"the graph query ran past its time limit ({timeout_ms:,} ms) and was"
                        " stopped",
                        hint=f"{TIME_HINT}; or raise graph.cypher_timeout_ms",
                        limit="time",
                    )
                raise StorageError(f"the graph query process did not {doing} in {wait_s:.0f} s")
            cap = (limits.result_mb if limits else 1) * _MIB + 64 * 1024
            data = self.conn.recv_bytes(maxlength=cap)
        except EOFError as exc:
            raise self._died(doing, limits) from exc
        except OSError as exc:  # longer than maxlength: the worker broke its own cap
            self.kill()
            raise StorageError(f"the graph query process failed to {doing}: {exc}") from exc
        import pickle  # (loaded with the worker's connection: `native.spawn_child`)

        message = pickle.loads(data)  # our own worker's answer, never the user's bytes
        if message[0] == "ok":
            return message[1]
        raise rebuilt(message)

    def _died(self, doing: str, limits: CypherLimits | None) -> MemorydError:
        code = self.process.wait()
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        if doing == "query" and limits is not None:
            return QueryLimitExceeded(
                f"the graph query's process died ({how}), most likely at its memory cap"
                f" ({limits.memory_mb:,} MB); nothing else was affected",
                hint=f"{MEMORY_HINT}; or raise graph.cypher_memory_mb",
                limit="memory",
            )
        return StorageError(f"the graph query process exited ({how}) before it could {doing}")

    def close(self) -> None:
        """End of input: the worker exits; one that does not is killed."""
        self.conn.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        self.conn.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def reservation_mb(copy: GraphCopy) -> int:
    """The address space the engine reserves for a database of this size: a power of two
    with room to spare, so RLIMIT_AS counts what is used rather than the default 8 TB."""
    need = max(256, 2 * copy.size // _MIB + 1)
    return 1 << (need - 1).bit_length()


def rebuilt(message: Sequence[Any]) -> MemorydError:
    """A typed error sent across as ("err", class name, message, hint, limit)."""
    _, name, text, hint, limit = message
    cls = getattr(errors, str(name), None)
    if cls is QueryLimitExceeded:
        return QueryLimitExceeded(str(text), hint=hint, limit=str(limit))
    if not (isinstance(cls, type) and issubclass(cls, MemorydError)):
        cls = StorageError
    return cls(str(text), hint=hint)


# -- the worker's side --------------------------------------------------------------------
def serve(conn: Connection) -> None:
    """Open graph copies and run queries until the parent closes the connection."""
    import pickle

    from memoryd.graph.kuzu_store import KuzuGraphStore, release_free_memory

    store: KuzuGraphStore | None = None
    limits = CypherLimits()
    conn.send_bytes(pickle.dumps(("ok", None)))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        try:
            if message[0] == "open":
                _, directory, engine, reserve_mb, wanted = message
                limits = CypherLimits(**wanted)
                if store is not None:
                    store.close()
                    store = None
                _lift_memory_cap()
                store = KuzuGraphStore(
                    Path(directory),
                    engine=engine,
                    buffer_pool_mb=limits.buffer_pool_mb,
                    query_timeout_ms=limits.timeout_ms,
                    read_only=True,
                    max_db_mb=reserve_mb,
                    sandboxed=True,
                )
                _cap_memory(limits.heap_mb)
                reply: tuple[Any, ...] = ("ok", None)
            else:
                _, query, params, limit, timeout_ms = message
                if store is None:
                    raise StorageError("no graph copy is open")
                result = store.cypher(query, params, limit=limit, timeout_ms=timeout_ms)
                reply = ("ok", result.model_dump())
        except QueryLimitExceeded as exc:
            reply = _error(_reworded(exc, limits))
        except MemorydError as exc:
            reply = _error(exc)
        except MemoryError:
            reply = _error(_out_of_memory(limits))
        conn.send_bytes(_encoded(reply, limits))
        del reply
        release_free_memory()
    if store is not None:
        store.close()


def _error(exc: MemorydError) -> tuple[Any, ...]:
    return ("err", type(exc).__name__, exc.message, exc.hint, getattr(exc, "limit", ""))


def _encoded(reply: tuple[Any, ...], limits: CypherLimits) -> bytes:
    """The reply pickled, or a QueryLimitExceeded when it is larger than the result cap."""
    import pickle

    try:
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        return pickle.dumps(_error(_out_of_memory(limits)))
    if len(data) <= limits.result_mb * _MIB:
        return data
    rows = len(reply[1]["rows"])
    too_big = QueryLimitExceeded(
        f"the graph query's result ({len(data) / _MIB:,.1f} MB in {rows:,} rows) is larger"
        f" than the {limits.result_mb:,} MB a query may return",
        hint="return fewer rows (LIMIT, --limit) or smaller values (not whole nodes or bodies);"
        " or raise graph.cypher_result_mb",
        limit="result",
    )
    return pickle.dumps(_error(too_big))


def _reworded(exc: QueryLimitExceeded, limits: CypherLimits) -> QueryLimitExceeded:
    """The store's limit error, naming this sandbox's numbers."""
    if exc.limit != "memory":
        return exc
    return _out_of_memory(limits)


def _out_of_memory(limits: CypherLimits) -> QueryLimitExceeded:
    return QueryLimitExceeded(
        f"the graph query needed more than the {limits.memory_mb:,} MB a query may use",
        hint=f"{MEMORY_HINT}; or raise graph.cypher_memory_mb",
        limit="memory",
    )


def _vm_size() -> int | None:
    """This process's address space in bytes (Linux), or None."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _lift_memory_cap() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def _cap_memory(heap_mb: int) -> None:
    """RLIMIT_AS at what the process maps now (the opened copy included) plus `heap_mb`: an
    allocation past it fails (the engine raises std::bad_alloc) instead of growing."""
    import resource

    size = _vm_size()
    if size is None:
        logger.warning("cannot read this process's size: graph queries run without a memory cap")
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = size + heap_mb * _MIB
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def main(argv: Sequence[str]) -> None:
    if len(argv) != 1 or not argv[0].isdigit():
        raise SystemExit(f"usage: python -m {MODULE} FD (memoryd starts it, never by hand)")
    from memoryd.native import limit_malloc_arenas

    limit_malloc_arenas()
    # Ctrl-C reaches the whole process group: the parent stops its worker itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(NICENESS)
    except OSError:
        logger.debug("cannot lower the graph query process's priority")
    from multiprocessing.connection import Connection

    conn = Connection(int(argv[0]))
    try:
        serve(conn)
    except (EOFError, OSError):
        pass  # the parent went away: nothing to finish, nothing was written
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
