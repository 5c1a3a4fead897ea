"""Supersede against the graph: finding candidate pairs for one memory or a batch, the
decisions kept on a memory, and undo / accept / reject of a decision.

Over 600 lines: one memory, a written batch and a batch about to be written find their pairs
through the same reads and the same ranking (`_ranked_pairs`, `_nearest`), which is one
algorithm whose parts must agree row for row.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from memoryd.errors import Conflict, NotFound
from memoryd.governance.supersede_kept import (
    JUDGED_TYPES,
    Lists,
    MentionLists,
    judged_rows,
    merged_rows,
)
from memoryd.governance.supersede_names import GRAPH_CHOICE_TYPES, Name
from memoryd.governance.supersede_pairs import Pair, SupersedeJob, limit_fan_out, pair_texts
from memoryd.governance.supersede_rules import RULES_VERSION, Tiers, may_supersede
from memoryd.graph.cypher_reads import KEYED_ROWS
from memoryd.graph.rows import graph_rows, jsonable
from memoryd.graph.store import GraphStore, SupersedeRow, supersede_edges
from memoryd.models import Memory, SupersedeDecision, SupersedeStatus

# --------------------------------------------------------------------------- the stores

_PAIRS_QUERY = (
    "MATCH (n:Memory {slug: $slug})-[:MENTIONS]->(e:Entity)<-[:MENTIONS]-(o:Memory)"
    " WHERE o.scope_hash = n.scope_hash AND o.slug <> n.slug AND o.type IN $types"
    " AND o.created_at <= n.created_at AND o.decay_state <> 'forgotten' AND NOT o.sensitive"
    " AND NOT EXISTS { MATCH (o)-[:SUPERSEDES]->(n) }"
    " RETURN o.slug, o.title, o.body, o.created_at, e.id, e.name, e.mention_count, e.type,"
    " e.aliases"
    " ORDER BY o.created_at DESC, o.slug"
)


def find_pairs(graph: GraphStore, newer: Memory, *, limit: int) -> list[Pair]:
    """The older preference, decision and fact memories of the newer one's scope that share
    an entity with it, each with the most specific entity they share (the least mentioned:
    `React` says more than `frontend`), those sharing the most specific one first. Pairs
    already decided are left out, and so is a memory that itself replaces the newer one.
    Timestamps are to the second: one written in the same second counts as older (judging
    runs as the newer one is written)."""
    decided = set(newer.meta.supersedes) | {d.older for d in newer.meta.supersede_decisions}
    # A record it amends (a status line said so) is refined, not replaced.
    decided |= {r.object for r in newer.meta.relations if r.label == "amends"}
    rows = graph.cypher(
        _PAIRS_QUERY, {"slug": newer.slug, "types": list(JUDGED_TYPES)}, limit=100_000
    ).rows
    texts = {str(r[0]): pair_texts(str(r[1]), str(r[2] or "")) for r in rows}
    return _pairs([r[:1] + r[3:] for r in rows], texts, decided, limit)


def _pairs(
    rows: Sequence[Sequence[Any]], texts: dict[str, str], decided: set[str], limit: int
) -> list[Pair]:
    """Rows of (older slug, created_at, entity id, name, mention count, type, aliases), newest
    older first, as pairs: each with its most specific shared entity and the tools and
    libraries both memories mention, the `limit` with the most specific one kept."""
    best: dict[str, tuple[int, Pair]] = {}
    known: dict[str, dict[str, Name]] = {}
    order: list[str] = []
    for slug, _created, eid, name, mentioned, etype, aliases in rows:
        if slug in decided:
            continue
        if etype in GRAPH_CHOICE_TYPES and name:
            surfaces = tuple(dict.fromkeys([str(name), *(str(a) for a in aliases or ())]))
            known.setdefault(slug, {})[str(eid)] = Name(str(name), surfaces, str(etype))
        pair = Pair(str(slug), texts[str(slug)], str(eid), str(name))
        count = int(mentioned or 0)
        if slug not in best:
            order.append(slug)
            best[slug] = (count, pair)
        elif count < best[slug][0]:
            best[slug] = (count, pair)
    # The `limit` older memories sharing the most specific entity first (newest first among
    # equals): a record that shares the replaced tool with the newer one is judged before
    # twenty newer ones that share only the platform both run on.
    ranked = sorted(order, key=lambda slug: best[slug][0])
    return [
        replace(best[slug][1], known=tuple(known.get(slug, {}).values())) for slug in ranked[:limit]
    ]


# A batch's candidate pairs come from the entities its memories mention and, once per entity,
# the memories that mention it: one row per (newer, older, shared entity) took 478k rows for
# 500 new memories in a 10k-memory scope (32 s of CPU), and kuzu 0.11.3 planned the
# one-pattern form as a scan of every memory (a full buffer pool for a batch).
_NEWER_ENTITIES = (
    "UNWIND $slugs AS s MATCH (n:Memory {slug: s})-[:MENTIONS]->(e:Entity)"
    " RETURN n.slug, n.scope_hash, n.created_at, e.id, e.name, e.mention_count, e.type, e.aliases"
)
_MENTIONED_BY = (
    "UNWIND $ids AS i MATCH (e:Entity {id: i})<-[:MENTIONS]-(o:Memory)"
    " WHERE o.scope_hash IN $scopes AND o.type IN $types AND o.decay_state <> 'forgotten'"
    " AND NOT o.sensitive RETURN e.id, o.scope_hash, o.slug, o.created_at"
)
# A few entities (`record`'s two or three) are read one by one by their key: kuzu 0.11.3
# answers the UNWIND form with a join over a scan of the memories (bench/RESULTS.md,
# s-record4).
_MENTIONED_BY_ONE = (
    "MATCH (e:Entity {id: $id})<-[:MENTIONS]-(o:Memory)"
    " WHERE o.scope_hash IN $scopes AND o.type IN $types AND o.decay_state <> 'forgotten'"
    " AND NOT o.sensitive RETURN o.scope_hash, o.slug, o.created_at"
)
# A hub entity (`_HUB`) is read per entity, newest first and only as far as judging can
# use (`_NEWEST` rows): at 100k memories an entity has ~7.8k mentions, and turning every one
# into a Python row was a quarter of a judged batch's read.
_NEWEST = 200
_HUB = 10 * _NEWEST
"""Mentioned more often than this, an entity is read alone, newest first: at 10k memories
(~780 mentions an entity) one read of all of them costs less than one query per entity."""
_MENTIONED_NEWEST = (
    "MATCH (e:Entity {id: $id})<-[:MENTIONS]-(o:Memory)"
    " WHERE o.scope_hash = $scope AND o.type IN $types AND o.decay_state <> 'forgotten'"
    " AND NOT o.sensitive RETURN o.slug, o.created_at ORDER BY o.created_at DESC, o.slug"
)
_MENTIONS_OF = (
    "UNWIND $slugs AS s MATCH (o:Memory {slug: s})-[:MENTIONS]->(e:Entity)"
    " WHERE e.id IN $ids RETURN o.slug, e.id"
)
_PAIRS_DECIDED = (
    "UNWIND $slugs AS s MATCH (n:Memory {slug: s})-[:SUPERSEDES]-(o:Memory) RETURN n.slug, o.slug"
)


@dataclass(frozen=True)
class _Shared:
    """An entity a newer memory mentions, as `_pairs` ranks it."""

    count: int
    id: str
    name: str
    type: str
    aliases: tuple[str, ...]


@dataclass(frozen=True)
class _Unwritten:
    """What a batch about to be written adds to what judging reads (`find_pairs_batch`)."""

    rows: dict[tuple[str, str], list[tuple[Any, str]]]
    """Per (entity id, scope hash), its judged memories as older ones (`judged_rows`)."""
    texts: dict[str, str]
    """Their texts as judging reads them."""
    mentions: dict[str, set[str]]
    """Slug -> the entities each memory of the batch mentions."""
    fresh: frozenset[str]
    """Entities the graph does not hold yet: no stored memory mentions them."""


def find_pairs_many(
    graph: GraphStore,
    newers: Sequence[Memory],
    *,
    limit: int,
    newest: int | None = _NEWEST,
    hub: int = _HUB,
) -> dict[str, list[Pair]]:
    """`find_pairs` for a batch of newly written memories in four queries instead of one per
    memory (an import judges hundreds), the same pairs in the same order: per newer memory
    the `limit` older ones sharing its least mentioned entity first, newest first among
    equals. A pair with a SUPERSEDES edge either way is left out (status lines were written
    first); what the newer memory's file decided otherwise is left out as in `find_pairs`.
    `newest`: how far the list of a `hub` entity (mentioned more often) is read before
    judging needs more (the same pairs whatever they are)."""
    if not newers:
        return {}
    slugs = [m.slug for m in newers]
    linked = {
        (str(n), str(o))
        for n, o in graph.cypher(_PAIRS_DECIDED, {"slugs": slugs}, limit=10_000_000).rows
    }
    shared: dict[str, list[_Shared]] = {}
    where: dict[str, tuple[str, Any]] = {}  # newer slug -> (scope hash, created_at)
    for n, scope, created, eid, name, count, etype, aliases in graph.cypher(
        _NEWER_ENTITIES, {"slugs": slugs}, limit=10_000_000
    ).rows:
        where[str(n)] = (str(scope), created)
        entity = _Shared(
            int(count or 0), str(eid), str(name or ""), str(etype or ""), tuple(aliases or ())
        )
        mine = shared.setdefault(str(n), [])
        if all(e.id != entity.id for e in mine):  # one entity may have two MENTIONS edges
            mine.append(entity)
    return _ranked_pairs(graph, newers, shared, where, linked, limit, newest=newest, hub=hub)


def find_pairs_unwritten(
    graph: GraphStore,
    newer: Memory,
    entity_ids: Sequence[str],
    *,
    limit: int,
    kept: MentionLists | None = None,
) -> list[Pair]:
    """`find_pairs_many` for one memory about to be written, so that its decisions are
    written with it (`record`): the same pairs as once it is written. `entity_ids`: the
    entities it will mention. Its write adds one mention to each, which keeps their order;
    an entity the graph lacks is mentioned by no older memory; no SUPERSEDES edge touches a
    memory not yet written. `kept`: the lists of older memories the last records read, and
    the entities' rows."""
    if not entity_ids:
        return []
    generation = graph.recall_generation
    held = {} if kept is None else kept.entities(generation, entity_ids)
    rows = list(held.values())
    missing = sorted(set(entity_ids) - held.keys())
    if missing:
        read = graph.cypher(
            "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.mention_count, e.type,"
            " e.aliases",
            {"ids": missing},
            limit=len(missing) + 1,
        ).rows
        if kept is not None:
            kept.keep_entities(generation, graph.recall_generation, read)
        rows += [tuple(row) for row in read]
    shared: dict[str, list[_Shared]] = {}
    for eid, name, count, etype, aliases in rows:
        entity = _Shared(
            int(count or 0) + 1, str(eid), str(name or ""), str(etype or ""), tuple(aliases or ())
        )
        mine = shared.setdefault(newer.slug, [])
        if all(e.id != entity.id for e in mine):
            mine.append(entity)
    if not shared:
        return []
    # As the graph gives it back (`jsonable`): `_nearest` compares it with the olders'.
    where = {newer.slug: (newer.meta.scope_hash, jsonable(newer.meta.created_at))}
    return _ranked_pairs(graph, [newer], shared, where, set(), limit, kept=kept).get(newer.slug, [])


