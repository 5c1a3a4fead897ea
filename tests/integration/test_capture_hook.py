"""The hook never breaks the agent, and nothing captured is lost or indexed twice.

Real `memoryd capture` processes for what only a process shows (exit code, stdout, imports, a
read-only data dir); in-process runs for the rest. Then the hand-over: inbox, drain, reindex.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.entry import is_capture_call
from memoryd.inbox import Inbox, IndexRequest
from memoryd.scope import resolve_scope
from memoryd.wiring import open_service
from tests.integration.test_capture import (
    FIXTURES,
    ClaudeTranscript,
    capture,
    failed_entries,
    fixture_json,
    needs_fixtures,
    only_memory,
    session_files,
)

runner = CliRunner()


@pytest.fixture(autouse=True)
def _generous_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A loaded CI box must not trip the 1 s budget; one test sets its own."""
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "30000")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))


def run_hook(
    home: Path, source: str, stdin: str = "", *args: str, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m memoryd capture --source=SOURCE ARGS` as a hook runs it: payload on stdin."""
    return subprocess.run(
        [sys.executable, *python, "-m", "memoryd", "capture", f"--source={source}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORYD_HOME": str(home)},
        timeout=120,
        check=False,
    )


def claude_stop(project: Path) -> dict[str, Any]:
    return fixture_json(
        "hooks/claude_code/Stop.stdin.json",
        transcript_path=str(FIXTURES / "claude_code_transcript.jsonl"),
        cwd=str(project),
    )


def grown_transcript(tmp_path: Path, project: Path, session_id: str) -> ClaudeTranscript:
    transcript = ClaudeTranscript(tmp_path / f"{session_id}.jsonl", session_id, str(project))
    transcript.prompt("Make the importer accept ISO timestamps in created_at and test it.")
    transcript.tool("Edit", {"file_path": str(project / "src/importer.py")}, "ok")
    transcript.say("Done: created_at is coerced to a float epoch because v5 exports need it.")
    return transcript


# -- what only a process shows -----------------------------------------------------------------
STDOUT_CASES = [
    ("claude-code", "hooks/claude_code/Stop.stdin.json", ""),
    ("claude-code", "hooks/claude_code/UserPromptSubmit.stdin.json", ""),
    ("claude-code", "hooks/claude_code/SessionEnd.stdin.json", ""),
    ("codex", "hooks/codex/Stop.stdin.json", ""),
    ("codex", "hooks/codex/UserPromptSubmit.stdin.json", ""),
    ("cursor", "hooks/cursor/beforeSubmitPrompt.stdin.json", '{"continue": true}\n'),
    ("cursor", "hooks/cursor/afterFileEdit.stdin.json", "{}\n"),
    ("cursor", "hooks/cursor/stop.stdin.json", "{}\n"),
    ("windsurf", "hooks/windsurf/pre_user_prompt.stdin.json", ""),
    ("windsurf", "hooks/windsurf/post_cascade_response.stdin.json", ""),
    ("gemini", "hooks/gemini_cli/BeforeAgent.stdin.json", "{}\n"),
    ("gemini", "hooks/gemini_cli/SessionEnd.stdin.json", "{}\n"),
    ("copilot", "hooks/copilot_cli/sessionStart.stdin.json", ""),
    ("copilot", "hooks/copilot_cli/postToolUse.stdin.json", ""),
]


@needs_fixtures
@pytest.mark.parametrize(("source", "fixture", "expected"), STDOUT_CASES)
def test_stdout_holds_only_what_the_agent_documents(
    home: Path, source: str, fixture: str, expected: str
) -> None:
    """Exit 0, nothing on stderr, and stdout exactly the agent's expected reply (FORMATS.md)."""
    result = run_hook(home, source, (FIXTURES / fixture).read_text())
    assert result.returncode == 0
    assert result.stdout == expected
    assert result.stderr == ""
    if expected:
        json.loads(expected)


@needs_fixtures
def test_argument_sources_print_nothing(home: Path) -> None:
    notify = (FIXTURES / "hooks/codex/notify.argv.json").read_text()
    for source, arg in [
        ("codex", notify),
        ("codex-rollout", str(FIXTURES / "codex_rollout.jsonl")),
        ("openclaw", str(FIXTURES / "openclaw_session.jsonl")),
    ]:
        result = run_hook(home, source, "", arg)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), source
    assert len(session_files(home)) == 2  # the notify turn alone is trivial


@needs_fixtures
def test_the_capture_process_stays_light(home: Path, project: Path) -> None:
    """No spaCy, graph engine, search index, LLM client, web framework — nor pydantic, typer or
    rich, which alone would cost more than the hook's budget. (Of the daemon's package only
    the stdlib modules that start it in the background, when autostart is on.) Nor, for a
    transcript this small, orjson with the dataclasses and inspect it loads (~8 ms), nor
    the html module SpecStory files need (~1 ms)."""
    forbidden = re.compile(
        r"^(spacy|kuzu|ladybug|tantivy|jieba|anthropic|openai|fastapi|uvicorn|httpx|mcp|pydantic"
        r"|pydantic_settings|typer|rich|click|yaml|pandas|numpy|orjson|dataclasses|inspect"
        r"|html)(\.|$)"
        r"|^memoryd\.(graph|search|service|wiring|extraction|llm|governance|vault|models"
        r"|config|scope|text)(\.|$)"
        r"|^memoryd\.daemon\.(?!autostart$|files$)"
    )
    runs = [
        run_hook(home, "claude-code", json.dumps(claude_stop(project)), python=("-X", "importtime"))
    ]
    script = Path(sys.executable).with_name("memoryd")
    if script.exists():
        runs.append(
            subprocess.run(
                [str(script), "capture", "--source=claude-code"],
                input=json.dumps(claude_stop(project)),
                capture_output=True,
                text=True,
                env={**os.environ, "MEMORYD_HOME": str(home), "PYTHONPROFILEIMPORTTIME": "1"},
                timeout=120,
                check=False,
            )
        )
    for result in runs:
        assert result.returncode == 0
        modules = [
            line.rsplit("|", 1)[1].strip()
            for line in result.stderr.splitlines()
            if line.startswith("import time:") and "|" in line
        ]
        assert "memoryd.capture.hook" in modules
        heavy = sorted({m for m in modules if forbidden.search(m)})
        assert heavy == [], heavy
    assert len(session_files(home)) == 1


@needs_fixtures
def test_broken_json_is_kept_then_retried_once_fixed(home: Path, project: Path) -> None:
    result = run_hook(home, "claude-code", '{"session_id": "5f3c2a9e", "transcript_path": ')
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert "not JSON" in (home / "logs" / "capture.log").read_text()
    [meta] = failed_entries(home)
    kept = json.loads(meta.read_text())
    assert kept["source"] == "claude-code"
    assert kept["attempts"] == 1
    stdin_file = meta.with_name(kept["stdin_file"])
    assert stdin_file.read_text().startswith('{"session_id": "5f3c2a9e"')

    still_broken = run_hook(home, "claude-code", "", "retry")
    assert still_broken.returncode == 1
    assert "0 processed, 1 still failing" in still_broken.stdout
    assert json.loads(meta.read_text())["attempts"] == 2

    stdin_file.write_text(json.dumps(claude_stop(project)))  # the user fixes the payload
    fixed = run_hook(home, "claude-code", "", "retry")
    assert fixed.returncode == 0
    assert "1 processed, 0 still failing" in fixed.stdout
    assert failed_entries(home) == []
    assert list((home / "inbox" / "failed").iterdir()) == []
    assert only_memory(home).slug == "session-claude-code-5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f"
    again = run_hook(home, "claude-code", "", "retry")
    assert "retried 0 failed capture(s)" in again.stdout


@pytest.fixture
def read_only_home(tmp_path: Path) -> Any:
    """A data dir the process cannot write: a read-only tmpfs as root, else a 0500 directory."""
    path = tmp_path / "ro-home"
    path.mkdir()
    if os.geteuid() == 0:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True
        )
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
        try:
            yield path
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
    else:
        path.chmod(0o500)
        try:
            yield path
        finally:
            path.chmod(0o700)


@needs_fixtures
def test_a_read_only_data_dir_does_not_break_the_agent(read_only_home: Path, project: Path) -> None:
    result = run_hook(read_only_home, "claude-code", json.dumps(claude_stop(project)))
    assert result.returncode == 0
    assert result.stdout == ""
    assert "read-only" in result.stderr or "Read-only" in result.stderr  # the log went to stderr
    gemini = run_hook(
        read_only_home, "gemini", (FIXTURES / "hooks/gemini_cli/SessionEnd.stdin.json").read_text()
    )
    assert (gemini.returncode, gemini.stdout) == (0, "{}\n")
    assert list(read_only_home.iterdir()) == []


def test_fastpath_runs_only_for_memoryd_capture() -> None:
    assert is_capture_call(["/venv/bin/memoryd", "capture", "--source=codex"])
    assert is_capture_call(["/src/memoryd/__main__.py", "capture"])
    assert is_capture_call(["C:\\venv\\Scripts\\memoryd.exe", "capture"])
    assert not is_capture_call(["/venv/bin/memoryd", "capture", "--help"])
    assert not is_capture_call(["/venv/bin/memoryd", "search", "capture"])
    assert not is_capture_call(["/venv/bin/pytest", "capture"])
    assert not is_capture_call(["/venv/bin/memoryd"])


# -- failures kept for retry -------------------------------------------------------------------
def test_a_missing_transcript_is_retried_once_it_exists(
    home: Path, project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "later.jsonl"
    payload = {
        "session_id": "sess-late",
        "transcript_path": str(path),
        "cwd": str(project),
        "hook_event_name": "SessionEnd",
    }
    assert capture(home, "claude-code", payload) == ""
    assert session_files(home) == []
    assert len(failed_entries(home)) == 1
    transcript = ClaudeTranscript(path, "sess-late", str(project))
    transcript.prompt("Document the retry command in the README and add an example.")
    transcript.tool("Edit", {"file_path": str(project / "README.md")}, "ok")
    assert capture(home, "claude-code", None, "retry").startswith("retried 1 failed capture(s)")
    assert failed_entries(home) == []
    assert only_memory(home).slug == "session-claude-code-sess-late"


def test_over_budget_the_payload_waits_for_retry(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transcript = ClaudeTranscript(tmp_path / "big.jsonl", "sess-big", str(project))
    lines = []
    for n in range(1500):
        lines.append(
            json.dumps(
                {
                    "type": "user",
                    "sessionId": "sess-big",
                    "cwd": str(project),
                    "timestamp": "2026-05-18T22:30:00Z",
                    "message": {"role": "user", "content": f"step {n} " * 200},
                }
            )
        )
    with open(transcript.path, "a") as handle:
        handle.write("\n".join(lines) + "\n")
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "1")
    assert capture(home, "claude-code", transcript.payload()) == ""
    assert session_files(home) == []
    [meta] = failed_entries(home)
    assert "budget" in json.loads(meta.read_text())["last_error"]
    capture(home, "claude-code", None, "retry")  # no budget for a retry
    assert len(session_files(home)) == 1
    assert failed_entries(home) == []


def test_a_crash_in_capture_is_logged_with_its_traceback(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("summariser bug")

    monkeypatch.setattr("memoryd.capture.hook.summarize", boom)
    transcript = grown_transcript(tmp_path, project, "sess-bug")
    assert capture(home, "claude-code", transcript.payload()) == ""
    log = (home / "logs" / "capture.log").read_text()
    assert "RuntimeError: summariser bug" in log
    assert "Traceback" in log
    assert len(failed_entries(home)) == 1


# -- the hand-over to the indexer ------------------------------------------------------------
def test_open_service_does_not_drain(
    home: Path, project: Path, tmp_path: Path, settings: Settings
) -> None:
    transcript = grown_transcript(tmp_path, project, "sess-lazy")
    capture(home, "claude-code", transcript.payload())
    with open_service(settings) as svc:
        assert svc.graph.get_memory("session-claude-code-sess-lazy") is None
        assert svc.drain_inbox() == 1
        assert svc.graph.get_memory("session-claude-code-sess-lazy") is not None


def test_three_captures_one_memory_indexed_once(
    home: Path, project: Path, tmp_path: Path, settings: Settings
) -> None:
    transcript = grown_transcript(tmp_path, project, "sess-3x")
    capture(home, "claude-code", transcript.payload("PreCompact"))
    transcript.prompt("Also handle epoch milliseconds in the importer.")
    capture(home, "claude-code", transcript.payload("Stop"))
    transcript.say("Milliseconds are detected because values above 1e11 cannot be seconds.")
    capture(home, "claude-code", transcript.payload("SessionEnd"))
    slug = "session-claude-code-sess-3x"
    assert [p.name for p in (home / "inbox").glob("*.json")] == [f"{slug}.json"]
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        assert svc.drain_inbox() == 0
        assert [m.slug for m in svc.list_memories()] == [slug]
        assert [h.slug for h in svc.search("milliseconds importer")] == [slug]
        events = svc.audit_records(event_type="capture")
        assert [(e.target_id, e.scope_hash) for e in events] == [
            (slug, resolve_scope(project).scope_hash)
        ]
    assert list((home / "inbox").glob("*.json")) == []

    capture(home, "claude-code", transcript.payload("SessionEnd"))  # unchanged
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 0  # already indexed: the request is only removed
    assert list((home / "inbox").glob("*.json")) == []

    transcript.prompt("Last thing: mention the change in the changelog.")
    capture(home, "claude-code", transcript.payload("Stop"))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        assert [h.slug for h in svc.search("changelog")] == [slug]
        events = svc.audit_records(event_type="capture")
        assert len(events) == 2
        assert '"update":true' in events[1].details


def test_a_kill_between_file_and_request_is_recovered(
    home: Path, project: Path, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(self: Inbox, request: IndexRequest, **kwargs: Any) -> Path:
        raise KeyboardInterrupt  # stands for SIGKILL right after the memory file was written

    transcript = grown_transcript(tmp_path, project, "sess-kill")
    slug = "session-claude-code-sess-kill"
    with monkeypatch.context() as patch:
        patch.setattr(Inbox, "submit", killed)
        assert capture(home, "claude-code", transcript.payload()) == ""
    assert len(session_files(home)) == 1
    assert list((home / "inbox").glob("*.json")) == []
    # `memoryd reindex` rebuilds from the vault alone, so it finds the orphan file ...
    with open_service(settings) as svc:
        svc.reindex()
        assert [h.slug for h in svc.search("float epoch")] == [slug]
    # ... and the next capture of the session (or `capture retry`) hands it over again,
    # which the drain sees is already indexed: nothing is indexed twice.
    assert capture(home, "claude-code", None, "retry").startswith("retried 1 failed")
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 0
        assert svc.audit_records(event_type="capture") == []


def test_a_kill_is_recovered_by_the_next_capture(
    home: Path, project: Path, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(self: Inbox, request: IndexRequest, **kwargs: Any) -> Path:
        raise KeyboardInterrupt

    transcript = grown_transcript(tmp_path, project, "sess-kill2")
    with monkeypatch.context() as patch:
        patch.setattr(Inbox, "submit", killed)
        capture(home, "claude-code", transcript.payload())
    capture(home, "claude-code", transcript.payload("SessionEnd"))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 1
        assert [h.slug for h in svc.search("float epoch")] == ["session-claude-code-sess-kill2"]


def test_a_request_replaced_during_a_drain_stays(home: Path) -> None:
    inbox = Inbox(home)
    request = IndexRequest("s-1", "/x/s-1.md", "0123456789ab", None, "codex", "t1")
    inbox.submit(request)
    [pending] = inbox.pending()
    inbox.submit(request._replace(ts="t2"))  # a capture lands while the drain indexes
    assert inbox.done(pending) is False
    [again] = inbox.pending()
    assert again.request.ts == "t2"
    assert inbox.done(again) is True
    assert inbox.pending() == []


def test_unreadable_and_dangling_requests(home: Path, settings: Settings) -> None:
    inbox = Inbox(home)
    inbox.dir.mkdir(parents=True)
    (inbox.dir / "garbage.json").write_text("{not json")
    inbox.submit(IndexRequest("gone", str(home / "nowhere.md"), "0123456789ab", None, "codex", "t"))
    with open_service(settings) as svc:
        assert svc.drain_inbox() == 0
    assert list(inbox.dir.glob("*.json")) == []
    assert len(list(inbox.failed_dir.glob("garbage.request-*.bad"))) == 1


@needs_fixtures
def test_a_read_command_says_captures_wait_and_a_write_indexes_them(
    home: Path, project: Path
) -> None:
    capture(home, "claude-code", claude_stop(project))
    search = ["search", "coerced float epoch", "--json", "--home", str(home)]
    result = runner.invoke(app, search)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == []  # a read does no hidden work
    assert result.stderr == "1 capture waiting; run memoryd serve or memoryd capture retry\n"
    record = ["record", "--type", "fact", "--title", "t", "--body", "b", "--scope", str(project)]
    assert runner.invoke(app, [*record, "--home", str(home)]).exit_code == 0
    result = runner.invoke(app, search)
    assert (result.exit_code, result.stderr) == (0, "")
    assert [h["slug"] for h in json.loads(result.stdout)] == [
        "session-claude-code-5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f"
    ]


@needs_fixtures
def test_the_typer_command_behaves_like_the_hook(home: Path, project: Path) -> None:
    result = runner.invoke(
        app,
        ["capture", "--source", "claude-code", "--home", str(home)],
        input=json.dumps(claude_stop(project)),
    )
    assert result.exit_code == 0
    assert result.stdout == ""
    assert len(session_files(home)) == 1
    gemini = runner.invoke(app, ["capture", "--source", "gemini", "--home", str(home)], input="{")
    assert (gemini.exit_code, gemini.stdout) == (0, "{}\n")
    assert len(failed_entries(home)) == 1
    retry = runner.invoke(app, ["capture", "retry", "--home", str(home)])
    assert retry.exit_code == 1
    assert "1 still failing" in retry.stdout
    assert "retry" in runner.invoke(app, ["capture", "--help"]).stdout
