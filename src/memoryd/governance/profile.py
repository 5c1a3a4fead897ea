"""The identity profile (DESIGN §7, seeds/001): `profile/identity.md`, a short portrait of the
developer every agent can read, rewritten weekly, every version kept with its diff, and a
monthly change report.

Two ways to write it. With an LLM configured, the LLM rewrites the current identity from the
long-term memories written since the last version and the most-recalled ones (prompt
`rewrite_identity`). Without one, it is compiled: the current (not superseded, not forgotten)
preferences and decisions grouped by the kind of entity they are about, each citing its slug,
labelled as compiled without an LLM. Sensitive memories never go in either way
(`governance.analyze.sensitive`, the one check; the service applies it while it collects).

The compiled text depends only on the memories, never on the time it was compiled, so a week
without changes writes no new version. This module holds the rules and the text; governance.db
holds the versions (`GovernanceStore.add_profile_version`), and the service
(`domain/profiling.py`) collects the sources and writes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from memoryd.errors import InvalidInput, MemorydError, NotFound
from memoryd.governance.store import ProfileChangeReport, ProfileVersion
from memoryd.llm.base import LLMProvider
from memoryd.llm.extract import IdentityRewrite, rewrite_identity
from memoryd.models import to_utc
from memoryd.vault import atomic_write

IDENTITY_FILE = Path("profile") / "identity.md"
REPORTS_DIR = Path("profile") / "change-reports"
COMPILED = "compiled"
"""`written_by` of a version compiled without an LLM."""
COMPILED_LABEL = (
    "_Compiled by memoryd without an LLM from {n} current {what}; each line cites its memory._"
)
PROFILE_TYPES = ("preference", "decision")
"""What the compiled profile is made of."""
KIND_ORDER = (
    ("tool", "Tools"),
    ("library", "Libraries"),
    ("project", "Projects"),
    ("concept", "Concepts"),
    ("organization", "Organizations"),
    ("person", "People"),
    ("place", "Places"),
)
OTHER_KIND = "General"
LINE_CHARS = 220
"""At most this much of a memory's body follows its title in the compiled profile."""
LLM_WINDOW_LIMIT = 60
LLM_RECALLED_LIMIT = 20
LLM_BODY_CHARS = 800
FIRST_WINDOW = timedelta(days=7)
"""The window of a first LLM rewrite when no memory is older (the weekly period)."""
MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")
MAX_VERSION = 2**62
"""Larger version numbers cannot exist (SQLite's integers): unknown, not an overflow."""
Trigger = Literal["weekly_cron", "manual", "rollback"]


@dataclass(frozen=True)
class Source:
    """One memory a profile version rests on (never a sensitive one)."""

    slug: str
    type: str
    title: str
    body: str
    scope_hash: str
    created_at: datetime
    recall_count: int = 0
    entities: tuple[tuple[str, str, str], ...] = ()
    """(id, type, name) of the entities it mentions."""

    @property
    def kind(self) -> str:
        """The section of the compiled profile: the first entity kind in KIND_ORDER it
        mentions (a tool before a library before a project …), else General."""
        kinds = {kind for _, kind, _ in self.entities}
        return next((title for kind, title in KIND_ORDER if kind in kinds), OTHER_KIND)


@dataclass
class ProfileJob:
    """One rewrite in three steps (collect as a read, the LLM off the writer, write), as the
    daemon runs it: what was collected, and what the LLM answered or why it failed."""

    trigger: Trigger
    started: datetime
    written_by: str
    sources: list[Source]
    current: str
    window: tuple[datetime | None, datetime]
    entities: list[str] = field(default_factory=list)
    """What the current non-sensitive preferences and decisions are about: what the monthly
    report counts as added to or dropped from the profile."""
    rewrite: IdentityRewrite | None = None
    error: MemorydError | None = None
    scheduled: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def use_llm(self) -> bool:
        return self.written_by != COMPILED


class ProfileRewrite(BaseModel):
    """What a rewrite (or rollback) did: the version that now stands, and whether it is new."""

    written: bool = Field(description="false when the content was identical: no new version")
    version: ProfileVersion
    message: str
    path: str

    @property
    def counts(self) -> dict[str, int | bool]:
        """The run's outcome as the schedule records it."""
        return {
            "version": self.version.version,
            "written": self.written,
            "sources": self.version.sources_count,
        }


class ProfileDiff(BaseModel):
    """A unified diff between two versions."""

    from_version: int
    to_version: int
    diff: str


