"""The recall pipeline: the stages run over the stores, fused, adjusted and explained.

The service resolves the scope and counts recalls; everything between the query and the
ranked hits happens here, stage by stage, each switchable through `RecallConfig`.
`RecallPipeline.run` calls them in order; each stage is a function over the recall's one
corpus view (`recall.corpus.Corpus`), the candidate pool and, for the entity stages, the
graph, and the functions below follow in the order `run` calls them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memoryd.extraction.pipeline import load_hyponyms
from memoryd.graph.store import CypherResult, MemoryRow, SupersedeRow
from memoryd.models import DecayState, MemoryType, RecallHit, SearchHit
from memoryd.recall import adjustment, answer, conversation, entities, kinds, text
from memoryd.recall.candidates import Candidate, CandidatePool, MemoryFacts, VectorStage
from memoryd.recall.config import RecallConfig
from memoryd.recall.corpus import Corpus
from memoryd.recall.entities import EntityMatcher
from memoryd.recall.explain import explain_expansion, recall_hit
from memoryd.recall.fusion import evidence_fusion
from memoryd.recall.graph import PREDICATE_WEIGHTS
from memoryd.search.doc import SearchDoc
from memoryd.search.index import LocalScore, SearchIndex
from memoryd.text import query_terms


class RecallGraph(Protocol):
    """The graph reads recall makes: the graph store's, or a granted scope's in-memory view
    (`recall.granted.MemoryGraph`)."""

    max_fanout: int

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]: ...

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]: ...

    def supersede_edges(self, slugs: Sequence[str] | None = None) -> dict[str, SupersedeRow]: ...

    def neighbourhood(self, entity_id: str, *, depth: int = 1) -> CypherResult: ...


@dataclass
class RecallOutcome:
    """The ranked hits, the entity ids the query linked to, the stages that found something."""

    hits: list[RecallHit]
    entities: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)


@dataclass
class RecallPipeline:
    """One recall over the search index and the graph (built per recall: cheap)."""

    index: SearchIndex
    graph: RecallGraph
    matcher: Callable[[], EntityMatcher]
    config: RecallConfig
    vector_stage: VectorStage | None = None
    scope_names: Callable[[str], Sequence[str]] | None = None
    """scope hash → the names its project goes by (weighed as held by all its memories)."""

    def run(
        self,
        query: str,
        *,
        scope_hash: str | None,
        types: Sequence[MemoryType] | None,
        k: int,
        include_forgotten: bool,
    ) -> RecallOutcome:
        """The stages in order over one corpus view, fused, then adjusted (DESIGN.md §6),
        the best `k` explained."""
        on = self.config.stages
        scopes = [scope_hash] if scope_hash else None
        size = max(50, 5 * k)
        kind, expansion = kind_expansion(query) if "expansion" in on else (None, dict[str, float]())
        # The query's embedding (milliseconds of torch, which lets go of the GIL) is made
        # while the text and graph stages run.
        dense = None
        vector_stage = self.vector_stage if "vector" in on else None
        if vector_stage is not None and not vector_stage.cheap:
            from memoryd.recall.vectors import ahead  # numpy: only where the stage runs

            dense = ahead(vector_stage, query, scopes, size)
        corpus = Corpus.read(
            self.index,
            query,
            scopes=scopes,
            types=types,
            include_forgotten=include_forgotten,
            limit=size,
            expansion=expansion,
            context_boost=text.TEXT_CONTEXT_BOOST if "context" in on else 0.0,
            scope_names=self.scope_names,
        )
        pool = CandidatePool()
        stages: list[str] = []
        bm25 = text_stage(corpus, pool, stages) if "text" in on else []
        linked: dict[str, Linked] = {}
        if "entity" in on:
            matcher = self.matcher()
            linked = entity_stage(
                corpus, self.graph, matcher, pool, stages, have_text_hits=bool(bm25)
            )
        relations: dict[str, tuple[str, str, str]] = {}
        if linked and "graph" in on:
            relations = graph_stage(corpus, self.graph, linked, pool, stages)
        # What the query names: by form, by a known entity, or by kind ("which databases").
        named = {eid: entity.named_by for eid, entity in linked.items()}
        names = [*entities.named_words(query), *named.values()]
        kind_names: list[str] = []
        if "kind" in on:
            kind_names = kind_stage(corpus, self.graph, self.matcher, pool, stages)
        if vector_stage is not None:
            stages.append("vector")
        if dense is not None:
            for slug, score in dense.result():
                pool.at(slug).add("vector", score)
        # In an episode (session memories), what was said just before and after a strong text
        # hit often completes it: a share of the hit's score goes to its neighbouring turns.
        # Long-term memories stand on their own.
        if "context" in on:
            context_stage(corpus, bm25[: conversation.CONTEXT_SEEDS], pool)
        if pool.has_stage("context"):
            stages.append("context")
        stored = shape_stage(corpus, pool)
        if vector_stage is not None and dense is None:
            rescore(vector_stage, query, scopes, pool)
        fuse(corpus, pool, stages, vector_stage)
        if "answer" in on:
            answer_stage(corpus, pool, stored)
        ranked = adjust_stage(
            corpus,
            self.graph,
            pool,
            stored,
            (names, kind_names),
            named,
            scope_hash=scope_hash,
            types=types,
            include_forgotten=include_forgotten,
            current="current" in on and adjustment.asks_for_current(query),
        )[:k]
        if kind is not None:
            explain_expansion(corpus, kind, expansion, ranked, stored)
        direct_paths(self.graph, relations, ranked)
        ranked = [c for c in ranked if c.slug in stored]  # the index holds each hit shown
        explained = corpus.explain([stored[c.slug] for c in ranked])
        hits = [recall_hit(c, hit) for c, hit in zip(ranked, explained, strict=True)]
        return RecallOutcome(hits=hits, entities=sorted(linked), stages=stages)


def text_stage(corpus: Corpus, pool: CandidatePool, stages: list[str]) -> list[LocalScore]:
    """The text stage: the scope's BM25 hits join the pool with the words they matched."""
    bm25 = corpus.ranking.hits
    for found in bm25:
        cand = pool.at(found.slug)
        cand.add("bm25", found.relevance)
        cand.matched = found.matched
        cand.text_evidence = found.evidence
    stages.append("bm25")
    return bm25


