"""The entity stage: query words linked to known entities, then the memories mentioning them."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence

from memoryd.extraction.linking import query_name_grams
from memoryd.graph.store import EntityRow
from memoryd.models import EntityType
from memoryd.recall.candidates import NormaliseFn
from memoryd.recall.kinds import _WORD, IMPLIED_KIND_WEIGHT, KIND_ENTITY_LIMIT, KIND_IMPLIED


def named_words(query: str) -> list[str]:
    """The query's words that name someone or something by their form: capitalised, and not
    only because they open a sentence ("What did Caroline paint?" → Caroline)."""
    named: list[str] = []
    for sentence in _SENTENCE_END.split(query.strip()):
        words = _WORD.findall(sentence)
        named.extend(w for w in words[1:] if w[:1].isupper() and not _acronym(w))
    return named


def _acronym(word: str) -> bool:
    """API, POST, GET: an all-capitals word names a thing's kind or a protocol, not someone."""
    letters = [c for c in word if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def entity_weight(mention_count: int) -> float:
    """Rare entities say more than hubs: a project name mentioned everywhere barely ranks."""
    return 1.0 / math.log2(2 + max(mention_count, 0))


class EntityMatcher:
    """Links query words to known entities by normalised name and alias (no NLP at query time)."""

    def __init__(
        self,
        entities: Sequence[EntityRow],
        normalise: NormaliseFn,
        kinds: Mapping[str, str] | None = None,
    ) -> None:
        self._normalise = normalise
        self.by_key: dict[str, set[str]] = {}
        self.entities = {e.id: e for e in entities}
        self.kinds = dict(kinds or {})
        """Entity id → its kind within its type (city, database …), where the lexicon says."""
        self._by_type: dict[str, list[EntityRow]] = {}
        for entity in sorted(entities, key=lambda e: (-e.mention_count, e.id)):
            self._by_type.setdefault(entity.type, []).append(entity)
        self.max_words = 1
        for entity in entities:
            for surface in (entity.name, *entity.aliases):
                key = normalise(surface)
                if len(key) >= 2:
                    self.by_key.setdefault(key, set()).add(entity.id)
                    self.max_words = max(self.max_words, min(4, len(surface.split())))

    def of_kind(self, type_: EntityType, kind: str | None) -> list[tuple[EntityRow, float]]:
        """The known entities of a type (and kind), each with how well it answers for the
        kind (1, or `IMPLIED_KIND_WEIGHT` for an implied kind), the most mentioned first."""
        implied = KIND_IMPLIED.get(kind or "", ())
        rows: list[tuple[EntityRow, float]] = []
        for entity in self._by_type.get(type_, ()):
            own = self.kinds.get(entity.id)
            if kind is None or own == kind:
                rows.append((entity, 1.0))
            elif own in implied:
                rows.append((entity, IMPLIED_KIND_WEIGHT))
            if len(rows) == KIND_ENTITY_LIMIT:
                break
        return rows

    def match(self, query: str, segments: Sequence[str]) -> dict[str, str]:
        """entity id → the query words that named it, matched as names (`query_name_grams`):
        "ecommerce-api" never links "api", nor "the cluster" a tool "cluster"."""
        grams = query_name_grams(query, segments, self.max_words)
        found: dict[str, str] = {}
        for gram in grams:
            for eid in self.by_key.get(self._normalise(gram), ()):
                found.setdefault(eid, gram)
        return found


_SENTENCE_END = re.compile(r"(?<=[.!?？。！])\s+")


def build_matcher(catalogue: Sequence[EntityRow]) -> EntityMatcher:
    """The matcher over these entities, with the shipped lexicon's aliases (Postgres →
    PostgreSQL, USA → United States) and kinds (database, city) for those it names: one
    construction for the graph's entities and for a granted scope's in-memory view."""
    from memoryd.extraction.linking import normalise_name

    ids = {e.id: e for e in catalogue}
    kinds: dict[str, str] = {}
    for eid, aliases, kind in _shipped_names():
        known = ids.get(eid)
        if known is None:
            continue
        if aliases:
            known.aliases = [*known.aliases, *aliases]
        if kind:
            kinds[known.id] = kind
    return EntityMatcher(list(catalogue), normalise_name, kinds)


@functools.cache
def _shipped_names() -> tuple[tuple[str, tuple[str, ...], str], ...]:
    """(entity id, aliases, kind) of the shipped lexicon's and places' entries, in their
    order: the ids cost most of a matcher's build (thousands of hashes), and the daemon
    rebuilds its matcher after every write that adds an entity."""
    from memoryd.extraction.pipeline import load_lexicon, load_places
    from memoryd.models import entity_id

    return tuple(
        (entity_id(entry.type, entry.name), tuple(entry.aliases), entry.kind)
        for entry in (*load_lexicon(), *load_places())
    )
