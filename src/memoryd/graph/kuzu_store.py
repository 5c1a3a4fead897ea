"""The graph store on Kuzu or its fork LadybugDB: the only module that imports either engine.

Engine hazards measured on kuzu 0.11.3 (DESIGN.md §4) shape this module:
- a second write transaction on another connection segfaults, so every write goes through
  ONE connection under ONE lock;
- the buffer pool defaults to 80% of RAM, so it is capped;
- a stale `.wal` beside a new database file segfaults on open, so rebuilds build a whole new
  directory and swap it in;
- hub entities make deep traversals explode, so traversals cap their fan-out;
- `ORDER BY … SKIP n` with n past the sorted rows reads key blocks out of bounds and mostly
  segfaults (`PayloadScanner` indexes its blocks at n before clamping), so every paged read
  counts and pages in one read-only transaction and never skips past the count (`_page`);
  memoryd's own Cypher may not SKIP at all (`cypher`);
- a connection keeps every statement it prepared, with its parameter values, until it is
  closed (the heap grows with each; measured: bench/RESULTS.md), so the write connection
  is replaced after each transaction and a read connection after `READER_BUDGET`
  parameter values.

The one home of kuzu (ruff enforces it): connections, transactions, checkpoints, migrations,
Kuzu's own statements. The engine-neutral half (reads, traversals, the supersede map) is
`cypher_store`; the schema, the checkpoint gate and error translation are in `kuzu_support`.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from memoryd.errors import InvalidInput, MissingExtra, PolicyDenied, StorageError
from memoryd.graph.co_mentions import KuzuCoMentions
from memoryd.graph.cypher_reads import KEYED_ROWS, _each
from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.kuzu_support import (
    MIGRATIONS,
    SCHEMA_VERSION,
    WRITER_BUDGET,
    CheckpointGate,
    ColumnRows,
    KeptStatements,
    Yielding,
    _copy_private,
    _values_in,
    engine_error,
    query_error,
    release_free_memory,
)
from memoryd.graph.rows import jsonable as _jsonable
from memoryd.graph.rows import utc as _utc
from memoryd.graph.store import (
    CypherResult,
    GraphCopy,
    check_cypher,
    check_page,
    cypher_code,
)
from memoryd.native import courtesy, heap_cleared, yielding
from memoryd.private import make_private_dir

__all__ = [
    "DB_FILE",
    "ENGINES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "KuzuGraphStore",
    "engine_error",
    "load_engine",
    "query_error",
    "release_free_memory",
]

logger = logging.getLogger(__name__)

DB_FILE = "memoryd.kz"
ENGINES = ("kuzu", "ladybug")
CHECKPOINT_BYTES = 16 * 1024 * 1024
"""WAL size past which a commit is followed by a checkpoint (the engine's own default)."""
_MIB = 1024 * 1024
READER_BUDGET = 4096
"""Parameter values a read connection takes before it is replaced (`_reader`)."""
_SKIP = re.compile(r"\bSKIP\b", re.IGNORECASE)
_TAKEN = re.compile(r"duplicated primary key value (.*), which violates")


def load_engine(name: str) -> ModuleType:
    if name not in ENGINES:
        raise InvalidInput(
            f"unknown graph engine {name!r}", hint=f"use one of {', '.join(ENGINES)}"
        )
    other = next((e for e in ENGINES if e != name and e in sys.modules), None)
    if other is not None:
        # Both wheels register the same native types: loading the second one crashes.
        raise StorageError(
            f"graph engine {other!r} is already loaded in this process; {name!r} cannot join it",
            hint="use one engine per process (graph.engine in config.toml)",
        )
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if name == "kuzu":
            raise StorageError(
                "graph engine 'kuzu' is not installed", hint="pip install memoryd"
            ) from exc
        raise MissingExtra(f"graph.engine = {name!r}", name, name) from exc


class KuzuGraphStore(KuzuCoMentions, CypherGraphStore):
    """A Kuzu (or LadybugDB) database in `<home>/graph/`."""

    LABEL = "label({})"
    FIRST = 1

    def __init__(
        self,
        directory: Path,
        *,
        engine: str = "kuzu",
        buffer_pool_mb: int = 512,
        max_fanout: int = 64,
        query_timeout_ms: int = 10_000,
        read_only: bool = False,
        max_db_mb: int | None = None,
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        sandboxed: bool = False,
    ) -> None:
        super().__init__(max_fanout=max_fanout, read_only=read_only)
        self.directory = directory
        self.sandboxed = sandboxed
        """A copy in `memoryd.graph.sandbox` runs users' Cypher, SKIP included: a crash
        there ends the sandbox's process, not the daemon's."""
        self.path = directory / DB_FILE
        self._wal = self.path.with_name(DB_FILE + ".wal")
        self._checkpoint_bytes = checkpoint_bytes
        self.engine_name = engine
        self._timeout_ms = query_timeout_ms
        self._engine = load_engine(engine)
        self._write_lock = threading.Lock()
        self._reads = CheckpointGate()
        self._local = threading.local()
        if read_only and not self.path.exists():
            raise StorageError(
                f"no graph at {self.path}", hint="record a memory or run `memoryd reindex` first"
            )
        try:
            make_private_dir(directory)
        except OSError as exc:
            raise StorageError(f"cannot create graph dir {directory}: {exc.strerror}") from exc
        # The engine reserves address space for the whole database up front (8 TB unless
        # told): a process under RLIMIT_AS (memoryd.graph.sandbox) says how much it needs.
        options: dict[str, Any] = {} if read_only else {"auto_checkpoint": False}
        if max_db_mb is not None:
            options["max_db_size"] = max_db_mb * _MIB
        try:
            with heap_cleared():  # opening replays and checkpoints a WAL a crash left
                self._db = self._engine.Database(
                    str(self.path),
                    buffer_pool_size=buffer_pool_mb * _MIB,
                    read_only=read_only,
                    max_num_threads=2,
                    **options,
                )
            self._writer = None if read_only else self._engine.Connection(self._db)
            self._kept = KeptStatements.on(self._engine, self._writer)
        except RuntimeError as exc:
            raise engine_error(exc, self.path) from exc
        if not read_only:
            self._migrate()
        tables = {row[0] for row in self._rows("CALL show_tables() RETURN name")}
        self._keyed_prints = "BodyPrint" in tables
        """Schema 5's count per (scope, fingerprint) is there (a graph opened read-only, or
        by a test's older schema, may lack it)."""
        self.co_mentions = "CO_MENTIONS" in tables

    # -- plumbing -------------------------------------------------------------------------
    def _reader(self, params: Mapping[str, Any] | None = None) -> Any:
        return self._read_on(None, params)[0]

    def _read_on(self, query: str | None, params: Mapping[str, Any] | None) -> tuple[Any, Any]:
        """This thread's read connection, a new one once the old has taken its budget of
        parameter values (the engine holds them until the connection closes), and what to
        run `query` as on it: kept prepared when small, as on the writer (`KeptStatements`)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.kept.spent >= READER_BUDGET:
            conn.close()
            conn = None
        if conn is None:
            conn = self._engine.Connection(self._db)
            conn.set_query_timeout(self._timeout_ms)
            local.conn, local.kept = conn, KeptStatements.on(self._engine, conn)
        if query is None:
            local.kept.spent += _values_in(params)
            return conn, None
        return conn, local.kept.statement(query, params or {})

    def _renew_writer(self) -> None:
        """Replace the write connection (call it holding the write lock, between
        transactions): what it prepared is freed with it."""
        assert self._writer is not None
        self._writer.close()
        try:
            self._writer = self._engine.Connection(self._db)
        except RuntimeError as exc:
            raise engine_error(exc, self.path) from exc
        self._kept = KeptStatements.on(self._engine, self._writer)

    def _rows(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        times: Sequence[int] | None = None,
    ) -> list[list[Any]]:
        """The rows of a read query, times in UTC: every value looked at, or only the
        columns `times` names (a query that returns 100k rows)."""
        if self._closed:
            raise StorageError("the graph store is closed")
        courtesy()  # before the gate: a paused read must not hold a checkpoint back
        try:
            with self._reads.read():
                conn, statement = self._read_on(query, params)
                result = conn.execute(statement, params or {})
                rows: list[list[Any]] = []
                while result.has_next():
                    row = list(result.get_next())
                    if times is None:
                        row = [_utc(v) for v in row]
                    else:
                        for column in times:
                            row[column] = _utc(row[column])
                    rows.append(row)
            return rows
        except RuntimeError as exc:
            raise engine_error(exc, self.path) from exc

    def _page(
        self,
        count_query: str,
        query: str,
        params: dict[str, Any],
        *,
        limit: int,
        offset: int,
        convert: Callable[[Any], Any] = _utc,
    ) -> tuple[list[list[Any]], int]:
        """One page of an `ORDER BY` query (`query` ends before SKIP) and the number of rows
        it pages over (`count_query`, same filter). Both are read in one read-only
        transaction, and the page is read only when `offset` is inside that count, with a
        LIMIT of at most the rows left: the engine never sees a SKIP past the sorted rows
        (it crashes, see the module docstring) nor a LIMIT beyond int64."""
        check_page(limit, offset)
        if self._closed:
            raise StorageError("the graph store is closed")
        courtesy()
        with self._reads.read():
            conn = self._reader(params)
            try:
                conn.execute("BEGIN TRANSACTION READ ONLY")
                try:
                    total = int(self._collect(conn, count_query, params)[0][0])
                    if offset >= total or limit == 0:
                        return [], total
                    take = min(limit, total - offset)
                    rows = self._collect(
                        conn,
                        f"{query} SKIP $page_skip LIMIT $page_take",
                        {**params, "page_skip": offset, "page_take": take},
                    )
                finally:
                    try:
                        conn.execute("ROLLBACK")
                    except RuntimeError:
                        logger.debug("rollback of a read-only page failed", exc_info=True)
            except RuntimeError as exc:
                raise engine_error(exc, self.path) from exc
        return [[convert(v) for v in row] for row in rows], total

    @contextmanager
    def _transaction(
        self, *, keeps_supersedes: bool = False, keeps_recall_reads: bool = False
    ) -> Iterator[Any]:
        """One write transaction on the one write connection; rolled back on any error.
        `keeps_supersedes`: no SUPERSEDES edge written, no memory one touches moved."""
        if self._writer is None:
            raise PolicyDenied("the graph is open read-only", hint="write through `memoryd serve`")
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN TRANSACTION")
            except RuntimeError as exc:
                raise engine_error(exc, self.path) from exc
            try:
                yield ColumnRows(Yielding(conn) if yielding() else conn, self._kept)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._moved(keeps_supersedes=False, keeps_recall_reads=False)
                try:
                    conn.execute("ROLLBACK")
                except RuntimeError:
                    # A failed statement already ended the transaction; nothing to undo.
                    logger.debug("no transaction left to roll back on %s", self.path)
                self._renew_writer()
                if isinstance(exc, RuntimeError):
                    raise engine_error(exc, self.path) from exc
                raise
            self._moved(keeps_supersedes=keeps_supersedes, keeps_recall_reads=keeps_recall_reads)
            if self._wal.exists() and self._wal.stat().st_size >= self._checkpoint_bytes:
                try:
                    self._checkpoint()
                except RuntimeError:  # the commit stands in the WAL: checkpoint next time
                    logger.warning("checkpoint of %s failed", self.path, exc_info=True)
            self._kept.spent += 2  # BEGIN and COMMIT
            if self._kept.spent >= WRITER_BUDGET:
                self._renew_writer()

    def _checkpoint(self) -> None:
        """Write the WAL into the data file, with no read running (`CheckpointGate`). Call
        it holding the write lock. The engine's own checkpoint at commit is off: it waits
        for reads that cannot finish and, after 5 s, fails the COMMIT of a transaction it
        has already committed."""
        assert self._writer is not None
        # The engine writes some checkpoint pages from buffers it fills in part: the rest
        # would be this process's freed heap, such as a request's text before redaction.
        with self._reads.checkpoint(), heap_cleared():
            self._writer.execute("CHECKPOINT")

    def _migrate(self) -> None:
        tables = {row[0] for row in self._rows("CALL show_tables() RETURN name")}
        current = 0
        if "Meta" in tables:
            found = self._rows("MATCH (m:Meta {key: 'schema_version'}) RETURN m.value")
            current = int(found[0][0]) if found else 0
        self._migrate_from(current, MIGRATIONS[:SCHEMA_VERSION], f"at {self.path}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
            with heap_cleared():  # closing checkpoints (`_checkpoint`)
                self._db.close()
        release_free_memory()

    # -- the duplicate check by key ----------------------------------------------------
    def find_fingerprints(self, scope_hash: str, fingerprints: Sequence[str]) -> dict[str, str]:
        """The memories of the scope are looked through only for the fingerprints it holds,
        as `BodyPrint` says by key: kuzu indexes nothing but primary keys, and a scan of the
        scope's memories on every write grew with the scope."""
        if not self._keyed_prints or not fingerprints:
            return super().find_fingerprints(scope_hash, fingerprints)
        keys = {_print_key(scope_hash, fp): fp for fp in fingerprints}
        if len(keys) > KEYED_ROWS:
            rows = self._rows(
                "UNWIND $keys AS k MATCH (p:BodyPrint {key: k}) WHERE p.n > 0 RETURN p.key",
                {"keys": list(keys)},
            )
        else:
            rows = [
                row
                for key in keys
                for row in self._rows(
                    "MATCH (p:BodyPrint {key: $key}) WHERE p.n > 0 RETURN p.key", {"key": key}
                )
            ]
        held = sorted({keys[str(row[0])] for row in rows})
        return super().find_fingerprints(scope_hash, held) if held else {}

    def _prints_of(self, conn: Any, slugs: Sequence[str]) -> list[tuple[str, str]]:
        if not self._keyed_prints:
            return []
        return [
            (str(scope), str(fp))
            for scope, fp, _ in self._by_slug(
                conn,
                "MATCH (m:Memory {slug: $slug}) RETURN m.scope_hash, m.fingerprint, m.slug",
                slugs,
            )
            if scope is not None and fp is not None
        ]

    def _drop_prints(self, conn: Any, slugs: Sequence[str]) -> None:
        """A big delete (a decay sweep's thousands) moves the counts in the engine, with
        no row of the memories back in Python: reading them added 28% to the CPU of a
        delete of 7,500 memories at 10k."""
        if not self._keyed_prints or len(set(slugs)) <= KEYED_ROWS:
            super()._drop_prints(conn, slugs)
            return
        conn.execute(
            "UNWIND $slugs AS s MATCH (m:Memory {slug: s})"
            " WITH concat(m.scope_hash, ':', m.fingerprint) AS k, count(*) AS d"
            " MATCH (p:BodyPrint {key: k}) SET p.n = p.n - d",
            {"slugs": sorted(set(slugs))},
        )
        conn.execute("MATCH (p:BodyPrint) WHERE p.n <= 0 DELETE p")

    def _count_prints(
        self, conn: Any, removed: Sequence[tuple[str, str]], added: Sequence[tuple[str, str]]
    ) -> None:
        """`BodyPrint.n` moves by what the write added and removed (the memories of one
        (scope, fingerprint)); a key no memory holds any more is deleted."""
        if not self._keyed_prints:
            return
        delta = Counter(_print_key(*pair) for pair in added)
        delta.subtract(_print_key(*pair) for pair in removed)
        moved = sorted((key, d) for key, d in delta.items() if d)
        _each(
            conn,
            "UNWIND $rows AS r WITH r.key AS key, CAST(r.d AS INT64) AS d"
            " MERGE (p:BodyPrint {key: key}) ON CREATE SET p.n = d ON MATCH SET p.n = p.n + d",
            "MERGE (p:BodyPrint {key: $key}) ON CREATE SET p.n = CAST($d AS INT64)"
            " ON MATCH SET p.n = p.n + CAST($d AS INT64)",
            [{"key": key, "d": d} for key, d in moved],
        )
        _each(
            conn,
            "UNWIND $slugs AS k MATCH (p:BodyPrint {key: k}) WHERE p.n <= 0 DELETE p",
            "MATCH (p:BodyPrint {key: $slug}) WHERE p.n <= 0 DELETE p",
            [key for key, d in moved if d < 0],
            "slugs",
        )

    def _write_memories(self, conn: Any, mems: list[dict[str, Any]], *, new: bool) -> None:
        """New memories go in by UNWIND CREATE, their rows as typed columns (`ColumnRows`),
        never by COPY: kuzu 0.11.3 keeps a COPY's rows in memory only and checkpoints at its
        COMMIT, so every bulk write paid a whole checkpoint (re-laying the hub entities'
        edges; bench/RESULTS.md), where a CREATE goes to the WAL and is checkpointed with
        the writes after it (`_transaction`)."""
        try:
            super()._write_memories(conn, mems, new=new)
        except RuntimeError as exc:
            taken = _TAKEN.search(str(exc))
            if not new or taken is None:
                raise
            # A slug stored already or twice in the batch: the engine's check, named here.
            raise StorageError(
                f"graph at {self.path}: memory {taken[1]} is already stored",
                hint="a new memory needs a slug of its own",
            ) from exc

    def _concat(self, first: str, second: str) -> str:
        return f"list_concat({first}, {second})"

    def _distinct(self, items: str) -> str:
        return f"list_distinct({items})"

    def _returning(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        return self._collect(conn, query, params)

    def _collect(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        result = conn.execute(query, params)
        rows: list[list[Any]] = []
        while result.has_next():
            rows.append(result.get_next())
        return rows

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """Run read-only Cypher: what a read query may not do is refused before the engine
        sees it (`check_cypher`); in the sandbox, a READ ONLY transaction is a second guard
        (elsewhere only memoryd's own reads run here: BEGIN and ROLLBACK would be two more
        statements for each). `timeout_ms` overrides the query timeout for this query only.

        User Cypher runs here only inside `memoryd.graph.sandbox`, never in the process that
        writes: a query can allocate outside the buffer pool, and no check on its text can
        tell which will."""
        check_cypher(query, params)
        if not self.sandboxed and _SKIP.search(cypher_code(query)):
            raise InvalidInput(
                "memoryd's own graph queries may not SKIP: the engine crashes on a SKIP past"
                " the rows",
                hint="page through a store method built on `_page`",
            )
        if self._closed:
            raise StorageError("the graph store is closed")
        courtesy()
        with self._reads.read():
            return self._read_only_query(query, params, limit, timeout_ms)

    def _read_only_query(
        self, query: str, params: dict[str, Any] | None, limit: int, timeout_ms: int | None
    ) -> CypherResult:
        conn, statement = self._read_on(None if self.sandboxed else query, params)
        if self.sandboxed:
            try:
                conn.execute("BEGIN TRANSACTION READ ONLY")
            except RuntimeError as exc:
                raise engine_error(exc, self.path) from exc
        try:
            if timeout_ms is not None:
                conn.set_query_timeout(timeout_ms)
            result = conn.execute(statement or query, params or {})
            if isinstance(result, list):  # check_cypher lets no second statement through
                raise InvalidInput("a graph query is one statement; this one has several")
            columns = list(result.get_column_names())
            rows: list[list[Any]] = []
            truncated = False
            while result.has_next():
                if len(rows) >= limit:
                    truncated = True
                    break
                rows.append([_jsonable(v) for v in result.get_next()])
            return CypherResult(columns=columns, rows=rows, truncated=truncated)
        except RuntimeError as exc:
            raise query_error(exc, self.path, timeout_ms or self._timeout_ms) from exc
        except (ValueError, TypeError, AttributeError) as exc:  # a parameter did not convert
            raise InvalidInput(f"invalid Cypher parameters: {exc}") from exc
        finally:
            if self.sandboxed:
                try:
                    conn.execute("ROLLBACK")
                except RuntimeError:
                    logger.debug("rollback of read-only transaction failed", exc_info=True)
            if timeout_ms is not None:
                conn.set_query_timeout(self._timeout_ms)

    def copy_to(self, target: Path) -> GraphCopy:
        """A copy of the committed graph in the new directory `target`, for a process that
        opens it read-only (`memoryd.graph.sandbox`).

        Under the write lock no transaction is half-written; a checkpoint first writes every
        commit into the data file, so the copy needs no WAL. Replaying a WAL is not enough:
        kuzu 0.11.3 replays a WAL holding a DETACH DELETE into a graph with one MENTIONS edge
        fewer than the live one (seen in tests/integration/test_mcp.py's delete tools),
        read-only or not.
        New reads wait while the checkpoint runs (`CheckpointGate`). A read-only store has
        no writer to checkpoint with: its WAL (left by a writer that crashed) is copied, and
        the copy replays it as the store itself did.
        """
        try:
            target.mkdir(mode=0o700)
        except OSError as exc:
            raise StorageError(f"cannot create {target}: {exc.strerror}") from exc
        wal = self._wal
        with self._write_lock:
            if self._closed:
                raise StorageError(
                    "the graph store is closed (a reindex may be swapping it)", hint="retry"
                )
            if self._writer is not None:
                try:
                    self._checkpoint()
                except RuntimeError as exc:
                    raise engine_error(exc, self.path) from exc
            try:
                _copy_private(self.path, target / DB_FILE)
                if wal.exists() and wal.stat().st_size:
                    _copy_private(wal, target / wal.name)
                size = (target / DB_FILE).stat().st_size
            except OSError as exc:
                raise StorageError(
                    f"cannot copy the graph to {target}: {exc.strerror or exc}",
                    hint="check the free space in the data dir",
                ) from exc
            generation = self._generation
        return GraphCopy(
            directory=target,
            engine=self.engine_name,
            generation=generation,
            size=size,
        )


def _print_key(scope_hash: str, fingerprint: str) -> str:
    """A `BodyPrint` key, as schema 5's migration builds it."""
    return f"{scope_hash}:{fingerprint}"
