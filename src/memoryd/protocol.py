"""`MemoryAPI`: the one service interface every surface is written against.

Two classes implement it: `MemoryService` (in this process, over the open stores) and the
daemon's client `RemoteService` (over the Unix socket). Both subclass this Protocol, so mypy
holds each of their signatures to the one written here; the CLI, the MCP server, the notebook
client, inject's context and the HTTP routes take a `MemoryAPI` and work with either.
`memoryd.open()` returns one. A method belongs here when both implementations offer it with
the same meaning; what only an open store can do (draining the inbox, enrichment, flushing
recall counts) stays on `MemoryService`.

It lives in the service layer (docs/ARCHITECTURE.md): it imports only models and store row
types, so a surface can depend on it without importing the service or the stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self

if TYPE_CHECKING:
    from memoryd.domain.sensitivity import (
        MarkReport,
        RotateReport,
        SensitiveStatus,
        UnmarkReport,
    )
    from memoryd.governance.decay import RestoreResult, SweepReport
    from memoryd.governance.digest import Digest
    from memoryd.governance.merge import DuplicatePair, MergeResult
    from memoryd.governance.profile import ProfileDiff, ProfileReport, ProfileRewrite
    from memoryd.governance.reports import SupersedeReport
    from memoryd.governance.schedule import JobStatus
    from memoryd.governance.store import ProfileChangeReport, ProfileVersion
    from memoryd.governance.supersede import SupersedeAction
    from memoryd.governance.trends import Trends
    from memoryd.graph.store import (
        CypherResult,
        EntityContext,
        EntityRow,
        RelationRow,
        SupersedeRow,
    )
    from memoryd.models import (
        AuditRecord,
        AuditVerification,
        DecayState,
        DuraAnalysis,
        EntityDeletion,
        Grant,
        GrantDuration,
        GraphFact,
        Memory,
        MemoryDraft,
        MemorySummary,
        MemoryType,
        Predicate,
        Promotion,
        PromotionStatus,
        RecallResult,
        Recorded,
        ReindexReport,
        RelationRef,
        SearchHits,
        SupersedeDecision,
    )
    from memoryd.sync.models import (
        ConflictEntry,
        ConflictStrategy,
        ExportReport,
        ImportReport,
        ResolveResult,
        SyncDiff,
    )


class MemoryAPI(Protocol):
    """Record, read, recall and edit memories and the entity graph of one data dir."""

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Release what this handle holds (stores and lock, or the daemon connection)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    # -- writes -------------------------------------------------------------------------
    def record(self, draft: MemoryDraft) -> Memory:
        """Record one memory: redacted, written to the vault, the graph and the index."""
        ...

    def record_many(self, drafts: Sequence[MemoryDraft], *, bulk: bool = True) -> list[Memory]:
        """Record many memories with batched graph and index writes (imports, benchmarks);
        `bulk`: one fsync pass for the batch."""
        ...

    def record_graph_facts(
        self,
        draft: MemoryDraft,
        *,
        entity_ids: Sequence[str],
        relations: Sequence[RelationRef] = (),
    ) -> Memory:
        """Record a memory that states these entities and relations (the MCP graph tools)."""
        ...

    def record_graph_facts_many(self, facts: Sequence[GraphFact]) -> list[Memory]:
        """`record_graph_facts` for many memories with batched writes and one fsync pass
        per batch (`import mcp-memory`); through the daemon, a request per batch."""
        ...

    def record_graph_facts_brief(self, facts: Sequence[GraphFact]) -> list[Recorded]:
        """`record_graph_facts_many` answering only each memory's slug, scope and what it
        superseded (`import mcp-memory`: it needs no bodies back)."""
        ...

    def update_keywords(
        self,
        slug: str,
        tags: Sequence[str] | None = None,
        triggers: Sequence[str] | None = None,
        *,
        title: str | None = None,
    ) -> Memory:
        """Replace a memory's title, tags and/or triggers (None: keep them)."""
        ...

    def archive(self, slug: str) -> Memory:
        """Archive, never erase: the file moves to `forgotten/` and the memory is hidden."""
        ...

    def close_relations(self, slug: str, relations: Sequence[RelationRef]) -> Memory:
        """Close relations this memory asserts; a memory that only stated them is archived."""
        ...

    def alias_entity(self, name_or_id: str, alias: str) -> EntityRow:
        """Teach the graph another name for an entity (audited, replayed by reindex)."""
        ...

    def merge_entities(self, keep: str, drop: str) -> EntityRow:
        """Merge `drop` into `keep`: edges move, `drop`'s name becomes an alias."""
        ...

    def delete_entity(self, name_or_id: str) -> EntityDeletion:
        """Delete an entity; memories naming it are rewritten without it, nothing erased."""
        ...

    def reindex(
        self,
        warn: Callable[[str], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReindexReport:
        """Rebuild the graph and the search index from the vault; `progress(done, total)`
        after each batch of memory files (in this process only: a daemon's reindex calls
        nothing back)."""
        ...

    def drain_inbox(self) -> int:
        """Index the captures waiting in `inbox/` now; how many (reads only count them)."""
        ...

    # -- memories -----------------------------------------------------------------------
    def get(self, slug: str) -> Memory:
        """The memory with this slug, read from its vault file."""
        ...

    def list_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]:
        """Memories newest first, filtered by scope (path or hash), type and decay state."""
        ...

    def count_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
    ) -> int:
        """How many memories `list_memories` would list without a limit."""
        ...

    def scope_hash_of(self, scope: Path | str | None) -> str | None:
        """A scope given as a path (the caller's), or a 12-hex hash already; None: all."""
        ...

    def supersedes_chain(self, slug: str) -> list[SupersedeRow]:
        """Every SUPERSEDES edge reachable from this memory, in either direction."""
        ...

    # -- recall -------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
    ) -> SearchHits:
        """BM25 full text over title, body, tags and triggers; `hidden` counts the hits left
        out in sensitive scopes without a grant."""
        ...

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
        """Text and entity traversal fused and adjusted; `track` counts the hits as recalls."""
        ...

    # -- sensitive scopes: grants --------------------------------------------------------
    def grant(
        self, path: Path | str, duration: GrantDuration = "once", *, task: str | None = None
    ) -> Grant:
        """Allow reads of a sensitive scope: once (90 s), session (8 h), task (until revoked)."""
        ...

    def revoke(self, path: Path | str, *, task: str | None = None) -> list[Grant]:
        """End a sensitive scope's grants (with `task`, only that task's); those ended."""
        ...

    def grants(self) -> list[Grant]:
        """The grants in force now, oldest first."""
        ...

    # -- the entity graph ---------------------------------------------------------------
    def entities(
        self, *, type: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[EntityRow]:
        """Entities, most mentioned first, by type and/or a name or alias fragment."""
        ...

    def resolve_entity(self, name_or_id: str) -> EntityRow:
        """An entity by id (`entity:library:React`), name or alias."""
        ...

    def entity_context(self, name_or_id: str, *, limit: int = 20) -> EntityContext:
        """An entity, its relations and the memories about it, current first."""
        ...

    def neighbors(self, name_or_id: str, *, depth: int = 2) -> CypherResult:
        """Entities within `depth` hops (fan-out capped per hop)."""
        ...

    def entity_supersedes(self, name_or_id: str) -> list[SupersedeRow]:
        """The supersedes chain among the memories about an entity, oldest first."""
        ...

    def relations(
        self,
        *,
        entity: str | None = None,
        predicate: Predicate | None = None,
        include_closed: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RelationRow]:
        """Relations between entities and memories, newest first."""
        ...

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        """A user's read-only Cypher, run in the sandbox (`memoryd.graph.sandbox`)."""
        ...

    # -- governance: DURA scores and the promotions queue ---------------------------------
    def analyze_session(
        self, slug: str, *, mode: Literal["auto", "llm", "heuristic"] = "auto"
    ) -> DuraAnalysis:
        """Score one session memory again and queue what it proposes for promotion."""
        ...

    def list_promotions(
        self,
        *,
        status: PromotionStatus | None = "pending",
        scope: Path | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        """The promotions queue, newest first, with its evidence (None status: all)."""
        ...

    def get_promotion(self, promotion_id: int) -> Promotion:
        """One promotion by id."""
        ...

    def promote(
        self,
        promotion_id: int,
        *,
        type: MemoryType | None = None,
        title: str | None = None,
        body: str | None = None,
        agent: bool = False,
    ) -> Promotion:
        """Approve: write the long-term memory the promotion proposes (edits allowed)."""
        ...

    def reject(
        self, promotion_id: int, *, reason: str | None = None, agent: bool = False
    ) -> Promotion:
        """Reject a pending promotion; the reason is kept in the queue."""
        ...

    # -- supersede judging ----------------------------------------------------------------
    def supersede_candidates(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        """Supersede candidates waiting for a human, most confident first."""
        ...

    def automatic_supersedes(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        """Automatic supersede decisions (active and candidates) with rule, version and
        evidence, newest first."""
        ...

    def decide_supersede(
        self,
        newer: str,
        older: str,
        action: SupersedeAction,
        *,
        by: str = "user",
        agent: bool = False,
    ) -> SupersedeDecision:
        """`undo` an active supersede, or `accept`/`reject` a candidate; audited. An `agent`
        (MCP) may decide only when `governance.agents_decide` lets it."""
        ...

    def judge_supersedes(self, slug: str, *, use_llm: bool = True) -> list[SupersedeDecision]:
        """Judge whether this memory replaces older ones, and record what was decided."""
        ...

    # -- trends and reports ---------------------------------------------------------------
    def trends(self, days: int = 7, scope: Path | str | None = None) -> Trends:
        """Top triggers, rising entities, recent supersedes, hot recalls and mentions per day
        of the top entities over the last `days` days (today included)."""
        ...

    def supersede_report(
        self,
        *,
        since: datetime | None = None,
        entity: str | None = None,
        scope: Path | str | None = None,
    ) -> SupersedeReport:
        """The chain of supersede decisions per entity (what replaced what, when, who decided
        and why) since `since`, about one `entity` or all."""
        ...

    # -- lifecycle: decay, restore, merge, schedules --------------------------------------
    def decay_sweep(
        self, *, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> SweepReport:
        """Move unused session memories along alive → dim → soft-forgotten → forgotten;
        `progress(done, total)` as the moves are written (in this process only, as for
        `reindex`)."""
        ...

    def restore(self, slug: str) -> RestoreResult:
        """Bring a forgotten (or dim, soft-forgotten) memory back to alive."""
        ...

    def merge(self, keep: str, drop: Sequence[str], *, across_scopes: bool = False) -> MergeResult:
        """Fold the `drop` memories into `keep`."""
        ...

    def duplicates(self, *, scope: Path | str | None = None) -> list[DuplicatePair]:
        """Candidate pairs to merge: equal fingerprints and near-duplicates."""
        ...

    def schedule(self) -> list[JobStatus]:
        """Each maintenance job: its calendar, last run and next run."""
        ...

    def digest(
        self,
        *,
        scope: Path | str | None = None,
        days: int | None = None,
        limit: int | None = None,
    ) -> Digest:
        """The weekly review page: pending promotions with their evidence, supersede
        candidates, duplicate pairs, memories fading within `days` (None: `[digest]` config)."""

    # -- the identity profile -----------------------------------------------------------
    def profile_rewrite(self, *, compiled: bool = False, scheduled: bool = False) -> ProfileRewrite:
        """Rewrite profile/identity.md (the LLM when configured unless `compiled`); identical
        content writes no version. `scheduled`: as the weekly job, its run recorded."""
        ...

    def profile_show(self, version: int | None = None) -> ProfileVersion:
        """The current identity version, or version `version` (NotFound when unknown)."""
        ...

    def profile_history(self, *, limit: int = 50) -> list[ProfileVersion]:
        """The identity versions, newest first."""
        ...

    def profile_diff(self, from_version: int, to_version: int) -> ProfileDiff:
        """A unified diff between two identity versions."""
        ...

    def profile_rollback(self, version: int) -> ProfileRewrite:
        """Make an older version's text current again, as a new version."""
        ...

    def profile_report(self, month: str | None = None, *, scheduled: bool = False) -> ProfileReport:
        """Write the change report of `month` (YYYY-MM, default the previous month)."""
        ...

    def profile_reports(self) -> list[ProfileChangeReport]:
        """The monthly change reports written so far, newest month first."""
        ...

    # -- audit --------------------------------------------------------------------------
    def audit_records(
        self,
        *,
        scope: Path | str | None = None,
        since: datetime | None = None,
        event_type: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        """Audit events oldest first; with `limit`, the newest `limit` of them."""
        ...

    def audit_verify(self) -> AuditVerification:
        """Walk the audit hash chain; `ok` false names the first bad line."""
        ...

    # -- sensitive scopes ---------------------------------------------------------------
    def sensitive_mark(self, path: Path | str, *, passphrase: str | None = None) -> MarkReport:
        """Mark the scope at `path` sensitive: key, marker, every memory encrypted."""
        ...

    def sensitive_unmark(self, path: Path | str, *, yes: bool = False) -> UnmarkReport:
        """Decrypt a sensitive scope back to plaintext (needs `yes` and a grant)."""
        ...

    def sensitive_status(self) -> list[SensitiveStatus]:
        """Every sensitive scope, its key and its files."""
        ...

    def sensitive_rotate_key(
        self, path: Path | str, *, passphrase: str | None = None
    ) -> RotateReport:
        """Re-encrypt a sensitive scope under a new key."""

    # -- sync (memories.json) -------------------------------------------------------------
    def sync_export(
        self,
        out: Path,
        *,
        scope: Path | str | None = None,
        include_audit_chain: bool = False,
        include_embeddings: bool = False,
        chunk_size_mb: float = 5.0,
        passphrase: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportReport:
        """Write memories.json (deterministic); a sensitive memory only sealed with
        `passphrase` under a grant, else left out and counted. `progress(done, total)` in
        this process only (a daemon calls nothing back)."""
        ...

    def sync_import(
        self,
        source: Path,
        *,
        conflict: ConflictStrategy = "merge",
        dry_run: bool = False,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
        passphrase: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportReport:
        """Import memories.json (or an mcp-memory-service export); idempotent. Sealed
        memories open with `passphrase` and are sealed again under the local scope key.
        `progress(done, total)` in this process only."""
        ...

    def sync_diff(
        self,
        source: Path,
        *,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
    ) -> SyncDiff:
        """The file against this data dir: added, removed, changed (with fields)."""
        ...

    def sync_conflicts(self) -> list[ConflictEntry]:
        """Body conflicts an import left in `_conflicts/`."""
        ...

    def sync_resolve(self, slug: str, take: str) -> ResolveResult:
        """Close a conflict: `local`, `remote`, or the path of a file holding the body."""
        ...
