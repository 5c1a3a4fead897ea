"""Interop commands: `memoryd import …` and `memoryd export …` for other memory tools' files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, path_param
from memoryd.cli.output import emit_json, fail
from memoryd.cli.running import service
from memoryd.errors import InvalidInput, MemorydError

import_app = typer.Typer(help="Import memories from other tools' files.", no_args_is_help=True)
export_app = typer.Typer(
    help="Export memoryd's graph to other tools' formats.", no_args_is_help=True
)


@import_app.command("mcp-memory")
def import_mcp_memory(
    file: Annotated[
        Path, typer.Argument(help="The MCP memory server's memory.jsonl.", callback=path_param)
    ],
    scope: Annotated[
        Path | None,
        typer.Option(
            "--scope",
            help="Project path the memories belong to (default: here).",
            callback=path_param,
        ),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import the official MCP memory server's knowledge graph (JSONL). Re-importing the same
    file adds nothing; a malformed line is reported with its number and nothing is written."""
    from memoryd.interop import mcp_memory_import

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(InvalidInput(f"cannot read {file}: {exc}")) from exc
    try:
        parsed = mcp_memory_import.parse_jsonl(text, source=str(file))
    except MemorydError as exc:
        raise fail(exc) from exc
    from memoryd.cli.progress import progress_bar

    with service(home, writes=True) as svc, progress_bar("import", quiet=as_json) as progress:
        try:
            report = mcp_memory_import.import_graph(
                svc, parsed, scope_path=scope, progress=progress
            )
        except MemorydError as exc:
            raise fail(exc) from exc
    if as_json:
        emit_json(
            {
                "entities_created": report.entities_created,
                "observations_added": report.observations_added,
                "relations_added": report.relations_added,
                "ignored_lines": report.ignored_lines,
                "superseded": report.superseded,
            }
        )
        return
    typer.echo(
        f"imported {file}: {report.entities_created} new entities,"
        f" {report.observations_added} observations, {report.relations_added} relations"
        + (f"; they supersede {report.superseded} older memories" if report.superseded else "")
    )
    if report.ignored_lines:
        lines = ", ".join(map(str, report.ignored_lines))
        typer.echo(f"ignored lines without type entity/relation: {lines}", err=True)


@export_app.command("mcp-memory")
def export_mcp_memory(
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write here (atomically) instead of stdout."),
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Export the knowledge graph as the official MCP memory server's JSONL file."""
    from memoryd.interop import mcp_memory

    with service(home) as svc:
        try:
            graph = mcp_memory.export_graph(svc)
        except MemorydError as exc:
            raise fail(exc) from exc
    if output is None:
        text = mcp_memory.to_jsonl(graph)
        sys.stdout.write(text + ("\n" if text else ""))
        return
    try:
        mcp_memory.write_jsonl(graph, output)
    except OSError as exc:
        raise fail(InvalidInput(f"cannot write {output}: {exc}")) from exc
    typer.echo(
        f"exported {len(graph['entities'])} entities and {len(graph['relations'])} relations"
        f" to {output}",
        err=True,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(import_app, name="import")
    app.add_typer(export_app, name="export")
