"""The supersede report (issue 16): the chain of decisions per entity — what replaced what,
when, who decided (auto / user / digest) and why — from the graph's SUPERSEDES edges.

A decision belongs to the entity it was judged about (the edge's `entity_id`). One made by
hand names no entity: it belongs to the entities both memories mention that the older memory's
title names ("Use React for the storefront" → React, not the Tailwind both also mention), else
to every entity both mention, else to "no shared entity".

The edges are the active supersedes and the candidates waiting for a person; rejected and
undone decisions stay as history in the newer memory's file (its `supersede_decisions`), not
in the graph, and are not listed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from memoryd.governance.trends import ROW_LIMIT, SupersedeEvent, supersede_event
from memoryd.graph.store import GraphStore
from memoryd.models import Timestamp, format_ts, to_utc

NO_ENTITY = "no shared entity"


class EntityChain(BaseModel):
    """The supersede decisions about one entity, oldest first."""

    entity_id: str | None
    """None for the decisions whose memories share no entity."""
    name: str
    type: str | None = None
    decisions: list[SupersedeEvent] = Field(default_factory=list)


class SupersedeReport(BaseModel):
    """`memoryd report supersedes`, `/v1/reports/supersedes`."""

    generated_at: Timestamp
    since: Timestamp | None = None
    entity: str | None = None
    """The entity the report is limited to (its id), when one was asked for."""
    scope_hash: str | None = None
    decisions: int = 0
    """How many decisions the report holds (one may be listed under several entities)."""
    chains: list[EntityChain] = Field(default_factory=list)
    """Most recently decided first."""

    def markdown(self) -> str:
        """The report as markdown (`memoryd report supersedes --format md`)."""
        return render_markdown(self)


def supersede_report(
    graph: GraphStore,
    now: datetime,
    *,
    since: datetime | None = None,
    entity_id: str | None = None,
    scope_hash: str | None = None,
) -> SupersedeReport:
    """The report of the decisions made since `since` (all when None), about `entity_id`
    (every entity when None), in one scope or all."""
    rows = graph.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory)"
        " WHERE ($since IS NULL OR r.decided_at >= $since)"
        " AND ($scope IS NULL OR n.scope_hash = $scope)"
        " RETURN n.slug, n.title, o.slug, o.title, r.entity_id, r.decided_at, r.decided_by,"
        " r.confidence, r.reason, r.status, r.judge",
        {"since": since, "scope": scope_hash},
        limit=ROW_LIMIT,
    ).rows
    events = [supersede_event(row) for row in rows]
    unnamed = sorted({slug for e in events if not e.entity_id for slug in (e.newer, e.older)})
    mentions: dict[str, set[str]] = defaultdict(set)
    mentioned: dict[str, str] = {}
    if unnamed:
        for slug, eid, name in graph.cypher(
            "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) WHERE m.slug IN $slugs"
            " RETURN m.slug, e.id, e.name",
            {"slugs": unnamed},
            limit=ROW_LIMIT,
        ).rows:
            mentions[slug].add(eid)
            mentioned[eid] = name
    groups = group(events, mentions, mentioned)
    if entity_id is not None:
        groups = {k: v for k, v in groups.items() if k == entity_id}
    ids = sorted(k for k in groups if k is not None)
    names = {
        eid: (name, kind)
        for eid, name, kind in graph.cypher(
            "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.type",
            {"ids": ids},
            limit=ROW_LIMIT,
        ).rows
    }
    chains = [
        EntityChain(
            entity_id=key,
            name=NO_ENTITY if key is None else names.get(key, _from_id(key))[0],
            type=None if key is None else names.get(key, _from_id(key))[1],
            decisions=decisions,
        )
        for key, decisions in groups.items()
    ]
    chains.sort(key=_chain_order)
    counted = {(d.newer, d.older) for chain in chains for d in chain.decisions}
    return SupersedeReport(
        generated_at=now,
        since=since,
        entity=entity_id,
        scope_hash=scope_hash,
        decisions=len(counted),
        chains=chains,
    )


def group(
    events: Sequence[SupersedeEvent],
    mentions: Mapping[str, set[str]],
    names: Mapping[str, str],
) -> dict[str | None, list[SupersedeEvent]]:
    """Each decision under its entities (see the module docstring), oldest first. `mentions`:
    slug → the entity ids it mentions; `names`: entity id → name."""
    groups: dict[str | None, list[SupersedeEvent]] = defaultdict(list)
    for event in events:
        if event.entity_id:
            keys: list[str | None] = [event.entity_id]
        else:
            shared = mentions.get(event.newer, set()) & mentions.get(event.older, set())
            titled = {e for e in shared if _names(names.get(e, ""), event.older_title)}
            keys = list(sorted(titled or shared)) or [None]
        for key in keys:
            groups[key].append(event)
    for decisions in groups.values():
        decisions.sort(key=lambda d: (_at(d), d.newer, d.older))
    return dict(groups)


def _names(name: str, title: str) -> bool:
    """Whether `title` names the entity `name` as a word of its own."""
    if not name.strip():
        return False
    return re.search(rf"(?<!\w){re.escape(name.casefold())}(?!\w)", title.casefold()) is not None


def _at(event: SupersedeEvent) -> datetime:
    return to_utc(event.decided_at) if event.decided_at else datetime.min.replace(tzinfo=UTC)


def _chain_order(chain: EntityChain) -> tuple[bool, float, str]:
    latest = max(
        (to_utc(d.decided_at).timestamp() for d in chain.decisions if d.decided_at), default=0
    )
    return (chain.entity_id is None, -latest, chain.name.casefold())


def _from_id(entity_id: str) -> tuple[str, str | None]:
    """`entity:library:React` → ("React", "library"), for an entity no longer in the graph."""
    parts = entity_id.split(":", 2)
    if len(parts) == 3 and parts[0] == "entity":
        return parts[2], parts[1]
    return entity_id, None


def render_markdown(report: SupersedeReport) -> str:
    """The report as markdown: one section per entity, one line per decision."""
    what = f"about `{report.entity}`" if report.entity else "about every entity"
    since = f" since {format_ts(report.since)}" if report.since else ""
    lines = [
        "# Supersede report",
        "",
        f"{report.decisions} decision{'' if report.decisions == 1 else 's'} {what}{since}"
        f" (generated {format_ts(report.generated_at)}).",
    ]
    if not report.chains:
        lines += ["", "No supersede decision was made in that time."]
    for chain in report.chains:
        kind = f" ({chain.type})" if chain.type else ""
        lines += ["", f"## {chain.name}{kind}", ""]
        for d in chain.decisions:
            when = format_ts(d.decided_at)[:10] if d.decided_at else "undated"
            verb = "replaced" if d.status == "active" else "may replace (candidate)"
            why = d.reason or d.judge or "no reason recorded"
            judge = f", {d.judge}" if d.judge and d.reason else ""
            lines.append(
                f"- {when}: **{_md(d.newer_title)}** (`{d.newer}`) {verb}"
                f" **{_md(d.older_title)}** (`{d.older}`); decided by {d.decided_by},"
                f" confidence {d.confidence:.2f}{judge}: {_md(why)}"
            )
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """User text on one markdown line: no line breaks, emphasis markers shown as written."""
    return " ".join(text.split()).replace("*", r"\*").replace("_", r"\_")
