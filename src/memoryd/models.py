"""Values shared by every layer: the memory frontmatter (seeds/001) and what stores return.

These are plain data. Nothing here touches the disk, the graph or the index.

Over 600 lines: every model the surfaces exchange lives here, so each has one definition.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from memoryd.errors import InvalidInput

_M = TypeVar("_M", bound=BaseModel)


def typed(model: type[_M], **fields: Any) -> _M:
    """A `model` of fields already typed, every one of them given: what `model_construct`
    makes, without its walk over each field's alias and default, which is most of its cost
    (a decay sweep builds 100k moves and reads 100k index documents back)."""
    made = model.__new__(model)
    object.__setattr__(made, "__dict__", fields)
    object.__setattr__(made, "__pydantic_fields_set__", set(fields))
    object.__setattr__(made, "__pydantic_extra__", None)
    object.__setattr__(made, "__pydantic_private__", None)
    return made


def utcnow() -> datetime:
    """Now, in UTC, to the second: what the frontmatter stores."""
    return datetime.now(UTC).replace(microsecond=0)


def to_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def format_ts(value: datetime) -> str:
    """ISO-8601 in UTC with a trailing Z, as the seeds write timestamps."""
    return to_utc(value).isoformat().replace("+00:00", "Z")


Timestamp = Annotated[datetime, PlainSerializer(format_ts, return_type=str, when_used="json")]


class MemoryType(StrEnum):
    """The six kinds of memory: `session` is working memory, the rest are long-term."""

    SESSION = "session"
    DECISION = "decision"
    PREFERENCE = "preference"
    FACT = "fact"
    PLAYBOOK = "playbook"
    WARNING = "warning"

    @property
    def dir_name(self) -> str:
        """The vault folder of this type (`decisions/`, `sessions/` …)."""
        return f"{self.value}s"

    @property
    def long_term(self) -> bool:
        return self is not MemoryType.SESSION

    @property
    def default_ttl_days(self) -> int | None:
        """Sessions decay after 90 days unused; long-term memories never expire by default."""
        return 90 if self is MemoryType.SESSION else None


class DecayState(StrEnum):
    """alive → dim → soft-forgotten → forgotten (seeds/002); a recall revives."""

    ALIVE = "alive"
    DIM = "dim"
    SOFT_FORGOTTEN = "soft-forgotten"
    FORGOTTEN = "forgotten"

    @property
    def visible_by_default(self) -> bool:
        return self in (DecayState.ALIVE, DecayState.DIM)


class Predicate(StrEnum):
    """The 11 relation predicates of seeds/001."""

    MENTIONS = "mentions"
    WORKS_ON = "works_on"
    USES = "uses"
    PREFERS = "prefers"
    SUPERSEDES = "supersedes"
    SUPERSEDED_BY = "superseded_by"
    CONFLICTS_WITH = "conflicts_with"
    CITES = "cites"
    RUNS_ON = "runs_on"
    BELONGS_TO = "belongs_to"
    LOCATED_AT = "located_at"


class EntityType(StrEnum):
    PERSON = "person"
    ORGANIZATION = "organization"
    PLACE = "place"
    LIBRARY = "library"
    TOOL = "tool"
    PROJECT = "project"
    CONCEPT = "concept"


DURA_BY = re.compile(r"^(heuristic-v[0-9]+|llm:[^\s]{1,120})$")
"""How a DURA score was made: `heuristic-v1`, or `llm:<model>`."""


class Dura(BaseModel):
    """DURA score: Decision-worthy, Useful, Recallable, Accurate, each in [0, 1], and `by`,
    how it was made (`llm:<model>` or `heuristic-v1`): a review shows who scored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    D: float = Field(ge=0.0, le=1.0)
    U: float = Field(ge=0.0, le=1.0)
    R: float = Field(ge=0.0, le=1.0)
    A: float = Field(ge=0.0, le=1.0)
    by: str | None = None

    @field_validator("by")
    @classmethod
    def _by_shape(cls, value: str | None) -> str | None:
        if value is not None and not DURA_BY.match(value):
            raise ValueError(f"by {value!r} must be 'heuristic-v1' or 'llm:<model>'")
        return value

    @property
    def mean(self) -> float:
        return (self.D + self.U + self.R + self.A) / 4


