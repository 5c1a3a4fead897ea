"""The service's shared state and the plumbing every job uses: the stores, scopes, reads,
per-file locks, the entity cache, and the DURA input several jobs read. The write path (the
write journal's intents, preparing and writing a batch, rewriting a memory everywhere it
lives) is its base class, `domain.writes.Writes`.

The order of a write is fixed: vault file (the source of truth) → graph → search index →
audit line. If a later step fails, the earlier ones are undone, so nothing is left
half-written. A crash cannot undo anything, so each write first records an intent in the
journal (`memoryd.journal`) and `recover` (`ingest`) settles the writes a crash cut short.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.audit import AuditEvent, AuditLog
from memoryd.config import SupersedeSettings
from memoryd.domain.writes import Writes, search_doc
from memoryd.enrichment import EnrichmentPolicy, content_fingerprint
from memoryd.errors import (
    BrokenMemoryFile,
    InvalidInput,
    MemorydError,
    NotFound,
    PolicyDenied,
    StorageError,
)
from memoryd.extraction.apply import ENTITY_TYPES, apply_extraction, merge_extractions
from memoryd.extraction.linking import KnownEntity
from memoryd.extraction.pipeline import Extractor
from memoryd.governance.decay import DecayPolicy
from memoryd.governance.gate import Gate
from memoryd.governance.promotions import Review, ReviewPolicy
from memoryd.governance.store import GovernanceStore, Proposed
from memoryd.governance.stores import Stores
from memoryd.governance.supersede_kept import MentionLists
from memoryd.graph.sandbox import CypherLimits, CypherSandbox
from memoryd.graph.store import GraphStore, MemoryRow
from memoryd.journal import IntentItem, Journal
from memoryd.llm.base import LLMProvider
from memoryd.memfile import memory_lock, split_summary
from memoryd.models import (
    DecayState,
    Extraction,
    Memory,
    MemoryDraft,
    MemoryType,
    PromotionProposal,
    ScopeInfo,
    SearchHit,
    SearchHits,
    check_query,
    utcnow,
)
from memoryd.recall import EntityMatcher, RecallConfig, VectorStage
from memoryd.recall.entities import build_matcher
from memoryd.recall.granted import Held, ScopeView, ScopeViews
from memoryd.redact.fields import clean_facts, clean_meta, clean_proposal
from memoryd.scope import resolve_scope, scope_hash_of_path
from memoryd.search.index import SearchIndex
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.keys import KeyStore
from memoryd.sensitive.snapshot import Fingerprint
from memoryd.vault import Vault, rebased

if TYPE_CHECKING:
    from memoryd.governance import analyze, status_lines
    from memoryd.models import SupersedeDecision
    from memoryd.recall.vectors import DenseIndex

logger = logging.getLogger(__name__)

BULK_BATCH = 5000
PROGRESS_STEP = 250
"""A long job (reindex, sync export) calls `progress(done, total)` every this many files."""
FILE_LOCK_TIMEOUT_S = 5.0
"""How long the daemon waits for a memory file the hook is rewriting (milliseconds, usually)."""
GraphFactory = Callable[[Path], GraphStore]
SUPERSEDE_BULK_LIMIT = 2000
"""An import of more long-term memories than this is not judged as it lands: judging costs as
much as the rest of a big batch's write (the rules on each memory's pairs; bench/RESULTS.md)."""
CREATING_EVENTS = ("record", "capture", "adopt", "import")
"""The audit events that bring a memory into the stores (`import`: a sync import wrote it);
`audit verify` wants one for each."""


class ServiceCore(Writes):
    """What every job of `MemoryService` shares (construct it with `wiring.open_service`)."""

    def __init__(
        self,
        *,
        home: Path,
        vault: Vault,
        graph: GraphStore,
        index: SearchIndex,
        audit: AuditLog,
        governance: GovernanceStore,
        graph_factory: GraphFactory,
        actor: str = "cli",
        on_close: Callable[[], None] | None = None,
        extractor: Extractor | None = None,
        llm: LLMProvider | None = None,
        read_only: bool = False,
        enrichment: EnrichmentPolicy | None = None,
        cypher_limits: CypherLimits | None = None,
        review: ReviewPolicy | None = None,
    ) -> None:
        self.home = home
        self.read_only = read_only
        self.vault = vault
        self.graph = graph
        self.index = index
        self.audit = audit
        self.governance = governance
        self.journal = Journal(home)
        """Intents of writes under way; `recover` settles those a crash left."""
        self.actor = actor
        self._graph_factory = graph_factory
        self._on_close = on_close
        self.extractor = extractor
        self.llm = llm
        self.enrichment = enrichment or EnrichmentPolicy()
        self.keys = KeyStore(home)
        """The sensitive scopes' keys (wiring shares the vault cipher's)."""
        self.llm_allow_sensitive = False
        """Config `llm.allow_sensitive`: only then may a sensitive memory reach the LLM."""
        self.vector_stage: VectorStage | None = None
        self.vectors: DenseIndex | None = None
        """The vector stage's store and model (`wiring.open_vectors`), when it runs."""
        self.embeds_in_background = False
        """Whether a worker embeds new memories (the daemon's): then reindex leaves it to it."""
        self.vectors_absent: str | None = None
        """Why recall runs without the vector stage (`recall.vectors`, the extra missing)."""
        self.recall_config = RecallConfig()
        """The recall stages that run (`DEFAULT_STAGES`) and the relevance threshold."""
        self._matcher: EntityMatcher | None = None
        self._recall_pending: dict[str, tuple[int, datetime]] = {}
        """Recalls counted here but not yet in the graph: slug → (how many, last at)."""
        self._triggers_pending: Counter[tuple[str, str | None, date]] = Counter()
        """Trigger hits not yet in trigger_stats: (trigger, scope_hash, day) → hits."""
        self._recall_dirty: dict[str, tuple[int, datetime, DecayState]] = {}
        """Counts in the graph but not yet in the memory files."""
        self._merges: dict[str, str] | None = None
        self.entities_version = 0
        """Bumped whenever the entities may have changed (recall readers rebuild their matcher)."""
        self.index_epoch = 0
        """Bumped when `index` is replaced by another SearchIndex (reindex)."""
        self.cypher_limits = cypher_limits or CypherLimits()
        self.supersede_settings = SupersedeSettings()
        """Supersede judging's tiers and limits (config `[supersede]`)."""
        self.llm_judge_inline = True
        """Ask the LLM judge as a memory is recorded. The daemon turns it off: its writer
        must not wait on the LLM, so recorded (and enriched) slugs queue in governance.db's
        `judge_queue` and its worker judges them off the writer, after a restart too."""
        self.status_speakers: dict[str, set[str]] = {}
        """Per scope, the judged memories whose body has a status word ("Superseded by"):
        read once per scope by one scan, then kept up by `judge_written`; dropped by the
        writes that change bodies wholesale (sync import, merge, reindex)."""
        self.status_refs: dict[str, tuple[set[str], dict[str, tuple[status_lines.Ref, ...]]]] = {}
        """Per scope, the references of its speakers' status lines, good while the scope's
        set in `status_speakers` is the one they were read for."""
        self.judging_skipped: tuple[int, str] = (0, "")
        """Writes judging left partly unjudged since opening, and the last (`doctor` says)."""
        self.judged_mentions = MentionLists()
        """What judging read of the graph, kept up by the writes (`supersede_kept.MentionLists`)."""
        self.clock: Callable[[], datetime] = utcnow
        """Now, for recall tracking and governance (decay, schedules): tests move it."""
        self.decay_policy = DecayPolicy()
        """The decay thresholds (config `[decay]`)."""
        self._sandbox: CypherSandbox | None = None
        self._sandbox_lock = threading.Lock()
        self._scope_names: dict[str, tuple[str, ...]] = {}
        """scope hash → the names its project goes by (`Recalling.scope_names`)."""
        self.review = Review(
            governance,
            review or ReviewPolicy(),
            write=self._record_in_scope,
            exists=self._memory_exists,
            audit=lambda event: self.audit.append_many([event]),
        )
        """The promotions queue and its decisions (`governance.promotions`)."""
        self.gate = Gate(
            home,
            scopes=vault.scopes,
            audit=None if read_only else (lambda events: self.audit.append_many(events)),
            clock=lambda: self.clock(),
            actor=lambda: self.actor,
        )
        """Which scopes are sensitive and granted; every read of one passes it."""
        self.views = ScopeViews(
            lambda h, view: self.scope_held(h, view),
            lambda h: self.scope_stamp(h),
            graph.max_fanout,
            save=lambda view: self.save_view(view),
        )
        """The granted scopes' in-memory index and entity view (`domain.guarding`)."""
        self.views_eager = False
        """Build a scope's view as its grant starts (the daemon), not on first read."""

    granted_view: Callable[[str], ScopeView | None]
    expire_grants: Callable[[], object]
    scope_held: Callable[[str, ScopeView | None], tuple[list[Held], bool] | None]
    scope_stamp: Callable[[str], object]
    save_view: Callable[[ScopeView], None]
    save_sealed: Callable[[str, Sequence[tuple[Memory, Fingerprint]]], None]
    rekey_snapshot: Callable[[str, Sequence[tuple[Path, bytes, Fingerprint]], ScopeKey], None]
    """Provided by `domain.guarding.Guarding`."""

    judge_supersedes: Callable[..., list[SupersedeDecision]]
    judge_written: Callable[..., list[tuple[str, str]]]
    judge_unwritten: Callable[[Memory], tuple[Memory, dict[str, Any]] | None]
    """Provided by `domain.superseding.Superseding`: writes judge what they may replace."""
    profile_rewrite: Callable[..., Any]
    profile_report: Callable[..., Any]
    """Provided by `domain.profiling.Profiling`: the weekly and monthly profile jobs."""
    send_scheduled_digest: Callable[[], None]
    """Provided by `domain.digesting.Digesting`: the weekly digest job."""

    def _require_writable(self, action: str) -> None:
        """Refuse a write before any store is touched: a read-only service (a notebook with
        no daemon) must leave the data dir exactly as it found it."""
        if self.read_only:
            raise PolicyDenied(
                f"cannot {action}: this memoryd service is read-only",
                hint="start `memoryd serve` and write through it (or the CLI)",
            )

    # -- scopes ---------------------------------------------------------------------------
    def scope_show(self, path: Path | str | None = None) -> ScopeInfo:
        """The scope a directory belongs to (git toplevel, else the directory itself)."""
        info = resolve_scope(path)
        stored = self.vault.read_scope(info.scope_hash)
        if stored is not None:
            info.sensitive = stored.sensitive
        return info

    def _ensure_scope(self, info: ScopeInfo) -> None:
        self.vault.write_scope(info)  # a read, not a write, when the graph holds it as it is
        query = "MATCH (s:Scope {hash: $hash}) RETURN s.path, s.sensitive, s.aliases"
        held = self.graph.cypher(query, {"hash": info.scope_hash}, limit=2).rows
        if held != [[info.path, info.sensitive, list(info.aliases)]]:
            self.graph.upsert_scope(info.scope_hash, info.path, info.sensitive, info.aliases)

    def scope_hash_of(self, scope: Path | str | None) -> str | None:
        """A scope given as a path, or as a 12-hex scope hash already; None means all scopes."""
        if scope is None:
            return None
        text = str(scope)
        if re.fullmatch(r"[0-9a-f]{12}", text) and not Path(text).exists():
            return text
        return scope_hash_of_path(scope)

    def _resync_many(self, memories: dict[str, Memory | None]) -> None:
        """The graph and the search index hold each memory for its slug (None: nothing), in
        one write of each store: recovery settles a whole intent at once."""
        gone = [slug for slug, memory in memories.items() if memory is None]
        kept = [memory for memory in memories.values() if memory is not None]
        if gone:
            self.index.delete(gone)
            self.graph.delete_memories(gone)
        if kept:
            self.graph.upsert_memories(kept)
            self.index.upsert([search_doc(memory) for memory in kept])

    # -- reads ----------------------------------------------------------------------------
    def get(self, slug: str) -> Memory:
        """The memory with this slug, read from its vault file (the source of truth); one of
        a sensitive scope only under a grant (from the scope's view, audited)."""
        row = self.graph.get_memory(slug)
        path = self._file_of(slug, row)
        if path is None:
            raise NotFound(f"no memory with slug {slug!r}", hint="`memoryd list` shows the slugs")
        scope_hash = row.scope_hash if row is not None else path.parent.parent.name
        if self.gate.path_of(scope_hash) is not None:
            self.gate.require(scope_hash, slug, "get")  # denied without a grant
            view = self.granted_view(scope_hash)
            held = view.memories.get(slug) if view is not None else None
            if held is None:
                raise NotFound(f"no memory with slug {slug!r} in its granted scope")
            return held.model_copy(deep=True)
        memory = self.vault.read(path)
        if memory.meta.slug != slug:
            raise BrokenMemoryFile(
                f"{path}: its frontmatter says slug {memory.meta.slug!r}, expected {slug!r}"
            )
        return memory

    def _in_home(self, recorded: str) -> Path:
        """A file path the graph recorded, in this home (`vault.rebased`): a writable open
        rebases a moved home's graph, but a read-only service (a notebook) cannot."""
        return Path(rebased(recorded, self.vault.scopes_dir))

    def _file_of(self, slug: str, row: MemoryRow | None) -> Path | None:
        """The memory's file: where the graph row says, in this home, else found by slug."""
        if row is not None and row.path:
            return self._in_home(row.path)
        return self.vault.find(slug)

    def _load(self, slug: str) -> Memory:
        """The memory with this slug from its vault file, with no gate: for the service's own
        work (rewrites, enrichment, judging), which never hands the text to a caller."""
        row = self.graph.get_memory(slug)
        path = self._file_of(slug, row)
        if path is None:
            raise NotFound(f"no memory with slug {slug!r}", hint="`memoryd list` shows the slugs")
        memory = self.vault.read(path)
        if memory.meta.slug != slug:
            raise BrokenMemoryFile(
                f"{path}: its frontmatter says slug {memory.meta.slug!r}, expected {slug!r}"
            )
        return memory

    def search(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
    ) -> SearchHits:
        """BM25 full text over title, body, tags and triggers (Chinese jieba-segmented).

        A sensitive scope is searched in its in-memory view under a grant; without one its
        hits are left out and counted in `hidden`."""
        check_query(query)
        if k < 1:
            raise InvalidInput(f"k must be at least 1 (got {k})")
        scope_hash = self.scope_hash_of(scope)
        sensitive = self.gate.sensitive_scopes()

        def run(index: SearchIndex, scope_hashes: list[str] | None, limit: int) -> list[SearchHit]:
            return index.search(
                query,
                scope_hashes=scope_hashes,
                types=types,
                include_forgotten=include_forgotten,
                limit=limit,
            )

        if scope_hash is not None and scope_hash in sensitive:
            view = self.granted_view(scope_hash)
            if view is None:
                count = self.graph.count_memories(scope_hash=scope_hash)
                return SearchHits([], [self.gate.whole_scope_hidden(scope_hash, count, "search")])
            hits = run(view.index, [scope_hash], k)
            if hits:
                self.gate.allowed(scope_hash, [h.slug for h in hits], "search")
            return SearchHits(hits)
        scopes = [scope_hash] if scope_hash else None
        hits = run(self.index, scopes, k + 20 if sensitive else k)
        # On disk a sensitive scope holds no text: its hits come from a granted view or none.
        hits, left = self.gate.partition(hits, keep_granted=False)
        views = [] if scope_hash else [v for h in sensitive if (v := self.granted_view(h))]
        for view in views:
            found = run(view.index, [view.scope_hash], k)
            if found:
                self.gate.allowed(view.scope_hash, [h.slug for h in found], "search")
            hits.extend(found)
        if views:
            hits.sort(key=lambda h: h.score, reverse=True)
        denied = {h: slugs for h, slugs in left.items() if not self.gate.readable(h)}
        return SearchHits(hits[:k], self.gate.hidden(denied, "search"))

    # -- recall ---------------------------------------------------------------------------
    def forget_entities(self) -> None:
        """Drop what is cached about entities: the next recall rebuilds it from the graph."""
        self._matcher = None
        self.entities_version += 1

    def _entity_matcher(self) -> EntityMatcher:
        """Built from the graph's entities once, rebuilt after writes that touch entities."""
        matcher = self._matcher
        if matcher is None:
            matcher = build_matcher(self.graph.entity_catalogue())
            self._matcher = matcher
        return matcher

    def _merged_into(self) -> dict[str, str]:
        """dropped entity id → the id it was merged into (following chains)."""
        merges = self._merges
        if merges is None:
            merges = {}
            for rec in self.audit.scan(["entity_merge"]):  # streamed: 100k+ lines
                drop = json.loads(rec["details"]).get("drop")
                if drop and rec["target_id"]:
                    merges[drop] = rec["target_id"]
            for drop in list(merges):
                seen = {drop}
                while merges[drop] in merges and merges[drop] not in seen:
                    seen.add(merges[drop])
                    merges[drop] = merges[merges[drop]]
            self._merges = merges
        return merges

    def _known_entities(self) -> list[KnownEntity]:
        """The graph's entities for extraction, by id: the graph returns them in its storage
        order, which is history, and the LLM stage reads this list as it comes."""
        matcher = self._entity_matcher()
        return [
            KnownEntity(id=e.id, name=e.name, type=e.type, aliases=e.aliases)
            for e in sorted(matcher.entities.values(), key=lambda e: e.id)
            if e.type in ENTITY_TYPES
        ]

    def _apply_entity_event(self, item: IntentItem) -> None:
        """Make the graph hold an entity event; nothing when it already does."""
        target, details = item.slug, item.details
        if self.graph.get_entity(target) is None:
            return  # deleted, or merged away since
        if item.event_type == "entity_alias":
            self.graph.add_entity_aliases(target, [str(details["alias"])])
        elif item.event_type == "entity_merge":
            if self.graph.get_entity(str(details["drop"])) is not None:
                self.graph.merge_entities(target, str(details["drop"]))
        elif item.event_type == "entity_delete":
            self.graph.delete_entity(target)
        else:
            raise StorageError(f"the write journal names an unknown entity event {item.event_type}")

    @contextlib.contextmanager
    def _file_lock(self, slug: str) -> Iterator[None]:
        """The memory file's lock, shared with the capture hook, as a bounded wait."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(memory_lock(self.home, slug, timeout_s=FILE_LOCK_TIMEOUT_S))
            except OSError as exc:  # TimeoutError included
                raise StorageError(
                    f"cannot lock the memory file of {slug}: {exc}",
                    hint="another process holds it; the work is retried later",
                ) from exc
            yield

    def governance_stores(self) -> Stores:
        """The stores as they are now, lent to a governance module for one operation."""
        return Stores(
            home=self.home,
            vault=self.vault,
            graph=self.graph,
            index=self.index,
            audit=self.audit,
            journal=self.journal,
            actor=self.actor,
            lock=self._file_lock,
            lock_timeout_s=FILE_LOCK_TIMEOUT_S,
            search_doc=search_doc,
        )

    def _forgotten_path(self, memory: Memory) -> Path:
        """Where `archive` moves a memory's file."""
        from memoryd.vault import FORGOTTEN_DIR

        if memory.path is None:
            raise StorageError(f"memory {memory.slug} has no file path")
        return self.vault.scope_dir(memory.meta.scope_hash) / FORGOTTEN_DIR / memory.path.name

    def _extract(
        self,
        memories: Sequence[Memory],
        known: list[KnownEntity] | None = None,
        after: threading.Event | None = None,
        prepared: bool = False,
    ) -> None:
        """Fill observations and relations from the text (spaCy rules, then the LLM if set:
        a sensitive memory's if `allow_sensitive`) against `known` (default: the graph's now);
        `after`: `Extractor.extract_many`; `prepared`: `_prepare`'s, only additions cleaned."""
        if self.extractor is None or not memories:
            return
        known = self._known_entities() if known is None else known
        texts = [(memory.meta.title, memory.body) for memory in memories]
        sealed = any(memory.sensitive for memory in memories)  # not sent to the worker
        proposed = self.extractor.extract_many(texts, known=known, share=not sealed, after=after)
        for memory, found in zip(memories, proposed, strict=True):
            if self.llm is not None and (not memory.sensitive or self.llm_allow_sensitive):
                from memoryd.llm.extract import extract_with_llm

                try:
                    refined = extract_with_llm(
                        self.llm,
                        f"{memory.meta.title}\n\n{memory.body}",
                        known_entities=[k.name for k in known],
                        spacy_hint=found,
                    )
                    found = merge_extractions(found, refined)
                except MemorydError as exc:
                    logger.warning("LLM extraction failed for %s: %s", memory.slug, exc)
            apply_extraction(memory, found, self._merged_into())
            if memory.meta.observations or memory.meta.relations:
                memory.meta = (clean_facts if prepared else clean_meta)(memory.meta)

    def _record_in_scope(self, draft: MemoryDraft, scope_hash: str) -> Memory:
        """Record one memory into a scope known by its hash (a promotion's), not by a path."""
        self._require_writable("record a memory")
        scope = self.vault.read_scope(scope_hash)
        if scope is None:
            raise NotFound(
                f"scope {scope_hash} has no scope.json in the vault",
                hint="run `memoryd reindex`, or record the memory from its project directory",
            )
        memory = self._prepare(draft, scope, utcnow())
        self._refuse_duplicates([memory], [draft])
        self._check_links(memory)
        self._extract([memory], prepared=True)
        self._ensure_scope(scope)
        self._write_batch([memory], sync_each=True)
        self._judge_written([memory], use_llm=True)  # a promotion writes a long-term memory
        return memory

    def _memory_exists(self, slug: str) -> bool:
        """In the graph and on disk: what a PROMOTED_FROM or SUPERSEDES edge can point at."""
        row = self.graph.get_memory(slug)
        if row is None:
            return False
        path = self._file_of(slug, row)
        return (path is not None and path.is_file()) or self.vault.find(slug) is not None

    def _judge_written(self, memories: Sequence[Memory], *, use_llm: bool) -> list[tuple[str, str]]:
        """Judge new long-term memories against the older ones they may replace
        (`Superseding.judge_written`): the (newer, older) supersedes written."""
        return self.judge_written(memories, use_llm=use_llm)

    def _dura_input(
        self, memory: Memory, scope: ScopeInfo | None, rules: Extraction
    ) -> tuple[analyze.SessionText | None, tuple[analyze.Candidate, ...]]:
        """What DURA scoring reads: the session without its summary, the entities extracted
        from it, and the scope's long-term memories that name them (supersede candidates).
        None when `analyze.refusal` says the memory may not be scored."""
        from memoryd.governance.analyze import Candidate, SessionText, refusal

        if refusal(memory, scope) is not None:
            return None, ()
        entities = tuple(dict.fromkeys(e.name for e in rules.entities))
        session = SessionText(
            slug=memory.slug,
            title=memory.meta.title,
            text=split_summary(memory.body)[1],
            fingerprint=content_fingerprint(memory),
            scope_hash=memory.meta.scope_hash,
            entities=entities,
        )
        query = " ".join(entities[:6])
        if not query.strip():
            return session, ()
        hits = self.search(
            query,
            scope=memory.meta.scope_hash,
            types=[t for t in MemoryType if t.long_term],
            k=8,
        )
        return session, tuple(Candidate(h.slug, h.title) for h in hits if h.slug != memory.slug)

    def _propose(self, proposal: PromotionProposal) -> tuple[int, Proposed] | None:
        """Queue the promotion when the score reaches the threshold, after the score is in
        the file; a `propose` audit event names it. None: below the threshold."""
        proposal = clean_proposal(proposal)  # the LLM's text, kept in governance.db
        queued = self.review.propose(proposal)
        if queued is None:
            return None
        promotion_id, what = queued
        if what != "decided":
            self.audit.append_many(
                [
                    AuditEvent(
                        actor=self.actor,
                        event_type="propose",
                        scope_hash=proposal.scope_hash,
                        target_id=proposal.source_slug,
                        details={
                            "promotion": promotion_id,
                            "queue": what,
                            "mean": round(proposal.dura.mean, 3),
                            "by": proposal.dura.by,
                        },
                    )
                ]
            )
        return queued


def copy_message(copy: Path, original: Path, slug: str) -> str:
    """What to say about a second file holding a memory's slug, and what to do about it."""
    return (
        f"skipped {copy}: it holds slug {slug}, which {original} holds (a copied file); "
        f"delete {copy.name}, or give it its own slug and a file name to match"
    )


def iter_batches(items: list[Memory], size: int) -> Iterable[list[Memory]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
