"""memoryd's MCP tools with counts from -2^63 to past int64 (issue 26): a clear tool error
naming the argument, or a page; never a crash, never an engine error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from memoryd.mcp.server import create_server
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService

pytestmark = pytest.mark.anyio
HUGE = [2**31, 2**63 - 1, 2**63, 2**70]
NEGATIVE = [-1, -(2**63), -(2**70)]
COUNTED = [
    ("read_graph", "offset", {}),
    ("read_graph", "limit", {}),
    ("recall", "k", {"query": "redis"}),
    ("entity_context", "limit", {"entity": "Redis"}),
    ("list_promotions", "limit", {}),
    ("trends", "days", {}),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def text(result: Any) -> str:
    content = result.content[0]
    assert isinstance(content, TextContent), content
    return content.text


@pytest.fixture
def seeded(svc: MemoryService, project: Path) -> MemoryService:
    for title, body in (("Cache", "We use Redis 7 for sessions."), ("DB", "Orders in Postgres.")):
        draft = MemoryDraft(type=MemoryType.DECISION, title=title, body=body, scope_path=project)
        svc.record(draft)
    return svc


@pytest.mark.parametrize(("tool", "arg", "base"), COUNTED)
async def test_counts_are_bounded_with_a_clear_error(
    seeded: MemoryService, tool: str, arg: str, base: dict[str, Any]
) -> None:
    async with Client(create_server(seeded)) as client:
        for value in HUGE + NEGATIVE:
            result = await client.call_tool(tool, {**base, arg: value})
            if result.is_error:
                message = text(result)
                assert arg in message, (value, message)
                assert "graph error" not in message, (value, message)
            else:
                assert result.structured_content or json.loads(text(result))


SCOPED = [
    ("recall", {"query": "redis"}),
    ("remember", {"type": "fact", "title": "t", "body": "b"}),
    ("list_promotions", {}),
    ("supersede_candidates", {}),
    ("trends", {}),
]


@pytest.mark.parametrize(("tool", "base"), SCOPED, ids=[t for t, _ in SCOPED])
async def test_a_scope_no_path_can_be_is_a_tool_error_naming_it(
    seeded: MemoryService, tool: str, base: dict[str, Any]
) -> None:
    """Issue 26 item 6, on the MCP surface: a NUL or an unencodable character in `scope`."""
    async with Client(create_server(seeded)) as client:
        for bad in ("/tmp/a\x00b", "/tmp/a\ud800b", "/tmp/" + "n" * 300):
            result = await client.call_tool(tool, {**base, "scope": bad})
            assert result.is_error, (bad[:12], result)
            message = text(result)
            assert message.startswith(f"Error executing tool {tool}: scope "), message
            assert "unexpected" not in message, message
