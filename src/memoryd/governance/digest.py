"""The weekly digest (seeds/004 每周 digest, DESIGN §7): one page of what waits for a person.

Its sections are the review queues and what is about to change on its own:
* pending promotions with their DURA evidence (scores, who scored, the quoted sentences);
* supersede candidates (SUPERSEDES edges with status `candidate`, judged 0.5–0.85);
* duplicate pairs: equal fingerprints anywhere, near-duplicates among the last `days`' memories
  (`memoryd duplicates` compares the whole vault: minutes at 100k);
* fading memories: session memories whose next decay step (dim, soft-forgotten, forgotten)
  falls due within the next `days`, with the day it does;
* trends (`trends_section`): the week's top triggers, rising entities, supersedes and hot
  recalls, a few lines each; left out when the window saw none of them.

Each list is capped at `limit`; its total is kept beside it, so a 100k vault's digest stays
one page and still says how much waits. `plain_text` renders it for e-mail and desktop
notifications; the CLI renders it with rich.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from memoryd.governance.decay import DecayPolicy, next_state
from memoryd.governance.merge import SHINGLE_CHARS, DuplicatePair, near_pairs, shingles
from memoryd.governance.stores import Stores
from memoryd.governance.trends import Trends
from memoryd.graph.store import SupersedeRow
from memoryd.models import DecayState, MemoryType, Promotion, Timestamp, to_utc

MAX_LIMIT = 1000
_DAY = timedelta(days=1)


class FadingMemory(BaseModel):
    """A session memory the decay sweep moves on by the digest's horizon."""

    slug: str
    scope_hash: str
    title: str
    from_state: DecayState
    to_state: DecayState
    due_at: Timestamp
    """When its idle time crosses the threshold (at or before now: the next sweep moves it)."""


class DigestSection(BaseModel):
    """A section another report contributes (trends): its heading, the lines to show, and
    its data for `--json`."""

    title: str
    lines: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)


class Digest(BaseModel):
    """What `memoryd digest` shows. Each list holds at most `limit` items; `totals` counts
    them all."""

    at: Timestamp
    scope_hash: str | None = None
    days: int
    limit: int
    promotions: list[Promotion] = Field(default_factory=list)
    supersede_candidates: list[SupersedeRow] = Field(default_factory=list)
    duplicates: list[DuplicatePair] = Field(default_factory=list)
    fading: list[FadingMemory] = Field(default_factory=list)
    totals: dict[str, int] = Field(default_factory=dict)
    """section → how many items it has before the cap."""
    notes: list[str] = Field(default_factory=list)
    """What a section covers when it is not everything (near-duplicates: the recent ones)."""
    trends: DigestSection | None = None
    """Filled when a trends report is attached; None: the section is omitted."""
    seconds: float = 0.0

    @property
    def empty(self) -> bool:
        return not any(self.totals.values()) and self.trends is None


TRENDS_LINES = 3
"""Items per trends line in the digest: `memoryd trends` has the whole report."""


def trends_section(trends: Trends) -> DigestSection | None:
    """The trends report as digest lines (the top `TRENDS_LINES` of each part), or None when
    the window saw no trigger, mention, supersede or recall."""
    lines: list[str] = []
    if trends.top_triggers:
        top = trends.top_triggers[:TRENDS_LINES]
        lines.append("top triggers: " + ", ".join(f"{t.trigger} ({t.hits})" for t in top))
    if trends.rising_entities:
        rising = trends.rising_entities[:TRENDS_LINES]
        lines.append(
            "rising: " + ", ".join(f"{e.name} ({e.previous} → {e.mentions})" for e in rising)
        )
    for event in trends.recent_supersedes[:TRENDS_LINES]:
        lines.append(
            f"superseded: {event.older_title or event.older} → {event.newer_title or event.newer}"
            f" ({event.decided_by})"
        )
    if trends.hot_recalls:
        hot = trends.hot_recalls[:TRENDS_LINES]
        lines.append("hot recalls: " + ", ".join(f"{r.title} ({r.recall_count})" for r in hot))
    if not lines:
        return None
    return DigestSection(
        title=f"Trends (last {trends.window_days} days; `memoryd trends` for all)",
        lines=lines,
        data=trends.model_dump(mode="json"),
    )


