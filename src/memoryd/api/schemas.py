"""Request and response bodies of the HTTP API that are not domain models already.

Responses reuse the domain models (`Memory`, `MemorySummary`, `SearchHit`, `EntityRow` …) so
the CLI, reading them back through the daemon, renders exactly what embedded mode renders.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field

from memoryd.errors import InvalidInput
from memoryd.models import (
    HiddenResults,
    MemoryDraft,
    MemoryType,
    RecallHit,
    RelationRef,
    SearchHit,
)
from memoryd.scope import path_problem

T = TypeVar("T")

MAX_PAGE = 1000
AUDIT_MAX_PAGE = 10_000
MAX_CYPHER_ROWS = 10_000
SCOPE_HASH = re.compile(r"[0-9a-f]{12}")


def _path_text(value: str) -> str:
    problem = path_problem(value)
    if problem is not None:
        raise ValueError(problem)  # pydantic names the field: `path: contains a NUL …`
    return value


PathText = Annotated[str, AfterValidator(_path_text)]
"""A request field that names a file or directory: refused with 422 when no file system call
could take it, rather than failing deep inside a route."""

# Cypher parameters are JSON scalars or flat lists of them: what the engine binds safely.
Scalar = str | int | float | bool | None
CypherParam = Scalar | list[Scalar]


class Page(BaseModel, Generic[T]):
    """One page of a list. `next_offset` is the offset of the next page, null on the last."""

    items: list[T]
    limit: int
    offset: int
    next_offset: int | None = None
    total: int | None = None
    """How many there are in all, where a list counts them (memories)."""


class SearchPage(Page[SearchHit]):
    """A page of search hits, and the hits left out in sensitive scopes without a grant."""

    hidden: list[HiddenResults] = Field(default_factory=list)


class MemoryCreate(BaseModel):
    """A memory to record. `scope` is the project directory (absolute) it belongs to."""

    model_config = ConfigDict(extra="forbid")

    type: MemoryType
    title: str = Field(min_length=1, max_length=500)
    body: str = ""
    scope: PathText = Field(min_length=1, description="absolute path of the project directory")
    source: str = Field(default="api", min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list, max_length=200)
    triggers: list[str] = Field(default_factory=list, max_length=200)
    category: str | None = Field(default=None, max_length=200)
    created_at: datetime | None = None
    ttl_days: int | None = Field(default=None, ge=0, le=1_000_000)
    allow_duplicate: bool = False
    supersedes: list[str] = Field(default_factory=list, max_length=100)
    promoted_from: str | None = None


def memory_draft(body: MemoryCreate) -> MemoryDraft:
    """The service's draft of a request's memory, built without validating it again: the
    route validated `body`, whose fields are the draft's, of the same types (a batch of
    5000 spent more on dumping and re-validating them than on reading the request)."""
    fields = dict(body.__dict__)
    fields["scope_path"] = _scope_path(fields.pop("scope"))
    # A copy of one constructed draft with the fields replaced: what `model_construct` makes
    # (the same fields, in the same order, all set), without its loop over every field's
    # aliases and defaults (it was most of building a 5000-fact batch's drafts).
    return _draft_prototype().model_copy(update=fields)


@functools.cache
def _draft_prototype() -> MemoryDraft:
    """Every field in the model's order, none set (a required one None until replaced)."""
    fields: dict[str, Any] = {
        name: None if field.is_required() else field.get_default(call_default_factory=True)
        for name, field in MemoryDraft.model_fields.items()
    }
    return MemoryDraft.model_construct(_fields_set=set(), **fields)


@functools.lru_cache(maxsize=256)
def _scope_path(scope: str) -> Path:
    """A request's scope as a path, once per scope (a batch's memories share one)."""
    if not Path(scope).is_absolute():
        raise InvalidInput(
            f"scope {scope!r} is not an absolute path",
            hint="pass the absolute path of the project directory",
        )
    return Path(scope)


MAX_BATCH_MEMORIES = 1000
MAX_BATCH_FACTS = 5000
"""Graph facts are short (a sentence, an entity id or two): 5000 stay far under the body
limit, and each batch's fixed cost (a graph transaction, an index commit, an fsync pass)
is paid a fifth as often as at 1000."""
"""Memories per `POST /v1/memories/batch` request; the daemon client splits larger batches."""


class MemoryBatch(BaseModel):
    """Memories to record in one batched write (imports, benchmarks)."""

    model_config = ConfigDict(extra="forbid")

    memories: list[MemoryCreate] = Field(min_length=1, max_length=MAX_BATCH_MEMORIES)
    bulk: bool = Field(
        default=True, description="one fsync pass for the batch instead of one per memory"
    )


