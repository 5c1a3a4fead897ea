"""Kuzu-specific parts of the graph store that need no engine import: the schema and its
migrations, the checkpoint gate, the write connection's kept statements, and the translation
of engine errors into typed ones."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from memoryd.errors import (
    GraphLocked,
    InvalidInput,
    MemorydError,
    PolicyDenied,
    QueryLimitExceeded,
    ResourceExhausted,
    StorageError,
)
from memoryd.graph.store import CO_MENTIONS_FILL, MEMORY_HINT, TIME_HINT
from memoryd.native import courtesy

logger = logging.getLogger(__name__)

# UNWIND note. A statement that UNWINDs a list of rows projects their fields with WITH before
# it MATCHes by key: matched on `r.slug` itself, the engine compares every row with every node,
# while on a projected column it hash-joins (measured: bench/RESULTS.md). A pattern of two
# nodes matches one, then the other: written as one comma pattern,
# the planner may build their cross product first and exhaust the buffer pool.

# Each migration is a list of statements; the version is its 1-based position.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE NODE TABLE Meta(key STRING PRIMARY KEY, value STRING)",
        "CREATE NODE TABLE Memory(slug STRING PRIMARY KEY, type STRING, scope_hash STRING,"
        " title STRING, body STRING, source STRING, created_at TIMESTAMP, updated_at TIMESTAMP,"
        " ttl_days INT64, decay_state STRING, recall_count INT64, last_recalled_at TIMESTAMP,"
        " fingerprint STRING, category STRING, tags STRING[], triggers STRING[], dura STRING,"
        " sensitive BOOLEAN, promoted_from STRING, path STRING)",
        "CREATE NODE TABLE Entity(id STRING PRIMARY KEY, name STRING, type STRING,"
        " aliases STRING[], context STRING, first_seen_at TIMESTAMP, last_seen_at TIMESTAMP,"
        " mention_count INT64, scope_hash STRING, decay_state STRING)",
        "CREATE NODE TABLE Scope(hash STRING PRIMARY KEY, path STRING, sensitive BOOLEAN,"
        " aliases STRING[])",
        "CREATE REL TABLE MENTIONS(FROM Memory TO Entity, confidence DOUBLE)",
        "CREATE REL TABLE RELATES(FROM Entity TO Entity, FROM Memory TO Entity,"
        " FROM Entity TO Memory, FROM Memory TO Memory, predicate STRING, confidence DOUBLE,"
        " source_memory STRING, created_at TIMESTAMP, valid_from TIMESTAMP,"
        " superseded_at TIMESTAMP)",
        "CREATE REL TABLE SUPERSEDES(FROM Memory TO Memory, entity_id STRING, confidence DOUBLE,"
        " decided_at TIMESTAMP, decided_by STRING, reason STRING)",
        "CREATE REL TABLE PROMOTED_FROM(FROM Memory TO Memory, promoted_at TIMESTAMP)",
    ],
    # 2: a relation keeps the name its source gave it (`inspired by`) beside the predicate.
    ["ALTER TABLE RELATES ADD label STRING"],
    # 3: supersede judging: a candidate waits for a human; `judge` names the rule or model.
    [
        "ALTER TABLE SUPERSEDES ADD status STRING DEFAULT 'active'",
        "ALTER TABLE SUPERSEDES ADD judge STRING",
    ],
    # 4: the version of the supersede rules that made an automatic decision.
    ["ALTER TABLE SUPERSEDES ADD rules INT64"],
    # 5: how many memories hold each (scope, body fingerprint), by key: kuzu indexes nothing
    # but primary keys, and the duplicate check of every write scanned the memories.
    [
        "CREATE NODE TABLE BodyPrint(key STRING PRIMARY KEY, n INT64)",
        "MATCH (m:Memory) WHERE m.scope_hash IS NOT NULL AND m.fingerprint IS NOT NULL"
        " WITH concat(m.scope_hash, ':', m.fingerprint) AS k, count(*) AS n"
        " CREATE (:BodyPrint {key: k, n: n})",
    ],
    # 6: how many memories, not forgotten, name each pair of
    # entities, kept by every write: the graph page ranks a hub's neighbours by it, where it
    # walked every memory of the hub (bench/RESULTS.md, d-hub3).
    ["CREATE REL TABLE CO_MENTIONS(FROM Entity TO Entity, n INT64)", CO_MENTIONS_FILL],
]
SCHEMA_VERSION = len(MIGRATIONS)


class CheckpointGate:
    """Reads share the store; a checkpoint has it alone.

    The engine's CHECKPOINT waits for the open transactions to end and fails after 5 s. A
    read in Python is one transaction across several engine calls (the query, then each
    row), and with the checkpoint holding the engine those calls do not get through: beside
    a single thread reading in a loop, 10 of 10 checkpoints failed (kuzu 0.11.3). So a
    checkpoint stops new reads and waits for the running ones here first.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._checkpointing = False

    @contextmanager
    def read(self) -> Iterator[None]:
        """A read section: it must not call the store again (a nested read would wait for
        a checkpoint that waits for this one)."""
        with self._cond:
            while self._checkpointing:
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
    def checkpoint(self) -> Iterator[None]:
        with self._cond:
            while self._checkpointing:
                self._cond.wait()
            self._checkpointing = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._checkpointing = False
                self._cond.notify_all()


