"""Recall in reader processes: the daemon's answer to its own GIL.

Ranking a recall is Python (query analysis, fusion, explanations) and holds the GIL, so in
one process eight concurrent recalls run one at a time on a multi-core machine. The daemon
therefore hands recall, search and the inject hook's context to a few reader processes.

A reader opens the search index read-only (tantivy allows readers beside the one writer)
and reaches the graph only through the daemon: its graph is a `RemoteGraph` whose read
calls travel back over the reader's connection and run on the daemon thread that is
waiting for the reader's answer. One process still owns the graph (DESIGN.md §2); the
readers own nothing and write nothing: the daemon counts the recalls they rank.

Every call carries the daemon's `ReaderState`; a reader that is behind reloads its index
or forgets its entity matcher before it answers, so a recall sees every write acknowledged
before it was asked. A reader that dies or hangs is replaced and the call runs in the
daemon; none is needed for correctness, only for throughput.

    python -m memoryd.daemon.readers FD     # started by the daemon, never by hand
"""

from __future__ import annotations

import logging
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

from memoryd import errors
from memoryd.errors import MemorydError, StorageError
from memoryd.graph.store import GraphStore, SupersedeRow
from memoryd.models import HiddenResults
from memoryd.native import spawn_child
from memoryd.service import MemoryService
from memoryd.text import load_segmenter

logger = logging.getLogger(__name__)

READER_TIMEOUT_S = 60.0
"""A call a reader has not answered by then is taken back and run in the daemon."""
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
RETRY_START_S = 60.0

GRAPH_READS = frozenset(
    {
        "count_memories",
        "cypher",
        "entity_catalogue",
        "find_by_fingerprint",
        "get_entity",
        "get_memory",
        "list_entities",
        "list_memories",
        "memory_rows",
        "mentioning",
        "neighbourhood",
        "related_entities",
        "superseded_by",
        "supersede_edges",
        "supersedes_chain",
        "supersedes_map",
    }
)
"""The graph calls a reader may make: reads only, whatever a reader asks."""

SERVICE_CALLS = frozenset({"recall", "search", "inject_context"})


@dataclass(frozen=True)
class ReaderState:
    """What a reader must have caught up with before it answers."""

    index_epoch: int
    """Bumped when the daemon replaces its search index (reindex): reopen it."""
    index_generation: int
    """Bumped by every commit to the index: reload the searcher."""
    entities_version: int
    """Bumped by writes that touch entities: rebuild the entity matcher."""
    graph_generation: int
    """Bumped by every graph commit that may change what recall reads (not by recall counts,
    `GraphStore.recall_generation`): forget the graph reads kept from before it."""

    @classmethod
    def of(cls, service: MemoryService) -> ReaderState:
        """The daemon's state, its index's waiting documents committed first: the reader
        reads the index from disk."""
        service.index.commit()
        return cls(
            service.index_epoch,
            service.index.generation,
            service.entities_version,
            service.graph.recall_generation,
        )


class ReaderGone(Exception):
    """The reader died, hung or broke the protocol; the call runs in the daemon instead."""


