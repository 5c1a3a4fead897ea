"""`memoryd capture` in-process: every agent's real sample payloads, re-capture, noise, caps.

The sample payloads, transcripts and rollouts are read from /work/shared/interop/fixtures (never
copied into the repository); tests that need them are skipped when that directory is absent.
Helpers here are shared by the other test_capture_* modules.
"""

from __future__ import annotations

import io
import json
import random
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd import memfile
from memoryd.capture.hook import main as capture_main
from memoryd.capture_limits import MINIMUMS, CaptureLimits, load_capture_config
from memoryd.config import CaptureSettings, load_settings
from memoryd.models import SLUG_RE, Memory, MemoryType
from memoryd.scope import resolve_scope
from memoryd.vault import _scalar, parse, render

FIXTURES = Path("/work/shared/interop/fixtures")
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason="interop fixtures not available (/work/shared is absent)"
)


@pytest.fixture(autouse=True)
def _no_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """In-process captures run without the SIGALRM budget: a loaded CI box must not flake."""
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "0")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))


# -- helpers (also used by test_capture_hook.py and test_capture_redact.py) -------------------
def fixture_json(rel: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / rel).read_text(encoding="utf-8"))
    data.update(changes)
    return data


def capture(
    home: Path, source: str, payload: dict[str, Any] | str | None = None, *args: str
) -> str:
    """Run `memoryd capture` in-process; returns its stdout (asserting the exit code is 0)."""
    text = json.dumps(payload) if isinstance(payload, dict) else (payload or "")
    out = io.StringIO()
    code = capture_main(
        [f"--source={source}", f"--home={home}", *args], stdin=io.StringIO(text), stdout=out
    )
    assert code == 0
    return out.getvalue()


def session_files(home: Path) -> list[Path]:
    return sorted((home / "scopes").glob("*/sessions/*.md"))


def only_memory(home: Path) -> Memory:
    files = session_files(home)
    assert len(files) == 1, files
    return parse(files[0].read_text(encoding="utf-8"), files[0])


def section(body: str, heading: str) -> str:
    """The text under `## heading` (empty when the section is absent)."""
    marker = f"## {heading}\n"
    if marker not in body:
        return ""
    return body.split(marker, 1)[1].split("\n## ", 1)[0]


def failed_entries(home: Path) -> list[Path]:
    return sorted((home / "inbox" / "failed").glob("*.json"))


class ClaudeTranscript:
    """Builds a Claude Code transcript in the fixture's line shapes."""

    def __init__(self, path: Path, session_id: str, cwd: str) -> None:
        self.path = path
        self.session_id = session_id
        self.cwd = cwd
        self.when = datetime(2026, 5, 18, 22, 30, tzinfo=UTC)
        self.count = 0
        path.write_text("", encoding="utf-8")

    def _add(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        self.count += 1
        self.when += timedelta(seconds=3)
        entry = {
            "parentUuid": None,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.1.20",
            "gitBranch": "main",
            "type": kind,
            "message": message,
            "uuid": f"uuid-{self.count}",
            "timestamp": self.when.isoformat().replace("+00:00", "Z"),
            **extra,
        }
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    def prompt(self, text: str) -> None:
        self._add("user", {"role": "user", "content": text})

    def say(self, text: str) -> None:
        block = {"type": "text", "text": text}
        self._add("assistant", {"id": f"msg_{self.count}", "role": "assistant", "content": [block]})

    def tool(
        self, name: str, tool_input: dict[str, Any], result: str, *, error: bool = False
    ) -> None:
        call_id = f"toolu_{self.count}"
        block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
        self._add("assistant", {"id": f"msg_{self.count}", "role": "assistant", "content": [block]})
        done = {"type": "tool_result", "tool_use_id": call_id, "content": result, "is_error": error}
        self._add("user", {"role": "user", "content": [done]}, toolUseResult=result)

    def payload(self, event: str = "Stop", **extra: Any) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "hook_event_name": event,
            **extra,
        }