def find_pairs_batch(
    graph: GraphStore,
    newers: Sequence[Memory],
    batch: Sequence[Memory],
    *,
    limit: int,
    kept: MentionLists | None = None,
    newest: int | None = _NEWEST,
    hub: int = _HUB,
    rules_only: bool = False,
) -> dict[str, list[Pair]]:
    """`find_pairs_many` for a batch about to be written (`record_many`), so that its
    decisions are written with it, not by a second write of every file, graph row and index
    document it changes: the same pairs as once `batch` is written. `newers`: the memories of
    `batch` to judge. What the write will add comes from the batch itself: each entity's
    mentions (its count, the batch's judged memories among its older ones), their texts and
    the SUPERSEDES edges their files name (a new memory has no other). `kept`: the lists of
    older memories the last writes left (`MentionLists`). `rules_only`: only the rules judge
    the pairs, so a pair no rule can decide (`may_supersede`) is left out."""
    if not newers:
        return {}
    plan = graph_rows(batch)
    named: dict[str, set[str]] = {}
    gained: dict[str, int] = {}
    for slug, eid in plan.mentions:
        named.setdefault(slug, set()).add(eid)
        gained[eid] = gained.get(eid, 0) + 1
    ids = sorted({eid for m in newers for eid in named.get(m.slug, ())})
    stored = {
        str(row[0]): row[1:]
        for row in graph.cypher(
            "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.mention_count, e.type,"
            " e.aliases",
            {"ids": ids},
            limit=len(ids) + 1,
        ).rows
    }
    shared: dict[str, list[_Shared]] = {}
    where: dict[str, tuple[str, Any]] = {}
    for memory in newers:
        for eid in sorted(named.get(memory.slug, ())):
            if eid in stored:
                name, count, etype, aliases = stored[eid]
            else:  # created by the write, as `graph_rows` describes it
                row = plan.entity_rows[eid]
                name, count, etype, aliases = row["name"], 0, row["type"], ()
            shared.setdefault(memory.slug, []).append(
                _Shared(
                    int(count or 0) + gained[eid],
                    eid,
                    str(name or ""),
                    str(etype or ""),
                    tuple(aliases or ()),
                )
            )
            # As the graph gives it back (`jsonable`): `_nearest` compares it with the olders'.
            where[memory.slug] = (memory.meta.scope_hash, jsonable(memory.meta.created_at))
    rows = judged_rows(batch, plan.mentions)
    judged = {slug for added in rows.values() for _, slug in added}
    unwritten = _Unwritten(
        rows=rows,
        texts={m.slug: pair_texts(m.meta.title, m.body) for m in batch if m.slug in judged},
        mentions=named,
        fresh=frozenset(set(ids) - stored.keys()),
    )
    linked = {
        pair
        for m in batch
        for edge in supersede_edges(m)
        for pair in ((edge["newer"], edge["older"]), (edge["older"], edge["newer"]))
    }
    return _ranked_pairs(
        graph,
        newers,
        shared,
        where,
        linked,
        limit,
        newest=newest,
        hub=hub,
        kept=kept,
        added=unwritten,
        rules_only=rules_only,
    )