SCOPE_HASH_RE = re.compile(r"^[0-9a-f]{12}$")
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
"""Kana, CJK ideographs and Hangul syllables: kept in slugs, so a Chinese, Japanese or
Korean title gives a readable slug rather than a bare date and hash."""
SLUG_RE = re.compile(rf"^[0-9A-Za-z{CJK}][0-9A-Za-z{CJK}._-]{{0,199}}$")
MAX_QUERY_CHARS = 4_000
"""The longest recall or search query, in characters: the same embedded, through the daemon
and over HTTP (the search index looks at no more than this anyway)."""


def check_query(query: str) -> None:
    """One rule for a recall or search query on every surface (CLI, library, HTTP, MCP), so
    a query that works embedded works through the daemon too: not blank, not too long."""
    if not query.strip():
        raise InvalidInput("the query is empty", hint="say what to look for, in any language")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"the query is {len(query)} characters; at most {MAX_QUERY_CHARS} are allowed",
            hint="shorten it to the words that matter",
        )


class RelationRef(BaseModel):
    """A relation extracted from a memory, kept in its frontmatter so `reindex` can rebuild it.

    `subject` None means the memory itself. Relations are closed (`superseded_at`), never
    deleted, so the graph keeps history (bi-temporal edges, as in Graphiti).
    """

    model_config = ConfigDict(frozen=True)

    predicate: Predicate
    object: str = Field(min_length=1)
    subject: str | None = None
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    valid_from: Timestamp | None = None
    superseded_at: Timestamp | None = None
    label: str | None = Field(default=None, min_length=1, max_length=200)
    """The relation as its source named it, when that is not the predicate's own name
    (`inspired by` stored as `mentions`): kept so the original survives a round trip."""

    @model_validator(mode="before")
    @classmethod
    def _from_seed_string(cls, value: Any) -> Any:
        """Accept the compact seed form `predicate:object` (`mentions:entity:library:React`)."""
        if isinstance(value, str):
            predicate, sep, obj = value.partition(":")
            if not sep or not obj:
                raise ValueError(f"relation {value!r} is not of the form 'predicate:object'")
            return {"predicate": predicate, "object": obj}
        return value

    def compact(self) -> str | dict[str, Any]:
        """The seed string when nothing but predicate and object is set, else a mapping."""
        if (
            self.subject is None
            and self.confidence == 1.0
            and self.valid_from is None
            and self.superseded_at is None
            and self.label is None
        ):
            return f"{self.predicate.value}:{self.object}"
        return self.model_dump(mode="json", exclude_none=True)


class SupersedeStatus(StrEnum):
    """Where a supersede decision stands: only `active` ones demote the older memory."""

    ACTIVE = "active"
    CANDIDATE = "candidate"
    """Judged 0.5–0.85: waits for a human (`memoryd supersede accept|reject`, the digest)."""
    REJECTED = "rejected"
    UNDONE = "undone"
    """Was active (automatic or by hand) until someone undid it."""


