"""Trends over a window of days (issue 16, seeds/002 §6): what the memory was asked about,
which entities come up more than before, which decisions changed, and what agents recall.

The window is the last `days` UTC calendar days, today included, so it lines up with
trigger_stats' days; the previous window is the `days` before it. The numbers come from
what the stores already keep, nothing is counted twice:

- top triggers: trigger_stats (governance.db), hits per day;
- rising entities and the per-day series: MENTIONS edges, dated by their memory's created_at;
- recent supersedes: SUPERSEDES edges decided in the window (active and candidates);
- hot recalls: memories last recalled in the window, by their recall_count. The graph keeps a
  memory's lifetime count and its last recall, not a count per day, so a hot recall is "recalled
  in the window, most recalled overall" (`HotRecall.recall_count` is the lifetime count).

`compute` does the arithmetic on plain rows (a fixed clock tests it); `trends` reads the rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from pydantic import BaseModel, Field

from memoryd.errors import InvalidInput
from memoryd.governance.store import GovernanceStore, TriggerStat
from memoryd.graph.store import GraphStore
from memoryd.models import Timestamp, to_utc

MAX_DAYS = 366
TOP = 10
"""Rows per section."""
SERIES = 5
"""Entities drawn in the mentions-over-time chart."""
ROW_LIMIT = 1_000_000


class TriggerTrend(BaseModel):
    """A trigger keyword that brought memories back, with the previous window beside it."""

    trigger: str
    hits: int
    previous: int


class EntityTrend(BaseModel):
    """An entity mentioned more in this window than in the previous one."""

    id: str
    name: str
    type: str
    mentions: int
    """Memories created in the window that mention it."""
    previous: int
    """The same in the previous window."""


class SupersedeEvent(BaseModel):
    """A supersede decided in the window: `newer` replaces (or, a candidate, may replace)
    `older`."""

    newer: str
    newer_title: str
    older: str
    older_title: str
    entity_id: str | None = None
    decided_at: Timestamp | None = None
    decided_by: str
    """auto (the judge was sure), user, or digest (a person reviewing the digest)."""
    confidence: float
    reason: str | None = None
    status: str
    """`active`, or `candidate` waiting for a person."""
    judge: str | None = None


class HotRecall(BaseModel):
    """A memory recalled in the window; `recall_count` is its lifetime count."""

    slug: str
    title: str
    type: str
    scope_hash: str
    recall_count: int
    last_recalled_at: Timestamp


class MentionSeries(BaseModel):
    """Mentions per day of one entity, aligned with `Trends.days`."""

    id: str
    name: str
    type: str
    counts: list[int]


class Trends(BaseModel):
    """What changed in the last `window_days` days (`memoryd trends`, `/v1/trends`)."""

    window_days: int
    start: Timestamp
    """The first instant of the window (00:00 UTC of its first day)."""
    end: Timestamp
    """The end of the window, exclusive (00:00 UTC after its last day)."""
    previous_start: Timestamp
    """The previous window runs from here to `start`."""
    scope_hash: str | None = None
    top_triggers: list[TriggerTrend] = Field(default_factory=list)
    rising_entities: list[EntityTrend] = Field(default_factory=list)
    recent_supersedes: list[SupersedeEvent] = Field(default_factory=list)
    hot_recalls: list[HotRecall] = Field(default_factory=list)
    days: list[date] = Field(default_factory=list)
    """The window's days, oldest first: the x axis of `mentions`."""
    mentions: list[MentionSeries] = Field(default_factory=list)
    """Mentions per day of the entities mentioned most in the window."""


@dataclass(frozen=True)
class Window:
    """The last `days` calendar days (UTC) up to `now`, and the `days` before them."""

    days: int
    start: datetime
    end: datetime
    previous_start: datetime

    @classmethod
    def ending(cls, now: datetime, days: int) -> Window:
        if not 1 <= days <= MAX_DAYS:
            raise InvalidInput(
                f"days must be between 1 and {MAX_DAYS} (got {days})",
                hint="pass --days 7 for the last week, 30 for the last month",
            )
        today = to_utc(now).date()
        start = datetime.combine(today - timedelta(days=days - 1), time(), UTC)
        return cls(days, start, start + timedelta(days=days), start - timedelta(days=days))

    def day_list(self) -> list[date]:
        first = self.start.date()
        return [first + timedelta(days=i) for i in range(self.days)]


@dataclass(frozen=True)
class Mention:
    """How many memories created on `day` (UTC) mention an entity."""

    entity_id: str
    name: str
    type: str
    day: date
    count: int = 1