@dataclass(frozen=True)
class Linked:
    """An entity the query links to, as the entity stage weighed it."""

    name: str
    named_by: str
    """The query's words naming it ("k8s" for Kubernetes)."""
    words: frozenset[str]
    """Those words as the index analyses them."""
    rarity: float
    """`entities.entity_weight` of its mentions in the searched scopes."""
    weight: float
    """Its rarity times its words' share of the query: what a mention of it is worth."""

    def lend(self, corpus: Corpus, cand: Candidate, stage: str, strength: float, why: str) -> None:
        """A mention of this entity as `stage` evidence for `cand`, times `strength` (the
        mention's confidence, and a 2-hop path's weight); novel for the share of its words
        the candidate's text did not match."""
        lacks = corpus.share(self.words - cand.matched)
        cand.add(stage, self.weight * strength, why, novel=self.rarity * lacks * strength)


def entity_stage(
    corpus: Corpus,
    graph: RecallGraph,
    matcher: EntityMatcher,
    pool: CandidatePool,
    stages: list[str],
    *,
    have_text_hits: bool,
) -> dict[str, Linked]:
    """The entity stage: link the query to entities, then collect the memories that mention
    them (1 hop). Returns the linked entities by id."""
    query = corpus.query
    found = matcher.match(query, query_terms(query)) if matcher.by_key else {}
    if not found:
        return {}
    # Sorted: the engine returns rows in no set order, and paths must not depend on it.
    rows = sorted(graph.mentioning(list(found), scope_hashes=corpus.scopes))
    # Counted where the recall looks, so another project's memories never change how
    # specific an entity is here (`mentioning` returns at most `max_fanout` per entity).
    here = Counter(eid for eid, _, _ in rows)
    # Hubs (an entity in most memories, like the user's own name) do not discriminate:
    # they only lead the traversal when nothing else matched.
    hub = graph.max_fanout
    specific = {e: w for e, w in found.items() if 0 < here[e] < hub}
    if specific or have_text_hits:
        found = specific
    if not found:
        return {}
    stages.append("entity")
    # An entity's evidence is bounded by how much of the query the words naming it carry
    # in this scope: "api" in a project whose every session says "api" adds little.
    linked = {}
    for eid, gram in found.items():
        words = frozenset(corpus.analyse(gram))
        rarity = entities.entity_weight(here[eid])
        linked[eid] = Linked(
            matcher.entities[eid].name, gram, words, rarity, rarity * corpus.share(words)
        )
    for eid, slug, conf in rows:
        if eid in linked:
            cand = pool.at(slug)
            cand.entities.add(eid)
            linked[eid].lend(corpus, cand, "entity", conf, f"{linked[eid].name} → memory")
    return linked


