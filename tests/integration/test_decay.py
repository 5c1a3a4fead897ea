"""The decay state machine over real stores, through 400 simulated days: every transition on
its day, revival by a recall or a get (not a search listing), forgetting into `forgotten/`,
restore, idempotence, a crash mid-sweep, and the CLI."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

import memoryd.domain.core as core_module
import memoryd.governance.decay as decay_module
import memoryd.governance.renames as renames_module
from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.errors import Conflict, NotFound, StorageError
from memoryd.governance.decay import DecayPolicy, DecaySweep, decay_moves, next_state
from memoryd.memfile import lock_stripe, memory_lock
from memoryd.models import DecayState, Memory, MemoryDraft, MemoryType
from memoryd.search.overlay import OVERLAY_FILE
from memoryd.service import MemoryService
from memoryd.vault import parse
from memoryd.wiring import open_service

T0 = datetime(2026, 1, 1, tzinfo=UTC)
A, D, S, F = (
    DecayState.ALIVE,
    DecayState.DIM,
    DecayState.SOFT_FORGOTTEN,
    DecayState.FORGOTTEN,
)


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def rec(svc: MemoryService, project: Path, title: str, body: str, **kw: object) -> str:
    draft = MemoryDraft.model_validate(
        {
            "type": kw.pop("type", "session"),
            "title": title,
            "body": body,
            "scope_path": project,
            "created_at": kw.pop("created_at", T0),
            **kw,
        }
    )
    return svc.record(draft).slug


def state_of(svc: MemoryService, slug: str) -> DecayState:
    """The state as the vault file says; the graph and the index must agree."""
    memory = svc.get(slug)
    row = svc.graph.get_memory(slug)
    if memory.meta.decay_state is F and memory.meta.forgotten_at is not None:
        assert row is None
        assert slug not in svc.index.slugs()
        assert memory.path is not None
        assert memory.path.parent.name == "forgotten"
    else:
        assert row is not None
        assert row.decay_state is memory.meta.decay_state
        assert svc.index.stored([slug])[slug].decay_state is memory.meta.decay_state
        assert memory.path is not None
        assert memory.path.parent.name == memory.meta.type.dir_name
    return memory.meta.decay_state


def test_policy_and_state_machine() -> None:
    policy = DecayPolicy()
    sess = MemoryType.SESSION
    assert next_state(sess, 90, A, T0, day(89), policy) is None
    assert next_state(sess, 90, A, T0, day(90), policy) is D
    assert next_state(sess, 90, A, T0, day(150), policy) is S  # a late sweep jumps ahead
    assert next_state(sess, 90, D, T0, day(210), policy) is F
    assert next_state(sess, 90, S, T0, day(10), policy) is None  # never backwards
    assert next_state(sess, None, A, T0, day(90), DecayPolicy(dim_days=5)) is S
    for long_term in (t for t in MemoryType if t.long_term):
        assert next_state(long_term, 1, A, T0, day(4000), policy) is None


def test_four_hundred_days(svc: MemoryService, project: Path) -> None:
    plain = rec(svc, project, "Plain session", "We tuned the flaky checkout retry loop.")
    quick = rec(svc, project, "Quick session", "Short lived scratch notes on vite.", ttl_days=10)
    kept = rec(svc, project, "Use Postgres", "We decided on Postgres for jobs.", type="decision")
    read = rec(svc, project, "Read session", "Investigated the gunicorn worker timeout.")
    called = rec(svc, project, "Recalled session", "Kafka consumer lag grew after deploys.")
    back = rec(svc, project, "Restored session", "Migrated the nightly cron to systemd timers.")
    expected: dict[str, dict[int, DecayState]] = {
        plain: {90: D, 120: S, 210: F},
        quick: {10: D, 40: S, 130: F},
        kept: {},
        read: {90: D, 100: A, 190: D, 220: S, 310: F},  # a get on day 100 revives it
        called: {90: D, 120: S, 125: A, 215: D, 245: S, 335: F},  # recalled on day 125, hidden
        back: {90: D, 120: S, 210: F, 250: A, 340: D, 370: S},  # restored on day 250
    }
    current = {slug: A for slug in expected}
    seen: dict[str, dict[int, DecayState]] = {slug: {} for slug in expected}
    swept = 0
    for n in range(401):
        svc.clock = lambda n=n: day(n)  # type: ignore[misc]
        if n == 95:  # a search that lists a dim memory does not revive it
            assert plain in [h.slug for h in svc.search("flaky checkout retry")]
        if n == 100:
            svc.get(read)
            svc.count_read(read)
        if n == 125:
            assert svc.recall("kafka consumer lag", scope=project).hits == []  # hidden
            assert svc.search("kafka consumer lag") == []
            hits = svc.recall("kafka consumer lag", scope=project, include_forgotten=True, k=1).hits
            assert [h.slug for h in hits] == [called]
        if n == 250:
            assert svc.restore(back).from_state is F
        report = svc.sweep_at(day(n))
        swept += len(report.moved)
        for move in report.moved:
            assert move.from_state is current[move.slug]
            current[move.slug] = move.to_state
            seen[move.slug][n] = move.to_state
        rows = svc.graph.memory_rows(list(current))
        for slug, state in current.items():
            row = rows.get(slug)
            now_state = F if row is None else row.decay_state
            if report.moved or n % 25 == 0:
                assert state_of(svc, slug) is now_state  # file, graph and index agree
            if state is not now_state:
                # revived by a get, a recall or restore: not the sweep's doing
                current[slug] = now_state
                seen[slug][n] = now_state
        assert svc.sweep_at(day(n)).moved == []  # idempotent
        assert report.skipped == {}
    assert seen == expected
    # every sweep move is in the audit log, and the forgotten memories' files are where it says
    decays = [
        m for r in svc.audit_records(event_type="decay") for m in json.loads(r.details)["moves"]
    ]
    assert len(decays) == swept
    assert {to for _, _, to, _ in decays} == {"dim", "soft-forgotten", "forgotten"}
    restores = svc.audit_records(event_type="restore")
    assert [(r.target_id, json.loads(r.details)["from"]) for r in restores] == [(back, "forgotten")]
    # reindex rebuilds what the sweep left: the forgotten stay out, the rest keep their states
    before = {slug: state_of(svc, slug) for slug in expected}
    svc.reindex()
    assert {slug: state_of(svc, slug) for slug in expected} == before
    only_vault, only_graph, index_diff = svc.consistency()
    assert (only_vault, only_graph, index_diff) == (set(), set(), set())
    assert svc.audit_verify().ok


def test_restore_errors(svc: MemoryService, project: Path) -> None:
    slug = rec(svc, project, "Alive session", "Profiling the import path of the cli.")
    with pytest.raises(NotFound):
        svc.restore("no-such-memory")
    with pytest.raises(Conflict, match="alive"):
        svc.restore(slug)


def test_a_sweep_writes_no_memory_file_and_reindex_reproduces_its_states(
    svc: MemoryService, project: Path
) -> None:
    """Dim and soft-forgotten are lines in the scope's decay ledger, forgotten a plain rename
    into forgotten/: no memory file is rewritten, and a reindex from the vault alone gives
    every memory the state the sweep left it in."""
    ages = {"dim": 100, "soft": 130, "gone": 300}
    slugs = {
        name: rec(
            svc,
            project,
            f"Session {name}",
            f"Notes {name} on the haproxy config.",
            created_at=day(0) - timedelta(days=age),
        )
        for name, age in ages.items()
    }
    paths = {name: svc.vault.find(slug) for name, slug in slugs.items()}
    before = {name: path.read_bytes() for name, path in paths.items() if path is not None}
    report = svc.sweep_at(day(0))
    assert {m.slug: m.to_state for m in report.moved} == {
        slugs["dim"]: D,
        slugs["soft"]: S,
        slugs["gone"]: F,
    }
    for name in ("dim", "soft"):
        assert paths[name] == svc.vault.find(slugs[name])
        assert svc.vault.find(slugs[name]).read_bytes() == before[name]  # type: ignore[union-attr]
    ledger = svc.vault.decay_ledger_path(svc.get(slugs["dim"]).meta.scope_hash)
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert {line["slug"]: line["to"] for line in lines} == {
        slugs["dim"]: "dim",
        slugs["soft"]: "soft-forgotten",
        slugs["gone"]: "forgotten",
    }
    gone = svc.vault.find(slugs["gone"])
    assert gone is not None
    assert gone.parent.name == "forgotten"
    assert gone.read_bytes() == before["gone"]  # renamed, not rewritten
    states = {name: state_of(svc, slug) for name, slug in slugs.items()}
    assert states == {"dim": D, "soft": S, "gone": F}
    svc.reindex()
    assert {name: state_of(svc, slug) for name, slug in slugs.items()} == states
    assert svc.audit_verify().ok


def test_the_swept_states_hold_after_a_restart_and_after_a_lost_overlay(
    settings: Settings, project: Path
) -> None:
    """The index keeps a sweep's states beside its documents (`search.overlay`): a restart
    reads them back, and an overlay file found broken makes the index rebuild from the
    vault, which holds the same states."""
    with open_service(settings) as svc:
        soft, dim = (
            rec(svc, project, title, body, created_at=day(0) - timedelta(days=idle))
            for title, body, idle in (
                ("Haproxy notes", "The haproxy reload", 130),
                ("Haproxy dim", "The haproxy timeout", 100),
            )
        )
        svc.sweep_at(day(0))
        assert [hit.slug for hit in svc.search("haproxy")] == [dim]
        overlay = svc.index.directory / OVERLAY_FILE
        assert json.loads(overlay.read_text())["states"] == {soft: S.value, dim: D.value}
    with open_service(settings) as svc:
        assert [hit.slug for hit in svc.search("haproxy")] == [dim]
        assert state_of(svc, soft) is S
        assert state_of(svc, dim) is D
    overlay.write_text("{broken")
    with open_service(settings) as svc:
        assert [hit.slug for hit in svc.search("haproxy")] == [dim]
        assert state_of(svc, soft) is S
        assert state_of(svc, dim) is D
        assert not overlay.exists()  # rebuilt: the documents hold the states themselves


def test_a_recall_after_the_sweep_revives_without_touching_the_ledger(
    svc: MemoryService, project: Path
) -> None:
    """A ledger line holds while the file's last_recalled_at is the one it was decided on:
    a get writes a new one, so the memory is alive again, and stays so after a reindex."""
    slug = rec(svc, project, "Dim session", "Tuned the pgbouncer pool sizes.")
    assert [m.to_state for m in svc.sweep_at(day(95)).moved] == [D]
    ledger = svc.vault.decay_ledger_path(svc.get(slug).meta.scope_hash)
    lines = ledger.read_bytes()
    svc.clock = lambda: day(96)
    svc.count_read(slug)
    assert state_of(svc, slug) is A
    assert ledger.read_bytes() == lines
    svc.reindex()
    assert state_of(svc, slug) is A
    assert [m.to_state for m in svc.sweep_at(day(96 + 95)).moved] == [D]
    assert state_of(svc, slug) is D


def test_audit_verify_names_a_decay_move_the_log_lost(svc: MemoryService, project: Path) -> None:
    """The ledger and the log are tied: a ledger line no decay event names fails verify."""
    slug = rec(svc, project, "Dim session", "Tuned the pgbouncer pool sizes.")
    other = rec(svc, project, "Another", "Wrote the grafana alert rules.", created_at=day(50))
    svc.sweep_at(day(95))
    scope_hash = svc.get(slug).meta.scope_hash
    ledger = svc.vault.decay_ledger_path(scope_hash)
    forged = ledger.read_text().replace(slug, other)  # a move no sweep made, or logged
    ledger.write_text(ledger.read_text() + forged)
    verified = svc.audit_verify()
    assert not verified.ok
    assert verified.problem is not None
    assert "no decay event" in verified.problem
    assert verified.missing == [other]


def test_dry_run_changes_nothing(svc: MemoryService, project: Path) -> None:
    slug = rec(svc, project, "Dry session", "We looked at the grafana dashboards.")
    path = svc.get(slug).path
    assert path is not None
    before = path.read_bytes()
    report = svc.sweep_at(day(300), dry_run=True)
    assert [(m.slug, m.from_state, m.to_state) for m in report.moved] == [(slug, A, F)]
    assert path.read_bytes() == before
    assert svc.audit_records(event_type="decay") == []


def test_crash_mid_sweep_is_settled_on_open(settings: Settings, project: Path) -> None:
    """The files of a batch landed, the graph never heard: the next open rolls forward."""
    with open_service(settings) as svc:
        dims = rec(svc, project, "Dim soon", "The nginx reload dropped websocket connections.")
        gone = rec(svc, project, "Forgotten soon", "Old notes about the jenkins agents.")
        svc.vault.write(_aged(svc, gone))
        svc.reindex()
        sweep = svc.governance_stores()

        class Boom(Exception):
            pass

        def fail(*args: object) -> None:
            raise Boom

        svc.graph.set_decay_states = fail  # type: ignore[method-assign,assignment]
        with pytest.raises(Boom):
            DecaySweep(sweep, svc.decay_policy).run(day(100))
        assert svc.graph.get_memory(dims).decay_state is A  # type: ignore[union-attr]
    with open_service(settings) as svc:
        assert state_of(svc, dims) is D
        assert state_of(svc, gone) is F
        assert svc.audit_verify().ok
        assert {slug for slug, _ in decay_moves(svc.audit_records(event_type="decay"))} == {
            dims,
            gone,
        }


def _aged(svc: MemoryService, slug: str) -> Memory:
    memory = svc.get(slug)
    memory.meta.created_at = T0 - timedelta(days=200)
    return memory


def test_cli_decay_sweep_and_restore(home: Path, project: Path, settings: Settings) -> None:
    with open_service(settings) as svc:
        slug = rec(svc, project, "Ancient session", "Debugged the celery beat schedule.")
        path = svc.get(slug).path
        assert path is not None
    runner = CliRunner()
    dry = runner.invoke(app, ["decay-sweep", "--dry-run", "--json", "--home", str(home)])
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert [(m["slug"], m["to_state"]) for m in report["moved"]] == [(slug, "forgotten")]
    done = runner.invoke(app, ["decay-sweep", "--home", str(home)])
    assert done.exit_code == 0, done.output
    assert "forgotten 1" in done.stdout
    assert not path.exists()
    again = runner.invoke(app, ["decay-sweep", "--home", str(home)])
    assert "nothing to move" in again.stdout
    shown = runner.invoke(app, ["get", slug, "--json", "--home", str(home)])
    assert json.loads(shown.stdout)["meta"]["decay_state"] == "forgotten"
    restored = runner.invoke(app, ["restore", slug, "--home", str(home)])
    assert restored.exit_code == 0, restored.output
    assert path.exists()
    assert parse(path.read_text(), path).meta.decay_state is A
    assert runner.invoke(app, ["restore", slug, "--home", str(home)]).exit_code == 4
    assert runner.invoke(app, ["restore", "nope", "--home", str(home)]).exit_code == 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_an_mcp_get_revives(svc: MemoryService, project: Path) -> None:
    from mcp import Client

    from memoryd.mcp.server import create_server

    slug = rec(svc, project, "Dim by now", "We pinned the terraform aws provider version.")
    svc.clock = lambda: day(100)
    assert [m.to_state for m in svc.sweep_at(day(100)).moved] == [D]
    async with Client(create_server(svc), raise_exceptions=True) as client:
        got = await client.call_tool("get_memory", {"slug": slug})
        assert not got.is_error
    assert state_of(svc, slug) is A  # file, graph and index at once
    assert svc.get(slug).meta.last_recalled_at == day(100)


def test_an_http_get_revives_and_the_routes_answer(svc: MemoryService, project: Path) -> None:
    import time

    from fastapi.testclient import TestClient

    from memoryd.api.app import create_app
    from memoryd.api.runner import ServiceRunner
    from memoryd.api.security import LocalOnly

    slug = rec(svc, project, "Dim soon too", "The staging database restores nightly.")
    svc.clock = lambda: day(100)
    runner = ServiceRunner()
    try:
        with TestClient(LocalOnly(create_app(svc, runner)), base_url="http://localhost") as http:
            dry = http.post("/v1/decay/sweep", json={"dry_run": True}).json()
            assert [m["to_state"] for m in dry["moved"]] == ["dim"]
            assert dry["counts_by_state"]["dim"] == 1
            assert http.post("/v1/decay/sweep", json={}).json()["moved"][0]["slug"] == slug
            assert http.get(f"/v1/memories/{slug}").status_code == 200
            deadline = time.monotonic() + 10
            while svc.graph.get_memory(slug).decay_state is not A:  # type: ignore[union-attr]
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert http.post("/v1/memories/nope/restore").status_code == 404
            assert http.post(f"/v1/memories/{slug}/restore").status_code == 409
            schedule = http.get("/v1/schedule").json()
            assert schedule[0]["name"] == "decay-sweep"
            assert http.get("/v1/duplicates").json() == []
    finally:
        runner.close()


def test_a_resumed_forgotten_session_is_restored_by_its_capture(
    home: Path, project: Path, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.integration.test_capture import capture
    from tests.integration.test_capture_hook import grown_transcript

    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "30000")
    transcript = grown_transcript(tmp_path, project, "sess-old")
    capture(home, "claude-code", transcript.payload("Stop"))
    slug = "session-claude-code-sess-old"
    with open_service(settings) as svc:
        svc.drain_inbox()
        later = svc.get(slug).meta.created_at + timedelta(days=400)
        assert [m.to_state for m in svc.sweep_at(later).moved] == [F]
        assert svc.search("importer") == []
    transcript.prompt("Back after a year: also accept RFC 2822 dates in the importer changelog.")
    capture(home, "claude-code", transcript.payload("Stop"))  # the hook writes in forgotten/
    assert [p.stem for p in home.glob("scopes/*/forgotten/*.md")] == [slug]
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        assert state_of(svc, slug) is A
        assert [h.slug for h in svc.search("RFC 2822 changelog")] == [slug]
        assert [r.target_id for r in svc.audit_records(event_type="restore")] == [slug]
        assert svc.audit_verify().ok


def test_a_dim_memory_ranks_demoted_and_a_reindex_keeps_it_so(
    svc: MemoryService, project: Path
) -> None:
    """The sweep's index write (`SearchIndex.set_decay_states`) carries the dim state recall
    demotes by: of two memories alike but for their ttl, the dim one ranks second with its
    `dim` factor shown, before and after a reindex."""
    body = "We tuned the flaky checkout retry loop with jittered backoff."
    fading = rec(svc, project, "Checkout retry loop", body, ttl_days=10)
    lasting = rec(svc, project, "Checkout retry loop", body + " ", allow_duplicate=True)
    assert [m.slug for m in svc.sweep_at(day(11)).moved] == [fading]

    def ranked() -> list[tuple[str, float | None]]:
        hits = svc.recall("flaky checkout retry loop", scope=project, track=False).hits
        return [(h.slug, h.factors.get("dim")) for h in hits]

    assert ranked() == [(lasting, None), (fading, 0.9)]
    svc.reindex()
    assert ranked() == [(lasting, None), (fading, 0.9)]


def _forgettable(svc: MemoryService, project: Path, count: int) -> list[str]:
    return [
        rec(
            svc,
            project,
            f"Old session {i}",
            f"Notes {i} on the varnish purge queue.",
            created_at=day(0) - timedelta(days=300 + i),
        )
        for i in range(count)
    ]


@pytest.fixture(params=["in process", "renamer process"])
def renamer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the forgotten files renamed in the sweep's process, and by the child
    renamer (`governance.renamer`), as a sweep that forgets thousands does."""
    if request.param == "renamer process":
        monkeypatch.setattr(renames_module, "CHILD_RENAMES", 1)
    return str(request.param)


