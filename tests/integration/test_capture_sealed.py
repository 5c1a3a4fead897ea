"""Capture in a sensitive scope: the hook seals the session for the scope's public key (it
never holds the secret key), nothing plain reaches the disk or the inbox, and the drain opens
the box with the private key and merges it into the encrypted memory."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from memoryd.capture.hook import main as capture_main
from memoryd.config import Settings
from memoryd.models import utcnow
from memoryd.sensitive.files import encrypted_files
from memoryd.sensitive.sealed import waiting_captures
from memoryd.vault import parse
from memoryd.wiring import open_service
from tests.integration.test_capture import ClaudeTranscript, capture, fixture_json, needs_fixtures
from tests.integration.test_sensitive_mark import leaks

SECRET_PROMPT = "Rotate the Zorblax7731 credentials on quuxhost-4417.internal for Client Vellacorp."
PLAIN_PROMPT = "Rotate the Plainword1 credentials on plainhost-1.internal for Client Plainname."


@pytest.fixture
def marked(settings: Settings, project: Path, file_keyring: object) -> str:
    with open_service(settings) as svc:
        return svc.sensitive_mark(project).scope_hash


def transcript(tmp_path: Path, project: Path, session_id: str = "sess-1") -> ClaudeTranscript:
    made = ClaudeTranscript(tmp_path / f"{session_id}.jsonl", session_id, str(project))
    made.prompt(SECRET_PROMPT)
    made.tool("Edit", {"file_path": str(project / "src/zorblax7731.py")}, "ok")
    made.say("Done: the Zorblax7731 credentials for Client Vellacorp are rotated.")
    return made


def test_the_hook_seals_without_the_key_and_the_drain_opens_it(
    settings: Settings, home: Path, project: Path, tmp_path: Path, marked: str, no_keyring: None
) -> None:
    session = transcript(tmp_path, project)
    capture(home, "claude-code", session.payload("Stop"))  # no keyring here: only seal.pub
    [(scope_hash, box)] = waiting_captures(home)
    assert scope_hash == marked
    assert box.name.startswith("session-s-")
    assert "sess-1" not in box.name
    assert list((home / "inbox").glob("*.json")) == []  # no plain index request
    # Everything under the data dir but the transcript's own dir is free of the canaries.
    assert leaks(home) == []


def test_drain_merges_boxes_into_one_encrypted_session(
    settings: Settings, home: Path, project: Path, tmp_path: Path, marked: str
) -> None:
    session = transcript(tmp_path, project)
    capture(home, "claude-code", session.payload("Stop"))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        assert waiting_captures(home) == []
        [path] = [p for p in encrypted_files(home, marked) if p.parent.name == "sessions"]
        memory = svc.vault.read(path)
        assert memory.sensitive
        assert "Zorblax7731" in memory.body
        row = svc.graph.get_memory(memory.slug)
        assert row is not None
        assert (row.title, row.body, row.type.value) == ("", "", "session")
        assert svc.search("Zorblax7731") == []
        captured = [r for r in svc.audit_records(event_type="capture")]
        assert [r.target_id for r in captured] == [memory.slug]
    session.say("Also rotated the backup keys.")
    capture(home, "claude-code", session.payload("SessionEnd"))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        sessions = [p for p in encrypted_files(home, marked) if p.parent.name == "sessions"]
        assert sessions == [path]  # the same session, updated in place
        assert "backup keys" in svc.vault.read(path).body
    assert leaks(home) == []


def test_a_box_waits_for_a_missing_key_and_a_broken_one_is_set_aside(
    settings: Settings, home: Path, project: Path, tmp_path: Path, marked: str,
    file_keyring: object,
) -> None:  # fmt: skip
    capture(home, "claude-code", transcript(tmp_path, project, "one").payload("Stop"))
    [(_, box)] = waiting_captures(home)
    key_id = json.loads((home / "scopes" / marked / "key.json").read_text())["current"]
    secret = file_keyring.get_password("memoryd-sensitive", f"{marked}:{key_id}")  # type: ignore[attr-defined]
    file_keyring.delete_password("memoryd-sensitive", f"{marked}:{key_id}")  # type: ignore[attr-defined]
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 0
    assert waiting_captures(home) == [(marked, box)]  # kept, untouched
    file_keyring.set_password("memoryd-sensitive", f"{marked}:{key_id}", secret)  # type: ignore[attr-defined]
    blob = bytearray(box.read_bytes())
    blob[-1] ^= 1
    box.write_bytes(bytes(blob))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 0
    assert waiting_captures(home) == []
    assert [p.name for p in (home / "inbox" / "failed").iterdir()] == [f"{marked}-{box.name}"]


def test_a_failed_payload_of_a_sensitive_scope_is_kept_sealed(
    home: Path, project: Path, marked: str, no_keyring: None
) -> None:
    payload = {
        "session_id": "s-x",
        "transcript_path": str(project / "missing.jsonl"),
        "cwd": str(project),
        "hook_event_name": "SessionEnd",
        "prompt": SECRET_PROMPT,
    }
    capture(home, "claude-code", payload)
    kept = sorted((home / "inbox" / "failed").iterdir())
    assert [p.suffix for p in kept] == [".sealed"]
    assert leaks(home) == []


def cursor_calls(project: Path, prompt: str) -> list[dict[str, Any]]:
    calls = []
    for event in ("beforeSubmitPrompt", "afterFileEdit", "afterShellExecution", "stop"):
        payload = fixture_json(f"hooks/cursor/{event}.stdin.json", workspace_roots=[str(project)])
        if "file_path" in payload:
            payload["file_path"] = str(project / "src" / "main.ts")
        if event == "beforeSubmitPrompt":
            payload["prompt"] = prompt
        calls.append(payload)
    return calls


def windsurf_calls(project: Path, prompt: str) -> list[dict[str, Any]]:
    calls = []
    for event in ("pre_user_prompt", "post_write_code", "post_run_command"):
        payload = fixture_json(f"hooks/windsurf/{event}.stdin.json")
        info = payload["tool_info"]
        if "cwd" in info:
            info["cwd"] = str(project)
        if "file_path" in info:
            info["file_path"] = str(project / "src" / "foo.ts")
        if "user_prompt" in info:
            info["user_prompt"] = prompt
        calls.append(payload)
    final = fixture_json("hooks/windsurf/post_cascade_response.stdin.json")
    final["tool_info"]["cwd"] = str(project)
    return [*calls, final]


def gemini_calls(project: Path, prompt: str) -> list[dict[str, Any]]:
    calls = []
    for event in ("SessionStart", "BeforeAgent", "AfterTool", "SessionEnd"):
        payload = fixture_json(f"hooks/gemini_cli/{event}.stdin.json", cwd=str(project))
        if event == "BeforeAgent":
            payload["prompt"] = prompt
        calls.append(payload)
    return calls


def copilot_calls(project: Path, prompt: str) -> list[dict[str, Any]]:
    start = fixture_json("hooks/copilot_cli/sessionStart.stdin.json", cwd=str(project))
    start["initialPrompt"] = prompt
    tool = fixture_json("hooks/copilot_cli/postToolUse.stdin.json", cwd=str(project))
    return [start, tool, {"timestamp": 1704614800000, "cwd": str(project)}]  # agentStop


SESSION_KEYS = ("conversation_id", "trajectory_id", "session_id")


def renamed(calls: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """The same calls as another session (the fixtures share one id per agent)."""
    for payload in calls:
        for key in SESSION_KEYS:
            if key in payload:
                payload[key] += suffix
    return calls


def comparable(body: str, root: Path) -> str:
    """A session body without what differs between two runs: the root, the session id."""
    body = re.sub(r"session `[^`]+`", "session `<id>`", body)
    return body.replace(str(root), "<root>").replace(SECRET_PROMPT, PLAIN_PROMPT)


JOURNALED = {
    "cursor": cursor_calls,
    "windsurf": windsurf_calls,
    "gemini": gemini_calls,
    "copilot": copilot_calls,
}


@needs_fixtures
@pytest.mark.parametrize("agent", sorted(JOURNALED))
def test_a_journaled_agent_in_a_sensitive_scope_journals_sealed_and_makes_the_same_session(
    settings: Settings, home: Path, project: Path, other_project: Path, marked: str, agent: str
) -> None:
    # The same calls in a plain project: the memory the sealed journal must come to.
    started = utcnow()
    for payload in JOURNALED[agent](other_project, PLAIN_PROMPT):
        capture(home, agent, payload)
    between = utcnow()
    [plain] = list((home / "scopes").glob("*/sessions/*.md"))
    expected = parse(plain.read_text(encoding="utf-8"), plain)
    plain_journals = set((home / "inbox" / "sessions").glob("*.jsonl"))
    *events, last = renamed(JOURNALED[agent](project, SECRET_PROMPT), "-s")
    for payload in events:
        capture(home, agent, payload)
    # Not even for a moment in plain text (a Windsurf edit names no cwd: its file scopes it).
    assert set((home / "inbox" / "sessions").glob("*.jsonl")) == plain_journals
    capture(home, agent, last)
    ended = utcnow()
    journals = sorted(p.name for p in (home / "inbox" / "sessions").glob("*.sealed"))
    assert len(journals) == 1  # every call of the session went into its sealed journal
    assert leaks(home) == []
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 2  # the plain session's request and the sealed box
        assert waiting_captures(home) == []
        [path] = [p for p in encrypted_files(home, marked) if p.parent.name == "sessions"]
        memory = svc.vault.read(path)
    assert SECRET_PROMPT in memory.body  # the prompt came from a call before the last
    assert comparable(memory.body, project) == comparable(expected.body, other_project)
    if started <= expected.meta.created_at <= between:
        # The agent's calls carry no time: a session starts when its first call came.
        assert between <= memory.meta.created_at <= ended
    else:  # taken from the calls' own timestamps, the same in both sessions
        assert memory.meta.created_at == expected.meta.created_at
    assert memory.slug.startswith("session-s-")
    assert leaks(home) == []


@needs_fixtures
def test_a_sensitive_scope_without_a_capture_key_journals_nothing(
    home: Path, project: Path, marked: str, no_keyring: None
) -> None:
    (home / "scopes" / marked / "seal.pub").unlink()
    for payload in cursor_calls(project, SECRET_PROMPT):
        capture(home, "cursor", payload)
    assert [p.name for p in (home / "inbox").glob("sessions/*") if p.name != ".pruned"] == []
    assert leaks(home) == []


def test_a_session_that_goes_on_after_mark_updates_its_one_memory(
    settings: Settings, home: Path, project: Path, tmp_path: Path, file_keyring: object
) -> None:
    session = transcript(tmp_path, project, "sess-across")
    capture(home, "claude-code", session.payload("Stop"))  # before the mark: plain
    with open_service(settings) as svc:
        svc.drain_inbox()
        scope_hash = svc.sensitive_mark(project).scope_hash
    session.say("After the mark: rotated the backup keys as well.")
    capture(home, "claude-code", session.payload("SessionEnd"))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        [path] = [p for p in encrypted_files(home, scope_hash) if p.parent.name == "sessions"]
        body = svc.vault.read(path).body
        skeletons = [m for m in svc.graph.list_memories() if m.type.value == "session"]
        verified = svc.audit_verify()
    assert "Zorblax7731" in body  # from before the mark
    assert "backup keys as well" in body  # from after it
    assert [m.slug for m in skeletons] == [path.name.removesuffix(".md.enc")]
    assert verified.ok, verified.problem  # the renamed memory has its creating line
    assert leaks(home) == []


@needs_fixtures
@pytest.mark.parametrize("first_turn", ["captured", "trivial"])
def test_a_journaled_session_that_goes_on_after_mark_keeps_its_early_events(
    settings: Settings, home: Path, project: Path, file_keyring: object, first_turn: str
) -> None:
    first, edit, shell, stop = renamed(cursor_calls(project, SECRET_PROMPT), "-across")
    before, after = (
        ([first, edit], [shell]) if first_turn == "captured" else ([first], [edit, shell])
    )
    for payload in (*before, stop):  # one turn before the mark: a plain journal
        capture(home, "cursor", payload)
    sessions = home / "inbox" / "sessions"
    assert len(list(sessions.glob("cursor-*.jsonl"))) == 1
    with open_service(settings) as svc:
        svc.drain_inbox()
        scope_hash = svc.sensitive_mark(project).scope_hash
    # Its memory names the session, or (a trivial turn makes none) its events name the scope:
    # the mark seals the journal either way.
    assert list(sessions.glob("*.jsonl")) == []
    assert leaks(home) == []
    for payload in (*after, stop):  # the session goes on in the sensitive scope
        capture(home, "cursor", payload)
    assert list(sessions.glob("*.jsonl")) == []
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        [path] = [p for p in encrypted_files(home, scope_hash) if p.parent.name == "sessions"]
        body = svc.vault.read(path).body
    assert SECRET_PROMPT in body  # asked before the mark
    assert "`src/main.ts` (edited)" in body
    assert "`npm test`" in body  # run after it
    assert leaks(home) == []


@needs_fixtures
def test_a_sealed_journal_that_cannot_be_written_never_breaks_the_agent(
    settings: Settings, home: Path, project: Path, marked: str
) -> None:
    first = renamed(cursor_calls(project, SECRET_PROMPT), "-blocked")[0]
    sessions = home / "inbox" / "sessions"
    sessions.parent.mkdir(parents=True, exist_ok=True)
    sessions.write_text("not a directory")  # the journal cannot be written
    assert capture(home, "cursor", first) == '{"continue": true}\n'  # the agent's reply, exit 0
    [kept] = (home / "inbox" / "failed").iterdir()
    assert kept.suffix == ".sealed"  # the payload waits for retry, sealed
    assert leaks(home) == []
    sessions.unlink()
    out = io.StringIO()
    assert capture_main(["retry", f"--home={home}"], stdout=out) == 0, out.getvalue()
    assert not kept.exists()
    assert [p.suffix for p in sessions.iterdir() if p.suffix != ".lock"] == [".sealed"]
    assert leaks(home) == []


@needs_fixtures
def test_a_trivial_journaled_session_is_judged_whole_by_the_drain(
    settings: Settings, home: Path, project: Path, marked: str
) -> None:
    *_, stop = renamed(cursor_calls(project, SECRET_PROMPT), "-trivial")
    capture(home, "cursor", stop)  # a turn with nothing in it: the hook cannot tell
    assert len(waiting_captures(home)) == 1
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 0  # judged with the whole journal: trivial, not kept
    assert waiting_captures(home) == []
    assert [p for p in encrypted_files(home, marked) if p.parent.name == "sessions"] == []
