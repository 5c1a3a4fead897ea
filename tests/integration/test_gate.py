"""The gate over real stores: a sensitive scope is read only under a grant, on every surface.

Embedded service with a fixed clock (grant expiry), the CLI's exit codes, HTTP 403 from a real
daemon (uvicorn on its socket), an MCP tool error through a real MCP client, the hidden
counts recall and search report, inject never showing a sensitive memory, and the audit
events (slugs and counts, never text).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.context import choose
from memoryd.errors import InvalidInput, PolicyDenied
from memoryd.mcp.server import create_server
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client

SECRET = "Vellacorp"
HOST = "quuxhost-4417.internal"
runner = CliRunner()


class Clock:
    """The service clock, moved by the test."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def draft(
    scope: Path, title: str, body: str, type: MemoryType = MemoryType.DECISION
) -> MemoryDraft:
    return MemoryDraft(type=type, title=title, body=body, scope_path=scope, tags=["deploy"])


def seed(svc: MemoryService, project: Path, other: Path) -> tuple[list[str], str]:
    """Two sensitive memories in `project` (marked), one plain in `other`."""
    svc.sensitive_mark(project)
    secret = [
        svc.record(draft(project, f"Deploy {SECRET} billing", f"{SECRET} runs on {HOST}.")).slug,
        svc.record(
            draft(project, f"{SECRET} invoices", f"Invoices for {SECRET} go out monthly.")
        ).slug,
    ]
    plain = svc.record(draft(other, "Deploy the docs site", "The docs deploy on Fridays.")).slug
    return secret, plain


def audit_lines(home: Path, svc: MemoryService | None = None) -> list[dict[str, Any]]:
    if svc is not None:
        svc.gate.flush()  # read events are appended in batches
    text = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def gated(
    settings: Settings, file_keyring: object, project: Path, other_project: Path
) -> Iterator[tuple[MemoryService, Clock, list[str], str]]:
    svc = open_service(settings)
    clock = Clock()
    svc.clock = clock
    try:
        secret, plain = seed(svc, project, other_project)
        yield svc, clock, secret, plain
    finally:
        svc.close()


def test_without_a_grant_get_is_denied_and_recall_search_list_hide_the_scope(
    gated: tuple[MemoryService, Clock, list[str], str], project: Path, home: Path
) -> None:
    svc, _, secret, plain = gated
    with pytest.raises(PolicyDenied, match="needs a grant") as denied:
        svc.get(secret[0])
    assert denied.value.hint.startswith(f"memoryd grant {project} --duration")
    assert svc.get(plain).meta.title == "Deploy the docs site"

    aimed = svc.recall(f"{SECRET} deploy", scope=project)
    assert aimed.hits == []
    assert [(h.path, h.count) for h in aimed.hidden] == [(str(project), 2)]
    assert aimed.hidden[0].message.startswith(f"2 results hidden in sensitive scope {project}")
    everywhere = svc.recall("deploy")
    assert [h.slug for h in everywhere.hits] == [plain]
    searched = svc.search(SECRET, scope=project)
    assert list(searched) == []
    assert searched.hidden[0].count == 2
    assert [h.slug for h in svc.search("deploy")] == [plain]

    with pytest.raises(PolicyDenied, match="listing it needs a grant"):
        svc.list_memories(scope=project)
    assert [m.slug for m in svc.list_memories()] == [plain]
    assert svc.count_memories() == 1
    with pytest.raises(PolicyDenied):
        svc.update_keywords(secret[0], tags=["x"])

    events = audit_lines(home, svc)
    denied_events = [e for e in events if e["event_type"] == "read_denied"]
    assert {json.loads(e["details"])["surface"] for e in denied_events} >= {
        "get",
        "recall",
        "search",
        "list",
        "update",
    }
    assert secret[0] in {e["target_id"] for e in denied_events}
    raw = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8")
    assert SECRET not in raw
    assert HOST not in raw