def _ranked_pairs(
    graph: GraphStore,
    newers: Sequence[Memory],
    shared: dict[str, list[_Shared]],
    where: dict[str, tuple[str, Any]],
    linked: set[tuple[str, str]],
    limit: int,
    *,
    newest: int | None = _NEWEST,
    hub: int = _HUB,
    kept: MentionLists | None = None,
    added: _Unwritten | None = None,
    rules_only: bool = False,
) -> dict[str, list[Pair]]:
    """The pairs of `find_pairs_many` from the newer memories' entities (`shared`), scopes
    and times (`where`) and the pairs a SUPERSEDES edge links already (`linked`).

    A hub entity's older memories are read only as far as its `newest` (all of them when
    None); a newer memory whose judging would read past the end of such a list is judged
    again from full lists, so the pairs are the same as from full lists. `kept`: lists
    read before, still good (`MentionLists`); `added`: what a batch not yet written adds;
    `rules_only`: the pairs no rule can decide (`may_supersede`) left out, before what only
    judging reads of them (their shared tools) is looked up."""
    mentioned, cut = _mentioned(graph, shared, where, newest, hub, kept, added)
    everyone = sorted({row for rows in mentioned.values() for row in rows}, key=lambda r: r[1])
    everyone.sort(key=lambda r: r[0], reverse=True)  # stable: by slug among equal times
    rank = {row: i for i, row in enumerate(everyone)}
    ranked = {key: sorted(rank[row] for row in rows) for key, rows in mentioned.items()}
    members = {key: {o for _, o in rows} for key, rows in mentioned.items()}
    chosen: dict[str, list[tuple[str, _Shared]]] = {}
    again: list[Memory] = []
    for memory in newers:
        if memory.slug not in where:
            continue
        decided = set(memory.meta.supersedes) | {d.older for d in memory.meta.supersede_decisions}
        decided |= {r.object for r in memory.meta.relations if r.label == "amends"}
        decided |= {o for n, o in linked if n == memory.slug}
        decided.add(memory.slug)
        picks = _nearest(
            sorted(shared[memory.slug], key=lambda e: (e.count, e.id)),
            where[memory.slug],
            decided,
            limit,
            everyone,
            ranked,
            members,
            cut,
        )
        if picks is None:
            again.append(memory)
        else:
            chosen[memory.slug] = picks
    full: dict[str, list[Pair]] = {}
    if again:
        mine = {m.slug: shared[m.slug] for m in again}
        full = _ranked_pairs(
            graph,
            again,
            mine,
            where,
            linked,
            limit,
            newest=None,
            kept=kept,
            added=added,
            rules_only=rules_only,
        )
    olders = sorted({o for picks in chosen.values() for o, _ in picks})
    texts = _texts(graph, olders, kept, added)
    if rules_only:
        newer_text = {m.slug: pair_texts(m.meta.title, m.body) for m in newers}
        chosen = {
            m: [(o, e) for o, e in picks if may_supersede(newer_text[m], texts[o])]
            for m, picks in chosen.items()
        }
    # Which of its newer memory's tools and libraries each chosen older one mentions: a
    # list read in full or as far as the older one says; past a hub's last row read, its
    # own edges say.
    where_in = {o: i for i, (_, o) in enumerate(everyone)}
    mentions: dict[str, set[str]] = {}
    unsure: set[tuple[str, str]] = set()
    for m, picks in chosen.items():
        scope = where[m][0]
        for o, _ in picks:
            for e in shared[m]:
                if e.type not in GRAPH_CHOICE_TYPES or not e.name:
                    continue
                key = (e.id, scope)
                if key in cut and where_in[o] > (ranked[key][-1] if ranked.get(key) else -1):
                    unsure.add((o, e.id))
                elif o in members.get(key, ()):
                    mentions.setdefault(o, set()).add(e.id)
    _edges_say(graph, unsure, added, mentions)
    # Each tool or library as a `Name` once, not once per pair that shares it.
    names = {e.id: _name(e) for m in chosen for e in shared[m] if e.type in GRAPH_CHOICE_TYPES}
    by_count = {
        m: [e for e in sorted(shared[m], key=lambda e: (e.count, e.id)) if e.name and e.id in names]
        for m in chosen
    }
    out = {
        m: [
            Pair(o, texts[o], e.id, e.name, _known(by_count[m], mentions.get(o, set()), names))
            for o, e in picks
        ]
        for m, picks in chosen.items()
    }
    return {m.slug: full.get(m.slug, out.get(m.slug, [])) for m in newers}