class SupersedeDecision(BaseModel):
    """One judgement that this memory replaces an older one, kept in the newer memory's
    frontmatter so `reindex` rebuilds the SUPERSEDES edge with its provenance. Rejected and
    undone decisions stay too: the same pair is not proposed again."""

    model_config = ConfigDict(frozen=True)

    older: str
    status: SupersedeStatus = SupersedeStatus.ACTIVE
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    decided_by: str = Field(default="auto", pattern=r"^(auto|user|digest)$")
    decided_at: Timestamp | None = None
    judge: str | None = Field(default=None, max_length=100)
    """What judged it: `rule:<name>` or `llm:<provider>/<model>`."""
    entity_id: str | None = None
    reason: str | None = Field(default=None, max_length=2000)
    rules: int | None = Field(default=None, ge=1)
    """The version of the rules that made an automatic decision (None: before versions were
    kept, or a person's or the LLM's decision): on open, automatic decisions of an older
    version are judged again."""

    @field_validator("decided_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)


_YAML_REQUIRED = frozenset(
    {"title", "slug", "type", "scope_hash", "source", "created_at", "decay_state"}
)
"""The frontmatter keys a memory file always has, even empty."""


def _json_ts(value: datetime | None) -> str | None:
    return None if value is None else format_ts(value)


class Frontmatter(BaseModel):
    """The YAML frontmatter of a memory file (seeds/001). Unknown keys are kept as written."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    title: str = Field(min_length=1, max_length=500)
    slug: str
    type: MemoryType
    scope_hash: str
    source: str = Field(min_length=1)
    created_at: Timestamp
    updated_at: Timestamp | None = None
    tags: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)
    category: str | None = None
    ttl_days: int | None = Field(default=None, ge=0)
    decay_state: DecayState = DecayState.ALIVE
    recall_count: int = Field(default=0, ge=0)
    last_recalled_at: Timestamp | None = None
    dura_score: Dura | None = None
    promoted_from: str | None = None
    supersedes: list[str] = Field(default_factory=list)
    supersede_decisions: list[SupersedeDecision] = Field(default_factory=list)
    observations: list[str] = Field(default_factory=list)
    relations: list[RelationRef] = Field(default_factory=list)
    forgotten_at: Timestamp | None = None
    """When the decay sweep forgot it: the file lives in `forgotten/` and the graph and the
    search index no longer hold it (`reindex` leaves it out; `restore` brings it back). An
    archived memory (`archive`) is forgotten too, but stays in the graph as history."""

    @field_validator("title")
    @classmethod
    def _title_not_blank(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("title is empty")
        return value

    @field_validator("slug")
    @classmethod
    def _slug_safe(cls, value: str) -> str:
        if not SLUG_RE.match(value):
            raise ValueError(
                f"slug {value!r} must be letters, digits, '.', '_' or '-' (it is a file name)"
            )
        return value

    @field_validator("scope_hash")
    @classmethod
    def _scope_hash_shape(cls, value: str) -> str:
        if not SCOPE_HASH_RE.match(value):
            raise ValueError(f"scope_hash {value!r} must be 12 lowercase hex digits")
        return value

    @field_validator("created_at", "updated_at", "last_recalled_at", "forgotten_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)

    @field_validator("tags", "triggers")
    @classmethod
    def _clean_keywords(cls, value: list[str]) -> list[str]:
        seen: dict[str, None] = {}
        for item in value:
            item = str(item).strip()
            if item:
                seen.setdefault(item, None)
        return list(seen)

    def to_yaml_dict(self) -> dict[str, Any]:
        """Field order as in seeds/001; empty optional fields are left out to keep files short.

        Spelled out field by field (what `model_dump(mode="json")` gives, which was half of
        rendering a file: a bulk import renders 100k); a frontmatter with unknown keys is
        dumped by pydantic, which turns their values into JSON types."""
        if self.__pydantic_extra__:
            return self._yaml_dict_dumped()
        f = self.__dict__
        dura = f["dura_score"]
        data = {
            "title": f["title"],
            "slug": f["slug"],
            "type": f["type"].value,
            "scope_hash": f["scope_hash"],
            "source": f["source"],
            "created_at": format_ts(f["created_at"]),
            "updated_at": _json_ts(f["updated_at"]),
            "tags": list(f["tags"]),
            "triggers": list(f["triggers"]),
            "category": f["category"],
            "ttl_days": f["ttl_days"],
            "decay_state": f["decay_state"].value,
            "recall_count": f["recall_count"],
            "last_recalled_at": _json_ts(f["last_recalled_at"]),
            "dura_score": None if dura is None else dura.model_dump(mode="json"),
            "promoted_from": f["promoted_from"],
            "supersedes": list(f["supersedes"]),
            "supersede_decisions": [
                d.model_dump(mode="json", exclude_none=True) for d in f["supersede_decisions"]
            ],
            "observations": list(f["observations"]),
            "forgotten_at": _json_ts(f["forgotten_at"]),
            "relations": [r.compact() for r in f["relations"]],
        }
        return {
            key: value
            for key, value in data.items()
            if key in _YAML_REQUIRED or key == "recall_count" or value not in (None, [], {})
        }

    def _yaml_dict_dumped(self) -> dict[str, Any]:
        """`to_yaml_dict` by pydantic's dump: for unknown keys, and the reference the tests
        hold the spelled-out one to."""
        data = self.model_dump(mode="json", exclude={"relations"})
        data["relations"] = [r.compact() for r in self.relations]
        data["supersede_decisions"] = [
            d.model_dump(mode="json", exclude_none=True) for d in self.supersede_decisions
        ]
        return {
            key: value
            for key, value in data.items()
            if key in _YAML_REQUIRED or key == "recall_count" or value not in (None, [], {})
        }


def fingerprint(body: str) -> str:
    """sha1 of the first 500 characters of the body: how duplicates are recognised."""
    return hashlib.sha1(body[:500].encode("utf-8")).hexdigest()


class Memory(BaseModel):
    """A memory as the vault holds it: frontmatter plus markdown body."""

    meta: Frontmatter
    body: str
    path: Path | None = None
    sensitive: bool = False

    @property
    def slug(self) -> str:
        return self.meta.slug

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.body)

    def skeleton(self) -> Memory:
        """What the on-disk graph may hold of a sensitive memory (DESIGN §7): slug, scope,
        type, times and decay state; no title, body, tags, triggers, mentions or relations."""
        meta = self.meta.model_copy(
            update={
                "title": "",
                "tags": [],
                "triggers": [],
                "category": None,
                "observations": [],
                "relations": [],
                "supersedes": [],
                "supersede_decisions": [],
                "promoted_from": None,
                "dura_score": None,
            }
        )
        return Memory(meta=meta, body="", path=self.path, sensitive=True)


class MemoryDraft(BaseModel):
    """What a caller gives to record a memory; the service fills in slug, scope and times."""

    type: MemoryType
    title: str
    body: str
    scope_path: Path | None = None
    source: str = "manual"
    tags: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)
    category: str | None = None
    created_at: datetime | None = None
    ttl_days: int | None = None
    allow_duplicate: bool = False
    supersedes: list[str] = Field(default_factory=list)
    promoted_from: str | None = None
    slug: str | None = None
    """A chosen slug (promotions write `promoted-<id>-<stem>`); None: made from the title."""


class GraphFact(BaseModel):
    """A memory that states graph facts (`record_graph_facts`): the entities it is about
    and the relations it asserts. Many at once: `record_graph_facts_many` (imports)."""

    draft: MemoryDraft
    entity_ids: list[str] = Field(default_factory=list)
    relations: list[RelationRef] = Field(default_factory=list)


class Recorded(BaseModel):
    """What an import needs back of each memory a batch wrote (`record_graph_facts_brief`):
    its slug and scope and the older memories it superseded, not its title, body and tags
    (through the daemon, 5000 whole memories an answer cost more to send and read back than
    the client's share of the import)."""

    slug: str
    scope_hash: str
    supersedes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, memory: Memory) -> Recorded:
        meta = memory.meta
        return cls(slug=meta.slug, scope_hash=meta.scope_hash, supersedes=list(meta.supersedes))


PromotionStatus = Literal["pending", "approved", "rejected", "merged"]


class PromotionProposal(BaseModel):
    """What DURA scoring proposes for one session memory: the long-term memory it would
    become, the score (`dura.by` says how it was made) and the evidence behind it."""

    source_slug: str
    source_title: str
    source_fingerprint: str
    scope_hash: str
    proposed_type: MemoryType
    proposed_title: str = Field(min_length=1, max_length=200)
    proposed_body: str
    proposed_triggers: list[str] = Field(default_factory=list)
    proposed_supersedes: list[str] = Field(default_factory=list)
    dura: Dura
    reasoning: str = ""
    evidence: list[str] = Field(default_factory=list)
    """Sentences quoted verbatim from the session that the score rests on."""

    @field_validator("proposed_type")
    @classmethod
    def _long_term(cls, value: MemoryType) -> MemoryType:
        if not value.long_term:
            raise ValueError("a promotion proposes a long-term type, not session")
        return value


class Promotion(PromotionProposal):
    """A row of the promotions queue (governance.db) with its decision, if any."""

    id: int
    status: PromotionStatus
    created_at: Timestamp
    decided_at: Timestamp | None = None
    decided_by: str | None = None
    decision_reason: str | None = None
    promoted_slug: str | None = None
    """The long-term memory `promote` wrote."""
    source_missing_at: Timestamp | None = None
    """When a promote found the source session deleted: the promotion stays, marked."""
    team_project: str | None = None
    """The team project its scope is shared as, on a daemon that joined a team (its forwarder
    fills it in; null otherwise): the Review page offers to promote it to the team then."""


class DuraAnalysis(BaseModel):
    """What `analyze-session` did: the score written to the memory's frontmatter and, when
    its mean reached the threshold, the promotion it queued."""

    slug: str
    dura: Dura
    threshold: float
    proposal: PromotionProposal
    promotion_id: int | None = None
    queue: Literal["new", "updated", "decided"] | None = None
    """new: a promotion was queued; updated: the pending one was refreshed; decided: this
    content was already decided, nothing was queued."""

    @property
    def mean(self) -> float:
        return self.dura.mean


class MemorySummary(BaseModel):
    """One row of `list`: enough to pick a memory without reading its body."""

    slug: str
    type: MemoryType
    title: str
    scope_hash: str
    source: str
    created_at: Timestamp
    updated_at: Timestamp | None = None
    decay_state: DecayState
    tags: list[str] = Field(default_factory=list)
    recall_count: int = 0


class SearchHit(BaseModel):
    """One full-text result, with the terms that matched so it can explain itself."""

    slug: str
    type: MemoryType
    title: str
    scope_hash: str
    decay_state: DecayState
    created_at: Timestamp
    score: float
    snippet: str = ""
    matched_terms: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)


