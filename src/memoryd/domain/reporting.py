"""Trends and the supersede report through the service (the arithmetic lives in
`memoryd.governance.trends` and `.reports`; these are the thin reads)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.domain.entities import Entities
from memoryd.models import to_utc

if TYPE_CHECKING:  # imported where used: an open that never reports does not load them
    from memoryd.governance import reports
    from memoryd.governance import trends as trend_stats


class Reporting(Entities):
    """What changed lately, and how decisions replaced each other (reads only)."""

    def trends(self, days: int = 7, scope: Path | str | None = None) -> trend_stats.Trends:
        """Top triggers, rising entities, recent supersedes, hot recalls and mentions per
        day of the top entities, over the last `days` days (today included) as of `clock`."""
        from memoryd.governance import trends as trend_stats

        return trend_stats.trends(
            self.graph,
            self.governance,
            self.clock(),
            days=days,
            scope_hash=self.scope_hash_of(scope),
        )

    def supersede_report(
        self,
        *,
        since: datetime | None = None,
        entity: str | None = None,
        scope: Path | str | None = None,
    ) -> reports.SupersedeReport:
        """The chain of supersede decisions per entity since `since`; `entity` (a name,
        alias or id; NotFound when none has it) limits it to one."""
        from memoryd.governance import reports

        entity_id = self.resolve_entity(entity).id if entity is not None else None
        return reports.supersede_report(
            self.graph,
            self.clock(),
            since=to_utc(since) if since is not None else None,
            entity_id=entity_id,
            scope_hash=self.scope_hash_of(scope),
        )
