"""`memoryd grant | revoke | grants`: time-boxed reads of sensitive scopes.

    memoryd grant PATH --duration once|session|task [--task NAME]   90 s, 8 h, or until revoked
    memoryd revoke PATH [--task NAME]                               end the scope's grants
    memoryd grants [--json]                                         the grants in force now

Grants live in `<home>/grants/<scope_hash>.json` (0600) and are never synced; each grant and
revoke is an audit event. Without a grant `memoryd get` of a sensitive memory exits 5 and
recall and search say how many results they left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, path_param
from memoryd.cli.output import emit_json, err, print_table
from memoryd.cli.running import run
from memoryd.models import GrantDuration

if TYPE_CHECKING:
    from memoryd.models import Grant

PathArg = Annotated[
    str,
    typer.Argument(
        help="The sensitive project's directory (or its 12-hex scope hash).", callback=path_param
    ),
]
TaskOpt = Annotated[
    str | None, typer.Option("--task", help="Name a task grant (revoke it by this name).")
]


def _scope(path: str) -> str:
    candidate = Path(path).expanduser()
    return str(candidate.resolve()) if candidate.is_dir() else path


def _until(grant: Grant) -> str:
    if grant.expires_at is None:
        return f"until `memoryd revoke {grant.path} --task {grant.task}`"
    return f"until {grant.expires_at.isoformat(timespec='seconds')}"


def grant(
    path: PathArg,
    duration: Annotated[
        GrantDuration,
        typer.Option("--duration", "-d", help="once: 90 s; session: 8 h; task: until revoked."),
    ] = "once",
    task: TaskOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Allow reads of a sensitive scope for a while (audited)."""
    made = run(home, lambda svc: svc.grant(_scope(path), duration, task=task), writes=True)
    if as_json:
        emit_json(made)
    else:
        typer.echo(f"granted reads of {made.path} ({made.duration}) {_until(made)}")


def revoke(
    path: PathArg, task: TaskOpt = None, home: HomeOpt = None, as_json: JsonOpt = False
) -> None:
    """End a sensitive scope's grants (with --task, only that task's)."""
    ended = run(home, lambda svc: svc.revoke(_scope(path), task=task), writes=True)
    if as_json:
        emit_json(ended)
    elif ended:
        typer.echo(f"revoked {len(ended)} grant{'s' if len(ended) != 1 else ''}")
    else:
        err.print("no grant was in force", markup=False)


def grants(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The grants in force now."""
    rows = run(home, lambda svc: svc.grants())
    if as_json:
        emit_json(rows)
        return
    if not rows:
        err.print("no grants in force", markup=False)
        return
    print_table(
        ["scope", "duration", "task", "expires"],
        [
            [g.path, g.duration, g.task or "", g.expires_at.isoformat() if g.expires_at else ""]
            for g in rows
        ],
        wrap=("scope",),
    )


def register(app: typer.Typer) -> None:
    app.command("grant")(grant)
    app.command("revoke")(revoke)
    app.command("grants")(grants)
