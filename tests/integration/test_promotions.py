"""Issue 15: DURA scoring of session memories and the review of the promotions queue.

Real stores in temp dirs; the CLI through typer's runner (embedded mode); a real daemon for
HTTP; a real MCP client session. The LLM is the real Anthropic SDK over recorded replies.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.doctor import service_checks
from memoryd.enrichment import content_fingerprint
from memoryd.errors import Conflict, NotFound, PolicyDenied, RateLimited
from memoryd.governance.promotions import ReviewPolicy, promoted_slug
from memoryd.llm.anthropic_provider import AnthropicProvider
from memoryd.mcp.server import create_server
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.vault import parse
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client
from tests.integration.test_llm import Replay

DURA = Path(__file__).parents[1] / "data" / "dura"
cli = CliRunner()


def labelled_body(name: str) -> tuple[str, str]:
    """Title and body of one session of the labelled set (realistic captured sessions)."""
    memory = parse((DURA / name).read_text("utf-8"), DURA / name)
    return memory.meta.title, memory.body


def session(svc: MemoryService, project: Path, name: str) -> str:
    title, body = labelled_body(name)
    draft = MemoryDraft(type=MemoryType.SESSION, title=title, body=body, scope_path=project)
    return svc.record(draft).slug


def invoke(home: Path, *args: str) -> Any:
    result = cli.invoke(app, [*args, "--home", str(home)])
    return result


@pytest.fixture
def service(settings: Settings) -> Iterator[MemoryService]:
    with open_service(settings) as svc:
        yield svc


@pytest.fixture
def anthropic() -> Iterator[list[AnthropicProvider]]:
    made: list[AnthropicProvider] = []
    yield made
    for provider in made:
        provider.close()


def attach_llm(
    svc: MemoryService, made: list[AnthropicProvider], *steps: str, max_retries: int = 0
) -> Replay:
    replay = Replay("anthropic", *steps)
    provider = AnthropicProvider(
        api_key="sk-ant-test",
        model="claude-haiku-4-5",
        timeout_s=5.0,
        max_retries=max_retries,
        transport=replay.transport,
        sleep=lambda _: None,
        rng=random.Random(7),
    )
    made.append(provider)
    svc.llm = provider
    return replay


# -- analyze-session ---------------------------------------------------------------------------
def test_analyze_session_scores_writes_the_score_and_queues_a_promotion(
    service: MemoryService, project: Path
) -> None:
    slug = session(service, project, "en-04-pin-kuzu.md")
    report = service.analyze_session(slug)  # no LLM configured: heuristic-v1

    assert report.dura.by == "heuristic-v1"
    assert report.dura.mean >= 0.6
    assert report.queue == "new"
    memory = service.get(slug)
    assert memory.meta.dura_score == report.dura  # in the frontmatter
    assert "by: heuristic-v1" in memory.path.read_text("utf-8")  # type: ignore[union-attr]
    [promotion] = service.list_promotions()
    assert promotion.id == report.promotion_id
    assert promotion.source_slug == slug
    assert promotion.source_title == "Kuzu 0.11.3 pin after segfaults"
    assert promotion.proposed_type is MemoryType.DECISION
    for quote in promotion.evidence:  # quoted, never invented
        assert quote in memory.body
    assert promotion.proposed_title.rstrip("…") in promotion.evidence[0]  # the best quote
    assert "0.11.3" in promotion.proposed_triggers
    [analyze] = service.audit_records(event_type="analyze")
    assert json.loads(analyze.details or "{}") == {
        "mean": round(report.dura.mean, 3),
        "by": "heuristic-v1",
    }
    [propose] = service.audit_records(event_type="propose")
    assert propose.target_id == slug

    again = service.analyze_session(slug, mode="heuristic")  # same content, pending: refreshed
    assert (again.promotion_id, again.queue) == (promotion.id, "updated")
    assert len(service.list_promotions(status=None)) == 1


def test_below_the_threshold_nothing_is_queued_but_the_score_is_kept(
    service: MemoryService, project: Path
) -> None:
    slug = session(service, project, "en-02-typo-readme.md")
    report = service.analyze_session(slug, mode="heuristic")
    assert report.dura.mean < 0.6
    assert report.promotion_id is None
    assert service.get(slug).meta.dura_score == report.dura
    assert service.list_promotions(status=None) == []
    service.review.policy = ReviewPolicy(dura_threshold=0.2)  # governance.dura_threshold
    assert service.analyze_session(slug, mode="heuristic").queue == "new"


def test_analyze_session_cli_flags_and_errors(
    home: Path, project: Path, settings: Settings
) -> None:
    with open_service(settings) as svc:
        slug = session(svc, project, "zh-03-switch-pnpm.md")
        fact = svc.record(
            MemoryDraft(type=MemoryType.FACT, title="A fact", body="Plain.", scope_path=project)
        ).slug
    done = invoke(home, "analyze-session", slug, "--heuristic")
    assert done.exit_code == 0, done.output
    assert "by heuristic-v1" in done.stdout
    assert "queued promotion 1: decision" in done.stdout
    both = invoke(home, "analyze-session", slug, "--llm", "--heuristic")
    assert both.exit_code == 2
    no_llm = invoke(home, "analyze-session", slug, "--llm")
    assert no_llm.exit_code == 2  # says how to configure one, or to use --heuristic
    assert "no LLM is configured" in no_llm.stderr
    assert "--heuristic" in no_llm.stderr
    wrong = invoke(home, "analyze-session", fact)
    assert wrong.exit_code == 2
    assert "only session memories are scored" in wrong.stderr
    missing = invoke(home, "analyze-session", "no-such-slug")
    assert missing.exit_code == 3


def test_a_sensitive_scope_is_never_scored(service: MemoryService, project: Path) -> None:
    slug = session(service, project, "en-04-pin-kuzu.md")
    scope = service.vault.read_scope(service.get(slug).meta.scope_hash)
    assert scope is not None
    scope.sensitive = True
    service.vault.write_scope(scope)
    with pytest.raises(PolicyDenied, match="sensitive"):
        service.analyze_session(slug, mode="heuristic")
    assert service.list_promotions(status=None) == []


def test_llm_scoring_and_a_failed_call_left_queued_with_backoff(
    service: MemoryService, project: Path, anthropic: list[AnthropicProvider]
) -> None:
    slug = session(service, project, "en-01-tantivy-fts.md")
    attach_llm(service, anthropic, "rate_limited_429")
    with pytest.raises(RateLimited) as failed:
        service.analyze_session(slug)  # an LLM is configured: it scores
    assert "stays queued and the daemon retries it in 60 s (attempt 1 of 5)" in str(failed.value)
    row = service.governance.enrichment(slug)
    assert row is not None
    assert (row.state, row.attempts) == ("pending", 1)
    assert row.last_error is not None
    assert row.last_error.startswith("rate_limited")
    assert 59 < (row.next_attempt_at - row.updated_at).total_seconds() < 61
    assert service.get(slug).meta.dura_score is None  # nothing written
    assert service.list_promotions(status=None) == []

    replay = attach_llm(service, anthropic, "dura_ok")
    report = service.analyze_session(slug, mode="llm")
    assert report.dura.by == "llm:claude-haiku-4-5"
    assert (report.dura.D, report.dura.A) == (0.8, 0.85)
    [request] = replay.bodies()
    assert "We decided to move full-text search" in request["messages"][0]["content"]
    [promotion] = service.list_promotions()
    assert promotion.proposed_title == "全文检索从 Kuzu FTS 改用 tantivy"
    assert promotion.dura.by == "llm:claude-haiku-4-5"
    assert promotion.evidence == []  # the recorded reply quoted nothing


def test_heuristic_supersedes_what_a_switch_left(service: MemoryService, project: Path) -> None:
    old = service.record(
        MemoryDraft(
            type=MemoryType.DECISION,
            title="The dashboard uses React",
            body="Dashboard components are written in React 18.",
            scope_path=project,
        )
    ).slug
    slug = session(service, project, "en-10-react-to-solid.md")
    report = service.analyze_session(slug, mode="heuristic")
    assert report.proposal.proposed_supersedes == [old]
    promotion = service.promote(report.promotion_id or 0)
    written = service.get(promotion.promoted_slug or "")
    assert written.meta.supersedes == [old]
    assert [r.older for r in service.supersedes_chain(written.slug)] == [old]


# -- promote / reject ------------------------------------------------------------------------
def test_promote_writes_the_long_term_memory_with_its_edge_and_audit(
    home: Path, project: Path, settings: Settings
) -> None:
    with open_service(settings) as svc:
        slug = session(svc, project, "en-16-uv-venv.md")
        report = svc.analyze_session(slug)
        scope_hash = svc.get(slug).meta.scope_hash
    pid = report.promotion_id
    assert pid is not None

    listed = invoke(home, "promotions")
    assert listed.exit_code == 0, listed.output
    assert f"#{pid} pending  decision:" in listed.stdout
    assert "by heuristic-v1" in listed.stdout
    assert f"from {slug} “Use uv for the memoryd virtualenv”" in listed.stdout
    assert "  > We decided to use uv instead of pip" in listed.stdout
    as_json = json.loads(invoke(home, "promotions", "--json", "--scope", str(project)).stdout)
    assert [p["id"] for p in as_json] == [pid]
    assert json.loads(invoke(home, "promotions", "--json", "--status", "approved").stdout) == []

    done = invoke(home, "promote", str(pid))
    assert done.exit_code == 0, done.output
    new_slug = done.stdout.strip()
    assert new_slug == promoted_slug(pid, report.proposal.proposed_title)
    path = home / "scopes" / scope_hash / "decisions" / f"{new_slug}.md"
    written = parse(path.read_text("utf-8"), path)
    assert written.meta.promoted_from == slug
    assert written.meta.type is MemoryType.DECISION
    assert written.meta.triggers == report.proposal.proposed_triggers
    assert written.meta.source == f"promotion:{pid}"
    assert written.body == report.proposal.proposed_body

    twice = invoke(home, "promote", str(pid))
    assert twice.exit_code == 4
    assert f"promotion {pid} was already decided: approved" in twice.stderr
    assert invoke(home, "reject", str(pid)).exit_code == 4
    unknown = invoke(home, "promote", "999")
    assert unknown.exit_code == 3
    assert "no promotion 999" in unknown.stderr
    assert invoke(home, "reject", "999").exit_code == 3
    assert invoke(home, "promote", str(2**70)).exit_code == 3  # past SQLite's integers

    with open_service(settings) as svc:
        edge = svc.cypher(
            "MATCH (n:Memory)-[:PROMOTED_FROM]->(o:Memory) RETURN n.slug, o.slug"
        ).rows
        assert edge == [[new_slug, slug]]
        [event] = svc.audit_records(event_type="promote")
        assert event.target_id == new_slug
        assert json.loads(event.details or "{}")["promotion"] == pid
        assert svc.audit_verify().ok
        decided = svc.get_promotion(pid)
        assert (decided.status, decided.decided_by, decided.promoted_slug) == (
            "approved",
            "cli",
            new_slug,
        )
        assert svc.recall("uv instead of pip").hits[0].slug in (new_slug, slug)


def test_promote_with_edits_and_reject_with_a_reason(
    home: Path, project: Path, settings: Settings, tmp_path: Path
) -> None:
    with open_service(settings) as svc:
        first = svc.analyze_session(session(svc, project, "zh-05-never-float-money.md"))
        second = svc.analyze_session(session(svc, project, "en-20-docker-lesson.md"))
        scope_hash = svc.get(first.slug).meta.scope_hash
    body = tmp_path / "body.md"
    body.write_text("金额一律用 Decimal 或以分为单位的整数存储,禁止用 float。\n", "utf-8")
    done = invoke(
        home,
        "promote",
        str(first.promotion_id),
        "--type",
        "warning",
        "--title",
        "金额禁止用 float",
        "--body-file",
        str(body),
    )
    assert done.exit_code == 0, done.output
    new_slug = done.stdout.strip()
    assert new_slug.startswith(f"promoted-{first.promotion_id}-")
    written = home / "scopes" / scope_hash / "warnings" / f"{new_slug}.md"
    memory = parse(written.read_text("utf-8"), written)
    assert (memory.meta.title, memory.body) == (
        "金额禁止用 float",
        "金额一律用 Decimal 或以分为单位的整数存储,禁止用 float。",
    )
    bad = invoke(home, "promote", str(second.promotion_id), "--body-file", str(tmp_path / "no"))
    assert bad.exit_code == 2
    assert "--body-file" in bad.stderr
    session_type = invoke(home, "promote", str(second.promotion_id), "--type", "session")
    assert session_type.exit_code == 2

    rejected = invoke(
        home, "reject", str(second.promotion_id), "--reason", "already in the runbook"
    )
    assert rejected.exit_code == 0, rejected.output
    with open_service(settings) as svc:
        row = svc.get_promotion(second.promotion_id or 0)
        assert (row.status, row.decision_reason) == ("rejected", "already in the runbook")
        [event] = svc.audit_records(event_type="reject")
        assert "runbook" not in (event.details or "")  # the reason stays out of the audit log
        assert len(svc.list_promotions(status=None)) == 2
        assert svc.list_promotions() == []


def test_promote_of_a_deleted_source_is_refused_and_the_promotion_kept(
    home: Path, project: Path, settings: Settings
) -> None:
    with open_service(settings) as svc:
        slug = session(svc, project, "en-14-warning-utc.md")
        report = svc.analyze_session(slug)
        svc.get(slug).path.unlink()  # type: ignore[union-attr]
        svc.reindex()
    pid = report.promotion_id
    failed = invoke(home, "promote", str(pid))
    assert failed.exit_code == 3
    assert f"source session {slug} was deleted" in failed.stderr
    assert "stays pending" in failed.stderr
    assert f"memoryd reject {pid}" in failed.stderr
    with open_service(settings) as svc:
        kept = svc.get_promotion(pid or 0)
        assert kept.status == "pending"
        assert kept.source_missing_at is not None
        assert svc.audit_records(event_type="promote") == []
        assert not list((home / "scopes").glob("*/warnings/*.md"))
    listed = invoke(home, "promotions")
    assert "the source session was deleted" in listed.stdout
    assert invoke(home, "reject", str(pid)).exit_code == 0


def test_a_malformed_dura_score_is_named_by_doctor(
    home: Path, project: Path, settings: Settings
) -> None:
    with open_service(settings) as svc:
        slug = session(svc, project, "en-06-ruff-preference.md")
        svc.analyze_session(slug)
        path = svc.get(slug).path
    assert path is not None
    text = path.read_text("utf-8")
    path.write_text(text.replace("by: heuristic-v1", "by: my gut feeling"), "utf-8")
    with open_service(settings) as svc:
        checks = {c.name: c for c in service_checks(svc, settings)}
    check = checks["dura scores"]
    assert not check.ok
    assert str(path) in check.detail
    assert "dura_score.by" in check.detail
    assert "analyze-session" in check.fix
    doctor = invoke(home, "doctor")
    assert doctor.exit_code == 1
    assert f"FAIL dura scores: {path}" in doctor.stdout


# -- MCP ---------------------------------------------------------------------------------------
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_promote_and_reject_refuse_unless_agents_may_decide(
    service: MemoryService, project: Path
) -> None:
    first = service.analyze_session(session(service, project, "en-23-secrets-rule.md"))
    second = service.analyze_session(session(service, project, "zh-11-timeout-lesson.md"))
    async with Client(create_server(service), raise_exceptions=True) as client:
        listed = await client.call_tool("list_promotions", {})
        data = json.loads(listed.content[0].text)  # type: ignore[union-attr]
        assert {p["id"] for p in data["promotions"]} == {first.promotion_id, second.promotion_id}
        assert all(p["dura"]["by"] == "heuristic-v1" and p["evidence"] for p in data["promotions"])
        refused = await client.call_tool("promote", {"promotion_id": first.promotion_id})
        assert refused.is_error
        text = refused.content[0].text  # type: ignore[union-attr]
        assert "agents may not decide" in text
        assert "agents_decide = true" in text
        assert (await client.call_tool("reject", {"promotion_id": second.promotion_id})).is_error
        assert {p.status for p in service.list_promotions(status=None)} == {"pending"}

        service.review.policy = ReviewPolicy(agents_decide=True)
        done = await client.call_tool("promote", {"promotion_id": first.promotion_id})
        assert not done.is_error
        assert json.loads(done.content[0].text)["status"] == "approved"  # type: ignore[union-attr]
        rejected = await client.call_tool(
            "reject", {"promotion_id": second.promotion_id, "reason": "too specific"}
        )
        assert json.loads(rejected.content[0].text)["decision_reason"] == "too specific"  # type: ignore[union-attr]
        twice = await client.call_tool("promote", {"promotion_id": first.promotion_id})
        assert twice.is_error
        assert "already decided" in twice.content[0].text  # type: ignore[union-attr]
    assert {e.actor for e in service.audit_records(event_type="promote")} == {"cli"}


def test_review_errors_are_typed(service: MemoryService, project: Path) -> None:
    with pytest.raises(NotFound):
        service.promote(5)
    report = service.analyze_session(session(service, project, "zh-17-version-pin.md"))
    service.reject(report.promotion_id or 0)
    with pytest.raises(Conflict):
        service.reject(report.promotion_id or 0)


# -- HTTP, through a real daemon ----------------------------------------------------------------
def test_http_promotions_routes(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "daemon-home"
    title, body = labelled_body("en-18-api-pagination-decision.md")
    # The worker would score the recorded sessions too (another test's): not during this one.
    quiet = {"MEMORYD_ENRICHMENT__INTERVAL_S": "3600"}
    with running(home, env=quiet) as daemon, uds_client(daemon.home) as http:
        made = http.post(
            "/v1/memories",
            json={"type": "session", "title": title, "body": body, "scope": str(project)},
        )
        assert made.status_code == 201, made.text
        slug = made.json()["meta"]["slug"]
        scored = http.post(f"/v1/memories/{slug}/analyze", json={"mode": "heuristic"})
        assert scored.status_code == 200, scored.text
        pid = scored.json()["promotion_id"]
        zh_title, zh_body = labelled_body("zh-13-preference-style.md")
        zh = http.post(
            "/v1/memories",
            json={"type": "session", "title": zh_title, "body": zh_body, "scope": str(project)},
        )
        assert zh.status_code == 201, zh.text  # a Chinese slug, percent-encoded in Location
        assert zh.headers["location"].startswith("/v1/memories/")
        assert zh.headers["location"].isascii()
        page = http.get("/v1/promotions").json()
        assert [p["id"] for p in page["items"]] == [pid]
        assert page["items"][0]["evidence"]
        assert http.get(f"/v1/promotions/{pid}").json()["source_slug"] == slug
        assert http.get("/v1/promotions/77").status_code == 404
        assert http.get("/v1/promotions?status=bogus").status_code == 422
        agent = http.post(f"/v1/promotions/{pid}/promote", json={"agent": True})
        assert (agent.status_code, agent.json()["error"]["code"]) == (403, "policy_denied")
        no_team = http.post(f"/v1/promotions/{pid}/promote", json={"team": True})
        assert no_team.status_code == 422, no_team.text  # this data dir joined no team
        assert "joined no team" in no_team.json()["error"]["message"]
        done = http.post(f"/v1/promotions/{pid}/promote", json={"title": "Lists page by offset"})
        assert done.status_code == 200, done.text
        new_slug = done.json()["promoted_slug"]
        assert new_slug == f"promoted-{pid}-lists-page-by-offset"
        assert http.get(f"/v1/memories/{new_slug}").json()["meta"]["promoted_from"] == slug
        again = http.post(f"/v1/promotions/{pid}/reject", json={})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")
        assert http.get("/v1/promotions?status=all").json()["items"][0]["status"] == "approved"
        # the CLI goes through the daemon and exits the same way
        listed = cli.invoke(app, ["promotions", "--status", "all", "--home", str(home)])
        assert listed.exit_code == 0, listed.output
        assert "approved by test" in listed.stdout  # the harness client's actor
        assert cli.invoke(app, ["promote", str(pid), "--home", str(home)]).exit_code == 4
        assert cli.invoke(app, ["reject", "77", "--home", str(home)]).exit_code == 3


# -- the enrichment worker scores each captured content once -------------------------------------
def test_the_worker_scores_once_per_content(service: MemoryService, project: Path) -> None:
    slug = session(service, project, "zh-07-redis-decision.md")
    memory = service.get(slug)
    from memoryd.enrichment import content_fingerprint

    service.governance.enqueue_enrichment(slug, content_fingerprint(memory), memory.meta.created_at)
    assert service.enrich_pending() == 1  # no LLM: rules and heuristic-v1
    scored = service.get(slug).meta.dura_score
    assert scored is not None
    assert scored.by == "heuristic-v1"
    [promotion] = service.list_promotions()
    assert promotion.source_slug == slug
    assert service.enrich_pending() == 0  # the same content is never scored twice
    queued = service.governance.enqueue_enrichment(
        slug, content_fingerprint(memory), memory.meta.created_at
    )
    assert queued == "same"
    assert len(service.audit_records(event_type="propose")) == 1
    assert service.enrichment_due(8) == []


# -- session memories recorded by hand are scored like captured ones ------------------------------
def test_a_session_recorded_by_hand_is_queued_once_and_scored_by_the_worker(
    service: MemoryService, project: Path
) -> None:
    slug = session(service, project, "en-04-pin-kuzu.md")
    decision = service.record(
        MemoryDraft(
            type=MemoryType.DECISION,
            title="Kuzu pinned",
            body="We pin kuzu to 0.11.3 because 0.11.2 segfaults on reopen.",
            scope_path=project,
        )
    )
    row = service.governance.enrichment(slug)
    assert row is not None
    assert (row.state, row.fingerprint) == ("pending", content_fingerprint(service.get(slug)))
    assert service.governance.enrichment(decision.slug) is None  # long-term: not a session
    assert service.enrichment_due(8) == [slug]

    assert service.enrich_pending(use_llm=False) == 1  # what an embedded write command runs
    scored = service.get(slug).meta.dura_score
    assert scored is not None
    assert scored.by == "heuristic-v1"
    [promotion] = service.list_promotions()
    assert promotion.source_slug == slug
    # Edits that keep the content (tags) do not queue it again: scored once per content.
    service.update_keywords(slug, tags=["kuzu"])
    assert service.enrichment_due(8) == []
    assert service.enrich_pending(use_llm=False) == 0
    assert len(service.audit_records(event_type="propose")) == 1


def test_an_import_too_big_to_score_is_not_queued(
    service: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memoryd.domain.writes as writes

    monkeypatch.setattr(writes, "ENRICH_BULK_LIMIT", 2)
    drafts = [
        MemoryDraft(
            type=MemoryType.SESSION,
            title=f"Session {n}",
            body=f"Ran pytest {n}.",
            scope_path=project,
        )
        for n in range(3)
    ]
    assert len(service.record_many(drafts)) == 3
    assert service.enrichment_due(8) == []
    assert service.enrichment_counts() == {"pending": 0, "done": 0, "failed": 0}


def test_a_daemon_scores_a_session_recorded_through_it(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_ENRICHMENT__INTERVAL_S", "0.3")
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
    title, body = labelled_body("en-04-pin-kuzu.md")
    with running(home) as daemon, uds_client(home) as http:
        created = http.post(
            "/v1/memories",
            json={"type": "session", "title": title, "body": body, "scope": str(project)},
        )
        assert created.status_code == 201, created.text
        slug = created.json()["meta"]["slug"]
        deadline = time.monotonic() + 60
        while not http.get("/v1/promotions").json()["items"]:
            assert time.monotonic() < deadline, "the daemon's worker never scored the session"
            time.sleep(0.1)
        [promotion] = http.get("/v1/promotions").json()["items"]
        assert promotion["source_slug"] == slug
        meta = http.get(f"/v1/memories/{slug}").json()["meta"]
        assert meta["dura_score"]["by"] == "heuristic-v1"
        checks = {c["name"]: c for c in http.get("/v1/doctor").json()}
        assert "0 pending, 1 done, 0 failed" in checks["enrichment"]["detail"]
        assert daemon.stop() == 0
