"""Title lookups: which titles name what a query asks about (`titles_naming`), with the
query's words analysed as the index analyses them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memoryd.search.reader import IndexReader
from memoryd.search.words import base_forms
from memoryd.text import segment


class TitleLookups(IndexReader):
    """Titles matched against a query, as the index analyses both."""

    def titles_naming(
        self,
        query: str,
        titles: Mapping[str, str],
        *,
        weights: Mapping[str, float],
        names: Sequence[str] = (),
    ) -> dict[str, float]:
        """The keys of `titles` whose title names what the query asks about, each with how much
        of the query it names (0 to 1): a title names what its memory is about, or who said it.

        A title holding one of `names` (the people and things the query names, whole) names
        all of it. A title holding only some of the query's content words (stemmed as the
        index stems them) names their share of the query's weight, each word weighing as
        `weights` say: the searched scopes' own statistics (`LocalRanking.shares`), so another
        project's memories never change what a title names here (each word alike when none
        is weighed). "Use pnpm" names little of
        "which databases do we use", "Deploying the API" all of "how do we deploy"."""
        self._require_current()
        with self._errors("analysing the query"):
            wanted = list(self._parsed(query).tokens)
            phrases = [
                tokens - self._stops
                for tokens in (set(self._analyzer.analyze(base_forms(segment(n)))) for n in names)
                if tokens - self._stops
            ]
            if not wanted and not phrases:
                return {}
            if sum(weights.get(t, 0.0) for t in wanted) <= 0:
                weights = dict.fromkeys(wanted, 1.0)  # nothing weighed: each word alike
            total = sum(weights.get(t, 0.0) for t in wanted)
            shares: dict[str, float] = {}
            for key, title in titles.items():
                held = set(self._analyzer.analyze(base_forms(segment(title))))
                if any(tokens <= held for tokens in phrases):
                    shares[key] = 1.0
                    continue
                matched = held.intersection(wanted)
                if matched and total > 0:
                    shares[key] = sum(weights.get(t, 0.0) for t in matched) / total
            return shares
