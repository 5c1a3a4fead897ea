"""`memoryd team ...`: a team server's users, tokens and grants, and the server itself.

    memoryd team init [--host H] [--port P] [--falkordb-url URL]   a team data dir, TLS pair
    memoryd team user add NAME [--expires-days N] [--admin]       prints the token once
    memoryd team user admin NAME [--off]                          a team admin (HTTP admin)
    memoryd team user list [--json]                               users, tokens, grants
    memoryd team token add USER | team token revoke ID|TOKEN
    memoryd team grant USER PROJECT --role read|write|admin       PROJECT: its git remote
    memoryd team revoke USER PROJECT
    memoryd team serve  (or memoryd serve --team)                 TLS on [team] host:port

Each command works on the data dir `--home` (the team server's, never a developer's).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memoryd.cli.options import HomeOpt, JsonOpt
from memoryd.cli.output import emit_json, fail, print_table
from memoryd.cli.running import load_settings
from memoryd.errors import ConfigError, MemorydError
from memoryd.team.config import init_team, load_team, open_store
from memoryd.team.keys import project_key
from memoryd.team.policy import Role
from memoryd.team.store import TeamStore, TokenRow, utcnow

if TYPE_CHECKING:
    from memoryd.team_member.member import Membership

team_app = typer.Typer(help="A team server: users, tokens, project grants.", no_args_is_help=True)
user_app = typer.Typer(help="Team users.", no_args_is_help=True)
token_app = typer.Typer(help="Team users' tokens.", no_args_is_help=True)
team_app.add_typer(user_app, name="user")
team_app.add_typer(token_app, name="token")

ExpiresOpt = Annotated[
    float | None,
    typer.Option("--expires-days", min=0.0, help="The token stops working after this many days."),
]


def register(app: typer.Typer) -> None:
    app.add_typer(team_app, name="team")
    app.command("share")(share)


def share(
    slugs: Annotated[list[str] | None, typer.Argument(help="Memories to share, by slug.")] = None,
    scope: Annotated[
        Path | None, typer.Option("--scope", help="Share every memory of this project.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would go, send nothing.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy personal memories to the team (after `memoryd team join`), each with its
    supersedes chain. A sensitive scope is refused: nothing of it leaves this machine."""
    from memoryd.cli.running import run
    from memoryd.team_member.share import share as share_memories

    member = member_of(home)
    report = run(
        home,
        lambda svc: share_memories(svc, member, slugs or [], scope, dry_run=dry_run),
    )
    if as_json:
        emit_json(
            [{"slug": s, "title": t, "project": k, "team_slug": c} for s, t, k, c in report.rows]
        )
        return
    for slug, title, key, copy in report.rows:
        typer.echo(f"{slug} -> {key}: {copy or '(dry run)'}  {title}")
    verb = "would share" if dry_run else "shared"
    typer.echo(f"{verb} {len(report.rows)} memories with {member.url}", err=True)


def member_of(home: Path | None) -> Membership:
    """The team this data dir joined (`memoryd team join`); exit 8 when it joined none."""
    from memoryd.team_member.member import Membership

    try:
        settings = load_settings(home)
        member = Membership.load(settings.home)
        if member is None:
            raise ConfigError(
                f"{settings.home} is in no team", hint="run `memoryd team join URL --token-file F`"
            )
    except MemorydError as exc:
        raise fail(exc) from exc
    return member


def _store(home: HomeOpt) -> TeamStore:
    return open_store(load_team(load_settings(home).home))


def _expiry(days: float | None) -> str:
    return "" if days is None else f", expires in {days:g} days"


