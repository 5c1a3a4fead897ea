"""The full-text index of memories (`SearchIndex`): BM25 over tantivy.

`SearchIndex` opens, creates or rebuilds the index on disk (or in memory, for a granted
sensitive scope) and puts together the package's jobs, one module each: the tantivy schema,
analyser and documents (`search.engine`, the one module that imports tantivy), the reads and
queries (`search.reader`), the writes (`search.writer`), the scope statistics
(`search.tallies`, over `search.stats` and `search.stats_file`), scope-local BM25
(`search.local`), explanations (`search.explanations`), title lookups (`search.titles`),
session turns by time (`search.neighbours`), the session-neighbour context
(`search.sessions`) and the decay overlay (`search.overlay`). Each session memory is also
indexed with its neighbouring turns' text (the `context` field), which recall searches.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from memoryd.errors import InvalidInput, StorageError
from memoryd.models import MemoryType, SearchHit
from memoryd.private import make_private_dir
from memoryd.search.engine import (
    _FIELD_BOOSTS,
    _TANTIVY_ERRORS,
    CONTEXT_FIELD,
    META_FILE,
    REINDEX_HINT,
    SCHEMA_VERSION,
    _check_meta,
    _memory_type,
    _schema,
    _stored_doc,
    _values,
    _write_meta,
    analysis_version,
    tantivy,
)
from memoryd.search.explanations import Explaining
from memoryd.search.local import LocalBM25, LocalRanking, LocalScore
from memoryd.search.overlay import OVERLAY_FILE, DecayOverlay
from memoryd.search.retries import CommitWait
from memoryd.search.stats_file import StatsFiles, index_opstamp
from memoryd.search.titles import TitleLookups
from memoryd.search.writer import IndexWriting, Placed

__all__ = [
    "CONTEXT_FIELD",
    "META_FILE",
    "SCHEMA_VERSION",
    "CommitWait",
    "LocalRanking",
    "LocalScore",
    "Placed",
    "SearchIndex",
    "analysis_version",
]
"""What callers import from here: the index, and the names its results and files carry."""

logger = logging.getLogger(__name__)

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


class SearchIndex(IndexWriting, LocalBM25, Explaining, TitleLookups):
    """A tantivy index on disk: one writer inside (created on the first write), many readers.

    Writes are serialised by a lock and each call commits once, then reloads the reader, so a
    search right after `upsert` sees the document; one with `then` (a `record`) may wait for
    a later commit, which every read of the index makes first. Searches run concurrently.
    Another process may open the same directory to search; only one process at a time can
    write.
    """

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
        stamp = before if before == after else None
        if saves and stamp is not None:
            # An index from before the saved statistics (or before identities) has no manifest
            # until a write: then no recall could save what it counted, and every process
            # counted again. Its readers (the daemon's) open it after the daemon did.
            try:
                if files.identity is None:
                    files.identity = _write_meta(directory)
                files.describe(stamp, overlay.digest)
            except OSError as exc:
                logger.warning("search index %s: cannot describe it: %s", directory, exc)
        return cls(directory, index, schema, overlay, files, stamp)

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
        overlay, stamp = DecayOverlay(directory, {}), index_opstamp(directory)
        if stamp is not None:
            # The empty index is described from the start, so its first writes into a scope
            # already keep that scope's statistics (`_keep_saved`): an import leaves a file.
            try:
                files.committed(None, stamp, overlay.digest, None)
            except OSError as exc:
                logger.warning("search index %s: cannot describe it: %s", directory, exc)
        return cls(directory, index, schema, overlay, files, stamp)

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
        self._require_current()
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

    def close(self) -> None:
        """Commit the waiting documents, finish background merges and release the writer
        lock; the index is then unusable. Documents that fail to commit stay with their
        writes' journal intents, which recovery settles on the next open."""
        try:
            self.commit()
        except StorageError as exc:
            logger.error(
                "%s; %d document(s) left uncommitted: the next open indexes them again",
                exc.message,
                len(self._waiting),
            )
        with self._write_lock:
            if self._closed:
                return
            with self._stats_lock:
                self._flush_stats(force=True)
            self._closed = True
            with self._waiting_lock:
                timer, self._timer = self._timer, None
            if timer is not None:  # a failed commit's retry
                timer.cancel()
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
