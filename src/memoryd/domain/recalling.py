"""Reading memories back: lists, full text, user Cypher, recall (the pipeline is
`memoryd.recall`), and counting recalls into the graph, the files and trigger_stats."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.domain.core import (
    ServiceCore,
    search_doc,
)
from memoryd.errors import (
    InvalidInput,
    MemorydError,
    StorageError,
)
from memoryd.extraction.pipeline import load_hyponyms
from memoryd.graph.sandbox import CypherSandbox
from memoryd.graph.store import (
    CypherResult,
    EntityRow,
)
from memoryd.models import (
    DecayState,
    MemorySummary,
    MemoryType,
    RecallHit,
    RecallResult,
    check_query,
)
from memoryd.recall import RecallPipeline
from memoryd.scope import project_names
from memoryd.search.index import SearchIndex

if TYPE_CHECKING:
    from memoryd.recall.vectors import DenseIndex, SyncReport

logger = logging.getLogger(__name__)


class Recalling(ServiceCore):
    """Reads, recall, and the recall counts they leave behind."""

    def list_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]:
        return self.graph.list_memories(
            scope_hash=self.scope_hash_of(scope),
            type=type,
            decay_state=state,
            limit=limit,
            offset=offset,
        )

    def count_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
    ) -> int:
        """How many memories `list_memories` would list without a limit."""
        return self.graph.count_memories(
            scope_hash=self.scope_hash_of(scope), type=type, decay_state=state
        )

    def entities(
        self, *, type: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[EntityRow]:
        return self.graph.list_entities(type=type, query=query, limit=limit)

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """A user's read-only Cypher, run in the sandbox (`memoryd.graph.sandbox`): a process
        with its own memory cap over a copy of the graph, so no query can take the writer's
        memory or change the engine's settings. memoryd's own queries use `graph.cypher`."""
        return self.cypher_sandbox().run(
            self.graph, query, params, limit=limit, timeout_ms=timeout_ms
        )

    def cypher_sandbox(self) -> CypherSandbox:
        """The sandbox for user Cypher, made on first use (a worker starts on first query)."""
        with self._sandbox_lock:
            if self._sandbox is None:
                # A read-only service (a notebook) leaves the data dir as it found it.
                workdir = None if self.read_only else self.home / "tmp"
                self._sandbox = CypherSandbox(workdir, self.cypher_limits)
            return self._sandbox

    def reopen_index(self) -> None:
        """Open the search index afresh (a recall reader after the daemon's reindex)."""
        directory = self.index.directory
        self.index.close()
        self.index = SearchIndex.open(directory)
        self.index_epoch += 1

    def recall(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
        track: bool = True,
    ) -> RecallResult:
        """What memoryd knows about `query`: BM25 and entity traversal fused, then adjusted.

        Each hit explains itself (stages, matched terms, graph paths). With `track`, hits
        count as recalls: recall_count, last_recalled_at, trigger_stats, and a dim or
        soft-forgotten memory comes back to alive. A read-only service never tracks.
        """
        check_query(query)
        if k < 1:
            raise InvalidInput(f"k must be at least 1 (got {k})")
        pipeline = RecallPipeline(
            index=self.index,
            graph=self.graph,
            matcher=self._entity_matcher,
            config=self.recall_config,
            vector_stage=self.vector_stage,
            scope_names=self.scope_names,
        )
        outcome = pipeline.run(
            query,
            scope_hash=self.scope_hash_of(scope),
            types=types,
            k=k,
            include_forgotten=include_forgotten,
        )
        hits = outcome.hits
        if track and hits and not self.read_only:
            self._track_recalls([(hits, query)])
        notes = [] if self.vectors_absent is None else [f"no vector stage: {self.vectors_absent}"]
        return RecallResult(
            query=query, hits=hits, entities=outcome.entities, stages=outcome.stages, notes=notes
        )

    def scope_names(self, scope_hash: str) -> tuple[str, ...]:
        """The names a scope's project goes by (`scope.project_names`): every memory there is
        about them, so recall weighs them as held by all (`SearchIndex.local_bm25`). A scope's
        path never changes under its hash, so they are read from its scope.json once."""
        names = self._scope_names.get(scope_hash)
        if names is None:
            info = self.vault.read_scope(scope_hash)
            names = () if info is None else tuple(project_names(info))
            if info is not None:
                self._scope_names[scope_hash] = names
        return names

    def attach_vectors(self, dense: DenseIndex) -> None:
        """Run the vector stage over `dense` (`wiring.open_vectors`)."""
        self.vectors = dense
        self.vector_stage = dense.stage
        self.vectors_absent = None

    def embed_pending(self, limit: int | None = None) -> SyncReport | None:
        """Embed the memories whose vectors are missing or stale, at most `limit` (None:
        all): the daemon's background worker calls it in small rounds, never a hook."""
        if self.vectors is None or self.read_only:
            return None
        from memoryd.recall.vectors import BATCH

        return self.vectors.catch_up(self.index, BATCH if limit is None else limit)

    @staticmethod
    def prepare_recall() -> None:
        """Load the data every recall reads (the kinds of everyday things, `load_hyponyms`)
        now, so the first recall a daemon or reader answers is not the slow one."""
        load_hyponyms()

    def _track_recalls(self, recalls: Sequence[tuple[Sequence[RecallHit], str]]) -> None:
        """Count recalls (hits, query) in memory until `flush_recall_counts`: a graph write
        and a SQLite commit per recall would cost more than the recall. A decayed memory
        that is recalled comes back to alive at once. Memories archived since they were
        ranked are dropped by the flush."""
        now = self.clock()
        revived: list[str] = []
        for hits, query in recalls:
            lowered = query.lower()
            for hit in hits:
                before = self._recall_pending.get(hit.slug, (0, now))[0]
                self._recall_pending[hit.slug] = (before + 1, now)
                for trigger in hit.triggers:
                    if trigger.lower() in lowered:
                        self._triggers_pending[(trigger, hit.scope_hash, now.date())] += 1
                if hit.decay_state is not DecayState.ALIVE:
                    revived.append(hit.slug)
        if revived:
            # Only memories still in the graph: an archived one must not come back.
            self._reindex_search(list(self._write_recall_counts(revived)))

    # -- for the daemon: reads on many threads, their writes on one ----------------------
    def count_recalls(self, results: Sequence[RecallResult]) -> None:
        """Count recalls made with `track=False` as `recall` would have counted them.

        The daemon ranks recalls concurrently on reader threads and counts them afterwards, in
        batches, on its single writer thread; each recall counts on top of the ones before.
        """
        self._require_writable("count recalls")
        self._track_recalls([(r.hits, r.query) for r in results if r.hits])

    def flush_recall_counts(self) -> int:
        """Add the recalls counted since the last flush to the graph and their trigger hits
        to trigger_stats; the files follow in `flush_recall_stats`.
        Returns how many memories were updated."""
        triggers, self._triggers_pending = self._triggers_pending, Counter()
        self.governance.add_trigger_hits(triggers)
        return len(self._write_recall_counts(None))

    def _write_recall_counts(self, slugs: Sequence[str] | None) -> dict[str, int]:
        """The pending counts of `slugs` (None: all) into the graph; the new counts of the
        memories it still holds."""
        if slugs is None:
            batch, self._recall_pending = self._recall_pending, {}
        else:
            batch = {s: self._recall_pending.pop(s) for s in slugs if s in self._recall_pending}
        counted = self.graph.record_recalls(batch)
        for slug, count in counted.items():
            self._recall_dirty[slug] = (count, batch[slug][1], DecayState.ALIVE)
        return counted

    def _reindex_search(self, slugs: Sequence[str]) -> None:
        """Refresh the search index entries of memories whose decay state changed."""
        docs = []
        rows = self.graph.memory_rows(slugs)
        for slug in slugs:
            row = rows.get(slug)
            path = Path(row.path) if row is not None and row.path else self.vault.find(slug)
            if path is None:
                continue
            try:
                memory = self.vault.read(path)
            except MemorydError as exc:  # recall must not fail on one hand-broken file
                logger.warning("search entry of %s not refreshed: %s", slug, exc)
                continue
            if slug in self._recall_dirty:
                count, at, state = self._recall_dirty[slug]
                memory.meta.recall_count, memory.meta.last_recalled_at = count, at
                memory.meta.decay_state = state
            docs.append(search_doc(memory))
        self.index.upsert(docs)

    def flush_recall_stats(self, slugs: Sequence[str] | None = None) -> int:
        """Write pending recall counts into the memory files, the source of truth.

        Recall only touches the graph on the hot path; the files are rewritten here (at
        close, and by the daemon periodically) so `reindex` keeps the counts. `slugs`: only
        those memories' files, each synced (a get's count, written at once).
        """
        if slugs is None:
            self.flush_recall_counts()
            pending, self._recall_dirty = self._recall_dirty, {}
        else:
            pending = {s: self._recall_dirty.pop(s) for s in slugs if s in self._recall_dirty}
        rows = self.graph.memory_rows(list(pending)) if pending else {}
        for slug, (count, at, state) in pending.items():
            row = rows.get(slug)
            path = Path(row.path) if row is not None and row.path else self.vault.find(slug)
            if path is None:
                continue
            try:
                # Under the file lock: a re-capture of a session rewrites the same file.
                with self._file_lock(slug):
                    memory = self.vault.read(path)
                    memory.meta.recall_count = max(memory.meta.recall_count, count)
                    memory.meta.last_recalled_at = at
                    memory.meta.decay_state = state
                    self.vault.write(memory, sync=slugs is not None)
            except StorageError as exc:  # kept for the next flush
                logger.warning("recall stats of %s not saved yet: %s", slug, exc)
                self._recall_dirty.setdefault(slug, (count, at, state))
            except MemorydError as exc:
                logger.warning("recall stats not saved for %s: %s", slug, exc)
        if pending and slugs is None:
            self.vault.sync_all()
        return len(pending)