def test_a_file_held_locked_during_the_sweep_stays_and_the_next_sweep_forgets_it(
    svc: MemoryService, project: Path, renamer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture hook holds one memory's lock through the sweep: the files of that lock
    stripe stay where they are, alive in graph, index and file alike, the rest are
    forgotten; the next sweep, the lock released, forgets them too."""
    monkeypatch.setattr(core_module, "FILE_LOCK_TIMEOUT_S", 0.3)
    slugs = _forgettable(svc, project, 12)
    held = slugs[0]
    stripe = lock_stripe(held)
    with memory_lock(svc.home, held):
        report = svc.sweep_at(day(0))
    stuck = {slug for slug in slugs if lock_stripe(slug) == stripe}
    assert set(report.skipped) == stuck
    assert all("locked" in reason for reason in report.skipped.values())
    assert {m.slug for m in report.moved} == set(slugs) - stuck
    for slug in slugs:
        assert state_of(svc, slug) is (A if slug in stuck else F)
    assert held in [hit.slug for hit in svc.search("varnish purge", k=20)]
    assert svc.consistency() == (set(), set(), set())
    # Their ledger lines were written: the decay event names them as skipped, and why.
    events = [json.loads(r.details) for r in svc.audit_records(event_type="decay")]
    assert {s[0] for e in events for s in e.get("skipped", [])} == stuck
    assert svc.audit_verify().ok
    again = svc.sweep_at(day(0))
    assert {m.slug for m in again.moved} == stuck
    assert again.skipped == {}
    assert all(state_of(svc, slug) is F for slug in slugs)


def test_a_file_deleted_during_the_sweep_is_skipped_and_named(
    svc: MemoryService, project: Path, renamer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slugs = _forgettable(svc, project, 3)
    path = svc.vault.find(slugs[1])
    assert path is not None
    original = decay_module.DecaySweep._write_batch

    def then_delete(self: DecaySweep, *args: object, **kwargs: object) -> object:
        written = original(self, *args, **kwargs)  # type: ignore[arg-type]
        path.unlink()  # deleted by hand after the plan, before its rename
        return written

    monkeypatch.setattr(decay_module.DecaySweep, "_write_batch", then_delete)
    report = svc.sweep_at(day(0))
    assert report.skipped == {slugs[1]: f"{path} is gone"}
    assert {m.slug for m in report.moved} == {slugs[0], slugs[2]}
    assert state_of(svc, slugs[0]) is F


def test_a_renamer_that_cannot_start_leaves_the_renames_to_the_sweep(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(renames_module, "CHILD_RENAMES", 1)

    def no_processes(*args: object, **kwargs: object) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", no_processes)
    slugs = _forgettable(svc, project, 3)
    report = svc.sweep_at(day(0))
    assert {m.slug for m in report.moved} == set(slugs)
    assert all(state_of(svc, slug) is F for slug in slugs)


def test_a_renamer_that_dies_stops_the_sweep_and_the_next_start_finishes_it(
    settings: Settings, project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The child renamer dies before answering: the sweep raises, its intents stay, and the
    next open rolls every move forward (the renames it never made are made then)."""
    monkeypatch.setattr(renames_module, "CHILD_RENAMES", 1)
    dying = tmp_path / "renamer.py"
    dying.write_text("import sys\nsys.stderr.write('renamer: out of inodes\\n')\nsys.exit(3)\n")
    monkeypatch.setattr(renames_module, "RENAMER_SCRIPT", dying)
    with open_service(settings) as svc:
        slugs = _forgettable(svc, project, 4)
        with pytest.raises(StorageError, match=r"renamer stopped .* out of inodes"):
            svc.sweep_at(day(0))
    with open_service(settings) as svc:
        assert all(state_of(svc, slug) is F for slug in slugs)
        assert svc.consistency() == (set(), set(), set())
        assert svc.audit_verify().ok
        assert svc.sweep_at(day(0)).moved == []