# -- every agent's sample payloads ------------------------------------------------------------
@needs_fixtures
def test_claude_code_stop_captures_the_fixture_transcript(home: Path, project: Path) -> None:
    payload = fixture_json(
        "hooks/claude_code/Stop.stdin.json",
        transcript_path=str(FIXTURES / "claude_code_transcript.jsonl"),
        cwd=str(project),
    )
    assert capture(home, "claude-code", payload) == ""
    memory = only_memory(home)
    meta = memory.meta
    assert memory.path is not None
    assert memory.path.parent.parent.name == resolve_scope(project).scope_hash == meta.scope_hash
    assert meta.type is MemoryType.SESSION
    assert meta.source == "claude-code"
    assert meta.slug == "session-claude-code-5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f"
    extra = meta.model_extra or {}
    assert extra["session_id"] == "5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f"
    assert extra["agent"] == "claude-code"
    assert meta.created_at == datetime(2026, 5, 18, 22, 30, 12, tzinfo=UTC)  # session start
    assert meta.ttl_days == 90
    assert "py" in meta.tags
    assert "memories_json.py" in meta.triggers
    body = memory.body
    assert "Run the importer tests and fix anything that fails." in section(body, "Asked")
    assert "coerced to a float epoch" in section(body, "Decided / concluded")
    assert "`src/memoryd/sync/memories_json.py` (edited)" in section(body, "Files changed")
    assert "`uv run pytest tests/sync -q` — failed" in section(body, "Commands run")
    assert "test_iso_created_at - TypeError" in section(body, "Errors")
    assert "All 5 sync tests pass." in section(body, "Final answer")
    assert "should run pytest on the sync tests" not in body  # thinking is not a summary
    request = json.loads((home / "inbox" / f"{meta.slug}.json").read_text())
    assert request["path"] == str(memory.path)
    assert request["scope_hash"] == meta.scope_hash


@needs_fixtures
def test_codex_hook_and_rollout_capture_one_memory(home: Path, project: Path) -> None:
    rollout = FIXTURES / "codex_rollout.jsonl"
    payload = fixture_json(
        "hooks/codex/Stop.stdin.json", transcript_path=str(rollout), cwd=str(project)
    )
    assert capture(home, "codex", payload) == ""
    memory = only_memory(home)
    body = memory.body
    assert section(body, "Asked").strip() == "- Add a test for the parser."  # no scaffolding
    assert "AGENTS.md" not in body
    assert "environment_context" not in body
    assert "`tests/test_parser.py` (added)" in section(body, "Files changed")
    assert "`uv run pytest -q`" in section(body, "Commands run")
    assert "Added tests/test_parser.py; all tests pass." in section(body, "Final answer")
    assert (memory.meta.model_extra or {})["model"] == "gpt-5-codex"
    # The same session read from its rollout file updates the same memory.
    capture(home, "codex-rollout", None, str(rollout))
    assert (
        only_memory(home).slug
        == memory.slug
        == ("session-codex-019bd6d8-b99b-7eb1-847c-87c3da10673a")
    )


