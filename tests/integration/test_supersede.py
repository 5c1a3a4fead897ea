"""Supersede judging: the rules on the labelled set, and the service over real stores
(vault files, Kuzu, tantivy, audit log), with the LLM judge over recorded replies."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from memoryd.api.runner import ServiceRunner
from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.daemon.judging import judge_round
from memoryd.doctor import service_checks
from memoryd.errors import Conflict, NotFound
from memoryd.governance.supersede import (
    Name,
    Pair,
    SupersedeJob,
    Tiers,
    judge_by_rules,
    judge_pairs,
    outcome_counts,
    precision_recall,
)
from memoryd.llm.anthropic_provider import AnthropicProvider
from memoryd.models import MemoryDraft, SupersedeStatus
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client
from tests.integration.test_capture import ClaudeTranscript, needs_fixtures
from tests.integration.test_enrichment import (  # noqa: F401  (fixtures)
    LLM,
    SLUG,
    _hook_env,
    hook,
    prompt_of,
    providers,
    transcript,
    with_llm,
    work,
)
from tests.integration.test_enrichment import OK as ENRICHED
from tests.integration.test_llm import CONNECT_ERROR, Replay

PAIRS = Path(__file__).parents[1] / "data" / "supersede" / "pairs.yaml"


def load_pairs() -> list[dict[str, object]]:
    pairs: list[dict[str, object]] = yaml.safe_load(PAIRS.read_text(encoding="utf-8"))
    return pairs


# --------------------------------------------------------------------------- the labelled set


def test_the_labelled_set_is_big_varied_and_well_formed() -> None:
    pairs = load_pairs()
    assert len(pairs) >= 60
    assert len({p["id"] for p in pairs}) == len(pairs)
    kinds = {p["kind"] for p in pairs}
    assert kinds == {"positive", "negative", "hard-negative"}
    assert all(p["label"] is (p["kind"] == "positive") for p in pairs)
    ids = " ".join(str(p["id"]) for p in pairs)
    for hard in ("two-roles", "went-back", "partial"):
        assert f"hn-{hard}" in ids, hard
    chinese = [p for p in pairs if str(p["id"]).startswith("zh-")]
    assert len(chinese) >= 20


def test_offline_rules_reach_the_precision_and_recall_the_automatic_tier_needs() -> None:
    pairs = load_pairs()
    labelled = []
    for p in pairs:
        verdict = judge_by_rules(str(p["newer"]), str(p["older"]))
        labelled.append((bool(p["label"]), verdict.confidence if verdict else None))
    table = outcome_counts(Tiers(), labelled)
    precision, recall = precision_recall(table["auto"])
    assert precision >= 0.95, table
    assert recall >= 0.6, table


@pytest.mark.parametrize(
    ("pair_id", "tier"),
    [
        ("en-hn-two-roles-01", "ignored"),
        ("en-hn-went-back-01", "ignored"),
        ("en-hn-partial-01", "candidate"),
        ("zh-hn-partial-01", "candidate"),
        ("en-hn-hypo-02", "ignored"),
        ("en-pos-17", "auto"),
        ("zh-pos-02", "auto"),
    ],
)
def test_hard_cases_land_in_their_tier(pair_id: str, tier: str) -> None:
    pair = next(p for p in load_pairs() if p["id"] == pair_id)
    verdict = judge_by_rules(str(pair["newer"]), str(pair["older"]))
    got = Tiers().tier(verdict.confidence) if verdict else "ignored"
    assert got == tier, verdict


def test_a_rule_verdict_names_its_rule() -> None:
    verdict = judge_by_rules(
        "Replace npm with pnpm across the monorepo.", "Package manager is npm."
    )
    assert verdict is not None
    assert verdict.judge == "rule:replace-with"
    assert verdict.reason.startswith("rule replace-with: ")
    assert "npm" in verdict.reason
    assert "pnpm" in verdict.reason
    assert verdict.old == "npm"


# --------------------------------------------------------------------------- the service


def draft(project: Path, title: str, body: str, type: str, day: int) -> MemoryDraft:
    return MemoryDraft.model_validate(
        {
            "type": type,
            "title": title,
            "body": body,
            "scope_path": project,
            "created_at": datetime(2026, 5, day, 9, 0, tzinfo=UTC),
        }
    )


def audit_events(home: Path) -> list[dict[str, object]]:
    lines = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_an_explicit_switch_supersedes_automatically_and_recall_demotes_the_older(
    svc: MemoryService, project: Path, home: Path
) -> None:
    older = svc.record(
        draft(project, "Frontend framework", "Prefer React for the dashboard.", "preference", 1)
    )
    newer = svc.record(
        draft(
            project,
            "Dashboard moves to Solid",
            "Switched the dashboard from React to Solid; the bundle is 40% smaller.",
            "decision",
            20,
        )
    )
    stored = svc.get(newer.slug)
    assert stored.meta.supersedes == [older.slug]
    (decision,) = stored.meta.supersede_decisions
    assert decision.status is SupersedeStatus.ACTIVE
    assert decision.decided_by == "auto"
    assert decision.judge == "rule:switch-from-to"
    assert decision.confidence >= 0.85
    assert decision.entity_id is not None
    assert "react" in decision.entity_id.casefold()
    assert svc.graph.superseded_by([older.slug]) == {older.slug: newer.slug}
    (row,) = svc.supersedes_chain(older.slug)
    assert (row.newer, row.older, row.status, row.decided_by) == (
        newer.slug,
        older.slug,
        "active",
        "auto",
    )
    assert row.reason is not None
    assert row.reason.startswith("rule switch-from-to")
    hits = svc.recall("React dashboard", scope=str(project)).hits
    slugs = [h.slug for h in hits]
    assert slugs.index(newer.slug) < slugs.index(older.slug)
    assert next(h for h in hits if h.slug == older.slug).superseded_by == newer.slug
    event = audit_events(home)[-1]
    assert (event["event_type"], event["target_id"]) == ("supersede", newer.slug)
    details: Any = event["details"]
    if isinstance(details, str):
        details = json.loads(details)
    assert details["decisions"][0]["older"] == older.slug
    assert "Solid" not in json.dumps(event)  # the audit log records events, not memory text


def test_undo_keeps_the_decision_as_history_and_is_not_judged_again(
    svc: MemoryService, project: Path, home: Path
) -> None:
    older = svc.record(draft(project, "Package manager", "We use npm.", "preference", 1))
    newer = svc.record(
        draft(project, "pnpm", "Replace npm with pnpm across the monorepo.", "decision", 2)
    )
    assert svc.graph.superseded_by([older.slug]) == {older.slug: newer.slug}
    undone = svc.decide_supersede(newer.slug, older.slug, "undo")
    assert (undone.status, undone.decided_by) == (SupersedeStatus.UNDONE, "user")
    assert svc.graph.superseded_by([older.slug]) == {}
    assert svc.get(newer.slug).meta.supersedes == []
    assert svc.judge_supersedes(newer.slug) == []  # an undone pair is not proposed again
    assert audit_events(home)[-1]["event_type"] == "supersede_undo"
    with pytest.raises(Conflict, match="undone"):
        svc.decide_supersede(newer.slug, older.slug, "undo")
    before = svc.graph.snapshot()
    svc.reindex()
    assert svc.graph.snapshot() == before


def test_a_partial_change_is_a_candidate_until_accepted(
    svc: MemoryService, project: Path, home: Path
) -> None:
    older = svc.record(
        draft(project, "Databases", "All backend services use PostgreSQL.", "decision", 1)
    )
    newer = svc.record(
        draft(
            project,
            "Billing on CockroachDB",
            "Moved only the billing service from Postgres to CockroachDB.",
            "decision",
            2,
        )
    )
    (candidate,) = svc.supersede_candidates(project)
    assert (candidate.newer, candidate.older, candidate.status) == (
        newer.slug,
        older.slug,
        "candidate",
    )
    assert 0.5 <= candidate.confidence < 0.85
    assert svc.graph.superseded_by([older.slug]) == {}  # a candidate does not demote
    before = svc.graph.snapshot()
    svc.reindex()
    assert svc.graph.snapshot() == before  # the candidate edge comes back from the file
    accepted = svc.decide_supersede(newer.slug, older.slug, "accept", by="digest")
    assert (accepted.status, accepted.decided_by) == (SupersedeStatus.ACTIVE, "digest")
    assert svc.graph.superseded_by([older.slug]) == {older.slug: newer.slug}
    assert svc.supersede_candidates(project) == []
    assert audit_events(home)[-1]["event_type"] == "supersede_accept"
    with pytest.raises(Conflict, match="active"):
        svc.decide_supersede(newer.slug, older.slug, "accept")
    with pytest.raises(Conflict):
        svc.decide_supersede(newer.slug, older.slug, "reject")


def test_reject_and_bad_slugs(svc: MemoryService, project: Path) -> None:
    older = svc.record(draft(project, "Data", "All services use PostgreSQL.", "decision", 1))
    newer = svc.record(
        draft(
            project,
            "Ingest",
            "The ingest worker switched from PostgreSQL to ClickHouse.",
            "decision",
            2,
        )
    )
    rejected = svc.decide_supersede(newer.slug, older.slug, "reject")
    assert rejected.status is SupersedeStatus.REJECTED
    assert svc.supersede_candidates() == []
    assert svc.get(newer.slug).meta.supersede_decisions[0].status is SupersedeStatus.REJECTED
    with pytest.raises(NotFound, match="no-such-slug"):
        svc.decide_supersede("no-such-slug", older.slug, "accept")
    with pytest.raises(NotFound, match="no-such-slug"):
        svc.decide_supersede(newer.slug, "no-such-slug", "accept")
    with pytest.raises(NotFound, match="no supersede decision"):
        svc.decide_supersede(older.slug, newer.slug, "accept")


def test_hard_negatives_leave_the_older_memory_current(svc: MemoryService, project: Path) -> None:
    react = svc.record(
        draft(project, "Frontend", "Prefer React for all frontend work.", "preference", 1)
    )
    sessions = svc.record(
        draft(project, "Sessions", "Sessions are stored in Redis with a 24h TTL.", "fact", 2)
    )
    svc.record(
        draft(
            project,
            "Solid experiment",
            "Tried Solid for the dashboard, went back to React because of the component library.",
            "decision",
            3,
        )
    )
    svc.record(
        draft(
            project,
            "Stores",
            "We use Postgres for orders and Redis for sessions.",
            "fact",
            4,
        )
    )
    assert svc.graph.superseded_by([react.slug, sessions.slug]) == {}
    assert svc.supersede_candidates() == []


# --------------------------------------------------------------------------- the LLM judge


@pytest.fixture
def claude() -> Replay:
    """Claude's network: a recorded `judge_supersedes` reply (the only fake: the remote API)."""
    return Replay("anthropic", "supersede_partial")


