"""Every paged route of a real daemon (a subprocess on its Unix socket), driven with limits and
offsets from -2^63 to 2^63: it answers 200 or 422 every time and is alive afterwards.

Issue 26: `GET /v1/entities?offset=888328` segfaulted the daemon (kuzu's `ORDER BY … SKIP n`
with n past the sorted rows reads out of bounds). The daemon holds a few memories, entities
and relations: on an empty graph the engine never reaches the code that crashed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.daemon_harness import Daemon, running, uds_client

INT64 = 2**63
EDGES = [0, 1, -1, 2, 50_000, 888_328, 2**31, 2**32, 10_000_000, 10_000_001, INT64 - 1, INT64]
COUNTS = st.one_of(
    st.sampled_from(EDGES),
    st.sampled_from(EDGES).map(lambda n: -n),
    st.integers(min_value=-INT64, max_value=INT64),
    st.none(),
)
PAGED = {
    ("get", "/v1/memories"),
    ("get", "/v1/page/memories"),
    ("get", "/v1/memories/{slug}/supersedes"),
    ("get", "/v1/search"),
    ("get", "/v1/recall"),
    ("post", "/v1/recall"),
    ("post", "/v1/recall/context"),
    ("get", "/v1/entities"),
    ("get", "/v1/entities/{entity_id}/context"),
    ("get", "/v1/entities/{entity_id}/supersedes"),
    ("get", "/v1/relations"),
    ("post", "/v1/graph/cypher"),
    ("get", "/v1/audit"),
    ("get", "/v1/promotions"),
    ("get", "/v1/supersedes/candidates"),
    ("get", "/v1/supersedes/automatic"),
    ("get", "/v1/digest"),
    ("get", "/v1/profile/versions"),
}
"""Each operation that takes `limit` or `offset` (`test_every_paged_route_is_driven` keeps
the list whole)."""
BODIES = [
    ("Redis cache", "We use Redis 7 for the session cache; Django reaches it via django-redis."),
    ("Postgres", "The API stores orders in PostgreSQL 16; Alembic runs the migrations."),
    ("Deploy", "Deploys go through GitHub Actions to Fly.io; Sentry reports the errors."),
]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("paging")
    env = {
        "MEMORYD_CONFIG": str(root / "no-config.toml"),
        "MEMORYD_GRAPH__BUFFER_POOL_MB": "128",
        "MEMORYD_DAEMON__RECALL_READERS": "0",
        "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
    }
    project = root / "project"
    project.mkdir()
    with running(root / "home", env=env) as process:
        with uds_client(process.home) as http:
            for title, body in BODIES:
                memory = {"type": "decision", "title": title, "body": body, "scope": str(project)}
                response = http.post("/v1/memories", json=memory)
                assert response.status_code == 201, response.text
        yield process


@pytest.fixture(scope="module")
def http(daemon: Daemon) -> Iterator[httpx.Client]:
    with uds_client(daemon.home) as client:
        yield client


@pytest.fixture(scope="module")
def path_values(http: httpx.Client) -> dict[str, str]:
    """A real value for each path parameter of a paged route."""
    slug = http.get("/v1/memories").json()["items"][0]["slug"]
    entity = http.get("/v1/entities").json()["items"][0]["id"]
    return {"slug": slug, "entity_id": entity}


BODIES_FOR: dict[str, dict[str, Any]] = {
    "/v1/recall": {"q": "redis", "track": False},
    "/v1/recall/context": {"prompt": "which cache do we use? redis"},
    "/v1/graph/cypher": {"query": "MATCH (m:Memory) RETURN m.slug ORDER BY m.slug"},
}
QUERIES_FOR: dict[str, dict[str, Any]] = {
    "/v1/search": {"q": "redis"},
    "/v1/recall": {"q": "redis", "track": "false"},
}


def request(
    http: httpx.Client, op: tuple[str, str], values: dict[str, str], extra: dict[str, Any]
) -> httpx.Response:
    method, template = op
    path = template.format(**values)
    if method == "post":
        return http.post(path, json={**BODIES_FOR[template], **extra})
    return http.get(path, params={**QUERIES_FOR.get(template, {}), **extra})


def assert_alive(daemon: Daemon, http: httpx.Client) -> None:
    assert daemon.process is not None
    assert daemon.process.poll() is None, f"the daemon died: {daemon.log_text()}"
    assert http.get("/v1/health").status_code == 200


def test_every_paged_route_is_driven(http: httpx.Client) -> None:
    """`PAGED` names every operation whose query or JSON body takes `limit` or `offset`."""
    spec = http.get("/openapi.json").json()
    found = set()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            content = operation.get("requestBody", {}).get("content", {})
            ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
            if ref:
                names |= set(spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"])
            if names & {"limit", "offset"}:
                found.add((method, path))
    assert found == PAGED


@settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(op=st.sampled_from(sorted(PAGED)), limit=COUNTS, offset=COUNTS)
@example(op=("get", "/v1/entities"), limit=None, offset=888_328)
@example(op=("get", "/v1/memories"), limit=None, offset=50_000)
@example(op=("get", "/v1/relations"), limit=None, offset=50_000)
@example(op=("get", "/v1/memories"), limit=INT64, offset=INT64)
@example(op=("post", "/v1/recall"), limit=-1, offset=-INT64)
def test_any_limit_and_offset_answer_200_or_422(
    daemon: Daemon,
    http: httpx.Client,
    path_values: dict[str, str],
    op: tuple[str, str],
    limit: int | None,
    offset: int | None,
) -> None:
    extra = {k: v for k, v in {"limit": limit, "offset": offset}.items() if v is not None}
    try:
        response = request(http, op, path_values, extra)
    except httpx.TransportError as exc:  # the daemon died with the request
        raise AssertionError(f"{op} {extra}: no answer ({exc}): {daemon.log_text()}") from exc
    assert response.status_code in (200, 422), (op, extra, response.text)
    if response.status_code == 422:
        error = response.json()["error"]
        assert error["code"] == "invalid_input", error
        assert error["message"], error
    assert_alive(daemon, http)


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/entities", "/v1/relations"])
def test_past_the_end_answers_an_empty_page(http: httpx.Client, path: str) -> None:
    """An offset past the last row is an empty last page, not an error."""
    whole = http.get(path, params={"limit": 1000}).json()
    assert whole["items"], whole
    for offset in (len(whole["items"]), 50_000, 888_328, 10_000_000):
        response = http.get(path, params={"offset": offset})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["items"] == [], body
        assert body["next_offset"] is None, body
        if whole.get("total") is not None:
            assert body["total"] == whole["total"] == len(whole["items"])


def test_the_cli_lists_past_the_end_in_process(tmp_path: Path) -> None:
    """`memoryd list --offset 50000` (embedded, no daemon) exited 139 about 2 runs in 3: an
    empty page now, and the total; `--offset -1` and `--limit 0` are usage errors."""
    env = {**os.environ, "MEMORYD_HOME": str(tmp_path / "home")}
    project = tmp_path / "project"
    project.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "memoryd", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    made = cli("record", "--type", "fact", "--title", "t", "--body", "uses Redis",
               "--scope", str(project))  # fmt: skip
    assert made.returncode == 0, made.stderr
    for _ in range(3):
        listed = cli("list", "--offset", "50000", "--json")
        assert listed.returncode == 0, (listed.returncode, listed.stderr)
        assert json.loads(listed.stdout) == []
        assert "--offset 50000 is past the last of 1 memories" in listed.stderr
    for bad in (["--offset", "-1"], ["--limit", "0"]):
        refused = cli("list", *bad)
        assert refused.returncode == 2, refused.stderr
        assert bad[0] in refused.stderr
