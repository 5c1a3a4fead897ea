"""One scenario end to end, on Kuzu and on FalkorDB: a real daemon (`memoryd serve`) per
home and the CLI talking to it. Record (extraction on), a newer decision superseding an
older one, recall, users' Cypher, reindex, and the same questions again: the two engines
answer the same, before and after the reindex."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ENGINE
from tests.daemon_harness import running

pytestmark = pytest.mark.skipif(ENGINE != "kuzu", reason="runs beside the kuzu leg only")

MEMORIES = [
    ("preference", "Frontend framework", "Prefer React for the dashboard."),
    (
        "decision",
        "Dashboard moves to Solid",
        "Switched the dashboard from React to Solid; the bundle is 40% smaller.",
    ),
    (
        "decision",
        "Database",
        "We keep Postgres 16 for the billing service and run migrations with Alembic.",
    ),
]
MENTIONS = (
    "MATCH (m:Memory)-[:MENTIONS]->(e:Entity) RETURN m.title AS title, e.id AS id"
    " ORDER BY title, id"
)
SUPERSEDES = (
    "MATCH (n:Memory)-[:SUPERSEDES]->(o:Memory) RETURN n.title AS newer, o.title AS older"
    " ORDER BY newer"
)


def _scenario(home: Path, project: Path, env: dict[str, str]) -> dict[str, Any]:
    env = {**os.environ, "MEMORYD_DAEMON__AUTOSTART": "0", **env}

    def memoryd(*args: str) -> Any:
        command = [sys.executable, "-m", "memoryd", *args, "--home", str(home), "--json"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return json.loads(done.stdout)

    def answers() -> dict[str, Any]:
        recall = memoryd("recall", "React dashboard", "--scope", str(project))
        billing = memoryd("recall", "billing database", "--scope", str(project))
        return {
            "recall": [(hit["title"], bool(hit.get("superseded_by"))) for hit in recall["hits"]],
            "billing": [hit["title"] for hit in billing["hits"]][:1],
            "mentions": memoryd("graph", "query", MENTIONS)["rows"],
            "supersedes": memoryd("graph", "query", SUPERSEDES)["rows"],
            "count": memoryd("graph", "query", "MATCH (m:Memory) RETURN count(m)")["rows"],
        }

    with running(home, env=env):
        for kind, title, body in MEMORIES:
            memoryd("record", "--type", kind, "--title", title, "--body", body,
                    "--scope", str(project))  # fmt: skip
        before = answers()
        memoryd("reindex")
        after = answers()
    return {"before": before, "after": after}


def test_one_scenario_through_the_daemon_answers_the_same_on_kuzu_and_falkordb(
    tmp_path: Path, project: Path, falkordb_url: str
) -> None:
    on_kuzu = _scenario(tmp_path / "kuzu", project, {"MEMORYD_GRAPH__ENGINE": "kuzu"})
    on_falkor = _scenario(
        tmp_path / "falkor",
        project,
        {
            "MEMORYD_GRAPH__ENGINE": "falkordb",
            "MEMORYD_GRAPH__URL": falkordb_url,
            "MEMORYD_GRAPH__NAME": f"e2e-{uuid.uuid4().hex}",
        },
    )
    kuzu = on_kuzu["before"]
    assert kuzu["supersedes"] == [["Dashboard moves to Solid", "Frontend framework"]]
    assert kuzu["recall"][:2] == [("Dashboard moves to Solid", False), ("Frontend framework", True)]
    assert kuzu["billing"] == ["Database"]
    assert len({row[1] for row in kuzu["mentions"]}) >= 3, "extraction found the entities"
    assert kuzu["count"] == [[3]]
    assert on_kuzu["after"] == kuzu
    assert on_falkor == on_kuzu