class ScopeInfo(BaseModel):
    """What `scope show` reports, and what scopes/<hash>/scope.json holds."""

    scope_hash: str
    path: str
    git_toplevel: str | None = None
    git_remote: str | None = None
    aliases: list[str] = Field(default_factory=list)
    sensitive: bool = False


class AuditRecord(BaseModel):
    """One line of audit/audit.jsonl (seeds/001)."""

    seq: int
    ts: str
    actor: str
    event_type: str
    scope_hash: str | None
    target_id: str | None
    details: str
    prev_hash: str
    this_hash: str


class AuditVerification(BaseModel):
    ok: bool
    lines: int
    first_bad_line: int | None = None
    problem: str | None = None
    missing: list[str] = Field(default_factory=list)
    """Memories the vault or graph holds with no line that created them (record, capture)."""


class DoctorCheck(BaseModel):
    name: str
    ok: bool
    detail: str
    fix: str = ""


class EntityDeletion(BaseModel):
    """What deleting an entity did. No memory is erased: `archived` ones only stated facts
    about the entity; `unlinked` ones stay and just no longer name it."""

    entity_id: str
    name: str
    archived: list[str] = Field(default_factory=list)
    unlinked: list[str] = Field(default_factory=list)


class ReindexReport(BaseModel):
    indexed: int
    skipped: list[str] = Field(default_factory=list)
    seconds: float


