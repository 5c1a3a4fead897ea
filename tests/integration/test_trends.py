"""Trends and the supersede report over real stores (vault, Kuzu, tantivy, governance.db):
in process with a fixed clock, over HTTP on a real daemon (uvicorn on TCP), through the
daemon's client, and at the CLI with its exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import memoryd
from memoryd.cli.main import app
from memoryd.client.remote import RemoteService
from memoryd.config import Settings
from memoryd.errors import InvalidInput, NotFound
from memoryd.governance.reports import NO_ENTITY
from memoryd.models import MemoryDraft, MemoryType, utcnow
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.daemon_harness import free_port, running, tcp_client

DAY = timedelta(days=1)
VITE, REACT, SHOP = "entity:tool:Vite", "entity:library:React", "entity:project:shop"


@dataclass
class Seeded:
    now: datetime
    react: str
    solid: str
    npm: str
    pnpm: str
    deploy: str


def seed(svc: MemoryService, project: Path) -> Seeded:
    """A week of history as of a fixed `now`: Vite rising (3 mentions against 1), React
    falling, an automatic supersede (judged now) and one made by hand (3 days ago), and a
    memory recalled twice through its trigger."""
    now = utcnow()
    svc.clock = lambda: now

    def facts(
        title: str,
        body: str,
        entities: list[str],
        age: timedelta,
        kind: MemoryType = MemoryType.FACT,
        **extra: Any,
    ) -> str:
        draft = MemoryDraft(
            type=kind,
            title=title,
            body=body,
            scope_path=project,
            created_at=now - age,
            **extra,
        )
        return svc.record_graph_facts(draft, entity_ids=entities, relations=[]).meta.slug

    facts("Vite for the shop", "The shop is bundled with Vite.", [VITE, SHOP], 9 * DAY)
    for n in range(3):
        facts(f"Vite note {n}", f"Vite config note number {n}.", [VITE], n * DAY)
    # session notes: supersede judging leaves them alone
    facts("React hooks", "Hooks everywhere in the old UI.", [REACT], 10 * DAY, MemoryType.SESSION)
    facts("React router", "The router of the old UI.", [REACT], 11 * DAY, MemoryType.SESSION)

    def memory(title: str, body: str, kind: str, age: timedelta, **extra: Any) -> str:
        draft = MemoryDraft.model_validate(
            {
                "type": kind,
                "title": title,
                "body": body,
                "scope_path": project,
                "created_at": now - age,
                **extra,
            }
        )
        return svc.record(draft).meta.slug

    react = memory("Frontend framework", "Prefer React for the dashboard.", "preference", 12 * DAY)
    solid = memory(
        "Dashboard moves to Solid",
        "Switched the dashboard from React to Solid; the bundle is 40% smaller.",
        "decision",
        DAY,
    )
    npm = facts("Package manager", "The shop installs with npm.", [SHOP], 20 * DAY)
    pnpm = facts(
        "pnpm from now on", "The shop installs with pnpm.", [SHOP], 3 * DAY, supersedes=[npm]
    )
    deploy = memory(
        "Deploys", "Deploy with the release workflow, never by hand.", "playbook", 5 * DAY
    )
    svc.update_keywords(deploy, triggers=["deploy"])
    for _ in range(2):
        hits = svc.recall("how do we deploy the shop", scope=project, k=3).hits
        assert deploy in [h.slug for h in hits]
    svc.flush_recall_counts()
    return Seeded(now, react, solid, npm, pnpm, deploy)


@pytest.fixture
def seeded(settings: Settings, project: Path) -> Iterator[tuple[MemoryService, Seeded]]:
    service = open_service(settings)
    try:
        yield service, seed(service, project)
    finally:
        service.close()


def test_trends_of_the_last_week_in_process(
    seeded: tuple[MemoryService, Seeded], project: Path
) -> None:
    svc, s = seeded
    t = svc.trends(7)
    assert t.days[-1] == s.now.date()
    assert len(t.days) == 7
    assert [(r.trigger, r.hits, r.previous) for r in t.top_triggers] == [("deploy", 2, 0)]
    rising = {e.id: (e.mentions, e.previous) for e in t.rising_entities}
    assert rising[VITE] == (3, 1)
    assert REACT not in rising  # one mention now (the Solid decision), two before
    assert t.rising_entities[0].id == VITE  # rose the most
    series = {m.id: m.counts for m in t.mentions}
    assert series[VITE][-3:] == [1, 1, 1]
    assert sum(series[VITE]) == 3
    recent = [(e.newer, e.older, e.decided_by, e.status) for e in t.recent_supersedes]
    assert recent == [(s.solid, s.react, "auto", "active"), (s.pnpm, s.npm, "user", "active")]
    assert t.recent_supersedes[0].entity_id == REACT
    assert t.recent_supersedes[0].judge == "rule:switch-from-to"
    hot = {r.slug: r.recall_count for r in t.hot_recalls}
    assert hot[s.deploy] == 2  # every hit of the two recalls counts, the trigger's memory too
    assert max(hot.values()) == 2
    assert {r.last_recalled_at for r in t.hot_recalls} == {s.now}

    # one day: only what happened today
    today = svc.trends(1)
    assert [e.newer for e in today.recent_supersedes] == [s.solid]
    assert {m.id: m.counts for m in today.mentions}[VITE] == [1]
    assert VITE not in {e.id for e in today.rising_entities}  # one today, one yesterday
    # another scope has none of it
    elsewhere = svc.trends(7, scope="0123456789ab")
    assert elsewhere.scope_hash == "0123456789ab"
    assert (elsewhere.top_triggers, elsewhere.rising_entities, elsewhere.hot_recalls) == (
        [],
        [],
        [],
    )
    assert svc.trends(30, scope=project).top_triggers == t.top_triggers
    with pytest.raises(InvalidInput, match="days must be between 1 and 366"):
        svc.trends(0)


def test_the_supersede_report_per_entity(seeded: tuple[MemoryService, Seeded]) -> None:
    svc, s = seeded
    report = svc.supersede_report()
    assert report.decisions == 2
    chains = {
        c.entity_id: [(d.newer, d.older, d.decided_by) for d in c.decisions] for c in report.chains
    }
    assert chains == {REACT: [(s.solid, s.react, "auto")], SHOP: [(s.pnpm, s.npm, "user")]}
    assert [c.name for c in report.chains] == ["React", "shop"]  # latest decision first
    react = report.chains[0].decisions[0]
    assert react.reason is not None
    assert react.reason.startswith("rule switch-from-to")
    assert react.confidence >= 0.85

    only = svc.supersede_report(entity="react")  # by name, any case
    assert only.entity == REACT
    assert [c.entity_id for c in only.chains] == [REACT]
    recent = svc.supersede_report(since=s.now - 2 * DAY)
    assert [c.entity_id for c in recent.chains] == [REACT]
    assert svc.supersede_report(since=s.now + DAY).chains == []
    with pytest.raises(NotFound, match="no entity named 'Nobody'"):
        svc.supersede_report(entity="Nobody")


def plain(value: Any) -> Any:
    data = json.loads(value.model_dump_json())
    data.pop("generated_at", None)
    return data


def test_http_on_a_real_daemon_and_its_client_answer_as_in_process(
    settings: Settings, project: Path, home: Path
) -> None:
    with open_service(settings) as svc:
        s = seed(svc, project)
        svc.clock = utcnow  # the daemon reads its own clock
        expected_trends = plain(svc.trends(7))
        expected_report = plain(svc.supersede_report(entity="shop"))
        expected_all = plain(svc.supersede_report())
    with running(home, free_port()) as daemon:
        assert daemon.port is not None
        with tcp_client(daemon.port, daemon.token()) as http:
            got = http.get("/v1/trends", params={"days": 7})
            assert got.status_code == 200, got.text
            assert {k: v for k, v in got.json().items()} == expected_trends
            scoped = http.get("/v1/trends", params={"days": 7, "scope": str(project)}).json()
            assert scoped["top_triggers"] == expected_trends["top_triggers"]
            report = http.get("/v1/reports/supersedes", params={"entity": "shop"})
            assert report.status_code == 200, report.text
            body = report.json()
            body.pop("generated_at")
            assert body == expected_report
            assert body["chains"][0]["decisions"][0]["newer"] == s.pnpm
            since = (s.now - 2 * DAY).date().isoformat()
            recent = http.get("/v1/reports/supersedes", params={"since": since}).json()
            assert [c["entity_id"] for c in recent["chains"]] == [REACT]
            missing = http.get("/v1/reports/supersedes", params={"entity": "Nobody"})
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "not_found"
            bad_date = http.get("/v1/reports/supersedes", params={"since": "last tuesday"})
            assert bad_date.status_code == 422
            assert "since" in bad_date.text
            bad_days = http.get("/v1/trends", params={"days": 0})
            assert bad_days.status_code == 422
            assert bad_days.json()["error"]["message"] == "days must be between 1 and 366 (got 0)"
        with memoryd.open(home) as api:
            assert isinstance(api, RemoteService)
            assert plain(api.trends(7)) == expected_trends
            assert plain(api.supersede_report()) == expected_all
            assert plain(api.supersede_report(entity="shop")) == expected_report
            assert plain(api.supersede_report(since=s.now + DAY))["chains"] == []
            with pytest.raises(NotFound):
                api.supersede_report(entity="Nobody")


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


def test_the_cli_shows_trends_and_reports_and_refuses_bad_input(
    settings: Settings, project: Path, home: Path
) -> None:
    with open_service(settings) as svc:
        s = seed(svc, project)
    code, out, err = cli(home, "trends", "--days", "7")
    assert code == 0, err
    for heading in ("Top triggers", "Rising entities", "Recent supersedes", "Hot recalls"):
        assert heading in out
    assert "deploy" in out
    assert "Vite" in out
    assert "Dashboard moves to Solid" in out
    code, out, err = cli(home, "trends", "--json", "--scope", str(project))
    assert code == 0, err
    data = json.loads(out)
    assert data["top_triggers"] == [{"trigger": "deploy", "hits": 2, "previous": 0}]
    assert s.deploy in [r["slug"] for r in data["hot_recalls"]]
    code, out, err = cli(home, "trends", "--days", "0")
    assert code == 2
    assert "days must be between 1 and 366 (got 0)" in err

    code, out, err = cli(home, "report", "supersedes")
    assert code == 0, err
    assert out.startswith("# Supersede report\n")
    assert "## React (library)" in out
    assert "## shop (project)" in out
    assert f"(`{s.solid}`) replaced **Frontend framework** (`{s.react}`); decided by auto" in out
    code, out, err = cli(home, "report", "supersedes", "--entity", "shop", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["entity"] == SHOP
    assert [d["decided_by"] for d in report["chains"][0]["decisions"]] == ["user"]
    code, again, err = cli(home, "report", "supersedes", "--entity", "shop", "--json")
    assert code == 0, err
    assert {k: v for k, v in json.loads(again).items() if k != "generated_at"} == {
        k: v for k, v in report.items() if k != "generated_at"
    }
    since = (s.now + DAY).date().isoformat()
    code, out, err = cli(home, "report", "supersedes", "--since", since)
    assert code == 0, err
    assert "No supersede decision was made in that time." in out
    code, out, err = cli(home, "report", "supersedes", "--since", "26/05/2026")
    assert code == 2
    assert "--since '26/05/2026' is not a date like 2026-05-18" in err
    code, out, err = cli(home, "report", "supersedes", "--entity", "Nobody")
    assert code == 3
    assert "no entity named 'Nobody'" in err
    code, out, err = cli(home, "report", "supersedes", "--format", "pdf")
    assert code == 2


def test_decisions_that_share_no_entity_are_listed_apart(svc: MemoryService, project: Path) -> None:
    older = svc.record_graph_facts(
        MemoryDraft(type=MemoryType.FACT, title="Old way", body="Tabs.", scope_path=project),
        entity_ids=["entity:concept:tabs"],
        relations=[],
    )
    svc.record_graph_facts(
        MemoryDraft(
            type=MemoryType.FACT,
            title="New way",
            body="Spaces.",
            scope_path=project,
            supersedes=[older.meta.slug],
        ),
        entity_ids=["entity:concept:spaces"],
        relations=[],
    )
    report = svc.supersede_report()
    assert [(c.entity_id, c.name) for c in report.chains] == [(None, NO_ENTITY)]
    assert report.chains[0].decisions[0].older == older.meta.slug
