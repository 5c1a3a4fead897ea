"""memoryd's entry points: the `memoryd` console script and `python -m memoryd`.

`memoryd.cli.main` imports typer, rich, pydantic, the settings, the service, the search index
and tantivy: more than a SessionEnd hook's whole budget. So both enter here: `memoryd capture …`
and `memoryd inject …` (the hooks) run and exit before any of that is loaded, and every other
command falls through to the full CLI.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys


def is_capture_call(argv: list[str], command: str = "capture") -> bool:
    """`memoryd capture …` (console script or `python -m memoryd`), but not `--help`."""
    if len(argv) < 2 or argv[1] != command:
        return False
    program = argv[0].replace("\\", "/")
    name = program.rsplit("/", 1)[-1].removesuffix(".exe")
    started_as_memoryd = name == "memoryd" or program.endswith("memoryd/__main__.py")
    return started_as_memoryd and not {"--help", "-h"} & set(argv[2:])


def dispatch() -> None:
    """Run the capture and exit, when this process is `memoryd capture`."""
    if is_capture_call(sys.argv, "inject"):  # `memoryd inject`: the same fast path
        from memoryd.capture.inject import main as inject_main

        inject_main(sys.argv[2:])
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stdout.flush()
        os._exit(0)
    if not is_capture_call(sys.argv):
        return
    # A short-lived process: the collector would only walk the parsed transcript, and tearing
    # the interpreter down frees nothing the OS does not; both cost the hook's budget.
    gc.disable()
    from memoryd.capture.hook import main as capture_main

    code = capture_main(sys.argv[2:])
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def main() -> None:
    """A console-script entry point: capture fast, anything else through the full CLI."""
    from memoryd.private import private_umask

    private_umask()  # the data dir is private, engines' own files included (memoryd.private)
    dispatch()
    from memoryd.native import limit_malloc_arenas

    limit_malloc_arenas()  # before any command starts the graph engine's threads
    from memoryd.cli.main import main as cli_main

    cli_main()
