"""Scope-local BM25 (`local_bm25`): tantivy finds the candidates, each is scored from its stored
text with statistics over the searched scopes' live memories only (`search.tallies`), so a
project's ranking never depends on other projects or on its write history.

A memory's tags and triggers are words it asked to be recalled by: a query naming one finds
it (`LABEL_FIELDS`), scored as a match in the title.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from typing import NamedTuple

from memoryd.models import MemoryType, typed
from memoryd.search.doc import SearchDoc
from memoryd.search.engine import (
    CONTEXT_FIELD,
    _bm25_idf,
    _memory_type,
    _stored_doc,
    _values,
    tantivy,
)
from memoryd.search.overlay import DecayOverlay
from memoryd.search.stats import Entry
from memoryd.search.tallies import IndexTallies

_BM25_K1 = 1.2

_BM25_B = 0.75

LABEL_FIELDS = ("tags", "triggers")
"""Searched beside title and body to find candidates. A label's word counts once per memory
(a tag said twice says no more) at the weight of a title word of the scope's mean length, and
adds nothing to the field lengths or the statistics: labels are short and set apart from
the text, like a second title."""

_LABELS_KEPT = 100_000
"""Distinct (tags, triggers) sets whose tokens are kept between recalls."""


class LocalScore(NamedTuple):
    """A memory's scope-local BM25 score, and `relevance`: the idf-weighted share of the
    query's words it holds, each saturating with its frequency (0 to 1, comparable across
    queries and scopes: a memory holding every word many times scores near 1)."""

    slug: str
    score: float
    relevance: float
    matched: frozenset[str] = frozenset()
    """The query's tokens the memory holds."""
    evidence: float = 0.0
    """`relevance` counting only the words that name something (`words.LIGHT_WORDS` left
    out): how far holding them is evidence that the memory answers (recall's calibration)."""


class LocalRanking(NamedTuple):
    """`local_bm25`'s hits, best first, and each query token's share of the most the query
    could score in the scope (its idf over the sum of the query's; the shares sum to 1)."""

    hits: list[LocalScore]
    shares: dict[str, float]
    docs: dict[str, SearchDoc]
    """The hits as indexed (recall ranks and explains on them without fetching them again)."""
    mass: float = 0.0
    """The most the query could score (the sum of its words' idf, light words left out) in
    units of the idf of a word the scope holds once: how much the query names, for
    calibrating relevance."""

    def share(self, tokens: Iterable[str]) -> float:
        """How much of the query these tokens carry, 0 to 1."""
        return min(1.0, sum(self.shares.get(t, 0.0) for t in set(tokens)))


def _entry_doc(entry: Entry) -> SearchDoc:
    """The `SearchDoc` a statistics entry was counted from (`SearchIndex._entry`)."""
    return typed(
        SearchDoc,
        slug=entry.slug,
        scope_hash=entry.scope_hash,
        type=entry.type,
        decay_state=entry.state,
        title=entry.written_title,
        body=entry.text,
        tags=list(entry.tags),
        triggers=list(entry.triggers),
        created_at=entry.at,
        withheld=False,
    )


