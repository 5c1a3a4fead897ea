"""`memoryd sync …`: memories.json between devices, and to and from mcp-memory-service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, path_param
from memoryd.cli.output import emit_json, fail, print_table
from memoryd.cli.running import service
from memoryd.errors import InvalidInput
from memoryd.sync.models import ConflictStrategy, ImportReport

sync_app = typer.Typer(
    help="Sync memories between machines through one memories.json file.", no_args_is_help=True
)

FromOpt = Annotated[
    Path, typer.Option("--from", help="The memories.json to read.", callback=path_param)
]
MapScopeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map-scope",
        callback=path_param,
        help="OLD=NEW: put the file's scope OLD (hash) into the local scope NEW (hash or path).",
    ),
]
ScopeForForeign = Annotated[
    str | None,
    typer.Option(
        "--scope",
        callback=path_param,
        help="Project path for memories that carry no scope (mcp-memory-service's); default: here.",
    ),
]


PassphraseFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--passphrase-file",
        callback=path_param,
        help="Read the sync passphrase from the first line of this file (never give it as an"
        " option: it would stay in the shell history).",
    ),
]


def _passphrase(file: Path | None, prompt: str | None, *, confirm: bool) -> str | None:
    """The sync passphrase: the first line of `file`, else asked on the terminal (hidden)
    when `prompt` is given, else None."""
    if file is not None:
        try:
            text = file.expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(InvalidInput(f"cannot read the passphrase file {file}: {exc}")) from exc
        phrase = text.splitlines()[0] if text.strip() else ""
        if not phrase:
            raise fail(InvalidInput(f"the passphrase file {file} is empty"))
        return phrase
    if prompt is None:
        return None
    try:
        value: str = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    except typer.Abort:
        raise fail(
            InvalidInput("no passphrase given", hint="type it, or use --passphrase-file FILE")
        ) from None
    return value


def _map_scope(values: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values or []:
        old, sep, new = value.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise fail(
                InvalidInput(
                    f"--map-scope {value!r} is not OLD=NEW",
                    hint="e.g. --map-scope 1a2b3c4d5e6f=~/src/project",
                )
            )
        out[old.strip()] = new.strip()
    return out


@sync_app.command("export")
def export(
    out: Annotated[
        Path, typer.Option("--out", help="The memories.json to write.", callback=path_param)
    ],
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope", help="Only this scope (a path or a 12-hex hash).", callback=path_param
        ),
    ] = None,
    include_audit_chain: Annotated[
        bool, typer.Option("--include-audit-chain", help="Carry the audit log, verifiable.")
    ] = False,
    include_embeddings: Annotated[
        bool, typer.Option("--include-embeddings", help="Add each memory's stored embedding.")
    ] = False,
    chunk_size_mb: Annotated[
        float,
        typer.Option("--chunk-size-mb", help="Bodies above this go to FILE.chunks/<sha>.bin."),
    ] = 5.0,
    encrypt: Annotated[
        bool,
        typer.Option(
            "--encrypt",
            help="Seal the sensitive memories with a passphrase (asked for) into the file's"
            " `encryption` block; needs a grant on their scopes.",
        ),
    ] = False,
    passphrase_file: PassphraseFileOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write every memory (or one scope's) to one file: the same state gives the same bytes.
    A sensitive memory is never written in plaintext: with --encrypt or --passphrase-file it
    is sealed (mcp-memory-service never sees it), else it is left out."""
    prompt = "Passphrase to seal the sensitive memories with" if encrypt else None
    phrase = _passphrase(passphrase_file, prompt, confirm=True)
    from memoryd.cli.progress import progress_bar

    with service(home, writes=True) as svc, progress_bar("export", quiet=as_json) as progress:
        report = svc.sync_export(
            out,
            scope=scope,
            include_audit_chain=include_audit_chain,
            include_embeddings=include_embeddings,
            chunk_size_mb=chunk_size_mb,
            passphrase=phrase,
            progress=progress,
        )
    if as_json:
        emit_json(report)
        return
    typer.echo(
        f"exported {report.memories} memories, {report.entities} entities,"
        f" {report.relations} relations, {report.supersedes} supersedes edges"
        f"{f', {report.audit_lines} audit lines' if report.audit_lines else ''}"
        f" to {report.path} ({report.bytes} bytes, sha256 {report.sha256[:12]})"
    )
    if report.chunks:
        typer.echo(f"{len(report.chunks)} large bodies in {Path(report.chunks[0]).parent}")
    if report.encrypted:
        typer.echo(f"sealed {report.encrypted} sensitive memories with the passphrase")
    if report.omitted_sensitive:
        typer.echo(
            f"left out {report.omitted_sensitive} sensitive memories: {report.omitted_reason}",
            err=True,
        )


