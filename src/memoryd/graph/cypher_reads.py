"""The engine-neutral reads of the graph store: lookups, pages, the traversals recall makes,
the supersede map and the caches a write empties. `cypher_store.CypherGraphStore` adds the
writes; an engine's store subclasses it and supplies the plumbing declared here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from memoryd.graph.rows import EDGE_KEYS as _EDGE_KEYS
from memoryd.graph.rows import MEMORY_COLUMNS as _MEMORY_COLUMNS
from memoryd.graph.rows import PER_ENTITY_CACHE as _PER_ENTITY_CACHE
from memoryd.graph.rows import SUMMARY_COLUMNS as _SUMMARY_COLUMNS
from memoryd.graph.rows import entity_row as _entity_row
from memoryd.graph.rows import jsonable as _jsonable
from memoryd.graph.rows import memory_filter
from memoryd.graph.rows import prefixed as _prefixed
from memoryd.graph.rows import summary as _summary
from memoryd.graph.store import CypherResult, EntityRow, GraphCopy, MemoryRow, SupersedeRow
from memoryd.models import DecayState, MemorySummary, MemoryType, Predicate

KEYED_ROWS = 4
"""A statement over at most this many slugs or rows runs once per row with its key as a
parameter, which Kuzu answers from the primary-key index; a list it UNWINDs is joined to a
scan of the whole table (kuzu 0.11.3; measured: bench/RESULTS.md, 2026-12-04 s-record)."""


def _each(conn: Any, unwound: str, keyed: str, rows: Sequence[Any], name: str = "rows") -> None:
    """Run `unwound` over `rows` as `$name`, or, for a small batch, `keyed` once per row
    (a row's fields as its parameters; a bare value as `$slug`)."""
    if len(rows) > KEYED_ROWS:
        conn.execute(unwound, {name: list(rows)})
        return
    for row in rows:
        conn.execute(keyed, row if isinstance(row, Mapping) else {"slug": row})


class CypherReads(ABC):
    """The reads every Cypher engine runs alike, over the plumbing each engine supplies."""

    LABEL: ClassVar[str]
    """The dialect's expression for a node's label, `{}` standing for the node."""
    FIRST: ClassVar[int]
    """The index of a list's first item (and a string's first character) in the dialect."""

    def __init__(self, *, max_fanout: int, read_only: bool) -> None:
        self.max_fanout = max_fanout
        self.read_only = read_only
        self._closed = False
        self._generation = 0
        """Counts committed write transactions: caches of graph facts are keyed by it."""
        self.co_mentions = False
        """The graph keeps its CO_MENTIONS counts (the migration `store.CO_MENTIONS_FILL`); a
        graph opened read-only at an older schema does not, and its co-mentions are read
        from the memories."""
        self._supersedes: tuple[int, dict[str, SupersedeRow]] = (-1, {})
        self._supersede_writes = 0
        self._per_entity: tuple[int, dict[tuple[str, ...], list[Any]]] = (-1, {})
        self._recall_writes = 0
        """Counts committed writes that may change what recall keeps of the graph (`mentioning`,
        `related_entities`, the supersede edges): every write but recall counts that bring
        no forgotten memory back (`record_recalls`, every few seconds while recalls are
        counted). `_per_entity` and the recall readers' kept reads are keyed by it."""
        """Counts committed writes that may have changed the SUPERSEDES edges (or the order of
        their newer ends): the supersede map is keyed by it, so the writes that cannot (recall
        counts, scopes, entities, a memory no edge touches) leave it cached."""
        """(generation, {(statement, entity id, scopes…): its capped rows}) for `mentioning`
        and `related_entities`: a recall asks them of the same few entities over and over
        (a conversation's speakers), a round trip each. Any write empties it."""

    # -- plumbing each engine supplies ------------------------------------------------------
    @abstractmethod
    def close(self) -> None:
        """Close the store (a second close does nothing)."""

    @abstractmethod
    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """memoryd's own read-only Cypher (Kuzu's dialect)."""

    @abstractmethod
    def copy_to(self, target: Path) -> GraphCopy:
        """A consistent copy of the committed graph in the new directory `target`."""

    @abstractmethod
    def _rows(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        times: Sequence[int] | None = None,
    ) -> list[list[Any]]:
        """The rows of a read query, times as UTC datetimes (only in columns `times`, if given)."""

    @abstractmethod
    def _page(
        self,
        count_query: str,
        query: str,
        params: dict[str, Any],
        *,
        limit: int,
        offset: int,
        convert: Callable[[Any], Any] = ...,
    ) -> tuple[list[list[Any]], int]:
        """One page of an `ORDER BY` query and the number of rows it pages over."""

    @abstractmethod
    def _transaction(
        self, *, keeps_supersedes: bool = False, keeps_recall_reads: bool = False
    ) -> AbstractContextManager[Any]:
        """One write transaction: the statements run on what it yields commit together.
        `keeps_recall_reads`: it changes nothing recall keeps (`_recall_writes`)."""

    def _moved(self, *, keeps_supersedes: bool, keeps_recall_reads: bool) -> None:
        """Count a write transaction that ended (committed, or failed and maybe partly
        applied: then nothing is kept) in the generations the caches are keyed by."""
        self._generation += 1
        if not keeps_supersedes:
            self._supersede_writes += 1
        if not keeps_recall_reads:
            self._recall_writes += 1

    @abstractmethod
    def _collect(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        """The rows of a read inside a write transaction."""

    @abstractmethod
    def _returning(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        """The rows a write statement returns: filled by the time its transaction commits
        (an engine that queues a transaction's statements fills it then)."""

    @abstractmethod
    def _concat(self, first: str, second: str) -> str:
        """The dialect's expression for two lists joined."""

    @abstractmethod
    def _distinct(self, items: str) -> str:
        """The dialect's expression for a list without its repeats, first ones kept."""

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

    # -- reads ----------------------------------------------------------------------------
    def get_memory(self, slug: str) -> MemoryRow | None:
        return self.memory_rows([slug]).get(slug)

    def memory_rows(self, slugs: Sequence[str]) -> dict[str, MemoryRow]:
        """Several memories in one query, keyed by slug (missing ones are absent)."""
        if not slugs:
            return {}
        if len(slugs) <= KEYED_ROWS:
            # A few slugs (every `get_memory`) one by one by key: kuzu 0.11.3 plans the
            # UNWIND form as a scan of the whole table.
            query = f"MATCH (m:Memory {{slug: $slug}}) RETURN {_prefixed('m', _MEMORY_COLUMNS)}"
            rows = [
                row for slug in dict.fromkeys(slugs) for row in self._rows(query, {"slug": slug})
            ]
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

    def newest_mentioning(self, entity_id: str, limit: int) -> list[MemorySummary]:
        """The `limit` newest memories (not forgotten) that mention an entity, newest first,
        then by slug: the memories `mentioning` gives for one entity, summed up, in one read
        sorted in the engine (a hub's thousands of memories never reach Python, and no UNWIND
        of their slugs scans the Memory table: bench/RESULTS.md, issue 29 d-page4)."""
        rows = self._rows(
            "MATCH (m:Memory)-[:MENTIONS]->(e:Entity {id: $id})"
            f" WHERE m.decay_state <> 'forgotten' RETURN {_prefixed('m', _SUMMARY_COLUMNS)}"
            f" ORDER BY m.created_at DESC, m.slug LIMIT {int(limit)}",
            {"id": entity_id},
        )
        return [_summary(r) for r in rows]

    def list_memories(
        self,
        *,
        scope_hash: str | None = None,
        type: MemoryType | None = None,
        decay_state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]:
        clause, params = memory_filter(scope_hash, type, decay_state)
        rows, _ = self._page(
            f"MATCH (m:Memory) {clause} RETURN count(m)",
            f"MATCH (m:Memory) {clause} RETURN {_prefixed('m', _SUMMARY_COLUMNS)}"
            " ORDER BY m.created_at DESC, m.slug",
            params,
            limit=limit,
            offset=offset,
        )
        return [_summary(r) for r in rows]

    def count_memories(
        self,
        *,
        scope_hash: str | None = None,
        type: MemoryType | None = None,
        decay_state: DecayState | None = None,
    ) -> int:
        clause, params = memory_filter(scope_hash, type, decay_state)
        return int(self._rows(f"MATCH (m:Memory) {clause} RETURN count(m)", params)[0][0])

    def memory_slugs(self) -> set[str]:
        return {row[0] for row in self._rows("MATCH (m:Memory) RETURN m.slug")}

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
        generation = self._recall_writes
        cached_at, cache = self._per_entity
        if cached_at != generation or len(cache) > _PER_ENTITY_CACHE:
            cache = {}
            self._per_entity = (generation, cache)
        missing = [eid for eid in wanted if (*key, eid) not in cache]
        fresh = fetch(missing) if missing else {}
        # A write that committed while the rows were read may be in them or not: kept only
        # when none did (a cache read before a write is dropped by the write's generation).
        if not self.read_only and self._recall_writes == generation:
            for eid, rows in fresh.items():
                cache[(*key, eid)] = rows
        out: list[Any] = []
        for eid in wanted:
            out.extend(fresh[eid] if eid in fresh else cache[(*key, eid)])
        return out

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def recall_generation(self) -> int:
        return self._recall_writes

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
            # Memory table (measured: bench/RESULTS.md), while the edges are few: read them all
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
        la, lb = self.LABEL.format("a"), self.LABEL.format("b")
        match = "MATCH (a)-[r:RELATES]->(b) " + (f"WHERE {' AND '.join(where)}" if where else "")
        rows, _ = self._page(
            f"{match} RETURN count(r)",
            f"{match} RETURN coalesce(a.id, a.slug), {la}, r.predicate, coalesce(b.id, b.slug),"
            f" {lb}, r.confidence, r.source_memory, r.created_at, r.valid_from,"
            " r.superseded_at, r.label"
            " ORDER BY r.created_at DESC, r.source_memory, r.predicate",
            params,
            limit=limit,
            offset=offset,
            convert=_jsonable,
        )
        return rows

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
        la, lb = self.LABEL.format("a"), self.LABEL.format("b")
        relates = self._rows(
            f"MATCH (a)-[r:RELATES]->(b) RETURN {la}, coalesce(a.slug, a.id), r.predicate,"
            f" {lb}, coalesce(b.slug, b.id), r.confidence, r.source_memory, r.valid_from,"
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

    def schema_version(self) -> int:
        found = self._rows("MATCH (m:Meta {key: 'schema_version'}) RETURN m.value")
        return int(found[0][0]) if found else 0

    def memory_paths_outside(self, prefix: str) -> list[str]:
        return [
            row[0]
            for row in self._rows(
                "MATCH (m:Memory) WHERE m.path <> '' AND NOT m.path STARTS WITH $prefix"
                " RETURN m.path",
                {"prefix": prefix},
            )
        ]

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
                "(toLower(e.name) CONTAINS q OR any(a IN e.aliases WHERE toLower(a) CONTAINS q))"
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
