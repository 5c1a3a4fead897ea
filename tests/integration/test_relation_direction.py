"""A relation keeps its stored direction on every surface that shows a neighbourhood.

The chain Quill -uses-> Parchment -runs_on-> Inkwell, walked from each of its three ends: the
CLI (`graph neighbors`, `entity show`), the HTTP routes and the CLI through a real daemon, the
MCP `entity_context` tool, and the notebook client. The graph page draws the same rows; its
browser test is in tests/e2e/test_graph_page.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent
from typer.testing import CliRunner

import memoryd
from memoryd.cli.main import app
from memoryd.config import load_settings
from memoryd.mcp.server import create_server
from memoryd.models import MemoryDraft, MemoryType, RelationRef
from memoryd.wiring import open_service
from tests.conftest import isolate_environment
from tests.daemon_harness import running, uds_client

QUILL = "entity:project:Quill"
PARCHMENT = "entity:library:Parchment"
INKWELL = "entity:tool:Inkwell"
CHAIN = {(QUILL, "uses", PARCHMENT), (PARCHMENT, "runs_on", INKWELL)}
"""The stored edges, from -[predicate]-> to."""
WALKS = [(QUILL, 2), (PARCHMENT, 1), (INKWELL, 2)]
"""Each end of the chain, with the depth that reaches both edges from it."""

cli = CliRunner()


@pytest.fixture(scope="module")
def chain_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("direction")
    project = root / "project"
    project.mkdir()
    with pytest.MonkeyPatch.context() as env:
        # conftest's isolation is function-scoped and runs after module fixtures: redo it.
        isolate_environment(env, root)
        env.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
        home = root / "home"
        with open_service(load_settings(home)) as svc:
            for n, (subject, predicate, obj) in enumerate(sorted(CHAIN)):
                svc.record_graph_facts(
                    MemoryDraft(
                        type=MemoryType.FACT,
                        title=f"chain link {n}",
                        body=f"the {n}th link of the test chain",
                        scope_path=project,
                    ),
                    entity_ids=[subject, obj],
                    relations=[RelationRef(subject=subject, predicate=predicate, object=obj)],
                )
        yield home


def edges(rows: list[list[Any]]) -> set[tuple[str, str, str]]:
    return {(row[0], row[1], row[2]) for row in rows}


@pytest.mark.parametrize(("entity", "depth"), WALKS)
def test_cli_neighbors_keep_the_stored_direction(chain_home: Path, entity: str, depth: int) -> None:
    args = ["graph", "neighbors", entity, "--depth", str(depth), "--home", str(chain_home)]
    result = cli.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert edges(json.loads(result.stdout)["rows"]) == CHAIN
    table = cli.invoke(app, args)
    assert table.exit_code == 0, table.output
    lines = [" ".join(line.replace("│", " ").split()) for line in table.stdout.splitlines()]
    for src, predicate, dst in CHAIN:
        assert f"{src} {predicate} {dst} 1.00" in lines


@pytest.mark.parametrize("entity", [QUILL, PARCHMENT, INKWELL])
def test_entity_show_keeps_the_stored_direction(chain_home: Path, entity: str) -> None:
    result = cli.invoke(app, ["entity", "show", entity, "--home", str(chain_home)])
    assert result.exit_code == 0, result.output
    shown = {line.strip() for line in result.stdout.splitlines() if "-[" in line}
    expected = {f"{s} -[{p} 1.00]-> {d}" for s, p, d in CHAIN if entity in (s, d)}
    assert shown == expected
    as_json = cli.invoke(app, ["entity", "show", entity, "--json", "--home", str(chain_home)])
    relations = edges(json.loads(as_json.stdout)["relations"])
    assert relations == {edge for edge in CHAIN if entity in (edge[0], edge[2])}


def test_http_and_the_cli_through_the_daemon_keep_the_stored_direction(chain_home: Path) -> None:
    with running(chain_home) as daemon, uds_client(daemon.home) as http:
        for entity, depth in WALKS:
            answer = http.get(f"/v1/entities/{entity}/neighbors", params={"depth": depth})
            assert answer.status_code == 200, answer.text
            assert edges(answer.json()["rows"]) == CHAIN
            context = http.get(f"/v1/entities/{entity}/context")
            assert edges(context.json()["relations"]) == {e for e in CHAIN if entity in e}
            args = ["graph", "neighbors", entity, "--depth", str(depth), "--json"]
            result = cli.invoke(app, [*args, "--home", str(chain_home)])
            assert result.exit_code == 0, result.output
            assert edges(json.loads(result.stdout)["rows"]) == CHAIN


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_entity_context_keeps_the_stored_direction(chain_home: Path) -> None:
    with open_service(load_settings(chain_home)) as svc:
        async with Client(create_server(svc), raise_exceptions=True) as client:
            for entity in (QUILL, PARCHMENT, INKWELL):
                result = await client.call_tool("entity_context", {"entity": entity})
                assert not result.is_error, result.content
                text = result.content[0]
                assert isinstance(text, TextContent)
                data = result.structured_content or json.loads(text.text)
                assert edges(data["relations"]) == {e for e in CHAIN if entity in e}


def test_notebook_keeps_the_stored_direction(chain_home: Path) -> None:
    with memoryd.connect(chain_home) as mem:
        for entity, depth in WALKS:
            frame = mem.neighbours(entity, depth=depth)
            assert edges(frame[["from", "predicate", "to"]].values.tolist()) == CHAIN
            graph = mem.subgraph(entity, depth=2)
            relations = {
                (src, data["predicate"], dst)
                for src, dst, data in graph.edges(data=True)
                if data["kind"] == "relation"
            }
            assert relations == CHAIN
