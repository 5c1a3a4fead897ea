"""`memoryd capture`: the agents' hook command, and `memoryd capture retry`.

Hooks reach `memoryd.capture.hook.main` through `memoryd.entry` without importing
this module or the rest of the CLI. This typer command gives the same behaviour for `--help`,
for `memoryd -v capture …`, and for tests driving the CLI; it passes its arguments to the same
`main`, so both paths parse and behave alike.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from memoryd.capture.sources import SOURCES

HELP = "\n\n".join(
    [
        "Capture an agent session into one session memory (for agents' hooks).",
        "Reads the hook payload on stdin (the legacy Codex notify passes it as the last"
        " argument) and writes one session memory per agent session: captured again, the"
        " memory is updated, never duplicated. Secrets are redacted before anything is"
        " written. The memory is queued in <home>/inbox/ for indexing.",
        "Always exits 0 and prints only what the agent expects; failures are logged to"
        " <home>/logs/capture.log and kept (redacted) in <home>/inbox/failed/, which"
        " `memoryd capture retry` reprocesses.",
        f"Sources: {', '.join(SOURCES)}.",
    ]
)


def capture_command(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="`retry`; or the payload JSON (Codex notify); or a session file "
            "(codex-rollout, openclaw).",
            show_default=False,
        ),
    ] = None,
    source: Annotated[
        str, typer.Option("--source", help="The agent: " + "|".join(SOURCES) + ".")
    ] = "manual",
    home: Annotated[
        Path | None,
        typer.Option(
            "--home", envvar="MEMORYD_HOME", help="Data dir (default: the platform data dir)."
        ),
    ] = None,
) -> None:
    from memoryd.capture.hook import main as capture_main

    argv = [f"--source={source}"]
    if home is not None:
        argv.append(f"--home={home}")
    code = capture_main([*argv, *(args or [])], stdin=sys.stdin, stdout=sys.stdout)
    raise typer.Exit(code)


capture_command.__doc__ = HELP
