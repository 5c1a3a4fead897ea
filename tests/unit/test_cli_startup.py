"""The CLI starts without the stores: `memoryd --help`, and every command that talks to a
daemon, load neither the graph engine, the search index, spaCy, jieba nor the HTTP server.

Checked by what a fresh interpreter has imported (`sys.modules`), not by a clock, so the test
says which import came back and does not flake on a busy machine. Every command still builds
(`--help` resolves each option's type), and the few constants the CLI writes out to stay
light still equal the ones they stand for.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main
from typer.testing import CliRunner

from memoryd.cli.main import app

STORES_AND_SERVERS = (
    "kuzu",
    "ladybug",
    "tantivy",
    "spacy",
    "jieba",
    "fastapi",
    "uvicorn",
    "mcp",
    "pandas",
    "textual",
    "cryptography",
    "memoryd.service",
    "memoryd.wiring",
    "memoryd.recall",
    "memoryd.search.index",
    "memoryd.graph.kuzu_store",
    "memoryd.extraction.pipeline",
    "memoryd.daemon.server",
)
"""What only a command that opens the stores (or serves them) may load."""


def imported_by(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stderr == ""
    return set(json.loads(result.stdout))


@pytest.mark.parametrize(
    "statement",
    [
        "import memoryd.cli.main",
        # a command through a daemon: the CLI, its settings and the daemon's client
        "import memoryd.cli.main, memoryd.config, memoryd.client.connect",
        # `memoryd status|stop|serve --detach`
        "import memoryd.cli.main, memoryd.daemon.control",
    ],
)
def test_the_cli_starts_without_the_stores(statement: str) -> None:
    loaded = imported_by(statement)
    heavy = sorted(
        m for m in STORES_AND_SERVERS if any(x == m or x.startswith(m + ".") for x in loaded)
    )
    assert heavy == [], f"{statement!r} imports {heavy}: import them inside the command"


def test_help_needs_no_settings_and_no_http_client() -> None:
    loaded = imported_by("import memoryd.cli.main")
    assert {"pydantic_settings", "httpx", "rich.table", "memoryd.config"}.isdisjoint(loaded)


def test_every_command_builds() -> None:
    """A name an option's annotation uses must be imported at module level: typer resolves
    every command's annotations when it builds the CLI (at every start), so a name moved into
    a function by mistake fails here, for every command at once."""
    from memoryd.cli import knowledge  # after cli.main, which registers it

    commands: list[str] = []

    def walk(command: object, prefix: str) -> None:
        commands.append(prefix)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{prefix} {name}")

    walk(typer.main.get_command(app), "memoryd")
    assert len(commands) > 60
    assert "memoryd recall" in commands
    result = CliRunner().invoke(app, ["recall", "--help"])
    assert result.exit_code == 0
    assert str(knowledge.INJECT_MIN_SCORE) in result.output


def test_the_constants_the_cli_writes_out_match_their_sources() -> None:
    from memoryd.cli import digest, knowledge, sensitive
    from memoryd.governance.digest import MAX_LIMIT
    from memoryd.recall.config import INJECT_MIN_SCORE
    from memoryd.sensitive.keys import PASSPHRASE_ENV

    assert knowledge.INJECT_MIN_SCORE == INJECT_MIN_SCORE
    assert digest.MAX_LIMIT == MAX_LIMIT
    assert sensitive.PASSPHRASE_ENV == PASSPHRASE_ENV