# -- the daemon's side --------------------------------------------------------------------
class Reader:
    """One reader process and the daemon's end of its connection."""

    def __init__(
        self, home: Path, max_fanout: int, scopes: Sequence[str] = (),
        state: ReaderState | None = None,
    ) -> None:  # fmt: skip
        """Start a reader; it loads the statistics of `scopes` before it reports ready, and
        opens its index after the daemon's `state` (its first call then hands it the changes
        since, not a recount)."""
        try:
            self.process, self.conn = spawn_child("memoryd.daemon.readers")
        except OSError as exc:
            raise StorageError(f"cannot start a recall reader: {exc}") from exc
        self.conn.send(("hello", str(home), max_fanout, list(scopes), state))
        self._expect_ready()
        self.state: ReaderState | None = state
        """The daemon's state as of the last call this reader answered (at first: as of its
        start, which its index is at or after)."""

    def _expect_ready(self) -> None:
        if not self.conn.poll(START_TIMEOUT_S):
            self.kill()
            raise StorageError(f"a recall reader did not start within {START_TIMEOUT_S:.0f} s")
        try:
            message = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.kill()
            raise StorageError("a recall reader exited while starting; see the log") from exc
        if message[0] != "ready":
            self.kill()
            raise _rebuilt(message)

    def call(self, service: MemoryService, name: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:  # fmt: skip
        """Run `name` in the reader, serving its graph reads from `service` meanwhile."""
        try:
            wanted, have = ReaderState.of(service), self.state
            changes = (
                service.index.changes_since(have.index_generation)
                if have is not None and have.index_epoch == wanted.index_epoch
                else None
            )
            self.conn.send(("call", name, args, kwargs, wanted, changes))
            # Known caught up only once it answered: after an error (its catch-up may have
            # failed) the next call hands it no changes, and it counts afresh.
            self.state = None
            while True:
                if not self.conn.poll(READER_TIMEOUT_S):
                    raise ReaderGone(f"no answer within {READER_TIMEOUT_S:.0f} s")
                message = self.conn.recv()
                kind = message[0]
                if kind == "graph":
                    self.conn.send(_graph_read(service, message[1], message[2], message[3]))
                elif kind == "ok":
                    self.state = wanted
                    return message[1]
                elif kind == "err":
                    raise _rebuilt(message)
                else:
                    raise ReaderGone(f"unexpected message {kind!r}")
        except (EOFError, OSError) as exc:
            raise ReaderGone(str(exc) or type(exc).__name__) from exc

    def close(self) -> None:
        """Ask the reader to exit (end of its input), then make sure it did."""
        self.conn.close()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.wait()


def _graph_read(service: MemoryService, name: str, args: Any, kwargs: Any) -> tuple[Any, ...]:
    if name not in GRAPH_READS:
        return ("err", "PolicyDenied", f"a recall reader may not call graph.{name}", None)
    try:
        return ("ok", getattr(service.graph, name)(*args, **kwargs))
    except MemorydError as exc:
        return ("err", type(exc).__name__, exc.message, exc.hint)
    except Exception as exc:  # the reader waits for an answer whatever happened
        logger.exception("graph.%s for a recall reader failed", name)
        return ("err", "StorageError", f"graph.{name} failed: {exc}", None)


def _rebuilt(message: tuple[Any, ...]) -> MemorydError:
    """A typed error sent across as (`err`, class name, message, hint)."""
    _, name, text, hint = message
    cls = getattr(errors, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, MemorydError)):
        cls = StorageError
    return cls(str(text), hint=hint)


class ReaderPool:
    """`size` readers, started on first use; a call waits for a free one.

    Until they are up, and whenever one fails, calls run in the daemon itself.
    """

    def __init__(self, service: MemoryService, size: int) -> None:
        self._service = service
        self._size = size
        self._idle: queue.SimpleQueue[Reader] = queue.SimpleQueue()
        self._alive = 0
        self._starting = False
        self._next_start = 0.0
        self._closed = False
        self._lock = threading.Lock()
        self._all: list[Reader] = []

    @property
    def ready(self) -> int:
        """Readers started and not failed (busy or idle)."""
        return self._alive

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """`service.<name>(*args, **kwargs)`, in a reader when one is up."""
        if name not in SERVICE_CALLS:
            raise ValueError(f"{name} is not a reader call")
        if self._service.gate.active():
            # A granted scope's view lives in this process only (its plaintext is never
            # handed to another): while a grant is in force, reads run here.
            return _service_call(self._service, name)(*args, **kwargs)
        reader = self._take()
        if reader is None:
            try:
                return _service_call(self._service, name)(*args, **kwargs)
            finally:
                # Started after the call: they take no CPU from it, and load the statistics
                # of the scope it read (`Reader`).
                with self._lock:
                    self._start_more()
        try:
            result = reader.call(self._service, name, args, kwargs)
        except ReaderGone as exc:
            logger.warning("recall reader pid %d failed (%s): replacing it", reader.process.pid,
                           exc)  # fmt: skip
            self._retire(reader)
            return _service_call(self._service, name)(*args, **kwargs)
        except MemorydError:
            self._idle.put(reader)  # the call failed, the reader is fine
            raise
        except BaseException:
            self._retire(reader)  # mid-conversation: its next message would be this call's
            raise
        self._idle.put(reader)
        # A reader is read-only and audits nothing: what it left out is audited here.
        self._service.gate.audit_hidden(_hidden_in(result), name)
        return result

    def _take(self) -> Reader | None:
        with self._lock:
            if self._closed or not self._alive:
                return None  # the caller answers, then starts them (`call`)
            self._start_more()  # to replace one that failed
        try:
            return self._idle.get(timeout=READER_TIMEOUT_S)
        except queue.Empty:
            return None

    def _start_more(self) -> None:
        """Start readers in the background up to `size` (the caller holds the lock)."""
        if (
            not self._closed
            and not self._starting
            and self._alive < self._size
            and time.monotonic() >= self._next_start
        ):
            self._starting = True
            threading.Thread(target=self._start_one, name="memoryd-reader-start",
                             daemon=True).start()  # fmt: skip

    def _start_one(self) -> None:
        """Start readers one after the other until there are `size` of them."""
        while True:
            try:
                service = self._service
                reader = Reader(
                    service.home,
                    service.graph.max_fanout,
                    service.index.tallied_scopes(),
                    ReaderState.of(service),
                )
            except StorageError as exc:
                logger.error("recall runs in the daemon process for now: %s", exc)
                with self._lock:
                    self._starting = False
                    self._next_start = time.monotonic() + RETRY_START_S
                return
            with self._lock:
                if self._closed:
                    self._starting = False
                    reader.close()
                    return
                self._all.append(reader)
                self._alive += 1
                self._idle.put(reader)
                logger.info("recall reader pid %d ready (%d of %d)", reader.process.pid,
                            self._alive, self._size)  # fmt: skip
                if self._alive >= self._size:
                    self._starting = False
                    return

    def _retire(self, reader: Reader) -> None:
        reader.kill()
        with self._lock:
            self._alive -= 1
            if reader in self._all:
                self._all.remove(reader)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            readers, self._all = self._all, []
            self._alive = 0
        for reader in readers:
            reader.close()