def test_a_grant_opens_the_scope_until_it_expires_on_the_service_clock(
    gated: tuple[MemoryService, Clock, list[str], str], project: Path, home: Path
) -> None:
    svc, clock, secret, plain = gated
    grant = svc.grant(project, "once")
    assert grant.expires_at == clock.now + timedelta(seconds=90)
    grant_file = home / "grants" / f"{grant.scope_hash}.json"
    assert stat.S_IMODE(grant_file.stat().st_mode) == 0o600
    assert [g.duration for g in svc.grants()] == ["once"]

    assert svc.get(secret[0]).body == f"{SECRET} runs on {HOST}."
    aimed = svc.recall(f"which host runs {SECRET}", scope=project)
    assert aimed.hidden == []
    assert aimed.hits[0].slug == secret[0]
    assert aimed.hits[0].sensitive
    assert {h.slug for h in svc.recall("deploy").hits} >= {secret[0], plain}
    assert {h.slug for h in svc.search(SECRET)} == set(secret)
    listed = svc.list_memories(scope=project)
    assert {m.title for m in listed} == {f"Deploy {SECRET} billing", f"{SECRET} invoices"}
    # Inject never shows a sensitive memory, grant or not.
    items, _ = choose(svc, f"deploy {SECRET} billing on {HOST}", None, 5, track=False)
    assert all(item.slug not in secret for item in items)

    clock.advance(seconds=91)
    assert svc.grants() == []
    with pytest.raises(PolicyDenied):
        svc.get(secret[0])
    assert svc.recall(SECRET, scope=project).hidden[0].count == 2
    assert [g.duration for g in svc.expire_grants()] == ["once"]
    assert not grant_file.exists()
    assert svc.views.held() == []

    svc.grant(project, "session")
    clock.advance(hours=8, seconds=-1)
    assert svc.get(secret[1]).meta.title == f"{SECRET} invoices"
    clock.advance(seconds=2)
    with pytest.raises(PolicyDenied):
        svc.get(secret[1])

    svc.grant(project, "task", task="quarterly close")
    clock.advance(days=30)
    assert svc.get(secret[0]).slug == secret[0]
    assert [g.task for g in svc.revoke(project, task="other")] == []
    assert [g.task for g in svc.revoke(project, task="quarterly close")] == ["quarterly close"]
    with pytest.raises(PolicyDenied):
        svc.get(secret[0])

    kinds = [e["event_type"] for e in audit_lines(home, svc)]
    assert {"grant", "revoke", "grant_expired", "read_allowed", "read_denied"} <= set(kinds)
    allowed = [e for e in audit_lines(home) if e["event_type"] == "read_allowed"]
    assert all(json.loads(e["details"])["count"] >= 0 for e in allowed)
    raw = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8")
    assert SECRET not in raw
    assert HOST not in raw


def test_grant_refuses_what_it_cannot_mean(
    gated: tuple[MemoryService, Clock, list[str], str], other_project: Path, project: Path
) -> None:
    svc = gated[0]
    with pytest.raises(InvalidInput, match="not a sensitive scope"):
        svc.grant(other_project, "once")
    with pytest.raises(InvalidInput, match="needs a task name"):
        svc.grant(project, "task")


def test_cli_exit_codes_and_hidden_counts(
    settings: Settings, file_keyring: object, project: Path, other_project: Path, home: Path
) -> None:
    with open_service(settings) as svc:
        secret, _ = seed(svc, project, other_project)
    args = ["--home", str(home)]
    denied = runner.invoke(app, ["get", secret[0], *args])
    assert denied.exit_code == 5, denied.output
    assert "memoryd grant" in denied.output
    recalled = runner.invoke(app, ["recall", SECRET, "--scope", str(project), *args])
    assert recalled.exit_code == 0
    assert f"2 results hidden in sensitive scope {project}" in recalled.output
    searched = runner.invoke(app, ["search", SECRET, "--scope", str(project), "--json", *args])
    assert "hidden in sensitive scope" in searched.output
    assert runner.invoke(app, ["grants", "--json", *args]).output.strip() == "[]"

    granted = runner.invoke(app, ["grant", str(project), "--duration", "session", *args])
    assert granted.exit_code == 0, granted.output
    assert f"granted reads of {project} (session)" in granted.output
    shown = runner.invoke(app, ["get", secret[0], *args])
    assert shown.exit_code == 0
    assert HOST in shown.output
    listed = json.loads(runner.invoke(app, ["grants", "--json", *args]).output)
    assert [g["duration"] for g in listed] == ["session"]
    assert runner.invoke(app, ["revoke", str(project), *args]).exit_code == 0
    assert runner.invoke(app, ["get", secret[0], *args]).exit_code == 5
    bad = runner.invoke(app, ["grant", str(project), "--duration", "forever", *args])
    assert bad.exit_code != 0