# -- fading memories --------------------------------------------------------------------------
# A memory's next step falls due when its idle time (since its last recall, or creation)
# reaches that step's threshold: ttl_days for dim, then + soft_forget_days, + forget_days.
# The graph computes it, so a 100k vault's digest counts and orders in the engine and reads
# only the `limit` rows it shows.
_FADING_WHERE = (
    " WHERE m.type = 'session' AND m.ttl_days IS NOT NULL AND m.decay_state <> 'forgotten'"
    " AND m.sensitive = false AND ($scope IS NULL OR m.scope_hash = $scope)"
    " WITH m, coalesce(m.last_recalled_at, m.created_at) AS idle_since"
    " WITH m, idle_since, idle_since + to_days(CASE m.decay_state"
    " WHEN 'alive' THEN m.ttl_days WHEN 'dim' THEN m.ttl_days + $soft"
    " ELSE m.ttl_days + $soft + $forget END) AS due"
    " WHERE due <= $horizon"
)


def _as_time(value: datetime | str) -> datetime:
    """A timestamp as a graph query returns it (a datetime, or ISO text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return to_utc(value)


def fading(
    stores: Stores,
    now: datetime,
    policy: DecayPolicy,
    *,
    days: int,
    limit: int,
    scope_hash: str | None = None,
) -> tuple[list[FadingMemory], int]:
    """Session memories whose next decay step falls due by `now + days`, soonest first (at
    most `limit`), and how many there are. Overdue ones move at the next sweep; `to_state` is
    where the sweep's own rules (`decay.next_state`) put them at the horizon. Sensitive
    memories are left out, as the sweep leaves them (their files are encrypted)."""
    horizon = to_utc(now) + days * _DAY
    params = {
        "scope": scope_hash,
        "soft": policy.soft_forget_days,
        "forget": policy.soft_forget_days + policy.forget_days,
        "horizon": horizon,
    }
    total = stores.graph.cypher(
        f"MATCH (m:Memory){_FADING_WHERE} RETURN count(*)", params, limit=1
    ).rows[0][0]
    rows = stores.graph.cypher(
        f"MATCH (m:Memory){_FADING_WHERE} RETURN m.slug, m.scope_hash, m.title, m.ttl_days,"
        " m.decay_state, idle_since, due ORDER BY due, m.slug LIMIT $limit",
        {**params, "limit": limit},
        limit=limit,
    ).rows
    found = []
    for slug, scope, title, ttl, state, idle_since, due in rows:
        current = DecayState(state)
        target = next_state(MemoryType.SESSION, ttl, current, _as_time(idle_since), horizon, policy)
        found.append(
            FadingMemory(
                slug=slug,
                scope_hash=scope,
                title=title,
                from_state=current,
                to_state=target or current,
                due_at=_as_time(due),
            )
        )
    return found, int(total or 0)


# -- duplicates -------------------------------------------------------------------------------
_LIVE = (
    "m.decay_state <> 'forgotten' AND m.sensitive = false"
    " AND ($scope IS NULL OR m.scope_hash = $scope)"
)


def duplicate_pairs(
    stores: Stores,
    now: datetime,
    *,
    days: int,
    limit: int,
    scope_hash: str | None = None,
) -> tuple[list[DuplicatePair], int, int]:
    """Pairs to merge (at most `limit`), how many there are, and how many recent memories
    were compared for near-duplicates: memories with equal
    fingerprints anywhere in the vault (counted in the engine), and near-duplicates among the
    memories written in the last `days` (`merge.near_pairs`). The full near-duplicate scan
    compares every memory with every other of its scope (minutes at 100k): that is
    `memoryd duplicates`, not the weekly page."""
    params: dict[str, Any] = {"scope": scope_hash}
    groups = stores.graph.cypher(
        f"MATCH (m:Memory) WHERE {_LIVE} AND m.body <> ''"
        " WITH m.scope_hash AS scope, m.fingerprint AS fp, count(*) AS n WHERE n > 1"
        " RETURN scope, fp, n ORDER BY n DESC, scope, fp",
        params,
        limit=100_000_000,
    ).rows
    total = sum(int(n) - 1 for _, _, n in groups)
    pairs: list[DuplicatePair] = []
    shown_fps = [fp for _, fp, _ in groups[:limit]]
    if shown_fps:
        members = stores.graph.cypher(
            f"MATCH (m:Memory) WHERE {_LIVE} AND m.fingerprint IN $fps"
            " RETURN m.scope_hash, m.fingerprint, m.slug, m.title ORDER BY m.created_at, m.slug",
            {**params, "fps": shown_fps},
            limit=100_000_000,
        ).rows
        by_group: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for scope, fp, slug, title in members:
            by_group.setdefault((scope, fp), []).append((slug, title))
        for (scope, _), found in by_group.items():
            (keep, keep_title), *rest = found
            pairs += [
                DuplicatePair(
                    scope_hash=scope,
                    keep=keep,
                    drop=drop,
                    keep_title=keep_title,
                    drop_title=drop_title,
                    kind="fingerprint",
                    similarity=1.0,
                )
                for drop, drop_title in rest
            ]
    recent = stores.graph.cypher(
        f"MATCH (m:Memory) WHERE {_LIVE} AND m.created_at >= $since"
        " RETURN m.scope_hash, m.slug, m.title, m.body, m.fingerprint"
        " ORDER BY m.created_at, m.slug",
        {**params, "since": to_utc(now) - days * _DAY},
        limit=100_000_000,
    ).rows
    by_scope: dict[str, dict[str, set[int]]] = {}
    titles: dict[str, str] = {}
    fingerprints: dict[str, str] = {}
    for scope, slug, title, body, fp in recent:
        by_scope.setdefault(scope, {})[slug] = shingles(f"{title}\n{str(body)[:SHINGLE_CHARS]}")
        titles[slug], fingerprints[slug] = title, fp
    order = {row[1]: i for i, row in enumerate(recent)}
    near = []
    for scope, sets in by_scope.items():
        for a, b, similarity in near_pairs(sets):
            if fingerprints[a] == fingerprints[b]:
                continue  # counted with the equal fingerprints
            keep, drop = sorted((a, b), key=order.__getitem__)
            near.append(
                DuplicatePair(
                    scope_hash=scope,
                    keep=keep,
                    drop=drop,
                    keep_title=titles[keep],
                    drop_title=titles[drop],
                    kind="near",
                    similarity=round(similarity, 3),
                )
            )
    near.sort(key=lambda p: (-p.similarity, p.keep, p.drop))
    return (pairs + near)[:limit], total + len(near), len(recent)


# -- plain text (e-mail, desktop) --------------------------------------------------------------
def subject(digest: Digest) -> str:
    t = digest.totals
    return (
        f"memoryd digest: {t.get('promotions', 0)} promotions, {t.get('supersede', 0)}"
        f" supersede candidates, {t.get('duplicates', 0)} duplicates,"
        f" {t.get('fading', 0)} fading"
    )


def _more(digest: Digest, key: str, shown: int) -> list[str]:
    rest = digest.totals.get(key, 0) - shown
    return [f"  … and {rest} more"] if rest > 0 else []


def plain_text(digest: Digest) -> str:
    """The digest as plain text, every section that has something (e-mail body)."""
    lines = [f"memoryd digest, {digest.at:%Y-%m-%d %H:%M} UTC"]
    if digest.scope_hash:
        lines.append(f"scope {digest.scope_hash}")
    if digest.empty:
        lines += ["", "Nothing waits for a decision and nothing fades this week."]
    if digest.promotions:
        lines += ["", f"Pending promotions ({digest.totals['promotions']})"]
        for p in digest.promotions:
            d = p.dura
            lines.append(f"  #{p.id} {p.proposed_type.value}: {p.proposed_title}")
            lines.append(
                f"    DURA D {d.D:.2f} U {d.U:.2f} R {d.R:.2f} A {d.A:.2f} = {d.mean:.2f}"
                f" by {d.by or 'unknown'}; from {p.source_slug}"
            )
            lines += [f"    > {quote}" for quote in p.evidence]
        lines += _more(digest, "promotions", len(digest.promotions))
    if digest.supersede_candidates:
        lines += ["", f"Supersede candidates ({digest.totals['supersede']})"]
        for r in digest.supersede_candidates:
            why = f": {r.reason}" if r.reason else ""
            lines.append(f"  {r.newer} replaces {r.older}? {r.confidence:.2f}{why}")
        lines += _more(digest, "supersede", len(digest.supersede_candidates))
    if digest.duplicates:
        lines += ["", f"Duplicate pairs ({digest.totals['duplicates']})"]
        for pair in digest.duplicates:
            lines.append(
                f"  {pair.keep} ~ {pair.drop} ({pair.kind} {pair.similarity:.2f}):"
                f" {pair.keep_title} / {pair.drop_title}"
            )
        lines += _more(digest, "duplicates", len(digest.duplicates))
    if digest.fading:
        lines += ["", f"Fading within {digest.days} days ({digest.totals['fading']})"]
        for f in digest.fading:
            lines.append(f"  {f.slug} → {f.to_state.value} on {f.due_at:%Y-%m-%d}: {f.title}")
        lines += _more(digest, "fading", len(digest.fading))
    if digest.trends is not None:
        lines += ["", digest.trends.title, *(f"  {line}" for line in digest.trends.lines)]
    if digest.notes:
        lines += ["", *(f"Note: {note}" for note in digest.notes)]
    return "\n".join(lines) + "\n"