def engine_error(exc: Exception, path: Path) -> StorageError:
    """Translate the engine's RuntimeError into the typed error a user can act on."""
    text = str(exc)
    if "Could not set lock" in text or "lock on file" in text:
        return GraphLocked(
            f"another memoryd process holds the graph at {path}: use `memoryd serve`, or wait"
        )
    if "buffer pool is full" in text or "Unable to allocate memory" in text:
        return ResourceExhausted(
            f"the graph ran out of its buffer pool: {text}",
            hint="raise graph.buffer_pool_mb in config.toml (MEMORYD_GRAPH__BUFFER_POOL_MB)",
        )
    if "interrupted" in text.lower() or "timeout" in text.lower():
        return ResourceExhausted(
            f"graph query timed out: {text}",
            hint="narrow the query or raise graph.query_timeout_ms",
        )
    return StorageError(f"graph error at {path}: {text}")


def _values_in(params: Mapping[str, Any] | None) -> int:
    """How many values a statement's parameters hold (a list counts its items, a row of a
    list its fields), for `READER_BUDGET`."""
    count = 1
    for value in (params or {}).values():
        if isinstance(value, list | tuple):
            count += sum(len(item) if isinstance(item, dict) else 1 for item in value)
        else:
            count += 1
    return count


_UNWIND_ROWS = re.compile(r"UNWIND \$(\w+) AS (\w+) ")
COLUMN_ROWS = 64
"""From how many rows an UNWIND of rows is sent as columns (`as_columns`)."""
_COLUMN_TYPES = {
    frozenset({str}): "STRING",
    frozenset({bool}): "BOOLEAN",
    frozenset({int}): "INT64",
    frozenset({float}): "DOUBLE",
    frozenset({int, float}): "DOUBLE",
    frozenset(): "STRING",  # every value null
    frozenset({datetime}): "",  # the engine's own conversion, as it makes a row's field
}