def entity_id(entity_type: EntityType | str, name: str) -> str:
    """`entity:<type>:<name>`, the id an entity keeps across merges (seeds/001)."""
    kind = entity_type if isinstance(entity_type, EntityType) else EntityType(entity_type)
    return f"entity:{kind.value}:{name.strip()}"


class ProposedEntity(BaseModel):
    """An entity an extraction stage found in a text; the service links and writes it."""

    name: str = Field(min_length=1)
    type: EntityType
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    aliases: list[str] = Field(default_factory=list)
    context: str | None = None
    stage: str = "rules"
    """Which stage proposed it: `lexicon`, `known`, `pattern`, `ner`, `llm` …"""
    spans: list[tuple[int, int]] = Field(default_factory=list)

    @property
    def id(self) -> str:
        return entity_id(self.type, self.name)


class ProposedRelation(BaseModel):
    """A relation between two entities of the same Extraction.

    `subject` and `object` are entity ids (`entity:<type>:<name>`), or the literal `memory`
    for the memory the text came from.
    """

    subject: str
    predicate: Predicate
    object: str
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    evidence: str = ""
    stage: str = "rules"


class Extraction(BaseModel):
    """What extraction returns: proposals, never writes."""

    entities: list[ProposedEntity] = Field(default_factory=list)
    relations: list[ProposedRelation] = Field(default_factory=list)
    stages: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


