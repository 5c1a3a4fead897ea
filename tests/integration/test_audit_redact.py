"""Redacting the audit log at mark: old slugs renamed, the chain re-made, crashes settled.

A scope marked sensitive renames its memories to opaque slugs; the lines written before the
mark name them by title-derived slugs. `AuditLog.redact_slugs` rewrites those lines, re-chains
the log from the first line it changed and appends an `audit_redact` event. These tests run it
on real files, tamper with the result, and kill a child process at each step of the rewrite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.audit import (
    HEAD_NAME,
    LOG_NAME,
    PENDING_NAME,
    REDACT_EVENT,
    REDACTED_NAME,
    AuditEvent,
    AuditLog,
)
from memoryd.errors import AuditChainBroken
from tests.conftest import ENGINE
from tests.integration.test_sync import draft, opened

OLD = "2026-05-18-qwertanium-billing-cutover-3f9a1c"
OLD_TWO = "2026-05-19-qwertanium-ledger-77aa01"
NEW = "2026-05-18-s-0123456789ab"
NEW_TWO = "2026-05-19-s-ba9876543210"
DOTTED = "session-cursor-conv.1-1a2b3c4d"  # a session id with a '.' of its own
NEW_DOTTED = "session-cursor-s-5e6f7a8b9c0d"
RENAMES = {OLD: NEW, OLD_TWO: NEW_TWO, DOTTED: NEW_DOTTED}
LONGER = OLD + "-2"  # another memory whose slug only starts like OLD: not renamed


def _events() -> list[AuditEvent]:
    """Two unrelated lines first, then lines naming the old slugs every way the service does."""
    return [
        AuditEvent(actor="cli", event_type="scope_created", scope_hash="s1", details={"n": 1}),
        AuditEvent(actor="cli", event_type="record", scope_hash="s2", target_id="other-slug"),
        AuditEvent(actor="cli", event_type="record", scope_hash="s1", target_id=OLD),
        AuditEvent(
            actor="cli",
            event_type="supersede",
            scope_hash="s1",
            target_id=OLD_TWO,
            details={
                "older": OLD,
                "path": f"decisions/{OLD}.md",
                OLD_TWO: [OLD, "x", f"{DOTTED}.md.enc"],
                "note": f"moved\n{OLD_TWO}, not {LONGER}",
            },
        ),
        AuditEvent(actor="cli", event_type="record", scope_hash="s1", target_id=LONGER),
        AuditEvent(actor="cli", event_type="recall", scope_hash="s1", details={"hits": 2}),
    ]


def _log(directory: Path) -> AuditLog:
    log = AuditLog(directory)
    log.append_many(_events())
    return log


def _lines(directory: Path) -> list[bytes]:
    return (directory / LOG_NAME).read_bytes().splitlines(keepends=True)


def _assert_redacted(directory: Path, before: list[bytes]) -> None:
    """The old slugs are gone, the chain verifies to the head, and the event says what moved."""
    data = (directory / LOG_NAME).read_bytes()
    assert OLD.encode() not in data.replace(LONGER.encode(), b"")
    assert OLD_TWO.encode() not in data
    assert DOTTED.encode() not in data
    assert LONGER.encode() in data
    assert NEW.encode() in data
    assert NEW_TWO.encode() in data
    lines = _lines(directory)
    assert lines[:2] == before[:2]  # before the first changed line: the same bytes
    assert len(lines) == len(before) + 1
    log = AuditLog(directory)
    assert log.verify().ok
    last = json.loads(lines[-1])
    head = json.loads((directory / HEAD_NAME).read_bytes())
    assert head == {"seq": last["seq"], "this_hash": last["this_hash"]}
    [event] = log.read(event_type=REDACT_EVENT)
    assert event.seq == len(before) + 1
    assert json.loads(event.details) == {
        "first_seq": 3,
        "lines_rechained": 4,
        "lines_redacted": 2,
        "slugs": 3,
    }
    assert [r.target_id for r in log.read(event_type="record")] == ["other-slug", NEW, LONGER]
    details = json.loads(log.read(event_type="supersede")[0].details)
    assert details == {
        "older": NEW,
        "path": f"decisions/{NEW}.md",
        NEW_TWO: [NEW, "x", f"{NEW_DOTTED}.md.enc"],
        "note": f"moved\n{NEW_TWO}, not {LONGER}",
    }
    assert not (directory / PENDING_NAME).exists()
    assert not (directory / REDACTED_NAME).exists()


def test_redaction_renames_old_slugs_and_the_chain_verifies(tmp_path: Path) -> None:
    log = _log(tmp_path)
    before = _lines(tmp_path)
    done = log.redact_slugs(RENAMES, actor="cli", scope_hash="s1")
    assert done is not None
    assert (done.lines_redacted, done.lines_rechained, done.first_seq) == (2, 4, 3)
    _assert_redacted(tmp_path, before)
    log.append(actor="cli", event_type="recall", scope_hash="s1", target_id=None)
    assert AuditLog(tmp_path).verify().ok
    assert AuditLog(tmp_path).verify().lines == len(before) + 2


def test_a_byte_changed_in_a_redacted_line_is_caught_at_that_line(tmp_path: Path) -> None:
    _log(tmp_path).redact_slugs(RENAMES, actor="cli", scope_hash="s1")
    lines = _lines(tmp_path)
    lines[2] = lines[2].replace(NEW.encode(), NEW.replace("0123", "0124").encode())
    (tmp_path / LOG_NAME).write_bytes(b"".join(lines))
    result = AuditLog(tmp_path).verify()
    assert not result.ok
    assert result.first_bad_line == 3
    assert result.problem == "line 3: this_hash does not match its content (edited?)"


def test_a_broken_log_is_refused_not_rechained(tmp_path: Path) -> None:
    _log(tmp_path)
    lines = _lines(tmp_path)
    lines[1] = lines[1].replace(b"other-slug", b"other-slog")
    (tmp_path / LOG_NAME).write_bytes(b"".join(lines))
    with pytest.raises(AuditChainBroken, match="line 2: this_hash does not match"):
        AuditLog(tmp_path).redact_slugs(RENAMES, actor="cli", scope_hash="s1")
    assert _lines(tmp_path) == lines
    assert not (tmp_path / REDACTED_NAME).exists()
    assert not (tmp_path / PENDING_NAME).exists()


def test_nothing_to_rename_appends_only_the_event(tmp_path: Path) -> None:
    log = _log(tmp_path)
    before = _lines(tmp_path)
    assert log.redact_slugs({}, actor="cli", scope_hash="s1") is None
    done = log.redact_slugs({"never-logged": NEW}, actor="cli", scope_hash="s1")
    assert done is not None
    assert (done.lines_redacted, done.first_seq) == (0, None)
    assert _lines(tmp_path)[:-1] == before
    assert json.loads(_lines(tmp_path)[-1])["event_type"] == REDACT_EVENT
    assert AuditLog(tmp_path).verify().ok


def test_another_instance_appends_to_the_new_log_after_a_redaction(tmp_path: Path) -> None:
    """An AuditLog that knew the old file's end (as a second process would) re-reads it."""
    first = _log(tmp_path)
    second = AuditLog(tmp_path)
    second.append(actor="cli", event_type="recall", scope_hash="s1", target_id=None)
    first.redact_slugs(RENAMES, actor="cli", scope_hash="s1")
    second.append(actor="cli", event_type="recall", scope_hash="s1", target_id=None)
    result = AuditLog(tmp_path).verify()
    assert result.ok, result.problem
    assert result.lines == len(_events()) + 3


