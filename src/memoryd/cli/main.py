"""The `memoryd` CLI: each command parses, calls the service, renders. Nothing else.

The core commands live here and register the command groups with their own subject
(`knowledge`, `setup`, `interop`, `capture`, `agents` …). What every command shares is below
them, so a group never imports this module: the options (`cli.options`), the consoles, tables
and the exit codes (`cli.output`) and how a command reaches the service (`cli.running`).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memoryd import __version__
from memoryd.cli import agents, interop, knowledge, maintenance, reports, review
from memoryd.cli import audit as audit_cli
from memoryd.cli import digest as digest_cli
from memoryd.cli import grants as grants_cli
from memoryd.cli import profile as profile_cli
from memoryd.cli import sensitive as sensitive_cli
from memoryd.cli import setup as setup_cli
from memoryd.cli import supersede as supersede_cli
from memoryd.cli import sync as sync_cli
from memoryd.cli import team as team_cli
from memoryd.cli.capture import capture_command
from memoryd.cli.helpfmt import MemorydGroup
from memoryd.cli.options import (
    LIMIT_HELP,
    HomeOpt,
    JsonOpt,
    ScopeOpt,
    utf8_option,
)
from memoryd.cli.output import (
    emit_json,
    err,
    fail,
    out,
    print_table,
    printable,
    say_hidden,
)
from memoryd.cli.running import Service, load_settings, run, service
from memoryd.errors import (
    ConfigError,
    InvalidInput,
    MemorydError,
    NotFound,
    StorageError,
)
from memoryd.models import DecayState, MemoryType
from memoryd.private import private_umask

if TYPE_CHECKING:
    from memoryd.models import Memory, MemorySummary

app = typer.Typer(
    name="memoryd",
    help="Long-term memory for AI coding agents: record, search and govern what they learn.",
    no_args_is_help=True,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    cls=MemorydGroup,
)
app.command("capture")(capture_command)


def split_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def read_body(body: str | None) -> str:
    """The body from --body, else from stdin when something is piped in. Every type of
    memory needs a body: an empty one is refused, not stored as a title alone."""
    if body is not None:
        text = utf8_option(body, "--body")
        where = "--body"
    elif sys.stdin is None or sys.stdin.isatty():
        raise InvalidInput(
            "no body: a memory needs one",
            hint="pass --body TEXT, or pipe the text in: echo TEXT | memoryd record …",
        )
    else:
        raw = sys.stdin.buffer.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"the body on stdin is not UTF-8 text (byte {exc.start})",
                hint="re-encode the text as UTF-8 (e.g. iconv -t UTF-8)",
            ) from exc
        where = "stdin"
    if not text.strip():
        raise InvalidInput(
            f"the body is empty ({where}): a memory needs one",
            hint="pass --body TEXT, or pipe the text in: echo TEXT | memoryd record …",
        )
    return text


@app.callback()
def main_callback(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
) -> None:
    private_umask()  # every file the command creates in the data dir is 0600 (memoryd.private)
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
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
    """Write a memory into the vault and index it. Prints its slug. The body must not be
    empty, whatever the type."""
    from memoryd.models import MemoryDraft

    try:
        draft = MemoryDraft(
            type=type,
            title=utf8_option(title, "--title"),
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
    memory = run(home, lambda svc: svc.record(draft), writes=True)
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

    def read(svc: Service) -> Memory:
        from memoryd.client.connect import is_remote

        memory = svc.get(slug)
        if is_remote(svc):
            return memory  # the daemon counts its own
        from memoryd.service import MemoryService  # only an open store counts here

        if isinstance(svc, MemoryService) and not svc.read_only:
            svc.count_read(slug)  # a get is a recall (the daemon counts its own)
        return memory

    memory = run(home, read)
    if as_json:
        emit_json({"meta": memory.meta, "body": memory.body, "path": memory.path})
    else:
        from memoryd.vault import render

        typer.echo(printable(render(memory)), nl=False)


@app.command("list")
def list_command(
    scope: ScopeOpt = None,
    type: Annotated[MemoryType | None, typer.Option("--type")] = None,
    state: Annotated[DecayState | None, typer.Option("--state", help="Decay state.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, help=LIMIT_HELP)] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List memories, newest first; says so when there are more than --limit."""

    def listing(svc: Service) -> tuple[list[MemorySummary], int | None]:
        rows = svc.list_memories(
            scope=scope, type=type, state=state, limit=limit + 1, offset=offset
        )
        if len(rows) <= limit and (rows or not offset):
            return rows, None
        return rows[:limit], svc.count_memories(scope=scope, type=type, state=state)

    rows, total = run(home, listing)
    if as_json:
        emit_json(rows)
    else:
        print_table(
            ["slug", "type", "title", "state", "created"],
            [
                [r.slug, r.type.value, r.title, r.decay_state.value, f"{r.created_at:%Y-%m-%d}"]
                for r in rows
            ],
        )
    if total is not None and not rows:
        err.print(f"--offset {offset} is past the last of {total} memories", markup=False)
    elif total is not None:
        shown = f"{offset + 1}-{offset + len(rows)}" if offset else str(len(rows))
        err.print(
            f"showing {shown} of {total} (--limit {limit}; raise it, or page with --offset)",
            markup=False,
        )


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to look for (any language).")],
    scope: ScopeOpt = None,
    type: Annotated[list[MemoryType] | None, typer.Option("--type")] = None,
    k: Annotated[int, typer.Option("--limit", "-k", min=1, help=LIMIT_HELP)] = 10,
    include_forgotten: Annotated[
        bool, typer.Option("--include-forgotten", help="Also soft-forgotten memories.")
    ] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show each hit's raw BM25 score.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Full-text (BM25) search over titles, bodies, tags and triggers, best first. Raw BM25
    is on no 0-1 scale, so only --explain shows it (recall's relevance is the 0-1 one)."""
    hits = run(
        home,
        lambda svc: svc.search(
            query, scope=scope, types=type, k=k, include_forgotten=include_forgotten
        ),
    )
    say_hidden(hits.hidden)
    if as_json:
        emit_json(list(hits))
        return
    if not hits:
        err.print("no matches")
        return
    print_table(
        ["#", *(["bm25"] if explain else []), "slug", "type", "title", "matched"],
        [
            [
                str(rank),
                *([f"{h.score:.2f}"] if explain else []),
                h.slug,
                h.type.value,
                h.title,
                ", ".join(h.matched_terms),
            ]
            for rank, h in enumerate(hits, 1)
        ],
        wrap=("title", "matched"),
    )


@app.command()
def reindex(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Rebuild the graph and the search index from the vault alone."""

    def warn(message: str) -> None:
        if not as_json:
            err.print(f"warning: {message}", markup=False)

    from memoryd.cli.progress import progress_bar

    with (
        service(home, rebuild=True, writes=True) as svc,
        progress_bar("reindex", quiet=as_json) as progress,
    ):
        report = svc.reindex(warn, progress)
    if as_json:
        emit_json(report)
    else:
        typer.echo(
            f"indexed {report.indexed} memories in {report.seconds:.1f}s"
            f" ({len(report.skipped)} skipped)"
        )


@app.command()
def doctor(
    home: HomeOpt = None,
    as_json: JsonOpt = False,
    fix: Annotated[
        bool,
        typer.Option("--fix", help="Repair what needs no decision: make the data dir private."),
    ] = False,
) -> None:
    """Check the install, the data dir, the graph, the search index and the schema versions."""
    from memoryd.client.connect import connect
    from memoryd.doctor import permissions_check, run_checks

    try:
        settings = load_settings(home)
        remote = connect(settings.home, timeout_s=settings.daemon.request_timeout_s)
        if remote is None:
            checks = run_checks(settings, fix=fix)
        else:
            with remote:  # the daemon owns the graph: it runs the checks on its stores
                checks = remote.doctor()
            if fix:  # file modes are this user's to change, daemon or not
                local = permissions_check(settings.home, fix=True)
                checks = [local if c.name == local.name else c for c in checks]
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
    """Load the shipped demo vault into a data dir and show a few recalls."""
    from memoryd.demo import run_demo

    try:
        run_demo(home, as_json=as_json, console=out)
    except MemorydError as exc:
        raise fail(exc) from exc


@app.command()
def serve(
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535, help="TCP port on 127.0.0.1 (default 7423)."),
    ] = None,
    no_tcp: Annotated[
        bool, typer.Option("--no-tcp", help="Serve on the Unix socket only.")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Run in the background; return once it answers.")
    ] = False,
    team: Annotated[
        bool, typer.Option("--team", help="Run the team server of a `team init` data dir.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the daemon: it owns the graph and serves the HTTP API (OpenAPI at /docs)."""
    from memoryd.daemon import control
    from memoryd.daemon_files import configure_logging

    if team:  # TLS on team.toml's address; --port, --no-tcp and --detach are the daemon's
        if port is not None or no_tcp or detach:
            raise fail(
                InvalidInput(
                    "--team takes its address from team.toml, and runs in the foreground",
                    hint="drop --port/--no-tcp/--detach, or edit [team] in team.toml",
                )
            )
        team_cli.run_team_server(home)
        return
    tcp = False if no_tcp else None
    try:
        settings = load_settings(home)
        if detach:
            health = control.start_detached(settings, port=port, tcp=tcp)
        else:
            from memoryd.sensitive.heap import daemon_env

            env = daemon_env(os.environ, settings.home)
            if env is not None:  # once: freed plaintext cleared at once (sensitive.heap)
                os.execve(sys.executable, sys.orig_argv, env)
            from memoryd.daemon import server  # this process becomes the daemon

            configure_logging(verbose=logging.getLogger().isEnabledFor(logging.INFO))
            server.serve(settings, port=port, tcp=tcp)
            return
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(health)
    else:
        typer.echo(describe_daemon(health, settings.home))


def describe_daemon(health: dict[str, Any], home: Path) -> str:
    from memoryd.daemon_files import DaemonFiles

    where = str(DaemonFiles(home).socket)
    if health.get("tcp_port"):
        where += f" and http://127.0.0.1:{health['tcp_port']}"
    return f"memoryd daemon running (pid {health['pid']}) on {where}"


@app.command()
def status(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Is a daemon serving the data dir? Exits 1 when none is."""
    from memoryd.daemon import control

    try:
        settings = load_settings(home)
        health = control.status(settings.home)
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(health or {"status": "stopped"})
    elif health is not None:
        typer.echo(f"{describe_daemon(health, settings.home)}, up {health['uptime_s']:.0f}s")
        if health.get("index_error"):
            typer.echo(
                f"search index: {health['index_waiting']} memories wait for a commit since"
                f" {health['index_waiting_since']}; {health['index_failed_commits']} tries"
                f" failed, the first: {health['index_first_error']}; the daemon tries again"
                f" at {health['index_retry_at']} (see `memoryd doctor`)"
            )
    else:
        typer.echo(f"no memoryd daemon serves {settings.home}")
    if health is None:
        raise typer.Exit(1)


@app.command()
def stop(home: HomeOpt = None) -> None:
    """Stop the daemon: in-flight writes finish and the stores close cleanly."""
    from memoryd.daemon import control

    try:
        settings = load_settings(home)
        pid = control.stop(settings.home)
    except MemorydError as exc:
        raise fail(exc) from exc
    if pid is None:
        typer.echo(f"no memoryd daemon serves {settings.home}")
    else:
        typer.echo(f"stopped the memoryd daemon (pid {pid})")


@app.command()
def token(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Print the bearer token TCP clients send (created, mode 0600, if there is none yet)."""
    from memoryd.daemon_files import DaemonFiles
    from memoryd.wiring import ensure_home

    try:
        settings = load_settings(home)
        ensure_home(settings.home)
        files = DaemonFiles(settings.home)
        value = files.ensure_token()
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json({"token": value, "path": files.token})
    else:
        typer.echo(value)


@app.command()
def ui(
    home: HomeOpt = None,
    print_only: Annotated[
        bool, typer.Option("--print-only", help="Print the URL; do not open a browser.")
    ] = False,
    docs: Annotated[
        bool, typer.Option("--docs", help="Open the API docs (Swagger UI) instead.")
    ] = False,
) -> None:
    """Open the graph page of the running daemon (or its API docs); the URL carries the token
    in its fragment (`#token=…`), which the browser keeps to itself, and the page opens on
    the project of the current directory when it has memories."""
    import webbrowser
    from urllib.parse import quote

    from memoryd.daemon import control
    from memoryd.daemon_files import DaemonFiles
    from memoryd.scope import resolve_scope

    try:
        settings = load_settings(home)
        health = control.status(settings.home)
        if health is None:
            raise NotFound(
                f"no memoryd daemon serves {settings.home}",
                hint="start one with `memoryd serve --detach`",
            )
        if not health.get("tcp_port"):
            raise ConfigError(
                f"the daemon (pid {health['pid']}) serves only its Unix socket (--no-tcp),"
                " which a browser cannot reach",
                hint="restart it with TCP: `memoryd stop`, then `memoryd serve --detach`",
            )
        token = DaemonFiles(settings.home).read_token()
        if token is None:
            raise StorageError(
                f"the daemon serves TCP but {DaemonFiles(settings.home).token} is missing",
                hint="restart the daemon (`memoryd stop`, `memoryd serve --detach`)",
            )
    except MemorydError as exc:
        raise fail(exc) from exc
    page = "/docs" if docs else "/"
    url = f"http://127.0.0.1:{health['tcp_port']}{page}#token={quote(token, safe='')}"
    if not docs:
        url += f"&project={resolve_scope(with_remote=False).scope_hash}"
    typer.echo(url)
    if not print_only and not webbrowser.open(url):
        err.print("no browser could be started here: open the URL above yourself", markup=False)


def main() -> None:
    app()


# Command groups that live in their own modules (they import cli.options, output, running).
knowledge.register(app)
audit_cli.register(app)
agents.register(app)
interop.register(app)
setup_cli.register(app)
review.register(app)
supersede_cli.register(app)
maintenance.register(app)
grants_cli.register(app)
sensitive_cli.register(app)
reports.register(app)
digest_cli.register(app)
profile_cli.register(app)
sync_cli.register(app)
team_cli.register(app)