def test_the_llm_judges_what_the_rules_cannot(
    svc: MemoryService, project: Path, claude: Replay
) -> None:
    older = svc.record(
        draft(project, "Admin UI", "The admin UI is built with Angular.", "decision", 1)
    )
    newer = svc.record(
        draft(
            project,
            "Admin forms",
            "New admin UI forms are written in Svelte; Angular stays for the legacy pages.",
            "decision",
            2,
        )
    )
    assert svc.get(newer.slug).meta.supersede_decisions == []  # the rules had nothing to say
    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-haiku-4-5",
        timeout_s=5.0,
        max_retries=0,
        transport=claude.transport,
        sleep=lambda _s: None,
        rng=random.Random(7),
    )
    svc.llm = provider
    try:
        (judged,) = svc.judge_supersedes(newer.slug)
    finally:
        svc.llm = None
        provider.close()
    assert judged.older == older.slug
    (decision,) = svc.get(newer.slug).meta.supersede_decisions
    assert decision == judged
    assert decision.judge == "llm:anthropic/claude-haiku-4-5"
    assert decision.confidence == 0.72
    assert decision.status is SupersedeStatus.CANDIDATE
    assert decision.reason is not None
    assert "legacy pages" in decision.reason
    assert svc.graph.superseded_by([older.slug]) == {}
    (candidate,) = svc.supersede_candidates(project)
    assert (candidate.newer, candidate.judge) == (newer.slug, decision.judge)
    prompt = json.loads(claude.requests[0].content)["messages"][0]["content"]
    assert "<older_memory>\nAdmin UI\n\nThe admin UI is built with Angular." in prompt
    assert "<entity>\nAngular\n</entity>" in prompt


