"""governance.db against real SQLite files: migrations, versions, corruption, trigger stats."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.errors import ResourceExhausted, StorageError
from memoryd.governance import GLOBAL_SCOPE, LATEST_VERSION, GovernanceStore, TriggerStat
from memoryd.governance.store.schema import Migration, _migrate, migrations, split_statements
from memoryd.models import Dura, MemoryType, PromotionProposal

TABLES = {
    "audit_witness",
    "schedule_runs",
    "promotions",
    "trigger_stats",
    "profile_versions",
    "profile_change_reports",
    "enrichment",
    "judge_queue",
}


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    conn.close()
    return {row[0] for row in rows}


def _columns(path: Path, table: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "governance.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[GovernanceStore]:
    opened = GovernanceStore.open(db_path)
    yield opened
    opened.close()


# -- migrations -------------------------------------------------------------------------------


def test_migrations_ship_as_package_data_numbered_1_to_latest() -> None:
    shipped = migrations()

    assert [m.version for m in shipped] == list(range(1, LATEST_VERSION + 1))
    assert [m.name for m in shipped] == [
        "001_promotions.sql",
        "002_trigger_stats.sql",
        "003_profile_versions.sql",
        "004_profile_change_reports.sql",
        "005_enrichment.sql",
        "006_promotion_review.sql",
        "007_schedule_runs.sql",
        "008_profile.sql",
        "009_judge_queue.sql",
        "010_audit_witness.sql",
    ]
    assert GovernanceStore.LATEST_VERSION == LATEST_VERSION == 10


def test_open_creates_all_tables_with_the_seed_columns(
    store: GovernanceStore, db_path: Path
) -> None:
    assert store.schema_version() == LATEST_VERSION
    assert _tables(db_path) == TABLES
    assert _columns(db_path, "promotions") == [
        "id",
        "source_session_slug",
        "proposed_type",
        "proposed_title",
        "proposed_body",
        "proposed_triggers",
        "dura_score",
        "reasoning",
        "proposed_supersedes",
        "scope_hash",
        "status",
        "created_at",
        "decided_at",
        "source_title",
        "source_fingerprint",
        "evidence",
        "decided_by",
        "decision_reason",
        "promoted_slug",
        "source_missing_at",
    ]
    assert _columns(db_path, "trigger_stats") == ["trigger", "scope_hash", "day", "hits"]
    assert _columns(db_path, "profile_versions") == [
        "id",
        "version_num",
        "written_at",
        "trigger",
        "content_md",
        "diff_from_prev",
        "change_summary",
        "sources_count",
        "sources_window_start",
        "sources_window_end",
        "written_by",
        "sources",
        "entities",
    ]
    assert _columns(db_path, "profile_change_reports") == [
        "id",
        "period",
        "generated_at",
        "content_md",
        "versions_count",
        "supersedes_count",
        "entities_added",
        "entities_dropped",
    ]
    assert store.integrity_check() == []


def test_promotions_take_a_session_slug_without_a_memories_table(
    store: GovernanceStore, db_path: Path
) -> None:
    store.close()
    conn = sqlite3.connect(db_path)
    try:
        conn.execute(
            "INSERT INTO promotions (source_session_slug, proposed_type, proposed_title, "
            "proposed_body, proposed_triggers, dura_score, scope_hash, created_at) "
            "VALUES ('2026-05-18-a1b2', 'decision', 't', 'b', '[]', '{}', 'd8e86b48589e', "
            "'2026-05-18T22:30:12Z')"
        )
        row = conn.execute("SELECT status, proposed_supersedes FROM promotions").fetchone()
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE promotions SET status = 'maybe'")
    finally:
        conn.close()
    assert row == ("pending", "[]")


def test_the_database_is_in_wal_mode(store: GovernanceStore, db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_reopening_is_idempotent_and_keeps_data(db_path: Path) -> None:
    with GovernanceStore.open(db_path) as first:
        first.record_trigger_hits(["react"], "d8e86b48589e", date(2026, 5, 18))

    with GovernanceStore.open(db_path) as second:
        assert second.schema_version() == LATEST_VERSION
        assert second.trigger_stats() == [
            TriggerStat(trigger="react", scope_hash="d8e86b48589e", day=date(2026, 5, 18), hits=1)
        ]
    assert _tables(db_path) == TABLES


def test_an_older_database_is_brought_up_to_date(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path, isolation_level=None)
    _migrate(conn, db_path, migrations()[:2])
    conn.close()
    assert _tables(db_path) == {"promotions", "trigger_stats"}

    with GovernanceStore.open(db_path) as store:
        assert store.schema_version() == LATEST_VERSION
    assert _tables(db_path) == TABLES


def test_a_failing_migration_leaves_the_previous_schema_intact(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    conn = sqlite3.connect(path, isolation_level=None)
    steps = (
        Migration(1, "001_ok.sql", "CREATE TABLE a (x INTEGER);"),
        Migration(2, "002_bad.sql", "CREATE TABLE b (x INTEGER);\nINSERT INTO nowhere VALUES (1);"),
    )
    try:
        with pytest.raises(StorageError, match=r"migration 002_bad.sql failed .*nowhere"):
            _migrate(conn, path, steps)
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert names == {"a"}
        assert not conn.in_transaction
    finally:
        conn.close()


def test_a_newer_database_is_refused(db_path: Path) -> None:
    GovernanceStore.open(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    conn.close()

    with pytest.raises(StorageError, match="upgrade memoryd") as caught:
        GovernanceStore.open(db_path)

    assert str(caught.value) == (
        f"{db_path} is at schema {LATEST_VERSION + 1} but this memoryd knows"
        f" {LATEST_VERSION}: upgrade memoryd"
    )


@pytest.mark.parametrize(
    "content",
    [
        b"this is not a database, it is a shopping list\n" * 100,
        b"SQLite format 3\x00" + b"\xff" * 4000,
    ],
    ids=["text", "mangled-header"],
)
def test_a_corrupt_file_is_a_storage_error_naming_it(db_path: Path, content: bytes) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(content)

    with pytest.raises(StorageError, match="corrupt or not a SQLite database") as caught:
        GovernanceStore.open(db_path)

    assert str(db_path) in str(caught.value)
    assert "move it away" in caught.value.hint


def test_a_truncated_database_is_a_storage_error(db_path: Path) -> None:
    with GovernanceStore.open(db_path) as store:
        for i in range(400):
            store.record_trigger_hits([f"trigger-{i}-" + "x" * 200], None, date(2026, 5, 1))
    data = db_path.read_bytes()
    db_path.write_bytes(data[: len(data) // 2])

    with pytest.raises(StorageError, match="corrupt") as caught:
        GovernanceStore.open(db_path)

    assert str(db_path) in str(caught.value)


def test_an_unusable_location_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")

    with pytest.raises(StorageError, match="file"):
        GovernanceStore.open(tmp_path / "file" / "governance.db")


def test_split_statements_keeps_triggers_whole() -> None:
    sql = (
        "-- a comment\nCREATE TABLE t (x TEXT); -- trailing\n"
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN\n  UPDATE t SET x = 'a;b';\nEND;\n-- end\n"
    )

    statements = split_statements(sql)

    assert len(statements) == 2
    assert statements[1].startswith("CREATE TRIGGER")
    assert statements[1].endswith("END;")
    with pytest.raises(StorageError, match="incomplete"):
        split_statements("CREATE TABLE t (x TEXT)")


# -- trigger stats ----------------------------------------------------------------------------


def test_trigger_hits_aggregate_per_trigger_scope_and_day(store: GovernanceStore) -> None:
    may1, may2, may3 = date(2026, 5, 1), date(2026, 5, 2), date(2026, 5, 3)
    store.record_trigger_hits(["前端切换", "性能"], "d8e86b48589e", may1)
    store.record_trigger_hits(["前端切换"], "d8e86b48589e", may1)
    store.record_trigger_hits(["前端切换", " ", ""], "d8e86b48589e", may2)
    store.record_trigger_hits(["性能", "性能"], None, may2)
    store.record_trigger_hits(["react"], "aaaaaaaaaaaa", may3)
    store.record_trigger_hits([], None, may3)

    def stat(trigger: str, scope: str, day: date, hits: int) -> TriggerStat:
        return TriggerStat(trigger=trigger, scope_hash=scope, day=day, hits=hits)

    assert store.trigger_stats() == [
        stat("前端切换", "d8e86b48589e", may1, 2),
        stat("性能", "d8e86b48589e", may1, 1),
        stat("性能", GLOBAL_SCOPE, may2, 2),
        stat("前端切换", "d8e86b48589e", may2, 1),
        stat("react", "aaaaaaaaaaaa", may3, 1),
    ]
    assert store.trigger_stats(since=may2) == [
        stat("性能", GLOBAL_SCOPE, may2, 2),
        stat("前端切换", "d8e86b48589e", may2, 1),
        stat("react", "aaaaaaaaaaaa", may3, 1),
    ]
    assert store.trigger_stats(scope_hash="d8e86b48589e", since=may2) == [
        stat("前端切换", "d8e86b48589e", may2, 1),
    ]
    assert store.trigger_stats(scope_hash=GLOBAL_SCOPE) == [stat("性能", GLOBAL_SCOPE, may2, 2)]


def test_a_datetime_counts_on_its_utc_day(store: GovernanceStore) -> None:
    store.record_trigger_hits(["late"], None, datetime(2026, 5, 1, 23, 30, tzinfo=UTC))

    assert [s.day for s in store.trigger_stats()] == [date(2026, 5, 1)]


def test_concurrent_hits_from_threads_are_all_counted(store: GovernanceStore) -> None:
    def work() -> None:
        for _ in range(25):
            store.record_trigger_hits(["shared", "other"], None, date(2026, 5, 1))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert {(s.trigger, s.hits) for s in store.trigger_stats()} == {("shared", 200), ("other", 200)}


def test_a_closed_store_says_so(db_path: Path) -> None:
    store = GovernanceStore.open(db_path)
    store.close()
    store.close()

    with pytest.raises(StorageError, match="closed"):
        store.trigger_stats()


def test_a_full_disk_is_resource_exhausted_and_nothing_is_half_written(
    store: GovernanceStore,
) -> None:
    store.record_trigger_hits(["kept"], None, date(2026, 5, 1))
    with store._connection("limit") as conn:  # SQLite's own cap stands in for a full disk
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    with pytest.raises(ResourceExhausted, match="disk is full"):
        store.record_trigger_hits(
            [f"t{i}-" + "x" * 500 for i in range(200)], None, date(2026, 5, 1)
        )

    assert [s.trigger for s in store.trigger_stats()] == ["kept"]


# -- the enrichment queue ---------------------------------------------------------------------


def test_the_enrichment_queue_enriches_each_content_once(store: GovernanceStore) -> None:
    t0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    later = datetime(2026, 5, 1, 12, 5, tzinfo=UTC)

    assert store.enqueue_enrichment("s-1", "fp-a", t0) == "new"
    assert store.enqueue_enrichment("s-2", "fp-x", later) == "new"
    assert store.enqueue_enrichment("s-1", "fp-a", later) == "same"
    assert [r.slug for r in store.due_enrichments(later, 10)] == ["s-1", "s-2"]
    assert store.due_enrichments(t0, 10)[0].enqueued_at == t0

    # A failed attempt waits; a row about other content is not overwritten.
    assert store.record_enrichment(
        "s-1",
        "fp-a",
        state="pending",
        rules_done=True,
        attempts=1,
        last_error="rate_limited: slow down",
        next_attempt_at=datetime(2026, 5, 1, 13, 0, tzinfo=UTC),
        now=later,
    )
    assert [r.slug for r in store.due_enrichments(later, 10)] == ["s-2"]
    assert store.due_enrichments(later, 10, rules_only=True)[0].slug == "s-2"
    assert not store.record_enrichment(
        "s-2", "fp-old", state="done", rules_done=True, attempts=0, last_error=None,
        next_attempt_at=later, now=later,
    )  # fmt: skip
    row = store.enrichment("s-1")
    assert row is not None
    assert (row.state, row.attempts, row.rules_done, row.last_error) == (
        "pending",
        1,
        True,
        "rate_limited: slow down",
    )

    # New content starts over.
    assert store.enqueue_enrichment("s-1", "fp-b", later) == "changed"
    row = store.enrichment("s-1")
    assert row is not None
    assert (row.fingerprint, row.attempts, row.rules_done, row.last_error) == (
        "fp-b",
        0,
        False,
        None,
    )
    assert store.enrichment_counts() == {"pending": 2, "done": 0, "failed": 0}
    assert store.enrichment("nope") is None


def test_job_runs_and_merged_promotions(store: GovernanceStore, db_path: Path) -> None:
    first = datetime(2026, 3, 1, 3, 0, tzinfo=UTC)
    store.record_run("decay-sweep", first, first + timedelta(seconds=2), "ok")
    later = first + timedelta(days=1)
    store.record_run("decay-sweep", later, later + timedelta(seconds=1), "error: disk full")
    assert store.last_runs() == {
        "decay-sweep": (later, later + timedelta(seconds=1), "error: disk full")
    }
    ids = {}
    for source in ("a", "b", "c"):
        proposal = PromotionProposal(
            source_slug=source,
            source_title="t",
            source_fingerprint="f",
            scope_hash="abcdefabcdef",
            proposed_type=MemoryType.FACT,
            proposed_title="t",
            proposed_body="b",
            dura=Dura(D=0.9, U=0.9, R=0.9, A=0.9, by="heuristic-v1"),
        )
        ids[source] = store.propose_promotion(proposal, first)[0]
    store.decide_promotion(ids["c"], "rejected", by="cli", now=first)
    assert store.merge_promotions(["c"], later, into="k", by="cli") == []  # decided already
    assert store.merge_promotions(["a"], later, into="k", by="cli") == [ids["a"]]
    assert store.merge_promotions(["a"], later, into="k", by="cli") == []
    assert store.merge_promotions([], later, into="k", by="cli") == []
    merged = store.promotion(ids["a"])
    assert merged is not None
    assert store.promotion(ids["b"]).status == "pending"  # type: ignore[union-attr]
    assert (merged.status, merged.decided_by, merged.decision_reason) == (
        "merged",
        "cli",
        "merged into k",
    )
