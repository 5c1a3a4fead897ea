"""`memoryd digest`: the weekly review page, as rich text, JSON, a notification or a TUI.

    memoryd digest [--scope P] [--days 7] [--limit 20]     the page
    memoryd digest --json                                   the same as JSON
    memoryd digest --notify                                 desktop notification and e-mail
    memoryd digest --tui                                    walk the queue, decide with one key

`--notify` sends from this process with this machine's `[digest]` config (the daemon's weekly
job sends from the daemon). Exit codes as everywhere; 8 when `[digest.smtp]` is wrong (the
message names the key), 1 when a configured channel could not deliver.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.text import Text

from memoryd.cli.main import (
    HomeOpt,
    JsonOpt,
    ScopeOpt,
    emit_json,
    err,
    fail,
    out,
    printable,
    run,
    service,
)
from memoryd.config import load_settings
from memoryd.errors import InvalidInput, MemorydError
from memoryd.governance.digest import MAX_LIMIT, Digest
from memoryd.governance.notify import NotifyReport, notify, smtp_password


def _heading(title: str, total: int, shown: int) -> Rule:
    more = f", {shown} shown" if shown < total else ""
    return Rule(Text(f"{title} ({total}{more})", style="bold"), align="left")


def render(d: Digest) -> RenderableType:
    """The digest as rich renderables: every section that has something, trends when a
    trends report is attached."""
    parts: list[RenderableType] = []
    where = f" · scope {d.scope_hash}" if d.scope_hash else ""
    parts.append(Text(f"memoryd digest · {d.at:%Y-%m-%d %H:%M} UTC{where}", style="bold"))
    if d.empty:
        parts.append(Text("Nothing waits for a decision and nothing fades this week."))
    if d.promotions:
        parts.append(_heading("Pending promotions", d.totals["promotions"], len(d.promotions)))
        for p in d.promotions:
            s = p.dura
            line = Text(f"#{p.id} ", style="bold")
            line.append(f"{p.proposed_type.value}: {printable(p.proposed_title)}")
            parts.append(line)
            parts.append(
                Text(
                    f"  DURA D {s.D:.2f} U {s.U:.2f} R {s.R:.2f} A {s.A:.2f} = {s.mean:.2f}"
                    f" by {s.by or 'unknown'} · from {p.source_slug}"
                )
            )
            parts += [Text(f"  > {printable(q)}", style="italic") for q in p.evidence]
        parts.append(Text("  memoryd promote ID · memoryd reject ID", style="dim"))
    if d.supersede_candidates:
        parts.append(
            _heading("Supersede candidates", d.totals["supersede"], len(d.supersede_candidates))
        )
        for r in d.supersede_candidates:
            line = Text(f"{r.newer} → {r.older}  {r.confidence:.2f}")
            if r.judge:
                line.append(f"  {r.judge}", style="dim")
            parts.append(line)
            if r.reason:
                parts.append(Text(f"  {printable(r.reason)}"))
        parts.append(Text("  memoryd supersede accept|reject NEW OLD", style="dim"))
    if d.duplicates:
        parts.append(_heading("Duplicate pairs", d.totals["duplicates"], len(d.duplicates)))
        for pair in d.duplicates:
            parts.append(
                Text(
                    f"{pair.keep} ≈ {pair.drop}  {pair.kind} {pair.similarity:.2f}\n"
                    f"  {printable(pair.keep_title)} / {printable(pair.drop_title)}"
                )
            )
        parts.append(Text("  memoryd merge --keep KEEP --drop DROP", style="dim"))
    if d.fading:
        parts.append(_heading(f"Fading within {d.days} days", d.totals["fading"], len(d.fading)))
        for f in d.fading:
            when = (
                f"at the next sweep (due {f.due_at:%Y-%m-%d})"
                if f.due_at <= d.at
                else f"on {f.due_at:%Y-%m-%d}"
            )
            parts.append(
                Text(
                    f"{f.slug}  {f.from_state.value} → {f.to_state.value} {when}\n"
                    f"  {printable(f.title)}"
                )
            )
        parts.append(Text("  a recall or `memoryd get SLUG` keeps one alive", style="dim"))
    if d.trends is not None:
        parts.append(Rule(Text(d.trends.title, style="bold"), align="left"))
        parts += [Text(printable(line)) for line in d.trends.lines]
    parts += [Text(f"note: {printable(n)}", style="dim") for n in d.notes]
    return Group(*parts)


def _show_report(report: NotifyReport, *, quiet_stdout: bool) -> None:
    for o in report.outcomes:
        stream = err if o.status == "failed" or quiet_stdout else out
        stream.print(f"{o.channel}: {o.status} ({printable(o.note)})", markup=False)


def digest(
    scope: ScopeOpt = None,
    days: Annotated[
        int | None,
        typer.Option("--days", min=1, max=365, help="Fading within this many days [digest.days]."),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", "-k", min=1, max=MAX_LIMIT, help="Items per section [digest.limit]."
        ),
    ] = None,
    send: Annotated[
        bool,
        typer.Option("--notify", help="Also send it: desktop notification and [digest.smtp]."),
    ] = False,
    tui: Annotated[
        bool, typer.Option("--tui", help="Walk the queue and decide with single keys.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The weekly review: pending promotions with their DURA evidence, supersede
    candidates, duplicate pairs and the session memories about to fade. The daemon sends it
    every Monday at 09:00 (`digest --notify`)."""
    if tui and (as_json or send):
        raise fail(InvalidInput("--tui shows the queue itself", hint="drop --json / --notify"))
    if tui:
        from memoryd.cli.digest_tui import DigestApp

        with service(home, writes=True) as svc:
            built = svc.digest(scope=scope, days=days, limit=limit)
            DigestApp(svc, built).run()
        return
    settings = None
    if send:
        try:
            settings = load_settings(home)
            if settings.digest.smtp is not None:
                smtp_password(settings.digest.smtp)  # a missing password fails before anything
        except MemorydError as exc:
            raise fail(exc) from exc
    built = run(home, lambda svc: svc.digest(scope=scope, days=days, limit=limit))
    if as_json:
        emit_json(built)
    else:
        out.print(render(built))
    if settings is not None:
        report = notify(built, settings.digest)
        _show_report(report, quiet_stdout=as_json)
        if report.failed:
            raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(digest)
