"""The CO_MENTIONS counts kept on write: for each pair of entities one edge (the lesser id
first) holding how many memories not forgotten name both (`store.CO_MENTIONS_FILL`), so the
graph page ranks a hub's neighbours without walking its memories (bench/RESULTS.md, d-hub3).

`CoMentionWrites` is the upkeep every write that changes a memory's mentions, or whether it is
forgotten, calls with its delta (k(k-1)/2 pairs for a memory naming k entities);
`KuzuCoMentions` moves the counts without MERGE.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

from memoryd.graph.cypher_reads import KEYED_ROWS, _each
from memoryd.models import DecayState


def pairs_of(entity_ids: Iterable[str]) -> list[tuple[str, str]]:
    """The pairs of entities one memory names, each the lesser id first (a CO_MENTIONS key)."""
    return list(combinations(sorted(set(entity_ids)), 2))


def counts_pairs(state: Any) -> bool:
    """Whether a memory in this decay state counts in CO_MENTIONS (as the page's co-mention
    reads count it: `decay_state <> 'forgotten'`, which no null state passes)."""
    return state is not None and state != DecayState.FORGOTTEN.value


class CoMentionWrites(ABC):
    """The upkeep of CO_MENTIONS, for a store whose graph keeps them (`co_mentions`)."""

    co_mentions: bool

    @abstractmethod
    def _collect(self, conn: Any, query: str, params: dict[str, Any]) -> list[list[Any]]:
        """The rows of a read inside the write transaction `conn`."""

    def _co_pairs(
        self, conn: Any, slugs: Sequence[str], counting: bool
    ) -> Counter[tuple[str, str]]:
        """How many of these memories name each pair of entities, of those that count in
        CO_MENTIONS now (`counting`) or of those that do not, summed in the engine (a decay
        sweep moves thousands: no row of theirs comes back to Python)."""
        state = "<>" if counting else "="
        pairs = (
            "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory {{slug: {slug}}})-[:MENTIONS]->(b:Entity)"
            f" WHERE a.id < b.id AND coalesce(m.decay_state, 'forgotten') {state} 'forgotten'"
            " RETURN a.id, b.id, count(*)"
        )
        wanted = list(dict.fromkeys(slugs))
        if len(wanted) > KEYED_ROWS:
            rows = self._collect(
                conn, "UNWIND $slugs AS s " + pairs.format(slug="s"), {"slugs": wanted}
            )
        else:
            keyed = pairs.format(slug="$slug")
            rows = [row for slug in wanted for row in self._collect(conn, keyed, {"slug": slug})]
        out: Counter[tuple[str, str]] = Counter()
        for a, b, n in rows:
            out[(str(a), str(b))] += int(n)
        return out

    def _states_moving(self, conn: Any, states: Mapping[str, str]) -> Counter[tuple[str, str]]:
        """What moving these memories to these decay states (slug -> state) takes from
        CO_MENTIONS (positive) and gives back (negative): the pairs of those it forgets that
        counted, less the pairs of those it brings back that did not."""
        if not self.co_mentions:
            return Counter()
        forgets = [slug for slug, state in states.items() if not counts_pairs(state)]
        keeps = [slug for slug, state in states.items() if counts_pairs(state)]
        moved: Counter[tuple[str, str]] = Counter()
        if forgets:
            moved.update(self._co_pairs(conn, forgets, counting=True))
        if keeps:
            moved.subtract(self._co_pairs(conn, keeps, counting=False))
        return moved

    def _move_co_mentions(self, conn: Any, taken: Counter[tuple[str, str]]) -> None:
        """Take `taken` (pair -> memories, negative to add) from the CO_MENTIONS counts: an
        edge is created for a pair that gains its first memory and deleted when none is left.
        A memory naming k entities moves k(k-1)/2 pairs (the write cost: bench/RESULTS.md)."""
        if not self.co_mentions:
            return
        moved = [(a, b, -d) for (a, b), d in sorted(taken.items()) if d]
        if not moved:
            return
        self._add_co_mentions(conn, moved)

    def _add_co_mentions(self, conn: Any, moved: Sequence[tuple[str, str, int]]) -> None:
        """Add each (lesser id, other, memories) to its pair's count, creating the edge of
        a pair new to it and deleting the edge of a pair left at 0: by MERGE (the kuzu store
        does it without)."""
        rows = [{"a": a, "b": b, "d": d} for a, b, d in moved]
        _each(
            conn,
            "UNWIND $rows AS r WITH r.a AS a, r.b AS b, CAST(r.d AS INT64) AS d"
            " MATCH (x:Entity {id: a}) MATCH (y:Entity {id: b})"
            " MERGE (x)-[c:CO_MENTIONS]->(y) ON CREATE SET c.n = d ON MATCH SET c.n = c.n + d",
            "MATCH (x:Entity {id: $a}) WITH x MATCH (y:Entity {id: $b})"
            " MERGE (x)-[c:CO_MENTIONS]->(y) ON CREATE SET c.n = CAST($d AS INT64)"
            " ON MATCH SET c.n = c.n + CAST($d AS INT64)",
            rows,
        )
        _each(conn, _CO_DROP, _CO_DROP_KEYED, [{"a": a, "b": b} for a, b, d in moved if d < 0])

    def _recount_co_mentions(self, conn: Any, entity_id: str) -> None:
        """CO_MENTIONS of one entity counted again from its memories (after a merge gave it
        another entity's mentions, so a memory naming both counts once)."""
        if not self.co_mentions:
            return
        params = {"id": entity_id}
        conn.execute("MATCH (k:Entity {id: $id})-[c:CO_MENTIONS]->(:Entity) DELETE c", params)
        conn.execute("MATCH (:Entity)-[c:CO_MENTIONS]->(k:Entity {id: $id}) DELETE c", params)
        for first, second, order in (("k", "b", "k.id < b.id"), ("b", "k", "b.id < k.id")):
            conn.execute(
                "MATCH (k:Entity {id: $id})<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
                f" WHERE m.decay_state <> 'forgotten' AND {order} WITH k, b, count(m) AS n"
                f" CREATE ({first})-[:CO_MENTIONS {{n: n}}]->({second})",
                params,
            )


class KuzuCoMentions(CoMentionWrites):
    """The upkeep on kuzu (`KuzuGraphStore`), whose MERGE of an edge does not fit it."""

    def _add_co_mentions(self, conn: Any, moved: Sequence[tuple[str, str, int]]) -> None:
        """Without MERGE: kuzu plans a MERGE between two matched entities as their cross
        product (bench/RESULTS.md, d-hub3), and a keyed MERGE per pair is slow. The pairs
        that have an edge get their new count (read back), the rest a new edge, and those
        left at 0 lose theirs."""
        rows = [{"a": a, "b": b, "d": d} for a, b, d in moved]
        adding = (
            "MATCH (x:Entity {{id: {a}}})-[c:CO_MENTIONS]->(y:Entity) WHERE y.id = {b}"
            " SET c.n = c.n + {d} RETURN x.id, y.id, c.n"
        )
        if len(rows) > KEYED_ROWS:
            found = self._collect(
                conn,
                "UNWIND $rows AS r WITH r.a AS a, r.b AS b, CAST(r.d AS INT64) AS d "
                + adding.format(a="a", b="b", d="d"),
                {"rows": rows},
            )
        else:
            keyed = adding.format(a="$a", b="$b", d="CAST($d AS INT64)")
            found = [found for row in rows for found in self._collect(conn, keyed, row)]
        now = {(str(a), str(b)): int(n) for a, b, n in found}
        _each(
            conn,
            "UNWIND $rows AS r WITH r.a AS a, r.b AS b, CAST(r.d AS INT64) AS d"
            " MATCH (x:Entity {id: a}) WITH x, b, d MATCH (y:Entity {id: b})"
            " CREATE (x)-[:CO_MENTIONS {n: d}]->(y)",
            "MATCH (x:Entity {id: $a}) WITH x MATCH (y:Entity {id: $b})"
            " CREATE (x)-[:CO_MENTIONS {n: CAST($d AS INT64)}]->(y)",
            [{"a": a, "b": b, "d": d} for a, b, d in moved if (a, b) not in now and d > 0],
        )
        gone = [{"a": a, "b": b} for (a, b), n in now.items() if n <= 0]
        _each(conn, _CO_DROP, _CO_DROP_KEYED, gone)


_CO_DROP = (
    "UNWIND $rows AS r WITH r.a AS a, r.b AS b"
    " MATCH (x:Entity {id: a})-[c:CO_MENTIONS]->(y:Entity) WHERE y.id = b AND c.n <= 0 DELETE c"
)
_CO_DROP_KEYED = (
    "MATCH (x:Entity {id: $a})-[c:CO_MENTIONS]->(y:Entity {id: $b}) WHERE c.n <= 0 DELETE c"
)
