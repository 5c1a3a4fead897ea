"""`RemoteService`: the CLI's way to the daemon, with MemoryService's method names and types.

It answers with the same models MemoryService returns and raises the same MemorydError
subclasses (rebuilt from the error `code`), so output and exit codes are the same as in
embedded mode. Paths are resolved here, in the caller's working directory, because the
daemon's working directory means nothing to the caller.

Over 600 lines: one thin HTTP method per `MemoryAPI` method, which grows with the protocol.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from memoryd.client.wire import (
    JSON_HEADERS,
    PROBE_TIMEOUT_S,
    _absolute,
    _entity,
    _map_scope,
    _query,
    _scope_arg,
    batch_requests,
    error_from_response,
    scope_and_path,
    scope_hash_of,
    unix_socket_transport,
)
from memoryd.errors import StorageError
from memoryd.governance.reports import SupersedeReport
from memoryd.governance.schedule import JobStatus
from memoryd.governance.store import ProfileChangeReport, ProfileVersion
from memoryd.governance.trends import Trends
from memoryd.graph.store import CypherResult, EntityContext, EntityRow, RelationRow, SupersedeRow
from memoryd.memfile import SCOPE_PATH_HEADER, scope_path_header
from memoryd.models import (
    AuditRecord,
    AuditVerification,
    DecayState,
    DoctorCheck,
    DuraAnalysis,
    EntityDeletion,
    Grant,
    GrantDuration,
    GraphFact,
    HiddenResults,
    Memory,
    MemoryDraft,
    MemorySummary,
    MemoryType,
    Predicate,
    Promotion,
    PromotionStatus,
    RecallHit,
    RecallResult,
    Recorded,
    ReindexReport,
    RelationRef,
    SearchHit,
    SearchHits,
    SupersedeDecision,
    check_query,
    format_ts,
)
from memoryd.protocol import MemoryAPI
from memoryd.scope import resolve_scope
from memoryd.sync.models import (
    ConflictEntry,
    ConflictStrategy,
    ExportReport,
    ImportReport,
    ResolveResult,
    SyncDiff,
)

if TYPE_CHECKING:
    from memoryd.domain.sensitivity import (
        MarkReport,
        RotateReport,
        SealedRetryReport,
        SensitiveStatus,
        UnmarkReport,
    )
    from memoryd.governance.decay import RestoreResult, SweepReport
    from memoryd.governance.digest import Digest
    from memoryd.governance.merge import DuplicatePair, MergeResult
    from memoryd.governance.profile import ProfileDiff, ProfileReport, ProfileRewrite
    from memoryd.governance.supersede import SupersedeAction

BASE_URL = "http://localhost"
PAGE = 1000
RECORD_BATCH = 1000
"""Memories per batch request (the API's `MAX_BATCH_MEMORIES`)."""
FACTS_BATCH = 5000
"""Graph facts per batch request (the API's `MAX_BATCH_FACTS`)."""
RECORD_BATCH_BYTES = 8 * 1024 * 1024
"""A batch request's body stays well under the daemon's 16 MiB limit."""
AUDIT_PAGE = 10_000


M = TypeVar("M", bound=BaseModel)
A = TypeVar("A")


@functools.cache
def _list_of(model: type[M]) -> TypeAdapter[list[M]]:
    """A batch write's answer (`Memory`, or `Recorded` for a brief one), validated from its
    JSON text; built on first use."""
    return TypeAdapter(list[model])  # type: ignore[valid-type]


class RemoteService(MemoryAPI):
    """`MemoryAPI` over the daemon's Unix socket."""

    def __init__(self, socket: Path, *, timeout_s: float = 120.0, actor: str = "cli") -> None:
        self.socket = socket
        self._http = httpx.Client(
            transport=unix_socket_transport(socket),
            base_url=BASE_URL,
            timeout=httpx.Timeout(timeout_s, connect=PROBE_TIMEOUT_S),
            headers={"X-Memoryd-Actor": actor},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------
    def _request(self, method: str, url: str, *, decoded: bool = True, **kwargs: Any) -> Any:
        """The daemon's answer, decoded from JSON (its bytes when not `decoded`)."""
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise StorageError(
                f"the daemon on {self.socket} did not answer {method} {url} in time",
                hint="check `memoryd status` and <home>/logs/daemon.log",
            ) from exc
        except httpx.TransportError as exc:
            raise StorageError(
                f"lost the connection to the daemon on {self.socket}: {exc}",
                hint="check `memoryd status`; the command may or may not have been carried out",
            ) from exc
        if response.is_error:
            raise error_from_response(response)
        return response.json() if decoded else response.content

    def _model(self, model: type[M], method: str, url: str, **kwargs: Any) -> M:
        data = self._request(method, url, **kwargs)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise StorageError(f"the daemon's answer to {url} is not a {model.__name__}") from exc

    def _pages(
        self,
        model: type[M],
        url: str,
        params: dict[str, Any],
        want: int | None,
        size: int,
        start: int = 0,
        seen: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[list[M]]:
        """Pages of a paginated list from `start` until `want` items (None: all) are read."""
        pages: list[list[M]] = []
        offset, total = start, 0
        while want is None or total < want:
            limit = size if want is None else min(size, want - total)
            data = self._request(
                "GET", url, params={**_query(params), "limit": limit, "offset": offset}
            )
            try:
                items = [model.model_validate(item) for item in data["items"]]
            except (KeyError, TypeError, ValidationError) as exc:
                raise StorageError(f"the daemon's answer to {url} is not a page") from exc
            if seen is not None:
                seen(data)
            pages.append(items)
            total += len(items)
            if data.get("next_offset") is None or not items:
                break
            offset = int(data["next_offset"])
        return pages

    def health(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {} if timeout_s is None else {"timeout": timeout_s}
        response = self._http.get("/v1/health", **kwargs)
        if response.is_error:
            raise error_from_response(response)
        result: dict[str, Any] = response.json()
        return result

    # -- MemoryAPI ----------------------------------------------------------------------
    def scope_hash_of(self, scope: Path | str | None) -> str | None:
        return scope_hash_of(scope)

    def record(self, draft: MemoryDraft) -> Memory:
        return self._model(Memory, "POST", "/v1/memories", json=self._memory_body(draft))

    def record_many(self, drafts: Sequence[MemoryDraft], *, bulk: bool = True) -> list[Memory]:
        """In requests of at most `RECORD_BATCH` memories (and well under the daemon's body
        limit); each request lands whole or not at all."""
        scopes: dict[Path | None, str] = {}
        bodies = (self._memory_body(draft, scopes) for draft in drafts)
        return self._batched(
            "/v1/memories/batch", "memories", bodies, {"bulk": bulk}, RECORD_BATCH, _list_of(Memory)
        )

    def record_graph_facts_many(self, facts: Sequence[GraphFact]) -> list[Memory]:
        """In requests of at most `FACTS_BATCH` facts, as `record_many` (an import's facts
        share a scope: it is resolved once)."""
        return self._facts_batched("/v1/graph/facts/batch", facts, _list_of(Memory))

    def record_graph_facts_brief(self, facts: Sequence[GraphFact]) -> list[Recorded]:
        return self._facts_batched("/v1/graph/facts/batch/brief", facts, _list_of(Recorded))

    def _facts_batched(
        self, path: str, facts: Sequence[GraphFact], answer: TypeAdapter[list[A]]
    ) -> list[A]:
        scopes: dict[Path | None, str] = {}
        bodies = (self._fact_body(f.draft, f.entity_ids, f.relations, scopes) for f in facts)
        return self._batched(path, "facts", bodies, {}, FACTS_BATCH, answer)

    def _batched(
        self,
        path: str,
        key: str,
        bodies: Iterable[dict[str, Any]],
        extra: dict[str, Any],
        most: int,
        answer: TypeAdapter[list[A]],
    ) -> list[A]:
        """POST `bodies` in batches of at most `most` items (`wire.batch_requests`)."""
        recorded: list[A] = []
        for content in batch_requests(key, bodies, extra, most, RECORD_BATCH_BYTES):
            raw = self._request("POST", path, content=content, headers=JSON_HEADERS, decoded=False)
            try:  # validated from the JSON text: far cheaper than a dict per memory first
                recorded.extend(answer.validate_json(raw))
            except ValidationError as exc:
                raise StorageError(f"the daemon's answer to {path} is malformed") from exc
        return recorded

    def record_graph_facts(
        self,
        draft: MemoryDraft,
        *,
        entity_ids: Sequence[str],
        relations: Sequence[RelationRef] = (),
    ) -> Memory:
        body = self._fact_body(draft, entity_ids, relations)
        return self._model(Memory, "POST", "/v1/graph/facts", json=body)

    def _fact_body(
        self,
        draft: MemoryDraft,
        entity_ids: Sequence[str],
        relations: Sequence[RelationRef],
        scopes: dict[Path | None, str] | None = None,
    ) -> dict[str, Any]:
        return {
            "memory": self._memory_body(draft, scopes),
            "entity_ids": list(entity_ids),
            "relations": [r.model_dump(mode="json") for r in relations],
        }

    @staticmethod
    def _memory_body(
        draft: MemoryDraft, scopes: dict[Path | None, str] | None = None
    ) -> dict[str, Any]:
        """The draft as the API takes it; its scope resolved here, where the path means
        something (and fails with the same error as in embedded mode), once per path in
        `scopes` when given."""
        scope = None if scopes is None else scopes.get(draft.scope_path)
        if scope is None:
            scope = resolve_scope(draft.scope_path, with_remote=False).path
            if scopes is not None:
                scopes[draft.scope_path] = scope
        body = draft.model_dump(mode="json", exclude={"scope_path", "slug"})
        body["scope"] = scope
        return body

    def get(self, slug: str) -> Memory:
        return self._model(Memory, "GET", f"/v1/memories/{quote(slug, safe='')}")

    def list_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemorySummary]:
        params = {"scope": scope_hash_of(scope), "type": type, "state": state}
        pages = self._pages(MemorySummary, "/v1/memories", params, limit, PAGE, start=offset)
        return [row for items in pages for row in items]

    def count_memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
    ) -> int:
        params = {"scope": scope_hash_of(scope), "type": type, "state": state}
        data = self._request("GET", "/v1/memories", params={**_query(params), "limit": 1})
        if not isinstance(data.get("total"), int):
            raise StorageError("the daemon's answer to /v1/memories does not count them")
        return int(data["total"])

    def search(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
    ) -> SearchHits:
        check_query(query)  # a URL too long for httpx would fail with its own error
        params = {
            "q": query,
            "scope": scope_hash_of(scope),
            "type": list(types) if types else None,
            "include_forgotten": include_forgotten,
        }
        hidden: list[HiddenResults] = []

        def first_hidden(data: dict[str, Any]) -> None:
            if not hidden:
                hidden.extend(HiddenResults.model_validate(h) for h in data.get("hidden", []))

        pages = self._pages(SearchHit, "/v1/search", params, k, PAGE, seen=first_hidden)
        return SearchHits((hit for items in pages for hit in items), hidden)

    def grant(
        self, path: Path | str, duration: GrantDuration = "once", *, task: str | None = None
    ) -> Grant:
        body = {"scope": _scope_arg(path), "duration": duration, "task": task}
        return self._model(Grant, "POST", "/v1/grants", json=body)

    def revoke(self, path: Path | str, *, task: str | None = None) -> list[Grant]:
        params = _query({"scope": _scope_arg(path), "task": task})
        data = self._request("DELETE", "/v1/grants", params=params)
        return [Grant.model_validate(g) for g in data]

    def grants(self) -> list[Grant]:
        return [Grant.model_validate(g) for g in self._request("GET", "/v1/grants")]

    def entities(
        self, *, type: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[EntityRow]:
        params = {"type": type, "q": query}
        pages = self._pages(EntityRow, "/v1/entities", params, limit, PAGE)
        return [row for items in pages for row in items]

    def cypher(
        self,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        limit: int = 1000,
        timeout_ms: int | None = None,
    ) -> CypherResult:
        body = {"query": query, "params": params or {}, "limit": limit, "timeout_ms": timeout_ms}
        return self._model(CypherResult, "POST", "/v1/graph/cypher", json=body)

    def update_keywords(
        self,
        slug: str,
        tags: Sequence[str] | None = None,
        triggers: Sequence[str] | None = None,
        *,
        title: str | None = None,
    ) -> Memory:
        body: dict[str, Any] = {"tags": tags, "triggers": triggers}
        if title is not None:
            body["title"] = title
        return self._model(Memory, "PATCH", f"/v1/memories/{quote(slug, safe='')}", json=body)

    def decay_sweep(
        self, *, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> SweepReport:
        from memoryd.governance.decay import SweepReport

        body = {"dry_run": dry_run}
        return self._model(SweepReport, "POST", "/v1/decay/sweep", json=body)

    def restore(self, slug: str) -> RestoreResult:
        from memoryd.governance.decay import RestoreResult

        url = f"/v1/memories/{quote(slug, safe='')}/restore"
        return self._model(RestoreResult, "POST", url)

    def merge(self, keep: str, drop: Sequence[str], *, across_scopes: bool = False) -> MergeResult:
        from memoryd.governance.merge import MergeResult

        body = {"keep": keep, "drop": list(drop), "across_scopes": across_scopes}
        return self._model(MergeResult, "POST", "/v1/merge", json=body)

    def duplicates(self, *, scope: Path | str | None = None) -> list[DuplicatePair]:
        from memoryd.governance.merge import DuplicatePair

        params = {"scope": scope_hash_of(scope)} if scope is not None else {}
        data = self._request("GET", "/v1/duplicates", params=params)
        return [DuplicatePair.model_validate(d) for d in data]

    def schedule(self) -> list[JobStatus]:
        return [JobStatus.model_validate(j) for j in self._request("GET", "/v1/schedule")]

    # -- sensitive scopes ---------------------------------------------------------------
    def sensitive_mark(self, path: Path | str, *, passphrase: str | None = None) -> MarkReport:
        from memoryd.domain.sensitivity import MarkReport

        body = {"path": _absolute(path), "passphrase": passphrase}
        return self._model(MarkReport, "POST", "/v1/sensitive/mark", json=body, timeout=None)

    def sensitive_unmark(self, path: Path | str, *, yes: bool = False) -> UnmarkReport:
        from memoryd.domain.sensitivity import UnmarkReport

        body = {"path": _absolute(path), "yes": yes}
        return self._model(UnmarkReport, "POST", "/v1/sensitive/unmark", json=body, timeout=None)

    def sensitive_status(self) -> list[SensitiveStatus]:
        from memoryd.domain.sensitivity import SensitiveStatus

        return [SensitiveStatus.model_validate(s) for s in self._request("GET", "/v1/sensitive")]

    def sensitive_rotate_key(
        self, path: Path | str, *, passphrase: str | None = None
    ) -> RotateReport:
        from memoryd.domain.sensitivity import RotateReport

        body = {"path": _absolute(path), "passphrase": passphrase}
        url = "/v1/sensitive/rotate-key"
        return self._model(RotateReport, "POST", url, json=body, timeout=None)

    def digest(
        self,
        *,
        scope: Path | str | None = None,
        days: int | None = None,
        limit: int | None = None,
    ) -> Digest:
        from memoryd.governance.digest import Digest

        params = _query({"scope": scope_hash_of(scope), "days": days, "limit": limit})
        return self._model(Digest, "GET", "/v1/digest", params=params)

    def profile_rewrite(self, *, compiled: bool = False, scheduled: bool = False) -> ProfileRewrite:
        from memoryd.governance.profile import ProfileRewrite

        body = {"compiled": compiled, "scheduled": scheduled}
        return self._model(ProfileRewrite, "POST", "/v1/profile", json=body)

    def profile_show(self, version: int | None = None) -> ProfileVersion:
        params = {} if version is None else {"version": version}
        return self._model(ProfileVersion, "GET", "/v1/profile", params=params)

    def profile_history(self, *, limit: int = 50) -> list[ProfileVersion]:
        data = self._request("GET", "/v1/profile/versions", params={"limit": limit})
        return [ProfileVersion.model_validate(v) for v in data]

    def profile_diff(self, from_version: int, to_version: int) -> ProfileDiff:
        from memoryd.governance.profile import ProfileDiff

        params = {"from_version": from_version, "to_version": to_version}
        return self._model(ProfileDiff, "GET", "/v1/profile/diff", params=params)

    def profile_rollback(self, version: int) -> ProfileRewrite:
        from memoryd.governance.profile import ProfileRewrite

        body = {"version": version}
        return self._model(ProfileRewrite, "POST", "/v1/profile/rollback", json=body)

    def profile_report(self, month: str | None = None, *, scheduled: bool = False) -> ProfileReport:
        from memoryd.governance.profile import ProfileReport

        body = {"month": month, "scheduled": scheduled}
        return self._model(ProfileReport, "POST", "/v1/profile/reports", json=body)

    def profile_reports(self) -> list[ProfileChangeReport]:
        data = self._request("GET", "/v1/profile/reports")
        return [ProfileChangeReport.model_validate(r) for r in data]

    def archive(self, slug: str) -> Memory:
        return self._model(Memory, "DELETE", f"/v1/memories/{quote(slug, safe='')}")

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
        check_query(query)  # the daemon checks too; this fails the same way, sooner
        scope_hash, scope_path = scope_and_path(scope)
        # the path beside the hash: a daemon in a team tells a shared project by its remote
        where = {SCOPE_PATH_HEADER: scope_path_header(scope_path)} if scope_path else {}
        body: dict[str, Any] = {
            "q": query,
            "scope": scope_hash,
            "type": [t.value for t in types] if types else None,
            "include_forgotten": include_forgotten,
            "track": track,
        }
        first: dict[str, Any] | None = None
        hits: list[RecallHit] = []
        offset = 0
        while len(hits) < k:
            size = min(PAGE, k - len(hits))
            # In the body: a query of thousands of words does not fit a URL.
            data = self._request(
                "POST", "/v1/recall", json={**body, "limit": size, "offset": offset}, headers=where
            )
            first = first or data
            hits += [RecallHit.model_validate(hit) for hit in data["hits"]]
            if data.get("next_offset") is None:
                break
            offset = int(data["next_offset"])
        assert first is not None  # k >= 1: at least one page was read
        return RecallResult.model_validate({**first, "hits": hits})

    def resolve_entity(self, name_or_id: str) -> EntityRow:
        return self._model(EntityRow, "GET", f"/v1/entities/{_entity(name_or_id)}")

    def entity_context(self, name_or_id: str, *, limit: int = 20) -> EntityContext:
        url = f"/v1/entities/{_entity(name_or_id)}/context"
        return self._model(EntityContext, "GET", url, params={"limit": limit})

    def neighbors(self, name_or_id: str, *, depth: int = 2) -> CypherResult:
        url = f"/v1/entities/{_entity(name_or_id)}/neighbors"
        return self._model(CypherResult, "GET", url, params={"depth": depth})

    def merge_entities(self, keep: str, drop: str) -> EntityRow:
        body = {"keep": keep, "drop": drop}
        return self._model(EntityRow, "POST", "/v1/entities/merge", json=body)

    def delete_entity(self, name_or_id: str) -> EntityDeletion:
        return self._model(EntityDeletion, "DELETE", f"/v1/entities/{_entity(name_or_id)}")

    def close_relations(self, slug: str, relations: Sequence[RelationRef]) -> Memory:
        url = f"/v1/memories/{quote(slug, safe='')}/relations/close"
        body = {"relations": [r.model_dump(mode="json", exclude_none=True) for r in relations]}
        return self._model(Memory, "POST", url, json=body)

    def alias_entity(self, name_or_id: str, alias: str) -> EntityRow:
        url = f"/v1/entities/{_entity(name_or_id)}/aliases"
        return self._model(EntityRow, "POST", url, json={"alias": alias})

    def supersedes_chain(self, slug: str) -> list[SupersedeRow]:
        url = f"/v1/memories/{quote(slug, safe='')}/supersedes"
        pages = self._pages(SupersedeRow, url, {}, None, PAGE)
        return [row for items in pages for row in items]

    def supersede_candidates(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        params = {"scope": scope_hash_of(scope)}
        pages = self._pages(SupersedeRow, "/v1/supersedes/candidates", params, None, PAGE)
        return [row for items in pages for row in items]

    def automatic_supersedes(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        params = {"scope": scope_hash_of(scope)}
        pages = self._pages(SupersedeRow, "/v1/supersedes/automatic", params, None, PAGE)
        return [row for items in pages for row in items]

    def decide_supersede(
        self,
        newer: str,
        older: str,
        action: SupersedeAction,
        *,
        by: str = "user",
        agent: bool = False,
    ) -> SupersedeDecision:
        url = f"/v1/supersedes/{quote(newer, safe='')}/{quote(older, safe='')}/{action}"
        body = {"decided_by": by, "agent": agent}
        return self._model(SupersedeDecision, "POST", url, json=body)

    def trends(self, days: int = 7, scope: Path | str | None = None) -> Trends:
        params: dict[str, Any] = {"days": days}
        if scope is not None:
            params["scope"] = scope_hash_of(scope)
        return self._model(Trends, "GET", "/v1/trends", params=params)

    def supersede_report(
        self,
        *,
        since: datetime | None = None,
        entity: str | None = None,
        scope: Path | str | None = None,
    ) -> SupersedeReport:
        params: dict[str, Any] = {}
        if since is not None:
            params["since"] = format_ts(since)
        if entity is not None:
            params["entity"] = entity
        if scope is not None:
            params["scope"] = scope_hash_of(scope)
        return self._model(SupersedeReport, "GET", "/v1/reports/supersedes", params=params)

    def judge_supersedes(self, slug: str, *, use_llm: bool = True) -> list[SupersedeDecision]:
        url = f"/v1/supersedes/{quote(slug, safe='')}/judge"
        data = self._request("POST", url)
        return [SupersedeDecision.model_validate(item) for item in data]

    def entity_supersedes(self, name_or_id: str) -> list[SupersedeRow]:
        url = f"/v1/entities/{_entity(name_or_id)}/supersedes"
        pages = self._pages(SupersedeRow, url, {}, None, PAGE)
        return [row for items in pages for row in items]

    def relations(
        self,
        *,
        entity: str | None = None,
        predicate: Predicate | None = None,
        include_closed: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RelationRow]:
        params = {"entity": entity, "predicate": predicate, "include_closed": include_closed}
        pages = self._pages(RelationRow, "/v1/relations", params, limit, PAGE, start=offset)
        return [row for items in pages for row in items]

    def audit_records(
        self,
        *,
        scope: Path | str | None = None,
        since: datetime | None = None,
        event_type: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        params = {
            "scope": scope_hash_of(scope),
            "since": since.isoformat() if since else None,
            "event_type": event_type,
        }
        # Offsets count back from the newest event: each page is older than the one before.
        pages = self._pages(AuditRecord, "/v1/audit", params, limit, AUDIT_PAGE)
        return [rec for items in reversed(pages) for rec in items]

    def audit_verify(self) -> AuditVerification:
        return self._model(AuditVerification, "GET", "/v1/audit/verify")

    def reindex(
        self,
        warn: Callable[[str], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReindexReport:
        report = self._model(ReindexReport, "POST", "/v1/reindex", timeout=None)
        if warn is not None:
            for message in report.skipped:
                warn(message)
        return report

    # -- DURA scoring and the promotions queue -------------------------------------------
    def analyze_session(
        self, slug: str, *, mode: Literal["auto", "llm", "heuristic"] = "auto"
    ) -> DuraAnalysis:
        url = f"/v1/memories/{quote(slug, safe='')}/analyze"
        return self._model(DuraAnalysis, "POST", url, json={"mode": mode})

    def list_promotions(
        self,
        *,
        status: PromotionStatus | None = "pending",
        scope: Path | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        params = {"status": status or "all", "scope": scope_hash_of(scope)}
        pages = self._pages(Promotion, "/v1/promotions", params, limit, PAGE, start=offset)
        return [row for items in pages for row in items]

    def get_promotion(self, promotion_id: int) -> Promotion:
        return self._model(Promotion, "GET", f"/v1/promotions/{promotion_id:d}")

    def promote(
        self,
        promotion_id: int,
        *,
        type: MemoryType | None = None,
        title: str | None = None,
        body: str | None = None,
        agent: bool = False,
    ) -> Promotion:
        payload = {"type": type, "title": title, "body": body, "agent": agent}
        url = f"/v1/promotions/{promotion_id:d}/promote"
        return self._model(Promotion, "POST", url, json=payload)

    def reject(
        self, promotion_id: int, *, reason: str | None = None, agent: bool = False
    ) -> Promotion:
        url = f"/v1/promotions/{promotion_id:d}/reject"
        return self._model(Promotion, "POST", url, json={"reason": reason, "agent": agent})

    def drain_inbox(self) -> int:
        data = self._request("POST", "/v1/inbox/drain")
        return int(data["indexed"])

    def retry_sealed_captures(self) -> SealedRetryReport:
        """The daemon replays the sealed failed payloads: it holds the scope keys."""
        from memoryd.domain.sensitivity import SealedRetryReport

        data = self._request("POST", "/v1/sensitive/retry-captures")
        return SealedRetryReport.model_validate(data)

    def doctor(self) -> list[DoctorCheck]:
        data = self._request("GET", "/v1/doctor")
        return TypeAdapter(list[DoctorCheck]).validate_python(data)

    # -- sync: paths are resolved here, the daemon runs on this machine -------------------
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
        body = {
            "passphrase": passphrase,
            "out": str(Path(out).resolve()),
            "scope": scope_hash_of(scope),
            "include_audit_chain": include_audit_chain,
            "include_embeddings": include_embeddings,
            "chunk_size_mb": chunk_size_mb,
        }
        return self._model(ExportReport, "POST", "/v1/sync/export", json=body)

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
        body = {
            "passphrase": passphrase,
            "source": str(Path(source).resolve()),
            "conflict": conflict,
            "dry_run": dry_run,
            "map_scope": _map_scope(map_scope),
            "scope": str(Path(scope or Path.cwd()).resolve()),
        }
        return self._model(ImportReport, "POST", "/v1/sync/import", json=body)

    def sync_diff(
        self,
        source: Path,
        *,
        map_scope: Mapping[str, str] | None = None,
        scope: Path | str | None = None,
    ) -> SyncDiff:
        body = {
            "source": str(Path(source).resolve()),
            "map_scope": _map_scope(map_scope),
            "scope": str(Path(scope or Path.cwd()).resolve()),
        }
        return self._model(SyncDiff, "POST", "/v1/sync/diff", json=body)

    def sync_conflicts(self) -> list[ConflictEntry]:
        return [ConflictEntry.model_validate(c) for c in self._request("GET", "/v1/sync/conflicts")]

    def sync_resolve(self, slug: str, take: str) -> ResolveResult:
        if take not in ("local", "remote"):
            take = str(Path(take).resolve())
        url = f"/v1/sync/conflicts/{quote(slug, safe='')}/resolve"
        return self._model(ResolveResult, "POST", url, json={"take": take})
