"""`memoryd trends` and `memoryd report supersedes`: what changed lately, and the chain of
supersede decisions per entity.

    memoryd trends [--days 7] [--scope P] [--json]
    memoryd report supersedes [--since DATE] [--entity NAME] [--scope P] [--format md|json]
                              (--json: the same as --format json)

Exit codes as everywhere: 2 for a bad --days or --since, 3 for an unknown --entity.
"""

from __future__ import annotations

from collections.abc import Sized
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, ScopeOpt, parse_since
from memoryd.cli.output import emit_json, out, print_table
from memoryd.cli.running import run
from memoryd.models import format_ts

if TYPE_CHECKING:
    from memoryd.governance.trends import Trends

report_app = typer.Typer(help="Reports over the memory's history.", no_args_is_help=True)


class ReportFormat(StrEnum):
    MD = "md"
    JSON = "json"


def trends_command(
    days: Annotated[
        int, typer.Option("--days", help="The window in days, today included (1–366).")
    ] = 7,
    scope: ScopeOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Trends of the last --days days against the days before: top triggers, rising
    entities, recent supersedes and hot recalls."""
    result = run(home, lambda svc: svc.trends(days, scope))
    if as_json:
        emit_json(result)
    else:
        show_trends(result)


def show_trends(t: Trends) -> None:
    first, last = t.days[0].isoformat(), t.days[-1].isoformat()
    out.print(f"Trends {first} … {last} ({t.window_days} days, against the {t.window_days} before)")
    if _section("Top triggers", t.top_triggers, "no trigger led to a recall in the window"):
        print_table(
            ["trigger", "hits", "before"],
            [[r.trigger, str(r.hits), str(r.previous)] for r in t.top_triggers],
            wrap=("trigger",),
        )
    if _section(
        "Rising entities",
        t.rising_entities,
        "no entity was mentioned more than in the window before",
    ):
        print_table(
            ["entity", "type", "mentions", "before", "id"],
            [[e.name, e.type, str(e.mentions), str(e.previous), e.id] for e in t.rising_entities],
            wrap=("entity",),
        )
    if _section("Recent supersedes", t.recent_supersedes, "no supersede was decided in the window"):
        print_table(
            ["decided", "newer", "replaced", "by", "confidence", "status"],
            [
                [
                    format_ts(s.decided_at)[:10] if s.decided_at else "",
                    s.newer_title or s.newer,
                    s.older_title or s.older,
                    s.decided_by,
                    f"{s.confidence:.2f}",
                    s.status,
                ]
                for s in t.recent_supersedes
            ],
            wrap=("newer", "replaced"),
        )
    if _section("Hot recalls", t.hot_recalls, "no memory was recalled in the window"):
        print_table(
            ["recalls", "last recalled", "type", "title", "slug"],
            [
                [str(r.recall_count), format_ts(r.last_recalled_at), r.type, r.title, r.slug]
                for r in t.hot_recalls
            ],
        )


def _section(title: str, rows: Sized, empty: str) -> bool:
    """The section's heading, and the `empty` line when it has no rows; whether it has."""
    out.print(f"\n{title}", style="bold", markup=False)
    if not rows:
        out.print(empty, markup=False)
    return bool(rows)


@report_app.command("supersedes")
def report_supersedes(
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only decisions made since this date (YYYY-MM-DD)."),
    ] = None,
    entity: Annotated[
        str | None, typer.Option("--entity", help="Only this entity (name, alias or id).")
    ] = None,
    scope: ScopeOpt = None,
    fmt: Annotated[
        ReportFormat, typer.Option("--format", help="md (markdown) or json.")
    ] = ReportFormat.MD,
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
) -> None:
    """The chain of supersede decisions per entity: what replaced what, when, who decided
    (auto / user / digest) and why."""
    start = parse_since(since)
    report = run(home, lambda svc: svc.supersede_report(since=start, entity=entity, scope=scope))
    if as_json or fmt is ReportFormat.JSON:
        emit_json(report)
    else:
        from memoryd.governance.reports import render_markdown

        typer.echo(render_markdown(report), nl=False)


def register(app: typer.Typer) -> None:
    app.command("trends")(trends_command)
    app.add_typer(report_app, name="report")