def test_an_export_after_mark_carries_the_redacted_chain_and_each_export_imports(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    """A new export carries the re-chained log and verifies on import; one made before the
    mark is self-contained and still verifies on its own."""
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    with opened(tmp_path / "a") as a:
        old = a.record(draft(project, "Qwertanium billing plan", "Cut over on Monday.")).slug
        a.record(draft(other_project, "Docs deploy", "The docs deploy on Fridays."))
        a.sync_export(before, include_audit_chain=True)
        a.sensitive_mark(project)
        [redacted] = a.audit.read(event_type=REDACT_EVENT)
        assert json.loads(redacted.details)["lines_redacted"] >= 1
        assert a.audit_verify().ok
        a.sync_export(after, include_audit_chain=True)
    assert old in before.read_text(encoding="utf-8")
    assert old not in after.read_text(encoding="utf-8")
    assert "qwertanium" not in (tmp_path / "a" / "audit" / LOG_NAME).read_text(encoding="utf-8")
    for name, export in (("b", after), ("c", before)):
        with opened(tmp_path / name) as peer:
            report = peer.sync_import(export)
            assert report.audit_events_imported > 0
            assert peer.audit_verify().ok


# -- kill -9 at each step of the rewrite --------------------------------------------------------
CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from memoryd.audit import AuditLog

args = json.loads(sys.argv[1])
real_replace = os.replace

def armed(src, dst):
    hit = Path(dst).name == args["target"]
    if hit and args["when"] == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)
    if hit and args["when"] == "after":
        os.kill(os.getpid(), signal.SIGKILL)

