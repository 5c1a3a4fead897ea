"""`memoryd inject`: recall into the agent at SessionStart / UserPromptSubmit."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from memoryd.capture.inject import HookCall, cut_at_sentence, main, parse_payload, reply
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.daemon_harness import running, uds_client

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "interop" / "fixtures" / "hooks"


def _run(home: Path, source: str, payload: Mapping[str, object], *extra: str) -> str:
    out = io.StringIO()
    stdin = io.BytesIO(json.dumps(payload).encode())
    assert main(["--source", source, "--home", str(home), *extra], stdin=stdin, stdout=out) == 0
    return out.getvalue()


@pytest.fixture
def seeded(svc: MemoryService, project: Path) -> dict[str, str]:
    old = svc.record(
        MemoryDraft(
            type=MemoryType.DECISION,
            title="Frontend uses React",
            body="We use React.",
            scope_path=project,
        )
    )
    new = svc.record(
        MemoryDraft(
            type=MemoryType.DECISION,
            title="Frontend uses Solid, not React",
            body="We chose Solid over React for bundle size. " * 3,
            scope_path=project,
            supersedes=[old.slug],
        )
    )
    pref = svc.record(
        MemoryDraft(
            type=MemoryType.PREFERENCE,
            title="Use uv, not pip",
            body="Always install packages with uv.",
            scope_path=project,
        )
    )
    svc.close()
    return {"old": old.slug, "new": new.slug, "pref": pref.slug}


def test_session_start_claude_code(home: Path, project: Path, seeded: dict[str, str]) -> None:
    raw = _run(home, "claude-code", {"hook_event_name": "SessionStart", "cwd": str(project)})
    data = json.loads(raw)
    assert set(data) == {"hookSpecificOutput"}
    spec = data["hookSpecificOutput"]
    assert spec["hookEventName"] == "SessionStart"
    text = spec["additionalContext"]
    assert seeded["new"] in text
    assert seeded["pref"] in text
    assert seeded["old"] not in text  # superseded


def test_prompt_recall_codex_and_budget(home: Path, project: Path, seeded: dict[str, str]) -> None:
    payload = {
        "hook_event_name": "UserPromptSubmit",
        "cwd": str(project),
        "prompt": "which frontend framework? React?",
    }
    data = json.loads(_run(home, "codex", payload))
    assert set(data["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
    text = data["hookSpecificOutput"]["additionalContext"]
    assert seeded["new"] in text
    assert seeded["old"] not in text
    small = json.loads(_run(home, "codex", payload, "--budget-tokens", "50"))
    assert len(small["hookSpecificOutput"]["additionalContext"]) <= 200


def test_a_blank_prompt_is_no_recall(svc: MemoryService, project: Path) -> None:
    """Recall refuses a blank query (issue 29): choosing context for a blank prompt (as
    `POST /v1/recall/context` may send) answers nothing instead of raising."""
    from memoryd.context import choose

    svc.record(MemoryDraft(type=MemoryType.FACT, title="t", body="b", scope_path=project))
    assert choose(svc, " \n\t ", None, 5) == ([], None)


def test_other_agents(home: Path, project: Path, seeded: dict[str, str]) -> None:
    gem = json.loads(
        _run(
            home,
            "gemini",
            {"hook_event_name": "BeforeAgent", "cwd": str(project), "prompt": "uv or pip?"},
        )
    )
    assert gem["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"
    assert seeded["pref"] in gem["hookSpecificOutput"]["additionalContext"]
    cursor = _run(
        home,
        "cursor",
        {"hook_event_name": "beforeSubmitPrompt", "workspace_roots": [str(project)], "prompt": "x"},
    )
    assert json.loads(cursor) == {"continue": True}
    start = json.loads(
        _run(home, "cursor", {"hook_event_name": "sessionStart", "workspace_roots": [str(project)]})
    )
    assert seeded["pref"] in start["additional_context"]
    assert _run(home, "windsurf", {"agent_action_name": "pre_user_prompt"}) == ""


def test_never_breaks(home: Path) -> None:
    out = io.StringIO()
    assert (
        main(
            ["--source", "claude-code", "--home", str(home)],
            stdin=io.BytesIO(b"{not json"),
            stdout=out,
        )
        == 0
    )
    assert out.getvalue() == ""
    assert main(["--bogus", "--home", str(home)], stdin=io.BytesIO(b""), stdout=out) == 0


def test_fixture_shapes() -> None:
    if not FIXTURES.is_dir():
        pytest.skip(f"interop fixtures not found at {FIXTURES} (../shared is absent)")
    for agent, source in (("claude_code", "claude-code"), ("codex", "codex")):
        stdin = json.loads((FIXTURES / agent / "SessionStart.stdin.json").read_text())
        want = json.loads((FIXTURES / agent / "SessionStart.stdout.json").read_text())
        got = json.loads(reply(source, parse_payload(json.dumps(stdin)), "ctx"))
        assert set(got) == set(want)
        assert set(got["hookSpecificOutput"]) == set(want["hookSpecificOutput"])
    stdin = (FIXTURES / "claude_code" / "UserPromptSubmit.stdin.json").read_text()
    call = parse_payload(stdin)
    assert call.prompt
    assert call.event == "UserPromptSubmit"
    assert parse_payload((FIXTURES / "cursor" / "beforeSubmitPrompt.stdin.json").read_text()).cwd


def test_cut_at_sentence() -> None:
    text = "First sentence here. Second one is longer than that. Third."
    assert cut_at_sentence(text, 30) == "First sentence here."
    assert cut_at_sentence("word " * 50, 40).endswith("…")
    assert reply("windsurf", HookCall(), "x") == ""


def test_subprocess_fast_path(home: Path, project: Path, seeded: dict[str, str]) -> None:
    payload = json.dumps({"hook_event_name": "SessionStart", "cwd": str(project)})
    proc = subprocess.run(
        [sys.executable, "-m", "memoryd", "inject", "--source=claude-code", "--home", str(home)],
        input=payload,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=60,
    )
    assert proc.returncode == 0
    assert seeded["pref"] in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


def test_daemon_fast_path(home: Path, project: Path, seeded: dict[str, str]) -> None:
    """With a daemon, the hook asks it in one request over the socket, loads neither httpx
    nor pydantic (nor http.client and ssl: 40 ms, nor dataclasses and inspect: 8 ms), and
    answers exactly what the in-process recall answers."""
    start = {"hook_event_name": "SessionStart", "cwd": str(project)}
    prompt = {"hook_event_name": "UserPromptSubmit", "cwd": str(project), "prompt": "React?"}
    embedded = [_run(home, "claude-code", payload) for payload in (start, prompt)]
    probe = (
        "import io, json, sys\n"
        "from memoryd.capture.inject import main\n"
        "out = io.StringIO()\n"
        "main(sys.argv[1:], stdin=io.BytesIO(sys.stdin.buffer.read()), stdout=out)\n"
        "light = ('httpx', 'pydantic', 'memoryd.config', 'http.client', 'ssl', 'subprocess',"
        " 'dataclasses', 'inspect', 'random')\n"
        "heavy = sorted(m for m in light if m in sys.modules)\n"
        "print(json.dumps({'out': out.getvalue(), 'heavy': heavy}))\n"
    )
    with running(home) as daemon:
        for payload, want in zip((start, prompt), embedded, strict=True):
            proc = subprocess.run(
                [sys.executable, "-c", probe, "--source=claude-code", "--home", str(home)],
                input=json.dumps(payload),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0, proc.stderr
            answer = json.loads(proc.stdout)
            assert answer["heavy"] == []
            assert answer["out"] == want
        context = json.loads(embedded[1])["hookSpecificOutput"]["additionalContext"]
        assert seeded["new"] in context
        assert seeded["old"] not in context
        with uds_client(home) as client:
            bad = client.post("/v1/recall/context", json={"scope": "not-a-hash"})
            assert bad.status_code == 422
            assert "error" in bad.json()
        assert daemon.log_text().count("Traceback") == 0
