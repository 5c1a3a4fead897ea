"""`memoryd profile …`: the identity profile every agent can read (profile/identity.md).

    memoryd profile show [V]               the current identity (or version V)
    memoryd profile rewrite [--compiled]   rewrite it now (the LLM when one is configured)
    memoryd profile history                its versions, newest first
    memoryd profile diff V1 V2             a unified diff between two versions
    memoryd profile rollback V             make version V's text current again
    memoryd profile report [--month M]     the month's change report (default: last month)
    memoryd profile reports                the reports written so far

Exit codes as everywhere: 2 for a malformed month, 3 for an unknown version or a month that
has not begun.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt
from memoryd.cli.output import emit_json, out, print_table, printable
from memoryd.cli.running import run

if TYPE_CHECKING:
    from memoryd.governance.profile import ProfileRewrite

profile_app = typer.Typer(
    help="The identity profile (profile/identity.md): rewrite, history, diff, rollback, reports.",
    no_args_is_help=True,
)

VersionArg = Annotated[int, typer.Argument(help="A version number (`memoryd profile history`).")]
ScheduledOpt = Annotated[
    bool,
    typer.Option(
        "--scheduled", help="Run as the scheduled job (its run is recorded).", hidden=True
    ),
]


def _said(result: ProfileRewrite, as_json: bool) -> None:
    if as_json:
        emit_json(result)
        return
    out.print(printable(result.message), markup=False)
    if result.written and result.version.change_summary:
        out.print(printable(result.version.change_summary), markup=False)
    out.print(result.path, markup=False)


@profile_app.command("show")
def profile_show(
    version: Annotated[
        int | None, typer.Argument(help="A version number; default the current one.")
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the identity (the current version, or version V)."""
    found = run(home, lambda svc: svc.profile_show(version))
    if as_json:
        emit_json(found)
        return
    typer.echo(printable(found.content_md), nl=False)
    err_line = f"(version {found.version}, {found.written_by}, {str(found.written_at)[:16]})"
    typer.echo(err_line, err=True)


@profile_app.command("rewrite")
def profile_rewrite(
    compiled: Annotated[
        bool, typer.Option("--compiled", help="Compile it without the LLM, even if one is set.")
    ] = False,
    scheduled: ScheduledOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite profile/identity.md now: by the LLM from the long-term memories since the last
    version and the most recalled ones, or, without an LLM, compiled from the current
    preferences and decisions. Sensitive memories never go in. Identical content writes no
    new version. The daemon runs this weekly (Sun 02:00)."""
    result = run(
        home, lambda svc: svc.profile_rewrite(compiled=compiled, scheduled=scheduled), writes=True
    )
    _said(result, as_json)


@profile_app.command("history")
def profile_history(
    limit: Annotated[int, typer.Option("--limit", "-k", help="How many to show at most.")] = 50,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The identity versions, newest first, with their change summaries."""
    versions = run(home, lambda svc: svc.profile_history(limit=limit))
    if as_json:
        emit_json(versions)
        return
    if not versions:
        out.print("no identity profile yet: `memoryd profile rewrite` writes one", markup=False)
        return
    print_table(
        ["version", "written", "trigger", "by", "sources", "summary"],
        [
            [
                str(v.version),
                str(v.written_at)[:16],
                v.trigger,
                v.written_by,
                str(v.sources_count),
                v.change_summary,
            ]
            for v in versions
        ],
        wrap=("summary",),
    )


@profile_app.command("diff")
def profile_diff(
    v1: VersionArg, v2: VersionArg, home: HomeOpt = None, as_json: JsonOpt = False
) -> None:
    """A unified diff from version V1 to version V2."""
    diff = run(home, lambda svc: svc.profile_diff(v1, v2))
    if as_json:
        emit_json(diff)
    elif not diff.diff:
        out.print(f"versions {v1} and {v2} are identical", markup=False)
    else:
        typer.echo(printable(diff.diff), nl=False)


@profile_app.command("rollback")
def profile_rollback(version: VersionArg, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Make version V's text current again (written as a new version; history stays)."""
    _said(run(home, lambda svc: svc.profile_rollback(version), writes=True), as_json)


@profile_app.command("report")
def profile_report(
    month: Annotated[
        str | None, typer.Option("--month", help="YYYY-MM; default the previous month.")
    ] = None,
    scheduled: ScheduledOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the month's profile change report to profile/change-reports/YYYY-MM.md: identity
    versions, supersedes, entities added and dropped. The daemon runs it on the 1st."""
    report = run(home, lambda svc: svc.profile_report(month, scheduled=scheduled), writes=True)
    if as_json:
        emit_json(report)
        return
    if report.empty:
        out.print(f"no profile changes in {report.period}", markup=False)
    else:
        out.print(
            f"{report.period}: {report.versions_count} identity versions, "
            f"{report.supersedes_count} supersedes, {report.entities_added} entities added, "
            f"{report.entities_dropped} dropped",
            markup=False,
        )
    out.print(f"wrote {report.path}", markup=False)


@profile_app.command("reports")
def profile_reports(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The monthly change reports written so far, newest month first."""
    reports = run(home, lambda svc: svc.profile_reports())
    if as_json:
        emit_json(reports)
        return
    if not reports:
        out.print("no profile reports yet: `memoryd profile report` writes one", markup=False)
        return
    print_table(
        ["month", "generated", "versions", "supersedes", "entities +", "entities -"],
        [
            [
                r.period,
                str(r.generated_at)[:16],
                str(r.versions_count),
                str(r.supersedes_count),
                str(r.entities_added),
                str(r.entities_dropped),
            ]
            for r in reports
        ],
    )


def register(app: typer.Typer) -> None:
    app.add_typer(profile_app, name="profile")