def compute(
    window: Window,
    *,
    mentions: Iterable[Mention],
    triggers: Iterable[TriggerStat],
    supersedes: Sequence[SupersedeEvent],
    recalls: Sequence[HotRecall],
    scope_hash: str | None = None,
) -> Trends:
    """The trends of `window` from its rows (and the previous window's): pure arithmetic."""
    now_counts: Counter[str] = Counter()
    before: Counter[str] = Counter()
    per_day: dict[str, Counter[date]] = defaultdict(Counter)
    names: dict[str, tuple[str, str]] = {}
    first, end, previous_first = (
        window.start.date(),
        window.end.date(),
        window.previous_start.date(),
    )
    for m in mentions:
        if first <= m.day < end:
            now_counts[m.entity_id] += m.count
            per_day[m.entity_id][m.day] += m.count
            names[m.entity_id] = (m.name, m.type)
        elif previous_first <= m.day < first:
            before[m.entity_id] += m.count
            names.setdefault(m.entity_id, (m.name, m.type))
    rising = sorted(
        (e for e in now_counts if now_counts[e] > before[e]),
        key=lambda e: (-(now_counts[e] - before[e]), -now_counts[e], names[e][0].casefold(), e),
    )[:TOP]
    top = sorted(now_counts, key=lambda e: (-now_counts[e], names[e][0].casefold(), e))[:SERIES]
    days = window.day_list()

    hits: Counter[str] = Counter()
    earlier: Counter[str] = Counter()
    last = days[-1]
    for stat in triggers:
        if first <= stat.day <= last:
            hits[stat.trigger] += stat.hits
        elif previous_first <= stat.day < first:
            earlier[stat.trigger] += stat.hits
    top_triggers = sorted(hits, key=lambda t: (-hits[t], t.casefold(), t))[:TOP]

    return Trends(
        window_days=window.days,
        start=window.start,
        end=window.end,
        previous_start=window.previous_start,
        scope_hash=scope_hash,
        top_triggers=[
            TriggerTrend(trigger=t, hits=hits[t], previous=earlier[t]) for t in top_triggers
        ],
        rising_entities=[
            EntityTrend(
                id=e, name=names[e][0], type=names[e][1], mentions=now_counts[e], previous=before[e]
            )
            for e in rising
        ],
        recent_supersedes=sorted(
            (
                s
                for s in supersedes
                if s.decided_at and window.start <= to_utc(s.decided_at) < window.end
            ),
            key=lambda s: (s.decided_at or window.start, s.newer, s.older),
            reverse=True,
        )[:TOP],
        hot_recalls=sorted(
            (r for r in recalls if window.start <= to_utc(r.last_recalled_at) < window.end),
            key=lambda r: (-r.recall_count, -to_utc(r.last_recalled_at).timestamp(), r.slug),
        )[:TOP],
        days=days,
        mentions=[
            MentionSeries(
                id=e, name=names[e][0], type=names[e][1], counts=[per_day[e][d] for d in days]
            )
            for e in top
        ],
    )


def trends(
    graph: GraphStore,
    governance: GovernanceStore,
    now: datetime,
    *,
    days: int = 7,
    scope_hash: str | None = None,
) -> Trends:
    """The trends of the `days` up to `now`, in one scope or all (`scope_hash` None)."""
    window = Window.ending(now, days)
    params: dict[str, Any] = {
        "from": window.previous_start,
        "until": window.end,
        "scope": scope_hash,
    }
    # Counted per entity and day by the engine: a year of a busy vault is millions of edges.
    mention_rows = graph.cypher(
        "MATCH (m:Memory)-[:MENTIONS]->(e:Entity)"
        " WHERE m.created_at >= $from AND m.created_at < $until"
        " AND ($scope IS NULL OR m.scope_hash = $scope)"
        " RETURN e.id, e.name, e.type, CAST(m.created_at AS DATE), count(*)",
        params,
        limit=ROW_LIMIT,
    ).rows
    supersede_rows = graph.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory)"
        " WHERE r.decided_at >= $start AND r.decided_at < $until"
        " AND ($scope IS NULL OR n.scope_hash = $scope)"
        " RETURN n.slug, n.title, o.slug, o.title, r.entity_id, r.decided_at, r.decided_by,"
        " r.confidence, r.reason, r.status, r.judge",
        {"start": window.start, "until": window.end, "scope": scope_hash},
        limit=ROW_LIMIT,
    ).rows
    recall_rows = graph.cypher(
        "MATCH (m:Memory) WHERE m.last_recalled_at >= $start AND m.last_recalled_at < $until"
        " AND m.recall_count > 0 AND ($scope IS NULL OR m.scope_hash = $scope)"
        " RETURN m.slug, m.title, m.type, m.scope_hash, m.recall_count, m.last_recalled_at"
        " ORDER BY m.recall_count DESC, m.last_recalled_at DESC, m.slug LIMIT $top",
        {"start": window.start, "until": window.end, "scope": scope_hash, "top": TOP},
        limit=TOP,
    ).rows
    return compute(
        window,
        mentions=[Mention(e, name, kind, _day(day), n) for e, name, kind, day, n in mention_rows],
        triggers=governance.trigger_stats(
            since=window.previous_start.date(), scope_hash=scope_hash
        ),
        supersedes=[supersede_event(row) for row in supersede_rows],
        recalls=[
            HotRecall(
                slug=slug,
                title=title or "",
                type=kind,
                scope_hash=scope,
                recall_count=count,
                last_recalled_at=_instant(at),
            )
            for slug, title, kind, scope, count, at in recall_rows
        ],
        scope_hash=scope_hash,
    )


def supersede_event(row: Sequence[Any]) -> SupersedeEvent:
    """A SupersedeEvent from the columns newer, newer_title, older, older_title, entity_id,
    decided_at, decided_by, confidence, reason, status, judge."""
    newer, newer_title, older, older_title, eid, at, by, confidence, reason, status, judge = row
    return SupersedeEvent(
        newer=newer,
        newer_title=newer_title or "",
        older=older,
        older_title=older_title or "",
        entity_id=eid,
        decided_at=_instant(at) if at else None,
        decided_by=by or "user",
        confidence=1.0 if confidence is None else confidence,
        reason=reason,
        status=status or "active",
        judge=judge,
    )


def _day(value: str | date) -> date:
    """A DATE from a query result (`YYYY-MM-DD` text) as a date."""
    return value if isinstance(value, date) else date.fromisoformat(value[:10])


def _instant(value: str | datetime) -> datetime:
    """A timestamp from a query result (`...Z` text) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return to_utc(value)
    return to_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