def _hidden_in(result: Any) -> list[HiddenResults]:
    """The hidden results of a reader's answer: a recall, a search, or inject's (items,
    recall) pair."""
    if isinstance(result, tuple) and len(result) == 2:
        result = result[1]
    hidden = getattr(result, "hidden", None)
    return list(hidden) if isinstance(hidden, list) else []


def _service_call(service: MemoryService, name: str) -> Callable[..., Any]:
    if name == "inject_context":
        from memoryd.context import choose

        return lambda *args, **kwargs: choose(service, *args, **kwargs)
    return cast(Callable[..., Any], getattr(service, name))


# -- the reader's side --------------------------------------------------------------------
class RemoteGraph:
    """The daemon's graph as a reader sees it: each read is a round trip to the daemon.

    The reads every recall makes (the memories mentioning an entity, its relations, the
    supersedes edges) are kept until the daemon's graph next commits a write that may change
    them, which recall counts do not (`forget_before`, `GraphStore.recall_generation`):
    a round trip costs both processes, and between two such commits the answer cannot
    change.
    """

    KEPT_MAX = 4096
    """Kept answers per kind; past it they are dropped, as after a commit."""

    def __init__(self, conn: Connection, max_fanout: int) -> None:
        self._conn = conn
        self.max_fanout = max_fanout
        self.generation = -1
        self._mentioning: dict[tuple[str, tuple[str, ...] | None], list[tuple[str, float]]] = {}
        self._related: dict[str, list[tuple[str, str, float]]] = {}
        self._supersedes: dict[str, SupersedeRow] | None = None

    def forget_before(self, generation: int) -> None:
        """Drop what was read before the daemon's graph reached `generation`."""
        if generation != self.generation:
            self.generation = generation
            self._mentioning.clear()
            self._related.clear()
            self._supersedes = None

    def _read(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._conn.send(("graph", name, args, kwargs))
        message = self._conn.recv()
        if message[0] == "err":
            raise _rebuilt(message)
        return message[1]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in GRAPH_READS:
            raise AttributeError(f"a recall reader's graph has no {name!r}")
        return lambda *args, **kwargs: self._read(name, *args, **kwargs)

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]:
        scopes = tuple(scope_hashes) if scope_hashes else None
        kept = self._mentioning
        missing = [eid for eid in dict.fromkeys(entity_ids) if (eid, scopes) not in kept]
        if missing:
            if len(self._mentioning) + len(missing) > self.KEPT_MAX:
                self._mentioning.clear()
            rows = self._read("mentioning", missing, scope_hashes=scope_hashes)
            for eid in missing:
                self._mentioning[(eid, scopes)] = []
            for eid, slug, conf in rows:
                self._mentioning[(eid, scopes)].append((slug, conf))
        return [
            (eid, slug, conf)
            for eid in entity_ids
            for slug, conf in self._mentioning[(eid, scopes)]
        ]

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]:
        missing = [eid for eid in dict.fromkeys(entity_ids) if eid not in self._related]
        if missing:
            if len(self._related) + len(missing) > self.KEPT_MAX:
                self._related.clear()
            rows = self._read("related_entities", missing)
            for eid in missing:
                self._related[eid] = []
            for eid, other, predicate, conf in rows:
                self._related[eid].append((other, predicate, conf))
        return [(eid, *row) for eid in entity_ids for row in self._related[eid]]

    def superseded_by(self, slugs: Sequence[str]) -> dict[str, str]:
        return {older: row.newer for older, row in self.supersede_edges(slugs).items()}

    def supersede_edges(self, slugs: Sequence[str] | None = None) -> dict[str, SupersedeRow]:
        if self._supersedes is None:
            rows = cast(dict[str, SupersedeRow], self._read("supersede_edges", None))
            self._supersedes = rows
        known = self._supersedes
        if slugs is None:
            return dict(known)
        return {slug: known[slug] for slug in slugs if slug in known}

    def close(self) -> None:
        """Nothing to close: the graph is the daemon's."""

    def record_recalls(self, recalls: Sequence[object]) -> dict[str, int]:
        """A reader counts nothing (its service is read-only and never tracks)."""
        if recalls:
            raise StorageError("a recall reader cannot count recalls")
        return {}