def graph_stage(
    corpus: Corpus,
    graph: RecallGraph,
    linked: Mapping[str, Linked],
    pool: CandidatePool,
    stages: list[str],
) -> dict[str, tuple[str, str, str]]:
    """The graph stage: the memories that mention the entities related to the linked ones
    (2 hops). Returns each path shown → (linked entity, predicate, entity reached), for
    `direct_paths`."""
    via: dict[str, list[tuple[str, str, float]]] = {}
    for src, dst, predicate, conf in sorted(graph.related_entities(list(linked))):
        if dst not in linked:
            via.setdefault(dst, []).append((src, predicate, conf))
    relations: dict[str, tuple[str, str, str]] = {}
    if not via:
        return relations
    stages.append("graph")
    for eid, slug, conf in sorted(graph.mentioning(list(via), scope_hashes=corpus.scopes)):
        for src, predicate, rel_conf in via[eid]:
            link = PREDICATE_WEIGHTS.get(predicate, 0.5) * rel_conf * conf
            path = f"{linked[src].name} -[{predicate}]- {eid.split(':', 2)[-1]} → memory"
            relations[path] = (src, predicate, eid)
            linked[src].lend(corpus, pool.at(slug), "graph", link, path)
    return relations


def kind_stage(
    corpus: Corpus,
    graph: RecallGraph,
    matcher: Callable[[], EntityMatcher],
    pool: CandidatePool,
    stages: list[str],
) -> list[str]:
    """The kind stage: the memories that mention an entity of the kind the query asks about
    ("which cities …" → Rome, Paris), the entities rarer in the searched scope first. Returns
    the names of the entities found: the query names them by their kind.

    A whole session names entities of every kind in passing, so mentioning one says
    little. It counts only as the session where the entity entered its scope (the
    earliest that mentions it), and only for a question whose "what / which <kind>" frame
    asks for that kind (`kinds.headed_kinds`): in a project's history, "What database
    does the API use?" is answered where the database was chosen ("use FastAPI with
    PostgreSQL"), which later sessions only mention. That evidence reorders; it stays
    out of the calibrated relevance, since an entity of the kind ("FastAPI" for "What
    frontend framework …") says nothing about whether the question is answered
    (measured: bench/RESULTS.md)."""
    query = corpus.query
    asked = kinds.kind_words(query)
    if not asked:
        return []
    match = matcher()
    leads: dict[str, tuple[str, float]] = {}
    for word, (type_, kind) in asked.items():
        for entity, fit in match.of_kind(type_, kind):
            if entity.mention_count <= graph.max_fanout:
                leads.setdefault(entity.id, (word, fit))
    if not leads:
        return []
    rows = sorted(graph.mentioning(list(leads), scope_hashes=corpus.scopes))
    # Rarity where the recall looks: a city named once in this project says more than
    # one named in every conversation of another.
    here = Counter(eid for eid, _, _ in rows)
    if rows:
        stages.append("kind")
    analysed = {word: frozenset(corpus.analyse(word)) for word in asked}
    headed = kinds.headed_kinds(query)
    sessions, entered = _entered(corpus, rows) if headed else (set(), set())
    for eid, slug, conf in rows:
        word, fit = leads[eid]
        if slug in sessions and (word not in headed or (eid, slug) not in entered):
            continue
        tokens = analysed[word]
        cand = pool.at(slug)
        # Where an entity entered, how often it is mentioned later does not matter.
        rarity = 1.0 if slug in sessions else entities.entity_weight(here[eid])
        strength = fit * rarity * conf
        if slug in sessions:
            cand.entered_kind = True
        cand.add(
            "kind",
            strength * corpus.share(tokens),
            f"{word} → {match.entities[eid].name} → memory",
            novel=0.0 if slug in sessions else strength * corpus.share(tokens - cand.matched),
        )
    return [match.entities[eid].name for eid in here]


