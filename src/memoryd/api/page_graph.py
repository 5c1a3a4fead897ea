"""The graph page's entity view: an entity's neighbourhood under a depth and a cap, the
strongest neighbours only, what the cap left out counted, and the edges between those drawn
held to a budget of lines (`/v1/page/graph` in `api.page`).

A hub (an entity named by thousands of memories) is the case this is written for: each hop
traverses its frontier's memories once (`neighbourhood`), and the page draws at most
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
"""Neighbours a hop reads, at most (past it `truncated`: the ranking and the count are of
those read)."""
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
    "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids AND r.superseded_at IS NULL"
    " RETURN b.id, count(r) AS n, max(r.confidence)"
)
_SHARED = (
    "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
    " WHERE a.id IN $ids AND b.id <> a.id AND m.decay_state <> 'forgotten'"
    " RETURN b.id, count(m) AS n"
)
_SHARED_KEPT = (
    "MATCH (a:Entity)-[c:CO_MENTIONS]-(b:Entity) WHERE a.id IN $ids RETURN b.id, sum(c.n) AS n"
)
"""`_SHARED` from the counts the graph keeps (`GraphStore.co_mentions`): a hub's neighbours
cost one edge each, not a walk of its memories (bench/RESULTS.md, d-hub3)."""
_AMONG = (
    "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
    " WHERE a.id IN $ids AND b.id IN $ids AND a.id < b.id"
    " AND m.decay_state <> 'forgotten' RETURN a.id, b.id, count(m)"
)
_AMONG_KEPT = (
    "MATCH (a:Entity)-[c:CO_MENTIONS]->(b:Entity) WHERE a.id IN $ids AND b.id IN $ids"
    " RETURN a.id, b.id, c.n"
)


def _shared(graph: GraphStore) -> str:
    return _SHARED_KEPT if graph.co_mentions else _SHARED


Pairs = dict[tuple[str, str], int]
"""Memories (not forgotten) naming both entities of a pair (the lesser id first)."""


def neighbourhood(graph: GraphStore, centre: EntityRow, depth: int, cap: int) -> EntityGraph:
    """The last hop reads every neighbour of its frontier once, unlimited: the ranking, the
    count of what the cap left out and, for a frontier of one (the centre at depth 1), its
    co-mentions with everything drawn come from that read, and the pairs among the others
    drawn are one more read (`_edges`). A hop before the last asks only for the strongest
    that fit (`LIMIT`), and one distinct read of all those frontiers counts what they reach
    (fewer rows than an unlimited read each; the engine's work is the same: bench/RESULTS.md).

    A graph that keeps its co-mention counts (`GraphStore.co_mentions`) makes every hop the
    `LIMIT` read, the count one number from the engine (`_count_reached`) and the pairs among
    all drawn one read of the counts: a hub's thousands of neighbours stay in the engine.
    """
    hops: dict[str, tuple[int, float]] = {centre.id: (0, 0.0)}
    left: dict[str, float] = {}
    reached: set[str] = set()
    pairs: Pairs = {}
    known: set[str] = set()  # entities whose co-mentions with all others are in `pairs`
    later: list[str] = []  # frontiers whose neighbours are counted by one read at the end
    truncated = False
    frontier = [centre.id]
    for hop in range(1, depth + 1):
        if not frontier:
            break
        room = cap - len(hops)
        # named: the strongest that did not fit, while fewer than NAMED_LEFT_OUT are
        naming = NAMED_LEFT_OUT if room or len(left) < NAMED_LEFT_OUT else 0
        if not (room or naming):  # only the count is left
            later += frontier
            break
        if hop < depth or graph.co_mentions:  # the strongest that fit (and on from them)
            ranked, cut = _strongest(graph, frontier, list(hops), room + NAMED_LEFT_OUT)
            later += frontier
        else:
            ranked, cut = _neighbours(graph, frontier, pairs)
            reached.update(ranked)
            if len(frontier) == 1:
                known.add(frontier[0])
        truncated = truncated or cut
        kept: list[str] = []
        for other, weight in ranked.items():
            if other in hops:
                continue
            if len(kept) < room:
                kept.append(other)
                hops[other] = (hop, weight)
            elif naming:
                left[other] = max(left.get(other, 0.0), weight)
                naming -= 1
            else:
                break
        frontier = kept
    if later and graph.co_mentions:
        left_out = _count_reached(graph, later, list(hops))
    else:
        if later:
            found, cut = _reached(graph, later)
            reached.update(found)
            truncated = truncated or cut
        left_out = len(reached - hops.keys())
    strongest = sorted(left.items(), key=lambda kv: (-kv[1], kv[0]))[:NAMED_LEFT_OUT]
    names = {n.id: n.name for n in _nodes(graph, {i: (0, w) for i, w in strongest})}
    edges, edges_left_out = _edges(graph, hops, [i for i in hops if i not in known], pairs)
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


def _neighbours(
    graph: GraphStore, frontier: list[str], pairs: Pairs
) -> tuple[dict[str, float], bool]:
    """Every neighbour of `frontier`, strongest first: relations (the most asserted first)
    weighted above any count of shared memories, a co-mention weighing the memories that name
    it with an entity of the frontier (summed over the frontier's entities). For a frontier
    of one, adds each co-mentioned pair's count to `pairs`; whether a read stopped at
    `REACH_ROWS`."""
    params = {"ids": frontier}
    related = graph.cypher(_RELATED, params, limit=REACH_ROWS)
    shared = graph.cypher(_shared(graph), params, limit=REACH_ROWS)
    weights: dict[str, float] = {}
    for other, asserted, confidence in related.rows:
        weights[other] = 1e9 + int(asserted) + float(confidence or 0.0) / 2
    (alone,) = frontier if len(frontier) == 1 else (None,)
    for other, n in shared.rows:
        weights.setdefault(other, float(n))
        if alone is not None:
            pairs[(min(alone, other), max(alone, other))] = int(n)
    ranked = dict(sorted(weights.items(), key=lambda kv: (-kv[1], kv[0])))
    return ranked, related.truncated or shared.truncated


def _strongest(
    graph: GraphStore, frontier: list[str], drawn: list[str], k: int
) -> tuple[dict[str, float], bool]:
    """The `k` strongest neighbours of `frontier` not yet drawn, ranked as `_neighbours`
    does: at a hop before the last, where `_reached` counts them all at the end. Fewer rows
    than an unlimited read (the engine's work is the same: bench/RESULTS.md)."""
    params = {"ids": frontier, "drawn": drawn}
    not_drawn = " AND NOT b.id IN $drawn RETURN b.id, "
    related = graph.cypher(
        _RELATED.replace(" RETURN b.id, ", not_drawn).replace(
            "max(r.confidence)", "max(r.confidence) AS c"
        )
        + f" ORDER BY n DESC, c DESC, b.id LIMIT {k}",
        params,
        limit=k,
    ).rows
    shared = graph.cypher(
        _shared(graph).replace(" RETURN b.id, ", not_drawn)
        + f" ORDER BY n DESC, b.id LIMIT {k + len(related)}",
        params,
        limit=k + len(related),
    ).rows
    ranked: dict[str, float] = {}
    for other, asserted, confidence in related:
        ranked.setdefault(other, 1e9 + int(asserted) + float(confidence or 0.0) / 2)
    for other, count in shared:
        ranked.setdefault(other, float(count))
    return dict(list(ranked.items())[:k]), False


def _reached(graph: GraphStore, frontier: list[str]) -> tuple[dict[str, float], bool]:
    """The distinct entities related to or co-mentioned with `frontier` (weight 0): the
    count of what the cap left out, in one read for every hop before the last."""
    found: dict[str, float] = {}
    truncated = False
    for statement in (_RELATED, _shared(graph)):
        read = statement.split(" RETURN ", 1)[0] + " RETURN DISTINCT b.id"
        result = graph.cypher(read, {"ids": frontier}, limit=REACH_ROWS)
        found.update((row[0], 0.0) for row in result.rows)
        truncated = truncated or result.truncated
    return found, truncated


def _count_reached(graph: GraphStore, frontier: list[str], drawn: list[str]) -> int:
    """How many entities not `drawn` are related to or co-mentioned with `frontier`,
    counted in the engine from the kept counts (one number, where `_reached` brings every
    id to Python: 17k at a hub's depth 2 at 100k)."""
    rows = graph.cypher(
        "MATCH (a:Entity)-[r:RELATES|CO_MENTIONS]-(b:Entity) WHERE a.id IN $ids"
        " AND r.superseded_at IS NULL AND NOT b.id IN $drawn RETURN count(DISTINCT b.id)",
        {"ids": frontier, "drawn": drawn},
    ).rows
    return int(rows[0][0]) if rows else 0


def _edges(
    graph: GraphStore, hops: dict[str, tuple[int, float]], rest: list[str], shared: Pairs
) -> tuple[list[GraphEdge], int]:
    """The edges between the entities drawn, by pair: first each entity's strongest link to
    the hop before (so everything drawn hangs together), then the strongest other pairs while
    the lines the page draws stay within `EDGES_PER_NODE` per entity; and how many edges that
    left out. A pair's strength is the memories behind it (mentioning both, or asserting a
    relation), a relation breaking a tie. `shared` holds the co-mentions the hops read (those
    of a frontier of one); the pairs among the `rest` are read here."""
    ids = list(hops)
    relations = graph.cypher(
        "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE a.id IN $ids AND b.id IN $ids"
        " AND a.id <> b.id AND r.superseded_at IS NULL"
        " RETURN a.id, r.predicate, b.id, count(r), max(r.confidence)"
        " ORDER BY a.id, r.predicate, b.id",
        {"ids": ids},
        limit=PAIR_ROWS,
    ).rows
    among = (
        graph.cypher(
            _AMONG_KEPT if graph.co_mentions else _AMONG,
            {"ids": rest},
            limit=PAIR_ROWS,
        ).rows
        if len(rest) > 1
        else []
    )
    drawn = [(pair, n) for pair, n in shared.items() if pair[0] in hops and pair[1] in hops]
    drawn += [((a, b), int(n)) for a, b, n in among]
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
    for (src, dst), n in sorted(drawn):
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
    total = len(relations) + len(drawn)
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