@needs_fixtures
def test_codex_legacy_notify_reads_the_last_argument(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notify = fixture_json("hooks/codex/notify.argv.json", cwd=str(project))
    monkeypatch.setenv("MEMORYD_CAPTURE__MIN_CHARS", "50")  # one short turn, no rollout
    assert capture(home, "codex", "", json.dumps(notify)) == ""
    body = only_memory(home).body
    assert "Rename `foo` to `bar`" in section(body, "Asked")
    assert "`cargo build` succeeds" in section(body, "Final answer")


@needs_fixtures
def test_codex_notify_finds_the_rollout_in_codex_home(
    home: Path, project: Path, tmp_path: Path
) -> None:
    notify = fixture_json("hooks/codex/notify.argv.json", cwd=str(project))
    day = tmp_path / "codex-home" / "sessions" / "2026" / "05" / "18"
    day.mkdir(parents=True)
    link = day / f"rollout-2026-05-18T22-30-12-{notify['thread-id']}.jsonl"
    link.symlink_to(FIXTURES / "codex_rollout.jsonl")
    capture(home, "codex", "", json.dumps(notify))
    memory = only_memory(home)
    assert memory.slug == f"session-codex-{notify['thread-id']}"
    assert "`uv run pytest -q`" in section(memory.body, "Commands run")


@needs_fixtures
def test_openclaw_session_file(home: Path) -> None:
    capture(home, "openclaw", {"sessionFile": str(FIXTURES / "openclaw_session.jsonl")})
    memory = only_memory(home)
    assert memory.slug == "session-openclaw-b7300bff-a214-4c11-97ae-eab26883c67a"
    assert memory.meta.scope_hash == memfile.hash_path("/Users/abble/.openclaw/workspace")
    body = memory.body
    assert "What did we decide about the frontend framework?" in section(body, "Asked")
    decided = section(body, "Decided / concluded")
    assert "move from React to Solid because of bundle size" in decided
    assert "What did we decide" not in decided  # a question is not a decision
    assert "React -> Solid" in section(body, "Earlier in the session")
    assert "bundle size" in section(body, "Final answer")


def test_openclaw_follows_the_active_branch(home: Path, tmp_path: Path) -> None:
    """The session is a tree: an abandoned branch is not part of the summary."""

    def message(entry_id: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": "2026-05-18T22:30:15.000Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        }

    lines = [
        {
            "type": "session",
            "version": 3,
            "id": "s-1",
            "timestamp": "2026-05-18T22:30:12Z",
            "cwd": str(tmp_path),
        },
        message("a1", None, "user", "Plan the storage layer of the ledger service. " * 3),
        message("b1", "a1", "assistant", "Abandoned answer about MongoDB sharding. " * 3),
        message("b2", "a1", "assistant", "We decided to use SQLite because it is embedded. " * 3),
    ]
    session = tmp_path / "s-1.jsonl"
    session.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    capture(home, "openclaw", None, str(session))
    body = only_memory(home).body
    assert "SQLite because it is embedded" in body
    assert "MongoDB" not in body


@needs_fixtures
def test_cursor_events_make_one_memory_at_stop(home: Path, project: Path) -> None:
    for event in ("beforeSubmitPrompt", "afterFileEdit", "afterShellExecution"):
        payload = fixture_json(f"hooks/cursor/{event}.stdin.json", workspace_roots=[str(project)])
        if "file_path" in payload:
            payload["file_path"] = str(project / "src" / "main.ts")
        expected = '{"continue": true}\n' if event == "beforeSubmitPrompt" else "{}\n"
        assert capture(home, "cursor", payload) == expected
        assert session_files(home) == []  # journaled until the turn ends
    stop = fixture_json("hooks/cursor/stop.stdin.json", workspace_roots=[str(project)])
    assert capture(home, "cursor", stop) == "{}\n"
    memory = only_memory(home)
    assert memory.meta.scope_hash == resolve_scope(project).scope_hash
    assert "Fix the bug in main.ts" in section(memory.body, "Asked")
    assert "`src/main.ts` (edited)" in section(memory.body, "Files changed")
    assert "`npm test`" in section(memory.body, "Commands run")


@needs_fixtures
def test_windsurf_events_make_one_memory(home: Path, project: Path) -> None:
    for event in ("pre_user_prompt", "post_write_code", "post_run_command"):
        payload = fixture_json(f"hooks/windsurf/{event}.stdin.json")
        info = payload["tool_info"]
        if "cwd" in info:
            info["cwd"] = str(project)
        if "file_path" in info:
            info["file_path"] = str(project / "src" / "foo.ts")
        assert capture(home, "windsurf", payload) == ""
    assert session_files(home) == []
    capture(home, "windsurf", fixture_json("hooks/windsurf/post_cascade_response.stdin.json"))
    memory = only_memory(home)
    assert memory.meta.scope_hash == resolve_scope(project).scope_hash
    assert "`src/foo.ts` (edited)" in section(memory.body, "Files changed")
    assert "`npm test`" in section(memory.body, "Commands run")
    assert "all tests pass" in section(memory.body, "Final answer")


@needs_fixtures
def test_gemini_hook_events(home: Path, project: Path) -> None:
    for event in ("SessionStart", "BeforeAgent", "AfterTool", "SessionEnd"):
        payload = fixture_json(f"hooks/gemini_cli/{event}.stdin.json", cwd=str(project))
        assert capture(home, "gemini", payload) == "{}\n"  # Gemini parses stdout as JSON
    memory = only_memory(home)
    assert memory.slug == "session-gemini-8c2f0d4e-6b1a-4f3c-9e7d-2a5b8c1d0e3f"
    assert "Add a test for the parser." in section(memory.body, "Asked")
    assert "`pytest -q`" in section(memory.body, "Commands run")
    assert memory.meta.created_at == datetime(2026, 5, 18, 22, 30, 20, tzinfo=UTC)


def test_gemini_reads_its_chat_file(home: Path, project: Path, tmp_path: Path) -> None:
    chat = {
        "sessionId": "g-1",
        "projectHash": "abc",
        "startTime": "2026-05-18T22:30:12.000Z",
        "lastUpdated": "2026-05-18T22:35:00.000Z",
        "messages": [
            {
                "id": "1",
                "type": "user",
                "timestamp": "2026-05-18T22:30:12.000Z",
                "content": "Switch the cache from Redis to SQLite.",
            },
            {
                "id": "2",
                "type": "gemini",
                "timestamp": "2026-05-18T22:31:00.000Z",
                "content": "Done: we use SQLite instead of Redis because it needs no server.",
                "toolCalls": [
                    {
                        "id": "t",
                        "name": "write_file",
                        "status": "success",
                        "args": {"file_path": str(project / "cache.py")},
                    }
                ],
            },
        ],
    }
    path = tmp_path / "session-g-1.json"
    path.write_text(json.dumps(chat))
    capture(
        home,
        "gemini",
        {
            "session_id": "g-1",
            "transcript_path": str(path),
            "cwd": str(project),
            "hook_event_name": "SessionEnd",
        },
    )
    body = only_memory(home).body
    assert "SQLite instead of Redis" in section(body, "Decided / concluded")
    assert "`cache.py` (written)" in section(body, "Files changed")


@needs_fixtures
def test_copilot_sessions_start_at_session_start(home: Path, project: Path) -> None:
    start = fixture_json("hooks/copilot_cli/sessionStart.stdin.json", cwd=str(project))
    tool = fixture_json("hooks/copilot_cli/postToolUse.stdin.json", cwd=str(project))
    for payload in (start, tool):
        assert capture(home, "copilot", payload) == ""
    capture(home, "copilot", {"timestamp": 1704614800000, "cwd": str(project)})  # agentStop
    memory = only_memory(home)
    assert "Create a new feature" in section(memory.body, "Asked")
    assert "`npm test`" in section(memory.body, "Commands run")
    # The next sessionStart in the scope is another session.
    capture(
        home,
        "copilot",
        dict(start, timestamp=1704700000000, initialPrompt="Add docs to the API module"),
    )
    capture(home, "copilot", dict(tool, timestamp=1704700001000))
    capture(home, "copilot", {"timestamp": 1704700002000, "cwd": str(project), "reason": "exit"})
    assert len(session_files(home)) == 2


def test_manual_capture_of_plain_text(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    text = "We decided to use uv instead of pip because it resolves faster.\n" * 4
    capture(home, "manual", text)
    capture(home, "manual", text)  # the same text again is the same memory
    memory = only_memory(home)
    assert memory.meta.scope_hash == resolve_scope(project).scope_hash
    assert section(memory.body, "Notes").count("uv instead of pip") == 4


# -- re-capture -------------------------------------------------------------------------------
def test_recapture_updates_the_same_file_and_keeps_foreign_fields(
    home: Path, project: Path, tmp_path: Path
) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-1", str(project))
    transcript.prompt("Migrate the settings loader to pydantic-settings.")
    transcript.tool("Edit", {"file_path": str(project / "src/settings.py")}, "ok")
    transcript.say("Done: the loader uses pydantic-settings because it reads env vars natively.")
    capture(home, "claude-code", transcript.payload("PreCompact"))
    first = only_memory(home)
    assert first.path is not None
    # Something else (recall, a person) changes the file between captures.
    text = first.path.read_text(encoding="utf-8")
    text = text.replace("recall_count: 0", "recall_count: 3").replace(
        "tags: [session, claude-code, py]", "tags: [session, claude-code, py, keep-me]"
    )
    text = text.replace("---\n\n", "note: written by hand\n---\n\n", 1)
    first.path.write_text(text, encoding="utf-8")

    transcript.prompt("Now add a test for the env override.")
    transcript.tool("Write", {"file_path": str(project / "tests/test_settings.py")}, "ok")
    transcript.say("Added tests/test_settings.py.")
    capture(home, "claude-code", transcript.payload("Stop"))
    capture(home, "claude-code", transcript.payload("SessionEnd", reason="other"))
    second = only_memory(home)
    assert second.path == first.path
    assert second.meta.created_at == first.meta.created_at
    assert second.meta.recall_count == 3
    assert "keep-me" in second.meta.tags
    assert (second.meta.model_extra or {})["note"] == "written by hand"
    assert "Now add a test for the env override." in section(second.body, "Asked")
    assert "`tests/test_settings.py` (written)" in section(second.body, "Files changed")
    assert render(second) == second.path.read_text(encoding="utf-8")


def test_unchanged_recapture_does_not_rewrite(home: Path, project: Path, tmp_path: Path) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-2", str(project))
    transcript.prompt("Explain why the importer rejects ISO timestamps in created_at fields.")
    transcript.say("Because v5 exports store created_at as float epoch seconds, not ISO strings.")
    capture(home, "claude-code", transcript.payload())
    path = session_files(home)[0]
    before = path.stat().st_mtime_ns
    request = home / "inbox" / f"{path.stem}.json"
    request.unlink()
    capture(home, "claude-code", transcript.payload("SessionEnd"))
    assert path.stat().st_mtime_ns == before
    assert request.exists()  # handed over again all the same: the drain decides


def test_a_session_stays_in_its_first_scope(
    home: Path, project: Path, other_project: Path, tmp_path: Path
) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-3", str(project))
    transcript.prompt("Set up the release workflow for the package and the docs.")
    transcript.tool("Bash", {"command": "gh workflow run release"}, "ok")
    capture(home, "claude-code", transcript.payload())
    capture(home, "claude-code", transcript.payload(cwd=str(other_project)))  # the user cd'ed
    memory = only_memory(home)
    assert memory.meta.scope_hash == resolve_scope(project).scope_hash


# -- noise ------------------------------------------------------------------------------------
def test_trivial_sessions_are_skipped(home: Path, project: Path, tmp_path: Path) -> None:
    hello = ClaudeTranscript(tmp_path / "hello.jsonl", "sess-hello", str(project))
    hello.prompt("hi")
    hello.say("Hello! How can I help?")
    capture(home, "claude-code", hello.payload())
    silent = ClaudeTranscript(tmp_path / "silent.jsonl", "sess-silent", str(project))
    silent.say("Ready when you are. I can read the code base and run the tests for you.")
    capture(home, "claude-code", silent.payload())
    assert session_files(home) == []
    assert failed_entries(home) == []
    log = (home / "logs" / "capture.log").read_text()
    assert log.count("skipped") == 2
    assert "trivial session" in log


def test_min_chars_is_configurable(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_CAPTURE__MIN_CHARS", "10")
    hello = ClaudeTranscript(tmp_path / "hello.jsonl", "sess-hello", str(project))
    hello.prompt("hi")
    hello.say("Hello! How can I help?")
    capture(home, "claude-code", hello.payload())
    assert len(session_files(home)) == 1


def test_memoryds_own_calls_and_context_are_left_out(
    home: Path, project: Path, tmp_path: Path
) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-own", str(project))
    transcript.prompt(
        "<memoryd-context>RECALLED-NOTE-xyz about old decisions</memoryd-context>\n"
        "Fix the flaky retry test in the HTTP client."
    )
    transcript.tool("mcp__memoryd__recall", {"query": "flaky retry"}, "RECALLED-NOTE-abc")
    transcript.tool("Bash", {"command": "memoryd search 'retry backoff'"}, "RECALLED-NOTE-def")
    transcript.tool("Bash", {"command": "uv run memoryd list"}, "RECALLED-NOTE-ghi")
    transcript.tool("Bash", {"command": "pytest tests/test_http.py -q"}, "3 passed")
    transcript.say("Fixed: the test now waits for the backoff because the clock was mocked.")
    capture(home, "claude-code", transcript.payload())
    body = only_memory(home).body
    assert "RECALLED-NOTE" not in body
    assert "memoryd" not in body
    assert "`pytest tests/test_http.py -q`" in section(body, "Commands run")
    assert "1 tool call (Bash 1)" in body
    assert "Fix the flaky retry test" in section(body, "Asked")


def test_bulk_output_and_large_sessions_are_capped(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_CAPTURE__MAX_BODY_BYTES", "8192")
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-big", str(project))
    for n in range(120):
        transcript.prompt(f"Step {n}: make module_{n} pass its tests. " + "context " * 80)
        transcript.tool(
            "Bash", {"command": f"pytest tests/test_module_{n}.py"}, "BULK-OUTPUT " * 2000
        )
        transcript.tool("Edit", {"file_path": str(project / f"src/module_{n}.py")}, "ok")
        transcript.say(f"Module {n} fixed because the import order was wrong.")
    transcript.say("FINAL-START " + "detail " * 20000 + " FINAL-END")
    capture(home, "claude-code", transcript.payload())
    memory = only_memory(home)
    body = memory.body
    assert len(body.encode("utf-8")) <= 8192
    assert "BULK-OUTPUT" not in body
    assert "more prompts" in section(body, "Asked")
    assert "more commands" in section(body, "Commands run")
    assert "Module 119 fixed" in section(body, "Along the way")
    assert "more messages" in section(body, "Along the way")
    final = section(body, "Final answer")
    assert "FINAL-START" in final
    assert "FINAL-END" in final
    assert "characters skipped" in final
    assert "120 prompts" in body


def test_the_middle_of_a_session_is_kept_with_what_its_tools_did(
    home: Path, project: Path, tmp_path: Path
) -> None:
    """The agent's messages between the first prompt and the final answer hold the decisions,
    file names and versions a later session needs; each keeps the work it led to."""
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-middle", str(project))
    transcript.prompt("Set up the shop API.")
    transcript.say("I'll pin FastAPI 0.115.2 and keep the user model in app/models/user.py.")
    transcript.tool("Edit", {"file_path": str(project / "app/models/user.py")}, "ok")
    transcript.tool("Bash", {"command": "alembic revision --autogenerate -m users"}, "done")
    transcript.tool("Bash", {"command": "memoryd search 'alembic'"}, "RECALLED-NOTE")
    transcript.prompt("Add caching for products.")
    transcript.say("Redis 7.2 caches product pages for ten minutes under products:{id}.")
    transcript.tool("Write", {"file_path": str(project / "app/cache.py")}, "ok")
    transcript.tool("Bash", {"command": "pytest tests/test_cache.py"}, "1 failed", error=True)
    transcript.say("Done: product pages are cached.")
    capture(home, "claude-code", transcript.payload())
    body = only_memory(home).body
    along = section(body, "Along the way")
    assert along.index("FastAPI 0.115.2") < along.index("Redis 7.2") < len(along)
    assert "edited `app/models/user.py`; ran `alembic revision --autogenerate -m users`" in along
    assert "written `app/cache.py`; ran `pytest tests/test_cache.py` (failed)" in along
    assert "memoryd" not in body
    assert "Done: product pages are cached." not in along
    assert "Done: product pages are cached." in section(body, "Final answer")


# -- formats shared with the vault ------------------------------------------------------------
def test_a_fresh_file_renders_exactly_as_the_vault_would(
    home: Path, project: Path, tmp_path: Path
) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "weird:id/with spaces#1", str(project))
    transcript.prompt('Rename "yes" to `no` # and keep: colons, quotes "…" and 中文 titles')
    transcript.tool("Edit", {"file_path": str(project / "src/a b.py")}, "ok")
    capture(home, "claude-code", transcript.payload())
    path = session_files(home)[0]
    text = path.read_text(encoding="utf-8")
    memory = parse(text, path)
    assert render(memory) == text
    assert SLUG_RE.match(memory.slug)


def test_scalars_match_the_vault_writer() -> None:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + " ./()+-_:#'\"\\\n\t" + "éü中文😀ª²"
    samples = ["", "yes", "No", "null", "a #b", "a ", "/path", "2026-01-01", "x:y", "tests/a.py"]
    samples += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(3000)
    ]
    for sample in samples:
        if sample.endswith("\n"):
            continue  # the vault's regex `$` treats a trailing newline as plain; capture quotes it
        assert memfile.scalar(sample) == _scalar(sample), repr(sample)
    for value in (None, True, False, 0, 90):
        assert memfile.scalar(value) == _scalar(value)


def test_session_ttl_matches_the_model() -> None:
    assert MemoryType.SESSION.default_ttl_days == memfile.SESSION_TTL_DAYS


def test_slugs_are_stable_and_safe() -> None:
    for agent, session_id in [
        ("claude-code", "5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f"),
        ("openclaw", "agent:main:telegram:group:-100123"),
        ("copilot", "x" * 300),
        ("manual", "...."),
    ]:
        slug = memfile.session_slug(agent, session_id)
        assert memfile.session_slug(agent, session_id) == slug
        assert SLUG_RE.match(slug), slug
    assert memfile.session_slug("a", "x/y") != memfile.session_slug("a", "x:y")


def test_scope_matches_resolve_scope(project: Path, tmp_path: Path) -> None:
    for directory in (project, project / "src", tmp_path):
        ref = memfile.scope_of(str(directory))
        info = resolve_scope(directory)
        assert (ref.scope_hash, ref.path) == (info.scope_hash, info.path)
    gone = "/no/such/dir/anywhere"
    assert memfile.scope_of(gone).scope_hash == memfile.hash_path(gone)


def test_capture_settings_agree_with_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CaptureSettings().model_dump() == CaptureLimits()._asdict()
    for name, info in CaptureSettings.model_fields.items():
        bounds = [m.ge for m in info.metadata if hasattr(m, "ge")]
        assert bounds == ([MINIMUMS[name]] if name in MINIMUMS else []), name
    config = tmp_path / "config.toml"
    config.write_text("[capture]\nmax_body_bytes = 4096\nmin_chars = 99\nbudget_ms = 300\n")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    monkeypatch.setenv("MEMORYD_CAPTURE__MIN_CHARS", "50")
    monkeypatch.setenv("MEMORYD_CAPTURE__REDACT_HIGH_ENTROPY", "false")
    monkeypatch.delenv("MEMORYD_CAPTURE__BUDGET_MS")
    monkeypatch.setenv("MEMORYD_HOME", str(tmp_path / "h"))
    fast = load_capture_config()
    full = load_settings()
    assert fast.limits._asdict() == full.capture.model_dump()
    assert fast.limits.min_chars == 50
    assert fast.limits.max_body_bytes == 4096
    assert fast.home == full.home == tmp_path / "h"


def test_bad_capture_settings_fall_back_to_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_CAPTURE__MAX_BODY_BYTES", "12")  # below the minimum
    monkeypatch.setenv("MEMORYD_CAPTURE__MIN_CHARS", "lots")
    config = load_capture_config()
    assert config.limits.max_body_bytes == CaptureLimits().max_body_bytes
    assert config.limits.min_chars == CaptureLimits().min_chars
    assert len(config.problems) == 2


def test_sensitive_scopes_are_not_captured(home: Path, project: Path, tmp_path: Path) -> None:
    scope = resolve_scope(project)
    scope_file = home / "scopes" / scope.scope_hash / "scope.json"
    scope_file.parent.mkdir(parents=True)
    scope_file.write_text(json.dumps({"scope_hash": scope.scope_hash, "sensitive": True}))
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-s", str(project))
    transcript.prompt("Rotate the production database credentials and update the vault.")
    transcript.tool("Bash", {"command": "vault kv put secret/db"}, "ok")
    capture(home, "claude-code", transcript.payload())
    assert session_files(home) == []
    assert failed_entries(home) == []
    assert "Rotate" not in (home / "logs" / "capture.log").read_text()


def test_a_subagents_answer_is_not_the_sessions_final_answer(
    home: Path, project: Path, tmp_path: Path
) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-sub", str(project))
    transcript.prompt("Audit the dependencies and upgrade what is safe to upgrade.")
    transcript.tool("Bash", {"command": "uv lock --upgrade"}, "ok")
    transcript.say("Upgraded 4 packages; httpx stays pinned because 0.29 breaks the proxy API.")
    capture(home, "claude-code", transcript.payload("Stop"))
    sub = transcript.payload("SubagentStop", last_assistant_message="SUBAGENT: scanned 120 files")
    capture(home, "claude-code", sub)
    final = section(only_memory(home).body, "Final answer")
    assert "httpx stays pinned" in final
    assert "SUBAGENT" not in final


def test_no_update_into_a_scope_that_became_sensitive(
    home: Path, project: Path, other_project: Path, tmp_path: Path
) -> None:
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-moved", str(project))
    transcript.prompt("Add the billing export job and schedule it nightly.")
    transcript.tool("Write", {"file_path": str(project / "jobs/billing.py")}, "ok")
    capture(home, "claude-code", transcript.payload())
    path = session_files(home)[0]
    before = path.read_text()
    scope_file = path.parent.parent / "scope.json"
    scope_file.write_text(json.dumps({**json.loads(scope_file.read_text()), "sensitive": True}))
    transcript.prompt("Now include the customer card numbers in the export.")
    capture(home, "claude-code", transcript.payload(cwd=str(other_project)))
    assert path.read_text() == before
    assert "card numbers" not in "".join(p.read_text() for p in session_files(home))


def test_journals_keep_what_a_summary_needs_not_file_contents(home: Path, project: Path) -> None:
    """Without a readable transcript, hook events are journaled: paths and commands, not the
    content a Write carried nor more than the start and end of a tool's output."""
    base = {"session_id": "sess-j", "transcript_path": None, "cwd": str(project)}
    capture(
        home,
        "claude-code",
        dict(
            base,
            hook_event_name="UserPromptSubmit",
            prompt="Generate the fixtures for the parser tests.",
        ),
    )
    capture(
        home,
        "claude-code",
        dict(
            base,
            hook_event_name="PostToolUse",
            tool_name="Write",
            tool_input={"file_path": str(project / "fx.json"), "content": "FILE-CONTENT " * 5000},
            tool_response={"success": True},
        ),
    )
    capture(
        home,
        "claude-code",
        dict(
            base,
            hook_event_name="PostToolUse",
            tool_name="Bash",
            tool_input={"command": "make fixtures"},
            tool_response={"stdout": "HEAD " + "noise " * 9000 + " TAIL"},
        ),
    )
    [journal] = (home / "inbox" / "sessions").glob("claude-code-*.jsonl")
    text = journal.read_text()
    assert "FILE-CONTENT" not in text
    assert "HEAD" in text
    assert "TAIL" in text
    assert len(text) < 8000
    capture(
        home,
        "claude-code",
        dict(base, hook_event_name="Stop", last_assistant_message="Fixtures generated in fx.json."),
    )
    body = only_memory(home).body
    assert "`fx.json` (written)" in section(body, "Files changed")
    assert "`make fixtures`" in section(body, "Commands run")
    assert "Fixtures generated in fx.json." in section(body, "Final answer")