def as_columns(query: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """`UNWIND $rows AS r …` over a list of flat rows (dicts of the same keys, scalar
    values), rewritten to read one typed list parameter per key, or None (run it as it is).

    The engine's Python binding converts a list of dicts value by value into structs, which
    cost a bulk write's UNWIND statements several times what they do with the rows (a
    5000-memory import batch's mentions, entities, relations, body prints); a typed list
    binds at once. The rows come back as the same structs (`r.slug` …), in order, so the
    rest of the statement is unchanged."""
    found = _UNWIND_ROWS.match(query)
    if found is None:
        return None
    name, var = found.groups()
    rows = params.get(name)
    if f"${name}" in query[found.end() :]:
        return None
    if not isinstance(rows, list) or len(rows) < COLUMN_ROWS or type(rows[0]) is not dict:
        return None
    keys = tuple(rows[0])
    if not keys or not all(k.isidentifier() for k in keys):
        return None
    columns: list[list[Any]] = [[] for _ in keys]
    for row in rows:
        if type(row) is not dict or len(row) != len(keys):
            return None
        try:
            for column, key in zip(columns, keys, strict=True):
                column.append(row[key])
        except KeyError:
            return None
    types = []
    for column in columns:
        kind = _column_type(column)
        if kind is None:  # a date, a list of numbers, a mix of kinds: as rows
            return None
        types.append(kind)
    out = {k: v for k, v in params.items() if k != name}
    for i, column in enumerate(columns):
        out[f"{name}__{i}"] = column
    return _column_prelude(name, var, keys, tuple(types)) + query[found.end() :], out


def _column_type(column: list[Any]) -> str | None:
    """The engine type a column's values are cast to (`_COLUMN_TYPES`; "" for its own), or
    None when it has none: a list of strings is `STRING[]` (a memory's tags and triggers)."""
    kinds = frozenset(type(v) for v in column) - {type(None)}
    if kinds != {list}:
        return _COLUMN_TYPES.get(kinds)
    items = frozenset(type(item) for value in column if value is not None for item in value)
    return "STRING[]" if items <= {str} else None


@functools.lru_cache(maxsize=64)
def _column_prelude(name: str, var: str, keys: tuple[str, ...], types: tuple[str, ...]) -> str:
    """`WITH CAST($rows__0 AS STRING[]) AS rows__0, … UNWIND range(1, n) AS i WITH {…} AS r `:
    each list cast to its type (a list of nulls has none of its own)."""
    lists = ", ".join(
        f"CAST(${name}__{i} AS {t}[]) AS {name}__{i}" if t else f"${name}__{i} AS {name}__{i}"
        for i, t in enumerate(types)
    )
    fields = ", ".join(f"`{k}`: {name}__{i}[{name}__i]" for i, k in enumerate(keys))
    return f"WITH {lists} UNWIND range(1, size({name}__0)) AS {name}__i WITH {{{fields}}} AS {var} "


KEPT_VALUES = 256
"""A write statement with at most this many parameter values is prepared once per write
connection and kept (`KeptStatements`); a bigger one (a batch's UNWIND) is prepared anew."""
KEPT_TEXTS = 512
"""Distinct statement texts a connection keeps: memoryd's own are a few dozen; a text built
with its values inlined would otherwise add one kept statement per value, without end."""
WRITER_BUDGET = 4096
"""Parameter values the write connection takes in statements it does not keep before it is
replaced, after a transaction (the engine holds those statements until it closes)."""


class Yielding:
    """The write connection as a background job's transaction sees it: each statement waits
    for the job's courtesy first (`native.yielding_to`), so a request that arrives while a
    long write runs waits for one statement, not for the whole write."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        courtesy()
        return self._conn.execute(*args, **kwargs)


_KEPT_TYPES = frozenset({str, int, float, bool, type(None), datetime, list})
"""Values a kept statement's parameters may be: a table (COPY's source) is bound when the
statement is prepared, so a statement given one is never kept."""


class KeptStatements:
    """The write connection's small prepared statements, kept from one transaction to the
    next: preparing (parse, bind, plan) was most of the CPU of each small write statement,
    and a `record` runs a dozen. kuzu 0.11.3 runs a kept statement with new values across
    transactions and checkpoints and holds no more memory for it; every other statement a
    connection prepares it holds, with its values, until the connection closes: `spent`
    counts those (bench/RESULTS.md, s-record4)."""

    def __init__(self, prepare: Callable[[str], Any] | None) -> None:
        self._prepare = prepare
        self._kept: dict[str, Any] = {}
        self.spent = 0

    @classmethod
    def on(cls, engine: ModuleType, conn: Any) -> KeptStatements:
        """For the engine's write connection `conn` (None: a read-only store keeps none)."""
        kind = getattr(engine, "PreparedStatement", None)
        return cls(None if conn is None or kind is None else functools.partial(kind, conn))

    def statement(self, query: str, parameters: Mapping[str, Any]) -> Any:
        """The kept statement for `query`, or `query` itself (prepared anew, counted)."""
        values = _values_in(parameters)
        held = self._kept.get(query)
        if (
            held is None
            and self._prepare is not None
            and values <= KEPT_VALUES
            and len(self._kept) < KEPT_TEXTS
            and all(type(v) in _KEPT_TYPES for v in parameters.values())
        ):
            held = self._prepare(query)
            if held.is_success():
                self._kept[query] = held
            else:  # run as text: the engine's message says what is wrong
                held = None
        if held is None:
            self.spent += values
            return query
        return held


