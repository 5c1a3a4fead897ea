"""`memoryd demo`: load the shipped demo vault into a data dir and show a few searches.

The data (`memories.yaml`, package data of this module) is what a developer working with AI
coding agents accumulates over a year on two projects, `webshop` and `ingest-pipeline`; part of it
is in Chinese. Each project becomes a plain directory under `<home>/demo-projects/`, so its
memories get their own scope, and everything is recorded through the service like any other
memory. Importing this module does nothing; `run_demo` does the work.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from memoryd.errors import Conflict, InvalidInput
from memoryd.models import RELEVANCE_NOTE, MemoryDraft, MemoryType, RecallHit, to_utc

if TYPE_CHECKING:
    from memoryd.models import Memory
    from memoryd.service import MemoryService

__all__ = [
    "PROJECTS",
    "DemoData",
    "DemoMemory",
    "DemoQuery",
    "DemoQueryResult",
    "DemoReport",
    "load_demo_data",
    "run_demo",
]

DATA_FILE = "memories.yaml"
PROJECTS_DIR = "demo-projects"
PROJECTS: tuple[str, ...] = ("webshop", "ingest-pipeline")
SEARCH_K = 5
DEMO_SPAN = timedelta(days=80)
"""The demo's year is replayed over the 80 days before now (`rebase_dates`): inside the 90
days a session stays alive without a recall (`decay.dim_days`), so no demo session is fading
in the digest, and the last week holds enough for `trends`."""
_DATE_IN_TEXT = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")

Project = Literal["webshop", "ingest-pipeline"]
Source = Literal["claude-code", "codex", "cursor", "manual"]


class DemoMemory(BaseModel):
    """One entry of `memories.yaml`."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    scope: Project
    type: MemoryType
    title: str = Field(min_length=1)
    body: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)
    category: str | None = None
    created_at: datetime
    source: Source
    supersedes: list[str] = Field(default_factory=list)

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return to_utc(value)

    def draft(self, scope_path: Path, supersedes: list[str]) -> MemoryDraft:
        return MemoryDraft(
            type=self.type,
            title=self.title,
            body=self.body,
            scope_path=scope_path,
            source=self.source,
            tags=self.tags,
            triggers=self.triggers,
            category=self.category,
            created_at=self.created_at,
            supersedes=supersedes,
        )


