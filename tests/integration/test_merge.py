"""`merge` and `duplicates` over real stores: what folds into the kept memory, what happens to
the dropped ones and to the memories and promotions that named them, and the bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.errors import Conflict, InvalidInput, NotFound
from memoryd.governance.merge import NEAR_DUPLICATE_JACCARD, jaccard, shingles
from memoryd.models import DecayState, Dura, MemoryDraft, MemoryType, PromotionProposal
from memoryd.service import MemoryService
from memoryd.wiring import open_service


def rec(svc: MemoryService, project: Path, title: str, body: str, **kw: object) -> str:
    draft = MemoryDraft.model_validate(
        {"type": kw.pop("type", "session"), "title": title, "body": body, "scope_path": project}
        | kw
    )
    return svc.record(draft).slug


def pending_promotion(svc: MemoryService, source: str, scope_hash: str) -> int:
    proposal = PromotionProposal(
        source_slug=source,
        source_title="t",
        source_fingerprint="f",
        scope_hash=scope_hash,
        proposed_type=MemoryType.DECISION,
        proposed_title="t",
        proposed_body="b",
        dura=Dura(D=0.9, U=0.9, R=0.9, A=0.9, by="heuristic-v1"),
    )
    return svc.governance.propose_promotion(proposal, datetime.now(UTC))[0]


def promotion_status(svc: MemoryService, pid: int) -> str:
    promotion = svc.governance.promotion(pid)
    assert promotion is not None
    return promotion.status


def test_merge_folds_everything_into_the_kept_memory(svc: MemoryService, project: Path) -> None:
    old = rec(svc, project, "Use MySQL", "We store jobs in MySQL.", type="decision")
    keep = rec(
        svc,
        project,
        "Switched to Postgres",
        "We switched from MySQL to PostgreSQL for the job queue.",
        tags=["db"],
        triggers=["postgres"],
    )
    drop = rec(
        svc,
        project,
        "Postgres move",
        "Moved the job queue to PostgreSQL; Redis stays the cache.",
        tags=["queue"],
        triggers=["job queue"],
        supersedes=[old],
    )
    later = rec(svc, project, "Newer note", "Jobs use SKIP LOCKED.", supersedes=[drop])
    svc.recall("job queue redis cache", scope=project)  # counts recalls on drop
    svc.flush_recall_stats()
    drop_before = svc.get(drop)
    keep_before = svc.get(keep)
    scope = keep_before.meta.scope_hash
    waiting = pending_promotion(svc, drop, scope)
    other = pending_promotion(svc, keep, scope)

    result = svc.merge(keep, [drop])

    merged = svc.get(keep)
    assert set(merged.meta.tags) == {"db", "queue"}
    assert set(merged.meta.triggers) == {"postgres", "job queue"}
    assert set(drop_before.meta.observations) <= set(merged.meta.observations)
    assert any("Redis" in o for o in merged.meta.observations)
    assert merged.meta.supersedes == [old]  # the dropped one's supersedes edge moved here
    assert merged.meta.recall_count == keep_before.meta.recall_count + drop_before.meta.recall_count
    assert svc.get(later).meta.supersedes == [keep]  # re-pointed
    assert result.repointed == [later]
    assert [r.older for r in svc.supersedes_chain(later) if r.newer == later] == [keep]
    gone = svc.get(drop)
    assert gone.meta.decay_state is DecayState.FORGOTTEN
    assert gone.path is not None
    assert gone.path.parent.name == "forgotten"
    assert gone.meta.model_extra == {"merged_into": keep}
    assert gone.meta.observations == []
    assert drop not in [h.slug for h in svc.search("Redis cache", include_forgotten=False)]
    # the kept memory now mentions Redis: recall finds it through the entity
    assert keep in [h.slug for h in svc.recall("Redis", scope=project, track=False).hits]
    assert result.promotions_merged == [waiting]
    assert promotion_status(svc, waiting) == "merged"
    assert promotion_status(svc, other) == "pending"
    events = svc.audit_records(event_type="merge")
    assert [(e.target_id, json.loads(e.details)["dropped"]) for e in events] == [(keep, [drop])]
    assert svc.audit_verify().ok
    # reindex rebuilds the same: files are the truth
    before = svc.graph.snapshot()
    svc.reindex()
    assert svc.graph.snapshot() == before


def test_merge_bad_input(svc: MemoryService, project: Path, other_project: Path) -> None:
    a = rec(svc, project, "Alpha", "Alpha notes on caching.")
    b = rec(svc, project, "Beta", "Beta notes on queues.")
    c = rec(svc, other_project, "Gamma", "Gamma notes on logging.")
    with pytest.raises(NotFound):
        svc.merge(a, ["no-such-slug"])
    with pytest.raises(InvalidInput, match="both kept and dropped"):
        svc.merge(a, [a])
    with pytest.raises(InvalidInput, match="--across-scopes"):
        svc.merge(a, [c])
    svc.merge(a, [c], across_scopes=True)
    with pytest.raises(Conflict, match="forgotten"):
        svc.merge(a, [c])  # merged already
    assert svc.get(b).meta.decay_state is DecayState.ALIVE


def test_shingles_and_threshold() -> None:
    a = shingles("We moved the nightly backup job from cron to systemd timers last week")
    b = shingles("We moved the nightly backup job from cron to systemd timers last week.")
    c = shingles("The frontend build now uses vite instead of webpack for faster reloads")
    assert jaccard(a, b) == 1.0
    assert jaccard(a, c) < 0.1
    zh1 = shingles("我们决定把数据库从MySQL迁移到PostgreSQL因为需要更好的JSON支持")
    zh2 = shingles("我们决定把数据库从MySQL迁移到PostgreSQL因为需要更好的JSON支持。")
    assert jaccard(zh1, zh2) >= NEAR_DUPLICATE_JACCARD


def test_duplicates_lists_equal_and_near_pairs(
    settings: Settings, home: Path, project: Path
) -> None:
    text = (
        "We investigated why the payment webhook retried three times; the handler timed out"
        " on the fraud check, so we moved the check to a background job and return 202."
        " The job retries with exponential backoff and writes the verdict to the orders table;"
        " support sees it on the order page. We added an alert when the queue is older than"
        " five minutes and a dashboard panel for the fraud service latency."
    )
    with open_service(settings) as svc:
        t0 = datetime(2026, 5, 1, tzinfo=UTC)  # the older of a pair is the one to keep
        first = rec(svc, project, "Webhook retries", text, created_at=t0)
        same = rec(
            svc,
            project,
            "Webhook retries again",
            text,
            allow_duplicate=True,
            created_at=t0 + timedelta(minutes=1),
        )
        near = rec(
            svc,
            project,
            "Webhook retry fix",
            text + " Deployed on Friday.",
            created_at=t0 + timedelta(minutes=2),
        )
        rec(svc, project, "Unrelated", "The docs site moved to mkdocs material theme.")
        pairs = svc.duplicates()
    found = {(p.keep, p.drop, p.kind) for p in pairs}
    assert (first, same, "fingerprint") in found
    assert (first, near, "near") in found
    assert len(pairs) == 3  # same ~ near too, nothing with the unrelated memory
    runner = CliRunner()
    listed = runner.invoke(app, ["duplicates", "--json", "--home", str(home)])
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == 3
    merged = runner.invoke(
        app, ["merge", "--keep", first, "--drop", same, near, "--home", str(home), "--json"]
    )
    assert merged.exit_code == 0, merged.output
    assert json.loads(merged.stdout)["dropped"] == [same, near]
    again = runner.invoke(app, ["duplicates", "--home", str(home)])
    assert "no duplicates" in again.stdout
    missing = runner.invoke(app, ["merge", "--keep", first, "--drop", "nope", "--home", str(home)])
    assert missing.exit_code == 3