def _entered(
    corpus: Corpus, rows: Sequence[tuple[str, str, float]]
) -> tuple[set[str], set[tuple[str, str]]]:
    """The whole sessions among `rows` (entity, memory), and each entity's first: the
    (entity, session) pair of the earliest whole session mentioning it in its scope
    (ties by slug). `mentioning` returns every mention of the entities the kind stage
    follows (they are mentioned at most `max_fanout` times), so the earliest is there."""
    stored = corpus.stored(sorted({slug for _, slug, _ in rows}))
    sessions = {
        slug
        for slug, doc in stored.items()
        if doc.type is MemoryType.SESSION and not conversation.is_turn(doc.type, doc.body)
    }
    first: dict[tuple[str, str], SearchDoc] = {}
    for eid, slug, _ in rows:
        if slug in sessions:
            doc = stored[slug]
            seen = first.get((eid, doc.scope_hash))
            if seen is None or (doc.created_at, doc.slug) < (seen.created_at, seen.slug):
                first[(eid, doc.scope_hash)] = doc
    return sessions, {(eid, doc.slug) for (eid, _), doc in first.items()}


def context_stage(corpus: Corpus, seeds: Sequence[LocalScore], pool: CandidatePool) -> None:
    """The context stage: each session text hit lends a share of its score to the turns
    written just before and after it (`CONTEXT_SPREAD`, by distance; a hit that tells
    rather than asks lends `TELLING_SPREAD` of that)."""
    spread = conversation.CONTEXT_SPREAD
    docs = corpus.ranking.docs
    for seed in seeds:
        hit = docs.get(seed.slug)
        if hit is None or not conversation.is_turn(hit.type, hit.body):
            continue
        before, after = corpus.neighbours(
            hit, window=conversation.CONTEXT_WINDOW, per_side=len(spread)
        )
        lent = 1.0 if conversation.only_asks(hit.body) else conversation.TELLING_SPREAD
        for side in (before, after):
            for share, slug in zip(spread, side, strict=False):
                pool.at(slug).add("context", lent * share * seed.relevance, f"next to {hit.slug}")


def shape_stage(corpus: Corpus, pool: CandidatePool) -> dict[str, SearchDoc]:
    """The candidates' stored fields, and the shape of each: a session turn's text weighs
    its score, a whole session is marked. Returns the candidates the index holds.

    Ranked on the fields the index stores: looking many memories up by slug in the graph
    engine scans its whole Memory table."""
    stored = corpus.stored(pool)
    sessions = {
        s: doc.body for s, doc in stored.items() if conversation.is_turn(doc.type, doc.body)
    }
    for slug, shape in conversation.turn_shapes(sessions).items():
        pool[slug].shape = shape
    for slug, doc in stored.items():
        pool[slug].whole_session = doc.type is MemoryType.SESSION and slug not in sessions
    return stored