os.replace = armed
AuditLog(Path(args["dir"])).redact_slugs(args["renames"], actor="cli", scope_hash="s1")
sys.exit(3)  # the kill never came: the step was not reached
"""


@pytest.mark.parametrize(
    ("target", "when", "outcome"),
    [
        (PENDING_NAME, "before", "rolled back"),  # the new log written, nothing noted yet
        (LOG_NAME, "before", "rolled forward"),  # noted, the old log still in place
        (LOG_NAME, "after", "rolled forward"),  # the log replaced, the head not moved yet
        (HEAD_NAME, "after", "rolled forward"),  # the head moved, the note still there
    ],
)
def test_a_redaction_killed_at_any_step_settles_on_the_next_open(
    tmp_path: Path, target: str, when: str, outcome: str
) -> None:
    _log(tmp_path)
    before = _lines(tmp_path)
    args = {"dir": str(tmp_path), "renames": RENAMES, "target": target, "when": when}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    if outcome == "rolled back":
        assert AuditLog(tmp_path).verify().ok
        assert _lines(tmp_path) == before
        # the leftover new log is not the log; a second mark redacts it all
        AuditLog(tmp_path).redact_slugs(RENAMES, actor="cli", scope_hash="s1")
    else:
        assert (tmp_path / PENDING_NAME).exists()
        # The next open settles it before anything is read or appended.
        assert AuditLog(tmp_path).verify().ok
    _assert_redacted(tmp_path, before)
    AuditLog(tmp_path).append(actor="cli", event_type="recall", scope_hash="s1", target_id=None)
    assert AuditLog(tmp_path).verify().ok


MARK_CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from memoryd.config import load_settings
from memoryd.wiring import open_service

args = json.loads(sys.argv[1])
real_replace = os.replace

def armed(src, dst):
    real_replace(src, dst)
    if Path(dst).name == "audit.jsonl":  # the re-chained log is in place, the head not yet
        os.kill(os.getpid(), signal.SIGKILL)

settings = load_settings(
    Path(args["home"]), graph={"engine": args["engine"], "buffer_pool_mb": 64},
    extraction={"enabled": False},
)
svc = open_service(settings)
os.replace = armed
svc.sensitive_mark(args["project"])
sys.exit(3)  # the kill never came
"""


def test_a_mark_killed_between_the_log_and_its_head_settles_and_a_second_mark_finishes(
    tmp_path: Path, project: Path, file_keyring: object
) -> None:
    home = tmp_path / "home"
    with opened(home) as svc:
        svc.record(draft(project, "Qwertanium billing plan", "Cut over on Monday."))
    args = {"home": str(home), "engine": ENGINE, "project": str(project)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", MARK_CHILD, json.dumps(args)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert (home / "audit" / PENDING_NAME).exists()
    with opened(home) as svc:
        # The open settled the log: the chain verifies to its head, which is the new end.
        assert AuditLog(home / "audit").verify().ok
        assert not (home / "audit" / PENDING_NAME).exists()
        assert "qwertanium" not in (home / "audit" / LOG_NAME).read_text(encoding="utf-8")
        assert len(svc.audit.read(event_type=REDACT_EVENT)) == 1
        # The mark itself was cut short (as a mark killed anywhere is): the plain file is
        # still there, its record now under the opaque slug, and a second mark finishes it.
        half = svc.audit_verify()
        assert not half.ok
        assert len(half.missing) == 1
        assert "qwertanium" in half.missing[0]
        svc.sensitive_mark(project)
        assert not [p for p in (home / "scopes").rglob("*.md") if "decisions" in p.parts]
        assert svc.audit_verify().ok
        assert len(svc.audit.read(event_type=REDACT_EVENT)) == 2
    assert "qwertanium" not in (home / "audit" / LOG_NAME).read_text(encoding="utf-8")