# --------------------------------------------------------------------------- CLI and HTTP


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


def cli_record(home: Path, project: Path, title: str, body: str, type: str) -> str:
    code, out, err = cli(
        home, "record", "--type", type, "--title", title, "--body", body, "--scope", str(project)
    )
    assert code == 0, err
    return out.strip()


def test_cli_reviews_candidates_and_reports_bad_input_with_exit_codes(
    home: Path, project: Path
) -> None:
    older = cli_record(
        home, project, "Databases", "All backend services use PostgreSQL.", "decision"
    )
    newer = cli_record(
        home,
        project,
        "Billing on CockroachDB",
        "Moved only the billing service from Postgres to CockroachDB.",
        "decision",
    )
    code, out, err = cli(home, "supersede", "list", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["newer"], row["older"], row["status"]) == (newer, older, "candidate")
    assert row["judge"] == "rule:switch-from-to"
    code, out, err = cli(home, "supersede", "accept", newer, older)
    assert (code, out.strip()) == (0, f"{newer} → {older}: active (decided by user)"), err
    code, out, err = cli(home, "supersede", "accept", newer, older)
    assert code == 4
    assert "it is active" in err
    assert "not candidate" in err
    code, out, err = cli(home, "supersede", "undo", newer, older, "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "undone"
    code, _, err = cli(home, "supersede", "undo", newer, "missing-slug")
    assert code == 3
    assert "no memory with slug 'missing-slug'" in err
    code, _, err = cli(home, "supersede", "reject", "missing-slug", older)
    assert code == 3
    code, out, err = cli(home, "supersede", "list")
    assert (code, out.strip()) == (0, "no supersede candidates")
    events = [e["event_type"] for e in audit_events(home)]
    assert events[-2:] == ["supersede_accept", "supersede_undo"]


def test_http_routes_on_a_real_daemon(home: Path, project: Path) -> None:
    with running(home), uds_client(home, actor="reviewer") as http:

        def create(title: str, body: str) -> str:
            payload = {"type": "decision", "title": title, "body": body, "scope": str(project)}
            response = http.post("/v1/memories", json=payload)
            assert response.status_code == 201, response.text
            slug: str = response.json()["meta"]["slug"]
            return slug

        older = create("Databases", "All backend services use PostgreSQL.")
        newer = create("Ingest", "The ingest worker switched from PostgreSQL to ClickHouse.")
        page = http.get("/v1/supersedes/candidates", params={"scope": str(project)}).json()
        assert [(r["newer"], r["older"]) for r in page["items"]] == [(newer, older)]
        url = f"/v1/supersedes/{newer}/{older}"
        rejected = http.post(f"{url}/reject", json={"decided_by": "digest"})
        assert rejected.status_code == 200, rejected.text
        assert (rejected.json()["status"], rejected.json()["decided_by"]) == (
            "rejected",
            "digest",
        )
        again = http.post(f"{url}/reject")
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "conflict"
        missing = http.post(f"/v1/supersedes/{newer}/nope/accept")
        assert missing.status_code == 404
        assert http.post(f"/v1/supersedes/{newer}/judge").json() == []
        third = create("Ingest again", "Replace PostgreSQL with ClickHouse for ingest.")
        judged = http.post(f"/v1/supersedes/{third}/judge").json()
        assert judged == []  # judged when it was recorded: nothing new to decide
        chain = http.get(f"/v1/memories/{older}/supersedes").json()["items"]
        assert {(r["newer"], r["status"]) for r in chain} == {(third, "active")}
    events = [(e["event_type"], e["actor"]) for e in audit_events(home)]
    assert ("supersede_reject", "reviewer") in events


# --------------------------------------------------------------------------- enriched sessions


@needs_fixtures
def test_an_enriched_session_is_judged_by_the_rules_then_the_llm_off_the_writer(
    home: Path,
    project: Path,
    settings: Settings,
    transcript: ClaudeTranscript,  # noqa: F811  (the fixture imported above)
    with_llm: LLM,  # noqa: F811
) -> None:
    transcript.say("Switched the importer from Poetry to uv, so installs take seconds.")
    hook(home, transcript)
    with open_service(settings) as svc:
        http = svc.record(
            draft(project, "Importer packaging", "The importer is packaged with Poetry.", "fact", 1)
        )
        tests = svc.record(
            draft(project, "Test runs", "Run pytest with -x only in CI.", "preference", 2)
        )
        replay, _ = with_llm(svc, *ENRICHED, "supersede_partial")
        svc.llm_judge_inline = False  # as `memoryd serve` sets it: the worker's queue judges
        assert svc.drain_inbox() == 1
        assert work(svc) == 1
        session = svc.get(SLUG)
        by_older = {d.older: d for d in session.meta.supersede_decisions}
        assert set(by_older) == {http.slug, tests.slug}
        assert by_older[http.slug].judge == "rule:switch-from-to"
        assert by_older[http.slug].status is SupersedeStatus.ACTIVE
        assert by_older[tests.slug].judge == "llm:anthropic/claude-haiku-4-5"
        assert by_older[tests.slug].status is SupersedeStatus.CANDIDATE
        # the enrichment's own calls (extraction, summary, DURA), then one judgement
        assert len(replay.requests) == len(ENRICHED) + 1
        assert "<older_memory>\nTest runs" in prompt_of(replay.requests[-1])
        assert svc.graph.superseded_by([http.slug, tests.slug]) == {http.slug: SLUG}
        assert not replay.steps


def test_the_bench_prints_the_confusion_table_per_tier_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "supersede.json"
    bench = Path(__file__).resolve().parents[2] / "bench" / "supersede.py"
    result = subprocess.run(
        [sys.executable, str(bench), "--json", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "auto " in result.stdout
    assert "candidate " in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    pairs = report["pairs"]
    assert pairs["pairs"] == len(load_pairs())
    auto = pairs["groups"]["all"]["auto"]
    assert auto["tp"] + auto["fp"] + auto["fn"] + auto["tn"] == pairs["pairs"]
    assert auto["precision"] >= 0.95
    assert auto["recall"] >= 0.6
    assert set(pairs["groups"]["all"]) == {"auto", "candidate"}
    # The real decision records: every stated replacement counted, no invented one.
    records = report["records"]["overall"]
    assert records["records"] >= 144
    assert records["auto"]["precision"] >= 0.95
    assert records["auto"]["false_per_50"] <= 1.0


def test_the_daemon_records_without_waiting_for_the_llm_and_its_worker_judges_later(
    svc: MemoryService, project: Path, claude: Replay
) -> None:
    older = svc.record(
        draft(project, "Admin UI", "The admin UI is built with Angular.", "decision", 1)
    )
    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-haiku-4-5",
        timeout_s=5.0,
        max_retries=0,
        transport=claude.transport,
        sleep=lambda _s: None,
        rng=random.Random(7),
    )
    svc.llm_judge_inline = False  # as `memoryd serve` sets it
    try:
        newer = svc.record(
            draft(
                project,
                "Admin forms",
                "New admin UI forms are written in Svelte; Angular stays for the legacy pages.",
                "decision",
                2,
            )
        )
        assert svc.governance.judge_job(newer.slug) is None  # no LLM when it was recorded
        # With one, the record path (whose LLM extraction is another test's) queues it:
        svc.llm = provider
        svc._judge_written([svc.get(newer.slug)], use_llm=True)
        assert [r.slug for r in svc.judges_due(8)] == [newer.slug]
        assert claude.requests == []  # the writer did not wait on the LLM
        assert work(svc) == 0  # the worker's round: no session to enrich, one memory judged
    finally:
        svc.llm = None
        provider.close()
    assert svc.judge_counts() == {"pending": 0, "done": 1, "failed": 0}
    (decision,) = svc.get(newer.slug).meta.supersede_decisions
    assert (decision.older, decision.status) == (older.slug, SupersedeStatus.CANDIDATE)
    assert len(claude.requests) == 1


def test_a_graph_from_before_supersede_judging_keeps_its_edges_active(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.graph import kuzu_store
    from tests.conftest import ENGINE
    from tests.integration.test_graph_store import memory

    directory = tmp_path / "graph"
    with monkeypatch.context() as old_code:
        old_code.setattr(kuzu_store, "SCHEMA_VERSION", 2)
        store = kuzu_store.KuzuGraphStore(directory, engine=ENGINE, buffer_pool_mb=128)
        assert store.schema_version() == 2
        store.upsert_memories([memory("use-react"), memory("use-solid")], link_memories=False)
        with store._transaction() as conn:  # an edge as schema 2 wrote it: no status column
            conn.execute(
                "MATCH (n:Memory {slug: 'use-solid'}), (o:Memory {slug: 'use-react'})"
                " CREATE (n)-[:SUPERSEDES {confidence: 1.0, decided_by: 'user'}]->(o)"
            )
        store.close()
    store = kuzu_store.KuzuGraphStore(directory, engine=ENGINE, buffer_pool_mb=128)
    try:
        assert store.schema_version() == kuzu_store.SCHEMA_VERSION == len(kuzu_store.MIGRATIONS)
        assert store.superseded_by(["use-react"]) == {"use-react": "use-solid"}
        (row,) = store.supersedes_chain("use-react")
        assert (row.status, row.judge, row.decided_by, row.rules) == ("active", None, "user", None)
    finally:
        store.close()


def test_a_session_transcript_supersedes_automatically_only_between_known_names() -> None:
    # `fmtkit` is a tool only the graph knows (an entity both memories mention), `format_row`
    # nothing at all: a word the rules may never take as the replaced thing.
    fmtkit = Name("fmtkit", ("fmtkit",), "tool")
    helpers = Pair("helpers", "Formatting helpers call format_row for every table.", None, "x")
    graph = Pair("graph", "Tables are formatted with fmtkit.", None, "fmtkit", (fmtkit,))
    tools = Pair("packaging", "The importer is packaged with Poetry.", None, "Poetry")
    text = (
        "Replace format_row with render_row in the helpers. Replace fmtkit with tabulate"
        " for tables. Switched from Poetry to uv."
    )
    for session, expected in ((False, "auto"), (True, "candidate")):
        job = SupersedeJob("newer", text, [helpers, graph, tools], session=session)
        judge_pairs(job)
        assert "helpers" not in job.verdicts
        assert Tiers().tier(job.verdicts["graph"].confidence) == expected
        assert Tiers().tier(job.verdicts["packaging"].confidence) == "auto"


def test_a_judged_job_leaves_no_memory_text_kept_in_the_process() -> None:
    # The rules keep each text's reading while a job runs (a newer memory meets twenty
    # pairs); none stays after it, so a forgotten memory's words leave the daemon's heap.
    from memoryd.governance import supersede_patterns

    older = Pair("redis", "Sessions are cached in Redis.", None, "Redis")
    job = SupersedeJob("newer", "We moved session caching from Redis to Valkey.", [older])
    judge_pairs(job)
    assert Tiers().tier(job.verdicts["redis"].confidence) == "auto"
    assert supersede_patterns._transitions.cache_info().currsize == 0


def test_memories_written_in_the_same_second_are_judged_once_one_way(
    svc: MemoryService, project: Path
) -> None:
    older = svc.record(draft(project, "Tests", "Unit tests run with Jest.", "decision", 3))
    newer = svc.record(
        draft(project, "Vitest", "Tests now use Vitest instead of Jest.", "decision", 3)
    )
    assert older.meta.created_at == newer.meta.created_at
    assert svc.graph.superseded_by([older.slug]) == {older.slug: newer.slug}
    assert svc.judge_supersedes(older.slug) == []  # never the other way round as well
    assert svc.graph.superseded_by([newer.slug]) == {}


def judge(svc: MemoryService, limit: int = 8) -> int:
    """One round of the daemon's judge worker, on a real writer thread; how many it settled."""
    runner = ServiceRunner()
    try:
        return asyncio.run(judge_round(svc, runner, limit))
    finally:
        runner.close()


def test_the_judge_queue_survives_a_daemon_restart_and_retries_with_backoff_when_the_llm_is_down(
    settings: Settings, project: Path
) -> None:
    """The daemon's worker (`enrich_round` on a real writer thread) against Claude's network
    replayed: refused connections, then a restart, then the recorded judgement."""

    def claude(replay: Replay) -> AnthropicProvider:
        return AnthropicProvider(
            api_key="sk-ant-test",
            model="claude-haiku-4-5",
            timeout_s=5.0,
            max_retries=0,
            transport=replay.transport,
            sleep=lambda _s: None,
            rng=random.Random(7),
        )

    admin = "New admin UI forms are written in Svelte; Angular stays for the legacy pages."
    down = Replay("anthropic", CONNECT_ERROR)
    with open_service(settings) as svc:
        svc.llm_judge_inline = False  # as `memoryd serve` sets it
        older = svc.record(
            draft(project, "Admin UI", "The admin UI is built with Angular.", "decision", 1)
        )
        newer = svc.record(draft(project, "Admin forms", admin, "decision", 2))
        # With an LLM, the record path (whose LLM extraction is another test's) queues them:
        svc.llm = claude(down)
        try:
            svc._judge_written([svc.get(older.slug), svc.get(newer.slug)], use_llm=True)
            assert [r.slug for r in svc.judges_due(8)] == [older.slug, newer.slug]
            assert down.requests == []  # the writer did not wait on the LLM
            # The older has nothing to replace (done); the newer's LLM call fails (backoff).
            assert judge(svc) == 2
            assert len(down.requests) == 1
        finally:
            svc.llm.close()
            svc.llm = None
        row = svc.governance.judge_job(newer.slug)
        assert row is not None
        assert (row.state, row.attempts) == ("pending", 1)
        assert row.last_error is not None
        assert older.slug in row.last_error
        waited = (row.next_attempt_at - svc.clock()).total_seconds()
        assert svc.enrichment.backoff_s - 5 <= waited <= svc.enrichment.backoff_s
        assert svc.get(newer.slug).meta.supersede_decisions == []
        checks = {c.name: c for c in service_checks(svc, settings)}
        assert "1 pending, 1 done, 0 failed" in checks["supersede judging"].detail

    up = Replay("anthropic", "supersede_partial")
    with open_service(settings) as svc:  # the daemon, restarted
        svc.llm_judge_inline = False
        svc.llm = claude(up)
        try:
            assert judge(svc) == 0  # still backing off: the LLM is not asked
            assert up.requests == []
            later = row.next_attempt_at + timedelta(seconds=1)
            svc.clock = lambda: later
            assert work(svc) == 0  # the enrichment worker's round judges what is due
            assert up.requests != []
        finally:
            svc.llm.close()
            svc.llm = None
        assert len(up.requests) == 1
        (decision,) = svc.get(newer.slug).meta.supersede_decisions
        assert (decision.older, decision.status) == (older.slug, SupersedeStatus.CANDIDATE)
        assert decision.judge == "llm:anthropic/claude-haiku-4-5"
        assert svc.judge_counts() == {"pending": 0, "done": 2, "failed": 0}
        assert judge(svc) == 0  # judged once


def test_a_judge_the_llm_keeps_failing_ends_failed_and_doctor_names_it(
    settings: Settings, project: Path
) -> None:
    from memoryd.enrichment import EnrichmentPolicy

    down = Replay("anthropic", CONNECT_ERROR, CONNECT_ERROR)
    with open_service(settings) as svc:
        svc.llm_judge_inline = False
        svc.enrichment = EnrichmentPolicy(max_attempts=2, backoff_s=0.0)
        older = svc.record(
            draft(project, "Admin UI", "The admin UI is built with Angular.", "decision", 1)
        )
        newer = svc.record(
            draft(
                project,
                "Admin forms",
                "New admin UI forms are written in Svelte; Angular stays for the legacy pages.",
                "decision",
                2,
            )
        )
        svc.llm = AnthropicProvider(
            api_key="sk-ant-test",
            model="claude-haiku-4-5",
            timeout_s=5.0,
            max_retries=0,
            transport=down.transport,
            sleep=lambda _s: None,
            rng=random.Random(7),
        )
        try:
            svc._judge_written([svc.get(older.slug), svc.get(newer.slug)], use_llm=True)
            assert judge(svc) == 2  # the older: nothing to replace; the newer: refused
            assert judge(svc) == 1
            assert judge(svc) == 0  # failed: not retried
            row = svc.governance.judge_job(newer.slug)
            assert row is not None
            assert (row.state, row.attempts) == ("failed", 2)
            checks = {c.name: c for c in service_checks(svc, settings)}
            assert not checks["supersede judging"].ok
            assert "0 pending, 1 done, 1 failed" in checks["supersede judging"].detail
            svc._judge_written([svc.get(newer.slug)], use_llm=True)  # written again: anew
            again = svc.governance.judge_job(newer.slug)
            assert again is not None
            assert (again.state, again.attempts) == ("pending", 0)
        finally:
            svc.llm.close()
            svc.llm = None
