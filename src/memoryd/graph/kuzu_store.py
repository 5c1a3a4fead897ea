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
  closed (about 5 KB a query and 0.4 KB a parameter value: 800 MB of heap over a 100k
  import, 100 MB over 20k reads), so the write connection is replaced after each
  transaction and a read connection after `READER_BUDGET` parameter values.

Over 600 lines: the one home of kuzu (ruff enforces it); every Cypher statement memoryd runs is
here, one method per store operation.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import logging
import os
import re
import shutil
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
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
from memoryd.graph.store import (
    MEMORY_HINT,
    TIME_HINT,
    CypherResult,
    EntityRow,
    GraphCopy,
    MemoryRow,
    SupersedeRow,
    check_cypher,
    check_page,
    cypher_code,
    supersede_edges,
)
from memoryd.models import DecayState, Memory, MemorySummary, MemoryType, Predicate
from memoryd.private import make_private_dir

logger = logging.getLogger(__name__)

DB_FILE = "memoryd.kz"
ENGINES = ("kuzu", "ladybug")
CHECKPOINT_BYTES = 16 * 1024 * 1024
"""WAL size past which a commit is followed by a checkpoint (the engine's own default)."""
_MIB = 1024 * 1024
READER_BUDGET = 4096
"""Parameter values a read connection takes before it is replaced (`_reader`)."""
_SKIP = re.compile(r"\bSKIP\b", re.IGNORECASE)
_PER_ENTITY_CACHE = 20_000
"""Entries `mentioning` and `related_entities` keep before starting over (`_per_entity`)."""

# UNWIND note. A statement that UNWINDs a list of rows projects their fields with WITH before
# it MATCHes by key: matched on `r.slug` itself, the engine compares every row with every node
# (800 recall counts at 100k memories: 860 ms), while on a projected column it hash-joins
# (57 ms). A pattern of two nodes matches one, then the other: written as one comma pattern,
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
]
SCHEMA_VERSION = len(MIGRATIONS)

COPY_ROWS = 64
"""A write of at least this many new memories goes in by COPY; fewer by UNWIND,
which needs no pyarrow import (a single `memoryd record` stays quick)."""
_MEMORY_COPY = (
    ("slug", "string"),
    ("type", "string"),
    ("scope_hash", "string"),
    ("title", "string"),
    ("body", "string"),
    ("source", "string"),
    ("created_at", "timestamp"),
    ("updated_at", "timestamp"),
    ("ttl_days", "int64"),
    ("decay_state", "string"),
    ("recall_count", "int64"),
    ("last_recalled_at", "timestamp"),
    ("fingerprint", "string"),
    ("category", "string"),
    ("tags", "string[]"),
    ("triggers", "string[]"),
    ("dura", "string"),
    ("sensitive", "bool"),
    ("promoted_from", "string"),
    ("path", "string"),
)
"""The Memory columns `_memory_params` fills, with their Arrow types (`_copy`)."""
_SLUGS_STORED = "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) RETURN m.slug"

_MEMORY_COLUMNS = (
    "slug, type, scope_hash, title, body, source, created_at, updated_at, ttl_days,"
    " decay_state, recall_count, last_recalled_at, fingerprint, category, tags, triggers,"
    " sensitive, path"
)


_EDGE_KEYS = (
    "newer",
    "older",
    "entity_id",
    "confidence",
    "decided_at",
    "decided_by",
    "reason",
    "status",
    "judge",
)
"""The SupersedeRow fields recall reads of every active edge (`_supersedes_map`)."""


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
        raise StorageError(
            f"graph engine {name!r} is not installed", hint=f"pip install {name}"
        ) from exc


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


