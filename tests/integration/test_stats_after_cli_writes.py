"""A write from a process with no daemon (`memoryd record`, `import mcp-memory`, `sync
import`) keeps the scope's saved statistics current: the next fresh process's first recall
loads them instead of counting the whole scope, and recalls what a count gives (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import load_settings
from memoryd.models import MemoryDraft, MemoryType
from memoryd.wiring import open_service
from tests.integration.test_readers import fresh_statistics

runner = CliRunner()

QUERIES = ["redis cache", "postgres migration", "部署", "storefront", "queue jobs"]

MCP_GRAPH = [
    {"type": "entity", "name": "Billing", "entityType": "service",
     "observations": ["Billing retries failed charges three times"]},
    {"type": "entity", "name": "Ledger", "entityType": "service",
     "observations": ["The ledger runs on PostgreSQL 16"]},
    {"type": "relation", "from": "Billing", "to": "Ledger", "relationType": "writes to"},
]  # fmt: skip


def cli(home: Path, *args: str) -> str:
    result = runner.invoke(app, [*args, "--home", str(home)])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def recalls(home: Path, project: Path, *, counted: bool) -> list[list[tuple[str, float]]]:
    """Each query's hits in a fresh process (`counted`: its index counts the scope, as if
    nothing were saved)."""
    with open_service(load_settings(home)) as svc:
        if counted:
            svc.index._files = None
        return [
            [
                (hit.slug, round(hit.score, 9))
                for hit in svc.recall(q, scope=project, track=False).hits
            ]
            for q in QUERIES
        ]


def check(home: Path, project: Path, scope: str) -> None:
    """A fresh process loads the scope (counts nothing) and recalls what a count gives."""
    assert fresh_statistics(home, scope)[1] == 0
    assert recalls(home, project, counted=False) == recalls(home, project, counted=True)


def test_cli_writes_keep_the_saved_statistics_current(
    home: Path, project: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
    with open_service(load_settings(home)) as svc:
        for kind, title, body in [
            ("fact", "Cache TTL", "Redis cache entries expire after ten minutes."),
            ("playbook", "Postgres migration", "Run alembic upgrade head, then check logs."),
            ("decision", "部署", "我们决定采用 Kubernetes 部署 API。"),
            ("preference", "Storefront", "The storefront uses React and Vite."),
        ]:
            svc.record(
                MemoryDraft(type=MemoryType(kind), title=title, body=body, scope_path=project)
            )
        # The first recall counts the scope and saves its statistics.
        scope = svc.recall("redis", scope=project, track=False).hits[0].scope_hash

    cli(home, "record", "--scope", str(project), "--type", "decision", "--title", "Queue",
        "--body", "We use RabbitMQ for the queue jobs; Redis stays a cache.")  # fmt: skip
    check(home, project, scope)

    source = tmp_path / "memory.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in MCP_GRAPH), encoding="utf-8")
    cli(home, "import", "mcp-memory", str(source), "--scope", str(project))
    check(home, project, scope)

    other = tmp_path / "other-home"
    with open_service(load_settings(other)) as svc:
        svc.record(
            MemoryDraft(
                type=MemoryType.FACT,
                title="Redis cluster",
                body="The Redis cache runs as a three-node cluster in production.",
                scope_path=project,
            )
        )
    exported = tmp_path / "memories.json"
    cli(other, "sync", "export", "--out", str(exported))
    cli(home, "sync", "import", "--from", str(exported))
    check(home, project, scope)
    assert any("redis-cluster" in slug for slug, _ in recalls(home, project, counted=False)[0])


def test_an_embedded_write_leaves_a_session_backlog_to_the_daemon(
    home: Path, project: Path, monkeypatch: Any
) -> None:
    """Sessions recorded in bulk queue for the background worker; a `memoryd record` with no
    daemon runs the rules only for as many as it indexed from the inbox (none here), so the
    user's write never waits on the backlog."""
    monkeypatch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
    with open_service(load_settings(home)) as svc:
        svc.record_many(
            [
                MemoryDraft(
                    type=MemoryType.SESSION,
                    title=f"Session {i}",
                    body=f"user: why is the build slow?\nassistant: pytest {i} runs serially.",
                    scope_path=project,
                )
                for i in range(3)
            ]
        )
        before = svc.enrichment_counts()
    assert before.get("pending", 0) == 3
    cli(home, "record", "--scope", str(project), "--type", "decision", "--title", "Build",
        "--body", "We run pytest with xdist.")  # fmt: skip
    with open_service(load_settings(home)) as svc:
        assert svc.enrichment_counts() == before
