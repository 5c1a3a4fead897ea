"""memoryd's MCP server, driven by a real MCP client: in memory and over stdio."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from memoryd.interop import mcp_memory
from memoryd.mcp.server import create_server
from memoryd.models import DecayState
from memoryd.service import MemoryService
from tests.daemon_harness import running, uds_client

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
    "promote",
    "reject",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: Any) -> str:
    content = result.content[0]
    assert isinstance(content, TextContent), content
    return content.text


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(_text(result))


MEMORY_GRAPH_FIXTURE = (
    Path(__file__).resolve().parents[3] / "shared/interop/fixtures/mcp_memory_graph.jsonl"
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
        assert "memoryd list" in _text(missing)
        assert _data(await client.call_tool("supersedes_chain", {"slug": slug}))["chain"] == []
        promos = _data(await client.call_tool("list_promotions", {}))
        assert promos["promotions"] == []  # nothing was scored yet

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
        assert "not found" in _text(unknown)
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
        gone = _data(await client.call_tool("delete_entities", {"entityNames": ["Solid"]}))
        assert gone["success"] is True
        after = _data(await client.call_tool("read_graph", {}))
        assert "Solid" not in {e["name"] for e in after["entities"]}
        assert all("Solid" not in (r["from"], r["to"]) for r in after["relations"])


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


async def call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    return _data(await client.call_tool(tool, args))


ENTITIES = [
    {"name": "memoryd", "entityType": "project", "observations": ["Graph memory", "Uses Kuzu"]},
    {"name": "Kuzu", "entityType": "database", "observations": ["Embedded graph engine"]},
    {"name": "abble", "entityType": "person", "observations": ["Prefers uv"]},
]
# Arbitrary relationTypes: memoryd predicates written other ways, a synonym, free text.
RELATIONS = [
    {"from": "memoryd", "to": "Kuzu", "relationType": "depends on"},
    {"from": "abble", "to": "memoryd", "relationType": "worksOn"},
    {"from": "abble", "to": "Kuzu", "relationType": "inspired by"},
    {"from": "Kuzu", "to": "ghost", "relationType": "forked as"},
    {"from": "memoryd", "to": "Kuzu", "relationType": "uses"},
]


async def build_graph(client: Client) -> None:
    await call(client, "create_entities", {"entities": ENTITIES})
    made = await call(client, "create_relations", {"relations": RELATIONS})
    assert made["relations"] == RELATIONS
    again = await call(client, "create_relations", {"relations": RELATIONS[:1]})
    assert again["relations"] == []  # exact duplicates are skipped, as upstream


async def delete_some(client: Client) -> dict[str, Any]:
    """Delete one observation, one relation and one entity; returns the graph after."""
    graph = await call(client, "read_graph", {})
    assert RELATIONS[0] in graph["relations"]
    assert {"from": "Kuzu", "to": "ghost", "relationType": "forked as"} in graph["relations"]
    assert "ghost" not in {e["name"] for e in graph["entities"]}  # only a relation endpoint
    done = await call(
        client,
        "delete_observations",
        {
            "deletions": [
                {"entityName": "memoryd", "observations": ["Uses Kuzu", "never said"]},
                {"entityName": "nobody", "observations": ["x"]},
            ]
        },
    )
    assert done["success"] is True
    done = await call(
        client,
        "delete_relations",
        {
            "relations": [
                RELATIONS[0],
                {"from": "abble", "to": "memoryd", "relationType": "works_on"},  # not as made
            ]
        },
    )
    assert done["success"] is True
    done = await call(client, "delete_entities", {"entityNames": ["Kuzu", "nobody"]})
    assert done["deleted"] == ["Kuzu"]
    after: dict[str, Any] = await call(client, "read_graph", {})
    by_name = {e["name"]: e for e in after["entities"]}
    assert set(by_name) == {"memoryd", "abble"}
    assert by_name["memoryd"]["observations"] == ["Graph memory"]
    assert after["relations"] == [RELATIONS[1]]  # worksOn kept, everything with Kuzu gone
    return after


async def test_delete_tools_and_reindex(svc: MemoryService, project: Path) -> None:
    async with Client(create_server(svc, default_scope=project), raise_exceptions=True) as c:
        await build_graph(c)
        preds = svc.cypher(
            "MATCH (a:Entity)-[r:RELATES]->(b:Entity) RETURN b.name, r.predicate, r.label"
        ).rows
        assert ["Kuzu", "uses", "depends on"] in preds  # a synonym feeds recall as `uses`
        assert ["memoryd", "works_on", "worksOn"] in preds
        assert ["Kuzu", "mentions", "inspired by"] in preds
        assert ["Kuzu", "uses", None] in preds
        graph = await delete_some(c)
        exported = mcp_memory.export_graph(svc)
        assert [r["relationType"] for r in exported["relations"]] == ["worksOn"]
        snapshot = svc.graph.snapshot()
        svc.reindex()
        assert svc.graph.snapshot() == snapshot
        assert await call(c, "read_graph", {}) == graph
        assert mcp_memory.export_graph(svc) == exported
    # nothing was erased: the deleted facts are archived, and the audit log says why
    archived = svc.list_memories(state=DecayState.FORGOTTEN, limit=100)
    assert {m.title for m in archived} >= {"Uses Kuzu", "Embedded graph engine"}
    assert [r.target_id for r in svc.audit_records(event_type="entity_delete")] == [
        "entity:concept:Kuzu"
    ]


async def test_stdio_through_the_daemon(home: Path, project: Path) -> None:
    """`memoryd mcp` (not embedded) with a daemon running: graph writes go through it."""
    with running(home):
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memoryd", "mcp", "--home", str(home)],
            env=os.environ.copy(),
            cwd=str(project),
        )
        async with Client(params) as client:
            await build_graph(client)
            await delete_some(client)
            await call(
                client,
                "add_observations",
                {"observations": [{"entityName": "abble", "contents": ["Works from Berlin"]}]},
            )
            opened = await call(client, "open_nodes", {"names": ["abble"]})
            assert "Works from Berlin" in opened["entities"][0]["observations"]
        with uds_client(home) as http:
            audit = http.get("/v1/audit", params={"event_type": "entity_delete"}).json()
            assert [r["target_id"] for r in audit["items"]] == ["entity:concept:Kuzu"]
            assert {r["actor"] for r in audit["items"]} == {"mcp"}
            entities = http.get("/v1/entities", params={"q": "kuzu"}).json()["items"]
            assert entities == []
