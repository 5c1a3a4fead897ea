"""The offline extraction stage: `Extractor.extract(text) -> Extraction` (DESIGN §5).

Stages, in order:

1. known: phrase matchers over the graph's entities and aliases, cached per set of entities
   and grown in place when a set only adds entities to a cached one. A surface two entities
   share stands for the one it names, then by type and name (`_own_name_first`), and ties
   between matchers go by what they propose, so the output is a function of the text and the
   set of known entities, never of the order the index grew in;
2. lexicon: phrase matchers over the shipped lexicon (`data/lexicon.jsonl`) and place gazetteer
   (`data/places.jsonl`), built once per language from tokens kept in the user's cache dir
   (`token_cache`); names with Chinese characters are matched
   as substrings instead (jieba splits unknown names unpredictably). Places match with their
   exact case, never as part of a longer capitalised name ("Paris Hilton"), and a place that
   is also a first name ("Jordan") only after a locative word ("in", "to", "from" ...);
3. patterns: shapes and code context (`patterns.py`), and lone first names from
   `data/first_names.txt` as weak people;
4. ner: a pretrained spaCy model's entities, only when one is configured and installed;
5. linking: proposals mapped onto known entities and merged (`linking.py`);
6. relations: sentence rules (`relations.py`), plus `memory mentions X` for every entity.

Overlaps are settled by stage priority (known > code context > lexicon > shapes > NER > weak
shapes), then by length. Text with any Chinese character goes through the jieba pipeline,
which also keeps English words whole, so mixed text needs one pass; the pure-Python rules run
over the whole text in both languages.

This module never imports spaCy; `spacy_stages` does, lazily.

Over 600 lines: the stage protocol, the lexicons it loads and the merge of stage results are one
data flow.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from memoryd.extraction import patterns, relations, spacy_stages
from memoryd.extraction.linking import KnownEntity, KnownIndex, link_with_index, normalise_name
from memoryd.extraction.patterns import LiteralMatcher, PatternHit, has_cjk
from memoryd.extraction.token_cache import TokenCache, fingerprint
from memoryd.extraction.wordlists import data_file, load_common_words
from memoryd.models import EntityType, Extraction, Predicate, ProposedEntity, ProposedRelation

log = logging.getLogger(__name__)

KNOWN_CACHE_SIZE = 8
CONTEXT_CHARS = 200
MAX_FILE_NOTES = 20
NER_MAX_CHARS = 100_000
NER_CONFIDENCE: dict[EntityType, float] = {
    EntityType.PERSON: 0.6,
    EntityType.ORGANIZATION: 0.55,
    EntityType.PLACE: 0.6,
    EntityType.TOOL: 0.5,
}
EMPTY_KNOWN = KnownIndex(())
PRIORITY_KNOWN = 0
PRIORITY_LEXICON = 2
PRIORITY_NER = 4
PRIORITY_GUESS = 6
REGISTRY_SOURCES = frozenset({"pypi", "npm", "pypi+npm"})
"""Lexicon entries taken from package registries by rank; the rest were chosen by name."""
PLACE_CONFIDENCE = 0.85
"""A gazetteer name found with its exact case; a few are also surnames ("Houston")."""
_WORD_BEFORE_RE = re.compile(r"([A-Za-z]+)[ \t]+$")
_CAPITALISED_BEFORE_RE = re.compile(r"(?<![\w.])([A-Z][a-z]+) $")
_CAPITALISED_AFTER_RE = re.compile(r" ([A-Z][a-z]+)(?![\w])")
_CUE_WORD_RE = re.compile(r"[^\W_]+")
_PRODUCT_AFTER_RE = re.compile(r" ([A-Z][A-Za-z0-9]*(?: [A-Z][A-Za-z0-9]*)?)(?![\w-]|\.\w)")
_STYLE_AFTER_RE = re.compile(r" (?:code )?style\b", re.IGNORECASE)
VENDOR_KINDS = frozenset({"cloud", "company"})
VENDOR_PRODUCT_CONFIDENCE = 0.8


@dataclass(frozen=True)
class LexiconEntry:
    """One line of `data/lexicon.jsonl` or `data/places.jsonl`."""

    name: str
    type: EntityType
    aliases: tuple[str, ...]
    source: str
    case_sensitive: frozenset[str]
    kind: str = ""
    """What sort of tool, library or place it is (`database`, `framework`, `city` ...)."""
    first_names: frozenset[str] = frozenset()
    """Surfaces that are also common first names ("Jordan"): places only after a cue."""
    cues: tuple[tuple[str, frozenset[str]], ...] = ()
    """Ambiguous surfaces ("TF", "pg") and the words of which one must stand in the same
    text for them to name this entry ("terraform", "plan"; "sql", "database")."""


def load_lexicon(path: Path | None = None) -> tuple[LexiconEntry, ...]:
    """The shipped lexicon, or another file in the same format."""
    if path is None:
        return _default_lexicon()
    return _parse_lexicon(path.read_text(encoding="utf-8"))


@cache
def _default_lexicon() -> tuple[LexiconEntry, ...]:
    lexicon = _parse_lexicon(data_file("lexicon.jsonl").read_text(encoding="utf-8"))
    aliases = _parse_lexicon(data_file("aliases.jsonl").read_text(encoding="utf-8"))
    return merge_aliases(lexicon, aliases)


@cache
def load_alias_lexicon() -> tuple[LexiconEntry, ...]:
    """The alias lexicon alone (`data/aliases.jsonl`): the names engineers type for a thing
    ("K8s" for Kubernetes), a few hundred rows, read without the whole lexicon."""
    return _parse_lexicon(data_file("aliases.jsonl").read_text(encoding="utf-8"))


def merge_aliases(
    lexicon: Sequence[LexiconEntry], aliases: Sequence[LexiconEntry]
) -> tuple[LexiconEntry, ...]:
    """The lexicon with the alias lexicon (`data/aliases.jsonl`) folded in: a row named as a
    lexicon entry adds its surfaces to that entry (one entity per thing: "k8s", "K8s" and
    "Kubernetes"), any other row is a new entry, placed after the curated ones so that it
    claims its surfaces before a registry package does."""
    by_name = {entry.name: entry for entry in aliases}
    merged: list[LexiconEntry] = []
    for entry in lexicon:
        extra = by_name.pop(entry.name, None)
        if extra is not None:
            entry = replace(
                entry,
                aliases=tuple(dict.fromkeys((*entry.aliases, *extra.aliases))),
                case_sensitive=entry.case_sensitive | extra.case_sensitive,
                cues=entry.cues + extra.cues,
            )
        merged.append(entry)
    curated = sum(1 for entry in merged if entry.source == "curated")
    return (*merged[:curated], *by_name.values(), *merged[curated:])


@cache
def _lexicon_cues() -> dict[tuple[EntityType, str, str], frozenset[str]]:
    """(type, name, surface) → the cue words the shipped lexicon requires for that surface."""
    return {
        (entry.type, entry.name, surface): words
        for entry in load_lexicon()
        for surface, words in entry.cues
    }


@cache
def load_places() -> tuple[LexiconEntry, ...]:
    """The shipped place gazetteer: countries, first-level regions and large cities."""
    return _parse_lexicon(data_file("places.jsonl").read_text(encoding="utf-8"))


def _parse_lexicon(text: str) -> tuple[LexiconEntry, ...]:
    entries: list[LexiconEntry] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "_header" in row:  # a data file's provenance line
            continue
        entries.append(
            LexiconEntry(
                name=row["name"],
                type=EntityType(row["type"]),
                aliases=tuple(row.get("aliases", ())),
                source=row.get("source", ""),
                case_sensitive=frozenset(row.get("case_sensitive", ())),
                kind=row.get("kind", ""),
                first_names=frozenset(row.get("first_names", ())),
                cues=tuple(
                    (surface, frozenset(word.casefold() for word in words))
                    for surface, words in sorted(row.get("cues", {}).items())
                ),
            )
        )
    return tuple(entries)


@cache
def load_everyday_nouns() -> frozenset[str]:
    """Lower-case English nouns (WordNet's): a capitalised phrase ending in one ("German
    Shepherd") is no person unless a first name opens it."""
    text = data_file("everyday_nouns.txt").read_text(encoding="utf-8")
    return frozenset(word.strip() for word in text.splitlines() if word.strip())


@cache
def load_hyponyms() -> dict[str, tuple[str, ...]]:
    """Kinds of everyday things and the words for them (WordNet's): "sport" → archery,
    basketball, surfing …; recall reads them for questions asking for a kind."""
    text = data_file("hyponyms.jsonl").read_text(encoding="utf-8")
    rows = (json.loads(line) for line in text.splitlines() if line.strip())
    return {row["kind"]: tuple(row["words"]) for row in rows}


@cache
def load_first_names() -> frozenset[str]:
    """Common first names, capitalised ("Kyle"); a lone one in prose is a weak `person`."""
    text = data_file("first_names.txt").read_text(encoding="utf-8")
    return frozenset(name.strip() for name in text.splitlines() if name.strip())


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


@dataclass(frozen=True)
class _Candidate:  # frozen: `replace` makes the variants
    start: int
    end: int
    name: str
    type: EntityType
    confidence: float
    stage: str
    priority: int
    aliases: tuple[str, ...] = ()
    kind: str = ""


class Extractor:
    """Offline entity and relation extraction; safe to share between threads.

    The spaCy pipelines, the lexicon matchers and the optional model load on first use (or
    on `warm_up()`), never at import or construction. The lexicon's tokens are kept in
    `cache_dir` (default: the user's cache dir) for the next process.
    """

    def __init__(self, *, spacy_model: str | None = None, cache_dir: Path | None = None) -> None:
        self._spacy_model = spacy_model
        self._cache_dir = cache_dir
        self._lock = threading.RLock()
        self._nlp: dict[str, Any] = {}
        self._lexicon_index: dict[str, _PhraseIndex] = {}
        self._known_index: OrderedDict[tuple[str, frozenset[Any]], _KnownEntry] = OrderedDict()
        self._model: Any | None = None
        self._model_tried = False

    # --- lazily built resources (call with the lock held) ----------------------------------

    def _pipeline(self, lang: str) -> Any:
        nlp = self._nlp.get(lang)
        if nlp is None:
            nlp = spacy_stages.blank_pipeline(lang)
            self._nlp[lang] = nlp
        return nlp

    def _lexicon(self, lang: str) -> _PhraseIndex:
        index = self._lexicon_index.get(lang)
        if index is None:
            common = load_common_words()
            items: list[tuple[str, bool, _Target]] = []
            for entry in load_lexicon():
                cues = dict(entry.cues)
                base = (
                    patterns.REGISTRY_CONFIDENCE
                    if entry.source in REGISTRY_SOURCES
                    else patterns.CURATED_CONFIDENCE
                )
                for surface in (entry.name, *entry.aliases):
                    exact = len(surface) < 4 or surface in entry.case_sensitive
                    target = _Target(
                        entry.name,
                        entry.type,
                        "lexicon",
                        base,
                        ambiguous=surface in entry.case_sensitive or surface.lower() in common,
                        priority=PRIORITY_LEXICON,
                        everyday=surface != surface.lower() and surface.lower() in common,
                        generic=entry.source in REGISTRY_SOURCES
                        and patterns.generic_word(surface, common),
                        cues=cues.get(surface, frozenset()),
                        kind=entry.kind,
                    )
                    items.append((surface, exact, target))
            items += _place_phrases(load_places())
            index = _PhraseIndex(self._pipeline(lang), f"lexicon_{lang}")
            index.add(items, self._token_cache())
            self._lexicon_index[lang] = index
            log.debug("lexicon matchers for %s: %d surfaces", lang, len(index.targets))
        return index

    def _token_cache(self) -> TokenCache:
        directory = self._cache_dir
        if directory is None:
            from memoryd.config import default_cache_dir  # its settings stack loads lazily

            directory = default_cache_dir()
        return TokenCache(directory / "extraction")

    def _known(
        self, lang: str, known: Sequence[KnownEntity]
    ) -> tuple[_PhraseIndex | None, KnownIndex]:
        """The known entities' matchers and linking index, cached per set of entities (LRU).

        A set that only adds entities to a cached one grows that entry instead of building
        anew: the service passes the whole graph, which gains a few entities per write.
        """
        if not known:
            return None, EMPTY_KNOWN
        items = frozenset(_known_item(k) for k in known)
        key = (lang, items)
        entry = self._known_index.get(key)
        if entry is not None:
            self._known_index.move_to_end(key)
            return entry.phrases, entry.linking
        base = max(
            (k for k in self._known_index if k[0] == lang and k[1] <= items),
            key=lambda k: len(k[1]),
            default=None,
        )
        if base is not None:
            entry = self._known_index.pop(base)
            added = [k for k in known if _known_item(k) not in entry.items]
            entry.items = items
        else:
            phrases = _PhraseIndex(self._pipeline(lang), f"known_{lang}", _own_name_first)
            entry = _KnownEntry(items, phrases, KnownIndex(()))
            added = list(known)
        entry.phrases.add(self._known_phrases(added))
        entry.linking.add(added)
        self._known_index[key] = entry
        if len(self._known_index) > KNOWN_CACHE_SIZE:
            self._known_index.popitem(last=False)
        return entry.phrases, entry.linking

    @staticmethod
    def _known_phrases(known: Iterable[KnownEntity]) -> list[tuple[str, bool, _Target]]:
        """Everyday-word names (and developer jargon: "api", "lockfile") match with exact case;
        a lower-case one ("memory") with a lower confidence too, while a capitalised one
        ("Paris", "Solid") keeps the usual confidence except at the start of a sentence
        (`ambiguous`). Unlike a lexicon name, a known one opening a sentence needs no further
        evidence: the graph holding "Solid" makes "Solid signals …" likely the library. A
        surface the lexicon gives cues ("TF", "pg") keeps them: the graph holding Terraform
        does not make every "TF" Terraform."""
        common = load_common_words()
        cued = _lexicon_cues()
        items: list[tuple[str, bool, _Target]] = []
        for entity in known:
            for surface in (entity.name, *entity.aliases):
                everyday = surface.lower() in common or patterns.generic_word(
                    surface, common, compounds=False
                )
                target = _Target(
                    entity.name,
                    entity.type,
                    "known",
                    patterns.KNOWN_COMMON_WORD_CONFIDENCE
                    if everyday and surface.islower()
                    else patterns.KNOWN_CONFIDENCE,
                    ambiguous=everyday,
                    priority=PRIORITY_KNOWN,
                    cues=cued.get((entity.type, entity.name, surface), frozenset()),
                )
                items.append((surface, len(surface) < 4 or everyday, target))
        return items

    def _ner_model(self) -> Any | None:
        if self._spacy_model and not self._model_tried:
            self._model_tried = True
            self._model = spacy_stages.load_model(self._spacy_model)
        return self._model

    def warm_up(self, languages: Sequence[str] = ("en", "zh")) -> None:
        """Build pipelines and lexicon matchers now rather than on the first `extract`."""
        with self._lock:
            for lang in languages:
                self._lexicon(lang)
            self._ner_model()
        load_everyday_nouns()
        normalise_name("預熱")  # loads zhconv's conversion table

    # --- extraction ------------------------------------------------------------------------

    def extract(
        self, text: str, *, title: str = "", known: Sequence[KnownEntity] = ()
    ) -> Extraction:
        """Propose the entities and relations of one memory (its title, then its body)."""
        offset = len(title) + 2 if title else 0
        full = f"{title}\n\n{text}" if title else text
        if not full.strip():
            return Extraction()
        lang = "zh" if has_cjk(full) else "en"
        common = load_common_words()
        sentences = patterns.split_sentences(full)
        scan = patterns.scan_patterns(
            full,
            common,
            first_names=load_first_names(),
            sentences=sentences,
            everyday_nouns=load_everyday_nouns(),
        )
        stages = ["known"] if known else []
        stages += ["lexicon", "patterns"]
        notes = [f"language: {lang}"]

        with self._lock:
            lexicon = self._lexicon(lang)
            known_index, link_index = self._known(lang, known)
            doc = spacy_stages.tokenize(self._pipeline(lang), full)
            candidates = _vendor_products(
                full, self._phrase_candidates(doc, full, lexicon, sentences), common
            )
            if known_index is not None:
                candidates += self._phrase_candidates(doc, full, known_index, sentences)
            ner = self._ner_candidates(full, lang, notes)
        if ner is not None:
            candidates += ner
            stages.append("ner")

        canonical = dict(lexicon.canonical)
        if known_index is not None:
            canonical.update(known_index.canonical)
        candidates += [_from_hit(h, "pattern") for h in patterns.scan_code_context(full, canonical)]
        candidates += [_from_hit(h, "pattern") for h in scan.hits]
        candidates += _module_roots(scan, canonical)
        accepted = _resolve(candidates, scan.shields)

        mentions = [relations.Mention(c.start, c.end, c.type, c.confidence) for c in accepted]
        cited_spans = set(scan.cited)
        cited = [(c.start, c.end) for c in accepted if (c.start, c.end) in cited_spans]
        findings = relations.find_relations(full, sentences, mentions, cited, common)
        guesses = [
            _Candidate(g.start, g.end, g.name, g.type, g.confidence, "pattern", PRIORITY_GUESS)
            for g in findings.guesses
        ]
        accepted = _resolve(accepted + guesses, ())

        sentence_starts = [start for start, _ in sentences]
        proposals = [_proposal(c, full, sentences, sentence_starts) for c in accepted]
        entities = link_with_index(proposals, link_index)
        stages.append("linking")
        rels = _relations(findings.relations, entities)
        rels += relations.mention_relations(entities, full)
        stages.append("relations")

        notes += findings.notes
        notes += _path_notes(scan, accepted)
        return Extraction(
            entities=[_shift(e, offset) for e in entities],
            relations=rels,
            stages=stages,
            notes=notes,
        )

    def _phrase_candidates(
        self,
        doc: Any,
        text: str,
        index: _PhraseIndex,
        sentences: Sequence[tuple[int, int]],
    ) -> list[_Candidate]:
        starts = {start for start, _ in sentences}
        found = spacy_stages.match_phrases(doc, index.matchers.values()) + index.literal.find(text)
        out: list[_Candidate] = []
        pending: list[_Candidate] = []
        """Everyday-word names opening a clause without evidence: kept when the same name
        stands elsewhere in the text where its capital is its own."""
        words: frozenset[str] | None = None
        for start, end, key in found:
            target = index.targets[key]
            surface = text[start:end]
            if patterns.fence_label(text, start) or patterns.in_identifier(text, start, end):
                continue
            if target.generic and not patterns.name_evidence(text, start, end):
                continue
            if target.needs_cue and not _after_cue(text, start):
                continue
            if target.cues:
                if words is None:
                    words = frozenset(_CUE_WORD_RE.findall(text.casefold()))
                if target.cues.isdisjoint(words):
                    continue
            if target.type is EntityType.PERSON and patterns.is_speaker_label(text, start, end):
                continue
            if (
                target.type is EntityType.PLACE
                and target.stage == "lexicon"
                and _inside_longer_name(text, start, end, index.canonical)
            ):
                continue
            confidence = target.confidence
            if target.ambiguous and start in starts:
                confidence = min(confidence, patterns.AMBIGUOUS_SENTENCE_START_CONFIDENCE)
            candidate = _Candidate(
                start,
                end,
                target.name,
                target.type,
                confidence,
                target.stage,
                target.priority,
                (surface,) if surface != target.name else (),
                target.kind,
            )
            if (
                target.everyday
                and patterns.opens_clause(text, start, starts)
                and not patterns.clause_start_evidence(text, start, end)
            ):
                pending.append(candidate)
            else:
                out.append(candidate)
        named = {c.name for c in out}
        return out + [c for c in pending if c.name in named]

    def _ner_candidates(self, text: str, lang: str, notes: list[str]) -> list[_Candidate] | None:
        if not self._spacy_model:
            return None
        model = self._ner_model()
        if model is None:
            notes.append(f"ner unavailable: spaCy model {self._spacy_model!r} is not installed")
            return None
        model_lang = spacy_stages.model_lang(model)
        if model_lang not in (lang, "xx") or len(text) > NER_MAX_CHARS:
            return None
        out: list[_Candidate] = []
        for start, end, surface, label in spacy_stages.named_entities(model, text):
            etype = EntityType(label)
            out.append(
                _Candidate(start, end, surface, etype, NER_CONFIDENCE[etype], "ner", PRIORITY_NER)
            )
        return out


# --- helpers (pure functions) ----------------------------------------------------------------


def _place_phrases(places: Iterable[LexiconEntry]) -> list[tuple[str, bool, _Target]]:
    """Gazetteer surfaces, all matched with their exact case ("Nice" yes, "nice" no)."""
    items: list[tuple[str, bool, _Target]] = []
    for entry in places:
        for surface in (entry.name, *entry.aliases):
            target = _Target(
                entry.name,
                entry.type,
                "lexicon",
                PLACE_CONFIDENCE,
                ambiguous=False,
                priority=PRIORITY_LEXICON,
                needs_cue=surface in entry.first_names,
            )
            items.append((surface, True, target))
    return items


def _vendor_products(
    text: str, candidates: list[_Candidate], common: frozenset[str]
) -> list[_Candidate]:
    """A cloud or a company named before a product of its own is the product: "Azure DNS",
    "Google Cloud DNS", "Google CloudDNS" are DNS services, not Azure or Google. The product
    word must look like a name (an acronym, a CamelCase word or a capitalised word that is no
    everyday word or its plural: "AWS Regions" stays AWS). And a company named before "style"
    is a style guide ("Google style", "Airbnb code style"), not the company."""
    out: list[_Candidate] = []
    for cand in candidates:
        vendor = cand.kind in VENDOR_KINDS or (
            cand.type is EntityType.ORGANIZATION and cand.stage == "lexicon"
        )
        if not vendor:
            out.append(cand)
            continue
        if cand.type is EntityType.ORGANIZATION and _STYLE_AFTER_RE.match(text, cand.end):
            continue
        product = _PRODUCT_AFTER_RE.match(text, cand.end)
        end = cand.end
        for word in product.group(1).split() if product else ():
            if word in patterns.TITLE_STOPWORDS or any(
                form in common for form in patterns.noun_forms(word)
            ):
                break  # "AWS CloudWatch Logs" is CloudWatch's logs
            end = text.index(word, end) + len(word)
        if end == cand.end:
            out.append(cand)
            continue
        out.append(
            replace(
                cand,
                end=end,
                name=text[cand.start : end],
                type=EntityType.TOOL,
                confidence=min(cand.confidence, VENDOR_PRODUCT_CONFIDENCE),
                aliases=(),
                kind="",
            )
        )
    return out


def _after_cue(text: str, start: int) -> bool:
    """Whether the word before `start` is a locative cue ("in", "to", "visited")."""
    match = _WORD_BEFORE_RE.search(text, max(0, start - 20), start)
    return match is not None and match.group(1).lower() in patterns.LOCATIVE_CUES


def _inside_longer_name(
    text: str, start: int, end: int, canonical: Mapping[str, tuple[str, EntityType]]
) -> bool:
    """Whether a place name is one word of a longer capitalised name ("Paris Hilton",
    "George Washington", "Boston Dynamics").

    A neighbour counts when it is capitalised, not a chat opener or function word and not
    itself a known name ("Portland Oregon"); an everyday word counts only where its capital
    says name, i.e. before the place in mid-sentence ("met George Washington"), not at a
    sentence start ("Visited Paris") nor after it ("Paris Photos").
    """
    common = load_common_words()
    before = _CAPITALISED_BEFORE_RE.search(text, max(0, start - 30), start)
    after = _CAPITALISED_AFTER_RE.match(text, end)
    for match, mid_sentence in (
        (before, before is not None and _mid_sentence(text, before.start())),
        (after, False),
    ):
        if match is None:
            continue
        word = match.group(1)
        if (
            word in patterns.TITLE_STOPWORDS
            or word in patterns.INTERJECTIONS
            or word.lower() in patterns.LOCATIVE_CUES
            or word.casefold() in canonical
            or (word.lower() in common and not mid_sentence)
        ):
            continue
        return True
    return False


def _mid_sentence(text: str, pos: int) -> bool:
    """Whether the word at `pos` follows other words of its sentence (so its capital is
    a name's, not the sentence's)."""
    before = text[max(0, pos - 10) : pos].rstrip(" \t")
    return bool(before) and (before[-1].isalnum() or before[-1] == ",")


def _from_hit(hit: PatternHit, stage: str) -> _Candidate:
    return _Candidate(
        hit.start,
        hit.end,
        hit.name,
        hit.type,
        hit.confidence,
        stage,
        hit.priority,
        hit.aliases,
        hit.kind,
    )


def _module_roots(
    scan: patterns.PatternScan, canonical: dict[str, tuple[str, EntityType]]
) -> list[_Candidate]:
    """`spacy.pipeline.EntityRuler` mentions spaCy when its root is a name we know."""
    out: list[_Candidate] = []
    for start, _end, module in scan.modules:
        root = module.split(".", 1)[0]
        target = canonical.get(root.casefold())
        if target is not None:
            name, etype = target
            out.append(
                _Candidate(
                    start,
                    start + len(root),
                    name,
                    etype,
                    patterns.MODULE_ROOT_CONFIDENCE,
                    "pattern",
                    patterns.PRIORITY_SHAPE,
                    (root,) if root != name else (),
                    "module-root",
                )
            )
    return out


def _resolve(
    candidates: Sequence[_Candidate], shields: Sequence[tuple[int, int]]
) -> list[_Candidate]:
    """Keep the best candidate of each overlapping set, none inside a path or URL.

    A candidate may cover a whole shield (`Node.js` looks like a file name; a URL entity is
    its own shield) but not sit inside one (`react` in `src/react/app.ts`), and module roots
    are allowed at the start of their own module path.
    """
    # Ties (two matchers or stages proposing one span) go by what they propose, never by the
    # order they were found in: that order follows how the matchers were grown.
    ranked = sorted(
        candidates,
        key=lambda c: (
            c.priority,
            -(c.end - c.start),
            c.start,
            -c.confidence,
            c.type.value,
            c.name,
            c.stage,
            c.kind,
            c.aliases,
        ),
    )
    walls = sorted(shields)
    wall_starts = [start for start, _ in walls]
    starts: list[int] = []  # accepted spans never overlap, so sorted starts find neighbours
    accepted: list[_Candidate] = []
    for cand in ranked:
        if cand.kind != "module-root" and _inside_shield(cand, walls, wall_starts):
            continue
        at = bisect.bisect_right(starts, cand.start)
        if at and accepted[at - 1].end > cand.start:
            continue
        if at < len(accepted) and accepted[at].start < cand.end:
            continue
        starts.insert(at, cand.start)
        accepted.insert(at, cand)
    return accepted


def _inside_shield(
    cand: _Candidate, walls: Sequence[tuple[int, int]], wall_starts: Sequence[int]
) -> bool:
    """Whether the candidate overlaps a shield without covering it whole."""
    at = max(bisect.bisect_right(wall_starts, cand.start) - 1, 0)
    while at < len(walls) and walls[at][0] < cand.end:
        w_start, w_end = walls[at]
        if cand.start < w_end and not (cand.start <= w_start and w_end <= cand.end):
            return True
        at += 1
    return False


def _sentence_of(
    start: int, sentences: Sequence[tuple[int, int]], starts: Sequence[int]
) -> tuple[int, int] | None:
    at = bisect.bisect_right(starts, start) - 1
    if at >= 0 and start < sentences[at][1]:
        return sentences[at]
    return None


def _proposal(
    cand: _Candidate, text: str, sentences: Sequence[tuple[int, int]], starts: Sequence[int]
) -> ProposedEntity:
    sentence = _sentence_of(cand.start, sentences, starts)
    context = None
    if sentence is not None:
        context = " ".join(text[sentence[0] : sentence[1]].split())[:CONTEXT_CHARS]
    return ProposedEntity(
        name=cand.name,
        type=cand.type,
        confidence=cand.confidence,
        aliases=[a for a in dict.fromkeys(cand.aliases) if a != cand.name],
        context=context,
        stage=cand.stage,
        spans=[(cand.start, cand.end)],
    )


def _relations(
    raw: Sequence[relations.RawRelation], entities: Sequence[ProposedEntity]
) -> list[ProposedRelation]:
    """Spans to entity ids; self-loops (both ends linked to one entity) and repeats dropped."""
    by_span = {span: e.id for e in entities for span in e.spans}
    best: dict[tuple[str, Predicate, str], ProposedRelation] = {}
    for rel in raw:
        subject = "memory" if rel.subject is None else by_span.get(rel.subject)
        obj = "memory" if rel.object is None else by_span.get(rel.object)
        if subject is None or obj is None or subject == obj:
            continue
        key = (subject, rel.predicate, obj)
        current = best.get(key)
        if current is None or rel.confidence > current.confidence:
            best[key] = ProposedRelation(
                subject=subject,
                predicate=rel.predicate,
                object=obj,
                confidence=rel.confidence,
                evidence=rel.evidence,
            )
    return list(best.values())


def _path_notes(scan: patterns.PatternScan, accepted: Sequence[_Candidate]) -> list[str]:
    """File and module paths, which are context rather than entities."""
    covered = [(c.start, c.end) for c in accepted if c.kind != "module-root"]
    covered_starts = [start for start, _ in covered]
    notes: list[str] = []
    files: list[str] = []
    for start, end, path in scan.files:
        at = bisect.bisect_right(covered_starts, start) - 1
        if at < 0 or covered[at][1] < end:  # a name that looks like a file (Node.js) is no path
            files.append(path)
    unique = list(dict.fromkeys(files))
    notes += [f"file: {path}" for path in unique[:MAX_FILE_NOTES]]
    if len(unique) > MAX_FILE_NOTES:
        notes.append(f"file: … and {len(unique) - MAX_FILE_NOTES} more")
    notes += [f"module: {m}" for m in dict.fromkeys(module for _, _, module in scan.modules)]
    return notes


def _shift(entity: ProposedEntity, offset: int) -> ProposedEntity:
    """Spans relative to the body: title occurrences are dropped from `spans`."""
    if not offset:
        return entity
    spans = [(s - offset, e - offset) for s, e in entity.spans if s >= offset]
    return entity.model_copy(update={"spans": spans})
