"""The one home of tantivy (ruff enforces it): the schema, the analyser, and memories to and from
tantivy documents.

The index is derived data (DESIGN §4): the vault and the graph are the record and `memoryd
reindex` rebuilds it from them. Text is indexed with tantivy's `en_stem` analyzer after Chinese
has been segmented by `memoryd.text.segment` and irregular word forms put in their base form
(`search.words.base_forms`); `_Query` takes a query through the same steps in Python, so no
user text can be a syntax error and stemming is the same on both sides. The other search
modules take the `tantivy` module from here (`from memoryd.search.engine import tantivy`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import tantivy as tantivy

from memoryd.errors import InvalidInput, StorageError
from memoryd.models import DecayState, MemoryType, to_utc, typed
from memoryd.private import FILE_MODE
from memoryd.search.doc import SearchDoc
from memoryd.search.overlay import DecayOverlay, slug_key
from memoryd.search.words import IRREGULAR_TEXT, base_forms
from memoryd.text import HAN_CLASS, contains_cjk, query_terms, segment

SCHEMA_VERSION = 4
"""Bump when the schema or the analysis changes: old indexes then refuse to open until reindexed
(the service rebuilds them from the vault, `wiring.open_search_index`).
2: the `context` field (the neighbouring session turns' text).
3: the `segmented` field (the Chinese text as jieba cut it).
4: the `slug_key` fast field."""

META_FILE = "index_meta.json"

REINDEX_HINT = "run `memoryd reindex`"

_FIELD_BOOSTS = {"title": 2.0, "tags": 1.5, "triggers": 1.5, "body": 1.0}

_TEXT_FIELDS = tuple(_FIELD_BOOSTS)

SEGMENTED_FIELD = "segmented"
"""Stored only: the text fields holding Chinese, as `segment` cut them (JSON: field → values),
so a document rewritten with the same text (a neighbour's context changed, as a decay sweep
or a deletion changes it) is indexed again without jieba."""

SLUG_KEY_FIELD = "slug_key"
"""Fast only: 64 bits of the slug's hash (`slug_key`). A hit's key is read from a column,
where its slug needs the whole document decoded from the store; recall finds a tallied
scope's candidates by key among the memories its statistics keep (`ScopeTally.keyed`), and
reading a hundred documents back was a third of a recall at 100k memories."""

CONTEXT_FIELD = "context"
"""Indexed only: the text of a session memory's neighbouring turns (see `CONTEXT_WINDOW`). A
reply ("they're great for cuddles") is about what the turn before it said ("your dogs"), so
recall searches this field too, at a low weight; plain search does not."""

# A pasted document as a query would otherwise cost jieba time and a huge boolean query.
_MAX_QUERY_CHARS = 4_000

_MAX_QUERY_TOKENS = 64

_HIDDEN = [("decay_state", state.value) for state in DecayState if not state.visible_by_default]

# pyo3 maps tantivy's errors to these.
_TANTIVY_ERRORS = (ValueError, RuntimeError, OSError)


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    # Raw keyword fields: `slug` is the delete key, the others are filters.
    for name in ("slug", "scope_hash", "type", "decay_state"):
        builder.add_text_field(
            name, stored=True, fast=True, tokenizer_name="raw", index_option="basic"
        )
    # Searched text, segmented first. Segmentation is lossy (it adds spaces and repeats word
    # parts), so the text as written is kept beside it, stored only, as UTF-8 bytes.
    for name in _TEXT_FIELDS:
        builder.add_text_field(name, stored=False, tokenizer_name="en_stem")
        builder.add_bytes_field(f"{name}_stored", stored=True, indexed=False)
    builder.add_bytes_field(SEGMENTED_FIELD, stored=True, indexed=False)
    # Derived from the neighbours' stored bodies whenever they change, so never stored.
    builder.add_text_field(CONTEXT_FIELD, stored=False, tokenizer_name="en_stem")
    builder.add_date_field("created_at", stored=True, indexed=True, fast=True)
    builder.add_unsigned_field(SLUG_KEY_FIELD, fast=True)
    return builder.build()


def _analyzer() -> tantivy.TextAnalyzer:
    """The same chain as tantivy's built-in `en_stem`, so queries stem as documents did."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _document(
    doc: SearchDoc,
    context: str | Sequence[str] = "",
    cut: Callable[[str], str] = segment,
    forms: Callable[[str], str] = base_forms,
) -> tantivy.Document:
    """The tantivy document of `doc`. `context` may come as the bodies it joins by newlines
    and `cut` may remember segmentations: a body is then segmented once however many of its
    neighbours' contexts hold it (the same text either way: segmentation never crosses a
    newline). `forms` may remember `base_forms` of a cut text: a bulk write indexes the same
    tags on every memory, and counts the titles and bodies it indexes (`search.tallies`)."""
    if not isinstance(context, str):
        context = "\n".join(cut(part) for part in context)
        cut_context: Callable[[str], str] = str
    else:
        cut_context = cut
    document = tantivy.Document()
    document.add_text("slug", doc.slug)
    document.add_unsigned(SLUG_KEY_FIELD, slug_key(doc.slug))
    document.add_text("scope_hash", doc.scope_hash)
    document.add_text("type", doc.type.value)
    document.add_text("decay_state", doc.decay_state.value)
    # ASCII text holds no Han character: nothing to cut (`segment` returns it as it is).
    plain = (
        doc.title.isascii()
        and doc.body.isascii()
        and all(map(str.isascii, doc.tags))
        and all(map(str.isascii, doc.triggers))
    )
    segmented: dict[str, list[str]] = {}
    for field, stored, values in (
        ("title", "title_stored", [doc.title]),
        ("body", "body_stored", [doc.body]),
        ("tags", "tags_stored", doc.tags),
        ("triggers", "triggers_stored", doc.triggers),
    ):
        cuts = values if plain else [cut(value) for value in values]
        for value, text in zip(values, cuts, strict=True):
            document.add_text(field, forms(text))
            document.add_bytes(stored, value.encode("utf-8"))
        if not plain and any(contains_cjk(value) for value in values):  # jieba's work
            segmented[field] = cuts
    if segmented:
        document.add_bytes(
            SEGMENTED_FIELD, json.dumps(segmented, ensure_ascii=False).encode("utf-8")
        )
    if context:
        document.add_text(CONTEXT_FIELD, forms(cut_context(context)))
    document.add_date("created_at", to_utc(doc.created_at))
    return document