def rescore(
    stage: VectorStage, query: str, scopes: Sequence[str] | None, pool: CandidatePool
) -> None:
    """A cheap embedder weighs the candidates the other stages found, those of the memory
    shapes its evidence counts for (`Calibration.turns`)."""
    turns = stage.calibration.turns
    wanted = [slug for slug, cand in pool.items() if turns or cand.shape is None]
    for slug, score in stage.rescore(query, wanted, scope_hashes=scopes):
        pool[slug].add("vector", score)


def fuse(
    corpus: Corpus, pool: CandidatePool, stages: list[str], vector_stage: VectorStage | None
) -> None:
    """Each candidate's fused score (`evidence_fusion`), its relevance weighed by how much
    the query names (`text.query_confidence`)."""
    fused = evidence_fusion(
        pool, stages, None if vector_stage is None else vector_stage.calibration
    )
    named_enough = text.query_confidence(corpus.ranking.mass)
    for slug, score in fused.items():
        pool[slug].score = score
        pool[slug].relevance *= named_enough
        pool[slug].factors["query weight"] = round(named_enough, 4)


def answer_stage(corpus: Corpus, pool: CandidatePool, stored: dict[str, SearchDoc]) -> None:
    """The answer stage (`recall.answer`). For a question asking for a typed value
    ("What PostgreSQL version …"), the memories stating no value of that type near what
    it names keep `MISSING_VALUE` of their score and relevance. For a "what / which
    <modifier> <head>" frame ("What cloud provider …"), a memory that is not a
    conversation turn, holds none of the modifiers and says the head only as another
    compound ("the Credentials provider", `answer.modified_otherwise`) loses the head's
    share of the query: a memory of many lines about a cloud provider says "cloud"; a
    one-line turn naming the instance need not. A head said alone ("the services") may
    be the thing asked about, so it does not count. Both choices were measured:
    bench/RESULTS.md."""
    analyse = corpus.analyse
    for mods, heads in answer.modified_heads(corpus.query, analyse):
        share = corpus.share(heads)
        for cand in pool.values():
            if (
                cand.shape is None
                and heads & cand.matched
                and not mods & cand.matched
                and cand.slug in stored
                and answer.modified_otherwise(stored[cand.slug].body, heads, analyse)
            ):
                cand.scale("another kind", 1 - share)
                cand.relevance *= 1 - share
    asked = answer.asked_value(corpus.query, analyse)
    if asked is None:
        return
    for slug, cand in pool.items():
        doc = stored.get(slug)
        if doc is not None and not asked.held_in(f"{doc.title}\n{doc.body}", analyse):
            cand.scale(f"no {asked.kind.name}", answer.MISSING_VALUE)
            cand.relevance *= answer.MISSING_VALUE


