"""The MCP tools for supersede decisions and trends, driven by a real MCP client: in memory
over the service, and over stdio through a daemon (the agent flag crosses HTTP)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from memoryd.governance.promotions import ReviewPolicy
from memoryd.mcp.server import create_server
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.daemon_harness import running, uds_client

pytestmark = pytest.mark.anyio
TOOLS = {"supersede_candidates", "supersede_accept", "supersede_reject", "supersede_undo", "trends"}
# Each newer memory changes only part of what the older one says: a candidate, not automatic.
PAIRS = [
    ("Databases", "All backend services use PostgreSQL."),
    ("Billing on CockroachDB", "Moved only the billing service from Postgres to CockroachDB."),
    ("Bundler", "All frontends are bundled with Webpack."),
    ("Admin bundler", "The admin frontend moved from Webpack to Vite."),
]


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


def record_pairs(svc: MemoryService, project: Path) -> list[str]:
    return [
        svc.record(
            MemoryDraft(type=MemoryType.DECISION, title=title, body=body, scope_path=project)
        ).meta.slug
        for title, body in PAIRS
    ]


async def test_supersede_tools_decide_only_when_agents_may(
    svc: MemoryService, project: Path
) -> None:
    db, billing, bundler, admin = record_pairs(svc, project)
    async with Client(create_server(svc), raise_exceptions=True) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= TOOLS
        listed = _data(await client.call_tool("supersede_candidates", {"scope": str(project)}))
        pairs = {(c["newer"], c["older"]) for c in listed["candidates"]}
        assert pairs == {(billing, db), (admin, bundler)}
        assert all(0.5 <= c["confidence"] < 0.85 for c in listed["candidates"])

        refused = await client.call_tool("supersede_accept", {"newer": billing, "older": db})
        assert refused.is_error
        assert "agents may not decide supersedes" in _text(refused)
        assert f"memoryd supersede accept {billing} {db}" in _text(refused)
        assert len(svc.supersede_candidates(project)) == 2  # nothing decided

        svc.review.policy = ReviewPolicy(agents_decide=True)
        accepted = _data(
            await client.call_tool("supersede_accept", {"newer": billing, "older": db})
        )
        assert (accepted["newer"], accepted["older"], accepted["status"]) == (
            billing,
            db,
            "active",
        )
        assert svc.graph.superseded_by([db]) == {db: billing}
        twice = await client.call_tool("supersede_accept", {"newer": billing, "older": db})
        assert twice.is_error
        assert "not candidate" in _text(twice)
        undone = _data(await client.call_tool("supersede_undo", {"newer": billing, "older": db}))
        assert undone["status"] == "undone"
        assert svc.graph.superseded_by([db]) == {}
        rejected = _data(
            await client.call_tool("supersede_reject", {"newer": admin, "older": bundler})
        )
        assert rejected["status"] == "rejected"
        left = _data(await client.call_tool("supersede_candidates", {}))
        assert left["candidates"] == []
        missing = await client.call_tool("supersede_reject", {"newer": admin, "older": "nope"})
        assert missing.is_error
        assert "no memory with slug 'nope'" in _text(missing)

        trends = _data(await client.call_tool("trends", {"days": 7, "scope": str(project)}))
        assert trends == svc.trends(7, project).model_dump(mode="json")
        assert trends["window_days"] == 7
        bad = await client.call_tool("trends", {"days": 0})
        assert bad.is_error
        assert "days must be between 1 and 366 (got 0)" in _text(bad)
    events = [r.event_type for r in svc.audit_records(limit=100)]
    assert {"supersede_accept", "supersede_undo", "supersede_reject"} <= set(events)


async def test_stdio_through_the_daemon_sends_the_agent_flag(home: Path, project: Path) -> None:
    """`memoryd mcp` with a daemon: the daemon's policy decides whether an agent may."""
    with running(home, env={"MEMORYD_GOVERNANCE__AGENTS_DECIDE": "true"}):
        with uds_client(home) as http:
            slugs = []
            for title, body in PAIRS[:2]:
                payload = {"type": "decision", "title": title, "body": body, "scope": str(project)}
                response = http.post("/v1/memories", json=payload)
                assert response.status_code == 201, response.text
                slugs.append(response.json()["meta"]["slug"])
        db, billing = slugs
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memoryd", "mcp", "--home", str(home)],
            env=os.environ.copy(),
            cwd=str(project),
        )
        async with Client(params) as client:
            listed = _data(await client.call_tool("supersede_candidates", {}))
            assert [(c["newer"], c["older"]) for c in listed["candidates"]] == [(billing, db)]
            accepted = _data(
                await client.call_tool("supersede_accept", {"newer": billing, "older": db})
            )
            assert accepted["status"] == "active"
            trends = _data(await client.call_tool("trends", {"days": 3}))
            assert [(e["newer"], e["older"]) for e in trends["recent_supersedes"]] == [
                (billing, db)
            ]
        with uds_client(home) as http:
            chain = http.get(f"/v1/memories/{db}/supersedes").json()["items"]
            assert [(r["newer"], r["status"]) for r in chain] == [(billing, "active")]
            audit = http.get("/v1/audit", params={"event_type": "supersede_accept"}).json()
            assert [r["actor"] for r in audit["items"]] == ["mcp"]
