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

Over 600 lines: the one home of kuzu (ruff enforces it): connections, transactions,
checkpoints, migrations and the statements Kuzu's dialect writes its own way. The
engine-neutral half (reads, traversals, the supersede map) is `cypher_store`; the schema,
the checkpoint gate and error translation are in `kuzu_support`.
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
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from memoryd.errors import InvalidInput, PolicyDenied, StorageError
from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.kuzu_support import (
    _MEMORY_COPY,
    _SLUGS_STORED,
    COPY_ROWS,
    MIGRATIONS,
    SCHEMA_VERSION,
    CheckpointGate,
    _copy,
    _copy_private,
    _values_in,
    engine_error,
    query_error,
    release_free_memory,
)
from memoryd.graph.rows import entity_row as _entity_row
from memoryd.graph.rows import graph_rows
from memoryd.graph.rows import jsonable as _jsonable
from memoryd.graph.rows import utc as _utc
from memoryd.graph.store import (
    CypherResult,
    EntityRow,
    GraphCopy,
    check_cypher,
    check_page,
    cypher_code,
    supersede_edges,
)
from memoryd.models import DecayState, Memory
from memoryd.private import make_private_dir

__all__ = [
    "COPY_ROWS",
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


class KuzuGraphStore(CypherGraphStore):
    """A Kuzu (or LadybugDB) database in `<home>/graph/`."""

    LABEL = "label({})"

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

    def upsert_memories(
        self, memories: Sequence[Memory], *, link_memories: bool = True, new: bool = False
    ) -> None:
        """Write memories and their edges. `new=True` (fresh slugs, e.g. bulk ingest or a
        rebuild) skips looking for old edges to replace, which is a scan per batch."""
        if not memories:
            return
        plan = graph_rows(memories)
        memories, mems, slugs = plan.memories, plan.mems, plan.slugs
        mentions, entity_rows, relates = plan.mentions, plan.entity_rows, plan.relates
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

    def upsert_scope(self, scope_hash: str, path: str, sensitive: bool, aliases: list[str]) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MERGE (s:Scope {hash: $hash}) SET s.path = $path, s.sensitive = $sensitive,"
                " s.aliases = CAST($aliases AS STRING[])",
                {"hash": scope_hash, "path": path, "sensitive": sensitive, "aliases": aliases},
            )

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
