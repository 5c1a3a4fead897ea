"""What `record`'s supersede judging keeps of the graph from one record to the next
(`MentionLists`): the older memories that mention each entity, per scope, and their texts,
read for a whole scope at once (`warm`) or entity by entity. `supersede_graph` reads
through it."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from memoryd.graph.rows import graph_rows, jsonable
from memoryd.graph.store import GraphStore
from memoryd.models import DecayState, Memory

JUDGED_TYPES = ("decision", "preference", "fact")
"""The older memories a new one may supersede (seeds/002 §5)."""

_KEPT_ROWS = 100_000
"""Rows and texts `MentionLists` holds before it starts over (a scope of 10k memories
holds ~30k rows)."""

_WARM_ROWS = _KEPT_ROWS // 2
"""A scope is read whole (`MentionLists.warm`) while its lists and texts fit in this many rows;
a bigger one is read entity by entity, as judging needs them."""
_WARM_MENTIONS = (
    "MATCH (o:Memory)-[:MENTIONS]->(e:Entity) WHERE o.scope_hash = $scope AND o.type IN $types"
    " AND o.decay_state <> 'forgotten' AND NOT o.sensitive RETURN e.id, o.slug, o.created_at"
)
_WARM_TEXTS = (
    "MATCH (o:Memory) WHERE o.scope_hash = $scope AND o.type IN $types"
    " AND o.decay_state <> 'forgotten' AND NOT o.sensitive RETURN o.slug, o.title, o.body"
)

Lists = dict[tuple[str, str], tuple[list[tuple[Any, str]], bool]]
"""Per (entity id, scope hash): the older memories mentioning it as (created_at, slug), and
whether the list was read only as far as its newest rows (a hub's)."""


class MentionLists:
    """What `record`'s judging read of the graph, kept from one record to the next: per
    (entity, scope) the older memories `_mentioned` read as mentioning it, and the older
    memories' texts. Reading them again was about half of a record's judging at 10k
    memories (bench/RESULTS.md). They hold while the graph's `recall_generation` is the one
    they were read at or moved to by `wrote`: a `record`'s own write adds its memory; any
    other write that may change them (a batch, a delete, a merge, a decay sweep, an edit;
    not recall counts) drops them all, and the next record reads what it needs again. The
    graph's writes are this process's (one process writes a graph).

    A scope read whole (`warm`) holds every list of it, so an entity it holds no list of is
    mentioned by no older memory there, and the texts of all its judged memories: a record
    that meets an entity for the first time reads nothing."""

    def __init__(self) -> None:
        self._at = -1
        self._lists: Lists = {}
        self._texts: dict[str, str] = {}
        self._rows = 0
        self._entities: dict[str, tuple[Any, ...]] = {}
        """Entity id → (id, name, mention count, type, aliases) as the graph gave them."""
        self._whole: set[str] = set()
        """The scopes read whole at `_at`."""
        self._too_big: set[str] = set()
        """Scopes found past `_WARM_ROWS` (kept across writes: a scope seldom shrinks)."""
        self._lock = threading.Lock()

    def warm(self, graph: GraphStore, scope_hash: str) -> bool:
        """Read every list and text of the scope at once, unless it holds them already or
        the scope is too big (`_WARM_ROWS`): two statements that scan the scope's judged
        memories, where a record meeting an entity for the first time read its list by key
        (a scan of the entity's mentions) and its olders' texts. Nothing is kept when a
        write committed meanwhile. Whether the scope is held whole now."""
        from memoryd.governance.supersede_pairs import pair_texts

        generation = graph.recall_generation
        with self._lock:
            self._check(generation)
            if scope_hash in self._whole:
                return True
            if scope_hash in self._too_big:
                return False
        asked = {"scope": scope_hash, "types": list(JUDGED_TYPES)}
        mentions = graph.cypher(_WARM_MENTIONS, asked, limit=_WARM_ROWS)
        texts = None
        if not mentions.truncated:
            texts = graph.cypher(_WARM_TEXTS, asked, limit=_WARM_ROWS - len(mentions.rows))
        if texts is None or texts.truncated:
            with self._lock:
                self._too_big.add(scope_hash)
            return False
        lists: dict[str, list[tuple[Any, str]]] = {}
        for eid, slug, created in mentions.rows:
            lists.setdefault(str(eid), []).append((created, str(slug)))
        read = {
            str(slug): pair_texts(str(title), str(body or "")) for slug, title, body in texts.rows
        }
        with self._lock:
            if graph.recall_generation != generation or self._at != generation:
                return False
            for key in [key for key in self._lists if key[1] == scope_hash]:
                self._rows -= len(self._lists.pop(key)[0])
            for eid, rows in lists.items():
                self._lists[(eid, scope_hash)] = (rows, False)
                self._rows += len(rows)
            for slug, text in read.items():
                self._rows += slug not in self._texts
                self._texts[slug] = text
            self._whole.add(scope_hash)
            if self._rows > _KEPT_ROWS:
                self._forget(generation)
                return False
        return True

    def lists(self, generation: int, keys: Sequence[tuple[str, str]]) -> Lists:
        """Copies of the lists of these keys it holds, as good at `generation` (an empty one
        for an entity of a scope read whole that no older memory there mentions)."""
        with self._lock:
            self._check(generation)
            out: Lists = {}
            for key in keys:
                held = self._lists.get(key)
                if held is not None:
                    out[key] = (list(held[0]), held[1])
                elif key[1] in self._whole:
                    out[key] = ([], False)
            return out

    def texts(self, generation: int, slugs: Sequence[str]) -> dict[str, str]:
        """The texts of these older memories it holds, as good at `generation`."""
        with self._lock:
            self._check(generation)
            return {slug: self._texts[slug] for slug in slugs if slug in self._texts}

    def entities(self, generation: int, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """The rows it holds of these entities, as good at `generation`."""
        with self._lock:
            self._check(generation)
            return {eid: self._entities[eid] for eid in ids if eid in self._entities}

    def keep_entities(self, before: int, after: int, rows: Sequence[Sequence[Any]]) -> None:
        """Keep entity rows read at `before`: nothing when a write committed meanwhile."""
        with self._lock:
            if before == after == self._at and len(self._entities) < _KEPT_ROWS:
                self._entities.update((str(row[0]), tuple(row)) for row in rows)

    def keep(
        self, before: int, after: int, lists: Lists, texts: dict[str, str] | None = None
    ) -> None:
        """Keep what was read at `before`: nothing when a write committed meanwhile."""
        with self._lock:
            if before != after or self._at != before:
                return
            for key, (rows, short) in lists.items():
                old = self._lists.get(key)
                self._rows += len(rows) - (len(old[0]) if old else 0)
                self._lists[key] = (list(rows), short)
            for slug, text in (texts or {}).items():
                self._rows += slug not in self._texts
                self._texts[slug] = text
            if self._rows > _KEPT_ROWS:
                self._forget(before)

    def wrote(self, graph: GraphStore, memory: Memory, before: int) -> None:
        """Move what it holds by `memory`, which one write took the graph from generation
        `before` to its `recall_generation` now (else it drops all): the memory is older
        than every one judged after it, in the lists of the entities it mentions when
        judging reads it."""
        from memoryd.governance.supersede_pairs import pair_texts

        with self._lock:
            if self._at != before or graph.recall_generation != before + 1:
                self._forget(graph.recall_generation)
                return
            self._at = before + 1
            meta = memory.meta
            mentions = graph_rows([memory]).mentions
            for _, eid in mentions:  # the write counted one mention of each (`_ENTITY_COUNTED`)
                held = self._entities.get(eid)
                if held is not None:
                    self._entities[eid] = (*held[:2], int(held[2] or 0) + 1, *held[3:])
            if not _judged(memory):
                return
            self._texts[meta.slug] = pair_texts(meta.title, memory.body)
            self._rows += 1
            row = (jsonable(meta.created_at), meta.slug)
            for _, eid in mentions:
                held = self._lists.get((eid, meta.scope_hash))
                if held is None and meta.scope_hash in self._whole:
                    held = self._lists[(eid, meta.scope_hash)] = ([], False)
                if held is None:
                    continue
                rows, short = held
                # Newest first, by slug among equals (the order a cut list was read in).
                at = next(
                    (
                        i
                        for i, (c, o) in enumerate(rows)
                        if c < row[0] or (c == row[0] and o > row[1])
                    ),
                    len(rows),
                )
                if short and at == len(rows):
                    continue  # past a cut list's last row: not read either way
                rows.insert(at, row)
                self._rows += 1
            if self._rows > _KEPT_ROWS:
                self._forget(self._at)

    def passed(self, graph: GraphStore, memories: Sequence[Memory], before: int) -> None:
        """Keep what it holds across one write that took the graph from `before` to its
        `recall_generation` now and rewrote only these memories (as they were and are), none
        of them judged (`_judged`) either way: no list or text it holds names them (a
        session's enrichment, say). Any other write drops it all on the next look."""
        with self._lock:
            if (
                self._at == before
                and graph.recall_generation == before + 1
                and not any(_judged(m) for m in memories)
            ):
                self._at = before + 1
                self._entities.clear()  # its mentions moved some counts

    def wrote_many(self, graph: GraphStore, memories: Sequence[Memory], before: int) -> None:
        """`wrote` for a batch that one write added (`record_many`): its memories join the
        lists they belong to, in order, so the next batch does not read a hub again."""
        from memoryd.governance.supersede_pairs import pair_texts

        with self._lock:
            if self._at != before or graph.recall_generation != before + 1:
                self._forget(graph.recall_generation)
                return
            self._at = before + 1
            self._entities.clear()  # the batch's mentions moved their counts
            rows = judged_rows(memories)
            for key, added in rows.items():
                held = self._lists.get(key)
                if held is None and key[1] in self._whole:
                    held = ([], False)  # a scope read whole: no older memory mentioned it
                if held is not None:
                    merged = merged_rows(held[0], added, short=held[1])
                    self._rows += len(merged) - len(held[0])
                    self._lists[key] = (merged, held[1])
            judged = {slug for added in rows.values() for _, slug in added}
            for memory in memories:
                if memory.slug in judged:
                    self._texts[memory.slug] = pair_texts(memory.meta.title, memory.body)
                    self._rows += 1
            if self._rows > _KEPT_ROWS:
                self._forget(self._at)

    def _check(self, generation: int) -> None:
        if self._at != generation:
            self._forget(generation)

    def _forget(self, generation: int) -> None:
        self._entities.clear()
        self._whole.clear()
        self._lists.clear()
        self._texts.clear()
        self._rows = 0
        self._at = generation


def _judged(memory: Memory) -> bool:
    """Whether judging reads the memory as an older one (its lists and texts hold it)."""
    meta = memory.meta
    return (
        meta.type.value in JUDGED_TYPES
        and not memory.sensitive
        and meta.decay_state is not DecayState.FORGOTTEN
    )


def judged_rows(
    memories: Sequence[Memory], mentions: Iterable[tuple[str, str]] | None = None
) -> dict[tuple[str, str], list[tuple[Any, str]]]:
    """Per (entity id, scope hash), the memories of a batch that judging reads as older ones
    of that entity (a judged type, not sensitive, not forgotten), as the graph will hold
    them once written: (created_at as the graph gives it back, slug). `mentions`: the
    batch's (slug, entity id) as `graph_rows` gives them, when the caller has them."""
    judged = [m for m in memories if _judged(m)]
    named: dict[str, list[str]] = {}
    for slug, eid in graph_rows(judged).mentions if mentions is None else mentions:
        named.setdefault(slug, []).append(eid)
    out: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    for memory in judged:
        meta = memory.meta
        row = (jsonable(meta.created_at), meta.slug)
        for eid in named.get(meta.slug, ()):
            out.setdefault((eid, meta.scope_hash), []).append(row)
    return out


def merged_rows(
    rows: list[tuple[Any, str]], added: Sequence[tuple[Any, str]], *, short: bool
) -> list[tuple[Any, str]]:
    """`rows` (newest first, by slug among equal times) with `added` in their places; of a
    list read only as far as its newest (`short`), those that would fall past its last row
    are left out: what lies there is unknown, and judging reads it again when it gets there."""
    held = set(rows)
    extra = [row for row in dict.fromkeys(added) if row not in held]
    if not extra:
        return list(rows)
    if short and rows:
        last = rows[-1]
        extra = [r for r in extra if r[0] > last[0] or (r[0] == last[0] and r[1] < last[1])]
    elif short:
        extra = []
    out = sorted([*rows, *extra], key=lambda r: r[1])
    out.sort(key=lambda r: r[0], reverse=True)  # stable: by slug among equal times
    return out
