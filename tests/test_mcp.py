"""memoryd's MCP server, driven by a real MCP client: in memory and over stdio."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from memoryd.mcp.server import create_server
from memoryd.service import MemoryService

pytestmark = pytest.mark.anyio
MEMORY_TOOLS = {
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "read_graph",
    "search_nodes",
    "open_nodes",
}
OWN_TOOLS = {
    "recall",
    "remember",
    "get_memory",
    "entity_context",
    "supersedes_chain",
    "list_promotions",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


MEMORY_GRAPH_FIXTURE = (
    Path(__file__).resolve().parents[2] / "shared/interop/fixtures/mcp_memory_graph.jsonl"
)


async def test_in_memory_tools(svc: MemoryService, project: Path) -> None:
    if not MEMORY_GRAPH_FIXTURE.is_file():
        pytest.skip(f"{MEMORY_GRAPH_FIXTURE} not found (../shared is absent)")
    async with Client(create_server(svc), raise_exceptions=True) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names >= OWN_TOOLS | MEMORY_TOOLS
        made = _data(
            await client.call_tool(
                "remember",
                {
                    "type": "decision",
                    "title": "Frontend uses Solid",
                    "body": "Solid, not React.",
                    "scope": str(project),
                },
            )
        )
        slug = made["slug"]
        hits = _data(await client.call_tool("recall", {"query": "Solid", "explain": True}))
        assert hits["hits"][0]["slug"] == slug
        assert "stages" in hits["hits"][0]
        got = _data(await client.call_tool("get_memory", {"slug": slug}))
        assert got["body"] == "Solid, not React."
        missing = await client.call_tool("get_memory", {"slug": "nope"})
        assert missing.is_error
        assert "memoryd list" in missing.content[0].text
        assert _data(await client.call_tool("supersedes_chain", {"slug": slug}))["chain"] == []
        promos = _data(await client.call_tool("list_promotions", {}))
        assert promos["promotions"] == []
        assert promos["note"]

        graph = [json.loads(line) for line in MEMORY_GRAPH_FIXTURE.read_text().splitlines()]
        entities = [
            {k: v for k, v in e.items() if k != "type"} for e in graph if e["type"] == "entity"
        ]
        relations = [
            {k: v for k, v in r.items() if k != "type"} for r in graph if r["type"] == "relation"
        ]
        created = _data(await client.call_tool("create_entities", {"entities": entities}))
        assert {"memoryd", "abble"} <= {e["name"] for e in created["entities"]}
        again = _data(await client.call_tool("create_entities", {"entities": entities[:1]}))
        assert again["entities"] == []
        rels = _data(await client.call_tool("create_relations", {"relations": relations}))
        assert len(rels["relations"]) == 2
        added = _data(
            await client.call_tool(
                "add_observations",
                {"observations": [{"entityName": "Solid", "contents": ["Signals-based"]}]},
            )
        )
        assert added["results"][0]["addedObservations"] == ["Signals-based"]
        unknown = await client.call_tool(
            "add_observations", {"observations": [{"entityName": "Nope", "contents": ["x"]}]}
        )
        assert unknown.is_error
        assert "not found" in unknown.content[0].text
        opened = _data(await client.call_tool("open_nodes", {"names": ["Solid"]}))
        solid = opened["entities"][0]
        assert solid["entityType"] == "library"
        assert "Signals-based" in solid["observations"]
        assert {"from": "memoryd", "to": "Solid", "relationType": "uses"} in opened["relations"]
        found = _data(await client.call_tool("search_nodes", {"query": "prefers uv"}))
        assert [e["name"] for e in found["entities"]] == ["abble"]
        page = _data(await client.call_tool("read_graph", {"offset": 0, "limit": 2}))
        assert len(page["entities"]) == 2
        assert page["next_offset"] == 2
        ctx = _data(await client.call_tool("entity_context", {"entity": "Solid"}))
        assert ctx["entity"]["name"] == "Solid"
        assert ctx["memories"]
        gone = await client.call_tool("delete_entities", {"entityNames": ["Solid"]})
        assert gone.is_error
        assert "Next step" in gone.content[0].text


async def test_stdio_subprocess(home: Path, project: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd", "mcp", "--embedded", "--home", str(home)],
        env=os.environ.copy(),
        cwd=str(project),
    )
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names >= OWN_TOOLS | MEMORY_TOOLS
        made = _data(
            await client.call_tool(
                "remember", {"type": "preference", "title": "Use uv", "body": "uv, never pip."}
            )
        )
        hits = _data(await client.call_tool("recall", {"query": "uv"}))
        assert hits["hits"][0]["slug"] == made["slug"]