@team_app.command("init")
def init(
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8443,
    falkordb_url: Annotated[
        str | None, typer.Option("--falkordb-url", help="redis://… or unix://… of FalkorDB.")
    ] = None,
    graph_name: Annotated[
        str, typer.Option("--graph-name", help="The team's graph on that server.")
    ] = "team",
    home: HomeOpt = None,
) -> None:
    """Make a team data dir: team.toml, a self-signed TLS pair to try it, the user database."""
    try:
        settings = load_settings(home)
        config = init_team(
            settings.home,
            utcnow(),
            host=host,
            port=port,
            falkordb_url=falkordb_url,
            graph_name=graph_name,
        )
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(f"team data dir {settings.home}: https://{config.host}:{config.port}")
    typer.echo(f"TLS certificate (self-signed; clients must trust it): {config.cert}")


AdminOpt = Annotated[
    bool, typer.Option("--admin", help="A team admin: users, tokens and grants over HTTP too.")
]


@user_app.command("add")
def user_add(
    name: str, expires_days: ExpiresOpt = None, admin: AdminOpt = False, home: HomeOpt = None
) -> None:
    """Add a user and print their token (shown this once; the server keeps only a digest)."""
    now = utcnow()
    until = None if expires_days is None else now + timedelta(days=expires_days)
    try:
        store = _store(home)
        token = store.add_user(name, now, until)
        if admin:
            store.set_admin(name, True)
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(token)
    typer.echo(f"user {name} added{_expiry(expires_days)}; the token is not shown again", err=True)


def _token_state(row: TokenRow) -> str:
    now = utcnow()
    if row.revoked_at is not None:
        return f"revoked {row.revoked_at:%Y-%m-%d %H:%M}"
    if row.expires_at is not None and row.expires_at <= now:
        return f"expired {row.expires_at:%Y-%m-%d %H:%M}"
    return "active" if row.expires_at is None else f"until {row.expires_at:%Y-%m-%d %H:%M}"


@user_app.command("admin")
def user_admin(
    name: str,
    off: Annotated[bool, typer.Option("--off", help="Take the admin role away.")] = False,
    home: HomeOpt = None,
) -> None:
    """Make a user a team admin (or, with --off, no longer one)."""
    try:
        _store(home).set_admin(name, not off)
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(f"{name}: {'not ' if off else ''}a team admin")


