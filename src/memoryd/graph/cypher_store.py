"""The graph store's engine-neutral half: every store operation whose Cypher all engines
share. The reads are `cypher_reads.CypherReads`; this module adds the writes.

An engine's store (`kuzu_store.KuzuGraphStore`, `falkordb_store.FalkorGraphStore`) subclasses
`CypherGraphStore` and supplies the plumbing (`_rows`, `_page`, `_transaction`, `_collect`,
`_returning`) and its dialect (`LABEL`, `FIRST`, `_concat`, `_distinct`). memoryd writes its
statements in Kuzu's dialect; an engine that differs translates them (`falkordb_dialect`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.errors import StorageError
from memoryd.graph.co_mentions import CoMentionWrites, counts_pairs, pairs_of
from memoryd.graph.cypher_reads import KEYED_ROWS, CypherReads, _each
from memoryd.graph.rows import ONE_STATEMENT_MENTIONS, graph_rows, one_memory_mentions, utc
from memoryd.graph.store import supersede_edges
from memoryd.models import DecayState, Memory
from memoryd.private import swap_dir

logger = logging.getLogger(__name__)


def _mention_deltas(
    removed: Mapping[str, list[tuple[Any, Any]]], added: Mapping[str, list[tuple[Any, Any]]]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """How a write moves the stats of the entities whose MENTIONS it deletes (`removed`) and
    creates (`added`), each edge as the (created_at, scope hash) of its memory, so that they
    stay equal to a recount (`CypherGraphStore._refresh_entity_stats`): the entities that
    only gain edges, with what they gain (count, earliest, latest, the one scope of them all
    or none), and those to recount, which lost an edge (their earliest or their scopes may
    have gone with it). An entity whose edges come back the same (a rewrite of a memory) is
    in neither; one created with no mention keeps what it is created with, a recount of none.
    So a record reads no mention but its own, where a recount reads every mention of a hub
    entity on each write."""
    counted: dict[str, dict[str, Any]] = {}
    recount: list[str] = []
    for eid in sorted(set(removed) | set(added)):
        gone, came = removed.get(eid, []), added.get(eid, [])
        if gone:
            if Counter(gone) != Counter(came):
                recount.append(eid)
            continue
        times = [t for t, _ in came]
        scopes = {s for _, s in came}
        counted[eid] = {
            "n": len(came),
            "first": min(times),
            "last": max(times),
            "scope": next(iter(scopes)) if len(scopes) == 1 else None,
        }
    return counted, recount


class CypherGraphStore(CypherReads, CoMentionWrites):
    """Every store operation; the writes here, the reads in `CypherReads`, the co-mention
    counts' upkeep in `CoMentionWrites`."""

    directory: Path

    def _migrate_from(self, current: int, migrations: Sequence[Sequence[str]], where: str) -> None:
        """Run the engine's migrations past schema `current` (a migration is a list of
        statements, its version its 1-based position), each in one transaction that also
        records the version it reaches; `where` names the graph in messages."""
        if current > len(migrations):
            raise StorageError(
                f"the graph {where} is at schema {current} but this memoryd knows "
                f"{len(migrations)}",
                hint="upgrade memoryd, or run `memoryd reindex` to rebuild the graph",
            )
        for version in range(current + 1, len(migrations) + 1):
            with self._transaction() as conn:
                for statement in migrations[version - 1]:
                    conn.execute(statement)
                conn.execute(
                    "MERGE (m:Meta {key: 'schema_version'}) SET m.value = $v", {"v": str(version)}
                )
            logger.info("graph %s migrated to schema %d", where, version)

    def replace_with(self, rebuilt: Path) -> None:
        """An embedded engine's graph is its directory: the directories swap."""
        swap_dir(rebuilt, self.directory)

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
                for row in self._by_slug(
                    conn, "MATCH (:Memory {slug: $slug})-[:MENTIONS]->(e:Entity) RETURN e.id", slugs
                )
            ]
            self._drop_prints(conn, slugs)
            if self.co_mentions:
                self._move_co_mentions(conn, self._co_pairs(conn, slugs, counting=True))
            _each(conn, _DROP_SOURCED, _DROP_SOURCED_KEYED, slugs, "slugs")
            edged = [
                row[0]
                for row in self._by_slug(
                    conn, "MATCH (m:Memory {slug: $slug})-[]-() RETURN m.slug", slugs
                )
            ]
            _each(
                conn,
                "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) DETACH DELETE m",
                "MATCH (m:Memory {slug: $slug}) DETACH DELETE m",
                edged,
                "slugs",
            )
            bare = sorted(set(slugs).difference(edged))
            _each(
                conn,
                "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) DELETE m",
                "MATCH (m:Memory {slug: $slug}) DELETE m",
                bare,
                "slugs",
            )
            self._refresh_entity_stats(conn, touched)

    def _by_slug(self, conn: Any, keyed: str, slugs: Sequence[str]) -> list[list[Any]]:
        """The distinct rows of `keyed` (a read about one memory, `$slug`) over `slugs`: once
        per slug for a small batch (`KEYED_ROWS`), else in one statement that UNWINDs them."""
        if len(slugs) > KEYED_ROWS:
            unwound = keyed.replace("$slug", "s").replace(" RETURN ", " RETURN DISTINCT ", 1)
            return self._collect(conn, "UNWIND $slugs AS s " + unwound, {"slugs": list(slugs)})
        rows = (row for slug in slugs for row in self._collect(conn, keyed, {"slug": slug}))
        return list({tuple(row): row for row in rows}.values())

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
            moving = self._states_moving(conn, {s: v.value for s, v in states.items()})
            for value, slugs in sorted(by_state.items()):
                conn.execute(
                    "UNWIND $slugs AS s MATCH (m:Memory {slug: s}) SET m.decay_state = $state",
                    {"slugs": slugs, "state": value},
                )
            self._move_co_mentions(conn, moving)

    def link_memories(self, memories: Sequence[Memory]) -> None:
        if memories:
            with self._transaction() as conn:
                self._link(conn, memories)

    def delete_entity(self, entity_id: str) -> None:
        """Remove an entity node and every edge still touching it (the service has already
        rewritten the memories that named it, so nothing brings it back)."""
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute("MATCH (e:Entity {id: $id}) DETACH DELETE e", {"id": entity_id})

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
            # What the write replaces, read before it writes (a FalkorDB transaction's reads
            # see the graph as committed before it, kuzu's see its own writes).
            removed: dict[str, list[tuple[Any, Any]]] = {}
            prints: list[tuple[str, str]] = []
            pairs: Counter[tuple[str, str]] = Counter()
            if not new:
                removed = self._mentions_of(conn, slugs, pairs)
                prints = self._prints_of(conn, slugs)
            added: dict[str, list[tuple[Any, Any]]] = {}
            mentions_by = [slug for slug, _ in mentions]
            when = {m["slug"]: (m["created_at"], m["scope_hash"]) for m in mems}
            for slug, eid in mentions:
                added.setdefault(eid, []).append(when[slug])
            if not new:
                _each(
                    conn,
                    "UNWIND $slugs AS s MATCH (:Memory {slug: s})-[r:MENTIONS]->() DELETE r",
                    "MATCH (:Memory {slug: $slug})-[r:MENTIONS]->() DELETE r",
                    slugs,
                    "slugs",
                )
                _each(conn, _DROP_SOURCED, _DROP_SOURCED_KEYED, slugs, "slugs")
            self._write_memories(conn, mems, new=new)
            counted, recount = _mention_deltas(removed, added)
            _each(
                conn,
                "UNWIND $rows AS r " + _ENTITY_NEW.format(p="r."),
                _ENTITY_NEW.format(p="$"),
                [row for eid, row in entity_rows.items() if eid not in counted],
            )
            _each(
                conn,
                "UNWIND $rows AS r WITH r.id AS id, r.name AS name, r.type AS type,"
                " CAST(r.n AS INT64) AS n, CAST(r.first AS TIMESTAMP) AS f,"
                " CAST(r.last AS TIMESTAMP) AS l, CAST(r.scope AS STRING) AS s"
                + _ENTITY_COUNTED.format(
                    id="id", name="name", type="type", n="n", f="f", l="l", s="s"
                ),
                _ENTITY_COUNTED.format(
                    id="$id",
                    name="$name",
                    type="$type",
                    n="CAST($n AS INT64)",
                    f="CAST($first AS TIMESTAMP)",
                    l="CAST($last AS TIMESTAMP)",
                    s="CAST($scope AS STRING)",
                ),
                [{**entity_rows[eid], **counts} for eid, counts in sorted(counted.items())],
            )
            if 1 < len(mentions) <= ONE_STATEMENT_MENTIONS and len(set(mentions_by)) == 1:
                conn.execute(*one_memory_mentions(mentions))
            elif mentions:
                # Not by COPY: an entity's mention count, read back from the edges in this
                # transaction, came out wrong after a COPY of them (kuzu 0.11.3; the demo
                # vault's `pandas` counted 4 of its 2 edges, `SQL` 0 of 1).
                _each(
                    conn,
                    "UNWIND $rows AS r"
                    " WITH r.slug AS slug, r.id AS id, CAST(r.confidence AS DOUBLE) AS confidence"
                    " MATCH (m:Memory {slug: slug}) WITH m, id, confidence"
                    " MATCH (e:Entity {id: id})"
                    " CREATE (m)-[:MENTIONS {confidence: confidence}]->(e)",
                    "MATCH (m:Memory {slug: $slug}) WITH m MATCH (e:Entity {id: $id})"
                    " CREATE (m)-[:MENTIONS {confidence: CAST($confidence AS DOUBLE)}]->(e)",
                    [{"slug": s, "id": e, "confidence": c} for (s, e), c in mentions.items()],
                )
            for (s_kind, o_kind), rows in relates.items():
                s_label = "Entity" if s_kind == "entity" else "Memory"
                o_label = "Entity" if o_kind == "entity" else "Memory"
                s_key = "id" if s_kind == "entity" else "slug"
                o_key = "id" if o_kind == "entity" else "slug"
                _each(
                    conn,
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
                    f"MATCH (a:{s_label} {{{s_key}: $s}}) WITH a"
                    f" MATCH (b:{o_label} {{{o_key}: $o}})" + _RELATES_KEYED,
                    rows,
                )
            if self.co_mentions:
                named: dict[str, list[str]] = {}
                for slug, eid in mentions:
                    named.setdefault(slug, []).append(eid)
                pairs.subtract(
                    pair
                    for m in mems
                    if counts_pairs(m["decay_state"])
                    for pair in pairs_of(named.get(m["slug"], ()))
                )
                self._move_co_mentions(conn, pairs)
            if link_memories and self._link(conn, memories, new=new):
                self._supersede_writes += 1
            self._count_prints(conn, prints, [(m["scope_hash"], m["fingerprint"]) for m in mems])
            self._refresh_entity_stats(conn, recount)

    def _write_memories(self, conn: Any, mems: list[dict[str, Any]], *, new: bool) -> None:
        """Write memory nodes: created when `new`, else merged by slug."""
        query = _MEMORY_NEW if new else "MERGE (m:Memory {{slug: {p}slug}}) " + _MEMORY_SET
        _each(conn, "UNWIND $rows AS r " + query.format(p="r."), query.format(p="$"), mems)

    def _link(self, conn: Any, memories: Sequence[Memory], *, new: bool = False) -> bool:
        """Rewrite the memories' SUPERSEDES and PROMOTED_FROM edges (`new`: memories just
        created, with no edge to remove); whether it wrote any SUPERSEDES edge."""
        slugs = [m.meta.slug for m in memories]
        if not new:
            for rel in ("SUPERSEDES", "PROMOTED_FROM"):
                _each(
                    conn,
                    f"UNWIND $slugs AS s MATCH (:Memory {{slug: s}})-[r:{rel}]->() DELETE r",
                    f"MATCH (:Memory {{slug: $slug}})-[r:{rel}]->() DELETE r",
                    slugs,
                    "slugs",
                )
        supersedes = [edge for m in memories for edge in supersede_edges(m)]
        if supersedes:
            _each(
                conn,
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
                "MATCH (n:Memory {slug: $newer}) WITH n MATCH (o:Memory {slug: $older})"
                " CREATE (n)-[:SUPERSEDES {confidence: $confidence,"
                " decided_at: CAST($at AS TIMESTAMP), decided_by: $decided_by, status: $status,"
                " judge: $judge, reason: $reason, entity_id: $entity_id,"
                " rules: CAST($rules AS INT64)}]->(o)",
                supersedes,
            )
        promoted = [
            {"slug": m.meta.slug, "source": m.meta.promoted_from, "at": m.meta.created_at}
            for m in memories
            if m.meta.promoted_from
        ]
        _each(
            conn,
            "UNWIND $rows AS r"
            " WITH r.slug AS slug, r.source AS source, CAST(r.at AS TIMESTAMP) AS at"
            " MATCH (n:Memory {slug: slug}) WITH n, source, at MATCH (o:Memory {slug: source})"
            " CREATE (n)-[:PROMOTED_FROM {promoted_at: at}]->(o)",
            "MATCH (n:Memory {slug: $slug}) WITH n MATCH (o:Memory {slug: $source})"
            " CREATE (n)-[:PROMOTED_FROM {promoted_at: CAST($at AS TIMESTAMP)}]->(o)",
            promoted,
        )
        return bool(supersedes)

    def _refresh_entity_stats(self, conn: Any, entity_ids: Sequence[str]) -> None:
        """mention_count, first/last seen and the home scope (the one scope that mentions it, or
        none when several do) derive from MENTIONS, so reindex reproduces them: recounted
        here from every mention of each entity: for those a write, delete or merge took
        mentions from (one that only gains mentions is kept by `_mention_deltas`)."""
        if not entity_ids:
            return
        recount = _RECOUNT.format(first=self.FIRST)
        if len(entity_ids) > KEYED_ROWS:
            conn.execute(
                "UNWIND $ids AS i MATCH (e:Entity {id: i})" + recount, {"ids": list(entity_ids)}
            )
            return
        for eid in entity_ids:
            conn.execute("MATCH (e:Entity {id: $id})" + recount, {"id": eid})

    def _mentions_of(
        self, conn: Any, slugs: Sequence[str], pairs: Counter[tuple[str, str]]
    ) -> dict[str, list[tuple[Any, Any]]]:
        """Entity id -> (created_at, scope hash) of the memory, once per MENTIONS edge of
        these memories (an entity merged into another may hold two edges from one); and
        into `pairs`, one for each pair of entities a memory that counts names (what its
        rewrite takes from CO_MENTIONS before it adds its new pairs back)."""
        out: dict[str, list[tuple[Any, Any]]] = {}
        wanted = list(dict.fromkeys(slugs))
        read = (
            "-[:MENTIONS]->(e:Entity)"
            " RETURN e.id, m.created_at, m.scope_hash, m.slug, m.decay_state"
        )
        if len(wanted) > KEYED_ROWS:
            rows = self._collect(
                conn, "UNWIND $slugs AS s MATCH (m:Memory {slug: s})" + read, {"slugs": wanted}
            )
        else:
            rows = [
                row
                for slug in wanted
                for row in self._collect(
                    conn, "MATCH (m:Memory {slug: $slug})" + read, {"slug": slug}
                )
            ]
        named: dict[str, list[str]] = {}
        for eid, created, scope, slug, state in rows:
            out.setdefault(str(eid), []).append((utc(created), scope))
            if counts_pairs(state):
                named.setdefault(str(slug), []).append(str(eid))
        pairs.update(pair for eids in named.values() for pair in pairs_of(eids))
        return out

    def _prints_of(self, conn: Any, slugs: Sequence[str]) -> list[tuple[str, str]]:
        """(scope hash, fingerprint) of these memories as stored, for an engine that keeps
        a count per fingerprint (`_count_prints`); none here."""
        return []

    def _drop_prints(self, conn: Any, slugs: Sequence[str]) -> None:
        """`_count_prints` for memories about to be deleted."""
        self._count_prints(conn, self._prints_of(conn, slugs), [])

    def _count_prints(
        self, conn: Any, removed: Sequence[tuple[str, str]], added: Sequence[tuple[str, str]]
    ) -> None:
        """Keep an engine's count of memories per (scope, fingerprint) after a write that
        removed and added these: kuzu looks duplicates up by it (`KuzuGraphStore`); an
        engine with an index on `fingerprint` keeps nothing."""

    def set_recall(
        self, slug: str, *, recall_count: int, last_recalled_at: datetime, decay_state: DecayState
    ) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            moving = self._states_moving(conn, {slug: decay_state.value})
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
            self._move_co_mentions(conn, moving)

    def upsert_scope(self, scope_hash: str, path: str, sensitive: bool, aliases: list[str]) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MERGE (s:Scope {hash: $hash}) SET s.path = $path, s.sensitive = $sensitive,"
                " s.aliases = CAST($aliases AS STRING[])",
                {"hash": scope_hash, "path": path, "sensitive": sensitive, "aliases": aliases},
            )

    def rebase_memory_paths(self, old_prefix: str, new_prefix: str) -> int:
        with self._transaction(keeps_supersedes=True) as conn:
            rows = self._returning(
                conn,
                "MATCH (m:Memory) WHERE m.path STARTS WITH $old"
                " SET m.path = $new + substring(m.path, $rest, size(m.path))"
                " RETURN count(m)",
                {"old": old_prefix, "new": new_prefix, "rest": len(old_prefix) + self.FIRST},
            )
        return int(rows[0][0]) if rows else 0

    def add_entity_aliases(self, entity_id: str, aliases: Sequence[str]) -> None:
        with self._transaction(keeps_supersedes=True) as conn:
            conn.execute(
                "MATCH (e:Entity {id: $id}) SET e.aliases = "
                + self._distinct(
                    self._concat(
                        "coalesce(e.aliases, CAST([] AS STRING[]))", "CAST($a AS STRING[])"
                    )
                ),
                {"id": entity_id, "a": list(aliases)},
            )

    def merge_entities(self, keep: str, drop: str) -> None:
        """Move every edge of `drop` onto `keep`, keep its name as an alias, delete it."""
        with self._transaction(keeps_supersedes=True) as conn:
            # one MENTIONS per (memory, entity): a memory naming both keeps one, the surer
            conn.execute(
                "MATCH (m:Memory)-[r:MENTIONS]->(:Entity {id: $drop}),"
                " (m)-[e:MENTIONS]->(:Entity {id: $keep}) WHERE r.confidence > e.confidence"
                " SET e.confidence = r.confidence",
                {"drop": drop, "keep": keep},
            )
            conn.execute(
                "MATCH (m:Memory)-[r:MENTIONS]->(:Entity {id: $drop}), (k:Entity {id: $keep})"
                " OPTIONAL MATCH (m)-[e:MENTIONS]->(k)"
                " WITH m, k, max(r.confidence) AS c, count(e) AS had WHERE had = 0"
                " CREATE (m)-[:MENTIONS {confidence: c}]->(k)",
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
                "MATCH (d:Entity {id: $drop}), (k:Entity {id: $keep}) SET k.aliases = "
                + self._distinct(
                    self._concat(
                        "coalesce(k.aliases, CAST([] AS STRING[]))",
                        self._concat("[d.name]", "coalesce(d.aliases, CAST([] AS STRING[]))"),
                    )
                ),
                {"drop": drop, "keep": keep},
            )
            conn.execute("MATCH (d:Entity {id: $drop}) DETACH DELETE d", {"drop": drop})
            self._recount_co_mentions(conn, keep)
            self._refresh_entity_stats(conn, [keep])

    def record_recalls(self, recalls: Mapping[str, tuple[int, datetime]]) -> dict[str, int]:
        """Add `n` recalls at `at` to each memory (slug → (n, at)) and bring it back to
        alive; returns each one's new count (absent slugs are left out).

        One statement for the whole batch: one statement per memory would hold the GIL to
        prepare each (the daemon flushes hundreds at once). The WITH: see the UNWIND note in
        `kuzu_support`.
        """
        if not recalls:
            return {}
        rows = [{"slug": slug, "n": n, "at": at} for slug, (n, at) in recalls.items()]
        # Counts change nothing recall keeps of the graph, unless a forgotten memory comes
        # back (`mentioning` leaves the forgotten out): so the daemon's and its readers' kept
        # reads survive the flush the daemon makes every few seconds.
        with self._transaction(keeps_supersedes=True, keeps_recall_reads=True) as conn:
            revived = self._collect(
                conn,
                "UNWIND $slugs AS s MATCH (m:Memory {slug: s})"
                " WHERE m.decay_state = 'forgotten' RETURN m.slug",
                {"slugs": list(recalls)},
            )
            moving = self._states_moving(conn, dict.fromkeys(recalls, DecayState.ALIVE.value))
            counts = self._returning(
                conn,
                "UNWIND $rows AS r"
                " WITH r.slug AS slug, CAST(r.n AS INT64) AS n, CAST(r.at AS TIMESTAMP) AS at"
                " MATCH (m:Memory {slug: slug})"
                " SET m.recall_count = m.recall_count + n,"
                " m.last_recalled_at = at, m.decay_state = 'alive'"
                " RETURN m.slug, m.recall_count",
                {"rows": rows},
            )
            self._move_co_mentions(conn, moving)
        if revived:
            self._recall_writes += 1
        return {str(slug): int(count) for slug, count in counts}


