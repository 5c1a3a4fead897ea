"""The optional vector stage: a query's nearest memories by their best passage, and how a
cosine counts as evidence beside the text score.

Fusing the dense ranking by reciprocal rank wrecks the calibrated score, since a rank says
nothing about whether anything fits (bench/RESULTS.md). So the cosine itself is calibrated
(`dense_relevance`) and added to the text relevance as bounded evidence, like the graph
stages' (`fusion.evidence_fusion`): a memory nothing near the query still scores low.

The stage runs only when the extra is installed (`pip install memoryd[vectors]`) and
`recall.vectors` is not `off`; the embeddings are made in the daemon's background worker
(`sync`), never in a capture hook.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from memoryd.recall.candidates import Calibration, VectorStage
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.search.vectors import (
    MODEL_NAME,
    STATIC_MODEL_NAME,
    Embedder,
    StaticMiniLM,
    VectorIndex,
    fingerprint,
    passages,
)

logger = logging.getLogger(__name__)

MINILM = Calibration(floor=0.25, full=0.75, in_relevance=True)
"""all-MiniLM-L6-v2: alone its top cosine separates answerable from abstention questions
about as well as BM25, so it counts in the calibrated score (measured: bench/RESULTS.md)."""
STATIC = Calibration(floor=0.45, full=0.75, in_relevance=False, turns=False)
"""The static table (`search.vectors.StaticMiniLM`). Alone its top cosine separates
abstention questions poorly, so it reorders hits but leaves the calibrated score to the text.
It is fenced from conversation turns: an average of a dozen words' rows is mostly the few
words a turn happens to use. Floor, fence and calibration were measured:
bench/RESULTS.md."""
CALIBRATIONS = {MODEL_NAME: MINILM, STATIC_MODEL_NAME: STATIC}
COSINE_FLOOR = MINILM.floor
COSINE_FULL = MINILM.full
DENSE_WEIGHT = 0.3
"""How much the best dense evidence counts against text on the relevance scale (text alone
reaches 1): enough to reorder near-tied text hits and lift a paraphrase BM25 misses, not
enough for a merely similar memory to outvote a memory that holds the query's words."""
BATCH = 64
"""Memories embedded per round of the background worker (about 3 s on 2 cores)."""


def dense_relevance(cosine: float, calibration: Calibration = MINILM) -> float:
    """A cosine as evidence in [0, 1]: 0 up to the floor, 1 from full."""
    span = calibration.full - calibration.floor
    return min(1.0, max(0.0, (cosine - calibration.floor) / span))


def dense_evidence(cosine: float, calibration: Calibration = MINILM) -> float:
    """What a memory's best-passage cosine adds to its fused score."""
    return DENSE_WEIGHT * dense_relevance(cosine, calibration)


