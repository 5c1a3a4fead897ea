"""The identity profile's history in governance.db: each version of profile/identity.md with
its diff and sources, and the periodic change reports (governance/profile.py writes them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from memoryd.governance.store.base import StoreBase, _instant, _parse_instant


class ProfileVersion(BaseModel):
    """One version of profile/identity.md: its text, the diff from the one before, and what
    it rests on (`sources`: memory slugs, `entities`: entity ids)."""

    model_config = ConfigDict(frozen=True)

    version: int
    written_at: datetime
    trigger: str
    """weekly_cron, manual or rollback."""
    written_by: str
    """`compiled` (without an LLM), `llm:<provider>/<model>`, or `rollback of vN`."""
    content_md: str
    diff_from_prev: str = ""
    change_summary: str = ""
    sources_count: int = 0
    window_start: datetime | None = None
    window_end: datetime | None = None
    sources: list[str] = []
    entities: list[str] = []


class ProfileChangeReport(BaseModel):
    """One month's profile change report (profile/change-reports/YYYY-MM.md)."""

    model_config = ConfigDict(frozen=True)

    period: str
    generated_at: datetime
    content_md: str
    versions_count: int
    supersedes_count: int
    entities_added: int
    entities_dropped: int


_PROFILE_COLUMNS = (
    "version_num, written_at, trigger, written_by, content_md, diff_from_prev, change_summary,"
    " sources_count, sources_window_start, sources_window_end, sources, entities"
)
_REPORT_COLUMNS = (
    "period, generated_at, content_md, versions_count, supersedes_count, entities_added,"
    " entities_dropped"
)


def _profile_version(row: Sequence[object]) -> ProfileVersion:
    number, written, trigger, by, content, diff, summary, count, start, end, sources, entities = row
    return ProfileVersion(
        version=int(str(number)),
        written_at=_parse_instant(str(written)),
        trigger=str(trigger),
        written_by=str(by),
        content_md=str(content),
        diff_from_prev=str(diff or ""),
        change_summary=str(summary or ""),
        sources_count=int(str(count or 0)),
        window_start=None if start is None else _parse_instant(str(start)),
        window_end=None if end is None else _parse_instant(str(end)),
        sources=json.loads(str(sources or "[]")),
        entities=json.loads(str(entities or "[]")),
    )


class ProfileHistory(StoreBase):
    """The profile versions and change reports, for `GovernanceStore`."""

    # -- the identity profile (governance/profile.py) -----------------------------------------
    def add_profile_version(
        self,
        *,
        written_at: datetime,
        trigger: str,
        written_by: str,
        content_md: str,
        diff_from_prev: str,
        change_summary: str,
        window: tuple[datetime | None, datetime | None],
        sources: Sequence[str],
        entities: Sequence[str],
    ) -> ProfileVersion:
        """Append the next version (numbered one past the last) and return it."""
        with self._transaction("record a profile version in") as conn:
            row = conn.execute("SELECT max(version_num) FROM profile_versions").fetchone()
            number = int(row[0] or 0) + 1
            conn.execute(
                "INSERT INTO profile_versions (version_num, written_at, trigger, written_by,"
                " content_md, diff_from_prev, change_summary, sources_count,"
                " sources_window_start, sources_window_end, sources, entities)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    number,
                    _instant(written_at),
                    trigger,
                    written_by,
                    content_md,
                    diff_from_prev,
                    change_summary,
                    len(sources),
                    None if window[0] is None else _instant(window[0]),
                    None if window[1] is None else _instant(window[1]),
                    json.dumps(list(sources), ensure_ascii=False),
                    json.dumps(list(entities), ensure_ascii=False),
                ),
            )
        found = self.profile_version(number)
        assert found is not None
        return found

    def profile_version(self, number: int) -> ProfileVersion | None:
        """One version by number, or None."""
        return next(iter(self._profile_versions("WHERE version_num = ?", (number,))), None)

    def latest_profile_version(self, *, before: datetime | None = None) -> ProfileVersion | None:
        """The newest version (written before `before`, when given), or None."""
        if before is None:
            rows = self._profile_versions("ORDER BY version_num DESC LIMIT 1", ())
        else:
            rows = self._profile_versions(
                "WHERE written_at < ? ORDER BY version_num DESC LIMIT 1", (_instant(before),)
            )
        return next(iter(rows), None)

    def profile_versions(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 1000,
    ) -> list[ProfileVersion]:
        """Versions newest first; `since` inclusive, `until` exclusive."""
        clauses, params = [], []
        if since is not None:
            clauses.append("written_at >= ?")
            params.append(_instant(since))
        if until is not None:
            clauses.append("written_at < ?")
            params.append(_instant(until))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._profile_versions(
            f"{where} ORDER BY version_num DESC LIMIT ?", (*params, limit)
        )

    def _profile_versions(self, tail: str, params: Sequence[object]) -> list[ProfileVersion]:
        with self._connection("read profile versions from") as conn:
            rows = conn.execute(
                f"SELECT {_PROFILE_COLUMNS} FROM profile_versions {tail}", params
            ).fetchall()
        return [_profile_version(row) for row in rows]

    def save_profile_report(self, report: ProfileChangeReport) -> None:
        """Write the report of its month, replacing one written before."""
        with self._transaction("record a profile report in") as conn:
            conn.execute(
                f"INSERT INTO profile_change_reports ({_REPORT_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (period) DO UPDATE SET"
                " generated_at = excluded.generated_at, content_md = excluded.content_md,"
                " versions_count = excluded.versions_count,"
                " supersedes_count = excluded.supersedes_count,"
                " entities_added = excluded.entities_added,"
                " entities_dropped = excluded.entities_dropped",
                (
                    report.period,
                    _instant(report.generated_at),
                    report.content_md,
                    report.versions_count,
                    report.supersedes_count,
                    report.entities_added,
                    report.entities_dropped,
                ),
            )

    def profile_reports(self, *, period: str | None = None) -> list[ProfileChangeReport]:
        """The monthly reports, newest month first (one month's with `period`)."""
        where, params = ("WHERE period = ?", (period,)) if period else ("", ())
        with self._connection("read profile reports from") as conn:
            rows = conn.execute(
                f"SELECT {_REPORT_COLUMNS} FROM profile_change_reports {where}"
                " ORDER BY period DESC",
                params,
            ).fetchall()
        return [
            ProfileChangeReport(
                period=str(p),
                generated_at=_parse_instant(str(g)),
                content_md=str(c),
                versions_count=int(v or 0),
                supersedes_count=int(s or 0),
                entities_added=int(a or 0),
                entities_dropped=int(d or 0),
            )
            for p, g, c, v, s, a, d in rows
        ]
