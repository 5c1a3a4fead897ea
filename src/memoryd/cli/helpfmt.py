"""How `--help` shows options: click's metavars (`SCOPE`, `LIMIT`) instead of typer's type
labels (`<str>`, `<bool>`, `<list[session|decision|…]>`), nothing for a flag, and a choice's
values in its help text, where they wrap between words.

typer's rich help puts the type label in a column of its own; a long one (the memory types)
took the width of the help column, so help wrapped every few words and the label itself was
cut mid-word. A positional argument's row already shows its name (`SLUG`), so it shows no
type label beside it (`NamedArgument`). `MemorydGroup` is the root command's class: when
typer has built the command tree it names every parameter's metavar once, before any help
is printed.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any

from typer.core import TyperArgument, TyperGroup, TyperOption


def _choices(param: TyperOption) -> list[str]:
    kind = param.type_descriptor
    if not kind.is_choice:
        return []
    return [c.value if isinstance(c, enum.Enum) else str(c) for c in kind.choices or ()]


def _name(param: TyperOption | TyperArgument) -> str:
    """`--limit` (of the parameter `k`) → LIMIT; an argument by its own name."""
    longs = [o for o in param.opts if o.startswith("--")] if isinstance(param, TyperOption) else []
    name = longs[0][2:] if longs else (param.name or "value")
    return name.replace("-", "_").upper()


def tidy_params(command: Any) -> None:
    """Give every parameter of `command` and of its subcommands a plain metavar."""
    _tidy_own(command)
    # `--help` is made on first use and cached; make it now so it is tidied too. It only
    # reads the context's help option names, which memoryd leaves at the default.
    helper = command.get_help_option(SimpleNamespace(help_option_names=["--help"]))
    if helper is not None:
        helper.metavar = ""
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            tidy_params(sub)


class NamedArgument(TyperArgument):
    """A positional argument shown by its name alone: typer's argument rows add the type
    label (`<str>`) even when the argument has a metavar."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _tidy_own(command: Any) -> None:
    for param in command.params:
        if isinstance(param, TyperArgument) and not isinstance(param, NamedArgument):
            # typer builds its arguments itself; only the help rendering changes.
            param.__class__ = NamedArgument
        if not isinstance(param, TyperOption | TyperArgument) or param.metavar is not None:
            continue
        if isinstance(param, TyperOption) and (param.is_flag or param.count):
            param.metavar = ""
            continue
        param.metavar = _name(param) + ("..." if param.nargs != 1 else "")
        choices = _choices(param) if isinstance(param, TyperOption) else []
        if choices:
            listed = f"One of: {', '.join(choices)}."
            param.help = f"{param.help} {listed}" if param.help else listed


class MemorydGroup(TyperGroup):
    """The `memoryd` root command: typer's group with `tidy_params` run over the tree."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tidy_params(self)

    def get_params(self, ctx: Any) -> Any:
        _tidy_own(self)  # typer adds the completion options after __init__
        return super().get_params(ctx)
