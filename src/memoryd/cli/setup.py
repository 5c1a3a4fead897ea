"""`memoryd setup`: hooks, MCP config and schedules for each agent, with backups and undo."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, path_param
from memoryd.cli.output import emit_json, fail
from memoryd.errors import MemorydError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memoryd.setup.agents import HookEvent
    from memoryd.setup.configfiles import FileChange, Written
    from memoryd.setup.schedules import SchedulePlan, ScheduleResult

setup_app = typer.Typer(
    help="Connect agents to memoryd: hooks, MCP servers and schedules (backed up, undoable).",
    no_args_is_help=True,
)

AGENT_HELP = "claude-code, codex, cursor, windsurf, gemini or copilot."
AgentOpt = Annotated[str, typer.Option("--agent", help=AGENT_HELP)]
ProjectOpt = Annotated[
    bool, typer.Option("--project", help="Write the project's config (in --dir).")
]
UserOpt = Annotated[
    bool, typer.Option("--user", help="Write your config in ~ (the default; copilot: --project).")
]
DirOpt = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="The project dir for --project (default: the current dir).",
        callback=path_param,
    ),
]
CommandOpt = Annotated[
    str | None,
    typer.Option(
        "--command",
        help="The memoryd command agents run (default: this install's absolute path;"
        " `memoryd` in a project's config).",
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print what would change; write nothing.")
]


def _manifest_path(home: Path | None) -> tuple[Path, Path | None]:
    """The history file, and the data dir to bake into commands when one was chosen.

    `--home`/`MEMORYD_HOME` is written into hooks, MCP entries and units because agents and
    schedulers start memoryd without the user's shell environment.
    """
    from memoryd.config import load_settings

    data_dir = load_settings(home).home
    return data_dir / "setup" / "history.jsonl", (data_dir if home is not None else None)


def _configure(
    kind: Literal["hooks", "mcp"],
    agent: str,
    *,
    project: bool,
    user: bool,
    directory: Path | None,
    command: str | None,
    dry_run: bool,
    home: Path | None,
    as_json: bool,
) -> None:
    from memoryd.setup import agents, configfiles, install

    try:
        spec = agents.get_agent(agent)
        scope = agents.pick_scope(spec, project=project, user=user)
        exe = agents.mcp_executable(command, scope)
        history, baked_home = _manifest_path(home)
        planner = install.plan_hooks if kind == "hooks" else install.plan_mcp
        change = planner(
            spec,
            scope,
            user_home=Path.home(),
            project=(directory or Path.cwd()).absolute(),
            exe=exe,
            home=baked_home,
        )
        written: list[Written] = []
        if not dry_run:
            written = configfiles.apply(
                [change],
                configfiles.Manifest(history),
                command=kind,
                agent=spec.name,
                scope=scope,
            )
    except MemorydError as exc:
        raise fail(exc) from exc
    where = spec.hooks if kind == "hooks" else spec.mcp
    notes = list(where.notes) if where is not None else []
    if scope == "project":
        runs = "mcp" if kind == "mcp" else "capture/inject"
        notes += agents.project_mcp_notes(exe, baked_home, runs)
    if kind == "hooks" and spec.hooks is not None and change.status != "unchanged":
        notes += _hook_notes(spec.hooks.events, home)
    _report(kind, spec.name, scope, change, written, dry_run, notes, as_json)


def _hook_notes(events: Sequence[HookEvent], home: Path | None) -> list[str]:
    """What the hooks do, and whether they start the daemon (the first prompt's cost)."""
    from memoryd.autostart import NO_AUTOSTART_ENV, opted_out
    from memoryd.config import load_settings

    by_action: dict[str, list[str]] = {}
    for event in events:
        by_action.setdefault(event.action, []).append(event.event)
    notes = [
        f"{', '.join(names)} run `memoryd {action}`"
        + (" (recall into the prompt)" if action == "inject" else " (save the session)")
        for action, names in by_action.items()
    ]
    if opted_out(load_settings(home).daemon.autostart):
        notes.append(
            "autostart is off: start the daemon yourself (`memoryd serve --detach`), or each"
            " recall opens the stores in the hook (seconds per prompt)"
        )
    else:
        notes.append(
            "the hooks start the memoryd daemon in the background when none runs (the first"
            " prompt may get no recall while it starts); turn that off with"
            f" {NO_AUTOSTART_ENV}=1 or `[daemon] autostart = false`"
        )
    return notes


def _report(
    kind: str,
    agent: str,
    scope: str,
    change: FileChange,
    written: list[Written],
    dry_run: bool,
    notes: list[str],
    as_json: bool,
) -> None:
    backup = next((w.backup for w in written if w.backup is not None), None)
    if as_json:
        item: dict[str, Any] = {"path": str(change.path), "status": change.status}
        if dry_run:
            item["diff"] = change.diff()
        else:
            item["backup"] = str(backup) if backup else None
        emit_json(
            {
                "agent": agent,
                "kind": kind,
                "scope": scope,
                "dry_run": dry_run,
                "files": [item],
                "notes": notes,
            }
        )
        return
    if dry_run:
        typer.echo(change.diff() or f"{change.path}: no changes", nl=not change.diff())
        return
    saved = f" (backup: {backup})" if backup else ""
    typer.echo(f"{change.status} {change.path}{saved}")
    for note in notes:
        typer.echo(f"note: {note}")


@setup_app.command("hooks")
def hooks(
    agent: AgentOpt,
    project: ProjectOpt = False,
    user: UserOpt = False,
    directory: DirOpt = None,
    command: CommandOpt = None,
    dry_run: DryRunOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Install the agent's capture and recall hooks (merged into its own config file).

    memoryd's previous entries are replaced in place; every other hook is kept. The file is
    backed up first and the change is recorded, so `memoryd setup undo` can restore it.
    """
    _configure(
        "hooks",
        agent,
        project=project,
        user=user,
        directory=directory,
        command=command,
        dry_run=dry_run,
        home=home,
        as_json=as_json,
    )


@setup_app.command("mcp")
def mcp(
    agent: AgentOpt,
    project: ProjectOpt = False,
    user: UserOpt = False,
    directory: DirOpt = None,
    command: CommandOpt = None,
    dry_run: DryRunOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register `memoryd mcp` as an MCP server in the agent's config (merged, backed up)."""
    _configure(
        "mcp",
        agent,
        project=project,
        user=user,
        directory=directory,
        command=command,
        dry_run=dry_run,
        home=home,
        as_json=as_json,
    )


@setup_app.command("undo")
def undo(
    agent: Annotated[
        str | None, typer.Option("--agent", help="Only this agent's setup runs.")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Undo every setup run not yet undone, newest first.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Restore even files changed since memoryd wrote them.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be restored; change nothing.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Restore the files the latest setup run changed (delete the ones it created)."""
    from memoryd.setup import agents, configfiles

    try:
        name = agents.get_agent(agent).name if agent is not None else None
        history, _ = _manifest_path(home)
        done = configfiles.undo(
            configfiles.Manifest(history), agent=name, every=every, force=force, dry_run=dry_run
        )
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(
            [
                {
                    "path": str(r.path),
                    "action": r.action,
                    "agent": r.agent,
                    "run": r.run,
                    "backup": str(r.backup) if r.backup else None,
                    "dry_run": dry_run,
                }
                for r in done
            ]
        )
        return
    for r in done:
        source = f" from {r.backup}" if r.backup else ""
        action = (
            {"restored": "would restore", "deleted": "would delete"}[r.action]
            if dry_run
            else r.action
        )
        typer.echo(f"{action} {r.path}{source}")
    if dry_run:
        typer.echo("(dry run: nothing was changed)")


@setup_app.command("auto-install")
def auto_install(
    dry_run: DryRunOpt = False,
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="Stop and remove memoryd's schedules.")
    ] = False,
    command: CommandOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the daemon at login and memoryd's periodic jobs: systemd user units on Linux,
    launch agents on macOS, else a marked block in your crontab."""
    from memoryd.setup import agents, schedules

    try:
        host = schedules.current_host()
        exe = agents.resolve_executable(command) if not uninstall else ["memoryd"]
        _, baked_home = _manifest_path(home)
        plan = schedules.plan_schedules(host, exe, home=baked_home, uninstall=uninstall)
        result = None
        if not dry_run:
            state_dir = _manifest_path(home)[0].parent
            result = schedules.apply_schedules(plan, host, state_dir)
    except MemorydError as exc:
        raise fail(exc) from exc
    _report_schedules(plan, result, as_json)


def _report_schedules(plan: SchedulePlan, result: ScheduleResult | None, as_json: bool) -> None:
    import difflib

    crontab_diff = ""
    if plan.crontab is not None:
        before, after = plan.crontab
        crontab_diff = "".join(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile="crontab",
                tofile="crontab",
            )
        )
    commands = [*plan.before, *plan.after]
    if plan.crontab is not None and crontab_diff:
        commands.append(["crontab", "-"])
    ran: list[dict[str, Any]]
    if result is not None:
        ran = [{"argv": argv, "returncode": done.returncode} for argv, done in result.commands]
    else:
        ran = [{"argv": argv, "returncode": None} for argv in commands]
    if as_json:
        backup = result.crontab_backup if result is not None else None
        emit_json(
            {
                "backend": plan.backend,
                "dry_run": result is None,
                "files": [
                    {"path": str(c.path), "status": c.status, "content": c.after}
                    for c in plan.files
                ],
                "removed": [str(p) for p in plan.remove],
                "commands": ran,
                "crontab_diff": crontab_diff,
                "crontab_backup": str(backup) if backup else None,
            }
        )
        return
    verb = "would" if result is None else "did"
    typer.echo(f"scheduler: {plan.backend}")
    for change in plan.files:
        if result is None and change.status != "unchanged":
            typer.echo(f"# {change.path} ({change.status})\n{change.after}")
        else:
            typer.echo(f"{change.status} {change.path}")
    for path in plan.remove:
        typer.echo(f"{verb} remove {path}")
    if crontab_diff:
        typer.echo(crontab_diff, nl=False)
    elif plan.crontab is not None:
        typer.echo("crontab: no changes")
    for item in ran:
        line = shlex.join(item["argv"])
        typer.echo(f"$ {line}" if result else f"{verb} run: {line}")
    if result and result.crontab_backup:
        typer.echo(f"previous crontab saved to {result.crontab_backup}")


@setup_app.command("falkordb")
def falkordb(
    stop: Annotated[bool, typer.Option("--stop", help="Stop the local server.")] = False,
    tcp_port: Annotated[
        int,
        typer.Option(
            "--tcp-port",
            min=0,
            max=65535,
            help="Also listen on 127.0.0.1:PORT, where a team server's replica connects.",
        ),
    ] = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a local FalkorDB server (from the `falkordb` extra's wheel) in <home>/falkordb/,
    on a Unix socket only (with --tcp-port, on 127.0.0.1 too, for a team server's replica:
    then with a password made on the first such start and kept in the OS keyring, or in a
    file only you can read where there is none), for graph.engine = "falkordb". A server
    already running without that port is restarted with it when nothing is attached to it.
    A team sets graph.url instead."""
    from memoryd.cli.running import load_settings
    from memoryd.graph import falkordb_server
    from memoryd.wiring import falkordb_address

    settings = load_settings(home)
    directory = settings.home / "falkordb"
    try:
        if stop:
            stopped = falkordb_server.stop_detached(directory)
            if as_json:
                emit_json({"stopped": stopped, "directory": str(directory)})
            else:
                typer.echo(f"stopped the server in {directory}" if stopped else "none was running")
            return
        server = falkordb_server.start_local(
            directory, detach=True, tcp_port=tcp_port, keyring=True
        )
    except MemorydError as exc:
        raise fail(exc) from exc
    url, name = falkordb_address(settings)
    if as_json:
        emit_json(
            {
                "url": server.url,
                "graph": name,
                "directory": str(directory),
                "tcp_port": tcp_port or None,
                "password": server.password is not None,
                "password_kept": server.kept or None,
                "restarted": server.restarted,
            }
        )
        return
    also = f" and 127.0.0.1:{tcp_port}" if tcp_port else ""
    typer.echo(f"FalkorDB serves {server.url}{also} (data and log in {directory}).")
    if server.restarted:
        typer.echo(f"memoryd restarted it to listen on 127.0.0.1:{tcp_port} with a password.")
    if server.kept:
        typer.echo(f"It asks every client for a password, made now and kept {server.kept};")
        typer.echo(f"memoryd reads it from there ({falkordb_server.PASSWORD_ENV} overrides it).")
    elif server.password is not None:
        record = directory / falkordb_server.PASSWORD_RECORD
        typer.echo(f"It asks every client for its password ({record} says where it is kept).")
    typer.echo('Use it: graph.engine = "falkordb" in config.toml (MEMORYD_GRAPH__ENGINE=falkordb),')
    typer.echo(f"then `memoryd reindex` fills the graph {name} from the vault.")
    if url != server.url:
        typer.echo(f"Note: graph.url is set to {url}, not this server.")


def register(app: typer.Typer) -> None:
    app.add_typer(setup_app, name="setup")