@user_app.command("list")
def user_list(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Users, their tokens (ids and state, never the tokens) and their project roles."""
    try:
        users = _store(home).users()
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(
            [
                {
                    "user": name,
                    "tokens": [{"id": t.token_id, "state": _token_state(t)} for t in tokens],
                    "roles": {project: role.name.lower() for project, role in roles.items()},
                }
                for name, tokens, roles in users
            ]
        )
        return
    rows = [
        [
            name,
            ", ".join(f"{t.token_id} ({_token_state(t)})" for t in tokens),
            ", ".join(f"{p}: {r.name.lower()}" for p, r in sorted(roles.items())),
        ]
        for name, tokens, roles in users
    ]
    print_table(["user", "tokens", "projects"], rows)


@token_app.command("add")
def token_add(user: str, expires_days: ExpiresOpt = None, home: HomeOpt = None) -> None:
    """Give a user another token (printed once)."""
    now = utcnow()
    until = None if expires_days is None else now + timedelta(days=expires_days)
    try:
        token = _store(home).add_token(user, now, until)
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(token)


@token_app.command("revoke")
def token_revoke(token: str, home: HomeOpt = None) -> None:
    """Revoke a token by its id (`team user list`) or by the token itself; refused at once."""
    try:
        row = _store(home).revoke_token(token, utcnow())
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(f"token {row.token_id} of {row.user}: {_token_state(row)}")


@team_app.command("grant")
def grant(
    user: str,
    project: Annotated[str, typer.Argument(help="The project's git remote (any form) or key.")],
    role: Annotated[str, typer.Option("--role", help="read, write or admin.")] = "read",
    home: HomeOpt = None,
) -> None:
    """Give a user a role in a project (replaces the role they had there)."""
    try:
        key, parsed = project_key(project), Role.parse(role)
        _store(home).grant(user, key, parsed, utcnow())
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(f"{user}: {parsed.name.lower()} in {key}")


@team_app.command("revoke")
def revoke(user: str, project: str, home: HomeOpt = None) -> None:
    """Take a user's role in a project away."""
    try:
        key = project_key(project)
        gone = _store(home).revoke(user, key)
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(f"{user}: no role in {key}" + ("" if gone else " (had none)"))


@team_app.command("serve")
def serve(home: HomeOpt = None) -> None:
    """Run the team server: TLS on team.toml's host and port, every request gated by token
    (the same as `memoryd serve --team`)."""
    run_team_server(home)


def run_team_server(home: Path | None) -> None:
    """`memoryd serve --team` and `memoryd team serve`: this process becomes the team server."""
    from memoryd.daemon_files import configure_logging
    from memoryd.team_server.server import serve_team

    try:
        settings = load_settings(home)
        team = load_team(settings.home)
        configure_logging(verbose=logging.getLogger().isEnabledFor(logging.INFO))
        serve_team(settings, team)
    except MemorydError as exc:
        raise fail(exc) from exc


@team_app.command("backup")
def backup_command(
    out: Annotated[Path, typer.Argument(help="The archive to write (tar.gz).")],
    home: HomeOpt = None,
) -> None:
    """Archive the team data dir (vault, audit, users and tokens, keys, TLS pair) at one
    moment: a running team server holds its writes back for the copy; the graph and index
    are rebuilt on restore."""
    from memoryd.team.backup import backup, check_out

    try:
        settings = load_settings(home)
        load_team(settings.home)
        out = check_out(out)
        answer = _ask_server(settings.home, "POST", "/v1/team/backup", {"out": str(out)})
        if answer is None:  # no server runs: the data dir's lock keeps writers out
            typer.echo(f"{out}: {backup(settings.home, out)} files (no team server running)")
            return
    except MemorydError as exc:
        raise fail(exc) from exc
    graph = answer.get("graph") or {}
    typer.echo(
        f"{out}: {answer['files']} files, {graph.get('memories', '?')} memories at graph write"
        f" {graph.get('commits', '?')}; writes waited {answer['paused_ms']:.0f} ms"
    )


def _ask_server(
    home: Path, method: str, path: str, body: dict[str, object] | None = None
) -> dict[str, Any] | None:
    """A team route of the server running on `home`, on its admin socket (local rules, no
    token): its answer, or None when no server answers there."""
    import httpx

    from memoryd.client.wire import error_from_response, unix_socket_transport
    from memoryd.daemon_files import SOCKET_NAME

    if not (home / SOCKET_NAME).exists():
        return None
    try:
        with httpx.Client(
            transport=unix_socket_transport(home / SOCKET_NAME),
            base_url="http://localhost",
            timeout=httpx.Timeout(30, read=None),  # a backup of a large vault takes a while
        ) as client:
            answer = client.request(method, path, json=body)
    except (httpx.ConnectError, httpx.RemoteProtocolError, FileNotFoundError):
        return None
    if answer.status_code != 200:
        raise error_from_response(answer)
    data: dict[str, Any] = answer.json()
    return data


@team_app.command("restore")
def restore_command(
    archive: Annotated[Path, typer.Argument(help="An archive `team backup` wrote.")],
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535)] = None,
    falkordb_url: Annotated[str | None, typer.Option("--falkordb-url")] = None,
    graph_name: Annotated[str | None, typer.Option("--graph-name")] = None,
    home: HomeOpt = None,
) -> None:
    """Make a new team data dir from a backup and rebuild its graph and index from the vault
    (on the FalkorDB server and graph name given, else the backup's)."""
    from memoryd.team.backup import check_rebuilt, restore
    from memoryd.team.config import with_team_graph
    from memoryd.wiring import open_service

    try:
        settings = load_settings(home)
        restore(archive, settings.home, port=port, falkordb_url=falkordb_url, graph_name=graph_name)
        team = load_team(settings.home)
        service = open_service(with_team_graph(settings, team), actor="team-restore", rebuild=True)
        try:
            report = service.reindex()
            problem = check_rebuilt(settings.home, service.graph)
        finally:
            service.close()
    except MemorydError as exc:
        raise fail(exc) from exc
    if problem:
        typer.echo(f"note: {problem}; `memoryd doctor --home {settings.home}`", err=True)
    typer.echo(
        f"restored into {settings.home}: {report.indexed} memories on graph {team.graph_name}"
        f" ({report.seconds:.1f}s); start it with `memoryd serve --team --home {settings.home}`"
    )


