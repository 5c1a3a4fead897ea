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

The known and lexicon stages match through one phrase index (`extraction.phrase_index`);
the overlaps are settled and the proposals built in `extraction.resolving`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import ChainMap, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from memoryd.extraction import code_context, generic_names, patterns, relations, spacy_stages
from memoryd.extraction import workers as workers_mod
from memoryd.extraction.linking import KnownEntity, KnownIndex, link_records, normalise_name
from memoryd.extraction.patterns import has_cjk
from memoryd.extraction.phrase_index import (
    _known_item,
    _KnownEntry,
    _own_name_first,
    _PhraseIndex,
    _Target,
)
from memoryd.extraction.resolving import (
    _after_cue,
    _Candidate,
    _from_hit,
    _inside_longer_name,
    _module_roots,
    _path_notes,
    _proposal,
    _relations,
    _resolve,
    _shift,
    _vendor_products,
)
from memoryd.extraction.token_cache import TokenCache
from memoryd.extraction.wordlists import data_file, load_common_words
from memoryd.models import EntityType, Extraction

log = logging.getLogger(__name__)

KNOWN_CACHE_SIZE = 8
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
_CUE_WORD_RE = re.compile(r"[^\W_]+")


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


class Extractor:
    """Offline entity and relation extraction; safe to share between threads.

    The spaCy pipelines, the lexicon matchers and the optional model load on first use (or
    on `warm_up()`), never at import or construction. The lexicon's tokens are kept in
    `cache_dir` (default: the user's cache dir) for the next process. With `workers`, a big
    batch's extraction is shared with a second process (`extraction.workers`).
    """

    def __init__(
        self, *, spacy_model: str | None = None, cache_dir: Path | None = None, workers: bool = True
    ) -> None:
        self._spacy_model = spacy_model
        self._cache_dir = cache_dir
        self._lock = threading.RLock()
        self._nlp: dict[str, Any] = {}
        self._lexicon_index: dict[str, _PhraseIndex] = {}
        self._known_index: OrderedDict[tuple[str, frozenset[Any]], _KnownEntry] = OrderedDict()
        self._model: Any | None = None
        self._model_tried = False
        self._worker = workers_mod.worker_for(spacy_model, cache_dir) if workers else None

    def close(self) -> None:
        """Stop the extraction worker, if one runs."""
        if self._worker is not None:
            self._worker.close()

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
                        and generic_names.generic_word(surface, common),
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
        self,
        lang: str,
        known: Sequence[KnownEntity],
        items: frozenset[tuple[str, str, str, tuple[str, ...]]],
    ) -> tuple[_PhraseIndex | None, KnownIndex]:
        """The known entities' matchers and linking index, cached per set of entities (LRU);
        `items` is the set's key (`_known_item` of each), made once per batch of texts.

        A set that only adds entities to a cached one grows that entry instead of building
        anew: the service passes the whole graph, which gains a few entities per write.
        """
        if not known:
            return None, EMPTY_KNOWN
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
                everyday = surface.lower() in common or generic_names.generic_word(
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
        return next(self.extract_many([(title, text)], known=known))

    def extract_many(
        self,
        texts: Iterable[tuple[str, str]],
        *,
        known: Sequence[KnownEntity] = (),
        share: bool = True,
        after: threading.Event | None = None,
    ) -> Iterator[Extraction]:
        """`extract` of each (title, body) against one set of known entities, one at a time
        as the caller takes them (a batch's extractions are not all held at once): the set is
        keyed once, not per text (a set of K entities costs O(K) to key). With `share` False
        the texts never leave this process (a sensitive scope's plaintext); with `after`, this
        process extracts once it is set, a worker at once (`workers.waited`)."""
        items = frozenset(_known_item(k) for k in known)

        def here(chunk: Iterable[tuple[str, str]]) -> Iterator[Extraction]:
            for title, body in chunk:
                yield self._extract_one(body, title, known, items)

        if self._worker is None or not share:
            yield from workers_mod.waited(here, texts, after)
        else:  # a big batch is shared with a second process
            yield from self._worker.extract_many(texts, known, here, after)

    def _extract_one(
        self,
        text: str,
        title: str,
        known: Sequence[KnownEntity],
        items: frozenset[tuple[str, str, str, tuple[str, ...]]],
    ) -> Extraction:
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
            known_index, link_index = self._known(lang, known, items)
            doc = spacy_stages.tokenize(self._pipeline(lang), full)
            candidates = _vendor_products(
                full, self._phrase_candidates(doc, full, lexicon, sentences), common
            )
            if known_index is not None:
                candidates += self._phrase_candidates(doc, full, known_index, sentences)
            ner = self._ner_candidates(full, lang, notes)
            # A view of the surfaces, not a copy of the lexicon's ~8,000 per text; read under
            # the lock, as another thread may grow the known set's index in place.
            canonical: Mapping[str, tuple[str, EntityType]] = (
                lexicon.canonical
                if known_index is None
                else ChainMap(known_index.canonical, lexicon.canonical)
            )
            code_hits = code_context.scan_code_context(full, canonical)
            roots = _module_roots(scan, canonical)
        if ner is not None:
            candidates += ner
            stages.append("ner")

        candidates += [_from_hit(h, "pattern") for h in code_hits]
        candidates += [_from_hit(h, "pattern") for h in scan.hits]
        candidates += roots
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
        entities = link_records(proposals, link_index)
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
            if generic_names.fence_label(text, start) or generic_names.in_identifier(
                text, start, end
            ):
                continue
            if target.generic and not generic_names.name_evidence(text, start, end):
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
                and generic_names.opens_clause(text, start, starts)
                and not generic_names.clause_start_evidence(text, start, end)
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
