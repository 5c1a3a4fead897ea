"""The daemon's MCP endpoint (`/mcp`, streamable HTTP) driven by the SDK's own client, on the
Unix socket and on TCP with the bearer token, against a real `memoryd serve` process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from memoryd.cli.main import app
from tests.daemon_harness import Daemon, free_port, uds_client
from tests.integration.test_mcp import (
    MEMORY_TOOLS,
    OWN_TOOLS,
    RELATIONS,
    build_graph,
    call,
    delete_some,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def daemon(home: Path, tmp_path: Path) -> Iterator[Daemon]:
    user = tmp_path / "user"  # the daemon's $HOME: where /mcp files graph facts
    user.mkdir()
    started = Daemon(home, free_port(), env={"HOME": str(user)}).start()
    try:
        yield started
        # the MCP session manager shuts down with the servers: a clean exit, nothing logged
        assert started.stop() == 0
        assert "Traceback" not in started.log_text()
    finally:
        started.kill()


@asynccontextmanager
async def mcp_client(url: str, http: httpx2.AsyncClient) -> AsyncIterator[Client]:
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def over_socket(home: Path) -> AbstractAsyncContextManager[Client]:
    transport = httpx2.AsyncHTTPTransport(uds=str(home / "memoryd.sock"))
    http = httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(60.0))
    return mcp_client("http://localhost/mcp", http)


def over_tcp(daemon: Daemon) -> AbstractAsyncContextManager[Client]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {daemon.token()}"}, timeout=httpx2.Timeout(60.0)
    )
    return mcp_client(f"http://127.0.0.1:{daemon.port}/mcp", http)


async def test_graph_tools_over_socket_and_tcp(daemon: Daemon, project: Path) -> None:
    async with over_socket(daemon.home) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names >= OWN_TOOLS | MEMORY_TOOLS
        await build_graph(client)
        made = await call(
            client,
            "remember",
            {"type": "decision", "title": "Graph in Kuzu", "body": "Kuzu.", "scope": str(project)},
        )
        hits = await call(client, "recall", {"query": "Kuzu", "scope": str(project)})
        assert hits["hits"][0]["slug"] == made["slug"]
    async with over_tcp(daemon) as client:
        graph = await delete_some(client)
    with uds_client(daemon.home, timeout=120.0) as http:
        assert http.post("/v1/reindex").status_code == 200
        # writes through /mcp ran on the daemon's writer and are audited as `mcp`
        audit = http.get("/v1/audit", params={"limit": 1000}).json()["items"]
        actors = {r["actor"] for r in audit if r["event_type"] in ("record", "entity_delete")}
        assert actors == {"mcp"}
        relations = http.get("/v1/relations", params={"entity": "abble"}).json()["items"]
        assert [(r["predicate"], r["label"]) for r in relations] == [("works_on", "worksOn")]
    async with over_socket(daemon.home) as client:
        assert await call(client, "read_graph", {}) == graph
    exported = CliRunner().invoke(app, ["export", "mcp-memory", "--home", str(daemon.home)])
    assert exported.exit_code == 0, exported.stderr
    rels = [json.loads(line) for line in exported.stdout.splitlines() if '"relation"' in line]
    assert [r["relationType"] for r in rels] == [RELATIONS[1]["relationType"]]


def mcp_post(client: httpx.Client, **headers: str) -> httpx.Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return client.post(
        "/mcp",
        json=body,
        headers={"Accept": "application/json, text/event-stream", **headers},
    )


def test_mcp_sits_behind_the_same_guard(daemon: Daemon) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=30.0) as tcp:
        refused = mcp_post(tcp)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        wrong = mcp_post(tcp, Authorization="Bearer nope")
        assert wrong.status_code == 401
    with uds_client(daemon.home) as sock:
        rebound = mcp_post(sock, Host="evil.example")
        assert rebound.status_code == 403
        assert rebound.json()["error"]["code"] == "policy_denied"
        # the delete routes the MCP tools use answer errors in the API's one shape
        missing = sock.delete("/v1/entities/nobody")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        empty = sock.post("/v1/memories/nope/relations/close", json={"relations": []})
        assert empty.status_code == 422
        assert empty.json()["error"]["code"] == "invalid_input"


FIRST_MCP_REQUESTS = """
import json, os, signal, sys, threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from memoryd.config import load_settings
from memoryd.daemon.server import serve

home = Path(sys.argv[1])
seen = {}


def sdk_loaded():
    return sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp."))


def post(_):
    with httpx.Client(
        transport=httpx.HTTPTransport(uds=str(home / "memoryd.sock")),
        base_url="http://localhost",
        timeout=60.0,
    ) as sock:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        answer = sock.post("/mcp", json=body, headers={"Accept": "application/json"})
        return answer.status_code, sorted(t["name"] for t in answer.json()["result"]["tools"])


def drive():
    try:
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(home / "memoryd.sock")),
            base_url="http://localhost",
            timeout=10.0,
        ) as sock:
            while True:
                try:
                    if sock.get("/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
        seen["at_ready"] = sdk_loaded()
        with ThreadPoolExecutor(3) as pool:  # three first requests at once: one server built
            seen["answers"] = list(pool.map(post, range(3)))
        seen["after"] = bool(sdk_loaded())
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=drive, daemon=True).start()
serve(load_settings(home), tcp=False)
print(json.dumps(seen))
"""


def test_a_daemon_loads_the_mcp_sdk_at_its_first_mcp_request(home: Path) -> None:
    """The MCP SDK is most of what a daemon start imports, and only `/mcp` needs it: a daemon
    answers `/v1` without it, builds the server once when `/mcp` requests come (several at
    once here), answers each, and stops cleanly."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_MCP_REQUESTS, str(home)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["at_ready"] == [], f"a daemon imports {seen['at_ready'][:5]} before /mcp"
    statuses = {status for status, _ in seen["answers"]}
    assert statuses == {200}
    tools = [names for _, names in seen["answers"]]
    assert tools[0] == tools[1] == tools[2]
    assert set(tools[0]) >= OWN_TOOLS | MEMORY_TOOLS
    assert seen["after"]
    assert "Traceback" not in done.stderr
