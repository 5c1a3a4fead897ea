"""What an MCP client sees of memoryd's tools before calling one (issue 29): every parameter
described, the official memory server's item shapes, one-line argument errors naming the
item and field, the package version in `serverInfo`, and the CLI's empty-query rule."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent, Tool
from typer.testing import CliRunner

import memoryd
from memoryd.cli.main import app
from memoryd.mcp.server import create_server
from memoryd.service import MemoryService
from tests.daemon_harness import running
from tests.integration.test_mcp import MEMORY_TOOLS, OWN_TOOLS
from tests.integration.test_mcp_http import over_socket

pytestmark = pytest.mark.anyio

ENTITY = {"name", "entityType", "observations"}
RELATION = {"from", "to", "relationType"}
# The official server's item fields (modelcontextprotocol/servers src/memory/index.ts): every
# one required, strings, and the lists lists of strings.
OFFICIAL_ITEMS = {
    ("create_entities", "entities"): ENTITY,
    ("create_relations", "relations"): RELATION,
    ("delete_relations", "relations"): RELATION,
    ("add_observations", "observations"): {"entityName", "contents"},
    ("delete_observations", "deletions"): {"entityName", "observations"},
}
LIST_FIELDS = {"observations", "contents"}
GOOD = {
    "create_entities": {"name": "Kuzu", "entityType": "database", "observations": ["Embedded"]},
    "create_relations": {"from": "memoryd", "to": "Kuzu", "relationType": "uses"},
    "delete_relations": {"from": "memoryd", "to": "Kuzu", "relationType": "uses"},
    "add_observations": {"entityName": "Kuzu", "contents": ["Columnar"]},
    "delete_observations": {"entityName": "Kuzu", "observations": ["Embedded"]},
}
# One mistake per tool, in the second item: the message names `<param>[1].<field>`.
MALFORMED = [
    (
        "create_entities",
        "entities",
        {"nome": "typo", "entityType": "x", "observations": []},
        "name",
    ),
    ("create_entities", "entities", {"name": "A", "entityType": "x"}, "observations"),
    (
        "create_entities",
        "entities",
        {"name": "A", "entityType": "x", "observations": "a"},
        "observations",
    ),
    ("create_relations", "relations", {"from": "a", "too": "b", "relationType": "uses"}, "to"),
    (
        "delete_relations",
        "relations",
        {"from": "a", "to": "b", "relation_type": "uses"},
        "relationType",
    ),
    ("add_observations", "observations", {"entityName": "Kuzu", "content": ["x"]}, "contents"),
    ("delete_observations", "deletions", {"entity": "Kuzu", "observations": ["x"]}, "entityName"),
    ("delete_observations", "deletions", "Kuzu", "deletions[1]"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def text(result: Any) -> str:
    content = result.content[0]
    assert isinstance(content, TextContent), content
    return content.text


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    found: dict[str, Any] = schema["$defs"][ref.removeprefix("#/$defs/")]
    return found


def undescribed(tool: Tool) -> list[str]:
    """Every parameter of `tool`, and every field of an object it takes, without a description."""
    schema = tool.input_schema
    missing = []
    for name, prop in schema.get("properties", {}).items():
        if not str(prop.get("description", "")).strip():
            missing.append(f"{tool.name}.{name}")
        item = resolve(schema, prop.get("items", {}))
        for field, sub in item.get("properties", {}).items():
            if not str(sub.get("description", "")).strip():
                missing.append(f"{tool.name}.{name}[].{field}")
    return missing


def check_listing(tools: list[Tool]) -> None:
    names = {t.name for t in tools}
    assert names >= OWN_TOOLS | MEMORY_TOOLS
    assert len(tools) >= 22
    assert [m for t in tools for m in undescribed(t)] == []
    by_name = {t.name: t for t in tools}
    for (tool, param), fields in OFFICIAL_ITEMS.items():
        schema = by_name[tool].input_schema
        assert schema["required"] == [param], tool
        prop = schema["properties"][param]
        assert prop["type"] == "array", tool
        item = resolve(schema, prop["items"])
        assert item["type"] == "object", tool
        assert set(item["properties"]) == fields, tool
        assert set(item["required"]) == fields, tool
        for field, sub in item["properties"].items():
            if field in LIST_FIELDS:
                assert sub["type"] == "array", (tool, field)
                assert sub["items"] == {"type": "string"}, (tool, field)
            else:
                assert sub["type"] == "string", (tool, field)
    for tool, param in (("delete_entities", "entityNames"), ("open_nodes", "names")):
        prop = by_name[tool].input_schema["properties"][param]
        assert prop["items"] == {"type": "string"}, tool
    assert by_name["search_nodes"].input_schema["required"] == ["query"]


async def test_stdio_lists_every_tool_described_with_the_official_items(
    home: Path, project: Path
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", "--embedded", "--home", str(home)],
        env=os.environ.copy(),
        cwd=str(project),
    )
    async with Client(params) as client:
        assert client.server_info is not None
        assert client.server_info.name == "memoryd"
        assert client.server_info.version == memoryd.__version__
        check_listing((await client.list_tools()).tools)


@pytest.mark.parametrize(("tool", "param", "bad", "field"), MALFORMED)
async def test_a_malformed_item_is_a_one_line_error_naming_item_and_field(
    svc: MemoryService, project: Path, tool: str, param: str, bad: Any, field: str
) -> None:
    async with Client(create_server(svc, default_scope=project)) as client:
        before = svc.cypher("MATCH (m:Memory) RETURN count(m)").rows
        result = await client.call_tool(tool, {param: [GOOD[tool], bad]})
        assert result.is_error, result
        message = text(result)
        where = field if field.startswith(param) else f"{param}[1].{field}"
        assert message.startswith(f"Error executing tool {tool}: {where}"), message
        assert "\n" not in message, message
        assert "pydantic" not in message, message
        assert "http" not in message, message
        # validated before anything is written: the good first item is not stored either
        assert svc.cypher("MATCH (m:Memory) RETURN count(m)").rows == before


async def test_a_misspelt_key_is_named_next_to_the_missing_field(
    svc: MemoryService, project: Path
) -> None:
    async with Client(create_server(svc, default_scope=project)) as client:
        result = await client.call_tool("create_entities", {"entities": [{"nome": "typo"}]})
        assert result.is_error
        message = text(result)
        for field in ("entities[0].name", "entities[0].entityType", "entities[0].observations"):
            assert field in message, message
        assert "nome" in message, message
        wrong = await client.call_tool("recall", {"query": "x", "k": "many"})
        assert text(wrong) == "Error executing tool recall: k: must be an integer (got 'many')"


QUERY_EMPTY = "the query is empty"


@pytest.mark.parametrize("query", ["", "   \n\t"])
async def test_an_empty_query_is_refused_as_the_cli_refuses_it(
    svc: MemoryService, home: Path, query: str
) -> None:
    async with Client(create_server(svc)) as client:
        result = await client.call_tool("recall", {"query": query})
        assert result.is_error
        message = text(result)
        assert message.startswith(f"Error executing tool recall: {QUERY_EMPTY} (hint: "), message
        assert "/docs" not in message
    svc.close()
    cli = CliRunner().invoke(app, ["recall", query, "--home", str(home)])
    assert cli.exit_code == 2, cli.output
    cli_message = cli.stderr.strip().removeprefix("error: ")
    assert message == f"Error executing tool recall: {cli_message}"


async def test_through_the_daemon_version_schemas_and_empty_query(
    home: Path, project: Path
) -> None:
    """`memoryd mcp` through a running daemon and the daemon's own `/mcp`: the same listing,
    the package version, and the empty-query rule without the HTTP API's `/docs` hint."""
    with running(home):
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memoryd", "mcp", "--home", str(home)],
            env=os.environ.copy(),
            cwd=str(project),
        )
        async with Client(params) as client:
            assert client.server_info is not None
            assert client.server_info.version == memoryd.__version__
            check_listing((await client.list_tools()).tools)
            empty = await client.call_tool("recall", {"query": ""})
            assert empty.is_error
            assert text(empty).startswith(f"Error executing tool recall: {QUERY_EMPTY} (hint: ")
            assert "/docs" not in text(empty)
        async with over_socket(home) as client:
            assert client.server_info is not None
            assert client.server_info.version == memoryd.__version__
            check_listing((await client.list_tools()).tools)
            blank = await client.call_tool("recall", {"query": "  "})
            assert text(blank).startswith(f"Error executing tool recall: {QUERY_EMPTY} (hint: ")