class LocalBM25(IndexTallies):
    """`local_bm25` over a `SearchIndex`'s scope statistics."""

    def local_bm25(
        self,
        query: str,
        *,
        scope_hashes: Sequence[str] | None = None,
        types: Sequence[MemoryType] | None = None,
        include_forgotten: bool = False,
        limit: int = 50,
        expansion: Mapping[str, float] | None = None,
        context_boost: float = 0.0,
        is_turn: Callable[[MemoryType, str], bool] | None = None,
        scope_names: Callable[[str], Sequence[str]] | None = None,
    ) -> LocalRanking:
        """Okapi BM25 (k1 1.2, b 0.75) over each memory's title and body, with statistics
        taken over the searched scopes' live, visible memories only, best first.

        tantivy's own scores take document frequencies and lengths over the whole index and
        count deleted copies until segments merge, so a project's ranking would depend on
        other projects and on its write history. Here tantivy only finds the candidates;
        term frequencies come from their stored text and every statistic from live documents
        of the scopes, so the same data always ranks the same. Each score comes with its
        share of the most the query could score there (`LocalScore.relevance`), and the
        ranking with each query word's share of that most (`LocalRanking.shares`).

        `scope_names` gives a scope's own names (its directory, its repository): what every
        memory of the scope is about, said or not. Their words count as held by every memory
        of that scope, so inside it they weigh next to nothing ("what ORM does ecommerce-api
        use", asked in ecommerce-api, asks "what ORM"), and across scopes they weigh as
        rare as that scope's memories are.
        """
        self._require_current()
        scopes = None if scope_hashes is None else _values(scope_hashes)
        type_values = None if types is None else [_memory_type(t) for t in _values(types)]
        if limit <= 0 or scopes == [] or type_values == []:
            return LocalRanking([], {}, {})
        with self._errors("analysing the query"):
            parsed = self._parsed(query)
        if not parsed.tokens:
            return LocalRanking([], {}, {})
        weights = dict.fromkeys(parsed.tokens, 1.0)
        with self._errors("searching"), self._stats_lock:
            # The statistics and the searcher are taken together (a commit changes both under
            # this lock), so a hit's key names the entry counted from that very document.
            stats = self._tallied(scopes, include_forgotten, is_turn)
            searcher = self._index.searcher()
            if expansion:
                weights.update(self._expansion(searcher, expansion, list(parsed.tokens)))
            boosts = {"title": 1.0, "body": 1.0, **dict.fromkeys(LABEL_FIELDS, 1.0)}
            finding = {**boosts, CONTEXT_FIELD: context_boost} if context_boost else boosts
            found = self._build_query(list(weights), finding, scopes, type_values, False)
            ranked = self._candidates(searcher, found, limit * 2, stats.entry, self._overlay)
            if include_forgotten:
                # Hidden memories are candidates by their own words only: a turn that fades
                # keeps the indexed context it had then (`DecayOverlay`), which a fresh index
                # would not give it; its score still counts its context, from the statistics.
                own = self._build_query(list(weights), boosts, scopes, type_values, True)
                visible = {entry.slug for _, entry in ranked}
                ranked += [
                    hit
                    for hit in self._candidates(searcher, own, limit * 2, stats.entry, None)
                    if hit[1].slug not in visible
                ]
            docs, mean_title, mean_body = stats.docs, stats.mean_title, stats.mean_body
            implied = self._implied(stats.scopes, scope_names)
            idf: dict[str, float] = {}
            ceiling: dict[str, float] = {}
            for token in weights:
                here = stats.df(token)
                for scope in implied.get(token, ()):
                    in_scope, holding = stats.scope_counts(scope, token)
                    here += in_scope - holding
                idf[token] = _bm25_idf(max(docs, here), here)
                # For the relevance: a word the scope never holds weighs as one held once
                # (in a small scope an absent word would otherwise outweigh the rest).
                ceiling[token] = _bm25_idf(max(docs, 1), max(here, 1))
            contexts = {
                entry.slug: stats.context(entry.slug, entry.scope_hash) for _, entry in ranked
            }
        most = sum(ceiling[t] * weights[t] for t in parsed.tokens) or 1.0
        # Light words rank (a memory saying "we use Redis" likelier says what is used) but
        # are no evidence that a memory answers: `LocalScore.evidence` and the query's
        # weight leave them out.
        named = [t for t in parsed.tokens if t not in self._light] or list(parsed.tokens)
        most_named = sum(ceiling[t] * weights[t] for t in named) or 1.0
        light = frozenset(parsed.tokens).difference(named)
        scored: list[LocalScore] = []
        entries = {}
        # Only the query words a memory holds are counted: a kind expansion brings hundreds
        # of query words, and counting each in every candidate's text (and its context) was
        # most of a slow recall. They are taken in the query's order, so the sums add up in
        # the same order as over every word.
        order = {token: i for i, token in enumerate(weights)}
        asked = frozenset(order)
        for _, entry in ranked:
            slug, titled, said = entry.slug, entry.title, entry.body
            entries[slug] = entry
            # BM25F: each field's frequency normalised by its own length against the scope's
            # mean for that field, summed, then saturated once.
            title_norm = 1 - _BM25_B + _BM25_B * len(titled) / max(mean_title, 1.0)
            body_norm = 1 - _BM25_B + _BM25_B * len(said) / max(mean_body, 1.0)
            around = contexts[slug]
            context_norm = (
                1 - _BM25_B + _BM25_B * sum(map(len, around)) / max(stats.mean_context, 1.0)
            )
            score = 0.0
            evidence = 0.0
            lightly = 0.0
            matched = []
            hear = bool(around and context_boost)
            labelled = self._label_tokens((*entry.tags, *entry.triggers))
            # The query's words among the memory's, looked up one by one in the (small) set
            # of the query's: no set of every word the memory holds is built.
            texts = (said, titled, labelled, *(around if hear else ()))
            held_words = asked.intersection(chain.from_iterable(texts))
            for token in sorted(held_words, key=order.__getitem__):
                weight = weights[token]
                tf = said.count(token) / body_norm + titled.count(token) / title_norm
                tf += token in labelled  # a label's word: once, as a title word of mean length
                saturation = tf / (tf + _BM25_K1)
                if tf:
                    matched.append(token)
                if hear:
                    # The context is a field of its own, at `context_boost` of a full match:
                    # a reply matches, faintly, on what it answers.
                    heard = sum(near.count(token) for near in around) / context_norm
                    saturation += context_boost * heard / (heard + _BM25_K1)
                if saturation:
                    score += weight * idf[token] * saturation * (_BM25_K1 + 1)
                    evidence += weight * idf[token] * min(saturation, 1.0)
                    if token in light:
                        lightly += weight * idf[token] * min(saturation, 1.0)
            if score > 0:
                held = frozenset(matched)
                relevance = min(1.0, evidence / most)
                named_share = min(1.0, (evidence - lightly) / most_named)
                scored.append(LocalScore(slug, score, relevance, held, named_share))
        scored.sort(key=lambda s: (-s.score, s.slug))
        shares = {t: ceiling[t] * weights[t] / most for t in parsed.tokens}
        kept = scored[:limit]
        held_docs = {hit.slug: _entry_doc(entries[hit.slug]) for hit in kept}
        once = _bm25_idf(max(docs, 1), 1)
        return LocalRanking(kept, shares, held_docs, most_named / once if once > 0 else 0.0)

    def _label_tokens(self, labels: tuple[str, ...]) -> frozenset[str]:
        """The tokens of a memory's tags and triggers, as the index analyses them."""
        if not labels:
            return frozenset()
        return frozenset(self._names_analysed(labels))

    def _names_analysed(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The distinct tokens of `names` (a scope's names, a memory's labels), stop words
        left out, kept between recalls."""
        tokens = self._name_tokens.get(names)
        if tokens is None:
            analysed = (t for name in names for t in self.analyse(name))
            tokens = tuple(t for t in dict.fromkeys(analysed) if t not in self._stops)
            if len(self._name_tokens) < _LABELS_KEPT:
                self._name_tokens[names] = tokens
        return tokens

    def _implied(
        self, scopes: Sequence[str], scope_names: Callable[[str], Sequence[str]] | None
    ) -> dict[str, list[str]]:
        """token → the scopes among `scopes` whose own names hold it (`local_bm25`)."""
        implied: dict[str, list[str]] = {}
        if scope_names is None:
            return implied
        for scope in scopes:
            for token in self._names_analysed(tuple(scope_names(scope))):
                implied.setdefault(token, []).append(scope)
        return implied

    def _candidates(
        self,
        searcher: tantivy.Searcher,
        query: tantivy.Query,
        wanted: int,
        entry_of: Callable[[int], Entry | None],
        hiding: DecayOverlay | None,
    ) -> list[tuple[float, Entry]]:
        """`_ranked`'s hits of a tallied scope, as the entries its statistics keep: each hit
        is found by its slug key (`SLUG_KEY_FIELD`), and only a hit whose key two memories
        share is read from the store."""
        ranked = []
        for score, address, key in self._top(searcher, query, wanted, hiding):
            entry = entry_of(key) if isinstance(key, int) else None
            if entry is None:
                entry = self._entry(_stored_doc(searcher.doc(address), self._overlay.states))
            ranked.append((float(score), entry))
        ranked.sort(key=lambda item: (-item[0], item[1].slug))
        return ranked[:wanted]