_TYPES = {member.value: member for member in MemoryType}

_STATES = {member.value: member for member in DecayState}
"""Stored values → their members: a dict lookup, where calling the enum costs a microsecond
for each of the hundred documents a recall reads."""


def _stored_doc(
    document: tantivy.Document,
    states: Mapping[str, DecayState],
    cuts: dict[str, str] | None = None,
) -> SearchDoc:
    """The `SearchDoc` an indexed document was written from (every field of it is stored),
    in the decay state `states` (the index's `DecayOverlay`) holds for it, if any. `cuts`
    (text → its segmentation) learns the document's segmented texts, if given."""
    title, body = _texts(document)
    slug = str(_stored(document, "slug"))
    doc = typed(
        SearchDoc,
        slug=slug,
        scope_hash=str(_stored(document, "scope_hash")),
        type=_member(_TYPES, _stored(document, "type")),
        decay_state=states.get(slug) or _member(_STATES, _stored(document, "decay_state")),
        title=title,
        body=body,
        tags=_text(document, "tags_stored"),
        triggers=_text(document, "triggers_stored"),
        created_at=to_utc(_stored(document, "created_at")),
        withheld=False,
    )
    if cuts is not None:
        _learn_cuts(document, doc, cuts)
    return doc


def _texts(document: tantivy.Document) -> tuple[str, str]:
    """A document's title and body as written."""
    return "".join(_text(document, "title_stored")), "".join(_text(document, "body_stored"))


_E = TypeVar("_E", MemoryType, DecayState)


def _member(members: Mapping[str, _E], value: object) -> _E:
    found = members.get(value) if isinstance(value, str) else None
    if found is None:
        raise StorageError(f"a search index document holds {value!r}", hint=REINDEX_HINT)
    return found


def _learn_cuts(document: tantivy.Document, doc: SearchDoc, cuts: dict[str, str]) -> None:
    """Put the segmentations `document` stores (`SEGMENTED_FIELD`) into `cuts`, keyed by the
    text each was cut from."""
    raw = document.get_first(SEGMENTED_FIELD)
    if raw is None:
        return
    try:
        segmented = json.loads(bytes(raw))
    except ValueError as exc:
        raise StorageError(
            f"a search index document ({doc.slug}) has an unreadable {SEGMENTED_FIELD!r}",
            hint=REINDEX_HINT,
        ) from exc
    values = {"title": [doc.title], "body": [doc.body], "tags": doc.tags, "triggers": doc.triggers}
    for field, texts in segmented.items():
        cuts.update(zip(values[field], texts, strict=True))


class _Cuts:
    """Text → its segmentation, as read from stored documents (`SEGMENTED_FIELD`)."""

    def __init__(self) -> None:
        self.stored: dict[str, str] = {}

    def cut(self, text: str) -> str:
        """`segment(text)`, taken from a stored document when one held it."""
        found = self.stored.get(text)
        return segment(text) if found is None else found


def _light_doc(
    document: tantivy.Document, slug: str, scope_hash: str, states: Mapping[str, DecayState]
) -> SearchDoc:
    """A document being deleted, without its text (`_stored_with_addresses`)."""
    return typed(
        SearchDoc,
        slug=slug,
        scope_hash=scope_hash,
        type=_member(_TYPES, _stored(document, "type")),
        decay_state=states.get(slug) or _member(_STATES, _stored(document, "decay_state")),
        title="",
        body="",
        tags=[],
        triggers=[],
        created_at=to_utc(_stored(document, "created_at")),
        withheld=False,
    )


