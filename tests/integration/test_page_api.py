"""The graph page's routes in-process (`memoryd.api.page`), the title edit, and the CSRF guard.

The page itself, the live feed and the edits from a browser are in tests/e2e/test_home_page.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memoryd.service import MemoryService
from tests.integration.test_api import client, service  # noqa: F401  (fixtures)

PAGE = {"X-Memoryd-Actor": "page"}
ADA, KUZU, LINUX, RUFF = (
    "entity:person:Ada",
    "entity:library:Kuzu",
    "entity:tool:Linux",
    "entity:tool:Ruff",
)


def fact(
    http: TestClient,
    project: Path,
    title: str,
    entities: list[str],
    relations: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    **memory: Any,
) -> str:
    payload = {
        "memory": {"type": "fact", "title": title, "body": f"{title}.", "scope": str(project)}
        | memory,
        "entity_ids": entities,
        "relations": [{"subject": s, "predicate": p, "object": o} for s, p, o in relations],
    }
    response = http.post("/v1/graph/facts", json=payload)
    assert response.status_code == 201, response.text
    slug: str = response.json()["meta"]["slug"]
    return slug


def titles(page: dict[str, Any]) -> list[str]:
    return [item["title"] for item in page["items"]]


def test_title_edit_is_audited_searchable_and_validated(
    client: TestClient,  # noqa: F811
    service: MemoryService,  # noqa: F811
    project: Path,
) -> None:
    slug = fact(client, project, "Pin the graph engine", [KUZU])
    edited = client.patch(
        f"/v1/memories/{slug}", json={"title": "Pin Kuzu at 0.11.3", "tags": ["pin"]}, headers=PAGE
    )
    assert edited.status_code == 200, edited.text
    assert (edited.json()["meta"]["title"], edited.json()["meta"]["slug"]) == (
        "Pin Kuzu at 0.11.3",
        slug,
    )
    assert service.get(slug).meta.title == "Pin Kuzu at 0.11.3"  # the vault file
    assert [h.slug for h in service.search("0.11.3")] == [slug]  # the index
    record = service.audit.read(event_type="update", limit=1)[0]
    assert (record.actor, record.target_id) == ("page", slug)
    assert json.loads(record.details) == {"tags_count": 1, "title_changed": True}

    for bad in ({"title": ""}, {"title": "x" * 501}, {"title": None, "slug": "other"}):
        assert client.patch(f"/v1/memories/{slug}", json=bad).status_code == 422, bad
    blank = client.patch(f"/v1/memories/{slug}", json={"title": "   "})
    assert blank.status_code == 422
    assert "title" in blank.json()["error"]["message"]
    assert service.get(slug).meta.title == "Pin Kuzu at 0.11.3"


def test_home_list_filters_by_project_type_state_day_and_words(
    client: TestClient,  # noqa: F811
    project: Path,
    tmp_path: Path,
) -> None:
    other = tmp_path / "other-project"
    other.mkdir()
    days = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    slugs = [
        fact(client, project, f"Note {i} about Kuzu", [KUZU], created_at=f"{day}T10:00:00Z")
        for i, day in enumerate(days)
    ]
    client.post(
        "/v1/memories",
        json={
            "type": "decision",
            "title": "Use Ruff",
            "body": "Ruff formats.",
            "scope": str(other),
            "created_at": "2026-11-02T12:00:00Z",
        },
    )
    assert client.delete(f"/v1/memories/{slugs[1]}", headers=PAGE).status_code == 200

    def browse(**params: Any) -> dict[str, Any]:
        response = client.get("/v1/page/memories", params=params)
        assert response.status_code == 200, response.text
        page: dict[str, Any] = response.json()
        return page

    everything = browse()
    assert titles(everything) == [
        "Note 3 about Kuzu",
        "Note 2 about Kuzu",
        "Use Ruff",
        "Note 1 about Kuzu",
        "Note 0 about Kuzu",
    ]
    assert everything["total"] == 5
    here = browse(scope=str(project))
    assert titles(here) == [t for t in titles(everything) if t != "Use Ruff"]
    assert titles(browse(type="decision")) == ["Use Ruff"]
    assert titles(browse(state="forgotten")) == ["Note 1 about Kuzu"]
    window = browse(scope=str(project), since="2026-11-02", until="2026-11-03")
    assert (titles(window), window["total"]) == (["Note 2 about Kuzu", "Note 1 about Kuzu"], 2)
    first = browse(scope=str(project), until="2026-11-03", limit=2)
    assert (titles(first), first["next_offset"], first["total"]) == (
        ["Note 2 about Kuzu", "Note 1 about Kuzu"],
        2,
        3,
    )
    second = browse(scope=str(project), until="2026-11-03", limit=2, offset=2)
    assert (titles(second), second["next_offset"]) == (["Note 0 about Kuzu"], None)

    words = browse(q="Kuzu note", scope=str(project))
    assert sorted(titles(words)) == ["Note 0 about Kuzu", "Note 2 about Kuzu", "Note 3 about Kuzu"]
    assert all(item["score"] > 0 for item in words["items"])  # ranked, forgotten left out
    assert titles(browse(q="Kuzu", state="forgotten")) == ["Note 1 about Kuzu"]
    assert titles(browse(q="Kuzu", since="2026-11-04")) == ["Note 3 about Kuzu"]
    bad = client.get("/v1/page/memories", params={"since": "yesterday"})
    assert bad.status_code == 422
    assert "since" in bad.json()["error"]["message"]


def test_projects_newest_first_without_forgotten(
    client: TestClient,  # noqa: F811
    project: Path,
    tmp_path: Path,
) -> None:
    other = tmp_path / "older"
    other.mkdir()
    fact(client, other, "Older note", [RUFF], created_at="2026-10-01T10:00:00Z")
    fact(client, project, "Newer note", [KUZU], created_at="2026-11-01T10:00:00Z")
    gone = fact(client, project, "Gone", [KUZU], created_at="2026-11-02T10:00:00Z")
    client.delete(f"/v1/memories/{gone}")
    found = client.get("/v1/projects").json()
    assert [(p["name"], p["path"], p["memories"], p["latest"]) for p in found] == [
        (project.name, str(project), 1, "2026-11-01T10:00:00Z"),
        ("older", str(other), 1, "2026-10-01T10:00:00Z"),
    ]


def test_entity_graph_draws_relations_and_co_mentions_under_a_cap(
    client: TestClient,  # noqa: F811
    project: Path,
) -> None:
    fact(client, project, "Ada uses Kuzu", [ADA, KUZU], [(ADA, "uses", KUZU)])
    fact(client, project, "Ada and Kuzu again", [ADA, KUZU])
    fact(client, project, "Ada on Linux", [ADA, LINUX])
    fact(client, project, "Kuzu builds for Linux", [KUZU, LINUX], [(KUZU, "runs_on", LINUX)])
    fact(client, project, "Linux and Ruff", [LINUX, RUFF])

    def graph(**params: Any) -> dict[str, Any]:
        response = client.get("/v1/page/graph", params={"entity": "Ada", **params})
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    one = graph(depth=1)
    assert [(n["name"], n["hop"]) for n in one["nodes"]] == [
        ("Ada", 0),
        ("Kuzu", 1),  # a relation ranks before a co-mention
        ("Linux", 1),
    ]
    edges = {(e["kind"], e["source"], e["target"], e["label"], e["count"]) for e in one["edges"]}
    assert edges == {
        ("relation", ADA, "entity:library:Kuzu", "uses", 1),
        ("relation", KUZU, LINUX, "runs_on", 1),
        ("co_mention", KUZU, ADA, "co-mentioned 2×", 2),
        ("co_mention", ADA, LINUX, "co-mentioned 1×", 1),
        ("co_mention", KUZU, LINUX, "co-mentioned 1×", 1),
    }
    assert (one["left_out"], one["left_out_names"]) == (0, [])
    assert [n["name"] for n in graph(depth=2)["nodes"]] == ["Ada", "Kuzu", "Linux", "Ruff"]

    capped = graph(depth=2, cap=2)
    assert [n["name"] for n in capped["nodes"]] == ["Ada", "Kuzu"]
    assert (capped["left_out"], capped["left_out_names"]) == (1, ["Linux"])
    assert client.get("/v1/page/graph", params={"entity": "Ada", "depth": 4}).status_code == 422
    missing = client.get("/v1/page/graph", params={"entity": "Nobody"})
    assert missing.status_code == 404
    assert "Nobody" in missing.json()["error"]["message"]


def test_history_lists_what_happened_to_a_memory(
    client: TestClient,  # noqa: F811
    project: Path,
) -> None:
    slug = fact(client, project, "A note", [KUZU])
    other = fact(client, project, "Another note", [KUZU])
    client.patch(f"/v1/memories/{slug}", json={"triggers": ["kuzu"]}, headers=PAGE)
    client.delete(f"/v1/memories/{slug}", headers=PAGE)
    client.post(f"/v1/memories/{slug}/restore", headers=PAGE)
    history = client.get(f"/v1/memories/{slug}/history").json()
    assert [(r["event_type"], r["actor"]) for r in history] == [
        ("record", "api"),
        ("update", "page"),
        ("archive", "page"),
        ("restore", "page"),
    ]
    assert all(r["target_id"] == slug for r in history)
    assert [r["target_id"] for r in client.get(f"/v1/memories/{other}/history").json()] == [other]


def test_a_write_from_another_origin_is_refused(
    client: TestClient,  # noqa: F811
    project: Path,
) -> None:
    slug = fact(client, project, "A note", [KUZU])
    for origin in ("http://evil.example", "http://localhost:9999", "null"):
        refused = client.delete(f"/v1/memories/{slug}", headers={"Origin": origin})
        assert refused.status_code == 403, origin
        assert refused.json()["error"]["code"] == "policy_denied"
        assert origin in refused.json()["error"]["message"]
    assert client.get(f"/v1/memories/{slug}").json()["meta"]["decay_state"] == "alive"
    assert client.get("/v1/health", headers={"Origin": "http://evil.example"}).status_code == 200
    same = client.delete(f"/v1/memories/{slug}", headers={"Origin": "http://localhost"})
    assert same.status_code == 200
    assert same.json()["meta"]["decay_state"] == "forgotten"


def events(http: TestClient, **params: Any) -> list[dict[str, Any]]:
    """The `memory` events of one (shortened) stream, as the page reads them."""
    found = []
    with http.stream("GET", "/v1/events", params=params) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for block in stream.read().decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if fields.get("event") == "memory":
                found.append({"id": int(fields["id"]), **json.loads(fields["data"])})
    return found


def test_the_event_stream_sends_new_and_changed_memories_and_resumes(
    client: TestClient,  # noqa: F811
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("memoryd.api.page.FEED_STREAM_S", 1.0)
    first = fact(client, project, "First", [KUZU])
    second = fact(client, project, "Second", [KUZU])
    client.delete(f"/v1/memories/{first}", headers=PAGE)
    seen = events(client, after=0)
    assert [(e["kind"], e["event_type"], e["slug"], e["actor"]) for e in seen] == [
        ("new", "record", first, "api"),
        ("new", "record", second, "api"),
        ("changed", "archive", first, "page"),
    ]
    assert [e["id"] for e in seen] == [e["seq"] for e in seen] == sorted(e["seq"] for e in seen)
    assert seen[2]["memory"]["decay_state"] == "forgotten"
    assert seen[1]["memory"]["title"] == "Second"
    # a client resumes after the last id it saw; without one it starts from now
    assert [e["slug"] for e in events(client, after=seen[1]["seq"])] == [first]
    assert events(client) == []
    assert client.get("/v1/events", params={"after": -1}).status_code == 422


def test_home_list_counts_a_sensitive_project_as_hidden_not_in_its_total(
    client: TestClient,  # noqa: F811
    service: MemoryService,  # noqa: F811
    project: Path,
    tmp_path: Path,
    file_keyring: object,
) -> None:
    """Without a grant, the home list of every project leaves a sensitive project's memories
    out of its rows and its total, and says how many it hid; paging still reaches every
    memory that is shown."""
    secret = tmp_path / "payroll"
    secret.mkdir()
    shown = [fact(client, project, f"Plain note {i}", [KUZU]) for i in range(3)]
    for i in range(4):
        fact(client, secret, f"Salary band {i}", [RUFF])
    service.sensitive_mark(secret)

    first = client.get("/v1/page/memories", params={"limit": 2}).json()
    assert (first["total"], first["hidden"]) == (3, 4)
    seen = [item["slug"] for item in first["items"]]
    offset = first["next_offset"]
    while offset is not None:
        page = client.get("/v1/page/memories", params={"limit": 2, "offset": offset}).json()
        assert (page["total"], page["hidden"]) == (3, 4)
        seen += [item["slug"] for item in page["items"]]
        offset = page["next_offset"]
    assert sorted(seen) == sorted(shown)
    assert not any("Salary" in str(item) for item in seen)
    plain = client.get("/v1/page/memories", params={"scope": str(project)}).json()
    assert (plain["total"], plain["hidden"]) == (3, 0)