def adjust_stage(
    corpus: Corpus,
    graph: RecallGraph,
    pool: CandidatePool,
    stored: dict[str, SearchDoc],
    names: tuple[list[str], list[str]],
    named: Mapping[str, str],
    *,
    scope_hash: str | None,
    types: Sequence[MemoryType] | None,
    include_forgotten: bool,
    current: bool,
) -> list[Candidate]:
    """The filters applied, then the adjustment rules, best first. `names`: what the query
    names by form or by a linked entity, and the entities the kind stage found; `named`: the
    linked entities' ids → the query words naming them; `current`: the query asks what holds
    now (`adjustment.asks_for_current`)."""
    # A successor no stage found stays out: it holds no evidence for the query, and is
    # never ranked above one that does (DESIGN §7, turn 3); the stale hit names it.
    edges = graph.supersede_edges(list(pool))
    # A name the query holds (a person, a linked entity; for the memories the kind stage
    # counts for, an entity found by its kind) makes a title name all of the query: a
    # turn's speaker, a note's subject. A whole session's title is its opening prompt,
    # naming entities in passing: it names only its words' share of the query. A
    # session recorded as a transcript under another title is about its opening request
    # just as well (`conversation.opening_request`): it names with its title. Both
    # measured: bench/RESULTS.md.
    named_by, kind_names = names
    titles = {slug: doc.title for slug, doc in stored.items() if slug in pool}
    whole = {
        slug: f"{t}\n{conversation.opening_request(stored[slug].body)}"
        for slug, t in titles.items()
        if pool[slug].whole_session
    }
    title_shares = corpus.titles_naming(whole)
    rest = {slug: t for slug, t in titles.items() if slug not in whole}
    title_shares.update(corpus.titles_naming(rest, names=[*named_by, *kind_names]))
    facts = {
        slug: MemoryFacts(
            doc.type, doc.decay_state, doc.created_at, title_share=title_shares.get(slug, 0.0)
        )
        for slug, doc in stored.items()
        if slug in pool and admissible(doc, scope_hash, types, include_forgotten)
    }
    for slug in [s for s in pool if s not in facts]:
        del pool[slug]
    about = adjustment.edges_about(pool, edges, named, corpus.shares, current=current)
    ranked = adjustment.adjust(pool, facts, edges, about=about)
    if current:
        adjustment.current_first(ranked, facts, corpus.shares)
    return ranked


def direct_paths(
    graph: RecallGraph, relations: Mapping[str, tuple[str, str, str]], ranked: Sequence[Candidate]
) -> None:
    """Show each 2-hop path in the shown hits with its relation's stored direction
    (`React <-[supersedes]- Solid`: Solid supersedes React, not the other way round).
    The traversal walks relations both ways; the direction is read for the few linked
    entities whose paths are shown (`GraphStore.neighbourhood`, one hop); `relations` is
    what `graph_stage` followed."""
    shown = {p for cand in ranked for p in cand.paths if p in relations}
    stored: set[tuple[str, str, str]] = set()
    for linked in sorted({relations[p][0] for p in shown}):
        rows = graph.neighbourhood(linked, depth=1).rows
        stored.update((str(row[0]), str(row[1]), str(row[2])) for row in rows)
    directed = {}
    for path in shown:
        src, predicate, dst = relations[path]
        if (src, predicate, dst) in stored:
            directed[path] = path.replace(f" -[{predicate}]- ", f" -[{predicate}]-> ", 1)
        elif (dst, predicate, src) in stored:
            directed[path] = path.replace(f" -[{predicate}]- ", f" <-[{predicate}]- ", 1)
    for cand in ranked:
        cand.paths[:] = [directed.get(p, p) for p in cand.paths]


def kind_expansion(query: str) -> tuple[str | None, dict[str, float]]:
    """The kind of everyday thing the query asks for, and the words for its instances at
    their weight: for "What sports does John like?" the words for sports join the text
    stage, so "we went surfing" answers though it never says "sport"."""
    known = load_hyponyms()
    kind = text.asked_kind(query, known)
    if kind is None:
        return None, {}
    return kind, dict.fromkeys(known[kind], text.KIND_EXPANSION_WEIGHT)


def admissible(
    row: MemoryRow | SearchHit | SearchDoc,
    scope_hash: str | None,
    types: Sequence[MemoryType] | None,
    include_forgotten: bool,
) -> bool:
    """Whether a graph-found candidate passes the same filters the text search applied."""
    if scope_hash and row.scope_hash != scope_hash:
        return False
    if types and row.type not in types:
        return False
    if row.decay_state is DecayState.FORGOTTEN:
        return False
    return include_forgotten or row.decay_state.visible_by_default


__all__ = ["Candidate", "RecallOutcome", "RecallPipeline", "admissible", "kind_expansion"]
