"""Hybrid recall: BM25 + entity traversal (+ vectors when configured), fused and adjusted.

Pure ranking logic: the service gathers the candidates from the stores and calls these
functions, so every rule here is testable without a database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from memoryd.extraction.linking import query_name_grams
from memoryd.extraction.pipeline import load_everyday_nouns
from memoryd.graph.store import EntityRow
from memoryd.models import DecayState, EntityType, MemoryType, Predicate

RRF_K = 20
"""Reciprocal-rank-fusion constant; lower than the usual 60 because candidate lists are short."""

STAGE_WEIGHTS: Mapping[str, float] = {
    "bm25": 1.0,
    "entity": 0.4,
    "graph": 0.3,
    "kind": 1.0,
    "vector": 0.8,
    "context": 1.0,  # never fused alone: context scores rank within the bm25 ranking (`fuse`)
}
TEXT_STAGES = frozenset({"bm25", "context"})
CONTEXT_SEEDS = 8
"""The best text hits whose neighbouring session turns share their score (fewer since the
index holds each turn's neighbours as its context, `TEXT_CONTEXT_BOOST`)."""
CONTEXT_SPREAD = (0.5, 0.3)
"""Share of a text hit's BM25 score given to the session turns one and two steps away: in a
conversation the answer is often the reply to (or the lead-up of) the turn that matched."""
CONTEXT_WINDOW = timedelta(minutes=30)

PREDICATE_WEIGHTS: Mapping[str, float] = {
    Predicate.PREFERS: 1.0,
    Predicate.USES: 0.9,
    Predicate.WORKS_ON: 0.9,
    Predicate.RUNS_ON: 0.8,
    Predicate.BELONGS_TO: 0.8,
    Predicate.SUPERSEDES: 0.8,
    Predicate.SUPERSEDED_BY: 0.6,
    Predicate.CONFLICTS_WITH: 0.6,
    Predicate.LOCATED_AT: 0.6,
    Predicate.CITES: 0.5,
    Predicate.MENTIONS: 0.5,
}

LONG_TERM_BONUS = 1.15
TITLE_BONUS = 2.0
"""For a memory whose title names all the query asks about: titles name the subject (or the
speaker of a conversation turn), so a question naming it is about that memory before others
that merely use the words. A title naming part of the query gets that share of the bonus
(`MemoryFacts.title_share`)."""
TEXT_TITLE_BOOST = 1.0
"""The title's weight in recall's BM25 stage: as the body's, since `TITLE_BONUS` weighs it
after fusion (counting it in both made a speaker's name outweigh what the query asks)."""
TEXT_CONTEXT_BOOST = 0.15
"""The weight in recall's BM25 stage of a session memory's context (its neighbouring turns'
text, see `memoryd.search.index.CONTEXT_FIELD`): a reply matches on what it answers, well
below what it says itself."""
DIM_PENALTY = 0.9
SUPERSEDED_PENALTY = 0.6
RECENCY_BONUS = 0.1
RECENCY_HALF_LIFE_DAYS = 180.0
ASKING_PENALTY = 0.65
"""For a session turn that ends by asking, on its text score (so it still leads its
neighbours): a question carries no fact of its own; the reply does, and it gets a share of
the question's text score as context."""
ASKING_MAX_TOLD = 12
"""A turn that ends by asking but tells this many words besides (a speaker label counts)
carries a fact too: "Just started aerial yoga, it's great. Have you tried it?"."""
LENGTH_EXPONENT = 0.2
LENGTH_FACTOR_RANGE = (0.75, 1.35)
"""After fusion, session turns longer than the candidates' median gain a little, shorter ones
lose a little: BM25's length normalisation favours "Do you paint too?" over the turn that
tells what was painted, and tantivy does not let the normalisation itself be lowered."""


class VectorStage(Protocol):
    """An optional embedding index; recall runs without one."""

    def search(
        self, query: str, *, scope_hashes: Sequence[str] | None, limit: int
    ) -> list[tuple[str, float]]: ...


@dataclass
class Candidate:
    slug: str
    stage_scores: dict[str, float] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    score: float = 0.0
    superseded_by: str | None = None
    shape: TurnShape | None = None
    """For a session turn: how it reads (`turn_shapes`), which weighs its score."""

    def add(self, stage: str, score: float, path: str | None = None) -> None:
        self.stage_scores[stage] = self.stage_scores.get(stage, 0.0) + score
        if path:
            self.explain(path)

    def explain(self, path: str, *, first: bool = False) -> None:
        """Say how the memory was reached (at most five ways; `first` for the telling one)."""
        if path in self.paths:
            return
        if first:
            self.paths[:] = [path, *self.paths][:5]
        elif len(self.paths) < 5:
            self.paths.append(path)


class CandidatePool(dict[str, Candidate]):
    """Every memory some stage found, with each stage's raw score."""

    def at(self, slug: str) -> Candidate:
        return self.setdefault(slug, Candidate(slug))

    def has_stage(self, stage: str) -> bool:
        return any(stage in c.stage_scores for c in self.values())

    def fuse(self, stages: Sequence[str]) -> dict[str, float]:
        """RRF over the stages; context scores are text scores spread to neighbouring turns,
        so they rank together with BM25 as one text ranking."""
        rankings = {stage: ranking(self, stage) for stage in stages if stage != "context"}
        if "context" in stages:
            rankings["bm25"] = ranking(self, "bm25", "context")
        return rrf(rankings)


KIND_WORDS: Mapping[str, tuple[EntityType, str | None]] = {
    **dict.fromkeys(
        ("place", "places", "location", "locations"),
        (EntityType.PLACE, None),
    ),
    **dict.fromkeys(("city", "cities", "town", "towns"), (EntityType.PLACE, "city")),
    **dict.fromkeys(("country", "countries", "nation", "nations"), (EntityType.PLACE, "country")),
    **dict.fromkeys(
        ("state", "states", "province", "provinces", "region", "regions"),
        (EntityType.PLACE, "region"),
    ),
    **dict.fromkeys(("database", "databases", "db", "dbs"), (EntityType.TOOL, "database")),
    **dict.fromkeys(("broker", "brokers", "queue", "queues"), (EntityType.TOOL, "message-broker")),
    **dict.fromkeys(("runtime", "runtimes"), (EntityType.TOOL, "runtime")),
    **dict.fromkeys(("language", "languages"), (EntityType.TOOL, "language")),
    **dict.fromkeys(("framework", "frameworks"), (EntityType.LIBRARY, "framework")),
    **dict.fromkeys(("library", "libraries"), (EntityType.LIBRARY, None)),
    **dict.fromkeys(("cloud", "clouds"), (EntityType.TOOL, "cloud")),
    **dict.fromkeys(("editor", "editors", "ide", "ides"), (EntityType.TOOL, "editor")),
    **dict.fromkeys(
        ("company", "companies", "organization", "organizations"), (EntityType.ORGANIZATION, None)
    ),
}
"""Words that name a kind of entity rather than one: "which cities has Jon visited", "what
databases did we try". The kind stage reaches the memories that mention any known entity of
that kind, so an answer that never repeats the question's words ("a trip to Rome") is found."""
KIND_IMPLIED: Mapping[str, tuple[str, ...]] = {"country": ("region", "city")}
"""Kinds whose entities answer for another kind: a trip to Rio de Janeiro was a trip to a
country. They lead the kind stage at `IMPLIED_KIND_WEIGHT`."""
IMPLIED_KIND_WEIGHT = 0.5
KIND_ENTITY_LIMIT = 500
"""At most this many entities of one kind lead the kind stage (the most mentioned first)."""


KIND_QUESTION = re.compile(
    r"\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?([\w-]+)(?:\s+([\w-]+))?",
    re.IGNORECASE,
)
NOT_A_KIND = frozenset(
    {
        *("do", "does", "did", "has", "have", "had", "is", "are", "was", "were", "can"),
        *("could", "will", "would", "should", "kind", "kinds", "type", "types", "sort"),
        *("sorts", "of", "the", "a", "an"),
    }
)
KIND_EXPANSION_WEIGHT = 0.3
"""The weight, in recall's text stage, of each word for an instance of the kind a question
asks for (`asked_kind`), against 1 for the query's own words."""


def asked_kind(query: str, kinds: Mapping[str, Sequence[str]]) -> str | None:
    """The kind of everyday thing a question asks instances of, if `kinds` knows it: "What
    sports does John like?" → sport, "Which board games …" → board game. The noun after
    "what" or "which" (past "kind of"); a capitalised one is a name, not a kind. The word
    after it is the kind only when the first is a modifier ("what outdoor activities"), not a
    noun: in "What file holds the config?" the noun is "file" and "holds" its verb."""
    match = KIND_QUESTION.search(query)
    if match is None:
        return None
    first, second = match.group(1), match.group(2)
    if first[:1].isupper() or first.lower() in NOT_A_KIND:
        return None
    firsts = _singulars(first.lower())
    candidates: list[str] = []
    if second:
        seconds = _singulars(second.lower())
        candidates += [f"{a} {b}" for b in seconds for a in firsts]
        if second.lower() not in NOT_A_KIND and first.lower() not in load_everyday_nouns():
            candidates += seconds
    candidates += firsts
    return next((c for c in candidates if c in kinds), None)


def _singulars(word: str) -> list[str]:
    """`word`, then what it is with a plural ending taken off ("games" → game)."""
    forms = [word]
    for ending, replacement in (("ies", "y"), ("s", ""), ("es", "")):
        if word.endswith(ending) and len(word) > len(ending) + 1:
            forms.append(word[: -len(ending)] + replacement)
    return forms


def kind_words(query: str) -> dict[str, tuple[EntityType, str | None]]:
    """The query's words that name a kind of entity, with the (type, kind) they name."""
    found: dict[str, tuple[EntityType, str | None]] = {}
    for word in _WORD.findall(query.lower()):
        named = KIND_WORDS.get(word)
        if named is not None:
            found.setdefault(word, named)
    return found


def named_words(query: str) -> list[str]:
    """The query's words that name someone or something by their form: capitalised, and not
    only because they open a sentence ("What did Caroline paint?" → Caroline)."""
    named: list[str] = []
    for sentence in _SENTENCE_END.split(query.strip()):
        words = _WORD.findall(sentence)
        named.extend(w for w in words[1:] if w[:1].isupper())
    return named


def entity_weight(mention_count: int) -> float:
    """Rare entities say more than hubs: a project name mentioned everywhere barely ranks."""
    return 1.0 / math.log2(2 + max(mention_count, 0))


_WORD = re.compile(r"[\w][\w.+#/-]*[\w+#]|[\w]", re.UNICODE)


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


class NormaliseFn(Protocol):
    def __call__(self, name: str) -> str: ...


def rrf(rankings: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Reciprocal rank fusion of each stage's ranking, weighted per stage."""
    fused: dict[str, float] = {}
    for stage, ranking in rankings.items():
        weight = STAGE_WEIGHTS.get(stage, 0.5)
        for rank, slug in enumerate(ranking):
            fused[slug] = fused.get(slug, 0.0) + weight / (RRF_K + rank + 1)
    return fused


def ranking(candidates: Mapping[str, Candidate], *stages: str) -> list[str]:
    """The candidates any of `stages` found, by the sum of those stages' scores; in the
    text ranking a turn that asks counts `ASKING_PENALTY` of its score."""
    asking = 1.0
    if TEXT_STAGES.intersection(stages):
        asking = ASKING_PENALTY
    scored = [
        (
            sum(c.stage_scores.get(stage, 0.0) for stage in stages)
            * (asking if c.shape is not None and c.shape.asks else 1.0),
            slug,
        )
        for slug, c in candidates.items()
        if any(stage in c.stage_scores for stage in stages)
    ]
    return [slug for _, slug in sorted(scored, key=lambda item: (-item[0], item[1]))]


@dataclass(frozen=True)
class MemoryFacts:
    """What the adjustment step needs to know of a candidate."""

    type: MemoryType
    decay_state: DecayState
    created_at: datetime
    title_share: float = 0.0
    """How much of the query the memory's title names, 0 to 1 (`SearchIndex.titles_naming`)."""


@dataclass(frozen=True)
class TurnShape:
    """How a session turn reads: its length against the other candidates' median, and
    whether it ends by asking."""

    words: int
    asks: bool
    length_factor: float = 1.0


_ATTACHMENT = re.compile(r"\s*\[[^\[\]]*\]\s*$")


_SENTENCE_END = re.compile(r"(?<=[.!?？。！])\s+")


def _only_asks(body: str) -> bool:
    """Whether a turn ends by asking and tells little else: fewer than `ASKING_MAX_TOLD`
    words outside its questions ("Thanks, Mel! Do you paint?"). An attachment note after
    the question ("[shares a photo: …]") does not count."""
    said = _ATTACHMENT.sub("", body).rstrip()
    if not said.endswith(("?", "？")):
        return False
    told = [s for s in _SENTENCE_END.split(said) if not s.rstrip().endswith(("?", "？"))]
    return sum(len(s.split()) for s in told) < ASKING_MAX_TOLD


def turn_shapes(bodies: Mapping[str, str]) -> dict[str, TurnShape]:
    """The shape of each session turn among the candidates (`bodies` by slug): its length
    against the median, and whether it only asks (`_only_asks`)."""
    counted = {slug: len(body.split()) for slug, body in bodies.items()}
    lengths = sorted(counted.values())
    median = float(lengths[len(lengths) // 2]) if lengths else 1.0
    low, high = LENGTH_FACTOR_RANGE
    shapes = {}
    for slug, body in bodies.items():
        ratio = max(counted[slug], 1) / max(median, 1.0)
        shapes[slug] = TurnShape(
            words=counted[slug],
            asks=_only_asks(body),
            length_factor=min(high, max(low, float(ratio**LENGTH_EXPONENT))),
        )
    return shapes


def adjust(
    candidates: dict[str, Candidate],
    facts: Mapping[str, MemoryFacts],
    superseded_by: Mapping[str, str],
    now: datetime,
) -> list[Candidate]:
    """Apply the ranking rules of DESIGN.md §6 and return candidates best first.

    Long-term types and recent memories are favoured, dim ones slightly demoted, and a
    superseded memory always ranks below its successor.
    """
    for slug, cand in candidates.items():
        info = facts[slug]
        if cand.shape is not None:
            cand.score *= cand.shape.length_factor
        if info.type.long_term:
            cand.score *= LONG_TERM_BONUS
        cand.score *= 1 + (TITLE_BONUS - 1) * info.title_share
        if info.decay_state is DecayState.DIM:
            cand.score *= DIM_PENALTY
        age_days = max((now - info.created_at).total_seconds() / 86400, 0.0)
        cand.score *= 1 + RECENCY_BONUS * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    for older, newer in superseded_by.items():
        if older not in candidates:
            continue
        old = candidates[older]
        old.superseded_by = newer
        old.score *= SUPERSEDED_PENALTY
        if newer in candidates:
            new = candidates[newer]
            if old.score >= new.score:
                old.score = new.score * 0.95
    return sorted(candidates.values(), key=lambda c: (-c.score, c.slug))
