"""The options every command shares (`--home`, `--json`, `--scope`, `--limit`'s help) and the
checks of option values: paths no file system call could take, text that is not UTF-8, dates."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from memoryd.cli.output import fail
from memoryd.errors import InvalidInput
from memoryd.scope import path_problem


def path_param(param: typer.CallbackParam, value: Any) -> Any:
    """Every path option and argument: one no file system call could take (a NUL, a name
    past the OS's limit …) is a usage error, exit 2, named by click (`Invalid value for
    '--out': contains a NUL character …`). `--map-scope OLD=NEW` is checked on both sides."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if item is None:
            continue
        parts = str(item).split("=", 1) if param.name == "map_scope" else [str(item)]
        for part in parts:
            problem = path_problem(part)
            if problem is not None:
                raise typer.BadParameter(problem)
    return value


HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home",
        envvar="MEMORYD_HOME",
        help="Data dir (default: the platform data dir).",
        callback=path_param,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ScopeOpt = Annotated[
    str | None,
    typer.Option("--scope", help="A project path (or a 12-hex scope hash).", callback=path_param),
]
LIMIT_HELP = "How many to show at most."
"""Every command that caps its output takes `--limit` (short `-k`), the API's name for it."""


def utf8_option(value: str, flag: str) -> str:
    """An option's text, refused when it is not UTF-8 (the shell passes bytes through)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{flag} is not UTF-8 text (character {exc.start})",
            hint="re-encode the text as UTF-8",
        ) from exc
    return value


def parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise fail(InvalidInput(f"--since {value!r} is not a date like 2026-05-18")) from exc