def _mentioned(
    graph: GraphStore,
    shared: dict[str, list[_Shared]],
    where: dict[str, tuple[str, Any]],
    newest: int | None,
    hub: int,
    kept: MentionLists | None = None,
    added: _Unwritten | None = None,
) -> tuple[dict[tuple[str, str], list[tuple[Any, str]]], dict[tuple[str, str], int]]:
    """Per (entity, scope), the older memories mentioning it as (created_at, slug); and the
    lists read only as far as their `newest` (a hub's), with how many rows were read. The
    lists `kept` holds for every scope asked are not read again (a list it holds cut short
    only when `newest` allows one); those read are kept. `added`: a batch not yet written,
    whose memories join the lists (an entity it creates has no other)."""
    mentioned: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    cut: dict[tuple[str, str], int] = {}
    if not shared:
        return mentioned, cut
    counts = {e.id: e.count for entities in shared.values() for e in entities}
    scopes = sorted({scope for scope, _ in where.values()})
    generation = graph.recall_generation
    wanted = [(eid, scope) for eid in counts for scope in scopes]
    held = {} if kept is None else kept.lists(generation, wanted)
    known = _with_batch({}, added, scopes)
    for eid in counts:
        lists = [held.get((eid, scope)) for scope in scopes]
        if all(x is not None and (newest is not None or not x[1]) for x in lists):
            known.update(((eid, scope), x) for scope, x in zip(scopes, lists, strict=True) if x)
    hubs = sorted(
        i
        for i, n in counts.items()
        if newest is not None and n > hub and (i, scopes[0]) not in known
    )
    rest = sorted(set(counts) - set(hubs) - {eid for eid, _ in known})
    read: Lists = {}
    if rest:
        for eid in rest:
            for scope in scopes:
                read[(eid, scope)] = ([], False)
        asked = {"scopes": scopes, "types": list(JUDGED_TYPES)}
        if len(rest) <= KEYED_ROWS:
            rows = [
                [eid, *row]
                for eid in rest
                for row in graph.cypher(
                    _MENTIONED_BY_ONE, {"id": eid, **asked}, limit=100_000_000
                ).rows
            ]
        else:
            rows = graph.cypher(_MENTIONED_BY, {"ids": rest, **asked}, limit=100_000_000).rows
        for eid, scope, o, created in rows:
            read[(str(eid), str(scope))][0].append((created, str(o)))
    for eid in hubs:
        for scope in scopes:
            found = graph.cypher(
                f"{_MENTIONED_NEWEST} LIMIT {int(newest or 0)}",  # a number in any engine's LIMIT
                {"id": eid, "scope": scope, "types": list(JUDGED_TYPES)},
                limit=(newest or 0) + 1,
            ).rows
            newest_first = [(created, str(o)) for o, created in found]
            read[(eid, scope)] = (newest_first, len(found) >= (newest or 0))
    if kept is not None:
        kept.keep(generation, graph.recall_generation, read)
    known, read = _with_batch(known, added), _with_batch(read, added)
    for key, (older, short) in (*known.items(), *read.items()):
        if older:
            mentioned[key] = older
        if short:
            cut[key] = len(older)
    return mentioned, cut


