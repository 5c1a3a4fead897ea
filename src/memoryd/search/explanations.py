"""Why a memory is a hit: the query terms it holds and a snippet from where the first one
occurs (`SearchHit.matched_terms`, `SearchHit.snippet`).
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.models import SearchHit
from memoryd.search.doc import SearchDoc
from memoryd.search.engine import _Query
from memoryd.search.reader import IndexReader
from memoryd.text import blank_cjk

_SNIPPET_CHARS = 200

_SNIPPET_LEAD = 60


def _snippet(body: str, position: int) -> str:
    """At most `_SNIPPET_CHARS` of the body on one line, starting a little before `position`."""
    start = max(0, position - _SNIPPET_LEAD)
    if start > 0:
        # Start on a word boundary when one is near (Chinese has none, so keep `start` then).
        space = body.find(" ", start, position)
        if space >= 0:
            start = space + 1
    prefix = "…" if start > 0 else ""
    window = body[start : start + 2 * _SNIPPET_CHARS]
    text = " ".join(window.split())
    budget = _SNIPPET_CHARS - len(prefix)
    more = start + len(window) < len(body)
    if len(text) <= budget and not more:
        return prefix + text
    if len(text) < budget:
        return prefix + text + "…"
    cut = text[: budget - 1]
    space = cut.rfind(" ")
    if space > budget // 2:
        cut = cut[:space]
    return prefix + cut.rstrip() + "…"


class Explaining(IndexReader):
    """Hits explained for a query."""

    def explain(self, docs: Sequence[SearchDoc], query: str) -> list[SearchHit]:
        """`docs` as hits, each explained for `query` (the terms it matches, a snippet from
        where the first one occurs). Recall explains the memories it ranked from the documents
        it ranked them on, without reading them from the index again."""
        self._require_current()
        with self._errors("analysing the query"):
            parsed = self._parsed(query)
        return [self._hit(doc, 0.0, parsed) for doc in docs]

    def _hit(self, doc: SearchDoc, score: float, parsed: _Query | None) -> SearchHit:
        matched: list[str] = []
        position = 0
        if parsed is not None:
            matched, position = self._explain(parsed, doc.title, doc.body, doc.tags, doc.triggers)
        # Every field is typed here already: skipping validation matters when recall explains
        # its hits on the daemon's GIL.
        return SearchHit.model_construct(
            slug=doc.slug,
            type=doc.type,
            title=doc.title,
            scope_hash=doc.scope_hash,
            decay_state=doc.decay_state,
            created_at=doc.created_at,
            score=float(score),
            snippet=_snippet(doc.body, position) if parsed is not None else "",
            matched_terms=matched,
            triggers=list(doc.triggers),
        )

    def _explain(
        self,
        parsed: _Query,
        title: str,
        body: str,
        tags: list[str],
        triggers: list[str],
    ) -> tuple[list[str], int]:
        """The query terms found in the document, and where the first one starts in the body."""
        others = "\n".join([title, *tags, *triggers])
        body_lower, others_lower = body.lower(), others.lower()
        body_tokens = self._analyzer.pre_tokenize(blank_cjk(body)).tokens
        body_stems = {token.text for token in body_tokens}
        other_stems = set(self._analyzer.analyze(blank_cjk(others)))
        matched: list[str] = []
        english_stems: set[str] = set()
        first = len(body)
        for term in parsed.terms:
            if term in parsed.parts:
                # A whole Chinese word explains the hit; else whichever of its parts occur do.
                for word in (
                    (term,) if term in body_lower or term in others_lower else parsed.parts[term]
                ):
                    at = body_lower.find(word)
                    if at >= 0 or word in others_lower:
                        matched.append(word)
                    if at >= 0:
                        first = min(first, at)
            else:
                stems = parsed.stems[term]
                if stems and all(s in self._stops for s in stems):
                    continue  # a function word ("the", "is") explains nothing
                if stems and all(s in body_stems or s in other_stems for s in stems):
                    matched.append(term)
                    english_stems.update(stems)
        for token in body_tokens:
            if token.text in english_stems:
                first = min(first, token.char_offset_from)
                break
        return list(dict.fromkeys(matched)), (first if first < len(body) else 0)
