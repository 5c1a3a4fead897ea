"""The HTTP app builds the routes most requests never use on the first request that needs
them (`api.app.include_later`): the daemon answers its first recall without building the
review, supersede, sync, profile, page... routes' schemas, and every route still answers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memoryd.api.app import LATER_ROUTERS, create_app
from memoryd.api.routes import router
from memoryd.api.runner import ServiceRunner
from memoryd.api.security import LocalOnly
from memoryd.config import Settings
from memoryd.service import MemoryService


@pytest.fixture
def app(svc: object, settings: Settings) -> Iterator[FastAPI]:
    assert isinstance(svc, MemoryService)
    runner = ServiceRunner()
    try:
        yield create_app(svc, runner, settings=settings)
    finally:
        runner.close()


def operations(app: FastAPI) -> set[tuple[str, str]]:
    """(path, method) of every route in the app's OpenAPI document."""
    return {(path, method) for path, ops in app.openapi()["paths"].items() for method in ops}


def test_importing_the_app_builds_only_the_routes_every_request_needs() -> None:
    code = "import json, sys, memoryd.api.app; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = set(json.loads(result.stdout))
    early = sorted(m for m in LATER_ROUTERS if f"memoryd.api.{m}" in loaded)
    assert early == [], f"memoryd.api.app imports {early}: include them with include_later"
    assert "memoryd.api.routes" in loaded


def test_a_later_route_answers_its_first_request(app: FastAPI) -> None:
    built = len(app.router.routes)
    with TestClient(LocalOnly(app), base_url="http://localhost") as http:
        assert http.get("/v1/health").status_code == 200
        assert len(app.router.routes) == built  # a request the first routes answer
        first = http.get("/v1/promotions")
        assert first.status_code == 200, first.text
        assert len(app.router.routes) == built + len(LATER_ROUTERS)
        again = http.get("/v1/sync/conflicts")
        assert again.status_code == 200, again.text
        missing = http.get("/v1/no-such-route")
        assert missing.status_code == 404
        assert set(missing.json()["error"]) == {"code", "message", "hint"}
    assert len(app.router.routes) == built + len(LATER_ROUTERS)


def test_the_openapi_document_lists_every_route(app: FastAPI) -> None:
    with TestClient(LocalOnly(app), base_url="http://localhost") as http:
        listed = set(http.get("/openapi.json").json()["paths"])
    assert {"/v1/recall", "/v1/promotions", "/v1/profile", "/v1/page/graph"} <= listed


def test_no_later_route_shares_a_path_with_a_first_one(app: FastAPI) -> None:
    """A later route on the path of a first one would be answered 405 by the first
    (a partial match) and never built."""
    first_only = FastAPI()
    first_only.include_router(router)
    first = operations(first_only)
    later = operations(app) - first
    assert len(later) > 40
    first_paths = {path for path, _ in first}
    assert sorted(path for path, _ in later if path in first_paths) == []
