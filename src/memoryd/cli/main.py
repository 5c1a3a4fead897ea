"""The `memoryd` CLI: each command parses, calls the service, renders. Nothing else.

Exit codes (stable, documented in the README):
0 ok · 1 unexpected error · 2 invalid input · 3 not found · 4 conflict · 5 policy denied ·
6 graph locked · 7 storage error · 8 config error · 9 audit chain broken.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from memoryd import __version__
from memoryd.config import load_settings
from memoryd.errors import (
    AuditChainBroken,
    ConfigError,
    Conflict,
    GraphLocked,
    InvalidInput,
    MemorydError,
    NotFound,
    PolicyDenied,
    StorageError,
)
from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.vault import render

EXIT_CODES: list[tuple[type[MemorydError], int]] = [
    (AuditChainBroken, 9),
    (GraphLocked, 6),
    (StorageError, 7),
    (ConfigError, 8),
    (InvalidInput, 2),
    (NotFound, 3),
    (Conflict, 4),
    (PolicyDenied, 5),
]

app = typer.Typer(
    name="memoryd",
    help="Long-term memory for AI coding agents: record, search and govern what they learn.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
audit_app = typer.Typer(help="The hash-chained audit log.", invoke_without_command=True)
scope_app = typer.Typer(help="Scopes: which project a memory belongs to.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")
app.add_typer(scope_app, name="scope")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home", envvar="MEMORYD_HOME", help="Data dir (default: the platform data dir)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ScopeOpt = Annotated[
    str | None, typer.Option("--scope", help="A project path (or a 12-hex scope hash).")
]

T = TypeVar("T")


def exit_code(exc: MemorydError) -> int:
    return next((code for cls, code in EXIT_CODES if isinstance(exc, cls)), 1)


def fail(exc: MemorydError) -> typer.Exit:
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    err.print(f"error: {exc.message}{hint}", markup=False)
    return typer.Exit(exit_code(exc))


@contextmanager
def service(home: Path | None) -> Iterator[MemoryService]:
    """Open the service for one command; every MemorydError becomes one line and an exit code."""
    from memoryd.wiring import open_service

    try:
        with open_service(load_settings(home)) as svc:
            yield svc
    except MemorydError as exc:
        raise fail(exc) from exc


def run(home: Path | None, action: Callable[[MemoryService], T]) -> T:
    with service(home) as svc:
        return action(svc)


def emit_json(value: Any) -> None:
    def default(obj: Any) -> Any:
        if isinstance(obj, BaseModel):
            return obj.model_dump(mode="json")
        if isinstance(obj, datetime | Path):
            return str(obj)
        raise TypeError(type(obj).__name__)

    typer.echo(json.dumps(value, default=default, ensure_ascii=False, indent=2))


def split_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def read_body(body: str | None) -> str:
    """The body from --body, else from stdin when something is piped in."""
    if body is not None:
        try:
            body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInput(
                f"--body is not UTF-8 text (character {exc.start})",
                hint="re-encode the text as UTF-8",
            ) from exc
        return body
    if sys.stdin is None or sys.stdin.isatty():
        return ""
    raw = sys.stdin.buffer.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"the body on stdin is not UTF-8 text (byte {exc.start})",
            hint="re-encode the text as UTF-8 (e.g. iconv -t UTF-8)",
        ) from exc


def parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise fail(InvalidInput(f"--since {value!r} is not a date like 2026-05-18")) from exc


@app.callback()
def main_callback(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)


@app.command()
def record(
    type: Annotated[MemoryType, typer.Option("--type", help="The kind of memory.")],
    title: Annotated[str, typer.Option("--title", help="A short, human-readable title.")],
    body: Annotated[
        str | None, typer.Option("--body", help="The markdown body (default: read stdin).")
    ] = None,
    scope: ScopeOpt = None,
    tags: Annotated[str | None, typer.Option("--tags", help="Comma-separated tags.")] = None,
    triggers: Annotated[
        str | None, typer.Option("--triggers", help="Comma-separated recall keywords.")
    ] = None,
    category: Annotated[str | None, typer.Option("--category", help="e.g. tech/frontend")] = None,
    source: Annotated[str, typer.Option("--source", help="Where it came from.")] = "manual",
    supersedes: Annotated[
        str | None, typer.Option("--supersedes", help="Comma-separated slugs this replaces.")
    ] = None,
    allow_duplicate: Annotated[
        bool, typer.Option("--allow-duplicate", help="Store it even if the body exists.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a memory into the vault and index it. Prints its slug."""
    try:
        draft = MemoryDraft(
            type=type,
            title=title,
            body=read_body(body),
            scope_path=Path(scope) if scope else None,
            source=source,
            tags=split_list(tags),
            triggers=split_list(triggers),
            category=category,
            supersedes=split_list(supersedes),
            allow_duplicate=allow_duplicate,
        )
    except MemorydError as exc:
        raise fail(exc) from exc
    memory = run(home, lambda svc: svc.record(draft))
    if as_json:
        emit_json({"slug": memory.slug, "path": memory.path, "meta": memory.meta})
    else:
        typer.echo(memory.slug)