class ColumnRows:
    """A transaction's write connection whose UNWINDs over many rows go out as typed lists,
    one per field (`as_columns`), and whose small statements are kept prepared (`kept`)."""

    __slots__ = ("_conn", "_kept")

    def __init__(self, conn: Any, kept: KeptStatements | None = None) -> None:
        self._conn = conn
        self._kept = kept

    def execute(self, query: str, parameters: dict[str, Any] | None = None) -> Any:
        if not parameters:
            if self._kept is not None:
                self._kept.spent += 1
            return self._conn.execute(query)
        columns = as_columns(query, parameters)
        if columns is not None:
            query, parameters = columns
        if self._kept is None:
            return self._conn.execute(query, parameters)
        return self._conn.execute(self._kept.statement(query, parameters), parameters)


# Engine messages that mean the caller's Cypher or parameters are at fault, not the store.
_QUERY_FAULTS = (
    "Parser exception",
    "Binder exception",
    "Catalog exception",
    "Conversion exception",
    "Overflow exception",
    "Runtime exception",
    "Not implemented",
    "Cannot convert Python object",
    "Parameter ",
)
_OUT_OF_MEMORY = ("std::bad_alloc", "Unable to allocate memory", "buffer pool is full")


def query_error(exc: RuntimeError, path: Path, timeout_ms: int) -> MemorydError:
    """The typed error for a failed graph query: the caller's fault (InvalidInput), a write
    (PolicyDenied), a limit it ran into (QueryLimitExceeded), or the store's (StorageError)."""
    text = str(exc)
    if text.startswith("Interrupted"):
        return QueryLimitExceeded(
            f"the graph query ran past its time limit ({timeout_ms:,} ms) and was stopped",
            hint=f"{TIME_HINT}; or raise graph.cypher_timeout_ms",
            limit="time",
        )
    if any(marker in text for marker in _OUT_OF_MEMORY):
        return QueryLimitExceeded(
            f"the graph query needed more memory than a query may use ({text})",
            hint=f"{MEMORY_HINT}; or raise graph.cypher_memory_mb",
            limit="memory",
        )
    if "read-only database" in text:
        return PolicyDenied(
            f"graph queries are read-only: {text}",
            hint="use `memoryd record` and the entity commands to change the graph",
        )
    if text.startswith("Parameter ") and text.rstrip(".").endswith("not found"):
        name = text.removeprefix("Parameter ").rsplit(" not found", 1)[0]
        return InvalidInput(
            f"the query does not use the parameter ${name}",
            hint="remove it from the parameters, or refer to it in the query",
        )
    if any(marker in text for marker in _QUERY_FAULTS):
        return InvalidInput(f"invalid Cypher: {text}")
    return engine_error(exc, path)


def _copy_private(source: Path, target: Path) -> None:
    """Copy a file readable by its owner only (the graph holds private memories)."""
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    shutil.copyfile(source, target)  # keeps the mode; copies in the kernel (sendfile)


def release_free_memory() -> None:
    """Hand the engine's freed heap back to the OS (glibc keeps it otherwise), so a process
    that closes one database and opens another (reindex) does not hold both at its peak."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            logger.debug("malloc_trim is not available")