@team_app.command("join")
def join(
    url: Annotated[str, typer.Argument(help="The team server, https://HOST:PORT.")],
    token_file: Annotated[
        Path, typer.Option("--token-file", help="A file holding your team token.")
    ],
    ca: Annotated[
        Path | None, typer.Option("--ca", help="The server's certificate, if self-signed.")
    ] = None,
    projects: Annotated[
        list[Path] | None,
        typer.Option("--project", help="A checkout of a shared project (repeatable)."),
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Join this data dir to a team: records in shared projects go to the team server, recall
    and inject there merge the team's memories with yours; everything else stays here."""
    from memoryd.team_member.member import join as join_team
    from memoryd.team_member.member import link

    try:
        settings = load_settings(home)
        member = join_team(settings.home, url, token_file, ca)
        linked = [link(member, path) for path in projects or []]
    except MemorydError as exc:
        raise fail(exc) from exc
    typer.echo(f"joined {member.url} as {member.user}; restart the daemon to use it")
    for key, role in sorted(member.roles.items()):
        typer.echo(f"  {key}: {role}" + (" (linked)" if key in linked else ""))


@team_app.command("status")
def status(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """On a team server: its users, projects and graph; on a developer's data dir: the team
    it joined and how many writes wait for the server."""
    from memoryd.team.config import team_file
    from memoryd.team_member.member import Membership
    from memoryd.team_member.outbox import waiting

    try:
        settings = load_settings(home)
        if team_file(settings.home).exists():
            report = _server_status(settings.home)
        else:
            member = Membership.load(settings.home)
            if member is None:
                raise ConfigError(
                    f"{settings.home} is neither a team server nor in a team",
                    hint="`memoryd team init` makes a server; `memoryd team join` joins one",
                )
            report = {
                "team": member.url,
                "user": member.user,
                "roles": member.roles,
                "waiting": waiting(settings.home),
            }
    except MemorydError as exc:
        raise fail(exc) from exc
    if as_json:
        emit_json(report)
        return
    for name, value in report.items():
        shown = (
            ", ".join(f"{k}: {v}" for k, v in value.items()) if isinstance(value, dict) else value
        )
        typer.echo(f"{name}: {shown}")


def _server_status(home: Path) -> dict[str, object]:
    """Users and projects, read from the files (the server may be running), and the graph's
    size, asked of the running server on its admin socket."""
    from memoryd.team.config import PROJECTS_DIR

    team = load_team(home)
    users = open_store(team).users()
    projects = sorted({project for _, _, roles in users for project in roles})
    on_disk = home / PROJECTS_DIR
    report: dict[str, object] = {
        "users": len(users),
        "active tokens": sum(
            1
            for _, tokens, _ in users
            for t in tokens
            if _token_state(t).startswith(("active", "until"))
        ),
        "projects": {p: "served" if (on_disk / p).is_dir() else "granted only" for p in projects},
        "graph": f"{team.graph_name} on {team.falkordb_url or 'the local FalkorDB'}",
    }
    try:
        live = _ask_server(home, "GET", "/v1/team/status")
    except MemorydError as exc:
        live, report["graph size"] = None, f"unknown: {exc}"
    if live is None:
        report.setdefault("graph size", "unknown: the team server is not running")
        return report
    size = live["graph"]
    report["graph size"] = f"{size['memories']} memories, {size['entities']} entities"
    report["replica"] = live["replica"]
    return report