def _describe(report: ImportReport) -> None:
    verb = "would " if report.dry_run else ""
    for m in report.scope_mappings:
        where = f" ({m.remote_path} → {m.local_path})" if m.remote_path else ""
        typer.echo(f"scope {m.remote} → {m.local} [{m.how}]{where}")
    for slug in report.added:
        typer.echo(f"{verb}add {slug}")
    for change in report.updated:
        fields = ", ".join(f"{f.field}={f.took}" for f in change.fields)
        typer.echo(f"{verb}update {change.slug}: {fields}")
    for c in report.conflicts:
        typer.echo(f"{verb}keep local {c.slug}: body changed on both sides, remote in {c.path}")
    for s in report.skipped:
        typer.echo(f"{verb}skip {s.slug}: {s.reason}")
    for scope_hash in report.scopes_marked:
        typer.echo(f"{verb}mark scope {scope_hash} sensitive (a new key here)")
    if report.encrypted:
        typer.echo(f"{report.encrypted} sealed memories opened, sealed again under local keys")
    if report.embeddings_carried or report.embeddings_to_compute:
        typer.echo(
            f"embeddings: {report.embeddings_carried} {verb}kept as carried,"
            f" {report.embeddings_to_compute} left to compute here"
        )
    for merged in report.entities_merged:
        typer.echo(f"{verb}merge entity {merged}")
    for alias in report.aliases_added:
        typer.echo(f"{verb}alias {alias}")
    if report.superseded:
        typer.echo(f"the added memories supersede {report.superseded} older ones here")
    if report.identity_snapshot in ("written", "conflict"):
        typer.echo(f"identity snapshot: {verb}{report.identity_snapshot}")
    typer.echo(
        f"{'dry run: ' if report.dry_run else ''}{len(report.added)} added,"
        f" {len(report.updated)} updated, {report.unchanged} unchanged,"
        f" {len(report.conflicts)} conflicts, {len(report.skipped)} skipped,"
        f" {report.audit_events_imported} audit events from {report.source_machine}"
    )


@sync_app.command("import")
def import_(
    source: FromOpt,
    conflict: Annotated[
        str,
        typer.Option(
            "--conflict", help="merge (newer wins per field) | prefer-local | prefer-remote."
        ),
    ] = "merge",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what the import would do; write nothing.")
    ] = False,
    map_scope: MapScopeOpt = None,
    scope: ScopeForForeign = None,
    passphrase_file: PassphraseFileOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import a memories.json (memoryd's, or mcp-memory-service's). The whole file is checked
    first: a bad file (exit 2) names the position and writes nothing. Idempotent. Sealed
    sensitive memories need the passphrase they were exported with (asked for)."""
    if conflict not in ("merge", "prefer-local", "prefer-remote"):
        raise fail(
            InvalidInput(
                f"--conflict {conflict!r} is unknown", hint="merge, prefer-local or prefer-remote"
            )
        )
    strategy: ConflictStrategy = conflict  # type: ignore[assignment]
    from memoryd.sync.document import sealed_count  # the file format: only when importing

    mapping = _map_scope(map_scope)
    sealed = sealed_count(source)
    prompt = f"Passphrase of the {sealed} sealed memories in {source.name}" if sealed else None
    phrase = _passphrase(passphrase_file, prompt, confirm=False)
    from memoryd.cli.progress import progress_bar

    with (
        service(home, writes=not dry_run) as svc,
        progress_bar("import", quiet=as_json) as progress,
    ):
        report = svc.sync_import(
            source,
            conflict=strategy,
            dry_run=dry_run,
            map_scope=mapping,
            scope=Path(scope).resolve() if scope else Path.cwd(),
            passphrase=phrase,
            progress=progress,
        )
    if as_json:
        emit_json(report)
    else:
        _describe(report)


@sync_app.command("diff-with-remote")
def diff_with_remote(
    source: FromOpt,
    map_scope: MapScopeOpt = None,
    scope: ScopeForForeign = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Memories the file adds, those it lacks (in the scopes it covers), and those that differ,
    with the fields that differ."""
    mapping = _map_scope(map_scope)
    with service(home) as svc:
        diff = svc.sync_diff(
            source, map_scope=mapping, scope=Path(scope).resolve() if scope else Path.cwd()
        )
    if as_json:
        emit_json(diff)
        return
    for slug in diff.added:
        typer.echo(f"+ {slug}")
    for slug in diff.removed:
        typer.echo(f"- {slug}")
    for changed in diff.changed:
        typer.echo(f"~ {changed.slug}: {', '.join(changed.fields)}")
    typer.echo(
        f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed",
        err=True,
    )
    if diff.sealed_not_compared:
        typer.echo(
            f"not compared: {diff.sealed_not_compared} sealed sensitive memories in the file"
            " (`sync import --dry-run --passphrase-file F` opens and compares them)",
            err=True,
        )


@sync_app.command("conflicts")
def conflicts(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Memories whose body both sides changed: the remote version waits in _conflicts/."""
    with service(home) as svc:
        rows = svc.sync_conflicts()
    if as_json:
        emit_json(rows)
        return
    if not rows:
        typer.echo("no open sync conflicts")
        return
    print_table(
        ["slug", "source", "file"], [[c.slug, c.source, c.path] for c in rows], wrap=("file",)
    )


@sync_app.command("resolve")
def resolve(
    slug: Annotated[str, typer.Argument(help="The memory's slug (or `identity`).")],
    take: Annotated[
        str, typer.Option("--take", help="local | remote | FILE holding the merged body.")
    ],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Close a conflict by keeping the local body, taking the remote one, or a file's."""
    if take not in ("local", "remote"):
        take = str(Path(take).resolve())
    with service(home, writes=True) as svc:
        result = svc.sync_resolve(slug, take)
    if as_json:
        emit_json(result)
    else:
        typer.echo(f"resolved {result.slug}: took {result.took}")


def register(app: typer.Typer) -> None:
    app.add_typer(sync_app, name="sync")
