"""Every path field of every route, CLI option and MCP tool refuses a NUL or a character no
file name can hold with 422 / exit 2 / a tool error naming the field (issue 26 item 6:
`POST /v1/sensitive/mark` with a NUL in `path` answered 500)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memoryd.api.app import create_app
from memoryd.api.runner import ServiceRunner
from memoryd.api.security import LocalOnly
from memoryd.config import Settings
from memoryd.service import MemoryService
from memoryd.wiring import open_service

BAD = {
    "nul": "/tmp/a\x00b",
    "surrogate": "/tmp/a\ud800b",
}
JSON = "application/json"
MEMORY = {"type": "fact", "title": "t", "body": "b"}
ROUTES: list[tuple[str, str, str, dict[str, Any]]] = [
    # (method, path, field, request: the bad value goes where "@" stands)
    ("post", "/v1/memories", "scope", {"json": {**MEMORY, "scope": "@"}}),
    ("post", "/v1/memories/batch", "scope", {"json": {"memories": [{**MEMORY, "scope": "@"}]}}),
    ("post", "/v1/graph/facts", "scope", {"json": {"memory": {**MEMORY, "scope": "@"}}}),
    *(
        ("post", path, "scope", {"json": {"facts": [{"memory": {**MEMORY, "scope": "@"}}]}})
        for path in ("/v1/graph/facts/batch", "/v1/graph/facts/batch/brief")
    ),
    ("get", "/v1/memories", "scope", {"params": {"scope": "@"}}),
    ("get", "/v1/search", "scope", {"params": {"q": "x", "scope": "@"}}),
    ("get", "/v1/recall", "scope", {"params": {"q": "x", "scope": "@"}}),
    ("post", "/v1/recall", "scope", {"json": {"q": "x", "scope": "@"}}),
    ("get", "/v1/audit", "scope", {"params": {"scope": "@"}}),
    ("get", "/v1/promotions", "scope", {"params": {"scope": "@"}}),
    ("get", "/v1/supersedes/candidates", "scope", {"params": {"scope": "@"}}),
    ("get", "/v1/trends", "scope", {"params": {"scope": "@"}}),
    ("get", "/v1/reports/supersedes", "scope", {"params": {"scope": "@"}}),
    ("get", "/v1/digest", "scope", {"params": {"scope": "@"}}),
    ("post", "/v1/grants", "scope", {"json": {"scope": "@"}}),
    ("delete", "/v1/grants", "scope", {"params": {"scope": "@"}}),
    ("post", "/v1/sensitive/mark", "path", {"json": {"path": "@"}}),
    ("post", "/v1/sensitive/unmark", "path", {"json": {"path": "@", "yes": True}}),
    ("post", "/v1/sensitive/rotate-key", "path", {"json": {"path": "@"}}),
    ("post", "/v1/sync/export", "out", {"json": {"out": "@"}}),
    ("post", "/v1/sync/import", "source", {"json": {"source": "@"}}),
    ("post", "/v1/sync/import", "scope", {"json": {"source": "/tmp/none.json", "scope": "@"}}),
    (
        "post",
        "/v1/sync/import",
        "map_scope",
        {"json": {"source": "/x.json", "map_scope": {"@": "/p"}}},
    ),
    (
        "post",
        "/v1/sync/import",
        "map_scope",
        {"json": {"source": "/x.json", "map_scope": {"/p": "@"}}},
    ),
    ("post", "/v1/sync/diff", "source", {"json": {"source": "@"}}),
    ("post", "/v1/sync/diff", "scope", {"json": {"source": "/tmp/none.json", "scope": "@"}}),
    (
        "post",
        "/v1/sync/diff",
        "map_scope",
        {"json": {"source": "/x.json", "map_scope": {"/p": "@"}}},
    ),
]


def put(value: Any, bad: str) -> Any:
    if value == "@":
        return bad
    if isinstance(value, dict):
        return {put(k, bad): put(v, bad) for k, v in value.items()}
    if isinstance(value, list):
        return [put(v, bad) for v in value]
    return value


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    svc: MemoryService = open_service(settings)
    runner = ServiceRunner()
    app = create_app(svc, runner, settings=settings)
    try:
        with TestClient(
            LocalOnly(app), base_url="http://localhost", raise_server_exceptions=False
        ) as http:
            yield http
    finally:
        runner.close()
        svc.close()


@pytest.mark.parametrize("kind", sorted(BAD))
def test_every_path_field_of_every_route_refuses_bad_characters(
    client: TestClient, kind: str
) -> None:
    failures = []
    for method, path, field, request in ROUTES:
        if kind == "surrogate" and "json" not in request:
            continue  # a URL carries bytes: the server decodes them, never to a lone surrogate
        sent = put(request, BAD[kind])
        if "json" in sent:  # escaped as \\uXXXX, as any JSON encoder may send it
            sent = {"content": json.dumps(sent["json"]), "headers": {"content-type": JSON}}
        response = client.request(method.upper(), path, **sent)
        error = response.json().get("error", {}) if response.status_code >= 400 else {}
        if response.status_code != 422 or field not in error.get("message", ""):
            failures.append(f"{method} {path} {field}: {response.status_code} {response.text}")
    assert not failures, "\n".join(failures)


COMMANDS: list[tuple[list[str], str]] = [
    # (arguments: the bad value goes where "@" stands, the option click names)
    (["list", "--scope", "@"], "--scope"),
    (["list", "--home", "@"], "--home"),
    (["recall", "x", "--scope", "@"], "--scope"),
    (["scope", "show", "@"], "'PATH'"),
    (["sync", "export", "--out", "@"], "--out"),
    (["sync", "export", "--out", "/tmp/x.json", "--scope", "@"], "--scope"),
    (["sync", "import", "--from", "@"], "--from"),
    (["sync", "import", "--from", "/tmp/x.json", "--scope", "@"], "--scope"),
    (["sync", "import", "--from", "/tmp/x.json", "--map-scope", "0123456789ab=@"], "--map-scope"),
    (["sync", "import", "--from", "/tmp/x.json", "--passphrase-file", "@"], "--passphrase-file"),
    (["sync", "diff-with-remote", "--from", "@"], "--from"),
    (["sensitive", "mark", "@"], "'PATH'"),
    (["sensitive", "unmark", "@"], "'PATH'"),
    (["sensitive", "rotate-key", "@"], "'PATH'"),
    (["sensitive", "export-key", "/tmp", "@"], "'FILE'"),
    (["sensitive", "import-key", "/tmp", "@"], "'FILE'"),
    (["import", "mcp-memory", "@"], "'FILE'"),
    (["import", "mcp-memory", "/tmp/m.jsonl", "--scope", "@"], "--scope"),
    (["setup", "mcp", "--agent", "cursor", "--project", "--dir", "@"], "--dir"),
    (["grant", "@"], "'PATH'"),
    (["revoke", "@"], "'PATH'"),
    (["promote", "1", "--body-file", "@"], "--body-file"),
]


@pytest.mark.parametrize(("args", "option"), COMMANDS, ids=[" ".join(a) for a, _ in COMMANDS])
def test_every_path_option_of_the_cli_refuses_a_nul_with_exit_2(
    args: list[str], option: str
) -> None:
    """A shell cannot pass a NUL (argv is C strings); a program calling the CLI in process
    can, and so can a name longer than the OS allows."""
    from typer.testing import CliRunner

    from memoryd.cli.main import app

    for bad in ("/tmp/a\x00b", "/tmp/" + "n" * 300):
        result = CliRunner().invoke(app, [a.replace("@", bad) for a in args])
        assert result.exit_code == 2, (bad[:12], result.output)
        assert option in result.output, result.output
        assert "Traceback" not in result.output
