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

from typing import TYPE_CHECKING, Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, ScopeOpt
from memoryd.cli.output import emit_json, err, fail, out, printable
from memoryd.cli.running import load_settings, run, service
from memoryd.errors import InvalidInput, MemorydError

if TYPE_CHECKING:
    from memoryd.governance.notify import NotifyReport

MAX_LIMIT = 1000
"""`memoryd.governance.digest.MAX_LIMIT`, which imports the stores: written out here so the
CLI starts without them (tests/unit/test_cli_startup.py holds the two equal)."""


def _show_report(report: NotifyReport, *, quiet_stdout: bool) -> None:
    for o in report.outcomes:
        stream = err if o.status == "failed" or quiet_stdout else out
        stream.print(f"{o.channel}: {o.status} ({printable(o.note)})", markup=False)


def digest(
    scope: ScopeOpt = None,
    days: Annotated[
        int | None,
        typer.Option(
            "--days", min=1, max=365, help="Fading within this many days (config digest.days, 7)."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            "-k",
            min=1,
            max=MAX_LIMIT,
            help="Items per section (config digest.limit, 20).",
        ),
    ] = None,
    send: Annotated[
        bool,
        typer.Option(
            "--notify", help="Also send it: desktop notification, and e-mail per digest.smtp."
        ),
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
        try:
            from memoryd.cli.digest_tui import DigestApp
        except MemorydError as exc:  # MissingExtra: textual is the `tui` extra
            raise fail(exc) from exc

        with service(home, writes=True) as svc:
            built = svc.digest(scope=scope, days=days, limit=limit)
            DigestApp(svc, built).run()
        return
    from memoryd.governance.notify import notify, smtp_password

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
        from memoryd.cli.digest_view import render

        out.print(render(built))
    if settings is not None:
        report = notify(built, settings.digest)
        _show_report(report, quiet_stdout=as_json)
        if report.failed:
            raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(digest)
