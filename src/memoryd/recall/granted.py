"""A granted sensitive scope, in memory only: its search index and its entity view.

On disk a sensitive scope's memories are encrypted files and skeleton graph nodes (slug,
scope, type, times, decay state); the search index holds nothing of them. While a grant is
active the service decrypts the scope once into a `ScopeView`: an in-memory tantivy index
(`SearchIndex.in_memory`) and `MemoryGraph`, the entity reads recall makes, answered from the
memories' own observations and relations exactly as the graph store derives them. Recall in
the scope runs the same `RecallPipeline` over these; the view is dropped when the grant ends,
and nothing of it is ever written.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memoryd.graph.store import CypherResult, EntityRow
from memoryd.models import DecayState, Memory, MemorySummary, Predicate
from memoryd.recall import conversation
from memoryd.recall.entities import EntityMatcher, build_matcher
from memoryd.search.index import SearchDoc, SearchIndex

MAX_FANOUT = 64
"""As the graph store's default: neighbours followed per node in a traversal."""


def _entity_parts(eid: str) -> tuple[str, str]:
    """`entity:library:React` → ("library", "React"), as the graph store splits ids."""
    _, _, rest = eid.partition(":")
    etype, _, name = rest.partition(":")
    return etype or "concept", name or eid


@dataclass
class MemoryGraph:
    """The entity reads of `RecallPipeline` over one scope's memories, held in memory."""

    max_fanout: int = MAX_FANOUT
    generation: int = 0
    _mentions: dict[str, list[tuple[Any, str, float]]] = field(default_factory=dict)
    """entity id → (created_at, slug, confidence) of the memories mentioning it."""
    _relations: list[tuple[str, str, str, float]] = field(default_factory=list)
    """Current entity→entity relations: (from, to, predicate, confidence)."""
    _supersedes: dict[str, str] = field(default_factory=dict)
    _entities: dict[str, EntityRow] = field(default_factory=dict)

    @classmethod
    def of(cls, memories: Iterable[Memory], max_fanout: int = MAX_FANOUT) -> MemoryGraph:
        graph = cls(max_fanout=max_fanout)
        mentions: dict[tuple[str, str], tuple[Any, float]] = {}
        relations: dict[tuple[str, str, str], float] = {}
        counts: Counter[str] = Counter()
        for memory in memories:
            meta = memory.meta
            if meta.decay_state is DecayState.FORGOTTEN:
                continue
            for older in meta.supersedes:
                graph._supersedes.setdefault(older, meta.slug)
            for eid in meta.observations:
                graph._entity(eid, meta.scope_hash)
                mentions[(eid, meta.slug)] = (meta.created_at, 1.0)
            for rel in meta.relations:
                subject = rel.subject or meta.slug
                for end in (subject, rel.object):
                    if end.startswith("entity:"):
                        graph._entity(end, meta.scope_hash)
                if rel.superseded_at is not None:
                    continue
                if rel.predicate is Predicate.MENTIONS and subject == meta.slug:
                    if rel.object.startswith("entity:"):
                        prior = mentions.get((rel.object, meta.slug), (None, 0.0))[1]
                        mentions[(rel.object, meta.slug)] = (
                            meta.created_at,
                            max(prior, rel.confidence),
                        )
                    continue
                if subject.startswith("entity:") and rel.object.startswith("entity:"):
                    key = (subject, rel.object, rel.predicate.value)
                    relations[key] = max(relations.get(key, 0.0), rel.confidence)
        for (eid, slug), (created_at, conf) in mentions.items():
            graph._mentions.setdefault(eid, []).append((created_at, slug, conf))
            counts[eid] += 1
        for eid, row in graph._entities.items():
            row.mention_count = counts[eid]
        graph._relations = [(s, o, p, c) for (s, o, p), c in sorted(relations.items())]
        return graph

    def _entity(self, eid: str, scope_hash: str) -> None:
        if eid not in self._entities:
            etype, name = _entity_parts(eid)
            self._entities[eid] = EntityRow(id=eid, name=name, type=etype, scope_hash=scope_hash)

    def entity_catalogue(self) -> list[EntityRow]:
        return [row.model_copy() for row in self._entities.values()]

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]:
        """As `GraphStore.mentioning`: newest first, at most `max_fanout` per entity (the
        view holds one scope, so `scope_hashes` can only narrow it to itself)."""
        out: list[tuple[str, str, float]] = []
        for eid in dict.fromkeys(entity_ids):
            found = sorted(self._mentions.get(eid, ()), key=lambda row: row[1])
            found.sort(key=lambda row: row[0], reverse=True)
            out.extend((eid, slug, conf) for _, slug, conf in found[: self.max_fanout])
        return out

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]:
        """As `GraphStore.related_entities`: both directions, capped per entity."""
        out: list[tuple[str, str, str, float]] = []
        for eid in dict.fromkeys(entity_ids):
            best: dict[tuple[str, str], float] = {}
            for src, dst, pred, conf in self._relations:
                if eid in (src, dst):
                    other = dst if src == eid else src
                    best[(other, pred)] = max(best.get((other, pred), 0.0), conf)
            found = sorted(best.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
            out.extend((eid, o, p, c) for (o, p), c in found[: self.max_fanout])
        return out

    def superseded_by(self, slugs: Sequence[str]) -> dict[str, str]:
        return {slug: self._supersedes[slug] for slug in slugs if slug in self._supersedes}

    def neighbourhood(self, entity_id: str, *, depth: int = 1) -> CypherResult:
        """The stored relations one hop around `entity_id` (recall asks for one hop)."""
        frontier, seen = [entity_id], {entity_id}
        rows: list[list[Any]] = []
        for _ in range(max(1, min(depth, 3))):
            nxt: list[str] = []
            for src, dst, pred, conf in self._relations:
                if src in frontier or dst in frontier:
                    rows.append([src, pred, dst, conf])
                    for end in (src, dst):
                        if end not in seen:
                            seen.add(end)
                            nxt.append(end)
            frontier = nxt
            if not frontier:
                break
        unique = list({(r[0], r[1], r[2]): r for r in rows}.values())
        return CypherResult(columns=["from", "predicate", "to", "confidence"], rows=unique)


class ScopeView:
    """One granted scope's decrypted memories, searchable and linked, in memory only."""

    def __init__(
        self,
        scope_hash: str,
        memories: Iterable[Memory],
        *,
        stamp: object,
        max_fanout: int = MAX_FANOUT,
    ) -> None:
        self.scope_hash = scope_hash
        self.stamp = stamp
        """What the scope's files looked like when the view was built (`ScopeViews`)."""
        self.memories = {m.slug: m for m in memories if m.meta.scope_hash == scope_hash}
        self.graph = MemoryGraph.of(self.memories.values(), max_fanout)
        self.index = SearchIndex.in_memory(scope_hash)
        docs = [
            plain_doc(m)
            for m in self.memories.values()
            if m.meta.decay_state is not DecayState.FORGOTTEN
        ]
        self.index.upsert(docs)
        # The statistics recall ranks with, counted from what was just indexed: the first
        # recall under the grant does not read 10k documents back.
        self.index.tally(scope_hash, docs, conversation.is_turn)
        self._matcher: EntityMatcher | None = None

    def matcher(self) -> EntityMatcher:
        if self._matcher is None:
            self._matcher = build_matcher(self.graph.entity_catalogue())
        return self._matcher

    def summaries(self, slugs: Sequence[str] | None = None) -> dict[str, MemorySummary]:
        """The `list` rows of these memories (None: all), with their titles."""
        wanted = self.memories if slugs is None else {s: self.memories[s] for s in slugs
                                                      if s in self.memories}  # fmt: skip
        return {
            slug: MemorySummary(
                slug=slug,
                type=m.meta.type,
                title=m.meta.title,
                scope_hash=m.meta.scope_hash,
                source=m.meta.source,
                created_at=m.meta.created_at,
                updated_at=m.meta.updated_at,
                decay_state=m.meta.decay_state,
                tags=m.meta.tags,
                recall_count=m.meta.recall_count,
            )
            for slug, m in wanted.items()
        }

    def close(self) -> None:
        self.index.close()
        self.memories.clear()


class ScopeViews:
    """The views of the granted scopes this process holds: built on first need (the daemon
    builds one as the grant starts), rebuilt when the scope's files changed, dropped when
    the grant ends."""

    def __init__(
        self,
        load: Callable[[str], Iterable[Memory]],
        stamp: Callable[[str], object],
        max_fanout: int = MAX_FANOUT,
    ) -> None:
        self._load = load
        self._stamp = stamp
        self.max_fanout = max_fanout
        self._views: dict[str, ScopeView] = {}
        self._lock = threading.Lock()

    def get(self, scope_hash: str) -> ScopeView:
        stamp = self._stamp(scope_hash)
        with self._lock:
            view = self._views.get(scope_hash)
            if view is not None and view.stamp == stamp:
                return view
            fresh = ScopeView(
                scope_hash, self._load(scope_hash), stamp=stamp, max_fanout=self.max_fanout
            )
            self._views[scope_hash] = fresh
        if view is not None:
            view.close()
        return fresh

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._views)

    def drop(self, scope_hash: str) -> bool:
        """Forget a scope's view (its grant ended); whether one was held."""
        with self._lock:
            view = self._views.pop(scope_hash, None)
        if view is None:
            return False
        view.close()
        return True

    def drop_all(self) -> None:
        for scope_hash in self.held():
            self.drop(scope_hash)


def plain_doc(memory: Memory) -> SearchDoc:
    """The search document of a decrypted memory: its whole text (this index is in RAM)."""
    meta = memory.meta
    # Built from a validated memory: no second validation (a view indexes thousands at once).
    return SearchDoc.model_construct(
        slug=meta.slug,
        scope_hash=meta.scope_hash,
        type=meta.type,
        decay_state=meta.decay_state,
        title=meta.title,
        body=memory.body,
        tags=meta.tags,
        triggers=meta.triggers,
        created_at=meta.created_at,
    )
