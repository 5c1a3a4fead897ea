"""The identity profile through the service: rewrite, show, history, diff, rollback and the
monthly report (the text and the rules live in `memoryd.governance.profile`; these methods
collect the memories, keep sensitive ones out and write)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from memoryd.domain.core import ServiceCore
from memoryd.errors import ConfigError, ExtractionFailed, InvalidInput, MemorydError, RateLimited
from memoryd.governance.store import ProfileChangeReport, ProfileVersion
from memoryd.models import Memory, ScopeInfo, to_utc

if TYPE_CHECKING:
    from memoryd.governance.profile import (
        ProfileDiff,
        ProfileJob,
        ProfileReport,
        ProfileRewrite,
        Source,
        SupersedeEvent,
    )

logger = logging.getLogger(__name__)

_CURRENT = (
    "MATCH (m:Memory) WHERE m.type <> 'session' AND m.decay_state IN ['alive', 'dim']"
    " AND NOT EXISTS { MATCH (:Memory)-[s:SUPERSEDES]->(m) WHERE s.status = 'active' }"
    " RETURN m.slug, m.type, m.created_at, m.updated_at, m.recall_count, m.path"
)
"""Every current long-term memory: not superseded, not forgotten (decay never dims long-term
memories, but a restored one may be dim). Filtered by time in Python: the simulated clock of
the tests and `created_at` of imported memories both count."""
_LLM_ERRORS = (ExtractionFailed, RateLimited, ConfigError)
MAX_COMPILED = 300
"""The compiled profile lists at most this many memories, the newest (its entities count all
of them)."""


def _instant(value: object) -> datetime:
    """A graph timestamp (the store answers ISO text, or a datetime) in UTC."""
    if isinstance(value, datetime):
        return to_utc(value)
    return to_utc(datetime.fromisoformat(str(value).replace("Z", "+00:00")))


class Row(NamedTuple):
    """One current long-term memory as the graph lists it."""

    slug: str
    type: str
    created_at: datetime
    updated_at: datetime
    recall_count: int
    path: str | None


def _most_recalled(row: Row) -> tuple[int, str]:
    return (-row.recall_count, row.slug)


class Profiling(ServiceCore):
    """The identity profile: profile/identity.md, its versions and its monthly reports."""

    # -- collecting -----------------------------------------------------------------------
    def _current_rows(self, now: datetime) -> list[Row]:
        """The current long-term memories as of `now`, newest first."""
        rows = self.graph.cypher(_CURRENT, {}, limit=10_000_000).rows
        found = []
        for slug, type_, created, updated, recalled, path in rows:
            created_at = _instant(created)
            if created_at > now:
                continue  # not written yet as of `now`
            updated_at = _instant(updated) if updated is not None else created_at
            found.append(
                Row(str(slug), str(type_), created_at, updated_at, int(recalled or 0), path)
            )
        found.sort(key=lambda r: (r.created_at, r.slug), reverse=True)
        return found

    def _read_source(self, row: Row) -> Memory | None:
        """The memory of `row` from its file (the path the graph holds: one graph query per
        memory would cost more than the whole rewrite), or None when it cannot be read."""
        try:
            memory = self.vault.read(self._in_home(row.path)) if row.path else self.get(row.slug)
        except MemorydError as exc:
            logger.warning("identity profile: %s left out: %s", row.slug, exc.message)
            return None
        return memory if memory.meta.slug == row.slug else None

    def _sources(self, rows: list[Row]) -> list[Source]:
        """The memories as profile sources, read from their files; a sensitive one (by its
        own flag or its scope's: `governance.analyze.sensitive`) is left out."""
        from memoryd.governance.analyze import sensitive
        from memoryd.governance.profile import Source

        if not rows:
            return []
        mentions: dict[str, list[tuple[str, str, str]]] = {}
        found = self.graph.cypher(
            "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) WHERE m.slug IN $slugs"
            " RETURN m.slug, e.id, e.type, e.name ORDER BY e.id",
            {"slugs": [r.slug for r in rows]},
            limit=10_000_000,
        ).rows
        for slug, entity, kind, name in found:
            mentions.setdefault(str(slug), []).append((str(entity), str(kind), str(name)))
        scopes: dict[str, ScopeInfo | None] = {}
        sources = []
        for row in rows:
            memory = self._read_source(row)
            if memory is None:
                continue
            scope_hash = memory.meta.scope_hash
            if scope_hash not in scopes:
                scopes[scope_hash] = self.vault.read_scope(scope_hash)
            if sensitive(memory, scopes[scope_hash]):
                continue
            sources.append(
                Source(
                    slug=row.slug,
                    type=memory.meta.type.value,
                    title=memory.meta.title,
                    body=memory.body,
                    scope_hash=scope_hash,
                    created_at=to_utc(memory.meta.created_at),
                    recall_count=memory.meta.recall_count,
                    entities=tuple(mentions.get(row.slug, ())),
                )
            )
        return sources

    def prepare_profile(self, *, compiled: bool = False, scheduled: bool = False) -> ProfileJob:
        """Collect what a rewrite rests on (a read): the current preferences and decisions
        (compiled), or the long-term memories since the last version and the most recalled
        ones, with the current identity (the LLM)."""
        from memoryd.governance import profile
        from memoryd.governance.profile import COMPILED, PROFILE_TYPES, ProfileJob

        now = to_utc(self.clock())
        rows = self._current_rows(now)
        latest = self.governance.latest_profile_version()
        use_llm = self.llm is not None and not compiled
        stance = self._sources([r for r in rows if r.type in PROFILE_TYPES])
        entities = sorted({e for s in stance for e, _, _ in s.entities})
        if not use_llm:
            sources = stance[:MAX_COMPILED]
            start = min((s.created_at for s in sources), default=None)
            by = COMPILED
        else:
            since = latest.window_end if latest is not None else None
            recent = [r for r in rows if since is None or max(r.created_at, r.updated_at) > since]
            recent = recent[: profile.LLM_WINDOW_LIMIT]
            taken = {r.slug for r in recent}
            recalled = sorted((r for r in rows if r.recall_count > 0), key=_most_recalled)
            extra = [r for r in recalled if r.slug not in taken][: profile.LLM_RECALLED_LIMIT]
            sources = self._sources(recent + extra)
            first = min((s.created_at for s in sources), default=now - profile.FIRST_WINDOW)
            start = since or first
            assert self.llm is not None
            by = f"llm:{self.llm.name}/{self.llm.model}"
        current = latest.content_md if latest is not None else ""
        return ProfileJob(
            trigger="weekly_cron" if scheduled else "manual",
            started=now,
            written_by=by,
            sources=sources,
            current=current,
            window=(start, now),
            entities=entities,
            scheduled=scheduled,
        )

    def profile_llm(self, job: ProfileJob) -> None:
        """The LLM's rewrite (no store is touched: the daemon runs it off its writer)."""
        from memoryd.governance import profile

        if job.use_llm and self.llm is not None and job.rewrite is None and job.error is None:
            profile.ask_llm(self.llm, job)

    # -- writing --------------------------------------------------------------------------
    def apply_profile(self, job: ProfileJob) -> ProfileRewrite:
        """Write the new version (a write). A failed LLM call writes nothing: the previous
        profile stays, and a scheduled run records the failure and is retried."""
        from memoryd.governance import schedule

        self._require_writable("rewrite the identity profile")
        if job.scheduled:
            return schedule.recorded(
                self.governance, "identity", job.started, lambda: self._write_profile(job)
            )
        return self._write_profile(job)

    def _write_profile(self, job: ProfileJob) -> ProfileRewrite:
        from memoryd.governance import profile

        self.profile_llm(job)
        if job.error is not None:
            cls = type(job.error) if type(job.error) in _LLM_ERRORS else ExtractionFailed
            why = f"{job.error.hint}; " if job.error.hint else ""
            raise cls(
                f"the identity profile was not rewritten: {job.error.message}",
                hint=f"{why}the previous version stays (the weekly job retries within the hour);"
                " `memoryd profile rewrite --compiled` writes one without the LLM",
            )
        latest = self.governance.latest_profile_version()
        if job.rewrite is not None:
            content = profile.normalised(job.rewrite.identity_markdown)
            summary = job.rewrite.change_summary.strip() or "No change summary given."
        else:
            content = profile.compile_identity(job.sources)
            summary = profile.change_summary(latest, job.sources)
        return self._store_version(
            latest,
            content,
            trigger=job.trigger,
            written_by=job.written_by,
            summary=summary,
            window=job.window,
            sources=[s.slug for s in job.sources],
            entities=job.entities,
            now=job.started,
        )

    def _store_version(
        self,
        latest: ProfileVersion | None,
        content: str,
        *,
        trigger: str,
        written_by: str,
        summary: str,
        window: tuple[datetime | None, datetime | None],
        sources: list[str],
        entities: list[str],
        now: datetime,
    ) -> ProfileRewrite:
        from memoryd.governance import profile
        from memoryd.governance.profile import ProfileRewrite

        path = self.home / profile.IDENTITY_FILE
        if latest is not None and latest.content_md == content:
            if not path.is_file() or path.read_text("utf-8") != content:
                profile.write_identity(self.home, content)
            return ProfileRewrite(
                written=False,
                version=latest,
                message=f"identity unchanged since version {latest.version}: no new version",
                path=str(path),
            )
        number = latest.version + 1 if latest is not None else 1
        diff = profile.unified_diff(
            latest.content_md if latest is not None else "",
            content,
            f"identity.md v{latest.version}" if latest is not None else "/dev/null",
            f"identity.md v{number}",
        )
        profile.write_identity(self.home, content)
        version = self.governance.add_profile_version(
            written_at=now,
            trigger=trigger,
            written_by=written_by,
            content_md=content,
            diff_from_prev=diff,
            change_summary=summary,
            window=window,
            sources=sources,
            entities=entities,
        )
        return ProfileRewrite(
            written=True,
            version=version,
            message=f"wrote identity version {version.version} ({written_by})",
            path=str(path),
        )

    # -- the commands ---------------------------------------------------------------------
    def profile_rewrite(self, *, compiled: bool = False, scheduled: bool = False) -> ProfileRewrite:
        """Rewrite profile/identity.md now: by the LLM when one is configured (unless
        `compiled`), else compiled; `scheduled` runs it as the weekly job (recorded)."""
        self._require_writable("rewrite the identity profile")
        job = self.prepare_profile(compiled=compiled, scheduled=scheduled)
        self.profile_llm(job)
        return self.apply_profile(job)

    def profile_show(self, version: int | None = None) -> ProfileVersion:
        """The current version of identity.md, or version `version`."""
        from memoryd.governance import profile

        if version is not None:
            found = self.governance.profile_version(profile.check_version(version))
            if found is None:
                raise profile.unknown_version(version)
            return found
        latest = self.governance.latest_profile_version()
        if latest is None:
            raise profile.no_profile_yet()
        return latest

    def profile_history(self, *, limit: int = 50) -> list[ProfileVersion]:
        """The versions, newest first."""
        from memoryd.governance import profile

        if limit < 1:
            raise InvalidInput(f"limit must be at least 1 (got {limit})")
        return self.governance.profile_versions(limit=min(limit, profile.MAX_VERSION))

    def profile_diff(self, from_version: int, to_version: int) -> ProfileDiff:
        """A unified diff from one version to another (either order)."""
        from memoryd.governance import profile
        from memoryd.governance.profile import ProfileDiff

        old, new = self.profile_show(from_version), self.profile_show(to_version)
        return ProfileDiff(
            from_version=from_version,
            to_version=to_version,
            diff=profile.unified_diff(
                old.content_md,
                new.content_md,
                f"identity.md v{from_version}",
                f"identity.md v{to_version}",
            ),
        )

    def profile_rollback(self, version: int) -> ProfileRewrite:
        """Make version `version`'s text current again, as a new version (history is never
        rewritten). The next compiled rewrite compiles afresh; an LLM rewrites from it."""
        self._require_writable("roll back the identity profile")
        target = self.profile_show(version)
        latest = self.governance.latest_profile_version()
        return self._store_version(
            latest,
            target.content_md,
            trigger="rollback",
            written_by=f"rollback of v{version}",
            summary=f"Rolled back to version {version}.",
            window=(target.window_start, target.window_end),
            sources=target.sources,
            entities=target.entities,
            now=to_utc(self.clock()),
        )

    def profile_report(self, month: str | None = None, *, scheduled: bool = False) -> ProfileReport:
        """Write the change report of `month` (YYYY-MM; default the previous month) to
        profile/change-reports/ and governance.db."""
        from memoryd.governance import profile, schedule
        from memoryd.governance.profile import ProfileReport

        self._require_writable("write a profile report")
        now = to_utc(self.clock())
        period = month.strip() if month else profile.previous_month(now)
        start, end = profile.parse_month(period)
        profile.check_month_begun(period, start, now)

        def build() -> ProfileReport:
            versions = self.governance.profile_versions(since=start, until=end)
            before = self.governance.latest_profile_version(before=start)
            after = self.governance.latest_profile_version(before=end)
            added, dropped = profile.entity_changes(
                before.entities if before else [], after.entities if after else []
            )
            events = self._supersedes_between(start, min(end, now))
            content = profile.render_report(period, now, versions, events, added, dropped)
            row = ProfileChangeReport(
                period=period,
                generated_at=now,
                content_md=content,
                versions_count=len(versions),
                supersedes_count=len(events),
                entities_added=len(added),
                entities_dropped=len(dropped),
            )
            self.governance.save_profile_report(row)
            path = profile.write_report(self.home, period, content)
            empty = not (versions or events or added or dropped)
            return ProfileReport(**row.model_dump(), path=str(path), empty=empty)

        if scheduled:
            return schedule.recorded(self.governance, "monthly-report", now, build)
        return build()

    def profile_reports(self) -> list[ProfileChangeReport]:
        """The monthly reports written so far, newest month first."""
        return self.governance.profile_reports()

    def _supersedes_between(self, start: datetime, end: datetime) -> list[SupersedeEvent]:
        from memoryd.governance.profile import SupersedeEvent

        rows = self.graph.cypher(
            "MATCH (n:Memory)-[s:SUPERSEDES]->(o:Memory) WHERE s.status = 'active'"
            " RETURN n.slug, o.slug, s.decided_at, s.decided_by",
            {},
            limit=10_000_000,
        ).rows
        titles: dict[str, str] = {}

        def title(slug: str) -> str:
            if slug not in titles:
                titles[slug] = self._public_title(slug)
            return titles[slug]

        events = []
        for newer, older, decided, by in rows:
            if decided is None or not start <= _instant(decided) < end:
                continue
            events.append(
                SupersedeEvent(_instant(decided), title(str(newer)), title(str(older)), str(by))
            )
        return events

    def _public_title(self, slug: str) -> str:
        """`"Title" [slug]`, or only the slug of a sensitive (or unreadable) memory."""
        from memoryd.governance.analyze import sensitive

        try:
            memory = self.get(slug)
        except MemorydError:
            return f"[{slug}]"
        if sensitive(memory, self.vault.read_scope(memory.meta.scope_hash)):
            return f"a sensitive memory [{slug}]"
        return f'"{memory.meta.title}" [{slug}]'
