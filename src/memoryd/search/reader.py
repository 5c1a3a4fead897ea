"""The index's state and its reads: stored documents, the filters and BM25 queries built from
term queries, the top hits with ties at the cut, and the words the analyser makes of a text.

`IndexReader` holds everything a `SearchIndex` keeps (the tantivy index, the decay overlay,
the scope statistics, the caches); the other modules of this package add their jobs to it as
subclasses, and `search.index.SearchIndex` puts them together.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from memoryd.errors import StorageError
from memoryd.search.doc import SearchDoc
from memoryd.search.engine import (
    _HIDDEN,
    _TANTIVY_ERRORS,
    SLUG_KEY_FIELD,
    _analyzer,
    _bm25_idf,
    _count,
    _hides,
    _holds_han,
    _light_doc,
    _Query,
    _stored,
    _stored_doc,
    tantivy,
)
from memoryd.search.overlay import DecayOverlay
from memoryd.search.sessions import CONTEXT_WINDOW
from memoryd.search.stats import Entry, ScopeStatistics
from memoryd.search.stats_file import StatsFiles
from memoryd.search.words import LIGHT_WORDS, STOPWORDS, base_forms
from memoryd.text import segment

_MAX_EXPANSION_TOKENS = 60

# Hits fetched beyond the page, so that ties at its edge rarely need a second search.
_TIE_MARGIN = 16

_COMMITS_KEPT = 1024

_QUERIES_KEPT = 64
"""At most this many analysed queries are kept (`_parsed`)."""

_WORDS_KEPT = 100_000
"""At most this many single words' tokens are kept (`_word_tokens`)."""

COMMIT_DELAY_S = 1.0
"""How long the index waits for more writes before it commits documents written with
`upsert(..., then=...)` (a read of the index, a hand-off to a reader process, a batch write
or `close` commits them sooner); `search.commit_delay_ms` sets it."""