@dataclass
class DenseStage:
    """The `VectorStage` of the recall pipeline over a `VectorIndex`."""

    vectors: VectorIndex
    embedder: Embedder

    @property
    def calibration(self) -> Calibration:
        return CALIBRATIONS.get(self.embedder.name, MINILM)

    @property
    def cheap(self) -> bool:
        """Whether a query embeds in well under a millisecond (the static table): then it
        runs inline, since a worker thread would only add a hand-off."""
        return isinstance(self.embedder, StaticMiniLM)

    def search(
        self, query: str, *, scope_hashes: Sequence[str] | None, limit: int
    ) -> list[tuple[str, float]]:
        if not self.vectors.holds(scope_hashes):
            return []  # nothing embedded here (yet): the query is not worth embedding
        if isinstance(self.embedder, StaticMiniLM) and not self.embedder.ready():
            return []  # a reader never distils: the writer's worker makes the table
        found = self.vectors.search(
            self.embedder.encode([query])[0], scope_hashes=scope_hashes, limit=limit
        )
        floor = self.calibration.floor
        return [(slug, cosine) for slug, cosine in found if cosine > floor]

    def rescore(
        self, query: str, slugs: Sequence[str], *, scope_hashes: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """The cosines of the candidates other stages found, above the floor: what a cheap
        embedder adds, at a cost that grows with the candidates, not with the scope."""
        if not slugs or not self.vectors.holds(scope_hashes):
            return []
        if isinstance(self.embedder, StaticMiniLM) and not self.embedder.ready():
            return []
        near = self.vectors.nearness(
            self.embedder.encode([query])[0], slugs, scope_hashes=scope_hashes
        )
        floor = self.calibration.floor
        return sorted((s, c) for s, c in near.items() if c > floor)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def ahead(
    stage: VectorStage, query: str, scope_hashes: Sequence[str] | None, limit: int
) -> Future[list[tuple[str, float]]]:
    """Start the vector stage's search on a worker thread; the caller takes its result
    when it needs it (the pipeline runs the text and graph stages meanwhile)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memoryd-vectors")
    return _pool.submit(stage.search, query, scope_hashes=scope_hashes, limit=limit)


@dataclass
class SyncReport:
    """What one round of `sync` did."""

    embedded: int = 0
    passages: int = 0
    removed: int = 0
    pending: list[str] = field(default_factory=list)
    """Memories still to embed after this round (the worker comes back for them)."""


def expected(docs: dict[str, SearchDoc], model: str) -> dict[str, str]:
    """slug → the fingerprint its vectors must have, from what the index holds of it."""
    return {
        slug: fingerprint(doc.title, doc.body, model)
        for slug, doc in docs.items()
        if doc.title.strip() or doc.body.strip()
    }


def indexed_docs(index: SearchIndex, slugs: Sequence[str] | None = None) -> dict[str, SearchDoc]:
    """The index's documents of `slugs` (None: all), read in batches."""
    wanted = sorted(index.slugs()) if slugs is None else sorted(slugs)
    docs: dict[str, SearchDoc] = {}
    for at in range(0, len(wanted), 500):
        docs.update(index.stored(wanted[at : at + 500]))
    return docs


def sync(
    index: SearchIndex,
    vectors: VectorIndex,
    embedder: Embedder,
    *,
    slugs: Sequence[str] | None = None,
    limit: int | None = BATCH,
) -> SyncReport:
    """Bring the vectors of `slugs` (None: every memory) in line with the search index:
    embed what is new or changed (at most `limit` memories, None: all), drop what the index
    no longer holds."""
    todo, gone, docs = diff(index, vectors, slugs)
    vectors.delete(gone)
    now, later = (todo, []) if limit is None else (todo[:limit], todo[limit:])
    report = embed(vectors, embedder, [docs[slug] for slug in now])
    report.removed, report.pending = len(gone), later
    return report


def diff(
    index: SearchIndex, vectors: VectorIndex, slugs: Sequence[str] | None
) -> tuple[list[str], list[str], dict[str, SearchDoc]]:
    """Of `slugs` (None: all): those to embed (new or changed), those to drop (no longer
    indexed), and the indexed documents read."""
    docs = indexed_docs(index, slugs)
    want = expected(docs, vectors.model)
    have = vectors.fingerprints()
    among = set(have) if slugs is None else set(slugs) & set(have)
    gone = sorted(among - set(want))
    todo = sorted(slug for slug, fp in want.items() if have.get(slug) != fp)
    return todo, gone, docs


def embed(vectors: VectorIndex, embedder: Embedder, docs: Sequence[SearchDoc]) -> SyncReport:
    """Embed `docs` passage by passage and store them."""
    chunks = [passages(doc.title, doc.body) for doc in docs]
    # One call for the round: the model batches passages of many memories together.
    encoded = embedder.encode([text for texts in chunks for text in texts])
    rows = []
    at = 0
    for doc, texts in zip(docs, chunks, strict=True):
        print_ = fingerprint(doc.title, doc.body, vectors.model)
        rows.append((doc.slug, doc.scope_hash, print_, encoded[at : at + len(texts)]))
        at += len(texts)
    vectors.put_many(rows)
    return SyncReport(embedded=len(rows), passages=at)


@dataclass
class DenseIndex:
    """What a service holds when the vector stage is on: the store, the model, and the
    memories still to embed. The work list is rebuilt from the stores (what the index holds
    against what the vectors were made from) on the first round after opening, so nothing
    a crash or a stopped daemon left undone is lost; after that, the index's writes
    (`SearchIndex.touched`) say what to look at again."""

    store: VectorIndex
    embedder: Embedder
    _todo: set[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    """One round at a time: the worker's rounds and reindex's rebuild share the work list."""

    @property
    def stage(self) -> DenseStage:
        return DenseStage(self.store, self.embedder)

    def catch_up(self, index: SearchIndex, limit: int | None = BATCH) -> SyncReport:
        """One round of the background worker: look at what changed, embed up to `limit`."""
        with self._lock:
            return self._catch_up(index, limit)

    def _catch_up(self, index: SearchIndex, limit: int | None) -> SyncReport:
        touched = index.take_touched()
        if self._todo is None:
            todo, gone, _ = diff(index, self.store, None)
            self._todo = set(todo)
        else:
            todo, gone, _ = diff(index, self.store, sorted(touched)) if touched else ([], [], {})
            self._todo.update(todo)
            self._todo.difference_update(gone)
        self.store.delete(gone)
        now = sorted(self._todo) if limit is None else sorted(self._todo)[:limit]
        docs = index.stored(now)
        report = embed(self.store, self.embedder, [docs[s] for s in now if s in docs])
        self._todo.difference_update(now)
        report.removed, report.pending = len(gone), sorted(self._todo)
        return report

    def rebuild(self, index: SearchIndex, *, later: bool = False) -> SyncReport:
        """Every memory embedded afresh (`reindex`): now, or with `later` (a daemon, whose
        writer must not wait minutes) by the worker's next rounds, every memory pending."""
        with self._lock:
            if later:
                index.take_touched()
                self.store.clear()
                self._todo = None  # the next round compares the stores: everything is new
                return SyncReport()
            return self._rebuild(index)

    def _rebuild(self, index: SearchIndex) -> SyncReport:
        index.take_touched()
        self.store.clear()
        report = sync(index, self.store, self.embedder, limit=None)
        self._todo = set()
        return report


__all__ = [
    "BATCH",
    "CALIBRATIONS",
    "COSINE_FLOOR",
    "COSINE_FULL",
    "DENSE_WEIGHT",
    "MINILM",
    "STATIC",
    "Calibration",
    "DenseIndex",
    "DenseStage",
    "SyncReport",
    "ahead",
    "dense_evidence",
    "dense_relevance",
    "diff",
    "embed",
    "expected",
    "indexed_docs",
    "sync",
]