def _edges_say(
    graph: GraphStore,
    unsure: set[tuple[str, str]],
    added: _Unwritten | None,
    mentions: dict[str, set[str]],
) -> None:
    """Into `mentions`, which of the `unsure` (older memory, entity) pairs are mentions: a
    batch not yet written (`added`) knows its own, the graph's edges say for the rest."""
    if added is not None:
        for o, eid in [(o, eid) for o, eid in sorted(unsure) if o in added.mentions]:
            unsure.discard((o, eid))
            if eid in added.mentions[o]:
                mentions.setdefault(o, set()).add(eid)
    if not unsure:
        return
    for o, eid in graph.cypher(
        _MENTIONS_OF,
        {"slugs": sorted({o for o, _ in unsure}), "ids": sorted({i for _, i in unsure})},
        limit=10_000_000,
    ).rows:
        if (str(o), str(eid)) in unsure:
            mentions.setdefault(str(o), set()).add(str(eid))


def _with_batch(lists: Lists, added: _Unwritten | None, scopes: Sequence[str] = ()) -> Lists:
    """The lists with a batch's memories in their places (`merged_rows`); with `scopes`,
    instead the empty lists of the entities it creates (no stored memory mentions them)."""
    if added is None:
        return lists
    if scopes:
        return {(e, scope): ([], False) for e in added.fresh for scope in scopes}
    return {
        key: (merged_rows(older, added.rows[key], short=short), short)
        if key in added.rows
        else (older, short)
        for key, (older, short) in lists.items()
    }


