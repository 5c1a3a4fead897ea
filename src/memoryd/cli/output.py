"""What every command prints: the two consoles, JSON, tables of stored text with control
characters escaped, and the one mapping from a MemorydError to a line and an exit code.

Exit codes (stable, documented in the README):
0 ok · 1 unexpected error · 2 invalid input · 3 not found · 4 conflict · 5 policy denied ·
6 graph locked · 7 storage error · 8 config error · 9 audit chain broken.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from memoryd.errors import (
    AuditChainBroken,
    ConfigError,
    Conflict,
    GraphLocked,
    InvalidInput,
    MemorydError,
    NotFound,
    PolicyDenied,
    StorageError,
)

if TYPE_CHECKING:
    from rich.text import Text

    from memoryd.models import HiddenResults

EXIT_CODES: list[tuple[type[MemorydError], int]] = [
    (AuditChainBroken, 9),
    (GraphLocked, 6),
    (StorageError, 7),
    (ConfigError, 8),
    (InvalidInput, 2),
    (NotFound, 3),
    (Conflict, 4),
    (PolicyDenied, 5),
]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def exit_code(exc: MemorydError) -> int:
    return next((code for cls, code in EXIT_CODES if isinstance(exc, cls)), 1)


def fail(exc: MemorydError) -> typer.Exit:
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    err.print(f"error: {exc.message}{hint}", markup=False)
    return typer.Exit(exit_code(exc))


def say_hidden(hidden: Iterable[HiddenResults]) -> None:
    """Say what a read left out in sensitive scopes (on stderr: `--json` stays one document)."""
    for item in hidden:
        err.print(item.message, markup=False)


def emit_json(value: Any) -> None:
    from pydantic import BaseModel

    def default(obj: Any) -> Any:
        if isinstance(obj, BaseModel):
            return obj.model_dump(mode="json")
        if isinstance(obj, datetime | Path):
            return str(obj)
        raise TypeError(type(obj).__name__)

    typer.echo(json.dumps(value, default=default, ensure_ascii=False, indent=2))


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on rather than shows (ESC, CSI, backspace, carriage return,
bidi overrides): stored text must not move the cursor, recolour or retitle a terminal."""
TABLE_FLEX_MIN = 24
"""The narrowest a wrapping column (a title) gets before a table grows past the terminal."""


def printable(text: str) -> str:
    """`text` with control characters shown escaped (`\\x1b`); newlines and tabs stay.
    For tables and plain output only: `--json` prints stored text exactly."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def print_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str | Text]],
    *,
    wrap: Collection[str] = ("title",),
) -> None:
    """A table whose cells are never cut: only the `wrap` columns (titles) wrap, and when
    the other columns (slugs, ids) do not fit the terminal the table grows past it rather
    than truncate a slug someone wants to copy. Cells are text, never rich markup."""
    from rich.table import Table
    from rich.text import Text

    table = Table(*headers)
    cells = [[c if isinstance(c, Text) else Text(printable(c)) for c in row] for row in rows]
    for row in cells:
        table.add_row(*row)
    need = 3 * len(headers) + 1  # a space each side of a cell, and the borders
    for i, column in enumerate(table.columns):
        widest = max(
            (line.cell_len for row in cells for line in row[i].split("\n")),
            default=0,
        )
        widest = max(widest, len(headers[i]))
        column.overflow = "fold"  # a word wider than its column breaks; nothing becomes "…"
        if headers[i] in wrap:
            need += min(widest, TABLE_FLEX_MIN)
        else:
            column.no_wrap = True
            need += widest
    if need > out.width:
        table.width = need
    out.print(table)