def _utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _copy(conn: Any, table: str, columns: Sequence[tuple[str, str, list[Any]]]) -> None:
    """COPY rows into the node `table` from an Arrow table built column by column (name, type,
    values). Arrow, not pandas: COPY from pandas with null strings corrupts memory (DESIGN.md
    §4)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "double": pa.float64(),
        "int64": pa.int64(),
        "bool": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "string[]": pa.list_(pa.string()),
    }
    rows = pa.table({name: pa.array(values, types[kind]) for name, kind, values in columns})
    listed = ", ".join(name for name, _, _ in columns)
    conn.execute(f"COPY {table} ({listed}) FROM $rows", {"rows": rows})


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


def _entity_parts(entity_id: str) -> tuple[str, str]:
    """`entity:library:React` → ("library", "React")."""
    _, _, rest = entity_id.partition(":")
    etype, _, name = rest.partition(":")
    return etype or "concept", name or entity_id


class KuzuGraphStore:
    """A Kuzu (or LadybugDB) database in `<home>/graph/`."""

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
        self.directory = directory
        self.sandboxed = sandboxed
        """A copy in `memoryd.graph.sandbox` runs users' Cypher, SKIP included: a crash
        there ends the sandbox's process, not the daemon's."""
        self.path = directory / DB_FILE
        self._wal = self.path.with_name(DB_FILE + ".wal")
        self._checkpoint_bytes = checkpoint_bytes
        self.engine_name = engine
        self.max_fanout = max_fanout
        self.read_only = read_only
        self._timeout_ms = query_timeout_ms
        self._engine = load_engine(engine)
        self._write_lock = threading.Lock()
        self._reads = CheckpointGate()
        self._local = threading.local()
        self._closed = False
        self._generation = 0
        """Counts committed write transactions: caches of graph facts are keyed by it."""
        self._supersedes: tuple[int, dict[str, SupersedeRow]] = (-1, {})
        self._supersede_writes = 0
        self._per_entity: tuple[int, dict[tuple[str, ...], list[Any]]] = (-1, {})
        """(generation, {(statement, entity id, scopes…): its capped rows}) for `mentioning`
        and `related_entities`: a recall asks them of the same few entities over and over
        (a conversation's speakers), a kuzu round trip each (~3 ms). Any write empties it."""
        """Counts committed writes that may have changed the SUPERSEDES edges (or the order of
        their newer ends): the supersede map is keyed by it, so the writes that cannot (recall
        counts, scopes, entities, a memory no edge touches) leave it cached."""
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
            self._db = self._engine.Database(
                str(self.path),
                buffer_pool_size=buffer_pool_mb * _MIB,
                read_only=read_only,
                max_num_threads=2,
                **options,
            )
            self._writer = None if read_only else self._engine.Connection(self._db)
        except RuntimeError as exc:
            raise engine_error(exc, self.path) from exc
        if not read_only:
            self._migrate()

    # -- plumbing -------------------------------------------------------------------------
    def _reader(self, params: Mapping[str, Any] | None = None) -> Any:
        """This thread's read connection, a new one once the old has taken its budget of
        parameter values (the engine holds them until the connection closes)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.spent >= READER_BUDGET:
            conn.close()
            conn = None
        if conn is None:
            conn = self._engine.Connection(self._db)
            conn.set_query_timeout(self._timeout_ms)
            local.conn, local.spent = conn, 0
        local.spent += _values_in(params)
        return conn

    def _renew_writer(self) -> None:
        """Replace the write connection (call it holding the write lock, between
        transactions): what it prepared is freed with it."""
        assert self._writer is not None
        self._writer.close()
        try:
            self._writer = self._engine.Connection(self._db)
        except RuntimeError as exc:
            raise engine_error(exc, self.path) from exc

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
        try:
            with self._reads.read():
                result = self._reader(params).execute(query, params or {})
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
    def _transaction(self, *, keeps_supersedes: bool = False) -> Iterator[Any]:
        """One write transaction on the one write connection; rolled back on any error.
        `keeps_supersedes`: it writes no SUPERSEDES edge and moves no memory one touches."""
        if self._writer is None:
            raise PolicyDenied("the graph is open read-only", hint="write through `memoryd serve`")
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN TRANSACTION")
            except RuntimeError as exc:
                raise engine_error(exc, self.path) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                self._generation += 1
                self._supersede_writes += 1
                try:
                    conn.execute("ROLLBACK")
                except RuntimeError:
                    # A failed statement already ended the transaction; nothing to undo.
                    logger.debug("no transaction left to roll back on %s", self.path)
                self._renew_writer()
                if isinstance(exc, RuntimeError):
                    raise engine_error(exc, self.path) from exc
                raise
            self._generation += 1
            if not keeps_supersedes:
                self._supersede_writes += 1
            if self._wal.exists() and self._wal.stat().st_size >= self._checkpoint_bytes:
                try:
                    self._checkpoint()
                except RuntimeError:  # the commit stands in the WAL: checkpoint next time
                    logger.warning("checkpoint of %s failed", self.path, exc_info=True)
            self._renew_writer()

    def _checkpoint(self) -> None:
        """Write the WAL into the data file, with no read running (`CheckpointGate`). Call
        it holding the write lock. The engine's own checkpoint at commit is off: it waits
        for reads that cannot finish and, after 5 s, fails the COMMIT of a transaction it
        has already committed."""
        assert self._writer is not None
        with self._reads.checkpoint():
            self._writer.execute("CHECKPOINT")

    def _migrate(self) -> None:
        tables = {row[0] for row in self._rows("CALL show_tables() RETURN name")}
        current = 0
        if "Meta" in tables:
            found = self._rows("MATCH (m:Meta {key: 'schema_version'}) RETURN m.value")
            current = int(found[0][0]) if found else 0
        if current > SCHEMA_VERSION:
            raise StorageError(
                f"the graph at {self.path} is at schema {current} but this memoryd knows "
                f"{SCHEMA_VERSION}",
                hint="upgrade memoryd, or run `memoryd reindex` to rebuild the graph",
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with self._transaction() as conn:
                for statement in MIGRATIONS[version - 1]:
                    conn.execute(statement)
                conn.execute(
                    "MERGE (m:Meta {key: 'schema_version'}) SET m.value = $v", {"v": str(version)}
                )
            logger.info("graph %s migrated to schema %d", self.path, version)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
            self._db.close()
        release_free_memory()

    def schema_version(self) -> int:
        found = self._rows("MATCH (m:Meta {key: 'schema_version'}) RETURN m.value")
        return int(found[0][0]) if found else 0

    # -- writes ---------------------------------------------------------------------------
    @staticmethod
    def _memory_params(memory: Memory) -> dict[str, Any]:
        meta = memory.meta
        return {
            "slug": meta.slug,
            "type": meta.type.value,
            "scope_hash": meta.scope_hash,
            "title": meta.title,
            "body": "" if memory.sensitive else memory.body,
            "source": meta.source,
            "created_at": meta.created_at,
            "updated_at": meta.updated_at,
            "ttl_days": meta.ttl_days,
            "decay_state": meta.decay_state.value,
            "recall_count": meta.recall_count,
            "last_recalled_at": meta.last_recalled_at,
            "fingerprint": "" if memory.sensitive else memory.fingerprint,
            "category": meta.category,
            "tags": list(meta.tags),
            "triggers": list(meta.triggers),
            "dura": meta.dura_score.model_dump_json() if meta.dura_score else None,
            "sensitive": memory.sensitive,
            "promoted_from": meta.promoted_from,
            "path": str(memory.path or ""),
        }

    def upsert_memories(
        self, memories: Sequence[Memory], *, link_memories: bool = True, new: bool = False
    ) -> None:
        """Write memories and their edges. `new=True` (fresh slugs, e.g. bulk ingest or a
        rebuild) skips looking for old edges to replace, which is a scan per batch."""
        if not memories:
            return
        memories = [m.skeleton() if m.sensitive else m for m in memories]
        mems = [self._memory_params(m) for m in memories]
        slugs = [m["slug"] for m in mems]
        mentions: dict[tuple[str, str], float] = {}
        entity_rows: dict[str, dict[str, Any]] = {}
        relates: dict[tuple[str, str], list[dict[str, Any]]] = {}

        def entity(eid: str, memory: Memory) -> None:
            if eid not in entity_rows:
                etype, name = _entity_parts(eid)
                entity_rows[eid] = {
                    "id": eid,
                    "name": name,
                    "type": etype,
                    "scope_hash": memory.meta.scope_hash,
                }

        for memory in memories:
            slug = memory.meta.slug
            for eid in memory.meta.observations:
                entity(eid, memory)
                mentions[(slug, eid)] = max(mentions.get((slug, eid), 0.0), 1.0)
            for rel in memory.meta.relations:
                subject = rel.subject or slug
                s_kind = "entity" if subject.startswith("entity:") else "memory"
                o_kind = "entity" if rel.object.startswith("entity:") else "memory"
                if s_kind == "entity":
                    entity(subject, memory)
                if o_kind == "entity":
                    entity(rel.object, memory)
                if rel.predicate is Predicate.MENTIONS and subject == slug and o_kind == "entity":
                    prior = mentions.get((slug, rel.object), 0.0)
                    mentions[(slug, rel.object)] = max(prior, rel.confidence)
                    continue
                relates.setdefault((s_kind, o_kind), []).append(
                    {
                        "s": subject,
                        "o": rel.object,
                        "predicate": rel.predicate.value,
                        "confidence": rel.confidence,
                        "source": slug,
                        "created_at": memory.meta.created_at,
                        "valid_from": rel.valid_from or memory.meta.created_at,
                        "superseded_at": rel.superseded_at,
                        "label": rel.label,
                    }
                )
        with self._transaction(keeps_supersedes=not self._in_supersedes(slugs)) as conn:
            touched: list[str] = []
            if not new:
                touched = [
                    row[0]
                    for row in self._collect(
                        conn,
                        "UNWIND $slugs AS s MATCH (:Memory {slug: s})-[:MENTIONS]->(e:Entity)"
                        " RETURN DISTINCT e.id",
                        {"slugs": slugs},
                    )
                ]
                conn.execute(
                    "UNWIND $slugs AS s MATCH (:Memory {slug: s})-[r:MENTIONS]->() DELETE r",
                    {"slugs": slugs},
                )
                conn.execute(
                    "UNWIND $slugs AS s MATCH ()-[r:RELATES]->() WHERE r.source_memory = s"
                    " DELETE r",
                    {"slugs": slugs},
                )
            self._write_memories(conn, mems, new=new)
            if entity_rows:
                conn.execute(
                    "UNWIND $rows AS r MERGE (e:Entity {id: r.id}) ON CREATE SET e.name = r.name,"
                    " e.type = r.type, e.aliases = CAST([] AS STRING[]), e.mention_count = 0,"
                    " e.scope_hash = r.scope_hash, e.decay_state = 'fresh'",
                    {"rows": list(entity_rows.values())},
                )
            if mentions:
                # Not by COPY: an entity's mention count, read back from the edges in this
                # transaction, came out wrong after a COPY of them (kuzu 0.11.3; the demo
                # vault's `pandas` counted 4 of its 2 edges, `SQL` 0 of 1).
                conn.execute(
                    "UNWIND $rows AS r"
                    " WITH r.slug AS slug, r.id AS id, CAST(r.confidence AS DOUBLE) AS confidence"
                    " MATCH (m:Memory {slug: slug}) WITH m, id, confidence"
                    " MATCH (e:Entity {id: id})"
                    " CREATE (m)-[:MENTIONS {confidence: confidence}]->(e)",
                    {
                        "rows": [
                            {"slug": s, "id": e, "confidence": c} for (s, e), c in mentions.items()
                        ]
                    },
                )
            for (s_kind, o_kind), rows in relates.items():
                s_label = "Entity" if s_kind == "entity" else "Memory"
                o_label = "Entity" if o_kind == "entity" else "Memory"
                s_key = "id" if s_kind == "entity" else "slug"
                o_key = "id" if o_kind == "entity" else "slug"
                conn.execute(
                    "UNWIND $rows AS r WITH r.s AS s, r.o AS o, r.predicate AS predicate,"
                    " CAST(r.confidence AS DOUBLE) AS confidence, r.source AS source,"
                    " CAST(r.created_at AS TIMESTAMP) AS created_at,"
                    " CAST(r.valid_from AS TIMESTAMP) AS valid_from,"
                    " CAST(r.superseded_at AS TIMESTAMP) AS superseded_at,"
                    " CAST(r.label AS STRING) AS label"
                    f" MATCH (a:{s_label} {{{s_key}: s}})"
                    " WITH a, o, predicate, confidence, source, created_at, valid_from,"
                    f" superseded_at, label MATCH (b:{o_label} {{{o_key}: o}})"
                    " CREATE (a)-[:RELATES {predicate: predicate, confidence: confidence,"
                    " source_memory: source, created_at: created_at, valid_from: valid_from,"
                    " superseded_at: superseded_at, label: label}]->(b)",
                    {"rows": rows},
                )
            if link_memories and self._link(conn, memories):
                self._supersede_writes += 1
            self._refresh_entity_stats(conn, sorted(set(touched) | set(entity_rows)))

    def _write_memories(self, conn: Any, mems: list[dict[str, Any]], *, new: bool) -> None:
        if new and len(mems) >= COPY_ROWS:
            self._copy_memories(conn, mems)
            return
        conn.execute(
            # Kuzu infers a parameter column's type from its values (an all-null column
            # is STRING), so every nullable typed column is cast explicitly.
            f"UNWIND $rows AS r {'CREATE' if new else 'MERGE'} (m:Memory {{slug: r.slug}})"
            " SET m.type = r.type,"
            " m.scope_hash = r.scope_hash, m.title = r.title, m.body = r.body,"
            " m.source = r.source, m.created_at = CAST(r.created_at AS TIMESTAMP),"
            " m.updated_at = CAST(r.updated_at AS TIMESTAMP),"
            " m.ttl_days = CAST(r.ttl_days AS INT64), m.decay_state = r.decay_state,"
            " m.recall_count = CAST(r.recall_count AS INT64),"
            " m.last_recalled_at = CAST(r.last_recalled_at AS TIMESTAMP),"
            " m.fingerprint = r.fingerprint, m.category = CAST(r.category AS STRING),"
            " m.tags = CAST(r.tags AS STRING[]), m.triggers = CAST(r.triggers AS STRING[]),"
            " m.dura = CAST(r.dura AS STRING), m.sensitive = CAST(r.sensitive AS BOOLEAN),"
            " m.promoted_from = CAST(r.promoted_from AS STRING), m.path = r.path",
            {"rows": mems},
        )

    def _copy_memories(self, conn: Any, mems: list[dict[str, Any]]) -> None:
        """New memories by COPY from an Arrow table: converting a list parameter row by row
        cost the engine more than everything else in a bulk write (100k memories: 16 s of
        CPU by UNWIND, 2 s by COPY). COPY does not look for the slugs already stored
        (kuzu 0.11.3 stores a second node under the same primary key), so this does."""
        slugs = [m["slug"] for m in mems]
        taken = {row[0] for row in self._collect(conn, _SLUGS_STORED, {"slugs": slugs})}
        taken.update(slug for slug, n in Counter(slugs).items() if n > 1)
        if taken:
            raise StorageError(
                f"graph at {self.path}: memory {min(taken)} is already stored",
                hint="a new memory needs a slug of its own",
            )
        _copy(
            conn, "Memory", [(name, kind, [m[name] for m in mems]) for name, kind in _MEMORY_COPY]
        )

    def link_memories(self, memories: Sequence[Memory]) -> None:
        if memories:
            with self._transaction() as conn:
                self._link(conn, memories)

    @staticmethod
    def _collect(conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        result = conn.execute(query, params)
        rows: list[list[Any]] = []
        while result.has_next():
            rows.append(result.get_next())
        return rows

    def _link(self, conn: Any, memories: Sequence[Memory]) -> bool:
        """Rewrite the memories' SUPERSEDES and PROMOTED_FROM edges; whether it wrote any
        SUPERSEDES edge."""
        slugs = [m.meta.slug for m in memories]
        conn.execute(
            "UNWIND $slugs AS s MATCH (:Memory {slug: s})-[r:SUPERSEDES]->() DELETE r",
            {"slugs": slugs},
        )
        conn.execute(
            "UNWIND $slugs AS s MATCH (:Memory {slug: s})-[r:PROMOTED_FROM]->() DELETE r",
            {"slugs": slugs},
        )
        supersedes = [edge for m in memories for edge in supersede_edges(m)]
        if supersedes:
            conn.execute(
                "UNWIND $rows AS r"
                " WITH r.newer AS newer, r.older AS older, CAST(r.at AS TIMESTAMP) AS at,"
                " r.confidence AS confidence, r.decided_by AS decided_by, r.status AS status,"
                " r.judge AS judge, r.reason AS reason, r.entity_id AS entity_id,"
                " CAST(r.rules AS INT64) AS rules"
                " MATCH (n:Memory {slug: newer})"
                " WITH n, older, at, confidence, decided_by, status, judge, reason, entity_id,"
                " rules MATCH (o:Memory {slug: older})"
                " CREATE (n)-[:SUPERSEDES {confidence: confidence, decided_at: at,"
                " decided_by: decided_by, status: status, judge: judge, reason: reason,"
                " entity_id: entity_id, rules: rules}]->(o)",
                {"rows": supersedes},
            )
        promoted = [
            {"slug": m.meta.slug, "source": m.meta.promoted_from, "at": m.meta.created_at}
            for m in memories
            if m.meta.promoted_from
        ]
        if promoted:
            conn.execute(
                "UNWIND $rows AS r"
                " WITH r.slug AS slug, r.source AS source, CAST(r.at AS TIMESTAMP) AS at"
                " MATCH (n:Memory {slug: slug}) WITH n, source, at MATCH (o:Memory {slug: source})"
                " CREATE (n)-[:PROMOTED_FROM {promoted_at: at}]->(o)",
                {"rows": promoted},
            )
        return bool(supersedes)

    @staticmethod
    def _refresh_entity_stats(conn: Any, entity_ids: Sequence[str]) -> None:
        """mention_count, first/last seen and the home scope (the one scope that mentions it, or
        none when several do) derive from MENTIONS, so reindex reproduces them."""
        if not entity_ids:
            return
        conn.execute(
            "UNWIND $ids AS i MATCH (e:Entity {id: i}) OPTIONAL MATCH (m:Memory)-[:MENTIONS]->(e)"
            " WITH e, count(m) AS n, min(m.created_at) AS f, max(m.created_at) AS l,"
            " collect(DISTINCT m.scope_hash) AS scopes"
            " SET e.mention_count = n, e.first_seen_at = f, e.last_seen_at = l,"
            " e.scope_hash = CASE WHEN size(scopes) = 1 THEN scopes[1] ELSE NULL END",
            {"ids": list(entity_ids)},
        )

    def delete_memories(self, slugs: Sequence[str]) -> None:
        """Delete memories with their edges and the relations they sourced.

        Every statement joins the unwound slugs (`r.source_memory IN $list` compares each
        edge with the whole list: deleting 75k of 100k memories took 5.6 s for that alone),
        and only memories that have edges pay for DETACH DELETE: a plain DELETE of the rest
        is about half the cost per memory (the 75k a decay sweep forgets: 8-11 s before,
        2.7-2.8 s after)."""
        if not slugs:
            return
        with self._transaction() as conn:
            touched = [
                row[0]
                for row in self._collect(
                    conn,
                    "UNWIND $slugs AS s MATCH (:Memory {slug: s})-[:MENTIONS]->(e:Entity)"
                    " RETURN DISTINCT e.id",
                    {"slugs": list(slugs)},
                )
            ]
            conn.execute(
                "UNWIND $slugs AS s MATCH ()-[r:RELATES]->() WHERE r.source_memory = s DELETE r",
                {"slugs": list(slugs)},
            )
            edged = [
                row[0]
                for row in self._collect(
                    conn,
                    "UNWIND $slugs AS s MATCH (m:Memory {slug: s})-[]-() RETURN DISTINCT m.slug",
                    {"slugs": list(slugs)},
                )
            ]
            if edged:
                conn.execute(
                    "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) DETACH DELETE m",
                    {"slugs": edged},
                )
            bare = list(set(slugs).difference(edged))
            if bare:
                conn.execute(
                    "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) DELETE m", {"slugs": bare}
                )
            self._refresh_entity_stats(conn, touched)

    def set_recall(
        self, slug: str, *, recall_count: int, last_recalled_at: datetime, decay_state: DecayState
    ) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MATCH (m:Memory {slug: $slug}) SET m.recall_count = $n,"
                " m.last_recalled_at = $at, m.decay_state = $state",
                {
                    "slug": slug,
                    "n": recall_count,
                    "at": last_recalled_at,
                    "state": decay_state.value,
                },
            )

    def set_decay_states(self, states: Mapping[str, DecayState]) -> None:
        """Move memories to new decay states (slug → state), one statement per state: the
        decay sweep changes nothing else about them, so their edges stay as they are. A list
        of slugs per state, not a list of slug-state structs: kuzu reads a 25k-row struct
        list several times slower (25k moves: 0.5-0.8 s against 0.1 s)."""
        by_state: dict[str, list[str]] = {}
        for slug, state in states.items():
            by_state.setdefault(state.value, []).append(slug)
        if not by_state:
            return
        with self._transaction() as conn:
            for value, slugs in sorted(by_state.items()):
                conn.execute(
                    "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) SET m.decay_state = $state",
                    {"slugs": slugs, "state": value},
                )

    def decay_candidates(self, alive: datetime, dim: datetime, soft: datetime) -> list[list[Any]]:
        """The session memories a decay sweep may move: alive ones idle since `alive` or
        earlier, dim ones since `dim`, soft-forgotten ones since `soft`. Rows of slug,
        scope_hash, title, ttl_days, decay_state, idle since (last recall, else creation),
        last_recalled_at, path, created_at: one scan, no conversion beyond UTC (a sweep may
        read 100k)."""
        return self._rows(
            "MATCH (m:Memory) WHERE m.type = 'session' AND m.ttl_days IS NOT NULL"
            " WITH m, coalesce(m.last_recalled_at, m.created_at) AS since"
            " WHERE (m.decay_state = 'alive' AND since <= $alive)"
            " OR (m.decay_state = 'dim' AND since <= $dim)"
            " OR (m.decay_state = 'soft-forgotten' AND since <= $soft)"
            " RETURN m.slug, m.scope_hash, m.title, m.ttl_days, m.decay_state, since,"
            " m.last_recalled_at, m.path, m.created_at",
            {"alive": alive, "dim": dim, "soft": soft},
            times=(5, 6, 8),
        )

    def upsert_scope(self, scope_hash: str, path: str, sensitive: bool, aliases: list[str]) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MERGE (s:Scope {hash: $hash}) SET s.path = $path, s.sensitive = $sensitive,"
                " s.aliases = CAST($aliases AS STRING[])",
                {"hash": scope_hash, "path": path, "sensitive": sensitive, "aliases": aliases},
            )

    # -- reads ----------------------------------------------------------------------------
    def get_memory(self, slug: str) -> MemoryRow | None:
        return self.memory_rows([slug]).get(slug)

    def memory_rows(self, slugs: Sequence[str]) -> dict[str, MemoryRow]:
        """Several memories in one query, keyed by slug (missing ones are absent)."""
        if not slugs:
            return {}
        if len(slugs) == 1:
            # One slug (every `get_memory`) by its key alone: kuzu 0.11.3 reads each returned
            # column of the whole table for the UNWIND form (12 ms of CPU at 10k memories).
            rows = self._rows(
                f"MATCH (m:Memory {{slug: $slug}}) RETURN {_prefixed('m', _MEMORY_COLUMNS)}",
                {"slug": slugs[0]},
            )
        else:
            rows = self._rows(
                # UNWIND + primary-key match: `WHERE slug IN $list` scans the whole table.
                f"UNWIND $slugs AS s MATCH (m:Memory {{slug: s}})"
                f" RETURN {_prefixed('m', _MEMORY_COLUMNS)}",
                {"slugs": list(slugs)},
            )
        names = [c.strip() for c in _MEMORY_COLUMNS.split(",")]
        found = (MemoryRow.model_validate(dict(zip(names, r, strict=True))) for r in rows)
        return {row.slug: row for row in found}

    def list_memories(
        self,
        *,
        scope_hash: str | None = None,
        type: MemoryType | None = None,
        decay_state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]:
        clause, params = self._memory_filter(scope_hash, type, decay_state)
        rows, _ = self._page(
            f"MATCH (m:Memory) {clause} RETURN count(m)",
            f"MATCH (m:Memory) {clause} RETURN m.slug, m.type, m.title, m.scope_hash, m.source,"
            " m.created_at, m.updated_at, m.decay_state, m.tags, m.recall_count"
            " ORDER BY m.created_at DESC, m.slug",
            params,
            limit=limit,
            offset=offset,
        )
        keys = [
            "slug",
            "type",
            "title",
            "scope_hash",
            "source",
            "created_at",
            "updated_at",
            "decay_state",
            "tags",
            "recall_count",
        ]
        return [MemorySummary.model_validate(dict(zip(keys, r, strict=True))) for r in rows]

    def count_memories(
        self,
        *,
        scope_hash: str | None = None,
        type: MemoryType | None = None,
        decay_state: DecayState | None = None,
    ) -> int:
        clause, params = self._memory_filter(scope_hash, type, decay_state)
        return int(self._rows(f"MATCH (m:Memory) {clause} RETURN count(m)", params)[0][0])

    @staticmethod
    def _memory_filter(
        scope_hash: str | None, type: MemoryType | None, decay_state: DecayState | None
    ) -> tuple[str, dict[str, Any]]:
        """The WHERE clause `list_memories` and `count_memories` share, and its parameters."""
        where = []
        params: dict[str, Any] = {}
        if scope_hash is not None:
            where.append("m.scope_hash = $scope")
            params["scope"] = scope_hash
        if type is not None:
            where.append("m.type = $type")
            params["type"] = type.value
        if decay_state is not None:
            where.append("m.decay_state = $state")
            params["state"] = decay_state.value
        return (f"WHERE {' AND '.join(where)}" if where else ""), params

    def memory_slugs(self) -> set[str]:
        return {row[0] for row in self._rows("MATCH (m:Memory) RETURN m.slug")}

    def memory_paths_outside(self, prefix: str) -> list[str]:
        return [
            row[0]
            for row in self._rows(
                "MATCH (m:Memory) WHERE m.path <> '' AND NOT starts_with(m.path, $prefix)"
                " RETURN m.path",
                {"prefix": prefix},
            )
        ]

    def rebase_memory_paths(self, old_prefix: str, new_prefix: str) -> int:
        with self._transaction(keeps_supersedes=True) as conn:
            rows = self._collect(
                conn,
                "MATCH (m:Memory) WHERE starts_with(m.path, $old)"
                " SET m.path = $new + substring(m.path, $rest, size(m.path))"
                " RETURN count(m)",
                {"old": old_prefix, "new": new_prefix, "rest": len(old_prefix) + 1},
            )
        return int(rows[0][0]) if rows else 0

    def find_by_fingerprint(self, scope_hash: str, fingerprint: str) -> str | None:
        return self.find_fingerprints(scope_hash, [fingerprint]).get(fingerprint)

    def find_fingerprints(self, scope_hash: str, fingerprints: Sequence[str]) -> dict[str, str]:
        """Which of these body fingerprints already exist in the scope (one query per batch,
        joined from the unwound list: `fingerprint IN $list` compares each memory with the whole
        list, 5.3 s for 5,000 fingerprints in a 100k graph against 0.13 s)."""
        if not fingerprints:
            return {}
        rows = self._rows(
            "UNWIND $fps AS f MATCH (m:Memory) WHERE m.scope_hash = $scope AND m.fingerprint = f"
            " RETURN m.fingerprint, m.slug ORDER BY m.created_at DESC, m.slug DESC",
            {"scope": scope_hash, "fps": list(fingerprints)},
        )
        return {fp: slug for fp, slug in rows}

    def get_entity(self, entity_id: str) -> EntityRow | None:
        rows = self._rows(
            "MATCH (e:Entity {id: $id}) RETURN e.id, e.name, e.type, e.aliases, e.context,"
            " e.first_seen_at, e.last_seen_at, e.mention_count, e.scope_hash, e.decay_state",
            {"id": entity_id},
        )
        return _entity_row(rows[0]) if rows else None

    def list_entities(
        self,
        *,
        type: str | None = None,
        query: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[EntityRow]:
        where = []
        params: dict[str, Any] = {}
        if type is not None:
            where.append("e.type = $type")
            params["type"] = type
        bind = ""
        if query:
            # kuzu 0.11.3 asserts (KU_UNREACHABLE) on a $parameter inside a list lambda, so
            # the parameter is bound to a variable first.
            bind = "WITH $q AS q "
            where.append(
                "(lower(e.name) CONTAINS q OR any(a IN e.aliases WHERE lower(a) CONTAINS q))"
            )
            params["q"] = query.lower()
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows, _ = self._page(
            f"{bind}MATCH (e:Entity) {clause} RETURN count(e)",
            f"{bind}MATCH (e:Entity) {clause} RETURN e.id, e.name, e.type, e.aliases, e.context,"
            " e.first_seen_at, e.last_seen_at, e.mention_count, e.scope_hash, e.decay_state"
            " ORDER BY e.mention_count DESC, e.id",
            params,
            limit=limit,
            offset=offset,
        )
        return [_entity_row(r) for r in rows]

    def relation_rows(
        self,
        *,
        entity_id: str | None = None,
        predicate: Predicate | None = None,
        include_closed: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[list[Any]]:
        where = []
        params: dict[str, Any] = {}
        if entity_id is not None:
            where.append("(a.id = $entity OR b.id = $entity)")
            params["entity"] = entity_id
        if predicate is not None:
            where.append("r.predicate = $predicate")
            params["predicate"] = predicate.value
        if not include_closed:
            where.append("r.superseded_at IS NULL")
        match = "MATCH (a)-[r:RELATES]->(b) " + (f"WHERE {' AND '.join(where)}" if where else "")
        rows, _ = self._page(
            f"{match} RETURN count(r)",
            f"{match} RETURN coalesce(a.id, a.slug), label(a), r.predicate, coalesce(b.id, b.slug),"
            " label(b), r.confidence, r.source_memory, r.created_at, r.valid_from,"
            " r.superseded_at, r.label"
            " ORDER BY r.created_at DESC, r.source_memory, r.predicate",
            params,
            limit=limit,
            offset=offset,
            convert=_jsonable,
        )
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
        sees it (`check_cypher`), and the query runs in a READ ONLY transaction as a second
        guard. `timeout_ms` overrides the store's query timeout for this query only.

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
        with self._reads.read():
            return self._read_only_query(query, params, limit, timeout_ms)

    def _read_only_query(
        self, query: str, params: dict[str, Any] | None, limit: int, timeout_ms: int | None
    ) -> CypherResult:
        conn = self._reader(params)
        try:
            conn.execute("BEGIN TRANSACTION READ ONLY")
        except RuntimeError as exc:
            raise engine_error(exc, self.path) from exc
        try:
            if timeout_ms is not None:
                conn.set_query_timeout(timeout_ms)
            result = conn.execute(query, params or {})
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

    # -- traversal (recall) --------------------------------------------------------------
    def entity_catalogue(self) -> list[EntityRow]:
        """Every entity with its aliases: recall matches query words against these."""
        rows = self._rows(
            "MATCH (e:Entity) RETURN e.id, e.name, e.type, e.aliases, e.context,"
            " e.first_seen_at, e.last_seen_at, e.mention_count, e.scope_hash, e.decay_state"
        )
        return [_entity_row(r) for r in rows]

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]:
        """(entity id, memory slug, confidence) for memories mentioning each entity, newest
        first, at most `max_fanout` per entity so a hub cannot flood a recall."""
        scopes = tuple(sorted(set(scope_hashes))) if scope_hashes else ()

        def fetch(wanted: list[str]) -> dict[str, list[Any]]:
            scope_clause = "AND m.scope_hash IN $scopes" if scopes else ""
            params: dict[str, Any] = {"ids": wanted}
            if scopes:
                params["scopes"] = list(scopes)
            # One statement for all the entities (a statement costs about a millisecond to
            # prepare, and a kind of entity can lead hundreds); the cap is applied per entity.
            rows = self._rows(
                "MATCH (m:Memory)-[r:MENTIONS]->(e:Entity) WHERE e.id IN $ids"
                f" AND m.decay_state <> 'forgotten' {scope_clause}"
                " RETURN e.id, m.slug, r.confidence, m.created_at",
                params,
            )
            by_entity: dict[str, list[tuple[Any, str, float]]] = {}
            for eid, slug, conf, created_at in rows:
                by_entity.setdefault(eid, []).append((created_at, slug, float(conf or 0.0)))
            capped: dict[str, list[Any]] = {}
            for eid in wanted:
                found = sorted(by_entity.get(eid, ()), key=lambda row: row[1])
                found.sort(key=lambda row: row[0], reverse=True)
                capped[eid] = [(eid, slug, conf) for _, slug, conf in found[: self.max_fanout]]
            return capped

        return self._each_entity(("mentioning", *scopes), entity_ids, fetch)

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]:
        """(from, to, predicate, confidence) over current entity↔entity relations, both
        directions, capped at `max_fanout` per entity."""

        def fetch(wanted: list[str]) -> dict[str, list[Any]]:
            # One statement for all the entities, as in `mentioning`; capped per entity here.
            rows = self._rows(
                "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids"
                " AND r.superseded_at IS NULL"
                " RETURN a.id, b.id, r.predicate, max(r.confidence) AS c",
                {"ids": wanted},
            )
            by_entity: dict[str, list[tuple[str, str, float]]] = {}
            for eid, other, pred, conf in rows:
                by_entity.setdefault(eid, []).append((other, pred, float(conf or 0.0)))
            capped: dict[str, list[Any]] = {}
            for eid in wanted:
                found = sorted(by_entity.get(eid, ()), key=lambda row: (-row[2], row[0], row[1]))
                capped[eid] = [(eid, o, p, c) for o, p, c in found[: self.max_fanout]]
            return capped

        return self._each_entity(("related",), entity_ids, fetch)

    def _each_entity(
        self,
        key: tuple[str, ...],
        entity_ids: Sequence[str],
        fetch: Callable[[list[str]], dict[str, list[Any]]],
    ) -> list[Any]:
        """Each entity's rows in the order asked, from the per-entity cache when no write has
        committed since they were read (`_per_entity`); the rest fetched in one statement.
        A read-only store sees another process's writes, never counted here: it reads anew."""
        wanted = list(dict.fromkeys(entity_ids))
        if not wanted:
            return []
        generation = self._generation
        cached_at, cache = self._per_entity
        if cached_at != generation or len(cache) > _PER_ENTITY_CACHE:
            cache = {}
            self._per_entity = (generation, cache)
        missing = [eid for eid in wanted if (*key, eid) not in cache]
        fresh = fetch(missing) if missing else {}
        # A write that committed while the rows were read may be in them or not: kept only
        # when none did (a cache read before a write is dropped by the write's generation).
        if self._writer is not None and self._generation == generation:
            for eid, rows in fresh.items():
                cache[(*key, eid)] = rows
        out: list[Any] = []
        for eid in wanted:
            out.extend(fresh[eid] if eid in fresh else cache[(*key, eid)])
        return out

    @property
    def generation(self) -> int:
        return self._generation

    def superseded_by(self, slugs: Sequence[str]) -> dict[str, str]:
        """For each of these slugs that a newer memory supersedes: older → newer."""
        if not slugs:
            return {}
        known = self._supersedes_map()
        return {slug: known[slug].newer for slug in slugs if slug in known}

    def supersede_edges(self, slugs: Sequence[str] | None = None) -> dict[str, SupersedeRow]:
        """For each of these slugs (all when None) that a newer memory supersedes: older →
        the active edge (its entity, rule and evidence sentence), for recall to weigh and
        explain it."""
        known = self._supersedes_map()
        if slugs is None:
            return dict(known)
        return {slug: known[slug] for slug in slugs if slug in known}

    def supersedes_map(self) -> dict[str, str]:
        """Every superseded memory → the memory that supersedes it."""
        return {older: row.newer for older, row in self._supersedes_map().items()}

    def _in_supersedes(self, slugs: Sequence[str]) -> bool:
        """Whether a SUPERSEDES edge may touch these memories (true unless the cached supersede
        map is current and names none of them)."""
        generation, known = self._supersedes
        if generation != self._supersede_writes:
            return True
        newer = {row.newer for row in known.values()}
        return any(slug in known or slug in newer for slug in slugs)

    def _supersedes_map(self) -> dict[str, SupersedeRow]:
        """Every active edge, older → its row (cached until a write may change them)."""
        generation, known = self._supersedes
        if generation != self._supersede_writes:
            # Every recall asks this of ~50 candidates; matching them by slug scans the whole
            # Memory table (3 ms at 10k, 15 at 100k), while the edges are few: read them all
            # once per write that may change them.
            generation = self._supersede_writes
            rows = self._rows(
                "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) WHERE r.status = 'active'"
                " RETURN n.slug, o.slug, r.entity_id, r.confidence, r.decided_at,"
                " r.decided_by, r.reason, r.status, r.judge ORDER BY n.created_at, n.slug"
            )
            keys = _EDGE_KEYS  # the RETURN order above, by name: a field added later stays unset
            edges = [SupersedeRow.model_validate(dict(zip(keys, r, strict=True))) for r in rows]
            known = {row.older: row for row in edges}
            self._supersedes = (generation, known)
        return known

    def supersedes_chain(self, slug: str) -> list[SupersedeRow]:
        """Every SUPERSEDES edge reachable from this memory, in either direction."""
        rows = self._rows(
            "MATCH (a:Memory {slug: $slug})-[:SUPERSEDES* 0..20]-(x:Memory)"
            " WITH DISTINCT x MATCH (n:Memory)-[r:SUPERSEDES]->(x)"
            " RETURN DISTINCT n.slug, x.slug, r.entity_id, r.confidence, r.decided_at,"
            " r.decided_by, r.reason, r.status, r.judge, r.rules ORDER BY r.decided_at, n.slug",
            {"slug": slug},
        )
        keys = list(SupersedeRow.model_fields)  # the RETURN order above
        return [SupersedeRow.model_validate(dict(zip(keys, r, strict=True))) for r in rows]

    def neighbourhood(self, entity_id: str, *, depth: int = 1) -> CypherResult:
        """Entities within `depth` hops over current RELATES edges, fan-out capped per hop.

        Each row is an edge as it is stored, `from -[predicate]-> to`, whichever end the walk
        reached it from: `React superseded_by Solid` is not `Solid superseded_by React`."""
        frontier = [entity_id]
        seen = {entity_id}
        edges: list[list[Any]] = []
        seen_edges: set[tuple[str, str, str]] = set()
        for _ in range(max(1, min(depth, 3))):
            next_frontier: list[str] = []
            for src, dst, pred, conf, other in self._directed_relations(frontier):
                if (src, pred, dst) not in seen_edges:
                    seen_edges.add((src, pred, dst))
                    edges.append([src, pred, dst, conf])
                if other not in seen:
                    seen.add(other)
                    next_frontier.append(other)
            frontier = next_frontier
            if not frontier:
                break
        return CypherResult(columns=["from", "predicate", "to", "confidence"], rows=edges)

    def _directed_relations(
        self, entity_ids: Sequence[str]
    ) -> list[tuple[str, str, str, float, str]]:
        """(from, to, predicate, confidence, the far end) of the current relations touching
        these entities, in their stored direction; capped at `max_fanout` per entity as in
        `related_entities`."""
        wanted = list(dict.fromkeys(entity_ids))
        by_entity: dict[str, list[tuple[str, str, str, float, str]]] = {}
        # Two statements, each starting from the entities' primary key (an OR over both ends
        # would scan every relation).
        for outgoing in (True, False):
            arrow = "-[r:RELATES]->" if outgoing else "<-[r:RELATES]-"
            for eid, other, pred, conf in self._rows(
                f"MATCH (a:Entity){arrow}(b:Entity) WHERE a.id IN $ids"
                " AND r.superseded_at IS NULL"
                " RETURN a.id, b.id, r.predicate, max(r.confidence) AS c",
                {"ids": wanted},
            ):
                if outgoing or other != eid:  # a self-loop is found both ways: keep one
                    src, dst = (eid, other) if outgoing else (other, eid)
                    by_entity.setdefault(eid, []).append(
                        (src, dst, pred, float(conf or 0.0), other)
                    )
        out: list[tuple[str, str, str, float, str]] = []
        for eid in wanted:
            found = sorted(by_entity.get(eid, ()), key=lambda e: (-e[3], e[4], e[2], e[0]))
            out.extend(found[: self.max_fanout])
        return out

    def add_entity_aliases(self, entity_id: str, aliases: Sequence[str]) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MATCH (e:Entity {id: $id}) SET e.aliases = list_distinct("
                "list_concat(coalesce(e.aliases, CAST([] AS STRING[])), CAST($a AS STRING[])))",
                {"id": entity_id, "a": list(aliases)},
            )

    def merge_entities(self, keep: str, drop: str) -> None:
        """Move every edge of `drop` onto `keep`, keep its name as an alias, delete it."""
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MATCH (m:Memory)-[r:MENTIONS]->(:Entity {id: $drop}), (k:Entity {id: $keep})"
                " CREATE (m)-[:MENTIONS {confidence: r.confidence}]->(k)",
                {"drop": drop, "keep": keep},
            )
            props = (
                "{predicate: r.predicate, confidence: r.confidence, source_memory: r.source_memory,"
                " created_at: r.created_at, valid_from: r.valid_from,"
                " superseded_at: r.superseded_at, label: r.label}"
            )
            for other in ("Entity", "Memory"):
                # a relation between the two merged entities would become a self-loop: dropped
                not_keep = "WHERE o.id <> $keep" if other == "Entity" else ""
                conn.execute(
                    f"MATCH (d:Entity {{id: $drop}})-[r:RELATES]->(o:{other}),"
                    f" (k:Entity {{id: $keep}}) {not_keep} CREATE (k)-[:RELATES {props}]->(o)",
                    {"drop": drop, "keep": keep},
                )
                conn.execute(
                    f"MATCH (o:{other})-[r:RELATES]->(d:Entity {{id: $drop}}),"
                    f" (k:Entity {{id: $keep}}) {not_keep} CREATE (o)-[:RELATES {props}]->(k)",
                    {"drop": drop, "keep": keep},
                )
            conn.execute(
                "MATCH (d:Entity {id: $drop}), (k:Entity {id: $keep}) SET k.aliases ="
                " list_distinct(list_concat(coalesce(k.aliases, CAST([] AS STRING[])),"
                " list_concat([d.name], coalesce(d.aliases, CAST([] AS STRING[])))))",
                {"drop": drop, "keep": keep},
            )
            conn.execute("MATCH (d:Entity {id: $drop}) DETACH DELETE d", {"drop": drop})
            self._refresh_entity_stats(conn, [keep])

    def delete_entity(self, entity_id: str) -> None:
        """Remove an entity node and every edge still touching it (the service has already
        rewritten the memories that named it, so nothing brings it back)."""
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute("MATCH (e:Entity {id: $id}) DETACH DELETE e", {"id": entity_id})

    def record_recalls(self, recalls: Mapping[str, tuple[int, datetime]]) -> dict[str, int]:
        """Add `n` recalls at `at` to each memory (slug → (n, at)) and bring it back to
        alive; returns each one's new count (absent slugs are left out).

        One statement for the whole batch: one statement per memory would hold the GIL to
        prepare each (the daemon flushes hundreds at once). The WITH: see the UNWIND note at the
        top of this module.
        """
        if not recalls:
            return {}
        rows = [{"slug": slug, "n": n, "at": at} for slug, (n, at) in recalls.items()]
        with self._transaction(keeps_supersedes=True) as conn:
            result = conn.execute(
                "UNWIND $rows AS r"
                " WITH r.slug AS slug, CAST(r.n AS INT64) AS n, CAST(r.at AS TIMESTAMP) AS at"
                " MATCH (m:Memory {slug: slug})"
                " SET m.recall_count = m.recall_count + n,"
                " m.last_recalled_at = at, m.decay_state = 'alive'"
                " RETURN m.slug, m.recall_count",
                {"rows": rows},
            )
            counted: dict[str, int] = {}
            while result.has_next():
                slug, count = result.get_next()
                counted[str(slug)] = int(count)
        return counted

    def snapshot(self) -> dict[str, list[Any]]:
        memories = self._rows(
            f"MATCH (m:Memory) RETURN {_prefixed('m', _MEMORY_COLUMNS)}, m.dura, m.promoted_from"
            " ORDER BY m.slug"
        )
        entities = self._rows(
            "MATCH (e:Entity) RETURN e.id, e.name, e.type, e.aliases, e.context,"
            " e.first_seen_at, e.last_seen_at, e.mention_count, e.scope_hash ORDER BY e.id"
        )
        mentions = self._rows(
            "MATCH (m:Memory)-[r:MENTIONS]->(e:Entity) RETURN m.slug, e.id, r.confidence"
            " ORDER BY m.slug, e.id"
        )
        relates = self._rows(
            "MATCH (a)-[r:RELATES]->(b) RETURN label(a), coalesce(a.slug, a.id), r.predicate,"
            " label(b), coalesce(b.slug, b.id), r.confidence, r.source_memory, r.valid_from,"
            " r.superseded_at, r.label ORDER BY r.source_memory, coalesce(a.slug, a.id),"
            " r.predicate, coalesce(b.slug, b.id), r.label"
        )
        supersedes = self._rows(
            "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) RETURN n.slug, o.slug, r.decided_by,"
            " r.confidence, r.status, r.rules ORDER BY n.slug, o.slug"
        )
        promoted = self._rows(
            "MATCH (n:Memory)-[:PROMOTED_FROM]->(o:Memory) RETURN n.slug, o.slug ORDER BY n.slug"
        )
        scopes = self._rows("MATCH (s:Scope) RETURN s.hash, s.path, s.sensitive ORDER BY s.hash")
        return {
            "memories": memories,
            "entities": entities,
            "mentions": mentions,
            "relates": relates,
            "supersedes": supersedes,
            "promoted_from": promoted,
            "scopes": scopes,
        }


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


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _entity_row(row: list[Any]) -> EntityRow:
    keys = [
        "id",
        "name",
        "type",
        "aliases",
        "context",
        "first_seen_at",
        "last_seen_at",
        "mention_count",
        "scope_hash",
        "decay_state",
    ]
    data = dict(zip(keys, row, strict=True))
    data["aliases"] = data["aliases"] or []
    data["mention_count"] = data["mention_count"] or 0
    data["decay_state"] = data["decay_state"] or "fresh"
    return EntityRow.model_validate(data)


def _jsonable(value: Any) -> Any:
    """Engine values (nodes, rels, timestamps) as JSON-friendly Python values."""
    if isinstance(value, datetime):
        return _utc(value).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Decimal):  # INT128, e.g. sum() over INT64: a number, not a string
        return int(value) if value == value.to_integral_value() else float(value)
    return json.loads(json.dumps(value, default=str))


def release_free_memory() -> None:
    """Hand the engine's freed heap back to the OS (glibc keeps it otherwise), so a process
    that closes one database and opens another (reindex) does not hold both at its peak."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            logger.debug("malloc_trim is not available")
