"""The lexicon's and the known entities' names as one literal index (`_PhraseIndex`): each
surface found in a text by one scan, with the entries it names (`_Target`); the known
entities' index is kept per set of entities (`_KnownEntry`); names with Chinese characters
are found as substrings (`LiteralMatcher`). Used by `extraction.pipeline`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.extraction import spacy_stages
from memoryd.extraction.linking import KnownEntity, KnownIndex
from memoryd.extraction.patterns import has_cjk
from memoryd.extraction.token_cache import TokenCache, fingerprint
from memoryd.models import EntityType

log = logging.getLogger(__name__)


class LiteralMatcher:
    """Substring matching for names with Chinese characters.

    Chinese has no spaces and jieba splits unknown names unpredictably (阿里云 → 阿里 / 云), so
    token patterns would miss them; one alternation regex, longest first, finds them all.
    """

    def __init__(self, surfaces: Mapping[str, int]) -> None:
        self._keys = {surface.casefold(): key for surface, key in surfaces.items()}
        ordered = sorted(self._keys, key=len, reverse=True)
        self._regex = (
            re.compile("|".join(re.escape(s) for s in ordered), re.IGNORECASE) if ordered else None
        )

    def __bool__(self) -> bool:
        return self._regex is not None

    def find(self, text: str) -> list[tuple[int, int, int]]:
        """(start, end, key) for every non-overlapping occurrence."""
        if self._regex is None:
            return []
        return [
            (m.start(), m.end(), self._keys[m.group().casefold()])
            for m in self._regex.finditer(text)
        ]


@dataclass(frozen=True)
class _Target:
    """What a matched surface stands for."""

    name: str
    type: EntityType
    stage: str
    confidence: float
    ambiguous: bool
    priority: int
    needs_cue: bool = False
    """Only after a locative word: a place that is also a first name ("Jordan")."""
    everyday: bool = False
    """A capitalised name that is a common word in lower case ("Solid", "Click", "Go"): at
    the start of a clause it needs evidence that it is the name."""
    generic: bool = False
    """A lower-case name that is everyday English or developer jargon ("lockfile", a graph
    entity "api"): it needs evidence that it is a name wherever it stands."""
    cues: frozenset[str] = frozenset()
    """An ambiguous surface ("TF", "pg"): it names this entry only in a text that also holds
    one of these words (casefolded)."""
    kind: str = ""
    """The lexicon entry's kind (`cloud`, `company` ...)."""


def _own_name_first(surface: str, target: _Target) -> tuple[bool, str, str]:
    """Which of the known entities sharing a surface it stands for: the one whose own name it
    is before one that has it as an alias ("stripe": Stripe, not Stripe Inc), then by type
    and name. Not by arrival: the cached index grows as the graph does, so arrival order is
    history, and a fresh index must say the same as a grown one."""
    return (surface.casefold() != target.name.casefold(), target.type.value, target.name)


class _PhraseIndex:
    """Phrase matchers and a substring matcher over (surface, exact-case?, target) items.

    `add` grows it in place: the graph gains entities one write at a time, and adding ten
    patterns is cheap where rebuilding a few thousand is not. When several targets share a
    surface, `rank` (lowest wins) chooses, so the index is a function of its items whatever
    order they came in; without one, the first added wins (the lexicon: its file's order).
    """

    def __init__(
        self,
        nlp: Any,
        name: str,
        rank: Callable[[str, _Target], tuple[Any, ...]] | None = None,
    ) -> None:
        self.nlp = nlp
        self.name = name
        self.rank = rank
        self.targets: list[_Target] = []
        self.matchers: dict[bool, Any] = {}
        self.literal = LiteralMatcher({})
        self.canonical: dict[str, tuple[str, EntityType]] = {}
        self._canonical_rank: dict[str, tuple[Any, ...]] = {}
        self._seen: dict[tuple[str, bool], tuple[int, tuple[Any, ...]]] = {}
        self._literal_surfaces: dict[str, int] = {}

    def _claim(self, surface: str, target: _Target) -> None:
        """The canonical (name, type) a surface stands for, whoever claims it first or best."""
        folded = surface.casefold()
        if folded not in self.canonical:
            self.canonical[folded] = (target.name, target.type)
            if self.rank is not None:
                self._canonical_rank[folded] = self.rank(surface, target)
        elif self.rank is not None:
            rank = self.rank(surface, target)
            if rank < self._canonical_rank[folded]:
                self.canonical[folded] = (target.name, target.type)
                self._canonical_rank[folded] = rank

    def add(
        self, items: Iterable[tuple[str, bool, _Target]], cache: TokenCache | None = None
    ) -> None:
        """Add items; `cache` keeps the phrases' tokens between processes (the lexicon's)."""
        phrases: list[spacy_stages.Phrase] = []
        literal_added = False
        for raw, exact, target in items:
            surface = raw.strip()
            if not surface:
                continue
            self._claim(surface, target)
            key = (surface if exact else surface.casefold(), exact)
            rank = self.rank(surface, target) if self.rank is not None else ()
            seen = self._seen.get(key)
            if seen is not None:
                index, held = seen
                if self.rank is not None and rank < held:
                    self.targets[index] = target  # its pattern stays: the same surface
                    self._seen[key] = (index, rank)
                continue
            self.targets.append(target)
            index = len(self.targets) - 1
            self._seen[key] = (index, rank)
            if has_cjk(surface):
                self._literal_surfaces.setdefault(surface, index)
                literal_added = True
            else:
                phrases.append(spacy_stages.Phrase(surface, index, exact))
        if phrases:
            tokens = self._tokens(phrases, cache)
            spacy_stages.add_phrases(self.nlp, self.matchers, phrases, tokens)
        if literal_added:
            self.literal = LiteralMatcher(self._literal_surfaces)

    def _tokens(
        self, phrases: Sequence[spacy_stages.Phrase], cache: TokenCache | None
    ) -> list[tuple[int, ...]]:
        if cache is None:
            return spacy_stages.phrase_tokens(self.nlp, phrases)
        key = fingerprint(
            spacy_stages.tokenizer_fingerprint(self.nlp), [(p.text, p.exact) for p in phrases]
        )
        tokens = cache.load(self.name, key, len(phrases))
        if tokens is None:
            tokens = spacy_stages.phrase_tokens(self.nlp, phrases)
            cache.save(self.name, key, tokens)
        else:
            log.debug("%s: %d phrases' tokens from the cache", self.name, len(tokens))
        return tokens


@dataclass
class _KnownEntry:
    """The known entities' matchers and linking index for one set of entities."""

    items: frozenset[tuple[str, str, str, tuple[str, ...]]]
    phrases: _PhraseIndex
    linking: KnownIndex


def _known_item(entity: KnownEntity) -> tuple[str, str, str, tuple[str, ...]]:
    return (entity.id, entity.name, entity.type.value, tuple(entity.aliases))