class ProfileReport(ProfileChangeReport):
    """A monthly change report as returned: the stored row, where its file is, and whether
    the month had anything to report."""

    path: str
    empty: bool


# --------------------------------------------------------------------------- compiling


def _first_sentences(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[:limit]
    end = max(head.rfind(". "), head.rfind("。"), head.rfind("! "), head.rfind("? "))
    return head[: end + 1] if end > limit // 3 else head.rstrip() + "…"


def _line(source: Source) -> str:
    body = _first_sentences(source.body, LINE_CHARS)
    text = source.title if not body or body == source.title else f"{source.title}: {body}"
    named = sorted({name for _, _, name in source.entities}, key=str.lower)
    about = f"; {', '.join(named)}" if named else ""
    return f"- {text} ({source.type}, {source.created_at:%Y-%m-%d}{about}) [{source.slug}]"


def compile_identity(sources: Sequence[Source]) -> str:
    """The deterministic profile: current preferences and decisions grouped by entity kind,
    each line citing its slug. The same memories always give the same text."""
    what = "preferences and decisions"
    lines = ["# Identity", "", COMPILED_LABEL.format(n=len(sources), what=what), ""]
    if not sources:
        lines.append("No current preference or decision is recorded yet.")
        return "\n".join(lines) + "\n"
    groups: dict[str, list[Source]] = {}
    for source in sources:
        groups.setdefault(source.kind, []).append(source)
    order = [title for _, title in KIND_ORDER] + [OTHER_KIND]
    for title in order:
        members = groups.get(title)
        if not members:
            continue
        members.sort(key=lambda s: (PROFILE_TYPES.index(s.type), s.created_at, s.slug))
        lines += [f"## {title}", "", *(_line(s) for s in members), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def memories_text(sources: Sequence[Source]) -> str:
    """The memories as the LLM reads them: one entry each, newest first."""
    entries = []
    for source in sorted(sources, key=lambda s: (s.created_at, s.slug), reverse=True):
        named = ", ".join(sorted({name for _, _, name in source.entities}, key=str.lower))
        recalled = f", recalled {source.recall_count}x" if source.recall_count else ""
        head = f"- [{source.type}, {source.created_at:%Y-%m-%d}{recalled}] {source.title}"
        about = f" (about: {named})" if named else ""
        body = _first_sentences(source.body, LLM_BODY_CHARS)
        entries.append(f"{head}{about}\n  {body}" if body else head + about)
    return "\n".join(entries) or "(no new memories)"


def ask_llm(provider: LLMProvider, job: ProfileJob) -> None:
    """The LLM's rewrite into `job.rewrite`, or its failure into `job.error` (never raised:
    the write step decides what a failure means)."""
    period = f"{_day(job.window[0]) if job.window[0] else 'the start'} to {_day(job.window[1])}"
    try:
        job.rewrite = rewrite_identity(
            provider,
            current_identity=job.current,
            memories=memories_text(job.sources),
            period=period,
        )
    except MemorydError as exc:
        job.error = exc


def normalised(markdown: str) -> str:
    """One trailing newline, no trailing blanks: a rewrite that differs only there is the same."""
    return "\n".join(line.rstrip() for line in markdown.strip().splitlines()) + "\n"


def unified_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    """`diff -u` of two versions (difflib)."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=old_label,
            tofile=new_label,
        )
    )


def change_summary(previous: ProfileVersion | None, sources: Sequence[Source]) -> str:
    """What changed in the compiled profile: the memories added and dropped, by title."""
    if previous is None:
        return f"First version: {len(sources)} memories."
    before = set(previous.sources)
    now = {s.slug for s in sources}
    added = [s for s in sources if s.slug not in before]
    dropped = sorted(before - now)
    parts = []
    if added:
        parts.append("Added: " + "; ".join(f"{s.title} [{s.slug}]" for s in added[:10]))
        if len(added) > 10:
            parts[-1] += f"; and {len(added) - 10} more"
    if dropped:
        parts.append("Dropped (superseded, forgotten or deleted): " + "; ".join(dropped[:10]))
        if len(dropped) > 10:
            parts[-1] += f"; and {len(dropped) - 10} more"
    return "\n".join(parts) or "Reworded; the same memories."


def write_identity(home: Path, content: str) -> Path:
    """Write identity.md atomically (whoever reads it sees one version, whole)."""
    path = home / IDENTITY_FILE
    atomic_write(path, content.encode("utf-8"))
    return path


def no_profile_yet() -> NotFound:
    return NotFound(
        "no identity profile yet", hint="`memoryd profile rewrite` writes the first version"
    )


def check_version(number: int) -> int:
    """`number` when it could name a version; NotFound (like any unknown one) when not."""
    if not 1 <= number <= MAX_VERSION:
        raise unknown_version(number)
    return number


def unknown_version(number: int) -> NotFound:
    return NotFound(
        f"no profile version {number}", hint="`memoryd profile history` lists the versions"
    )


# --------------------------------------------------------------------------- months


def parse_month(text: str) -> tuple[datetime, datetime]:
    """`YYYY-MM` → its first instant and the first instant of the next month (UTC)."""
    match = MONTH.match(text.strip())
    if match is None or not 1 <= int(match[2]) <= 12 or not 1 <= int(match[1]) <= 9998:
        raise InvalidInput(f"month {text!r} is not YYYY-MM", hint="give a month such as 2026-03")
    start = datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC)
    return start, _next_month(start)


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1)


def previous_month(now: datetime) -> str:
    """The last complete month before `now` (what the report on the 1st is about)."""
    first = to_utc(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last = first - timedelta(days=1)
    return f"{last.year:04d}-{last.month:02d}"


def check_month_begun(period: str, start: datetime, now: datetime) -> None:
    """A month that has not begun has nothing to report: NotFound, not an empty report."""
    if start > to_utc(now):
        raise NotFound(
            f"month {period} has not begun: there is nothing to report yet",
            hint=f"report a past month, such as {previous_month(now)}",
        )


@dataclass(frozen=True)
class SupersedeEvent:
    """A decision of the month that replaced another (titles only of non-sensitive memories)."""

    decided_at: datetime
    newer: str
    older: str
    decided_by: str


def render_report(
    period: str,
    now: datetime,
    versions: Sequence[ProfileVersion],
    supersedes: Sequence[SupersedeEvent],
    added: Sequence[str],
    dropped: Sequence[str],
) -> str:
    """The month's change report as markdown; a month with nothing says so in one line."""
    finished = to_utc(now) >= _next_month(parse_month(period)[0])
    lines = [f"# Profile changes, {period}", ""]
    if not finished:
        lines += [f"_The month is not over: this covers it up to {_day(now)}._", ""]
    if not (versions or supersedes or added or dropped):
        lines.append(
            f"No profile changes in {period}: no identity version was written, no decision was"
            " superseded, and no entity came or went."
        )
        return "\n".join(lines) + "\n"
    lines += [
        "## Summary",
        "",
        f"- identity versions: {len(versions)}",
        f"- supersedes: {len(supersedes)}",
        f"- entities added: {len(added)}, dropped: {len(dropped)}",
        "",
    ]
    if versions:
        lines += ["## Identity versions", ""]
        for v in sorted(versions, key=lambda v: v.version):
            summary = " ".join(v.change_summary.split()) or "no summary"
            lines.append(
                f"- v{v.version}, {_day(v.written_at)} ({v.trigger}, {v.written_by}): {summary}"
            )
        lines.append("")
    if supersedes:
        lines += ["## Decisions superseded", ""]
        for event in sorted(supersedes, key=lambda e: e.decided_at):
            lines.append(
                f"- {_day(event.decided_at)}: {event.newer} replaced {event.older}"
                f" (decided by {event.decided_by})"
            )
        lines.append("")
    if added or dropped:
        lines += ["## Entities", ""]
        if added:
            lines.append("- added: " + ", ".join(entity_label(e) for e in added))
        if dropped:
            lines.append("- dropped: " + ", ".join(entity_label(e) for e in dropped))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def entity_label(entity_id: str) -> str:
    """`entity:library:Solid` → `Solid (library)`."""
    parts = entity_id.split(":", 2)
    return f"{parts[2]} ({parts[1]})" if len(parts) == 3 else entity_id


def entity_changes(before: Iterable[str], after: Iterable[str]) -> tuple[list[str], list[str]]:
    """Entities in the profile at the end of the month and not at its start, and back."""
    start, end = set(before), set(after)
    return sorted(end - start), sorted(start - end)


def write_report(home: Path, period: str, content: str) -> Path:
    path = home / REPORTS_DIR / f"{period}.md"
    atomic_write(path, content.encode("utf-8"))
    return path


def _day(value: datetime) -> str:
    return to_utc(value).strftime("%Y-%m-%d")
