"""The corpus one recall reads: the search index as seen from one query.

Built once per recall (`Corpus.read`), it holds the scope's text ranking (the candidates,
the query's word shares in the scope, their stored fields) and makes the other reads the
stages need: stored fields by slug, neighbouring turns, titles naming the query, the words
a text holds, explanations. A document read once is kept for the rest of the query, so
each recall stage is a function over this one object rather than a trip to the index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from memoryd.models import MemoryType, SearchHit
from memoryd.recall import conversation
from memoryd.search.doc import SearchDoc
from memoryd.search.index import LocalRanking, SearchIndex


@dataclass
class Corpus:
    """The index reads of one recall for `query` over `scopes` (None: every scope)."""

    index: SearchIndex
    query: str
    scopes: list[str] | None
    ranking: LocalRanking
    """The text stage's ranking: its hits, the query tokens' shares, the hits' documents."""
    _docs: dict[str, SearchDoc] = field(default_factory=dict)
    _absent: set[str] = field(default_factory=set)
    _analysed: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def read(
        cls,
        index: SearchIndex,
        query: str,
        *,
        scopes: list[str] | None,
        types: Sequence[MemoryType] | None,
        include_forgotten: bool,
        limit: int,
        expansion: Mapping[str, float],
        context_boost: float,
        scope_names: Callable[[str], Sequence[str]] | None,
    ) -> Corpus:
        """The scope's BM25 ranking of the query (`SearchIndex.local_bm25`), read once."""
        ranking = index.local_bm25(
            query,
            scope_hashes=scopes,
            types=types,
            include_forgotten=include_forgotten,
            limit=limit,
            expansion=expansion,
            context_boost=context_boost,
            is_turn=conversation.is_turn,
            scope_names=scope_names,
        )
        return cls(index, query, scopes, ranking, dict(ranking.docs))

    @property
    def shares(self) -> dict[str, float]:
        """Each query token's share of the query in the searched scopes."""
        return self.ranking.shares

    def share(self, tokens: Iterable[str]) -> float:
        """How much of the query these tokens carry, 0 to 1 (`LocalRanking.share`)."""
        return self.ranking.share(tokens)

    def analyse(self, text: str) -> list[str]:
        """`text`'s tokens as the index analyses them (kept: stages analyse the query again)."""
        tokens = self._analysed.get(text)
        if tokens is None:
            tokens = self._analysed[text] = self.index.analyse(text)
        return list(tokens)

    def stored(self, slugs: Iterable[str]) -> dict[str, SearchDoc]:
        """These memories as indexed, in the order asked (unknown slugs are absent): the text
        hits' documents and those read before are not read again."""
        wanted = list(dict.fromkeys(slugs))
        missing = [s for s in wanted if s not in self._docs and s not in self._absent]
        if missing:
            found = self.index.stored(missing)
            self._docs.update(found)
            self._absent.update(s for s in missing if s not in found)
        return {s: self._docs[s] for s in wanted if s in self._docs}

    def neighbours(
        self, hit: SearchDoc, *, window: timedelta, per_side: int
    ) -> tuple[list[str], list[str]]:
        """The session turns of `hit`'s scope written just before and after it, nearest first."""
        return self.index.near_in_time(
            scope_hash=hit.scope_hash,
            type=MemoryType.SESSION,
            at=hit.created_at,
            window=window,
            exclude=hit.slug,
            per_side=per_side,
        )

    def titles_naming(
        self, titles: Mapping[str, str], *, names: Sequence[str] = ()
    ) -> dict[str, float]:
        """How much of the query each title names, weighed by the scope's shares
        (`SearchIndex.titles_naming`)."""
        if not titles:
            return {}
        return self.index.titles_naming(self.query, titles, weights=self.shares, names=names)

    def words_held(self, text: str, words: Iterable[str]) -> list[str]:
        """Those of `words` that `text` holds (`SearchIndex.words_held`)."""
        return self.index.words_held(text, words)

    def explain(self, docs: Sequence[SearchDoc]) -> list[SearchHit]:
        """The hits shown for `docs`, with the query's terms they match."""
        return self.index.explain(docs, self.query)


__all__ = ["Corpus"]