# Kuzu infers a parameter column's type from its values (an all-null column is STRING), so
# every nullable typed column is cast explicitly. `p` is "r." (an unwound row) or "$".
_MEMORY_SET = (
    "SET m.type = {p}type, m.scope_hash = {p}scope_hash, m.title = {p}title, m.body = {p}body,"
    " m.source = {p}source, m.created_at = CAST({p}created_at AS TIMESTAMP),"
    " m.updated_at = CAST({p}updated_at AS TIMESTAMP),"
    " m.ttl_days = CAST({p}ttl_days AS INT64), m.decay_state = {p}decay_state,"
    " m.recall_count = CAST({p}recall_count AS INT64),"
    " m.last_recalled_at = CAST({p}last_recalled_at AS TIMESTAMP),"
    " m.fingerprint = {p}fingerprint, m.category = CAST({p}category AS STRING),"
    " m.tags = CAST({p}tags AS STRING[]), m.triggers = CAST({p}triggers AS STRING[]),"
    " m.dura = CAST({p}dura AS STRING), m.sensitive = CAST({p}sensitive AS BOOLEAN),"
    " m.promoted_from = CAST({p}promoted_from AS STRING), m.path = {p}path"
)
# A new memory's columns in its CREATE: one insert, where CREATE then SET logged an update of
# each column too (about twice the WAL a batch writes; bench/RESULTS.md).
_MEMORY_NEW = (
    "CREATE (m:Memory {{slug: {p}slug, "
    + _MEMORY_SET.removeprefix("SET ").replace("m.", "").replace(" = ", ": ")
    + "}})"
)
_ENTITY_NEW = (
    "MERGE (e:Entity {{id: {p}id}}) ON CREATE SET e.name = {p}name, e.type = {p}type,"
    " e.aliases = CAST([] AS STRING[]), e.mention_count = 0, e.decay_state = 'fresh'"
)
# An entity a write adds mentions to, created with them or given them on top of its own
# (`_mention_deltas`); every right-hand side reads the stats as they were.
_ENTITY_COUNTED = (
    " MERGE (e:Entity {{id: {id}}}) ON CREATE SET e.name = {name}, e.type = {type},"
    " e.aliases = CAST([] AS STRING[]), e.decay_state = 'fresh', e.mention_count = {n},"
    " e.first_seen_at = {f}, e.last_seen_at = {l}, e.scope_hash = {s}"
    " ON MATCH SET e.first_seen_at = CASE WHEN e.mention_count > 0 AND e.first_seen_at <= {f}"
    " THEN e.first_seen_at ELSE {f} END,"
    " e.last_seen_at = CASE WHEN e.mention_count > 0 AND e.last_seen_at >= {l}"
    " THEN e.last_seen_at ELSE {l} END,"
    " e.scope_hash = CASE WHEN e.mention_count = 0 OR e.scope_hash = {s} THEN {s} ELSE NULL END,"
    " e.mention_count = e.mention_count + {n}"
)
_RECOUNT = (
    " OPTIONAL MATCH (m:Memory)-[:MENTIONS]->(e)"
    " WITH e, count(m) AS n, min(m.created_at) AS f, max(m.created_at) AS l,"
    " collect(DISTINCT m.scope_hash) AS scopes"
    " SET e.mention_count = n, e.first_seen_at = f, e.last_seen_at = l,"
    " e.scope_hash = CASE WHEN size(scopes) = 1 THEN scopes[{first}] ELSE NULL END"
)
_DROP_SOURCED = "UNWIND $slugs AS s MATCH ()-[r:RELATES]->() WHERE r.source_memory = s DELETE r"
_DROP_SOURCED_KEYED = "MATCH ()-[r:RELATES]->() WHERE r.source_memory = $slug DELETE r"
_RELATES_KEYED = (
    " CREATE (a)-[:RELATES {predicate: $predicate, confidence: CAST($confidence AS DOUBLE),"
    " source_memory: $source, created_at: CAST($created_at AS TIMESTAMP),"
    " valid_from: CAST($valid_from AS TIMESTAMP),"
    " superseded_at: CAST($superseded_at AS TIMESTAMP), label: CAST($label AS STRING)}]->(b)"
)