def _texts(
    graph: GraphStore, slugs: list[str], kept: MentionLists | None, added: _Unwritten | None
) -> dict[str, str]:
    """The older memories' texts as judging reads them (`pair_texts`), those `kept` holds
    or a batch not yet written has (`added`) not read; those read are kept."""
    generation = graph.recall_generation
    texts = {} if added is None else {s: added.texts[s] for s in slugs if s in added.texts}
    if kept is not None:
        texts.update(kept.texts(generation, [s for s in slugs if s not in texts]))
    missing = [slug for slug in slugs if slug not in texts]
    if missing:
        read = {
            str(slug): pair_texts(str(title), str(body or ""))
            for slug, title, body in graph.cypher(
                "UNWIND $slugs AS s MATCH (o:Memory {slug: s}) RETURN o.slug, o.title, o.body",
                {"slugs": missing},
                limit=10_000_000,
            ).rows
        }
        if kept is not None:
            kept.keep(generation, graph.recall_generation, {}, read)
        texts.update(read)
    return texts


def _name(entity: _Shared) -> Name:
    """A tool or library the graph knows, as judging reads it: its name and aliases."""
    return Name(entity.name, tuple(dict.fromkeys([entity.name, *entity.aliases])), entity.type)


def _known(
    entities: list[_Shared], mentioned: set[str], names: dict[str, Name]
) -> tuple[Name, ...]:
    """The tools and libraries of a newer memory's `entities` (named ones of
    `GRAPH_CHOICE_TYPES`, in order) an older one mentions."""
    return tuple(names[s.id] for s in entities if s.id in mentioned)