class IndexReader:
    """A tantivy index and what reading it needs; the base of `SearchIndex`."""

    def __init__(
        self,
        directory: Path,
        index: tantivy.Index,
        schema: tantivy.Schema,
        overlay: DecayOverlay | None = None,
        files: StatsFiles | None = None,
        opstamp: int | None = None,
    ) -> None:
        self._directory = directory
        self._files = files
        """The scopes' statistics saved beside the index (none for an in-memory index)."""
        self._opstamp = opstamp
        self._unsaved: set[str] = set()
        """Tallied scopes whose saved statistics are behind ours (saved when it is time)."""
        self._folding: set[str] = set()
        """Scopes whose frames outgrew their share of the file (saved whole by `_fold`)."""
        self._borrowed: set[str] = set()
        """Scopes among them tallied only to be saved (forgotten once saved)."""
        self._paused_at = -1
        """The commit count at the last `save_statistics` (none since: the writes paused)."""
        self._save_next = 0.0
        """`time.monotonic()` from which the next save may run (`_flush_stats`)."""
        self.keeps_saved = False
        """A long-lived writer (the daemon): its decay sweeps tally the scopes whose memories
        they move from their saved files, to read those whole and keep the files current
        (`set_decay_states`), and it keeps the tallies it takes to save a scope whole. Every
        writer keeps the files of the scopes it changes current (`_keep_saved`)."""
        """The commit our reader shows (None: not known for sure; nothing is loaded or saved)."""
        self._index = index
        self._schema = schema
        self._overlay = overlay or DecayOverlay(None, {})
        """The decay states of memories whose documents hold an older one (`DecayOverlay`):
        replaced whole with each commit that changes it, under the statistics' lock."""
        self._overlay_next: DecayOverlay | None = None
        """The overlay the write under way commits (None: it changes none)."""
        self._overlay_unsaved = False
        """The overlay's file failed to be written: the next write tries again."""
        self._analyzer = _analyzer()
        self._stops = frozenset(t for word in STOPWORDS for t in self._analyzer.analyze(word))
        self._light = frozenset(t for word in LIGHT_WORDS for t in self._analyzer.analyze(word))
        self._write_lock = threading.Lock()
        self._writer: tantivy.IndexWriter | None = None
        self._lowered: tantivy.IndexWriter | None = None
        """The writer whose merge threads run at low priority (`writer._lower_merges`)."""
        self._closed = False
        self.commit_delay_s = COMMIT_DELAY_S
        self._waiting: dict[str, SearchDoc] = {}
        """Documents written to commit later (`upsert` with `then`), slug → the latest."""
        self._then: list[Callable[[], None]] = []
        """What to run once a commit holds the waiting documents (their writes' journal ends)."""
        self._committing = False
        """A commit of waiting documents is under way: a read waits for it (`commit`)."""
        self._waiting_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        """One commit of waiting documents at a time, so a read that waits for it sees them."""
        self._timer: threading.Timer | None = None
        self._first_wait = self._last_wait = 0.0
        """`time.monotonic()` of the first and the last write now waiting for a commit."""
        self._waiting_since: datetime | None = None
        """When the oldest waiting document started waiting (`commit_wait`)."""
        self._in_commit: tuple[int, datetime | None] = (0, None)
        """The waiting documents the commit under way holds: how many, since when."""
        self._failures = 0
        """Commits of waiting documents that failed since the last one that succeeded."""
        self._failed_since: datetime | None = None
        self._first_error: str | None = None
        self._failed_error: str | None = None
        """The first and the last failed commit's error, while its documents wait for the
        timer's retry."""
        self._retry_at: datetime | None = None
        """When the timer tries a failed commit again."""
        self.generation = 0
        self._commits: deque[tuple[int, frozenset[str] | None]] = deque(maxlen=_COMMITS_KEPT)
        """(generation, the slugs its commit wrote, deleted or moved; None: unknown) of the
        last commits: a reader process behind us refreshes only those (`changes_since`)."""
        self.touched: set[str] = set()
        self._lightened: set[str] = set()
        """The documents of the write under way read without their text (`_light_doc`)."""
        self._written_cuts: dict[str, str] = {}
        """While a write runs: each written text → its segmentation (`_replace`), so counting
        the written memories for the saved statistics cuts no Chinese text again."""
        self._written_forms: dict[str, str] = {}
        """While a write runs: each cut text it indexed → its base forms (`base_forms`)."""
        self._written_entries: dict[str, tuple[SearchDoc, Entry]] = {}
        """While a write runs: slug → (the written document, its statistics entry), so the
        saved statistics' frame and the tallies count each written memory once."""
        self._cuts: dict[str, str] | None = None
        """While a decay write runs: text → its segmentation, as the documents it read store
        them (`SEGMENTED_FIELD`), so it cuts no text again."""
        """Slugs written or deleted since `take_touched` (derived stores catch up on them)."""
        """Commits made through this object: a reader process behind it must `refresh`."""
        self._stats = ScopeStatistics(CONTEXT_WINDOW)
        """The recalled scopes' statistics for `local_bm25`, counted once per scope and then
        kept up to date by every write (`_write`)."""
        self._stats_lock = threading.Lock()
        """Held while the statistics are counted or changed, and across a commit and the
        reader's reload, so a count never sees a commit whose change is still to be applied."""
        self._counts: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._tokens_kept = 0
        """(title, body) → their tokens, for `local_bm25`."""
        self._name_tokens: dict[tuple[str, ...], tuple[str, ...]] = {}
        """A scope's names → their tokens (`_implied`)."""
        self._queries: dict[str, _Query] = {}
        """Recent queries, analysed (`_parsed`)."""
        self._words: dict[str, tuple[str, ...]] = {}
        """A word → its tokens (`_word_tokens`): the analyser's, which never change."""

    @property
    def directory(self) -> Path:
        return self._directory

    def count(self) -> int:
        """Number of documents (deleted ones excluded)."""
        self._require_current()
        with self._errors("counting"):
            return int(self._index.searcher().num_docs)

    def slugs(self) -> set[str]:
        """Every slug in the index, read from the term dictionary."""
        self._require_current()
        with self._errors("listing slugs"):
            searcher = self._index.searcher()
            # The filter makes tantivy count live documents, so deleted slugs drop out.
            terms = searcher.terms_with_prefix(
                "slug", "", filter_query=tantivy.Query.all_query(), limit=None
            )
        return {term for term, _ in terms}

    def _parsed(self, query: str) -> _Query:
        """`query` analysed, kept for the next few calls: one recall analyses its query in
        several steps (ranking, titles, explanations), and a Chinese query costs a jieba cut."""
        parsed = self._queries.get(query)
        if parsed is None:
            if len(self._queries) >= _QUERIES_KEPT:
                self._queries.clear()
            parsed = self._queries[query] = _Query(query, self._analyzer, self._stops)
        return parsed

    def analyse(self, text: str) -> list[str]:
        """`text`'s tokens as the index analyses queries and documents."""
        return list(self._analyzer.analyze(base_forms(segment(text))))

    def _visible(self, scopes: list[str] | None, include_forgotten: bool) -> tantivy.Query:
        clauses = [(tantivy.Occur.Must, tantivy.Query.all_query())]
        if scopes is not None:
            clauses.append((tantivy.Occur.Must, self._any_of("scope_hash", scopes)))
        if not include_forgotten:
            clauses.extend(
                (tantivy.Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN
            )
        return tantivy.Query.boolean_query(clauses)

    def stored(self, slugs: Sequence[str]) -> dict[str, SearchDoc]:
        """These memories as indexed, body included (unknown slugs are absent): recall ranks
        its candidates on them, and weighs what a session turn says, without a trip to the
        vault or the graph."""
        self._require_current()
        with self._errors("reading stored memories"):
            return self._stored(self._index.searcher(), slugs)

    def _stored(
        self, searcher: tantivy.Searcher, slugs: Sequence[str], cuts: dict[str, str] | None = None
    ) -> dict[str, SearchDoc]:
        """The indexed documents of `slugs` as written (unknown slugs are absent); `cuts`
        learns their stored segmentations (`_learn_cuts`)."""
        wanted = list(dict.fromkeys(slugs))
        if not wanted:
            return {}
        by_slug = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, self._term("slug", slug)) for slug in wanted]
        )
        found = {}
        states = self._overlay.states
        for _, address in searcher.search(by_slug, limit=len(wanted), count=False).hits:
            doc = _stored_doc(searcher.doc(address), states, cuts)
            found[doc.slug] = doc
        return found

    def _stored_with_addresses(
        self,
        searcher: tantivy.Searcher,
        slugs: Sequence[str],
        light: Collection[str] = (),
    ) -> dict[str, tuple[SearchDoc, tantivy.DocAddress]]:
        """As `_stored`, with where each document is (a session view's reads start there).

        The `light` slugs are being deleted: in a scope whose statistics are not tallied
        their text is not decoded (`_light_doc`), since nothing reads it: a session view
        hides them and only tallied statistics subtract a deleted document's words (a
        decay sweep deletes 75k documents of a 100k vault)."""
        wanted = list(dict.fromkeys(slugs))
        if not wanted:
            return {}
        by_slug = tantivy.Query.term_set_query(self._schema, "slug", wanted)
        found = {}
        states = self._overlay.states
        for _, address in searcher.search(by_slug, limit=len(wanted), count=False).hits:
            document = searcher.doc(address)
            slug = str(_stored(document, "slug"))
            scope_hash = str(_stored(document, "scope_hash"))
            if slug in light and not self._stats.wants(scope_hash):
                doc = _light_doc(document, slug, scope_hash, states)
                self._lightened.add(slug)
            else:
                doc = _stored_doc(document, states, self._cuts)
            found[doc.slug] = (doc, address)
        return found

    def _addresses(self, searcher: tantivy.Searcher, slugs: Sequence[str]) -> set[tuple[int, int]]:
        """Where the documents of `slugs` are, as (segment, doc), none of them read."""
        if not slugs:
            return set()
        by_slug = tantivy.Query.term_set_query(self._schema, "slug", list(slugs))
        hits = searcher.search(by_slug, limit=len(slugs), count=False).hits
        return {(address.segment_ord, address.doc) for _, address in hits}

    def doc_at(self, searcher: tantivy.Searcher, address: tantivy.DocAddress) -> SearchDoc:
        """The stored document at `address` (the session view reads turns through this)."""
        return _stored_doc(searcher.doc(address), self._overlay.states, self._cuts)

    def words_held(self, text: str, words: Iterable[str]) -> list[str]:
        """The `words` that `text` holds, as the index analyses both ("surfed" holds "surf")."""
        with self._errors("analysing text"):
            held = set(self._analyzer.analyze(base_forms(segment(text))))
            return [
                word
                for word in words
                if (tokens := self._word_tokens(word)) and all(t in held for t in tokens)
            ]

    def _word_tokens(self, word: str) -> tuple[str, ...]:
        """One word's tokens as the index analyses it, kept: a kind expansion asks the same
        hundreds of words in every recall of that kind, and of each hit it explains."""
        tokens = self._words.get(word)
        if tokens is None:
            tokens = tuple(self._analyzer.analyze(base_forms(word)))
            if len(self._words) < _WORDS_KEPT:
                self._words[word] = tokens
        return tokens

    def _expansion(
        self, searcher: tantivy.Searcher, words: Mapping[str, float], query: Sequence[str]
    ) -> dict[str, float]:
        """The tokens of `words` that some document holds and the query does not, each at its
        word's weight: the rarest first, at most `_MAX_EXPANSION_TOKENS`."""
        found: dict[str, tuple[int, float]] = {}
        for word, weight in words.items():
            for token in self._word_tokens(word):
                if token in query or token in self._stops or token in found:
                    continue
                held = int(searcher.doc_freq("body", token))
                if held:
                    found[token] = (held, weight)
        rarest = sorted(found.items(), key=lambda item: (item[1][0], item[0]))
        return {token: weight for token, (_, weight) in rarest[:_MAX_EXPANSION_TOKENS]}

    def _scope_weights(
        self, searcher: tantivy.Searcher, tokens: Sequence[str], scopes: Sequence[str]
    ) -> dict[str, float]:
        """token → how much rarer (or commoner) it is in `scopes` than in the whole index: the
        ratio of its inverse document frequencies (BM25's, over the body), which scales its
        score to what BM25 over these scopes alone would give."""
        Query, Occur = tantivy.Query, tantivy.Occur
        in_scope = self._any_of("scope_hash", scopes)
        total = int(searcher.num_docs)
        scoped = _count(searcher, in_scope)
        weights: dict[str, float] = {}
        if not scoped or scoped == total:
            return weights
        for token in tokens:
            term = Query.term_query(self._schema, "body", token)
            everywhere = int(searcher.doc_freq("body", token))
            if not everywhere:
                continue
            here = _count(
                searcher, Query.boolean_query([(Occur.Must, term), (Occur.Must, in_scope)])
            )
            if here:
                weights[token] = _bm25_idf(scoped, here) / _bm25_idf(total, everywhere)
        return weights

    def _build_query(
        self,
        tokens: list[str],
        boosts: Mapping[str, float],
        scope_hashes: list[str] | None,
        types: list[str] | None,
        include_forgotten: bool,
        weights: Mapping[str, float] | None = None,
    ) -> tantivy.Query:
        Query, Occur = tantivy.Query, tantivy.Occur
        should: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for token in tokens:
            weight = weights.get(token, 1.0) if weights else 1.0
            for field, boost in boosts.items():
                term = Query.term_query(self._schema, field, token)
                should.append((Occur.Should, Query.boost_query(term, boost * weight)))
        clauses = [(Occur.Must, Query.boolean_query(should))]
        if scope_hashes is not None:
            clauses.append((Occur.Must, self._any_of("scope_hash", scope_hashes)))
        if types is not None:
            clauses.append((Occur.Must, self._any_of("type", types)))
        if not include_forgotten:
            # Excluding the two hidden states is cheaper than requiring the (many) visible ones.
            clauses.extend((Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN)
        return Query.boolean_query(clauses)

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value, index_option="basic")

    def _any_of(self, field: str, values: Sequence[str]) -> tantivy.Query:
        """A filter matching any of `values`, scoring zero so it leaves BM25 as it is.

        A disjunction of term queries: faster here than tantivy's TermSetQuery (bench/RESULTS.md).
        """
        terms = [self._term(field, value) for value in dict.fromkeys(values)]
        query = (
            terms[0]
            if len(terms) == 1
            else tantivy.Query.boolean_query([(tantivy.Occur.Should, term) for term in terms])
        )
        return tantivy.Query.const_score_query(query, 0.0)

    @staticmethod
    def _ranked(
        searcher: tantivy.Searcher,
        query: tantivy.Query,
        wanted: int,
        hiding: DecayOverlay | None,
    ) -> list[tuple[float, str, tantivy.Document]]:
        """The top `wanted` hits ordered by (score desc, slug), ties at the cut included,
        none of those `hiding` hides among them.

        tantivy orders equal scores by internal address, which changes with merges; fetching
        until the score drops below the cut-off makes the order depend only on the data.
        """
        ranked = []
        for score, address, _ in IndexReader._top(searcher, query, wanted, hiding, keyed=False):
            document = searcher.doc(address)
            ranked.append((float(score), str(_stored(document, "slug")), document))
        ranked.sort(key=lambda item: (-item[0], item[1]))
        return ranked[:wanted]

    @staticmethod
    def _top(
        searcher: tantivy.Searcher,
        query: tantivy.Query,
        wanted: int,
        hiding: DecayOverlay | None,
        *,
        keyed: bool = True,
    ) -> list[tuple[float, tantivy.DocAddress, object]]:
        """The best `wanted` hits, and every hit that ties with the last of them, as (score,
        address, slug key; None unless `keyed` or hiding), none of the memories `hiding`
        hides among them: those are dropped as they come, and more fetched while the cut
        is not clear."""
        # tantivy sizes its top-k heap by the limit: never ask for more than there are docs.
        available = max(1, int(searcher.num_docs))
        fetch = min(wanted + _TIE_MARGIN, available)
        hidden = hiding if hiding is not None and hiding.hidden_keys else None
        while True:
            found = searcher.search(query, limit=fetch, count=False).hits
            keys: list[object] = [None] * len(found)
            if keyed or hidden is not None:
                keys = list(
                    searcher.fast_field_values(SLUG_KEY_FIELD, [address for _, address in found])
                )
            hits = [
                (score, address, key)
                for (score, address), key in zip(found, keys, strict=True)
                if hidden is None or not _hides(hidden, searcher, address, key)
            ]
            if len(found) < fetch or fetch >= available:
                break
            # Every hit not fetched scores at most the last one fetched (hidden or not).
            if len(hits) >= wanted and hits[wanted - 1][0] > found[-1][0]:
                break
            fetch = min(fetch * 4, available)
        cutoff = hits[wanted - 1][0] if len(hits) >= wanted else float("-inf")
        return [hit for hit in hits if hit[0] >= cutoff]

    def holds_chinese(self) -> bool:
        """Whether the index holds Chinese words (titles and bodies): a recall reader then
        loads jieba before its first call (`memoryd.daemon.readers`)."""
        self._require_current()
        with self._errors("looking for Chinese words"):
            return _holds_han(self._index.searcher(), self._schema)

    def __repr__(self) -> str:
        return f"SearchIndex({str(self._directory)!r})"

    def _require_open(self) -> None:
        if self._closed:
            raise StorageError(f"the search index at {self._directory} is closed")

    def _require_current(self) -> None:
        """Before a read: the index is open, and this process's writes waiting for a commit
        are committed, so every read sees them (read-your-writes)."""
        self._require_open()
        if self._waiting or self._committing:
            self.commit()

    def commit(self) -> None:
        """Commit the documents waiting for a commit (`IndexWriting` writes them)."""

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except _TANTIVY_ERRORS as exc:
            raise StorageError(f"search index {self._directory}: {action} failed: {exc}") from exc