RELEVANCE_NOTE = (
    "relevance: the calibrated 0-1 score inject thresholds; rows are in rank order, which"
    " also weighs evidence that counts in no score (--explain shows the factors)"
)
"""Said under a recall table whose relevance column is not in rank order (CLI, demo)."""


class RecallHit(BaseModel):
    """One recall result, with how it was found so it can explain itself."""

    slug: str
    type: MemoryType
    title: str
    scope_hash: str
    decay_state: DecayState
    created_at: Timestamp
    score: float
    snippet: str = ""
    matched_terms: list[str] = Field(default_factory=list)
    stages: list[str] = Field(default_factory=list)
    """Which stages found it: `bm25`, `entity`, `graph` (2 hops), `kind` (an entity of the
    kind the query names), `context`, `vector`."""
    paths: list[str] = Field(default_factory=list)
    """Graph paths that brought it, e.g. `Solid -[supersedes]-> React -> memory`."""
    superseded_by: str | None = None
    triggers: list[str] = Field(default_factory=list)
    """The memory's triggers; those the query contains count in trigger_stats."""
    factors: dict[str, float] = Field(default_factory=dict)
    """Every factor that moved the hit: each stage's contribution to the fused score (`bm25`,
    `context`, `entity`, `graph`, `kind`), then each multiplier the ranking applied (`title`,
    `length`, `asking`, `long-term`, `recency`, `dim`, `superseded`)."""
    sensitive: bool = False
    """Found in a granted sensitive scope: shown to the one who asked, never injected."""
    source: Literal["personal", "team", "team-cache"] | None = None
    """Where a developer daemon in a team found it (`team_member/forward.py`): the developer's
    own memory, the team server's, or the team hits last seen while the server is away."""
    recorded_by: str | None = None
    """The teammate who recorded a team hit."""


class HiddenResults(BaseModel):
    """Results a read left out because their scope is sensitive and no grant is active."""

    scope_hash: str
    path: str
    count: int
    """How many results were left out (a recall aimed at the scope itself: every memory in
    it, since none was searched)."""

    @property
    def message(self) -> str:
        return (
            f"{self.count} result{'s' if self.count != 1 else ''} hidden in sensitive scope"
            f" {self.path} (`memoryd grant {self.path} --duration once` to read them)"
        )


class RecallResult(BaseModel):
    query: str
    hits: list[RecallHit]
    entities: list[str] = Field(default_factory=list)
    """Entity ids the query was linked to."""
    stages: list[str] = Field(default_factory=list)
    """The stages that ran (`vector` only when the vector stage is installed and on)."""
    notes: list[str] = Field(default_factory=list)
    """What the recall ran without, and why (the vector stage's extra not installed)."""
    hidden: list[HiddenResults] = Field(default_factory=list)
    """Hits left out because their scope is sensitive and not granted (`memoryd grant`)."""


class SearchHits(list[SearchHit]):
    """What `search` returns: the hits, and the results it left out in sensitive scopes.

    A list, so every caller that iterates or compares hits keeps working; `hidden` is the
    field the surfaces show ("N results hidden in sensitive scope …")."""

    def __init__(
        self, hits: Iterable[SearchHit] = (), hidden: Iterable[HiddenResults] = ()
    ) -> None:
        super().__init__(hits)
        self.hidden: list[HiddenResults] = list(hidden)


GrantDuration = Literal["once", "session", "task"]
GRANT_SECONDS: dict[str, int | None] = {"once": 90, "session": 8 * 3600, "task": None}
"""How long each grant lasts; a task grant lasts until `memoryd revoke PATH --task NAME`."""


class Grant(BaseModel):
    """A time-boxed permission to read one sensitive scope (`grants/<scope>.json`)."""

    scope_hash: str
    path: str
    duration: GrantDuration
    task: str | None = None
    granted_at: Timestamp
    expires_at: Timestamp | None = None
    """None: a task grant, active until revoked."""
    actor: str = "cli"

    def active(self, now: datetime) -> bool:
        return self.expires_at is None or now < self.expires_at