def _nearest(
    entities: list[_Shared],
    at: tuple[str, Any],
    decided: set[str],
    limit: int,
    everyone: list[tuple[Any, str]],
    ranked: dict[tuple[str, str], list[int]],
    members: dict[tuple[str, str], set[str]],
    cut: dict[tuple[str, str], int],
) -> list[tuple[str, _Shared]] | None:
    """The `limit` older memories of one newer memory's scope (`at`: its scope and time) that
    share one of its `entities` (least mentioned first), as `_pairs` ranks them: by their
    least mentioned shared entity, then newest first; each with that entity. Reads only as
    far as the `limit`th. None when that would read past the end of a list `cut` short
    (what follows it is unknown)."""
    scope, created = at
    out: list[tuple[str, _Shared]] = []
    taken: set[str] = set()
    i = 0
    while i < len(entities) and len(out) < limit:
        group = [e for e in entities[i:] if e.count == entities[i].count]
        i += len(group)
        first: dict[str, _Shared] = {}  # older slug -> its entity in this group (by id)
        lists = [(e, ranked.get((e.id, scope), [])) for e in group]
        # Past the last row read of a cut list, its unread rows would come first.
        ends = [rows[-1] if rows else -1 for e, rows in lists if (e.id, scope) in cut]
        bound = min(ends, default=None)
        for r in heapq.merge(*(rows for _, rows in lists)):
            if bound is not None and r > bound:
                return None
            when, o = everyone[r]
            if o in taken or o in decided or when > created or o in first:
                continue
            first[o] = next(e for e, _ in lists if o in members.get((e.id, scope), ()))
            out.append((o, first[o]))
            if len(out) >= limit:
                break
        else:
            if bound is not None:  # every row read was used up: the cut lists go on
                return None
        taken.update(first)
    return out


def pair_of(graph: GraphStore, newer: str, older: str) -> Pair | None:
    """One pair as `find_pairs` sees it (the older memory's text and the tools and
    libraries both mention), whatever was decided about it; None when the older memory is
    gone, forgotten or sensitive."""
    rows = graph.cypher(
        "MATCH (o:Memory {slug: $older}) WHERE o.decay_state <> 'forgotten' AND NOT o.sensitive"
        " OPTIONAL MATCH (n:Memory {slug: $newer})-[:MENTIONS]->(e:Entity)<-[:MENTIONS]-(o)"
        " RETURN o.title, o.body, e.id, e.name, e.type, e.aliases",
        {"newer": newer, "older": older},
        limit=10_000,
    ).rows
    if not rows:
        return None
    known: dict[str, Name] = {}
    for _title, _body, eid, name, etype, aliases in rows:
        if eid is not None and etype in GRAPH_CHOICE_TYPES and name:
            surfaces = tuple(dict.fromkeys([str(name), *(str(a) for a in aliases or ())]))
            known[str(eid)] = Name(str(name), surfaces, str(etype))
    title, body, eid, name = rows[0][:4]
    return Pair(
        older,
        pair_texts(str(title), str(body or "")),
        None if eid is None else str(eid),
        str(name or ""),
        tuple(known.values()),
    )


def automatic(graph: GraphStore, scope_hash: str | None = None) -> list[SupersedeRow]:
    """Automatic supersede decisions (active and candidates) with their judge, rules
    version and reason, newest first."""
    return _edge_rows(
        graph,
        "r.decided_by = 'auto' AND r.status IN ['active', 'candidate']",
        "r.decided_at DESC, n.slug, o.slug",
        scope_hash,
        limit=1_000_000,
    )


def _edge_rows(
    graph: GraphStore, where: str, order: str, scope_hash: str | None, *, limit: int
) -> list[SupersedeRow]:
    """SUPERSEDES edges matching `where` (over `n`-[r]->`o`) in the scope, as rows."""
    result = graph.cypher(
        f"MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) WHERE {where}"
        " AND ($scope IS NULL OR n.scope_hash = $scope)"
        " RETURN n.slug, o.slug, r.entity_id, r.confidence, r.decided_at, r.decided_by,"
        f" r.reason, r.status, r.judge, r.rules ORDER BY {order}",
        {"scope": scope_hash},
        limit=limit,
    )
    keys = list(SupersedeRow.model_fields)  # the RETURN order above
    return [SupersedeRow.model_validate(dict(zip(keys, r, strict=True))) for r in result.rows]


