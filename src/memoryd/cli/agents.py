"""Agent-facing commands: `memoryd inject` (recall hooks) and `memoryd mcp` (MCP over stdio)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from memoryd.cli.options import HomeOpt
from memoryd.cli.output import fail
from memoryd.errors import MemorydError

logger = logging.getLogger(__name__)
MCP_ACTOR = "mcp"
"""Who the audit log names for writes an agent makes through `memoryd mcp`."""


def inject(
    source: Annotated[
        str, typer.Option("--source", help="claude-code, codex, cursor, gemini, windsurf, copilot")
    ] = "claude-code",
    k: Annotated[
        int, typer.Option("--limit", "-k", min=1, help="How many memories to recall.")
    ] = 8,
    budget_tokens: Annotated[
        int, typer.Option("--budget-tokens", min=50, help="Context budget (≈4 chars a token).")
    ] = 1500,
    home: HomeOpt = None,
) -> None:
    """SessionStart / UserPromptSubmit hook: print relevant memories as `additionalContext`.

    Reads the hook payload on stdin; always exits 0; errors go to <home>/logs/inject.log.
    """
    from memoryd.capture.inject import main as inject_main

    argv = ["--source", source, "-k", str(k), "--budget-tokens", str(budget_tokens)]
    if home is not None:
        argv += ["--home", str(home)]
    inject_main(argv)


def mcp(
    home: HomeOpt = None,
    embedded: Annotated[
        bool,
        typer.Option("--embedded", help="Open the stores in-process; never start a daemon."),
    ] = False,
) -> None:
    """Run memoryd's MCP server over stdio (talks to the daemon, starting one if needed)."""
    from memoryd.client.connect import connect
    from memoryd.config import load_settings
    from memoryd.mcp.server import create_server

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, force=True)
    try:
        settings = load_settings(home)
        remote = None if embedded else connect(settings.home, actor=MCP_ACTOR)
        if remote is None and not embedded:
            from memoryd.daemon.control import start_detached

            try:
                start_detached(settings, port=None, tcp=None)
                remote = connect(settings.home, actor=MCP_ACTOR)
            except MemorydError as exc:
                logger.warning("could not start the daemon (%s); running in-process", exc)
        if remote is not None:
            with remote:
                create_server(remote, home=settings.home).run()
            return
        from memoryd.wiring import open_service

        with open_service(settings) as svc:
            svc.actor = MCP_ACTOR
            svc.drain_inbox()
            svc.enrich_pending(use_llm=False)
            create_server(svc, home=settings.home).run()
    except MemorydError as exc:
        raise fail(exc) from exc


def register(app: typer.Typer) -> None:
    app.command("inject")(inject)
    app.command("mcp")(mcp)
