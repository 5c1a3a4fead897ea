"""Everything that touches spaCy: blank pipelines, EntityRulers, an optional pretrained NER.

The only module that imports spacy, always inside a function, so `import memoryd` and
`memoryd --help` stay fast. Callers get plain tuples of character offsets back, never spaCy
objects, so the rest of `extraction/` is pure Python.

Not thread-safe by itself: the `Extractor` serialises calls with its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
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
    elif lang == "en":
        nlp = spacy.blank("en")
    else:
        raise ValueError(f"no blank pipeline for language {lang!r}")
    nlp.max_length = MAX_TEXT_CHARS
    return nlp


def add_phrases(nlp: Any, rulers: dict[bool, Any], phrases: Sequence[Phrase], name: str) -> None:
    """Add phrases to `rulers` (exact-case? -> EntityRuler), creating a ruler when needed.

    One EntityRuler matches LOWER (case-insensitive), the other ORTH (exact case). They are
    not added to `nlp`: the lexicon's are built once per language and the known entities'
    once per set of entities (then grown), and both run over the same tokenized Doc. Each
    pattern's label is its key, so a match says what it stands for.
    """
    from spacy.pipeline import EntityRuler

    for exact in (False, True):
        patterns: list[dict[str, Any]] = [
            {"label": str(p.key), "pattern": p.text} for p in phrases if p.exact is exact
        ]
        if not patterns:
            continue
        if exact not in rulers:
            rulers[exact] = EntityRuler(
                nlp,
                name=f"{name}_{'exact' if exact else 'lower'}",
                phrase_matcher_attr=None if exact else "LOWER",
                validate=False,
            )
        rulers[exact].add_patterns(patterns)


def tokenize(nlp: Any, text: str) -> Any:
    return nlp.make_doc(text)


def match_phrases(doc: Any, rulers: Iterable[Any]) -> list[tuple[int, int, int]]:
    """(start_char, end_char, key) of every ruler hit, overlapping ones included.

    Runs each ruler's PhraseMatcher directly: `EntityRuler.__call__` recounts every pattern
    on each call (about 2 ms with the lexicon's 4,000), and the caller settles overlaps
    across rulers and pattern stages anyway. The pattern's label is its key.
    """
    strings = doc.vocab.strings
    hits: list[tuple[int, int, int]] = []
    for ruler in rulers:
        for match_id, start, end in ruler.phrase_matcher(doc):
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