def new_decisions(job: SupersedeJob, tiers: Tiers, now: datetime) -> list[SupersedeDecision]:
    """The decisions the job's verdicts make: automatic or candidate; the rest are ignored."""
    entity = {p.older: p.entity_id for p in job.pairs}
    limit_fan_out(job.verdicts, tiers)
    out: list[SupersedeDecision] = []
    for older, verdict in job.verdicts.items():
        status = tiers.status(verdict.confidence)
        if status is None:
            continue
        out.append(
            SupersedeDecision(
                older=older,
                status=status,
                confidence=verdict.confidence,
                decided_by="auto",
                decided_at=now,
                judge=verdict.judge,
                entity_id=entity.get(older),
                reason=verdict.reason,
                rules=RULES_VERSION if verdict.judge.startswith("rule:") else None,
            )
        )
    return out


def with_decisions(memory: Memory, decisions: Sequence[SupersedeDecision]) -> dict[str, Any]:
    """Frontmatter changes that add these decisions (replacing any about the same pair)."""
    changed = {d.older: d for d in decisions}
    kept = [d for d in memory.meta.supersede_decisions if d.older not in changed]
    supersedes = [s for s in memory.meta.supersedes if s not in changed]
    supersedes += [d.older for d in decisions if d.status is SupersedeStatus.ACTIVE]
    return {
        "supersede_decisions": [*kept, *decisions],
        "supersedes": list(dict.fromkeys(supersedes)),
    }


SupersedeAction = Literal["undo", "accept", "reject"]
_ACTION_NEEDS: dict[str, SupersedeStatus] = {
    "undo": SupersedeStatus.ACTIVE,
    "accept": SupersedeStatus.CANDIDATE,
    "reject": SupersedeStatus.CANDIDATE,
}
_ACTION_GIVES: dict[str, SupersedeStatus] = {
    "undo": SupersedeStatus.UNDONE,
    "accept": SupersedeStatus.ACTIVE,
    "reject": SupersedeStatus.REJECTED,
}


def current_decision(newer: Memory, older: str) -> SupersedeDecision | None:
    """Where the pair stands in the newer memory's file; a slug in `supersedes` without a
    kept decision was set by hand (active, decided by the user)."""
    for d in newer.meta.supersede_decisions:
        if d.older == older:
            return d
    if older in newer.meta.supersedes:
        return SupersedeDecision(older=older, decided_by="user", decided_at=newer.meta.created_at)
    return None


def decide(
    newer: Memory, older: str, action: SupersedeAction, *, by: str, now: datetime
) -> SupersedeDecision:
    """The decision a person's `undo`, `accept` or `reject` makes of the pair.

    Raises NotFound when the pair was never judged and Conflict when it is not in the state
    the action needs (accepting twice, undoing a candidate)."""
    current = current_decision(newer, older)
    if current is None:
        raise NotFound(
            f"{newer.slug} has no supersede decision about {older}",
            hint="`memoryd supersede list` shows the candidates waiting for a decision",
        )
    needed = _ACTION_NEEDS[action]
    if current.status is not needed:
        verb = {"undo": "undo", "accept": "accept", "reject": "reject"}[action]
        raise Conflict(
            f"cannot {verb} {newer.slug} → {older}: it is {current.status.value}"
            f" (decided by {current.decided_by}), not {needed.value}",
            hint="undo applies to active supersedes, accept and reject to candidates",
        )
    return current.model_copy(
        update={"status": _ACTION_GIVES[action], "decided_by": by, "decided_at": now}
    )


def candidates(graph: GraphStore, scope_hash: str | None = None) -> list[SupersedeRow]:
    """Supersede candidates waiting for a human (SUPERSEDES edges with status `candidate`),
    most confident first: `memoryd supersede list` and the digest."""
    return _edge_rows(
        graph,
        "r.status = 'candidate'",
        "r.confidence DESC, r.decided_at, n.slug",
        scope_hash,
        limit=100_000,
    )