def _check_meta(directory: Path) -> str | None:
    """Refuse an index written with another schema version, or by something else; return its
    identity (None: written before indexes had one)."""
    path = directory / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        version = meta["schema_version"]
    except FileNotFoundError as exc:
        raise StorageError(
            f"the search index at {directory} has no {META_FILE}", hint=REINDEX_HINT
        ) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"cannot read {path}: {exc}", hint=REINDEX_HINT) from exc
    if version != SCHEMA_VERSION:
        raise StorageError(
            f"the search index at {directory} has schema version {version!r}, "
            f"this memoryd uses {SCHEMA_VERSION}",
            hint=REINDEX_HINT,
        )
    identity = meta.get("index_id")
    return identity if isinstance(identity, str) else None


def _write_meta(directory: Path) -> str:
    """Write the index's schema version and a new identity (returned): saved statistics name
    the index they describe, so a file copied from another index is never taken."""
    identity = uuid.uuid4().hex
    path = directory / META_FILE
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"schema_version": SCHEMA_VERSION, "index_id": identity}) + "\n")
    os.replace(tmp, path)
    return identity


class _Query:
    """A user query, analysed once: the tokens it searches and the terms it explains with."""

    def __init__(
        self, text: str, analyzer: tantivy.TextAnalyzer, stops: frozenset[str] = frozenset()
    ) -> None:
        text = text[:_MAX_QUERY_CHARS]
        tokens: list[str] = list(dict.fromkeys(analyzer.analyze(base_forms(segment(text)))))
        content = [t for t in tokens if t not in stops]
        self.tokens = (content or tokens)[:_MAX_QUERY_TOKENS]
        self.terms = query_terms(text)
        # Chinese terms that are not in a document whole may still match by their parts
        # (`数据库` → `数据`), as the index holds those too.
        self.parts = {
            term: [part for part in dict.fromkeys(segment(term).split()) if part != term]
            for term in self.terms
            if contains_cjk(term)
        }
        self.stems = {term: analyzer.analyze(term) for term in self.terms if not contains_cjk(term)}


def _hides(
    overlay: DecayOverlay, searcher: tantivy.Searcher, address: tantivy.DocAddress, key: object
) -> bool:
    """Whether the document at `address` (its slug key `key`) is one `overlay` hides: its key
    says no for nearly every hit, and a key it holds is checked against the slug."""
    if key not in overlay.hidden_keys:
        return False
    return str(_stored(searcher.doc(address), "slug")) in overlay.hidden_slugs


def _holds_han(searcher: tantivy.Searcher, schema: tantivy.Schema) -> bool:
    """Whether a title or body word of the index is Han characters: a walk of the fields' term
    dictionaries (about a millisecond at 100k memories), no document read."""
    return any(
        searcher.search(
            tantivy.Query.regex_query(schema, field, f"{HAN_CLASS}.*"), 1, count=False
        ).hits
        for field in ("title", "body")
    )


def _count(searcher: tantivy.Searcher, query: tantivy.Query) -> int:
    """How many documents match `query` (tantivy's stub does not declare `count`)."""
    result = searcher.search(query, limit=1, count=True)
    return int(result.count or 0)  # type: ignore[attr-defined]


_ANALYSIS_PROBE = (
    "Children bought running-shoes; she wrote naïve résumés on Größe ABC_def 42x "
    "supercalifragilisticexpialidociousandlongerstill"
)


@functools.cache
def analysis_version() -> str:
    """A name for how text is analysed into tokens here: the schema version, the tantivy and
    jieba versions, the irregular forms, and the tokens of a probe. Tokens kept from another
    analysis (a snapshot written by another version) are analysed again."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [str(SCHEMA_VERSION), IRREGULAR_TEXT]
    for package in ("tantivy", "jieba"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} -")
    parts.append(" ".join(_analyzer().analyze(base_forms(segment(_ANALYSIS_PROBE)))))
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:16]


def _bm25_idf(docs: int, with_term: int) -> float:
    """BM25's inverse document frequency, as tantivy computes it."""
    return math.log(1 + (docs - with_term + 0.5) / (with_term + 0.5))


def _values(values: Sequence[str]) -> list[str]:
    """`values` as a list, a lone string being one value (not a sequence of characters)."""
    return [values] if isinstance(values, str) else list(values)


def _memory_type(value: str) -> str:
    try:
        return MemoryType(value).value
    except ValueError as exc:
        raise InvalidInput(f"unknown memory type {value!r}") from exc


def _stored(document: tantivy.Document, field: str) -> Any:
    """A stored value every document of this schema has."""
    value = document.get_first(field)
    if value is None:
        raise StorageError(f"a search index document has no {field!r}", hint=REINDEX_HINT)
    return value


def _text(document: tantivy.Document, field: str) -> list[str]:
    """The values of a stored-only text field (kept as bytes, see `_schema`)."""
    return [bytes(value).decode("utf-8") for value in document.get_all(field)]
