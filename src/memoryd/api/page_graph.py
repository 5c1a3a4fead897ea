"""The graph page's entity view: an entity's neighbourhood under a depth and a cap, the
strongest neighbours only, what the cap left out counted, and the edges between those drawn
held to a budget of lines (`/v1/page/graph` in `api.page`).

A hub (an entity named by thousands of memories) is the case this is written for: each hop
asks the graph for only the neighbours that fit (`LIMIT`), and the page draws at most
`EDGES_PER_NODE` lines per entity; bench/page.py times it (`--wide` builds a hub).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from memoryd.graph.store import EntityRow, GraphStore

MAX_NODES = 200
NAMED_LEFT_OUT = 20
"""Entities the cap left out that the page names (the strongest)."""
EDGES_PER_NODE = 2
"""Lines the page draws, at most, per entity drawn (a co-mention is one, the relations one
way one arrow), unless each entity's link to the hop before, always drawn, takes more: a
hub's neighbours are often all co-mentioned and related with each other (37 entities at 10k
memories held 2,490 edges, which took the browser seconds to lay out and draw;
bench/RESULTS.md)."""
REACH_ROWS = 200_000
"""Entities read, at most, to count what the cap left out."""
PAIR_ROWS = MAX_NODES * MAX_NODES * 4
"""Edge rows read between the entities drawn, at most (every pair, four predicates each)."""


class GraphNode(BaseModel):
    id: str
    name: str
    type: str
    mention_count: int = 0
    hop: int
    """Hops from the centre (0: the centre)."""
    weight: float = 0.0
    """Why it was kept: the memories it shares with the hop before, or for a relation 1e9 +
    the memories asserting it + half its confidence (the ranking that decided which
    neighbours fit under the cap)."""


class GraphEdge(BaseModel):
    source: str
    target: str
    kind: Literal["relation", "co_mention"]
    label: str
    """The predicate, or `co-mentioned N×`."""
    count: int = 1
    """How many memories assert the relation, or mention both entities."""
    confidence: float = 1.0


class EntityGraph(BaseModel):
    """The entities within `depth` hops of `centre` over current relations and co-mentions
    (two entities named by one memory that is not forgotten), at most `cap` of them: each hop
    ranks its neighbours relations first (asserted by the most memories first), then by
    memories shared, and keeps the strongest. Between the entities drawn, the links to the
    hop before and then the strongest others, at most `EDGES_PER_NODE` lines per entity."""

    centre: EntityRow
    depth: int
    cap: int
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    left_out: int = 0
    """Entities reached (neighbours of an entity drawn less than `depth` hops out) but not
    drawn because the cap was met."""
    left_out_names: list[str] = Field(default_factory=list)
    """The strongest of them, at most `NAMED_LEFT_OUT`."""
    edges_left_out: int = 0
    """Edges between entities drawn that were not sent: the weakest pairs past the edge
    budget."""
    truncated: bool = False
    """More entities were reached than the graph read (`REACH_ROWS`): `left_out` is a lower
    bound."""


_RELATED = (
    "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids AND NOT b.id IN $drawn"
    " AND r.superseded_at IS NULL"
    " RETURN b.id, count(r) AS n, max(r.confidence) AS c ORDER BY n DESC, c DESC, b.id"
)
_SHARED = (
    "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
    " WHERE a.id IN $ids AND NOT b.id IN $drawn AND m.decay_state <> 'forgotten'"
    " RETURN b.id, count(DISTINCT m) AS n ORDER BY n DESC, b.id"
)


def neighbourhood(graph: GraphStore, centre: EntityRow, depth: int, cap: int) -> EntityGraph:
    """Each hop asks the graph for only the strongest neighbours that still fit (`LIMIT`),
    plus `NAMED_LEFT_OUT` more to name what the cap left out (a hop where nothing fits is
    asked only while fewer are named); how many it left out is the number of distinct
    entities reached less those drawn (one column of ids, counted here: neither engine counts
    a union of two patterns in one statement)."""
    hops: dict[str, tuple[int, float]] = {centre.id: (0, 0.0)}
    left: dict[str, float] = {}
    frontier = [centre.id]
    for hop in range(1, depth + 1):
        if not frontier:
            break
        room = cap - len(hops)
        if not room and len(left) >= NAMED_LEFT_OUT:
            break  # nothing more fits, and enough are named: only the count below is left
        kept: list[str] = []
        for other, weight in _strongest(graph, frontier, list(hops), room + NAMED_LEFT_OUT):
            if len(kept) < room:
                kept.append(other)
                hops[other] = (hop, weight)
            else:
                left[other] = max(left.get(other, 0.0), weight)
        frontier = kept
    reach = [eid for eid, (hop, _) in hops.items() if hop < depth]
    reached, truncated = _reached(graph, reach)
    left_out = len(reached - hops.keys())
    strongest = sorted(left.items(), key=lambda kv: (-kv[1], kv[0]))[:NAMED_LEFT_OUT]
    names = {n.id: n.name for n in _nodes(graph, {i: (0, w) for i, w in strongest})}
    edges, edges_left_out = _edges(graph, hops)
    return EntityGraph(
        centre=centre,
        depth=depth,
        cap=cap,
        nodes=_nodes(graph, hops),
        edges=edges,
        left_out=left_out,
        left_out_names=[names.get(i, i) for i, _ in strongest],
        edges_left_out=edges_left_out,
        truncated=truncated,
    )


def _strongest(
    graph: GraphStore, frontier: list[str], drawn: list[str], k: int
) -> list[tuple[str, float]]:
    """The `k` strongest neighbours of `frontier` not yet drawn, best first: relations (the
    most asserted first) weighted above any count of shared memories. Each statement stops
    at `k` rows; the co-mentions ask for as many more as relations were found, since those
    come first and may be the same entities."""
    params = {"ids": frontier, "drawn": drawn}
    related = graph.cypher(f"{_RELATED} LIMIT {k}", params, limit=k).rows
    shared = graph.cypher(
        f"{_SHARED} LIMIT {k + len(related)}", params, limit=k + len(related)
    ).rows
    ranked: dict[str, float] = {}
    for other, asserted, confidence in related:
        ranked.setdefault(other, 1e9 + int(asserted) + float(confidence or 0.0) / 2)
    for other, count in shared:
        ranked.setdefault(other, float(count))
    return list(ranked.items())[:k]


def _reached(graph: GraphStore, ids: list[str]) -> tuple[set[str], bool]:
    """The distinct entities related to or co-mentioned with any of `ids` (and whether
    there were more than `REACH_ROWS`)."""
    if not ids:
        return set(), False
    found: set[str] = set()
    truncated = False
    for statement in (
        "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids"
        " AND r.superseded_at IS NULL RETURN DISTINCT b.id",
        "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
        " WHERE a.id IN $ids AND m.decay_state <> 'forgotten' RETURN DISTINCT b.id",
    ):
        result = graph.cypher(statement, {"ids": ids}, limit=REACH_ROWS)
        found.update(row[0] for row in result.rows)
        truncated = truncated or result.truncated
    return found, truncated


def _edges(graph: GraphStore, hops: dict[str, tuple[int, float]]) -> tuple[list[GraphEdge], int]:
    """The edges between the entities drawn, by pair: first each entity's strongest link to
    the hop before (so everything drawn hangs together), then the strongest other pairs while
    the lines the page draws stay within `EDGES_PER_NODE` per entity; and how many edges that
    left out. A pair's strength is the memories behind it (mentioning both, or asserting a
    relation), a relation breaking a tie."""
    ids = list(hops)
    relations = graph.cypher(
        "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE a.id IN $ids AND b.id IN $ids"
        " AND a.id <> b.id AND r.superseded_at IS NULL"
        " RETURN a.id, r.predicate, b.id, count(r), max(r.confidence)"
        " ORDER BY a.id, r.predicate, b.id",
        {"ids": ids},
        limit=PAIR_ROWS,
    ).rows
    shared = graph.cypher(
        "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
        " WHERE a.id IN $ids AND b.id IN $ids AND a.id < b.id"
        " AND m.decay_state <> 'forgotten'"
        " RETURN a.id, b.id, count(DISTINCT m) ORDER BY a.id, b.id",
        {"ids": ids},
        limit=PAIR_ROWS,
    ).rows
    pairs: dict[tuple[str, str], list[GraphEdge]] = {}
    strength: dict[tuple[str, str], tuple[int, int]] = {}
    for src, predicate, dst, n, confidence in relations:
        pair = (min(src, dst), max(src, dst))
        pairs.setdefault(pair, []).append(
            GraphEdge(
                source=src,
                target=dst,
                kind="relation",
                label=predicate,
                count=int(n),
                confidence=float(confidence or 0.0),
            )
        )
        memories, _ = strength.get(pair, (0, 0))
        strength[pair] = (max(memories, int(n)), 1)
    for src, dst, n in shared:
        pairs.setdefault((src, dst), []).append(
            GraphEdge(
                source=src,
                target=dst,
                kind="co_mention",
                label=f"co-mentioned {int(n)}×",
                count=int(n),
            )
        )
        memories, related = strength.get((src, dst), (0, 0))
        strength[(src, dst)] = (max(memories, int(n)), related)
    ranked = sorted(pairs, key=lambda pair: (-strength[pair][0], -strength[pair][1], pair))
    chosen: dict[tuple[str, str], None] = {}
    linked: set[str] = set()
    for pair in ranked:  # each entity's link to the hop before
        a, b = pair
        far = a if hops[a][0] > hops[b][0] else b if hops[b][0] > hops[a][0] else None
        if far is not None and far not in linked:
            linked.add(far)
            chosen[pair] = None
    lines = {pair: _lines(pairs[pair]) for pair in pairs}
    room = EDGES_PER_NODE * len(hops) - sum(lines[pair] for pair in chosen)
    for pair in ranked:
        if pair not in chosen and lines[pair] <= room:
            chosen[pair] = None
            room -= lines[pair]
    edges = [edge for pair in sorted(chosen) for edge in pairs[pair]]
    total = len(relations) + len(shared)
    return edges, total - len(edges)


def _lines(edges: list[GraphEdge]) -> int:
    """The lines the page draws for a pair's edges: the co-mention, and one arrow per
    direction (its predicates as one label)."""
    arrows = {(e.source, e.target) for e in edges if e.kind == "relation"}
    return len(arrows) + sum(e.kind == "co_mention" for e in edges)


def _nodes(graph: GraphStore, hops: dict[str, tuple[int, float]]) -> list[GraphNode]:
    if not hops:
        return []
    rows = graph.cypher(
        "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.type, e.mention_count",
        {"ids": list(hops)},
        limit=MAX_NODES + 20,
    ).rows
    return sorted(
        (
            GraphNode(
                id=eid,
                name=name or eid,
                type=etype or "",
                mention_count=int(mentions or 0),
                hop=hops[eid][0],
                weight=hops[eid][1],
            )
            for eid, name, etype, mentions in rows
        ),
        key=lambda n: (n.hop, -n.weight, n.id),
    )