def serve_reader(conn: Connection) -> None:
    """Answer the daemon's calls until it closes the connection."""
    from memoryd.wiring import open_reader_service

    _, home, max_fanout, scopes, state = conn.recv()
    graph = RemoteGraph(conn, max_fanout)
    try:
        service = open_reader_service(Path(home), cast(GraphStore, graph))
        # Opened after the daemon's `state`: its first call brings the changes since.
        service.prepare_recall(scopes)
    except MemorydError as exc:
        conn.send(("err", type(exc).__name__, exc.message, exc.hint))
        return
    if service.index.holds_chinese():
        load_segmenter()  # not on the first Chinese query this reader ranks
    conn.send(("ready",))
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            _, name, args, kwargs, wanted, changes = message
            if name not in SERVICE_CALLS:
                conn.send(("err", "InvalidInput", f"{name} is not a reader call", None))
                continue
            try:
                state = catch_up(service, state, wanted, changes)
                graph.forget_before(wanted.graph_generation)
                reply: tuple[Any, ...] = ("ok", _service_call(service, name)(*args, **kwargs))
            except MemorydError as exc:
                reply = ("err", type(exc).__name__, exc.message, exc.hint)
            conn.send(reply)
    finally:
        service.index.close()


def catch_up(
    service: MemoryService,
    have: ReaderState | None,
    wanted: ReaderState,
    changes: frozenset[str] | None = None,
) -> ReaderState:
    """Bring a reader's service up to the daemon's state (see `ReaderState`); `changes` are
    the memories the daemon's index commits wrote since this reader's last call (None:
    unknown), so its statistics are brought up to date for those alone."""
    if have is not None and have.index_epoch != wanted.index_epoch:
        service.reopen_index()
    elif have is None or have.index_generation != wanted.index_generation:
        service.index.refresh(changes if have is not None else None)
    if have is None or have.entities_version != wanted.entities_version:
        service.forget_entities()
    return wanted


def main(argv: Sequence[str]) -> None:
    if len(argv) != 1 or not argv[0].isdigit():
        raise SystemExit("usage: python -m memoryd.daemon.readers FD (the daemon starts readers)")
    from memoryd.daemon_files import configure_logging
    from memoryd.native import limit_malloc_arenas

    limit_malloc_arenas()
    # Ctrl-C on `memoryd serve` reaches the whole process group: the daemon shuts its
    # readers down itself, in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging()
    conn = Connection(int(argv[0]))
    try:
        serve_reader(conn)
    except (EOFError, OSError):
        pass  # the daemon went away: nothing to finish, nothing was written
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