class DemoQuery(BaseModel):
    """One demo search: the text, and the project to restrict it to (None: every project)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)
    scope: Project | None = None
    expect: list[str] = Field(default_factory=list)
    """The keys of the memories that answer it: the demo's top hit must be one of them
    (tests/integration/test_demo.py)."""


class DemoData(BaseModel):
    queries: list[DemoQuery]
    memories: list[DemoMemory]


class DemoQueryResult(BaseModel):
    text: str
    scope: str | None
    hits: list[RecallHit]


class DemoReport(BaseModel):
    """What `run_demo` did: where, what it recorded, what each demo query found."""

    home: Path
    projects: dict[str, Path]
    recorded: int
    slugs: dict[str, str] = Field(description="key in memories.yaml → slug in the vault")
    queries: list[DemoQueryResult]


# -- the data -----------------------------------------------------------------------------------
def _first_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "entry"
    return f"{field}: {first['msg']}"


def _parse_list(raw: Any, what: str, model: type[DemoMemory] | type[DemoQuery]) -> list[Any]:
    if not isinstance(raw, list):
        raise InvalidInput(f"demo data: `{what}` must be a list")
    parsed: list[Any] = []
    for number, item in enumerate(raw, start=1):
        key = item.get("key") if isinstance(item, dict) else None
        name = f"{what[:-1]} {key!r}" if key else f"{what[:-1]} #{number}"
        try:
            parsed.append(model.model_validate(item))
        except ValidationError as exc:
            raise InvalidInput(f"demo data: {name}: {_first_problem(exc)}") from exc
    return parsed


def _check_links(memories: list[DemoMemory]) -> None:
    by_key: dict[str, DemoMemory] = {}
    for memory in memories:
        if memory.key in by_key:
            raise InvalidInput(f"demo data: memory key {memory.key!r} is used twice")
        by_key[memory.key] = memory
    for memory in memories:
        for target_key in memory.supersedes:
            target = by_key.get(target_key)
            if target is None:
                raise InvalidInput(
                    f"demo data: memory {memory.key!r} supersedes unknown key {target_key!r}"
                )
            if target.scope != memory.scope:
                raise InvalidInput(
                    f"demo data: memory {memory.key!r} supersedes {target_key!r} of another project"
                )
            if target.created_at >= memory.created_at:
                raise InvalidInput(
                    f"demo data: memory {memory.key!r} supersedes {target_key!r},"
                    " which must be older"
                )


def _check_expected(queries: list[DemoQuery], memories: list[DemoMemory]) -> None:
    keys = {m.key for m in memories}
    for query in queries:
        for key in query.expect:
            if key not in keys:
                raise InvalidInput(f"demo data: query {query.text!r} expects unknown key {key!r}")


def rebase_dates(data: DemoData, now: datetime) -> DemoData:
    """The demo data with its dates moved to just before `now`: the first memory's date maps
    to `now - DEMO_SPAN`, the last one's to an hour before `now`, the rest in proportion (so
    the order, and every supersede's newer-than check, holds). A date a body names
    (`2026-05-28`) moves with them, so the text still agrees with its memory's date."""
    first = min(m.created_at for m in data.memories)
    last = max(m.created_at for m in data.memories)
    start, end = to_utc(now) - DEMO_SPAN, to_utc(now) - timedelta(hours=1)
    ratio = (end - start) / max(last - first, timedelta(seconds=1))

    def moved(when: datetime) -> datetime:
        return start + (when - first) * ratio

    def moved_text(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            day = datetime.fromisoformat(match.group(0)).replace(tzinfo=UTC)
            return moved(day).date().isoformat()

        return _DATE_IN_TEXT.sub(one, text)

    memories = [
        m.model_copy(update={"created_at": moved(m.created_at), "body": moved_text(m.body)})
        for m in data.memories
    ]
    return data.model_copy(update={"memories": memories})


def load_demo_data(text: str | None = None) -> DemoData:
    """Parse and check the demo data (default: the shipped `memories.yaml`).

    Every problem raises InvalidInput naming the entry it is in.
    """
    if text is None:
        text = resources.files(__name__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"demo data is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or set(raw) != {"queries", "memories"}:
        raise InvalidInput("demo data must be a mapping with exactly `queries` and `memories`")
    memories: list[DemoMemory] = _parse_list(raw["memories"], "memories", DemoMemory)
    _check_links(memories)
    queries: list[DemoQuery] = _parse_list(raw["queries"], "queries", DemoQuery)
    _check_expected(queries, memories)
    return DemoData(queries=queries, memories=memories)


# -- the data dir -------------------------------------------------------------------------------
def _prepare_home(home: Path | None) -> Path:
    """A fresh temp dir, or the given one if it holds no memories yet."""
    if home is None:
        return Path(tempfile.mkdtemp(prefix="memoryd-demo-")).absolute()
    from memoryd.vault import Vault

    home = home.expanduser().absolute()
    vault = Vault(home)
    if next(vault.iter_files(), None) is not None or vault.count_encrypted():
        raise Conflict(
            f"the data dir {home} already holds memories; the demo loads into an empty one",
            hint="pass an empty (or new) directory with --home, or leave --home out to use a"
            " fresh temp dir",
        )
    return home


def _make_projects(home: Path) -> dict[str, Path]:
    """One plain directory per demo project; each must be a scope of its own."""
    from memoryd.scope import resolve_scope

    projects: dict[str, Path] = {}
    for name in PROJECTS:
        path = home / PROJECTS_DIR / name
        path.mkdir(parents=True, exist_ok=True)
        projects[name] = path
    scopes = {resolve_scope(p, with_remote=False).path for p in projects.values()}
    if len(scopes) != len(projects):
        raise InvalidInput(
            f"the data dir {home} is inside a git repository ({scopes.pop()}), so the demo"
            " projects would share one scope",
            hint="pass a --home outside any git repository, or leave --home out",
        )
    return projects


def _record_all(
    svc: MemoryService, memories: list[DemoMemory], projects: dict[str, Path]
) -> dict[str, str]:
    """Record oldest first; a memory that supersedes others is recorded after its targets."""
    slugs: dict[str, str] = {}
    pending: list[DemoMemory] = []

    def flush() -> None:
        if pending:
            drafts = [m.draft(projects[m.scope], []) for m in pending]
            written: list[Memory] = svc.record_many(drafts, bulk=True)
            slugs.update((m.key, w.slug) for m, w in zip(pending, written, strict=True))
            pending.clear()

    for memory in sorted(memories, key=lambda m: m.created_at):
        if not memory.supersedes:
            pending.append(memory)
            continue
        flush()
        targets = [slugs[key] for key in memory.supersedes]
        slugs[memory.key] = svc.record(memory.draft(projects[memory.scope], targets)).slug
    flush()
    return slugs


# -- rendering ----------------------------------------------------------------------------------
def _hits_table(result: DemoQueryResult, project_of: dict[str, str]) -> Table:
    where = f"in {result.scope}" if result.scope else "in every project"
    table = Table(
        Column("#", justify="right"),
        Column("relevance", justify="right"),
        "type",
        "project",
        "title",
        "why",
        title=Text(f"recall {result.text!r} {where}", style="bold"),
        title_justify="left",
    )
    for rank, hit in enumerate(result.hits, start=1):
        table.add_row(
            str(rank),
            f"{hit.score:.2f}",
            hit.type.value,
            project_of.get(hit.scope_hash, hit.scope_hash),
            Text(hit.title + (" (superseded)" if hit.superseded_by else "")),
            Text("; ".join([", ".join(hit.matched_terms), *hit.paths[:1]]).strip("; ")),
        )
    return table


def _print_report(console: Console, report: DemoReport, project_of: dict[str, str]) -> None:
    unordered = False
    for result in report.queries:
        console.print()
        if result.hits:
            console.print(_hits_table(result, project_of))
            unordered |= any(a.score < b.score for a, b in itertools.pairwise(result.hits))
        else:
            where = f" in {result.scope}" if result.scope else ""
            console.print(Text(f"recall {result.text!r}{where}: no matches", style="bold"))
    if unordered:
        console.print()
        console.print(Text(RELEVANCE_NOTE, style="dim"))
    home = shlex.quote(str(report.home))
    ingest = shlex.quote(str(report.projects["ingest-pipeline"]))
    decision = report.slugs.get("ws-dec-solid") or next(iter(report.slugs.values()), "<slug>")
    console.print()
    console.print("[bold]Try next[/bold] (the memories are plain markdown under the data dir):")
    for command in (
        f"memoryd recall 消费者 --explain --scope {ingest} --home {home}",
        f"memoryd entity show React --home {home}",
        f"memoryd graph query 'MATCH (n:Memory)-[:SUPERSEDES]->(o:Memory) RETURN n.title, o.title'"
        f" --home {home}",
        f"memoryd list --type decision --home {home}",
        f"memoryd get {decision} --home {home}",
    ):
        console.print(f"  {escape(command)}")


# -- the command --------------------------------------------------------------------------------
def run_demo(home: Path | None, *, as_json: bool, console: Console) -> DemoReport:
    """Record the demo memories into `home` (default: a new temp dir) and run the demo queries.

    Raises Conflict if `home` already holds memories. With `as_json`, prints one JSON document
    (the report) and nothing else.
    """
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    data = rebase_dates(load_demo_data(), datetime.now(UTC))
    home = _prepare_home(home)
    if not as_json:
        console.print(f"[bold]Demo data dir:[/bold] [bold cyan]{escape(str(home))}[/bold cyan]")
        console.print(f"  explore it with [bold]--home {escape(shlex.quote(str(home)))}[/bold]")
    projects = _make_projects(home)
    started = time.perf_counter()
    with open_service(load_settings(home)) as svc:
        if as_json:
            slugs = _record_all(svc, data.memories, projects)
        else:
            with console.status(f"recording {len(data.memories)} memories…"):
                slugs = _record_all(svc, data.memories, projects)
        seconds = time.perf_counter() - started
        project_of = {svc.scope_show(path).scope_hash: name for name, path in projects.items()}
        results = [
            DemoQueryResult(
                text=query.text,
                scope=query.scope,
                hits=svc.recall(
                    query.text,
                    scope=projects[query.scope] if query.scope else None,
                    k=SEARCH_K,
                    track=False,
                ).hits,
            )
            for query in data.queries
        ]
    report = DemoReport(
        home=home, projects=projects, recorded=len(slugs), slugs=slugs, queries=results
    )
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), ensure_ascii=False, indent=2))
        return report
    per_scope = Counter(m.scope for m in data.memories)
    console.print(
        f"Recorded {report.recorded} memories "
        f"({', '.join(f'{n} {name}' for name, n in per_scope.items())})"
        f" in {seconds:.1f}s."
    )
    _print_report(console, report, project_of)
    return report
