"""The HTTP API in-process: routes, pagination, error shape and status codes, guards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memoryd.api.app import create_app
from memoryd.api.errors import STATUS, status_of
from memoryd.api.runner import ReadWriteGate, ServiceRunner
from memoryd.api.security import MAX_BODY_BYTES, LocalOnly, host_allowed, page_paths
from memoryd.config import Settings
from memoryd.errors import (
    AuditChainBroken,
    BrokenMemoryFile,
    ConfigError,
    Conflict,
    GraphLocked,
    InvalidInput,
    MemorydError,
    NotFound,
    PolicyDenied,
    ResourceExhausted,
    StorageError,
)
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.waiting import wait_until


@pytest.fixture
def service(settings: Settings) -> Iterator[MemoryService]:
    svc = open_service(settings)
    try:
        yield svc
    finally:
        svc.close()


@pytest.fixture
def client(service: MemoryService, settings: Settings) -> Iterator[TestClient]:
    runner = ServiceRunner()
    app = create_app(service, runner, settings=settings)
    try:
        with TestClient(LocalOnly(app), base_url="http://localhost") as http:
            yield http
    finally:
        runner.close()


def create(
    client: TestClient, project: Path, title: str, body: str, **extra: Any
) -> dict[str, Any]:
    payload = {"type": "decision", "title": title, "body": body, "scope": str(project), **extra}
    response = client.post("/v1/memories", json=payload, headers={"X-Memoryd-Actor": "tester"})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "hint"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    detail: dict[str, Any] = body["error"]
    return detail


def test_memory_lifecycle(client: TestClient, project: Path) -> None:
    created = create(client, project, "Use ruff", "Ruff lints and formats.", tags=["lint"])
    slug = created["meta"]["slug"]
    assert created["body"] == "Ruff lints and formats."
    got = client.get(f"/v1/memories/{slug}").json()
    assert got["meta"] == created["meta"]

    patched = client.patch(f"/v1/memories/{slug}", json={"triggers": ["ruff", "lint"]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["meta"]["triggers"] == ["ruff", "lint"]
    assert patched.json()["meta"]["tags"] == ["lint"]  # left out: kept
    assert Path(patched.json()["path"]).read_text().count("triggers: [ruff, lint]") == 1
    hits = client.get("/v1/search", params={"q": "lint"}).json()["items"]
    assert [h["slug"] for h in hits] == [slug]

    archived = client.delete(f"/v1/memories/{slug}")
    assert archived.status_code == 200
    path = Path(archived.json()["path"])
    assert path.parent.name == "forgotten"
    assert path.is_file()
    assert not Path(created["path"]).exists()
    assert archived.json()["meta"]["decay_state"] == "forgotten"
    assert client.get("/v1/search", params={"q": "lint"}).json()["items"] == []
    hidden = client.get("/v1/search", params={"q": "lint", "include_forgotten": True})
    assert [h["slug"] for h in hidden.json()["items"]] == [slug]
    forgotten = client.get("/v1/memories", params={"state": "forgotten"}).json()["items"]
    assert [m["slug"] for m in forgotten] == [slug]
    # archiving twice changes nothing
    assert client.delete(f"/v1/memories/{slug}").json()["path"] == str(path)

    events = client.get("/v1/audit").json()["items"]
    assert [(e["event_type"], e["actor"]) for e in events] == [
        ("record", "tester"),
        ("update", "api"),
        ("archive", "api"),
    ]
    assert client.get("/v1/audit/verify").json()["ok"] is True


def test_lists_are_paginated(client: TestClient, project: Path) -> None:
    slugs = {
        create(client, project, f"Note {i}", f"body number {i} alpha")["meta"]["slug"]
        for i in range(5)
    }
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get("/v1/memories", params={"limit": 2, "offset": offset}).json()
        assert page["limit"] == 2
        assert page["offset"] == offset
        seen += [m["slug"] for m in page["items"]]
        offset = page["next_offset"]
    assert sorted(seen) == sorted(slugs)
    assert len(seen) == 5

    first = client.get("/v1/search", params={"q": "alpha", "limit": 3}).json()
    rest = client.get("/v1/search", params={"q": "alpha", "limit": 3, "offset": 3}).json()
    assert first["next_offset"] == 3
    assert rest["next_offset"] is None
    assert {h["slug"] for h in first["items"] + rest["items"]} == slugs

    newest = client.get("/v1/audit", params={"limit": 2}).json()
    older = client.get("/v1/audit", params={"limit": 2, "offset": newest["next_offset"]}).json()
    assert [r["seq"] for r in newest["items"]] == [4, 5]
    assert [r["seq"] for r in older["items"]] == [2, 3]
    oldest = client.get("/v1/audit", params={"limit": 2, "offset": older["next_offset"]}).json()
    assert [r["seq"] for r in oldest["items"]] == [1]
    assert oldest["next_offset"] is None


def test_entities_and_cypher(client: TestClient, service: MemoryService, project: Path) -> None:
    memory = service.record(
        MemoryDraft(
            type=MemoryType.FACT, title="Graph note", body="plain words", scope_path=project
        )
    )
    observed = ["entity:library:Zyxgraph", "entity:tool:Qwvtool"]
    meta = memory.meta.model_copy(update={"observations": observed})
    service.graph.upsert_memories([memory.model_copy(update={"meta": meta})])

    page = client.get("/v1/entities", params={"limit": 1}).json()
    assert len(page["items"]) == 1
    assert page["next_offset"] == 1
    found = client.get("/v1/entities", params={"q": "zyxg"}).json()["items"]
    assert [e["id"] for e in found] == ["entity:library:Zyxgraph"]
    entity = client.get("/v1/entities/entity:library:Zyxgraph").json()
    assert entity["name"] == "Zyxgraph"
    assert entity["mention_count"] == 1
    assert_error(client.get("/v1/entities/entity:library:Nope"), 404, "not_found")

    result = client.post(
        "/v1/graph/cypher",
        json={
            "query": "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) WHERE e.name = $n"
            " RETURN m.slug, e.type",
            "params": {"n": "Zyxgraph"},
        },
    ).json()
    assert result == {
        "columns": ["m.slug", "e.type"],
        "rows": [[memory.slug, "library"]],
        "truncated": False,
    }
    limited = client.post(
        "/v1/graph/cypher", json={"query": "MATCH (e:Entity) RETURN e.id", "limit": 1}
    ).json()
    assert len(limited["rows"]) == 1
    assert limited["truncated"] is True

    denied = assert_error(
        client.post("/v1/graph/cypher", json={"query": "MATCH (m:Memory) DETACH DELETE m"}),
        403,
        "policy_denied",
    )
    assert "read-only" in denied["message"]
    assert_error(
        client.post("/v1/graph/cypher", json={"query": "MATCH (m RETURN"}), 422, "invalid_input"
    )
    assert_error(
        client.post("/v1/graph/cypher", json={"query": "RETURN 1", "limit": 10_001}),
        422,
        "invalid_input",
    )
    timed_out = client.post(
        "/v1/graph/cypher",
        json={
            "query": "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y"
            " WITH x, y WHERE (x + y) % 3 = 0 RETURN count(*)",
            "timeout_ms": 50,
        },
    )
    limited = assert_error(timed_out, 422, "query_limit")
    assert "50 ms" in limited["message"]
    assert "graph.cypher_timeout_ms" in limited["hint"]
    bomb = {"query": "WITH 100000000 AS n UNWIND range(1, n) AS x RETURN count(x)"}
    limited = assert_error(client.post("/v1/graph/cypher", json=bomb), 422, "query_limit")
    assert "MB a query may use" in limited["message"]
    setting = {"query": "CALL checkpoint_threshold=1"}
    denied = assert_error(client.post("/v1/graph/cypher", json=setting), 403, "policy_denied")
    assert "engine setting" in denied["message"]
    unused = {"query": "RETURN 1", "params": {"n": 1}}
    assert_error(client.post("/v1/graph/cypher", json=unused), 422, "invalid_input")


def test_errors_have_one_shape(client: TestClient, project: Path) -> None:
    assert_error(client.get("/v1/memories/no-such-slug"), 404, "not_found")
    assert_error(client.patch("/v1/memories/no-such-slug", json={"tags": ["a"]}), 404, "not_found")
    assert_error(client.delete("/v1/memories/no-such-slug"), 404, "not_found")
    created = create(client, project, "Once", "the same body")
    duplicate = client.post(
        "/v1/memories",
        json={"type": "fact", "title": "Twice", "body": "the same body", "scope": str(project)},
    )
    assert created["meta"]["slug"] in assert_error(duplicate, 409, "conflict")["message"]
    assert_error(client.post("/v1/memories", json={"type": "nope"}), 422, "invalid_input")
    assert_error(client.post("/v1/memories", content=b"{not json"), 422, "invalid_input")
    relative = {"type": "fact", "title": "t", "body": "b", "scope": "relative/dir"}
    assert_error(client.post("/v1/memories", json=relative), 422, "invalid_input")
    assert_error(client.get("/v1/memories", params={"scope": "not/absolute"}), 422, "invalid_input")
    assert_error(client.get("/v1/memories", params={"limit": 0}), 422, "invalid_input")
    assert_error(
        client.patch(f"/v1/memories/{created['meta']['slug']}", json={}), 422, "invalid_input"
    )
    assert_error(client.get("/v1/nowhere"), 404, "not_found")
    assert_error(client.put("/v1/memories"), 405, "method_not_allowed")
    bad_actor = client.post(
        "/v1/memories", json=relative, headers={"X-Memoryd-Actor": "Bad Actor!"}
    )
    assert_error(bad_actor, 422, "invalid_input")


def test_an_empty_query_gets_the_rule_every_surface_gives(client: TestClient) -> None:
    """`q=""` is refused with check_query's message and hint, as the CLI and MCP refuse it,
    not with a validation dump pointing at /docs (issue 29)."""
    for response in (
        client.get("/v1/recall", params={"q": ""}),
        client.get("/v1/search", params={"q": ""}),
        client.post("/v1/recall", json={"q": ""}),
        client.get("/v1/recall", params={"q": "  \t"}),
    ):
        error = assert_error(response, 422, "invalid_input")
        assert error["message"] == "the query is empty", (response.url, error)
        assert "/docs" not in error["hint"], error


def test_system_routes(client: TestClient) -> None:
    health = client.get("/v1/health").json()
    assert health["status"] == "ok"
    assert health["pending_writes"] == 0
    assert client.get("/v1/version").json()["graph_schema"] >= 1
    checks = {c["name"]: c["ok"] for c in client.get("/v1/doctor").json()}
    assert checks["daemon"]
    assert checks["graph"]
    assert checks["audit chain"]
    assert client.post("/v1/reindex").json()["indexed"] == 0
    assert "/v1/graph/cypher" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


def test_error_status_mapping() -> None:
    expected = {
        NotFound: 404,
        Conflict: 409,
        InvalidInput: 422,
        PolicyDenied: 403,
        GraphLocked: 503,
        ResourceExhausted: 507,
        StorageError: 503,
        ConfigError: 500,
        AuditChainBroken: 500,
        BrokenMemoryFile: 500,
        MemorydError: 500,
    }
    for cls, status in expected.items():
        assert status_of(cls("x")) == status, cls
    # every class in the tree is mapped on purpose, most specific first
    for i, (cls, _) in enumerate(STATUS):
        assert not any(issubclass(cls, earlier) for earlier, _ in STATUS[:i]), cls


def test_host_and_token_guards(service: MemoryService, settings: Settings) -> None:
    runner = ServiceRunner()
    app = create_app(service, runner, settings=settings)
    try:
        with TestClient(LocalOnly(app, token="s3cret"), base_url="http://127.0.0.1:7423") as http:
            assert_error(http.get("/v1/health"), 401, "unauthorized")
            wrong = http.get("/v1/health", headers={"Authorization": "Bearer nope"})
            assert_error(wrong, 401, "unauthorized")
            good = {"Authorization": "Bearer s3cret"}
            assert http.get("/v1/health", headers=good).status_code == 200
            rebound = http.get("/v1/health", headers={**good, "Host": "evil.example:7423"})
            assert_error(rebound, 403, "policy_denied")
        with TestClient(LocalOnly(app), base_url="http://attacker.test") as http:
            assert_error(http.get("/v1/health"), 403, "policy_denied")
        with TestClient(LocalOnly(app), base_url="http://localhost") as http:
            huge = http.post("/v1/memories", content=b"x" * (MAX_BODY_BYTES + 1))
            assert_error(huge, 413, "invalid_input")
    finally:
        runner.close()
    assert host_allowed("localhost:7423")
    assert host_allowed("[::1]:1")
    assert host_allowed("127.0.0.1")
    assert not host_allowed("localhost.evil.test")
    assert not host_allowed("")
    assert not host_allowed(None)


def test_gate_lets_readers_share_and_exclusive_wait() -> None:
    import threading

    gate = ReadWriteGate()
    order: list[str] = []
    with gate.shared(), gate.shared():
        order.append("two readers")
        done = threading.Event()

        def exclusive() -> None:
            with gate.exclusive():
                order.append("exclusive")
            done.set()

        thread = threading.Thread(target=exclusive)
        thread.start()
        assert not done.wait(0.1)  # waits for the readers
        order.append("readers leave")
    assert done.wait(5)
    thread.join()
    assert order == ["two readers", "readers leave", "exclusive"]


def test_recall_entities_relations_and_supersedes(
    client: TestClient, service: MemoryService, project: Path
) -> None:
    older = create(client, project, "UI on React", "We use React for the UI.")["meta"]["slug"]
    newer = create(
        client,
        project,
        "UI on Solid",
        "We switched from React to Solid for the UI because of bundle size.",
        supersedes=[older],
    )["meta"]["slug"]

    recalled = client.get("/v1/recall", params={"q": "react ui", "limit": 1})
    assert recalled.status_code == 200, recalled.text
    page = recalled.json()
    assert [h["slug"] for h in page["hits"]] == [newer]  # the successor ranks first
    assert page["next_offset"] == 1
    assert "entity:library:React" in page["entities"]
    assert page["hits"][0]["paths"]
    rest = client.get("/v1/recall", params={"q": "react ui", "offset": 1}).json()
    assert [h["slug"] for h in rest["hits"]] == [older]
    assert rest["hits"][0]["superseded_by"] == newer
    untracked = client.get("/v1/recall", params={"q": "react ui", "track": False})
    assert untracked.status_code == 200
    counted = {"query": "MATCH (m:Memory) RETURN m.slug, m.recall_count ORDER BY m.slug"}
    wait_until(  # counted later, on the writer
        lambda: not client.get("/v1/health").json()["pending_writes"], what="the recall counts"
    )
    # Recalls are counted in memory; the daemon adds them to the graph every few seconds.
    assert dict(client.post("/v1/graph/cypher", json=counted).json()["rows"]) == {
        newer: 0,
        older: 0,
    }
    service.flush_recall_counts()
    counts = dict(client.post("/v1/graph/cypher", json=counted).json()["rows"])
    assert counts == {newer: 1, older: 1}  # the untracked recall did not count

    chain = client.get(f"/v1/memories/{newer}/supersedes").json()["items"]
    assert [(r["newer"], r["older"]) for r in chain] == [(newer, older)]
    by_entity = client.get("/v1/entities/React/supersedes").json()["items"]
    assert [(r["newer"], r["older"]) for r in by_entity] == [(newer, older)]

    context = client.get("/v1/entities/React/context").json()
    assert context["entity"]["id"] == "entity:library:React"
    assert context["superseded"] == [older]
    assert client.get("/v1/entities/react").json()["id"] == "entity:library:React"
    neighbours = client.get("/v1/entities/entity:library:React/neighbors", params={"depth": 1})
    assert "entity:library:Solid" in {c for row in neighbours.json()["rows"] for c in row[:3]}

    relations = client.get("/v1/relations", params={"entity": "Solid"}).json()["items"]
    assert {r["predicate"] for r in relations} >= {"prefers", "supersedes"}
    assert all(r["superseded_at"] is None for r in relations)
    one = client.get("/v1/relations", params={"limit": 1}).json()
    assert len(one["items"]) == 1
    assert one["next_offset"] == 1

    aliased = client.post("/v1/entities/Solid/aliases", json={"alias": "SolidJS"})
    assert aliased.status_code == 200, aliased.text
    assert "SolidJS" in aliased.json()["aliases"]
    memory = service.record(
        MemoryDraft(type=MemoryType.FACT, title="Other", body="plain words", scope_path=project)
    )
    meta = memory.meta.model_copy(update={"observations": ["entity:library:Zyxreact"]})
    service.graph.upsert_memories([memory.model_copy(update={"meta": meta})])
    merge = {"keep": "React", "drop": "entity:library:Zyxreact"}
    merged = client.post("/v1/entities/merge", json=merge)
    assert merged.status_code == 200, merged.text
    assert "Zyxreact" in merged.json()["aliases"]
    assert merged.json()["mention_count"] == 3
    assert_error(
        client.post("/v1/entities/merge", json={"keep": "React", "drop": "React"}),
        422,
        "invalid_input",
    )
    assert_error(client.get("/v1/entities/Nothing-Like-It/neighbors"), 404, "not_found")
    assert_error(client.get("/v1/memories/nope/supersedes"), 404, "not_found")
    events = [e["event_type"] for e in client.get("/v1/audit").json()["items"]]
    assert events[-4:] == ["record", "entity_alias", "record", "entity_merge"]


def test_inbox_drain_route(client: TestClient) -> None:
    assert client.post("/v1/inbox/drain").json() == {"indexed": 0}


def test_graph_facts_route(client: TestClient, project: Path) -> None:
    body: dict[str, Any] = {
        "memory": {
            "type": "fact",
            "title": "Ada",
            "body": "Ada: works on memoryd",
            "scope": str(project),
        },
        "entity_ids": ["entity:person:Ada"],
        "relations": [
            {
                "subject": "entity:person:Ada",
                "predicate": "works_on",
                "object": "entity:project:memoryd",
            }
        ],
    }
    created = client.post("/v1/graph/facts", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["meta"]["observations"] == ["entity:person:Ada"]
    assert client.get("/v1/entities/entity:person:Ada").json()["mention_count"] == 1
    relations = client.get("/v1/relations", params={"entity": "entity:person:Ada"}).json()
    assert [(r["subject_id"], r["predicate"]) for r in relations["items"]] == [
        ("entity:person:Ada", "works_on")
    ]
    relative = {**body, "memory": {**body["memory"], "scope": "here"}}
    assert_error(client.post("/v1/graph/facts", json=relative), 422, "invalid_input")


def test_graph_page_needs_no_token_but_a_local_host(
    service: MemoryService, settings: Settings
) -> None:
    runner = ServiceRunner()
    app = create_app(service, runner, settings=settings)
    try:
        with TestClient(LocalOnly(app, token="s3cret"), base_url="http://127.0.0.1:7423") as http:
            page = http.get("/")
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/html")
            assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
            assert '<script src="/static/app.js"' in page.text
            assert http.head("/").status_code == 200
            for path in ("/static/app.js", "/static/app.css", "/static/vendor/cytoscape.min.js"):
                assert http.get(path).status_code == 200, path
            # only the pages' own files are exempt: data, the OpenAPI document, anything else
            # still need it
            for path in (
                "/v1/health",
                "/v1/entities",
                "/openapi.json",
                "/redoc",
                "/docs/oauth2-redirect",
                "/index.html",
                "/static/",
                "/static/vendor/",
                "/static/nope.js",
            ):
                assert_error(http.get(path), 401, "unauthorized")
            assert_error(http.post("/", content=b"{}"), 401, "unauthorized")
            assert_error(http.delete("/static/app.js"), 401, "unauthorized")
            good = {"Authorization": "Bearer s3cret"}
            assert http.get("/v1/entities", headers=good).status_code == 200
            # the DNS-rebinding guard still covers the page
            assert_error(http.get("/", headers={"Host": "evil.example:7423"}), 403, "policy_denied")
            rebound = http.get("/static/app.js", headers={"Host": "evil.example"})
            assert_error(rebound, 403, "policy_denied")
        with TestClient(LocalOnly(app), base_url="http://localhost") as http:
            assert http.get("/").status_code == 200  # the Unix socket serves it too
            assert http.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    finally:
        runner.close()
    paths = page_paths()
    assert {"/", "/static/index.html", "/static/app.js", "/static/app.css"} <= paths
    assert "/static/vendor/cytoscape.min.js" in paths
    assert all(p in ("/", "/docs") or p.startswith("/static/") for p in paths)
    assert page_paths(Path("/nonexistent")) == frozenset({"/", "/docs"})