@app.command()
def get(
    slug: Annotated[str, typer.Argument(help="The memory's slug.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a memory: its frontmatter and body."""
    memory = run(home, lambda svc: svc.get(slug))
    if as_json:
        emit_json({"meta": memory.meta, "body": memory.body, "path": memory.path})
    else:
        typer.echo(render(memory), nl=False)


@app.command("list")
def list_command(
    scope: ScopeOpt = None,
    type: Annotated[MemoryType | None, typer.Option("--type")] = None,
    state: Annotated[DecayState | None, typer.Option("--state", help="Decay state.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1)] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List memories, newest first."""
    rows = run(
        home,
        lambda svc: svc.list_memories(
            scope=scope, type=type, state=state, limit=limit, offset=offset
        ),
    )
    if as_json:
        emit_json(rows)
        return
    table = Table("slug", "type", "title", "state", "created")
    for row in rows:
        table.add_row(
            row.slug, row.type.value, row.title, row.decay_state.value, f"{row.created_at:%Y-%m-%d}"
        )
    out.print(table)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to look for (any language).")],
    scope: ScopeOpt = None,
    type: Annotated[list[MemoryType] | None, typer.Option("--type")] = None,
    k: Annotated[int, typer.Option("-k", min=1, help="How many results.")] = 10,
    include_forgotten: Annotated[
        bool, typer.Option("--include-forgotten", help="Also soft-forgotten memories.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Full-text (BM25) search over titles, bodies, tags and triggers."""
    hits = run(
        home,
        lambda svc: svc.search(
            query, scope=scope, types=type, k=k, include_forgotten=include_forgotten
        ),
    )
    if as_json:
        emit_json(hits)
        return
    if not hits:
        err.print("no matches")
        return
    table = Table("score", "slug", "type", "title", "matched")
    for hit in hits:
        table.add_row(
            f"{hit.score:.2f}", hit.slug, hit.type.value, hit.title, ", ".join(hit.matched_terms)
        )
    out.print(table)


@app.command()
def reindex(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Rebuild the graph and the search index from the vault alone."""

    def warn(message: str) -> None:
        if not as_json:
            err.print(f"warning: {message}", markup=False)

    report = run(home, lambda svc: svc.reindex(warn))
    if as_json:
        emit_json(report)
    else:
        typer.echo(
            f"indexed {report.indexed} memories in {report.seconds:.1f}s"
            f" ({len(report.skipped)} skipped)"
        )


@audit_app.callback()
def audit_list(
    ctx: typer.Context,
    scope: ScopeOpt = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO date or time.")] = None,
    event_type: Annotated[str | None, typer.Option("--event-type")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1)] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List audit events (newest last). `memoryd audit verify` checks the chain."""
    if ctx.invoked_subcommand is not None:
        return
    when = parse_since(since)
    records = run(
        home,
        lambda svc: svc.audit_records(scope=scope, since=when, event_type=event_type, limit=limit),
    )
    if as_json:
        emit_json(records)
        return
    table = Table("seq", "ts", "actor", "event", "scope", "target")
    for rec in records:
        table.add_row(
            str(rec.seq),
            rec.ts,
            rec.actor,
            rec.event_type,
            rec.scope_hash or "",
            rec.target_id or "",
        )
    out.print(table)


@audit_app.command("verify")
def audit_verify(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Check every line of the audit chain; exits 9 and names the first broken line."""
    result = run(home, lambda svc: svc.audit_verify())
    if as_json:
        emit_json(result)
    elif result.ok:
        typer.echo(f"audit chain ok: {result.lines} lines")
    else:
        err.print(
            f"error: audit chain broken at line {result.first_bad_line}: {result.problem}",
            markup=False,
        )
    if not result.ok:
        raise typer.Exit(9)


@scope_app.command("show")
def scope_show(
    path: Annotated[Path | None, typer.Argument(help="A directory (default: here).")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the scope hash of a directory: sha256 of its git toplevel (else itself), 12 hex."""
    from memoryd.scope import resolve_scope

    try:
        info = resolve_scope(path)
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(info)
    else:
        typer.echo(f"{info.scope_hash}  {info.path}")


@app.command()
def doctor(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Check the install, the data dir, the graph, the search index and the schema versions."""
    from memoryd.doctor import run_checks

    try:
        checks = run_checks(load_settings(home))
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(checks)
    else:
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            line = f"{mark} {check.name}: {check.detail}"
            if not check.ok and check.fix:
                line += f" — fix: {check.fix}"
            out.print(line, markup=False)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@app.command()
def demo(
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Load the shipped demo vault into a data dir and show a few searches."""
    from memoryd.demo import run_demo

    try:
        run_demo(home, as_json=as_json, console=out)
    except MemorydError as exc:
        raise fail(exc) from exc


def main() -> None:
    app()
