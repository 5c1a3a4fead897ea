"""`memoryd audit [verify]` and `memoryd scope show`: the audit chain and where a scope comes from.

memoryd audit [--scope S] [--since T] [--event-type E] [-k N]   events, newest last
memoryd audit verify                                            check the chain (exit 9)
memoryd scope show [PATH]                                       a directory's scope hash
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memoryd.cli.options import LIMIT_HELP, HomeOpt, JsonOpt, ScopeOpt, parse_since, path_param
from memoryd.cli.output import emit_json, err, fail, print_table
from memoryd.cli.running import run
from memoryd.errors import MemorydError

audit_app = typer.Typer(help="The hash-chained audit log.", invoke_without_command=True)
scope_app = typer.Typer(help="Scopes: which project a memory belongs to.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `audit` and `scope` to the CLI."""
    app.add_typer(audit_app, name="audit")
    app.add_typer(scope_app, name="scope")


@audit_app.callback()
def audit_list(
    ctx: typer.Context,
    scope: ScopeOpt = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO date or time.")] = None,
    event_type: Annotated[str | None, typer.Option("--event-type")] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-k", min=1, help=LIMIT_HELP)] = None,
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
    print_table(
        ["seq", "ts", "actor", "event", "scope", "target"],
        [
            [str(r.seq), r.ts, r.actor, r.event_type, r.scope_hash or "", r.target_id or ""]
            for r in records
        ],
        wrap=(),
    )


@audit_app.command("verify")
def audit_verify(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Check every line of the audit chain and that it names every memory the stores hold;
    exits 9 and says what is wrong (the first broken line, a cut end, memories without a line)."""
    result = run(home, lambda svc: svc.audit_verify())
    if as_json:
        emit_json(result)
    elif result.ok:
        typer.echo(f"audit chain ok: {result.lines} lines")
    else:
        err.print(f"error: the audit log does not verify: {result.problem}", markup=False)
    if not result.ok:
        raise typer.Exit(9)


@scope_app.command("show")
def scope_show(
    path: Annotated[
        Path | None, typer.Argument(help="A directory (default: here).", callback=path_param)
    ] = None,
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
