"""What the stores hold must agree, and every surface says so when it does not: an audit log
deleted or cut short, a graph that is gone or unreadable, a memory file copied by hand."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from memoryd.config import Settings
from memoryd.doctor import service_checks
from memoryd.wiring import open_service
from tests.e2e.test_crash_recovery import captured_session
from tests.integration.test_cli import cli, record


def memory_file(home: Path, slug: str) -> Path:
    (path,) = (home / "scopes").glob(f"*/*/{slug}.md")
    return path


def memoryd(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process: what a user sees on stderr, logging included."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *args, "--home", str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- the audit log against the stores ----------------------------------------------------------
def test_deleting_the_audit_log_and_its_head_is_caught_and_names_the_memories(
    home: Path, project: Path
) -> None:
    slugs = sorted(record(home, project, f"Decision {i}", f"body {i}") for i in range(3))
    for name in ("audit.jsonl", "head.json"):
        (home / "audit" / name).unlink()

    code, _, err = cli(home, "audit", "verify")

    assert code == 9
    assert "3 memories in the vault or graph have no record or capture line" in err
    for slug in slugs:
        assert slug in err
    code, out, _ = cli(home, "audit", "verify", "--json")
    assert code == 9
    assert json.loads(out)["missing"] == slugs


def test_cutting_lines_from_the_end_is_reported_with_the_line_number(
    home: Path, project: Path
) -> None:
    for i in range(3):
        record(home, project, f"Decision {i}", f"body {i}")
    log = home / "audit" / "audit.jsonl"
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:1]))

    code, _, err = cli(home, "audit", "verify")

    assert code == 9
    assert "truncated after line 1: head.json expects 3 lines (2 removed from the end)" in err
    assert "None" not in err


def test_cutting_the_last_line_and_rewriting_head_json_is_caught_by_the_witness(
    home: Path, project: Path, settings: Settings
) -> None:
    """The cut line created no memory (a grant, an update, an export): only governance.db's
    witness of the chain end, written on every append, shows the log lost it."""
    record(home, project, "Decision", "body")
    with open_service(settings) as svc:
        svc.audit.append(
            actor="cli", event_type="grant", scope_hash=None, target_id=None, details={"n": 1}
        )
    log, head = home / "audit" / "audit.jsonl", home / "audit" / "head.json"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]))
    last = json.loads(lines[-2])
    head.write_text(json.dumps({"seq": last["seq"], "this_hash": last["this_hash"]}) + "\n")

    code, _, err = cli(home, "audit", "verify")

    assert code == 9
    assert f"truncated after line {len(lines) - 1}" in err
    assert f"governance.db's audit witness says seq {len(lines)} was written" in err


def test_deleting_the_audit_witness_row_is_reported(home: Path, project: Path) -> None:
    record(home, project, "Decision", "body")
    with sqlite3.connect(home / "governance.db") as conn:
        conn.execute("DELETE FROM audit_witness")
    code, _, err = cli(home, "audit", "verify")
    assert code == 9
    assert "governance.db holds no audit witness" in err


def test_reindex_adopts_memory_files_no_audit_line_created(home: Path, project: Path) -> None:
    slug = record(home, project, "Decision", "a body")
    for name in ("audit.jsonl", "head.json"):
        (home / "audit" / name).unlink()
    assert cli(home, "audit", "verify")[0] == 9

    assert cli(home, "reindex")[0] == 0

    code, _out, err = cli(home, "audit", "verify")
    assert code == 0, err
    _, listed, _ = cli(home, "audit", "--event-type", "adopt", "--json")
    assert [r["target_id"] for r in json.loads(listed)] == [slug]


def test_a_capture_waiting_in_the_inbox_is_not_missing_from_the_log(
    settings: Settings, project: Path
) -> None:
    with open_service(settings) as svc:
        pass
    slug = captured_session(settings.home, project)
    with open_service(settings) as svc:
        assert svc.audit_verify().ok  # in the inbox: on its way in
        assert svc.drain_inbox() == 1
        assert svc.audit_verify().ok
        (settings.home / "audit" / "audit.jsonl").write_bytes(b"")
        (settings.home / "audit" / "head.json").unlink()
        result = svc.audit_verify()
    assert not result.ok
    assert result.missing == [slug]


# -- a store that is gone ----------------------------------------------------------------------
def test_a_missing_graph_is_an_error_naming_reindex_until_reindex_rebuilds_it(
    home: Path, project: Path
) -> None:
    slug = record(home, project, "Decision", "kept in the vault")
    shutil.rmtree(home / "graph")

    code, out, err = cli(home, "list")
    assert code == 7
    assert "graph" in err
    assert "missing" in err
    assert "memoryd reindex" in err
    code, out, _ = cli(home, "doctor")
    assert code == 1
    assert "memoryd reindex" in out

    code, _, err = cli(home, "reindex")
    assert code == 0, err
    code, out, _ = cli(home, "list")
    assert code == 0
    assert slug in out
    assert cli(home, "audit", "verify")[0] == 0


def test_an_unreadable_graph_is_an_error_and_reindex_moves_it_aside(
    home: Path, project: Path
) -> None:
    slug = record(home, project, "Decision", "kept in the vault")
    graph = home / "graph"
    for wal in graph.glob("*.wal"):
        wal.unlink()
    (graph / "memoryd.kz").write_bytes(b"not a database" * 400)

    code, _, err = cli(home, "get", slug)
    assert code == 7
    assert "cannot open the graph" in err
    assert "memoryd reindex" in err

    assert cli(home, "reindex")[0] == 0
    assert cli(home, "get", slug)[0] == 0
    assert len(list(home.glob("graph.broken-*"))) == 1


def test_a_new_home_still_starts_empty(home: Path) -> None:
    code, _, err = cli(home, "list")
    assert code == 0, err
    assert (home / "graph").is_dir()


def test_a_missing_search_index_is_refilled_from_the_vault(home: Path, project: Path) -> None:
    slug = record(home, project, "Postgres for billing", "We chose Postgres.")
    shutil.rmtree(home / "search")

    code, out, err = cli(home, "search", "Postgres", "--json")

    assert code == 0, err
    assert [h["slug"] for h in json.loads(out)] == [slug]


# -- a copied memory file ----------------------------------------------------------------------
def test_a_copied_memory_file_is_reported_once_as_a_copy_not_as_a_reindex(
    home: Path, project: Path, settings: Settings
) -> None:
    slug = record(home, project, "Decision", "original")
    original = memory_file(home, slug)
    copies = [original.with_name("copied.md"), original.with_name("000-first.md")]
    for copy in copies:  # one sorts after the original, one before it
        shutil.copy(original, copy)

    done = memoryd(home, "reindex")

    assert done.returncode == 0, done.stderr
    for copy in copies:
        lines = [line for line in done.stderr.splitlines() if str(copy) in line]
        assert len(lines) == 1, done.stderr  # once, not once per logger
        assert f"which {original} holds" in lines[0]
    assert "(2 skipped)" in done.stdout
    with open_service(settings) as svc:
        assert svc.get(slug).path == original  # the file named after the slug wins
        checks = {c.name: c for c in service_checks(svc, settings)}
    assert checks["index consistency"].ok  # not "run reindex": reindex cannot change it
    assert not checks["copied files"].ok
    assert "reindex" not in checks["copied files"].fix.split(",")[0]
    for copy in copies:
        assert str(copy) in checks["copied files"].detail
        copy.unlink()
    with open_service(settings) as svc:
        assert all(c.ok for c in service_checks(svc, settings))
