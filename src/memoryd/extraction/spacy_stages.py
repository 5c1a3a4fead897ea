"""Everything that touches spaCy: blank pipelines, phrase matchers, an optional pretrained NER.

The only module that imports spacy, always inside a function, so `import memoryd` and
`memoryd --help` stay fast. Callers get plain tuples of character offsets back, never spaCy
objects, so the rest of `extraction/` is pure Python.

Not thread-safe by itself: the `Extractor` serialises calls with its lock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 5_000_000
"""Blank pipelines only tokenize, so spaCy's 1M-character guard (meant for parser/NER memory)
is raised; a pretrained model keeps its own limit."""

NER_LABELS: dict[str, str] = {
    "PERSON": "person",
    "PER": "person",
    "ORG": "organization",
    "GPE": "place",
    "LOC": "place",
    "FAC": "place",
    "PRODUCT": "tool",
}
"""Pretrained labels (OntoNotes / WikiNER) mapped to memoryd entity types; others are ignored."""


@dataclass(frozen=True)
class Phrase:
    """A surface to find: `key` identifies what it stands for, `exact` asks for ORTH matching."""

    text: str
    key: int
    exact: bool


def blank_pipeline(lang: str) -> Any:
    """A tokenizer-only pipeline: `en`, or `zh` segmented with jieba (works offline).

    Sentences are split by `patterns.split_sentences` instead of spaCy's sentencizer, which
    cuts `store.py` in two once jieba has split it into `store` `.` `py`.
    """
    import spacy

    if lang == "zh":
        import jieba

        jieba.setLogLevel(logging.WARNING)  # its dictionary load prints to stderr otherwise
        nlp = spacy.blank("zh", config={"nlp": {"tokenizer": {"segmenter": "jieba"}}})
        tokenizer: Any = nlp.tokenizer
        tokenizer.jieba_seg = JiebaCut(jieba)
    elif lang == "en":
        nlp = spacy.blank("en")
    else:
        raise ValueError(f"no blank pipeline for language {lang!r}")
    nlp.max_length = MAX_TEXT_CHARS
    _lower_only(nlp.vocab)
    return nlp


def _lower_only(vocab: Any) -> None:
    """New lexemes get their LOWER and nothing more: the phrase matchers compare ORTH (the
    string) or LOWER, and nothing reads a blank pipeline's other lexical attributes (stop
    word, shape, like_num, norm ...: most of what a new string costs, and a text brings new
    strings: numbers, paths, names)."""
    from spacy.attrs import LOWER

    vocab.lex_attr_getters = {LOWER: vocab.lex_attr_getters[LOWER]}


class JiebaCut:
    """jieba's `cut` (accurate mode, HMM) with its plain-ASCII words cut without the DAG.

    jieba cuts a text block by block. In a block of its word characters that is all ASCII,
    a dictionary word can start only where two characters are a dictionary key (its
    dictionary holds every prefix of every word); where none are, the block's route is one
    character at a time, which jieba hands to `finalseg.cut`, which splits it on
    `finalseg.re_skip` alone. That split is done here directly: the English words of mixed
    text were ~40% of jieba's time (each character's route). Any other block (Chinese, or
    ASCII holding a key such as "C+" of "C++") goes to `jieba.cut`, and so does the first
    text, which loads jieba's dictionary as before.
    """

    def __init__(self, jieba: Any) -> None:
        self._jieba = jieba
        self._blocks = jieba.re_han_default
        self._skip = jieba.finalseg.re_skip

    def cut(self, text: str, cut_all: bool = False) -> Iterator[str]:
        jieba = self._jieba
        if cut_all or not jieba.dt.initialized:
            yield from jieba.cut(text, cut_all=cut_all)
            return
        keys = jieba.dt.FREQ
        for block in self._blocks.split(text):
            if not block:
                continue
            if (
                len(block) > 1
                and block.isascii()
                and self._blocks.fullmatch(block)
                and not any(block[k : k + 2] in keys for k in range(len(block) - 1))
            ):
                yield from [part for part in self._skip.split(block) if part]
            else:
                yield from jieba.cut(block)


def tokenizer_fingerprint(nlp: Any) -> str:
    """What a phrase's tokens depend on besides its text: spaCy's version, the language and
    its tokenizer settings, and jieba's version for Chinese. Part of the phrase-token cache's
    key (`token_cache`), so an upgrade never reads tokens another tokenizer made."""
    from spacy import about

    parts: dict[str, Any] = {
        "spacy": about.__version__,
        "lang": str(nlp.lang),
        "tokenizer": nlp.config["nlp"]["tokenizer"],
    }
    if nlp.lang == "zh":
        import jieba

        parts["jieba"] = jieba.__version__
    return json.dumps(parts, sort_keys=True, default=str)


def phrase_tokens(nlp: Any, phrases: Sequence[Phrase]) -> list[tuple[int, ...]]:
    """Each phrase's tokens as its matcher compares them: LOWER hashes, or ORTH when exact.

    Tokenizing is most of the cost of building the lexicon's matchers (thousands of phrases,
    jieba's segmenter for Chinese), so these tuples are what the phrase-token cache keeps.
    """
    tokens: list[tuple[int, ...]] = []
    for phrase in phrases:
        doc = nlp.make_doc(phrase.text)
        tokens.append(tuple(t.orth for t in doc) if phrase.exact else tuple(t.lower for t in doc))
    return tokens


def add_phrases(
    nlp: Any,
    matchers: dict[bool, Any],
    phrases: Sequence[Phrase],
    tokens: Sequence[tuple[int, ...]],
) -> None:
    """Add phrases (with their `phrase_tokens`) to `matchers` (exact-case? -> PhraseMatcher),
    creating a matcher when needed.

    One PhraseMatcher matches LOWER (case-insensitive), the other ORTH (exact case). The
    lexicon's are built once per language and the known entities' once per set of entities
    (then grown); both run over the same tokenized Doc. Each phrase's match key is its
    `key`, so a match says what it stands for. The matcher takes token hashes as well as Docs
    (how it unpickles), and a Doc's tokens give it the same hashes.
    """
    from spacy.matcher import PhraseMatcher

    for exact in (False, True):
        chosen = [(p, t) for p, t in zip(phrases, tokens, strict=True) if p.exact is exact]
        if not chosen:
            continue
        if exact not in matchers:
            matchers[exact] = PhraseMatcher(nlp.vocab, attr="ORTH" if exact else "LOWER")
        matcher = matchers[exact]
        for phrase, keyword in chosen:
            matcher.add(str(phrase.key), [keyword])


def tokenize(nlp: Any, text: str) -> Any:
    return nlp.make_doc(text)


def match_phrases(doc: Any, matchers: Iterable[Any]) -> list[tuple[int, int, int]]:
    """(start_char, end_char, key) of every matcher hit, overlapping ones included; the
    caller settles overlaps across matchers and pattern stages."""
    strings = doc.vocab.strings
    hits: list[tuple[int, int, int]] = []
    for matcher in matchers:
        for match_id, start, end in matcher(doc):
            last = doc[end - 1]
            hits.append((doc[start].idx, last.idx + len(last.text), int(strings[match_id])))
    return hits


def load_model(name: str) -> Any | None:
    """A pretrained pipeline by package name or path, or None (with a warning) if not there."""
    import spacy

    try:
        model = spacy.load(name, exclude=["parser", "lemmatizer", "textcat", "senter"])
    except (OSError, ImportError) as exc:
        log.warning(
            "spaCy model %r is not installed; extraction continues without NER (%s)", name, exc
        )
        return None
    if "ner" not in model.pipe_names:
        log.warning("spaCy model %r has no 'ner' component; extraction continues without it", name)
        return None
    return model


def model_lang(model: Any) -> str:
    return str(model.lang)


def named_entities(model: Any, text: str) -> list[tuple[int, int, str, str]]:
    """(start_char, end_char, text, memoryd type) for each entity of a mapped label."""
    doc = model(text)
    found: list[tuple[int, int, str, str]] = []
    for ent in doc.ents:
        etype = NER_LABELS.get(ent.label_)
        if etype is not None:
            found.append((ent.start_char, ent.end_char, ent.text, etype))
    return found
