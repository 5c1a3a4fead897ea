"""The full-text index of memories: BM25 over tantivy (the only module that imports tantivy).

The index is derived data (DESIGN §4): the vault and the graph are the record and `memoryd
reindex` rebuilds this from them. Text is indexed with tantivy's `en_stem` analyzer after Chinese
has been segmented by `memoryd.text.segment` and irregular word forms put in their base form
(`search.words.base_forms`). Queries go through the same steps in Python and are built from
term queries, never through tantivy's query parser, so no user text can be a syntax error and
stemming is the same on both sides. Each session memory is also indexed with its neighbouring
turns' text (the `context` field, kept up to date as turns are written and deleted), which
recall searches.

Over 600 lines: the one home of tantivy (ruff enforces it), so every query and statistic the
engine answers is here; session-neighbour upkeep lives in `search.sessions`, the word tables
in `search.words`, the scope statistics in `search.stats`, and the decay states a sweep set
without rewriting documents in `search.overlay` (every read here applies them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self, TypeVar

import tantivy
from pydantic import BaseModel, ConfigDict, Field

from memoryd.errors import InvalidInput, StorageError
from memoryd.models import DecayState, MemoryType, SearchHit, to_utc, typed
from memoryd.private import FILE_MODE, make_private_dir
from memoryd.search.overlay import OVERLAY_FILE, DecayOverlay, slug_key
from memoryd.search.sessions import CONTEXT_TYPE, CONTEXT_WINDOW, SessionView, from_nanos, nanos
from memoryd.search.stats import (
    Entry,
    ScopeStatistics,
    Snapshot,
    StatsView,
    Tokens,
    TurnTest,
)
from memoryd.search.stats_file import StatsFiles, index_opstamp
from memoryd.search.words import IRREGULAR_TEXT, LIGHT_WORDS, STOPWORDS, base_forms
from memoryd.text import blank_cjk, contains_cjk, query_terms, segment

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 4
"""Bump when the schema or the analysis changes: old indexes then refuse to open until reindexed
(the service rebuilds them from the vault, `wiring.open_search_index`).
2: the `context` field (the neighbouring session turns' text).
3: the `segmented` field (the Chinese text as jieba cut it).
4: the `slug_key` fast field."""

META_FILE = "index_meta.json"
REINDEX_HINT = "run `memoryd reindex`"

# tantivy splits the writer heap between its indexing threads and wants at least 15 MB each.
_WRITER_HEAP_BYTES = 64_000_000
_WRITER_MAX_THREADS = 4

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
_MAX_EXPANSION_TOKENS = 60
_SNIPPET_CHARS = 200
# Hits fetched beyond the page, so that ties at its edge rarely need a second search.
_TIE_MARGIN = 16
_SNIPPET_LEAD = 60
_HIDDEN = [("decay_state", state.value) for state in DecayState if not state.visible_by_default]

# What tantivy writes into its directory; `recreate` removes these and nothing else.
_INDEX_FILE_NAMES = frozenset(
    {
        "meta.json",
        ".managed.json",
        ".tantivy-meta.lock",
        ".tantivy-writer.lock",
        META_FILE,
        OVERLAY_FILE,
        f"{OVERLAY_FILE}.tmp",
    }
)
_SEGMENT_FILE_RE = re.compile(r"^[0-9a-f]{32}\.(?:\d+\.del|[a-z]+(?:\.temp)?)$")

# pyo3 maps tantivy's errors to these.
_TANTIVY_ERRORS = (ValueError, RuntimeError, OSError)


class SearchDoc(BaseModel):
    """What the index holds of one memory: what it searches, filters on and shows in a hit."""

    model_config = ConfigDict(frozen=True)

    slug: str = Field(min_length=1)
    scope_hash: str
    type: MemoryType
    decay_state: DecayState
    title: str
    body: str
    tags: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)
    created_at: datetime
    withheld: bool = False
    """A sensitive memory: the on-disk index holds nothing of it, so `upsert` removes its
    slug instead of indexing it (an in-memory index under a grant indexes it as any other)."""


_Changed = tuple[list[SearchDoc], list[SearchDoc]] | None
"""What a write replaced or deleted (as it was) and what it wrote; None: it removed all."""


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
    doc: SearchDoc, context: str | Sequence[str] = "", cut: Callable[[str], str] = segment
) -> tantivy.Document:
    """The tantivy document of `doc`. `context` may come as the bodies it joins by newlines
    and `cut` may remember segmentations: a body is then segmented once however many of its
    neighbours' contexts hold it (the same text either way: segmentation never crosses a
    newline)."""
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
    segmented: dict[str, list[str]] = {}
    for field, values in (
        ("title", [doc.title]),
        ("body", [doc.body]),
        ("tags", doc.tags),
        ("triggers", doc.triggers),
    ):
        cuts = [cut(value) for value in values]
        for value, text in zip(values, cuts, strict=True):
            document.add_text(field, base_forms(text))
            document.add_bytes(f"{field}_stored", value.encode("utf-8"))
        if any(contains_cjk(value) for value in values):  # jieba's work
            segmented[field] = cuts
    if segmented:
        document.add_bytes(
            SEGMENTED_FIELD, json.dumps(segmented, ensure_ascii=False).encode("utf-8")
        )
    if context:
        document.add_text(CONTEXT_FIELD, base_forms(cut_context(context)))
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


class Placed(NamedTuple):
    """Where a session memory that decay moves or deletes stands, and its state before, as
    the graph has it (`SearchIndex.set_decay_states`)."""

    scope_hash: str
    decay_state: DecayState
    created_at: datetime


def _placed_doc(slug: str, place: Placed) -> SearchDoc:
    """A session memory that decay moves or deletes, unread: what the graph says of it
    (`Placed`)."""
    return typed(
        SearchDoc,
        slug=slug,
        scope_hash=place.scope_hash,
        type=CONTEXT_TYPE,
        decay_state=place.decay_state,
        title="",
        body="",
        tags=[],
        triggers=[],
        created_at=place.created_at,
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


class SearchIndex:
    """A tantivy index on disk: one writer inside (created on the first write), many readers.

    Writes are serialised by a lock and each call commits once, then reloads the reader, so a
    search right after `upsert` sees the document. Searches run concurrently. Another process
    may open the same directory to search; only one process at a time can write.
    """

    def __init__(
        self,
        directory: Path,
        index: tantivy.Index,
        schema: tantivy.Schema,
        overlay: DecayOverlay | None = None,
        files: StatsFiles | None = None,
        opstamp: int | None = None,
    ) -> None:
        self._directory = directory
        self._files = files
        """The scopes' statistics saved beside the index (none for an in-memory index)."""
        self._opstamp = opstamp
        self._unsaved: set[str] = set()
        """Tallied scopes whose saved statistics are behind ours (saved when it is time)."""
        self._save_next = 0.0
        """`time.monotonic()` from which the next save may run (`_flush_stats`)."""
        self.keeps_saved = False
        """Keep the saved statistics of the scopes this process writes current (`_adopt_saved`):
        for a long-lived writer (the daemon), which pays a scope's file once. A short-lived
        one (a CLI command) drops the files of the scopes it changes, for the next recall to
        count."""
        """The commit our reader shows (None: not known for sure; nothing is loaded or saved)."""
        self._index = index
        self._schema = schema
        self._overlay = overlay or DecayOverlay(None, {})
        """The decay states of memories whose documents hold an older one (`DecayOverlay`):
        replaced whole with each commit that changes it, under the statistics' lock."""
        self._overlay_next: DecayOverlay | None = None
        """The overlay the write under way commits (None: it changes none)."""
        self._overlay_unsaved = False
        """The overlay's file failed to be written: the next write tries again."""
        self._analyzer = _analyzer()
        self._stops = frozenset(t for word in STOPWORDS for t in self._analyzer.analyze(word))
        self._light = frozenset(t for word in LIGHT_WORDS for t in self._analyzer.analyze(word))
        self._write_lock = threading.Lock()
        self._writer: tantivy.IndexWriter | None = None
        self._closed = False
        self.generation = 0
        self._commits: deque[tuple[int, frozenset[str] | None]] = deque(maxlen=_COMMITS_KEPT)
        """(generation, the slugs its commit wrote, deleted or moved; None: unknown) of the
        last commits: a reader process behind us refreshes only those (`changes_since`)."""
        self.touched: set[str] = set()
        self._lightened: set[str] = set()
        """The documents of the write under way read without their text (`_light_doc`)."""
        self._cuts: dict[str, str] | None = None
        """While a decay write runs: text → its segmentation, as the documents it read store
        them (`SEGMENTED_FIELD`), so it cuts no text again."""
        """Slugs written or deleted since `take_touched` (derived stores catch up on them)."""
        """Commits made through this object: a reader process behind it must `refresh`."""
        self._stats = ScopeStatistics(CONTEXT_WINDOW)
        """The recalled scopes' statistics for `local_bm25`, counted once per scope and then
        kept up to date by every write (`_write`)."""
        self._stats_lock = threading.Lock()
        """Held while the statistics are counted or changed, and across a commit and the
        reader's reload, so a count never sees a commit whose change is still to be applied."""
        self._counts: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._tokens_kept = 0
        """(title, body) → their tokens, for `local_bm25`."""
        self._name_tokens: dict[tuple[str, ...], tuple[str, ...]] = {}
        """A scope's names → their tokens (`_implied`)."""
        self._queries: dict[str, _Query] = {}
        """Recent queries, analysed (`_parsed`)."""
        self._words: dict[str, tuple[str, ...]] = {}
        """A word → its tokens (`_word_tokens`): the analyser's, which never change."""

    def refresh(self, changed: Collection[str] | None = None) -> None:
        """Search what is committed on disk now (another process writes this index).

        `changed` names the memories the writer's commits since our last refresh wrote,
        deleted or moved (its `changes_since`): the statistics then take those out as they
        counted them and put in what the index holds of them now, instead of counting every
        recalled scope again on the next recall (a background worker committing once a
        second made every recall a recount). None: every tally is counted afresh."""
        self._require_open()
        with self._stats_lock, self._errors("reloading the reader"):
            before = index_opstamp(self._directory) if self._files else None
            self._index.reload()
            self._overlay = self._overlay.reload(REINDEX_HINT)
            if self._files:
                after = index_opstamp(self._directory)
                self._opstamp = before if before == after else None
                if self._files.identity is None:
                    self._files.identity = _check_meta(self._directory)
            if changed is None:
                self._stats.forget()
            elif changed:
                self._recount(changed)

    def _recount(self, slugs: Collection[str]) -> None:
        """Bring the tallies up to the index for `slugs` (the caller holds the lock)."""
        held = self._stats.entries_of(slugs)
        if held is None:  # two memories share a slug key: count afresh
            self._stats.forget()
            return
        cuts: dict[str, str] = {}
        now = self._stored(self._index.searcher(), list(slugs), cuts)
        wanted = [doc for doc in now.values() if self._stats.wants(doc.scope_hash)]
        self._stats.apply(held, [self._entry(doc, cuts) for doc in wanted])

    def changes_since(self, generation: int) -> frozenset[str] | None:
        """The slugs the commits made through this object after `generation` wrote, deleted
        or moved (for `refresh`); None when that is unknown (too long ago, too many, a clear
        or a reindex)."""
        current, commits = self.generation, list(self._commits)
        if generation >= current:
            return frozenset()
        if not commits or commits[0][0] > generation + 1:
            return None
        changed: set[str] = set()
        for made, slugs in commits:
            if made <= generation:
                continue
            if slugs is None:
                return None
            changed |= slugs
            if len(changed) > _CHANGES_KEPT:
                return None
        return frozenset(changed)

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, *, saves: bool = True) -> SearchIndex:
        """Open the index in `directory`, creating it (and the directory) when there is none.

        Raises StorageError, with the hint to reindex, when the index was written with another
        schema version or cannot be read: the index is derived, so the caller rebuilds it
        (see `recreate`). With `saves` False (a read that must write nothing) the scopes'
        saved statistics are read and none is saved.
        """
        directory = Path(directory)
        schema = _schema()
        try:
            make_private_dir(directory)
            exists = tantivy.Index.exists(str(directory))
        except _TANTIVY_ERRORS as exc:
            raise StorageError(f"cannot open the search index at {directory}: {exc}") from exc
        if not exists:
            if (directory / META_FILE).exists():
                raise StorageError(
                    f"the search index at {directory} has lost its files", hint=REINDEX_HINT
                )
            return cls._create(directory, schema)
        identity = _check_meta(directory)
        before = index_opstamp(directory)
        try:
            index = tantivy.Index.open(str(directory))
        except _TANTIVY_ERRORS as exc:
            raise StorageError(
                f"the search index at {directory} is unreadable: {exc}", hint=REINDEX_HINT
            ) from exc
        if index.schema != schema:
            raise StorageError(
                f"the search index at {directory} has another schema than version "
                f"{SCHEMA_VERSION} defines",
                hint=REINDEX_HINT,
            )
        overlay = DecayOverlay.load(directory, REINDEX_HINT)
        after = index_opstamp(directory)
        logger.debug("opened search index %s", directory)
        files = StatsFiles(directory, analysis_version, identity, writable=saves)
        return cls(directory, index, schema, overlay, files, before if before == after else None)

    @classmethod
    def recreate(cls, directory: Path) -> SearchIndex:
        """Remove the index in `directory` (tantivy's files only) and open a new, empty one.

        For `reindex` after `open` refused an index. No other process may have it open.
        """
        directory = Path(directory)
        try:
            if directory.is_dir():
                for path in directory.iterdir():
                    if path.name in _INDEX_FILE_NAMES or _SEGMENT_FILE_RE.match(path.name):
                        path.unlink()
        except OSError as exc:
            raise StorageError(f"cannot remove the search index at {directory}: {exc}") from exc
        logger.info("removed the search index at %s", directory)
        return cls.open(directory)

    @classmethod
    def in_memory(cls, label: str) -> SearchIndex:
        """An index that lives in RAM only and is gone when dropped: a granted sensitive
        scope's plaintext is searched here and never reaches the disk (`label` names it in
        errors, in place of a directory)."""
        schema = _schema()
        try:
            index = tantivy.Index(schema)
        except _TANTIVY_ERRORS as exc:
            raise StorageError(f"cannot create an in-memory search index: {exc}") from exc
        return cls(Path(f"<memory:{label}>"), index, schema)

    @classmethod
    def _create(cls, directory: Path, schema: tantivy.Schema) -> SearchIndex:
        try:
            index = tantivy.Index(schema, path=str(directory), reuse=False)
            (directory / OVERLAY_FILE).unlink(missing_ok=True)  # a new index holds no state
            StatsFiles.remove_in(directory)
            identity = _write_meta(directory)
        except _TANTIVY_ERRORS as exc:
            raise StorageError(f"cannot create the search index at {directory}: {exc}") from exc
        logger.info("created search index %s (schema version %s)", directory, SCHEMA_VERSION)
        files = StatsFiles(directory, analysis_version, identity)
        return cls(
            directory, index, schema, DecayOverlay(directory, {}), files, index_opstamp(directory)
        )

    @property
    def directory(self) -> Path:
        return self._directory

    # -- writing -------------------------------------------------------------------------

    def upsert(self, docs: Sequence[SearchDoc]) -> None:
        """Index `docs`, replacing any document with the same slug, in one commit.

        Within one call the last document of a slug wins.
        """
        if not docs:
            return
        latest = {doc.slug: doc for doc in docs}
        withheld = [slug for slug, doc in latest.items() if doc.withheld]
        if withheld:
            self.delete(withheld)
            latest = {slug: doc for slug, doc in latest.items() if slug not in withheld}
            if not latest:
                return

        def plan(searcher: tantivy.Searcher) -> tuple[dict[str, SearchDoc], list[SearchDoc]]:
            # Deleting a slug that is not indexed still costs at commit, in every segment (bulk
            # indexing in 1,000-document batches was 2x slower), so only indexed slugs are
            # deleted.
            indexed = [slug for slug in latest if searcher.doc_freq("slug", slug)]
            return latest, list(self._stored(searcher, indexed).values())

        self._replace(f"indexing {len(latest)} document(s)", plan)

    def set_decay_states(
        self,
        states: Mapping[str, DecayState],
        gone: Sequence[str] = (),
        placed: Mapping[str, Placed] | None = None,
    ) -> None:
        """Move indexed memories to new decay states (slug → state) and delete the `gone`
        ones (unknown slugs are ignored), in one commit: what a whole decay sweep changes.

        A moved memory's document stays as it is: its new state goes into the index's
        `DecayOverlay`, which every read applies. Only the session turns whose context loses
        a memory that goes soft-forgotten or is deleted are written again (the turns of a
        session mostly fade together, so these are few).

        `placed` says where moved and gone memories stand and what state they leave (as
        the graph has it): those of scopes whose statistics are not tallied are then not
        read at all, the session view hiding them by their addresses (a 100k first sweep
        moves 24.7k and deletes 75k; reading them back was a sixth of its index write)."""
        gone = _values(gone)
        if not states and not gone:
            return
        removed = set(gone)
        moving = {slug: state for slug, state in states.items() if slug not in removed}
        places = placed or {}

        def write(writer: tantivy.IndexWriter) -> _Changed:
            self._index.reload()
            searcher = self._index.searcher()
            overlay = self._overlay
            self._lightened = set()
            # The segmentations the documents read store: none of them is cut again.
            known = _Cuts()
            self._cuts = known.stored
            try:
                if self.keeps_saved:
                    # Their scopes' saved statistics are kept (`_adopt_saved`): those moved
                    # are read whole, so their words can be taken out and put back.
                    self._adopt_scopes({place.scope_hash for place in places.values()})
                unread = {
                    slug: place
                    for slug in [*moving, *gone]
                    if (place := places.get(slug)) is not None
                    and not self._stats.wants(place.scope_hash)
                }
                found = self._stored_with_addresses(
                    searcher, [s for s in [*moving, *gone] if s not in unread], light=removed
                )
                before = [doc for doc, _ in found.values()]
                before.extend(_placed_doc(slug, place) for slug, place in unread.items())
                self._lightened.update(unread)
                # What a session view no longer sees: the deleted memories and those going
                # soft-forgotten.
                hiding = removed | {
                    slug for slug, state in moving.items() if not state.visible_by_default
                }
                hidden_at = self._addresses(searcher, [s for s in unread if s in hiding])
                read = {(a.segment_ord, a.doc): doc for doc, a in found.values()}
                view = SessionView(
                    self,
                    searcher,
                    {},
                    gone=hiding,
                    around=[doc for doc in before if doc.slug in hiding],
                    read=read,
                    hidden_at=hidden_at,
                )
                rewrite = [
                    doc.model_copy(update={"decay_state": moving[doc.slug]})
                    if doc.slug in moving
                    else doc
                    for doc in view.neighbours_of([d for d in before if d.slug in hiding])
                ]
                cut = functools.lru_cache(maxsize=None)(known.cut)  # each body cut once
                with self._errors("preparing documents"):
                    documents = [_document(doc, view.context_parts(doc), cut) for doc in rewrite]
                rewritten = [doc.slug for doc in rewrite]
                self._delete_slugs(writer, [*gone, *rewritten])
                for document in documents:
                    writer.add_document(document)
                # Only memories the index holds (not a sensitive scope's, which it withholds).
                held = {
                    slug: state
                    for slug, state in moving.items()
                    if slug in found or (slug in unread and searcher.doc_freq("slug", slug))
                }
                self._overlay_next = overlay.changed(held, [*gone, *rewritten])
                after = [
                    doc.model_copy(update={"decay_state": moving[doc.slug]})
                    for doc in before
                    if doc.slug in moving
                ]
                return before, after
            finally:
                self._cuts = None

        self._write(f"moving {len(states)} and deleting {len(gone)} decayed document(s)", write)
        with self._write_lock:
            self.touched.update(states)
            self.touched.update(gone)

    def _replace(
        self,
        action: str,
        plan: Callable[[tantivy.Searcher], tuple[dict[str, SearchDoc], list[SearchDoc]]],
    ) -> None:
        """Write the documents `plan` returns (slug → new document) in place of the indexed
        ones it returns (as they were), with the session neighbours whose context changes."""
        written: dict[str, SearchDoc] = {}

        def write(writer: tantivy.IndexWriter) -> _Changed:
            # Reloading first makes the reader see every commit made so far. Everything is
            # read and segmented (jieba) before the first change, so a failure leaves nothing
            # half-added for the next commit to pick up.
            self._index.reload()
            searcher = self._index.searcher()
            latest, moved = plan(searcher)
            written.update(latest)
            # A turn's neighbours change when it is written next to them (or moves, or hides).
            view = SessionView(self, searcher, latest, gone=set(), around=moved)
            rewrite = view.neighbours_of([*latest.values(), *moved])
            # Each text cut once: a turn's body is also its neighbours' context (an import of
            # 100k memories cut a session body three times).
            cut = functools.lru_cache(maxsize=None)(segment)
            with self._errors("preparing documents"):
                documents = [
                    (doc.slug, _document(doc, view.context_parts(doc), cut))
                    for doc in [*latest.values(), *rewrite]
                ]
            self._delete_slugs(writer, [doc.slug for doc in (*moved, *rewrite)])
            for _, document in documents:
                writer.add_document(document)
            self._overlay_next = self._overlay.changed({}, [*latest, *(d.slug for d in rewrite)])
            # The rewritten neighbours keep their title and body: only their context changed.
            return moved, list(latest.values())

        self._write(action, write)
        with self._write_lock:
            self.touched.update(written)

    def delete(self, slugs: Sequence[str]) -> None:
        """Remove the documents of `slugs`; unknown slugs are ignored."""
        slugs = _values(slugs)
        if not slugs:
            return

        def write(writer: tantivy.IndexWriter) -> _Changed:
            # The turns next to a deleted one lose it from their context.
            self._index.reload()
            searcher = self._index.searcher()
            gone = set(slugs)
            deleted = list(self._stored(searcher, slugs).values())
            view = SessionView(self, searcher, {}, gone=gone, around=deleted)
            rewrite = view.neighbours_of(deleted)
            with self._errors("preparing documents"):
                documents = [(doc.slug, _document(doc, view.context(doc))) for doc in rewrite]
            self._delete_slugs(writer, [*slugs, *(doc.slug for doc in rewrite)])
            for _, document in documents:
                writer.add_document(document)
            self._overlay_next = self._overlay.changed({}, [*slugs, *(d.slug for d in rewrite)])
            return deleted, []

        self._write(f"deleting {len(slugs)} document(s)", write)
        with self._write_lock:
            self.touched.update(slugs)

    def _delete_slugs(self, writer: tantivy.IndexWriter, slugs: list[str]) -> None:
        """Delete the documents of `slugs` by one term-set query: a decay sweep deletes 100k,
        and one call per slug cost about five times as much (0.14 s against 0.03 s)."""
        if slugs:
            writer.delete_documents_by_query(
                tantivy.Query.term_set_query(self._schema, "slug", slugs)
            )

    def take_touched(self) -> set[str]:
        """The slugs written or deleted since the last call (the vector store's work list)."""
        with self._write_lock:
            touched, self.touched = self.touched, set()
        return touched

    def clear(self) -> None:
        """Remove every document (the schema and the files stay)."""

        def write(writer: tantivy.IndexWriter) -> _Changed:
            writer.delete_all_documents()
            self._overlay_next = self._overlay.changed({}, self._overlay.states)
            return None

        self._write("clearing", write)

    def _write(
        self,
        action: str,
        operations: Callable[[tantivy.IndexWriter], _Changed],
    ) -> None:
        """Run `operations(writer)` and commit, or roll back so nothing of it lingers.

        `operations` returns the documents it replaces or deletes (as they were) and those it
        writes, for the statistics; None when it removed everything."""
        with self._write_lock:
            self._require_open()
            writer = self._get_writer()
            self._overlay_next = None
            try:
                changed = operations(writer)
                if self.keeps_saved:
                    self._adopt_saved(changed)
                removed, added = self._entries_for_stats(changed)
                prior = None
                if self._files:
                    prior = index_opstamp(self._directory)
                    self._files.drop(_scopes_of(changed))  # before the index forgets them
                with self._stats_lock:
                    stamp = writer.commit()
                    overlay, self._overlay_next = self._overlay_next, None
                    self._commits.append(
                        (self.generation + 1, _commit_slugs(changed, self._overlay, overlay))
                    )
                    self.generation += 1
                    if overlay is not None:
                        # Searches see the commit's states with its documents; the file
                        # follows (a failure to write it is raised: the write's intent stays,
                        # and its recovery writes the states again).
                        self._overlay = overlay
                    self._apply_stats(changed, removed, added)
                    if overlay is not None or self._overlay_unsaved:
                        self._overlay_unsaved = True
                        self._overlay.save()
                        self._overlay_unsaved = False
                    self._save_stats(prior, stamp, changed)
            except _TANTIVY_ERRORS as exc:
                self._overlay_next = None
                self._rollback(writer)
                raise StorageError(
                    f"search index {self._directory}: {action} failed: {exc}"
                ) from exc

    def _save_stats(self, prior: int | None, stamp: int, changed: _Changed) -> None:
        """Record a commit (from opstamp `prior` to `stamp`) beside the index, and save the
        statistics of the tallied scopes it changed (the caller holds the statistics' lock;
        the overlay is saved). Statistics that may have missed another process's commits are
        not saved: the files only ever hold what a count would find."""
        files = self._files
        if files is None:
            return
        held, self._opstamp = self._opstamp, stamp
        scopes = _scopes_of(changed)
        files.drop(scopes)  # again: one a reader saved meanwhile
        try:
            if files.identity is None:  # an index from before identities: give it one
                files.identity = _write_meta(self._directory)
            files.committed(prior, stamp, self._overlay.digest, scopes)
        except OSError as exc:
            logger.warning("search index %s: cannot record the commit: %s", self._directory, exc)
            return
        if held is None or held != prior:
            self._stats.forget()  # another process committed before us: count afresh
            self._unsaved.clear()
            return
        tallied = set(self._stats.tallied())
        self._unsaved = (
            self._unsaved | (tallied if scopes is None else tallied & scopes)
        ) & tallied
        self._flush_stats(force=False)

    def _adopt_saved(self, changed: _Changed) -> None:
        """Tally the scopes a write changes, not tallied here yet, from their saved files (the
        caller holds the write lock, and the reader shows our last commit), so the commit
        updates their statistics and saves them (`_flush_stats`) instead of only dropping the
        files: otherwise every reader and fresh process that recalls the scope next counts it
        from scratch. A scope that lost documents read without their text (`_light_doc`)
        cannot be updated, and keeps only the drop."""
        if changed is None:
            return
        light = {doc.scope_hash for doc in changed[0] if doc.slug in self._lightened}
        self._adopt_scopes((_scopes_of(changed) or set()) - light)

    def _adopt_scopes(self, scopes: Collection[str]) -> None:
        """Tally `scopes` from their saved files where they are not tallied yet and their
        files are current (`_adopt_saved`)."""
        files, stamp = self._files, self._opstamp
        if files is None or stamp is None:
            return
        with self._stats_lock:
            for scope in sorted(scopes):
                if not self._stats.wants(scope) and (loaded := files.load(scope, stamp)):
                    self._stats.adopt(scope, *loaded)

    def save_statistics(self) -> None:
        """Save the tallies the files are behind on, when saving is due (`_flush_stats`): a
        long-lived writer calls it now and then, so the last writes of a burst are saved
        before the process ends."""
        with self._stats_lock:
            if not self._closed:
                self._flush_stats(force=False)

    def _flush_stats(self, force: bool) -> None:
        """Save the tallies the files are behind on: when `force`d (closing), or when saving
        has had no more than `_SAVE_SHARE` of the time since the last save (saving a large
        scope costs as much as a small write, so each write saving would double it). The
        caller holds the statistics' lock. A process that opens the index before the save
        counts those scopes afresh (and saves them)."""
        files, stamp = self._files, self._opstamp
        if files is None or stamp is None or not self._unsaved:
            return
        started = time.monotonic()
        if not force and started < self._save_next:
            return
        if not files.fresh_at(stamp, self._overlay.digest):
            self._unsaved.clear()  # the manifest is not ours to trust: nothing is saved
            return
        for scope in sorted(self._unsaved):
            if (saved := self._stats.saved(scope)) is not None:
                files.save(scope, stamp, *saved)
        self._unsaved.clear()
        self._save_next = time.monotonic() + (time.monotonic() - started) / _SAVE_SHARE

    def _entries_for_stats(self, changed: _Changed) -> tuple[list[Entry], list[Entry]]:
        """The written and removed documents of tallied scopes, analysed (before the commit,
        outside the statistics' lock; a scope tallied meanwhile is analysed under it)."""
        if changed is None:
            return [], []
        removed, added = changed
        return (
            [self._entry(doc) for doc in removed if self._stats.wants(doc.scope_hash)],
            [self._entry(doc) for doc in added if self._stats.wants(doc.scope_hash)],
        )

    def _apply_stats(
        self,
        changed: _Changed,
        removed: list[Entry],
        added: list[Entry],
    ) -> None:
        """Reload the reader and bring the statistics to the commit just made (the caller
        holds the statistics' lock)."""
        try:
            with self._errors("reloading the reader"):
                self._index.reload()
        except StorageError:
            self._stats.forget()
            raise
        if changed is None:
            self._stats.emptied()
            return
        try:
            # Documents of scopes counted since `_entries_for_stats` (so before this commit).
            late: list[list[Entry]] = []
            lightened, self._lightened = self._lightened, set()
            if any(d.slug in lightened and self._stats.wants(d.scope_hash) for d in changed[0]):
                # A scope counted since `_entries_for_stats` lost documents read without
                # their text (`_light_doc`): its words cannot be subtracted; count afresh.
                self._stats.forget()
                return
            for docs, early in zip(changed, (removed, added), strict=True):
                seen = {entry.slug for entry in early}
                late.append(
                    [
                        self._entry(doc)
                        for doc in docs
                        if doc.slug not in seen and self._stats.wants(doc.scope_hash)
                    ]
                )
            self._stats.apply([*removed, *late[0]], [*added, *late[1]])
        except _TANTIVY_ERRORS:
            # The write is committed; statistics that missed part of it are counted afresh.
            logger.exception("search index %s: updating the statistics failed", self._directory)
            self._stats.forget()

    def _get_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            threads = max(1, min(_WRITER_MAX_THREADS, os.cpu_count() or 1))
            try:
                self._writer = self._index.writer(heap_size=_WRITER_HEAP_BYTES, num_threads=threads)
            except _TANTIVY_ERRORS as exc:
                if "LockBusy" in str(exc):
                    raise StorageError(
                        f"the search index at {self._directory} is being written by another "
                        "process",
                        hint="use `memoryd serve`, or wait for the other command to finish",
                    ) from exc
                raise StorageError(
                    f"cannot write the search index at {self._directory}: {exc}"
                ) from exc
        return self._writer

    def _rollback(self, writer: tantivy.IndexWriter) -> None:
        try:
            writer.rollback()
        except _TANTIVY_ERRORS:
            # The writer is unusable; drop it so the next write starts a fresh one.
            logger.exception("search index %s: rollback failed", self._directory)
            self._writer = None

    # -- reading -------------------------------------------------------------------------

    def count(self) -> int:
        """Number of documents (deleted ones excluded)."""
        self._require_open()
        with self._errors("counting"):
            return int(self._index.searcher().num_docs)

    def slugs(self) -> set[str]:
        """Every slug in the index, read from the term dictionary (about 0.1 s at 100k)."""
        self._require_open()
        with self._errors("listing slugs"):
            searcher = self._index.searcher()
            # The filter makes tantivy count live documents, so deleted slugs drop out.
            terms = searcher.terms_with_prefix(
                "slug", "", filter_query=tantivy.Query.all_query(), limit=None
            )
        return {term for term, _ in terms}

    def search(
        self,
        query: str,
        *,
        scope_hashes: Sequence[str] | None = None,
        types: Sequence[MemoryType] | None = None,
        include_forgotten: bool = False,
        limit: int = 10,
        offset: int = 0,
        explain: bool = True,
        title_boost: float | None = None,
        context_boost: float | None = None,
        scope_idf: bool = False,
        expansion: Mapping[str, float] | None = None,
    ) -> list[SearchHit]:
        """BM25 over title, body, tags and triggers, best first, ties broken by slug.

        With `explain=False` the hits carry no snippet and no matched terms: recall ranks
        50 candidates and explains only the few it returns (see `lookup`). `title_boost`
        replaces the title's usual weight (recall weighs titles after fusion instead);
        `context_boost` searches the neighbouring session turns' text too, at that weight
        (a soft-forgotten turn, found with `include_forgotten`, by the context it had when
        it faded: `DecayOverlay`).
        With `scope_idf` and `scope_hashes`, a word weighs as rare as it is in those scopes
        (not in the whole index): a project's name, in most of its own memories, says little
        there however rare it is elsewhere. `expansion` adds words to the query at their own
        weight (the rarest `_MAX_EXPANSION_TOKENS` the index holds).

        Any text is a valid query: words are OR-ed, and a query with no word (punctuation,
        emoji, empty) finds nothing. `scope_hashes` and `types` keep hits matching any of
        their values (an empty sequence keeps none); soft-forgotten and forgotten memories are
        left out unless `include_forgotten`.
        """
        if limit < 0 or offset < 0:
            raise InvalidInput(f"limit and offset must be >= 0 (got {limit}, {offset})")
        scopes = None if scope_hashes is None else _values(scope_hashes)
        type_values = None if types is None else [_memory_type(t) for t in _values(types)]
        self._require_open()
        if limit == 0 or scopes == [] or type_values == []:
            return []
        with self._errors("analysing the query"):
            parsed = self._parsed(query)
        if not parsed.tokens:
            return []
        boosts = dict(_FIELD_BOOSTS)
        if title_boost is not None:
            boosts["title"] = title_boost
        if context_boost:
            boosts[CONTEXT_FIELD] = context_boost
        with self._errors("searching"):
            searcher = self._index.searcher()
            overlay = self._overlay
            states = overlay.states
            weights = (
                self._scope_weights(searcher, parsed.tokens, scopes) if scope_idf and scopes else {}
            )
            tokens = list(parsed.tokens)
            if expansion:
                extra = self._expansion(searcher, expansion, tokens)
                tokens += extra
                weights = {**weights, **extra}
            tantivy_query = self._build_query(
                tokens, boosts, scopes, type_values, include_forgotten, weights
            )
            hiding = None if include_forgotten else overlay
            ranked = self._ranked(searcher, tantivy_query, offset + limit, hiding)
            return [
                self._hit(_stored_doc(document, states), score, parsed if explain else None)
                for score, _, document in ranked[offset : offset + limit]
            ]

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
        self._require_open()
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
            boosts = {"title": 1.0, "body": 1.0}
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
            held_words = set(said).union(titled, *around) if hear else set(said).union(titled)
            for token in sorted(held_words.intersection(order), key=order.__getitem__):
                weight = weights[token]
                tf = said.count(token) / body_norm + titled.count(token) / title_norm
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

    def _implied(
        self, scopes: Sequence[str], scope_names: Callable[[str], Sequence[str]] | None
    ) -> dict[str, list[str]]:
        """token → the scopes among `scopes` whose own names hold it (`local_bm25`)."""
        implied: dict[str, list[str]] = {}
        if scope_names is None:
            return implied
        for scope in scopes:
            names = tuple(scope_names(scope))
            tokens = self._name_tokens.get(names)
            if tokens is None:
                analysed = (t for name in names for t in self.analyse(name))
                tokens = self._name_tokens[names] = tuple(
                    t for t in dict.fromkeys(analysed) if t not in self._stops
                )
            for token in tokens:
                implied.setdefault(token, []).append(scope)
        return implied

    def statistics(
        self,
        scope_hashes: Sequence[str] | None = None,
        *,
        include_forgotten: bool = False,
        is_turn: TurnTest | None = None,
    ) -> Snapshot:
        """The statistics `local_bm25` ranks `scope_hashes` with (every scope when None), as
        they stand now: kept up to date by each write, they equal a recount."""
        self._require_open()
        scopes = None if scope_hashes is None else _values(scope_hashes)
        with self._stats_lock, self._errors("counting"):
            self._tallied(scopes, include_forgotten, is_turn)
            return self._stats.snapshot(scopes, include_forgotten, is_turn)

    def _parsed(self, query: str) -> _Query:
        """`query` analysed, kept for the next few calls: one recall analyses its query in
        several steps (ranking, titles, explanations), and a Chinese query costs a jieba cut."""
        parsed = self._queries.get(query)
        if parsed is None:
            if len(self._queries) >= _QUERIES_KEPT:
                self._queries.clear()
            parsed = self._queries[query] = _Query(query, self._analyzer, self._stops)
        return parsed

    def analyse(self, text: str) -> list[str]:
        """`text`'s tokens as the index analyses queries and documents."""
        return list(self._analyzer.analyze(base_forms(segment(text))))

    def _tokens_of(
        self, title: str, body: str, cuts: Mapping[str, str] | None = None
    ) -> tuple[Tokens, Tokens]:
        """A title's and body's tokens as the index analyses them. Kept by their text (so an
        edit, or another process's write, never serves stale tokens) up to `_TOKENS_KEPT`
        tokens: recalls meet the same memories again, and a rewrite meets its old version.
        `cuts`: text → its segmentation as a stored document holds it (`_learn_cuts`)."""
        key = (title, body)
        known = self._counts.get(key)
        if known is None:
            known = (self._analysed(title, cuts), self._analysed(body, cuts))
            size = len(known[0]) + len(known[1])
            if self._tokens_kept + size <= _TOKENS_KEPT:
                self._counts[key] = known
                self._tokens_kept += size
        return known

    def _analysed(self, text: str, cuts: Mapping[str, str] | None = None) -> Tokens:
        cut = cuts.get(text) if cuts else None
        return tuple(
            sys.intern(t)
            for t in self._analyzer.analyze(base_forms(segment(text) if cut is None else cut))
        )

    def tokens(self, title: str, body: str) -> tuple[Tokens, Tokens]:
        """A title's and body's tokens as the statistics count them (`analysis_version`
        names the analysis that made them)."""
        return self._tokens_of(title, body)

    def learn_tokens(self, known: Iterable[tuple[str, str, Tokens, Tokens]]) -> None:
        """Take (title, body, their tokens) analysed earlier under this `analysis_version`,
        so counting them does not analyse them again (a granted scope's snapshot keeps them)."""
        for title, body, title_tokens, body_tokens in known:
            key = (title, body)
            size = len(title_tokens) + len(body_tokens)
            if key in self._counts or self._tokens_kept + size > _TOKENS_KEPT:
                continue
            self._counts[key] = (title_tokens, body_tokens)
            self._tokens_kept += size

    def tally(self, scope_hash: str, docs: Iterable[SearchDoc], is_turn: TurnTest | None) -> None:
        """Count a scope's recall statistics from `docs`, every live memory of it just
        written, instead of reading them back on the first recall (a granted scope's
        in-memory index is built whole, then recalled at once)."""
        with self._stats_lock:
            self._stats.missing([scope_hash], is_turn)  # registers the turn test
            self._stats.load((self._entry(doc) for doc in docs), [scope_hash])

    def _entry(self, doc: SearchDoc, cuts: Mapping[str, str] | None = None) -> Entry:
        """What the scope statistics count of a memory (`cuts`: as for `_tokens_of`)."""
        title, body = self._tokens_of(doc.title, doc.body, cuts)
        return Entry(
            doc.slug,
            doc.scope_hash,
            doc.type,
            not doc.decay_state.visible_by_default,
            to_utc(doc.created_at),
            title,
            body,
            doc.body,
            slug_key(doc.slug),
            doc.title,
            doc.decay_state,
            tuple(doc.tags),
            tuple(doc.triggers),
        )

    def _tallied(
        self, scopes: list[str] | None, include_forgotten: bool, is_turn: TurnTest | None
    ) -> StatsView:
        """The searched scopes' statistics (`ScopeStatistics`), counting the scopes no recall
        has met yet from their live memories, hidden ones included (the caller holds the
        statistics' lock, so no commit lands between the count and its registration)."""
        missing = self._stats.missing(scopes, is_turn)
        files, stamp = self._files, self._opstamp
        if missing and files is not None and stamp is not None:
            for scope in list(missing):
                if (loaded := files.load(scope, stamp)) is not None:
                    self._stats.adopt(scope, *loaded)
                    missing.remove(scope)
        if missing is None or missing:
            searcher = self._index.searcher()
            every = self._visible(missing, include_forgotten=True)
            total = _count(searcher, every)
            hits = searcher.search(every, limit=total, count=False).hits if total else []
            # Chinese text is counted as the documents store its segmentation: a count cuts
            # nothing again, and an English recall never loads jieba's dictionary.
            cuts: dict[str, str] = {}
            self._stats.load(
                (
                    self._entry(
                        _stored_doc(searcher.doc(address), self._overlay.states, cuts), cuts
                    )
                    for _, address in hits
                ),
                missing,
            )
            if (
                files is not None
                and stamp is not None
                and files.fresh_at(stamp, self._overlay.digest)
            ):
                for scope in self._stats.tallied() if missing is None else missing:
                    if (saved := self._stats.saved(scope)) is not None:
                        files.save(scope, stamp, *saved)
        return self._stats.view(scopes, include_forgotten, is_turn)

    def _visible(self, scopes: list[str] | None, include_forgotten: bool) -> tantivy.Query:
        clauses = [(tantivy.Occur.Must, tantivy.Query.all_query())]
        if scopes is not None:
            clauses.append((tantivy.Occur.Must, self._any_of("scope_hash", scopes)))
        if not include_forgotten:
            clauses.extend(
                (tantivy.Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN
            )
        return tantivy.Query.boolean_query(clauses)

    def explain(self, docs: Sequence[SearchDoc], query: str) -> list[SearchHit]:
        """`docs` as hits, each explained for `query` (the terms it matches, a snippet from
        where the first one occurs). Recall explains the memories it ranked from the documents
        it ranked them on, without reading them from the index again."""
        self._require_open()
        with self._errors("analysing the query"):
            parsed = self._parsed(query)
        return [self._hit(doc, 0.0, parsed) for doc in docs]

    def stored(self, slugs: Sequence[str]) -> dict[str, SearchDoc]:
        """These memories as indexed, body included (unknown slugs are absent): recall ranks
        its candidates on them, and weighs what a session turn says, without a trip to the
        vault or the graph."""
        self._require_open()
        with self._errors("reading stored memories"):
            return self._stored(self._index.searcher(), slugs)

    def _stored(
        self, searcher: tantivy.Searcher, slugs: Sequence[str], cuts: dict[str, str] | None = None
    ) -> dict[str, SearchDoc]:
        """The indexed documents of `slugs` as written (unknown slugs are absent); `cuts`
        learns their stored segmentations (`_learn_cuts`)."""
        wanted = list(dict.fromkeys(slugs))
        if not wanted:
            return {}
        by_slug = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, self._term("slug", slug)) for slug in wanted]
        )
        found = {}
        states = self._overlay.states
        for _, address in searcher.search(by_slug, limit=len(wanted), count=False).hits:
            doc = _stored_doc(searcher.doc(address), states, cuts)
            found[doc.slug] = doc
        return found

    def _stored_with_addresses(
        self,
        searcher: tantivy.Searcher,
        slugs: Sequence[str],
        light: Collection[str] = (),
    ) -> dict[str, tuple[SearchDoc, tantivy.DocAddress]]:
        """As `_stored`, with where each document is (a session view's reads start there).

        The `light` slugs are being deleted: in a scope whose statistics are not tallied
        their text is not decoded (`_light_doc`), since nothing reads it: a session view
        hides them and only tallied statistics subtract a deleted document's words (a
        decay sweep deletes 75k documents of a 100k vault)."""
        wanted = list(dict.fromkeys(slugs))
        if not wanted:
            return {}
        by_slug = tantivy.Query.term_set_query(self._schema, "slug", wanted)
        found = {}
        states = self._overlay.states
        for _, address in searcher.search(by_slug, limit=len(wanted), count=False).hits:
            document = searcher.doc(address)
            slug = str(_stored(document, "slug"))
            scope_hash = str(_stored(document, "scope_hash"))
            if slug in light and not self._stats.wants(scope_hash):
                doc = _light_doc(document, slug, scope_hash, states)
                self._lightened.add(slug)
            else:
                doc = _stored_doc(document, states, self._cuts)
            found[doc.slug] = (doc, address)
        return found

    def _addresses(self, searcher: tantivy.Searcher, slugs: Sequence[str]) -> set[tuple[int, int]]:
        """Where the documents of `slugs` are, as (segment, doc), none of them read."""
        if not slugs:
            return set()
        by_slug = tantivy.Query.term_set_query(self._schema, "slug", list(slugs))
        hits = searcher.search(by_slug, limit=len(slugs), count=False).hits
        return {(address.segment_ord, address.doc) for _, address in hits}

    def doc_at(self, searcher: tantivy.Searcher, address: tantivy.DocAddress) -> SearchDoc:
        """The stored document at `address` (the session view reads turns through this)."""
        return _stored_doc(searcher.doc(address), self._overlay.states, self._cuts)

    def _session_entries(
        self, searcher: tantivy.Searcher, scope_hash: str, span: tuple[datetime, datetime]
    ) -> list[tuple[int, tantivy.DocAddress]]:
        """The visible session memories of a scope in `span` (ends included), as (created_at
        in nanoseconds, address), oldest first: documents are read only when needed."""
        Query, Occur = tantivy.Query, tantivy.Occur
        start, end = span
        query = Query.boolean_query(
            [
                (Occur.Must, self._term("scope_hash", scope_hash)),
                (Occur.Must, self._term("type", CONTEXT_TYPE.value)),
                (
                    Occur.Must,
                    Query.range_query(
                        self._schema, "created_at", tantivy.FieldType.Date, start, end
                    ),
                ),
                *((Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN),
            ]
        )
        total = _count(searcher, query)
        if not total:
            return []
        hits = searcher.search(
            query,
            limit=total,
            count=False,
            order_by_field="created_at",
            order=tantivy.Order.Asc,
        ).hits
        overlay = self._overlay
        if overlay.hidden_keys:
            keys = searcher.fast_field_values(SLUG_KEY_FIELD, [address for _, address in hits])
            hits = [
                hit
                for hit, key in zip(hits, keys, strict=True)
                if not _hides(overlay, searcher, hit[1], key)
            ]
        return [(int(key), address) for key, address in hits]

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
        self._require_open()
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

    def near_in_time(
        self,
        *,
        scope_hash: str,
        type: MemoryType,
        at: datetime,
        window: timedelta,
        exclude: str,
        per_side: int = 1,
    ) -> tuple[list[str], list[str]]:
        """The memories of this scope and type written just before and just after `at`,
        nearest first on each side: a range query per side ordered by the fast `created_at`
        field, so each reads about `per_side` documents however long the episode.

        Turns of one instant stand in slug order around `exclude` (as `SessionView` places
        them): the engine returns ties in the order they were written, which a rebuilt index
        or a granted view does not repeat, so an instant the answer reaches into is read
        whole whenever the first read may have cut it."""
        self._require_open()
        at = to_utc(at)
        here = (nanos(at), exclude)
        with self._errors("searching by time"):
            searcher = self._index.searcher()
            sides = [
                self._turns_beside(
                    searcher, scope_hash, type, (at - window, at), here, per_side, backwards=side
                )
                for side in (True, False)
            ]
        return sides[0], sides[1]

    def _turns_beside(
        self,
        searcher: tantivy.Searcher,
        scope_hash: str,
        type: MemoryType,
        span: tuple[datetime, datetime],
        here: tuple[int, str],
        per_side: int,
        *,
        backwards: bool,
    ) -> list[str]:
        """Up to `per_side` slugs of visible memories on one side of `here` (created_at in
        nanoseconds, slug), nearest first; `span` is the window before `here` (backwards)."""
        at = from_nanos(here[0])
        width = at - span[0]
        # Backwards (at - width, at]; forwards [at, at + width]: ties with `at` fall on the
        # side their slug puts them.
        lower, upper = (at - width, at) if backwards else (at, at + width)
        include_lower, include_upper = (False, True) if backwards else (True, True)
        order = tantivy.Order.Desc if backwards else tantivy.Order.Asc
        limit = per_side + _TIE_SLACK
        hidden = self._overlay.hidden_slugs

        def query(low: datetime, high: datetime, inc_low: bool, inc_high: bool) -> tantivy.Query:
            Query, Occur = tantivy.Query, tantivy.Occur
            return Query.boolean_query(
                [
                    (Occur.Must, self._term("scope_hash", scope_hash)),
                    (Occur.Must, self._term("type", _memory_type(type))),
                    (
                        Occur.Must,
                        Query.range_query(
                            self._schema,
                            "created_at",
                            tantivy.FieldType.Date,
                            low,
                            high,
                            include_lower=inc_low,
                            include_upper=inc_high,
                        ),
                    ),
                    *((Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN),
                ]
            )

        def read(q: tantivy.Query, size: int) -> list[tuple[int, str]]:
            found = searcher.search(
                q, limit=size, count=False, order_by_field="created_at", order=order
            ).hits
            return [
                (int(key), str(_stored(searcher.doc(address), "slug"))) for key, address in found
            ]

        def beside(turn: tuple[int, str]) -> bool:
            # A turn decay hid after it was indexed (`DecayOverlay`) is read, and not taken.
            return (turn < here if backwards else turn > here) and turn[1] not in hidden

        taken: list[tuple[int, str]] = []
        while True:
            turns = read(query(lower, upper, include_lower, include_upper), limit)
            more = len(turns) == limit
            if more:  # the farthest instant read may hold more turns than were returned
                edge = turns[-1][0]
                nearer = [t for t in turns if t[0] != edge]
                if len(taken) + sum(map(beside, nearer)) >= per_side:
                    turns, more = nearer, False
                else:
                    instant = from_nanos(edge)
                    whole = query(instant, instant, True, True)
                    turns = nearer + read(whole, _count(searcher, whole))
                    # Go on past the edge instant if this side still lacks turns.
                    if backwards:
                        upper, include_upper = instant, False
                    else:
                        lower, include_lower = instant, False
            taken += sorted((t for t in turns if beside(t)), reverse=backwards)
            if len(taken) >= per_side or not more:
                return [slug for _, slug in taken[:per_side]]

    def words_held(self, text: str, words: Iterable[str]) -> list[str]:
        """The `words` that `text` holds, as the index analyses both ("surfed" holds "surf")."""
        with self._errors("analysing text"):
            held = set(self._analyzer.analyze(base_forms(segment(text))))
            return [
                word
                for word in words
                if (tokens := self._word_tokens(word)) and all(t in held for t in tokens)
            ]

    def _word_tokens(self, word: str) -> tuple[str, ...]:
        """One word's tokens as the index analyses it, kept: a kind expansion asks the same
        hundreds of words in every recall of that kind, and of each hit it explains."""
        tokens = self._words.get(word)
        if tokens is None:
            tokens = tuple(self._analyzer.analyze(base_forms(word)))
            if len(self._words) < _WORDS_KEPT:
                self._words[word] = tokens
        return tokens

    def _expansion(
        self, searcher: tantivy.Searcher, words: Mapping[str, float], query: Sequence[str]
    ) -> dict[str, float]:
        """The tokens of `words` that some document holds and the query does not, each at its
        word's weight: the rarest first, at most `_MAX_EXPANSION_TOKENS`."""
        found: dict[str, tuple[int, float]] = {}
        for word, weight in words.items():
            for token in self._word_tokens(word):
                if token in query or token in self._stops or token in found:
                    continue
                held = int(searcher.doc_freq("body", token))
                if held:
                    found[token] = (held, weight)
        rarest = sorted(found.items(), key=lambda item: (item[1][0], item[0]))
        return {token: weight for token, (_, weight) in rarest[:_MAX_EXPANSION_TOKENS]}

    def _scope_weights(
        self, searcher: tantivy.Searcher, tokens: Sequence[str], scopes: Sequence[str]
    ) -> dict[str, float]:
        """token → how much rarer (or commoner) it is in `scopes` than in the whole index: the
        ratio of its inverse document frequencies (BM25's, over the body), which scales its
        score to what BM25 over these scopes alone would give."""
        Query, Occur = tantivy.Query, tantivy.Occur
        in_scope = self._any_of("scope_hash", scopes)
        total = int(searcher.num_docs)
        scoped = _count(searcher, in_scope)
        weights: dict[str, float] = {}
        if not scoped or scoped == total:
            return weights
        for token in tokens:
            term = Query.term_query(self._schema, "body", token)
            everywhere = int(searcher.doc_freq("body", token))
            if not everywhere:
                continue
            here = _count(
                searcher, Query.boolean_query([(Occur.Must, term), (Occur.Must, in_scope)])
            )
            if here:
                weights[token] = _bm25_idf(scoped, here) / _bm25_idf(total, everywhere)
        return weights

    def _build_query(
        self,
        tokens: list[str],
        boosts: Mapping[str, float],
        scope_hashes: list[str] | None,
        types: list[str] | None,
        include_forgotten: bool,
        weights: Mapping[str, float] | None = None,
    ) -> tantivy.Query:
        Query, Occur = tantivy.Query, tantivy.Occur
        should: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for token in tokens:
            weight = weights.get(token, 1.0) if weights else 1.0
            for field, boost in boosts.items():
                term = Query.term_query(self._schema, field, token)
                should.append((Occur.Should, Query.boost_query(term, boost * weight)))
        clauses = [(Occur.Must, Query.boolean_query(should))]
        if scope_hashes is not None:
            clauses.append((Occur.Must, self._any_of("scope_hash", scope_hashes)))
        if types is not None:
            clauses.append((Occur.Must, self._any_of("type", types)))
        if not include_forgotten:
            # Excluding the two hidden states is cheaper than requiring the (many) visible ones.
            clauses.extend((Occur.MustNot, self._term(field, value)) for field, value in _HIDDEN)
        return Query.boolean_query(clauses)

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value, index_option="basic")

    def _any_of(self, field: str, values: Sequence[str]) -> tantivy.Query:
        """A filter matching any of `values`, scoring zero so it leaves BM25 as it is.

        A disjunction of term queries: measured 3x faster here than tantivy's TermSetQuery.
        """
        terms = [self._term(field, value) for value in dict.fromkeys(values)]
        query = (
            terms[0]
            if len(terms) == 1
            else tantivy.Query.boolean_query([(tantivy.Occur.Should, term) for term in terms])
        )
        return tantivy.Query.const_score_query(query, 0.0)

    @staticmethod
    def _ranked(
        searcher: tantivy.Searcher,
        query: tantivy.Query,
        wanted: int,
        hiding: DecayOverlay | None,
    ) -> list[tuple[float, str, tantivy.Document]]:
        """The top `wanted` hits ordered by (score desc, slug), ties at the cut included,
        none of those `hiding` hides among them.

        tantivy orders equal scores by internal address, which changes with merges; fetching
        until the score drops below the cut-off makes the order depend only on the data.
        """
        ranked = []
        for score, address, _ in SearchIndex._top(searcher, query, wanted, hiding, keyed=False):
            document = searcher.doc(address)
            ranked.append((float(score), str(_stored(document, "slug")), document))
        ranked.sort(key=lambda item: (-item[0], item[1]))
        return ranked[:wanted]

    @staticmethod
    def _top(
        searcher: tantivy.Searcher,
        query: tantivy.Query,
        wanted: int,
        hiding: DecayOverlay | None,
        *,
        keyed: bool = True,
    ) -> list[tuple[float, tantivy.DocAddress, object]]:
        """The best `wanted` hits, and every hit that ties with the last of them, as (score,
        address, slug key; None unless `keyed` or hiding), none of the memories `hiding`
        hides among them: those are dropped as they come, and more fetched while the cut
        is not clear."""
        # tantivy sizes its top-k heap by the limit: never ask for more than there are docs.
        available = max(1, int(searcher.num_docs))
        fetch = min(wanted + _TIE_MARGIN, available)
        hidden = hiding if hiding is not None and hiding.hidden_keys else None
        while True:
            found = searcher.search(query, limit=fetch, count=False).hits
            keys: list[object] = [None] * len(found)
            if keyed or hidden is not None:
                keys = list(
                    searcher.fast_field_values(SLUG_KEY_FIELD, [address for _, address in found])
                )
            hits = [
                (score, address, key)
                for (score, address), key in zip(found, keys, strict=True)
                if hidden is None or not _hides(hidden, searcher, address, key)
            ]
            if len(found) < fetch or fetch >= available:
                break
            # Every hit not fetched scores at most the last one fetched (hidden or not).
            if len(hits) >= wanted and hits[wanted - 1][0] > found[-1][0]:
                break
            fetch = min(fetch * 4, available)
        cutoff = hits[wanted - 1][0] if len(hits) >= wanted else float("-inf")
        return [hit for hit in hits if hit[0] >= cutoff]

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

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Finish background merges and release the writer lock; the index is then unusable."""
        with self._write_lock:
            if self._closed:
                return
            with self._stats_lock:
                self._flush_stats(force=True)
            self._closed = True
            writer, self._writer = self._writer, None
            if writer is not None:
                with self._errors("closing"):
                    writer.wait_merging_threads()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SearchIndex({str(self._directory)!r})"

    def _require_open(self) -> None:
        if self._closed:
            raise StorageError(f"the search index at {self._directory} is closed")

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except _TANTIVY_ERRORS as exc:
            raise StorageError(f"search index {self._directory}: {action} failed: {exc}") from exc


def _hides(
    overlay: DecayOverlay, searcher: tantivy.Searcher, address: tantivy.DocAddress, key: object
) -> bool:
    """Whether the document at `address` (its slug key `key`) is one `overlay` hides: its key
    says no for nearly every hit, and a key it holds is checked against the slug."""
    if key not in overlay.hidden_keys:
        return False
    return str(_stored(searcher.doc(address), "slug")) in overlay.hidden_slugs


def _count(searcher: tantivy.Searcher, query: tantivy.Query) -> int:
    """How many documents match `query` (tantivy's stub does not declare `count`)."""
    result = searcher.search(query, limit=1, count=True)
    return int(result.count or 0)  # type: ignore[attr-defined]


_TIE_SLACK = 4
"""Turns read beyond those wanted on each side of `near_in_time`, so an instant cut at the
edge of the read rarely needs reading whole."""

_TOKENS_KEPT = 8_000_000
"""At most this many analysed tokens are kept for `local_bm25` (about 70 MB)."""
_COMMITS_KEPT = 1024
_SAVE_SHARE = 0.05
"""At most this share of the writer's time goes to saving statistics (`_flush_stats`)."""
_CHANGES_KEPT = 4096
"""Past this many changed memories a reader counts its tallies afresh (`changes_since`)."""

_QUERIES_KEPT = 64
"""At most this many analysed queries are kept (`_parsed`)."""
_WORDS_KEPT = 100_000
"""At most this many single words' tokens are kept (`_word_tokens`)."""
_BM25_K1 = 1.2
_BM25_B = 0.75


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


def _scopes_of(changed: _Changed) -> set[str] | None:
    """The scopes whose memories a commit changes (None: every scope, a clear)."""
    return None if changed is None else {doc.scope_hash for docs in changed for doc in docs}


def _commit_slugs(
    changed: _Changed, before: DecayOverlay, after: DecayOverlay | None
) -> frozenset[str] | None:
    """The slugs one commit wrote, deleted or moved to another decay state; None when it
    removed everything or changed too many to name."""
    if changed is None:
        return None
    slugs = {doc.slug for docs in changed for doc in docs}
    if after is not None:
        old, new = before.states, after.states
        slugs.update(slug for slug in old.keys() | new.keys() if old.get(slug) != new.get(slug))
    return frozenset(slugs) if len(slugs) <= _CHANGES_KEPT else None