class KeywordsPatch(BaseModel):
    """A new title, tags and/or triggers; a field left out keeps its value."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, min_length=1, max_length=500)

    tags: list[str] | None = Field(default=None, max_length=200)
    triggers: list[str] | None = Field(default=None, max_length=200)


class CypherQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=100_000)
    params: dict[str, CypherParam] = Field(default_factory=dict)
    limit: int = Field(default=1000, ge=1, le=MAX_CYPHER_ROWS)
    timeout_ms: int | None = Field(
        default=None,
        ge=1,
        le=600_000,
        description="default and maximum: graph.cypher_timeout_ms (10 s unless configured)",
    )


class Health(BaseModel):
    status: str = "ok"
    version: str
    pid: int
    uptime_s: float
    pending_writes: int
    tcp_port: int | None = None
    recall_readers: int = 0
    """Reader processes up and ranking recalls (0: recall runs in the daemon process)."""
    index_waiting: int = 0
    """Memories written and waiting for the search index's next commit (not searchable yet)."""
    index_waiting_since: datetime | None = None
    index_failed_commits: int = 0
    """Tries to commit them that failed since the last success (the daemon keeps trying)."""
    index_error: str | None = None
    """The last failed try's error (None once a commit succeeds)."""
    index_first_error: str | None = None
    """The first failed try's error: a later one may only say that tantivy's writer died."""
    index_retry_at: datetime | None = None


class VersionInfo(BaseModel):
    version: str
    api: str = "v1"
    graph_schema: int


class RecallQuery(BaseModel):
    """A recall sent as a body (`POST /v1/recall`): a query of any length the limit allows
    fits, where a URL would not."""

    model_config = ConfigDict(extra="forbid")

    # No min_length: an empty query gets check_query's message, as on every other surface.
    q: str = Field(description="what to remember (not blank)")
    scope: PathText | None = Field(
        default=None, description="a 12-hex scope hash, or the absolute path of a project"
    )
    type: list[MemoryType] | None = None
    include_forgotten: bool = False
    track: bool = Field(default=True, description="count the hits as recalls")
    limit: int = Field(default=10, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=10_000_000)


class RecallPage(BaseModel):
    """A recall (`memoryd recall`): one page of ranked hits, each explaining itself."""

    query: str
    hits: list[RecallHit]
    entities: list[str] = Field(default_factory=list)
    stages: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    """What the recall ran without, and why (the vector stage not installed or off)."""
    hidden: list[HiddenResults] = Field(default_factory=list)
    """Hits left out because their scope is sensitive and no grant is active."""
    limit: int
    offset: int
    next_offset: int | None = None


class ContextRequest(BaseModel):
    """What an agent hook asks for (`memoryd inject`): memories for a prompt, or, with no
    prompt, the scope's long-term memories at session start."""

    prompt: str | None = Field(default=None, max_length=20_000)
    scope: str | None = Field(default=None, pattern=r"^[0-9a-f]{12}$", description="scope hash")
    limit: int = Field(
        default=8,
        ge=1,
        le=50,
        validation_alias=AliasChoices("limit", "k"),
        description="how many memories at most (`k`, its older name, is still read)",
    )


class ContextItem(BaseModel):
    slug: str
    type: str
    title: str
    body: str
    created_at: str


class ContextReply(BaseModel):
    """Best first: long-term, current (not superseded) memories before session notes."""

    items: list[ContextItem]


class EntityMerge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep: str = Field(min_length=1, max_length=500, description="id, name or alias that stays")
    drop: str = Field(min_length=1, max_length=500, description="merged into `keep`")


class EntityAlias(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alias: str = Field(min_length=1, max_length=200)


class InboxDrained(BaseModel):
    indexed: int = Field(description="captures indexed (already indexed ones are only removed)")


class RelationsClose(BaseModel):
    """Relations a memory asserts, to close (matched on subject, predicate, object, label)."""

    model_config = ConfigDict(extra="forbid")

    relations: list[RelationRef] = Field(min_length=1, max_length=200)


class GraphFacts(BaseModel):
    """A memory that states graph facts: the entities it is about and the relations it
    asserts, kept in its frontmatter so `reindex` rebuilds them (the MCP graph tools)."""

    model_config = ConfigDict(extra="forbid")

    memory: MemoryCreate
    entity_ids: list[str] = Field(default_factory=list, max_length=200)
    relations: list[RelationRef] = Field(default_factory=list, max_length=200)


class GraphFactsBatch(BaseModel):
    """Graph-fact memories to record in one batched write (`import mcp-memory`)."""

    model_config = ConfigDict(extra="forbid")

    facts: list[GraphFacts] = Field(min_length=1, max_length=MAX_BATCH_FACTS)
