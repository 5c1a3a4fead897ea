"""Reading memories back: lists, full text, user Cypher, recall (the pipeline is
`memoryd.recall`), and counting recalls into the graph, the files and trigger_stats."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.domain.core import ServiceCore
from memoryd.domain.writes import search_doc
from memoryd.errors import (
    InvalidInput,
    MemorydError,
    PolicyDenied,
    StorageError,
)
from memoryd.extraction.pipeline import load_hyponyms, load_lexicon, load_places
from memoryd.governance.gate import grant_hint
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
from memoryd.native import fewer_collections
from memoryd.recall import RecallPipeline, conversation
from memoryd.recall.granted import ScopeView
from memoryd.recall.pipeline import RecallOutcome
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
        """Newest first. A sensitive scope is listed only under a grant (its titles come
        from the granted view); an unfiltered list leaves ungranted sensitive scopes out."""
        scope_hash = self.scope_hash_of(scope)
        if scope_hash is not None:
            self._require_granted(scope_hash)
        rows = self.graph.list_memories(
            scope_hash=scope_hash,
            type=type,
            decay_state=state,
            limit=limit,
            offset=offset,
        )
        rows, _ = self.gate.partition(rows)
        by_scope: dict[str, list[int]] = {}
        for at, row in enumerate(rows):
            if self.gate.path_of(row.scope_hash) is not None:
                by_scope.setdefault(row.scope_hash, []).append(at)
        for sensitive_hash, places in by_scope.items():
            view = self.granted_view(sensitive_hash)
            held = view.summaries([rows[at].slug for at in places]) if view else {}
            for at in places:
                rows[at] = held.get(rows[at].slug, rows[at])
            self.gate.allowed(sensitive_hash, [rows[at].slug for at in places], "list")
        return rows

    def count_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
    ) -> int:
        """How many memories `list_memories` would list without a limit."""
        scope_hash = self.scope_hash_of(scope)
        if scope_hash is not None:
            self._require_granted(scope_hash)
        total = self.graph.count_memories(scope_hash=scope_hash, type=type, decay_state=state)
        if scope_hash is None:
            for hidden in self.gate.sensitive_scopes():
                if not self.gate.readable(hidden):
                    total -= self.graph.count_memories(
                        scope_hash=hidden, type=type, decay_state=state
                    )
        return total

    def _require_granted(self, scope_hash: str) -> None:
        """A read aimed at a sensitive scope needs a grant (denied and audited without)."""
        path = self.gate.path_of(scope_hash)
        if path is None or self.gate.readable(scope_hash):
            return
        self.gate.denied(scope_hash, [], "list")
        raise PolicyDenied(
            f"{path} is a sensitive scope: listing it needs a grant", hint=grant_hint(path)
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
        scope_hash = self.scope_hash_of(scope)
        if self._matcher is None:  # the process's first recall, or the first after entity writes
            self._load_recall_tables()
        sensitive = self.gate.sensitive_scopes()
        notes = [] if self.vectors_absent is None else [f"no vector stage: {self.vectors_absent}"]

        def run(view: ScopeView | None, over: str | None) -> RecallOutcome:
            pipeline = RecallPipeline(
                index=self.index if view is None else view.index,
                graph=self.graph if view is None else view.graph,
                matcher=self._entity_matcher if view is None else view.matcher,
                config=self.recall_config,
                # Vectors are stored on disk: a sensitive scope has none.
                vector_stage=self.vector_stage if view is None else None,
                scope_names=self.scope_names,
            )
            return pipeline.run(
                query, scope_hash=over, types=types, k=k, include_forgotten=include_forgotten
            )

        if scope_hash is not None and scope_hash in sensitive:
            view = self.granted_view(scope_hash)
            if view is None:
                count = self.graph.count_memories(scope_hash=scope_hash)
                hidden = self.gate.whole_scope_hidden(scope_hash, count, "recall")
                return RecallResult(query=query, hits=[], notes=notes, hidden=[hidden])
            outcome = run(view, scope_hash)
            return self._granted_result(query, outcome, notes)
        outcome = run(None, scope_hash)
        hits, left = self.gate.partition(outcome.hits, keep_granted=False)
        denied = {h: slugs for h, slugs in left.items() if not self.gate.readable(h)}
        if track and hits and not self.read_only:
            self._track_recalls([(hits, query)])
        entities, stages = list(outcome.entities), list(outcome.stages)
        views = [] if scope_hash else [v for h in sensitive if (v := self.granted_view(h))]
        for view in views:
            granted = self._granted_result(query, run(view, view.scope_hash), [])
            hits.extend(granted.hits)
            entities.extend(e for e in granted.entities if e not in entities)
            stages.extend(s for s in granted.stages if s not in stages)
        if views:
            hits.sort(key=lambda h: h.score, reverse=True)
        return RecallResult(
            query=query,
            hits=hits[:k],
            entities=entities,
            stages=stages,
            notes=notes,
            hidden=self.gate.hidden(denied, "recall"),
        )

    def _granted_result(self, query: str, outcome: RecallOutcome, notes: list[str]) -> RecallResult:
        """A recall answered by a granted scope's view: audited as an allowed read, its hits
        marked sensitive (inject never shows them) and not counted (the counts live in the
        memory files, which only the encrypted writer may rewrite)."""
        hits = [hit.model_copy(update={"sensitive": True}) for hit in outcome.hits]
        if hits:
            self.gate.allowed(hits[0].scope_hash, [h.slug for h in hits], "recall")
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

    def prepare_recall(self, scope_hashes: Sequence[str] = ()) -> None:
        """Load the data every recall reads (the kinds of everyday things, `load_hyponyms`)
        now, so the first recall a daemon or reader answers is not the slow one; from now on
        a grant builds its scope's in-memory view at once, for the same reason. The
        statistics of `scope_hashes` are loaded too (a reader: its daemon's scopes, whose
        loading its first recall there would otherwise spend)."""
        with fewer_collections():
            load_hyponyms()
            load_lexicon()  # and the names entity matchers are built with (the graph's, a view's)
            load_places()
        self.index.load_statistics(scope_hashes, is_turn=conversation.is_turn)
        self.views_eager = True

    def _load_recall_tables(self) -> None:
        """Build the entity matcher (and load the kinds of things) with the collector held
        off (`fewer_collections`): they are kept for the process, and a full collection in the
        middle of their loading walked every object the process holds (bench/RESULTS.md)."""
        with fewer_collections():
            self._entity_matcher()
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
        self.gate.flush()  # the sensitive scopes' read events, batched the same way
        self.expire_grants()  # on the daemon's tick: ended grants take their views along
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
            path = self._file_of(slug, row)
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
            path = self._file_of(slug, row)
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