def test_http_answers_403_and_mcp_a_tool_error_until_granted(
    settings: Settings, file_keyring: object, project: Path, other_project: Path, home: Path
) -> None:
    with open_service(settings) as svc:
        secret, plain = seed(svc, project, other_project)
        scope_hash = svc.scope_show(project).scope_hash
    with running(home) as daemon, uds_client(home) as http:
        denied = http.get(f"/v1/memories/{secret[0]}")
        assert denied.status_code == 403
        assert "memoryd grant" in denied.text
        recall = http.get("/v1/recall", params={"q": SECRET, "scope": scope_hash}).json()
        assert recall["hits"] == []
        assert recall["hidden"][0]["count"] == 2
        search = http.get("/v1/search", params={"q": SECRET, "scope": scope_hash}).json()
        assert search["items"] == []
        assert search["hidden"][0]["path"] == str(project)

        made = http.post("/v1/grants", json={"scope": str(project), "duration": "once"})
        assert made.status_code == 200, made.text
        assert http.get(f"/v1/memories/{secret[0]}").json()["body"] == f"{SECRET} runs on {HOST}."
        recall = http.get("/v1/recall", params={"q": f"{SECRET} billing", "scope": scope_hash})
        assert recall.json()["hits"][0]["slug"] == secret[0]
        assert [g["duration"] for g in http.get("/v1/grants").json()] == ["once"]
        revoked = http.delete("/v1/grants", params={"scope": str(project)})
        assert [g["duration"] for g in revoked.json()] == ["once"]
        assert http.get(f"/v1/memories/{secret[0]}").status_code == 403
        assert http.get(f"/v1/memories/{plain}").status_code == 200
        assert daemon.stop() == 0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_get_memory_is_a_tool_error_and_recall_says_what_it_hid(
    gated: tuple[MemoryService, Clock, list[str], str], project: Path
) -> None:
    svc, _, secret, _ = gated
    async with Client(create_server(svc), raise_exceptions=True) as client:
        denied = await client.call_tool("get_memory", {"slug": secret[0]})
        assert denied.is_error
        content = denied.content[0]
        assert isinstance(content, TextContent)
        assert "memoryd grant" in content.text
        recalled = await client.call_tool("recall", {"query": SECRET, "scope": str(project)})
        assert not recalled.is_error
        data = recalled.structured_content or {}
        assert data["hits"] == []
        assert data["hidden"][0].startswith(f"2 results hidden in sensitive scope {project}")
        svc.grant(project, "once")
        allowed = await client.call_tool("get_memory", {"slug": secret[0]})
        assert not allowed.is_error


def test_a_scope_json_changed_within_one_tick_of_the_clock_is_read_afresh(
    settings: Settings, project: Path
) -> None:
    """The kernel stamps files with a coarse clock: a scope.json replaced within one tick of
    its last change leaves its folder's time as it was. The gate still sees the new flag."""
    with open_service(settings) as svc:
        svc.record(draft(project, "Plain first", "Recorded before another process marked it."))
        scope_hash = svc.scope_show(project).scope_hash
        assert svc.gate.sensitive_scopes() == {}  # read, and kept
        folder = settings.home / "scopes" / scope_hash
        before = folder.stat()
        info = svc.vault.read_scope(scope_hash)
        assert info is not None
        svc.vault.write_scope(info.model_copy(update={"sensitive": True}))  # as another writer
        os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same tick
        assert set(svc.gate.sensitive_scopes()) == {scope_hash}
