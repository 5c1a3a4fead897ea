"""Each agent's hook payload: session id, scope, session file, events, and the stdout it expects.

Verified shapes are in interop/FORMATS.md. Per source — session id; scope from; session file;
the events that (re)write the memory:

* claude-code — `session_id`; `cwd`; `transcript_path` (JSONL); Stop, SubagentStop,
  PreCompact, PostCompact, SessionEnd.
* codex (hooks) — `session_id`; `cwd`; `transcript_path` (rollout); Stop, PreCompact,
  PostCompact. Legacy notify (JSON as the last argument) — `thread-id`; `cwd`; the rollout found
  under `$CODEX_HOME/sessions`; every agent-turn-complete.
* codex-rollout — the rollout's `session_meta`; its `cwd`; the path given; every call.
* openclaw — the session header's `id`; its `cwd`; the path given (argument, `sessionFile`,
  or `agentId` + `sessionId` under `$OPENCLAW_STATE_DIR`); every call.
* cursor — `conversation_id`; `workspace_roots[0]`; none (journal); stop, sessionEnd, preCompact.
* windsurf — `trajectory_id`; `tool_info.cwd`, else the touched files' git toplevel; none
  (journal); post_cascade_response.
* gemini — `session_id`; `cwd`; `transcript_path` (chat JSON; unverified format, journal when
  unreadable); AfterAgent, PreCompress, SessionEnd.
* copilot — none sent: one session per sessionStart and scope; `cwd`; none (journal);
  agentStop, sessionEnd.
* specstory — the file's name (a SpecStory history, `.specstory/history/*.md`); `cwd`, else
  the project holding `.specstory/`; the path given; every call.
* manual — `session_id`, else a hash of the input; `cwd`, else here; optional
  `transcript_path` (format sniffed); every call.

Events that do not write the memory are appended to the session's journal when the agent has
no readable session file, so the memory written later still holds them.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.capture.transcripts import sniff
from memoryd.redact import redact_excerpt
from memoryd.sessions.session import as_mapping, parse_ts, text_of

SOURCES = (
    "claude-code",
    "codex",
    "codex-rollout",
    "openclaw",
    "cursor",
    "windsurf",
    "gemini",
    "copilot",
    "specstory",
    "manual",
)
AGENT_OF_SOURCE = {source: source for source in SOURCES} | {"codex-rollout": "codex"}
AGENT_NAMES = {
    "claude-code": "Claude Code",
    "codex": "Codex",
    "openclaw": "OpenClaw",
    "cursor": "Cursor",
    "windsurf": "Windsurf",
    "gemini": "Gemini CLI",
    "copilot": "Copilot CLI",
    "specstory": "SpecStory",
    "manual": "Manual",
}
RENDER_EVENTS = {
    "claude-code": {"", "Stop", "SubagentStop", "PreCompact", "PostCompact", "SessionEnd"},
    "codex": {"", "Stop", "SubagentStop", "PreCompact", "PostCompact", "agent-turn-complete"},
    "cursor": {"", "stop", "sessionEnd", "preCompact"},
    "windsurf": {"", "post_cascade_response"},
    "gemini": {"", "AfterAgent", "PreCompress", "SessionEnd"},
    "copilot": {"", "agentStop", "sessionEnd"},
}
TOOL_OUTPUT_CHARS = 2000
"""Tool output kept in a journal event: enough for the first error lines, never bulk output."""


class InvalidPayload(Exception):
    """The hook payload is not what the agent documents (bad JSON, wrong shape)."""


class HookInput:
    """What one hook call says about its session."""

    __slots__ = (
        "agent",
        "cwd",
        "event",
        "events",
        "file_expected",
        "file_format",
        "final",
        "journaled",
        "model",
        "render",
        "session_file",
        "session_id",
        "source",
        "title",
        "ts",
    )

    def __init__(self, source: str, agent: str) -> None:
        self.source = source
        self.agent = agent
        self.event = ""
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.session_file: Path | None = None
        self.file_format: str | None = None
        self.file_expected = False
        """The payload named a session file: if it is missing, the capture is retried later."""
        self.render = True
        self.events: list[dict[str, Any]] = []
        self.final: str | None = None
        self.model: str | None = None
        self.ts: datetime | None = None
        self.title: str | None = None
        self.journaled = False
        """Set by the hook: this session's events are in a sealed journal (sensitive scope),
        so whoever holds the scope's key assembles the session from it."""


def _load_json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidPayload(f"the hook payload is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise InvalidPayload("the hook payload is not a JSON object")
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _path(value: Any) -> Path | None:
    text = _str(value)
    return Path(text).expanduser() if text else None


def _stringify(value: Any) -> str:
    """A tool response as text: Claude's Bash `{stdout, stderr}`, Gemini's `llmContent` …"""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for keys in (("stdout", "stderr"), ("llmContent",), ("textResultForLlm",), ("output",)):
            parts = [value[k] for k in keys if isinstance(value.get(k), str) and value[k]]
            if parts:
                return "\n".join(parts)
        if isinstance(value.get("error"), str | dict):
            return _stringify(value["error"])
    if isinstance(value, list):
        return text_of(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


_INPUT_KEYS = frozenset(
    {
        "file_path",
        "filePath",
        "path",
        "notebook_path",
        "target_file",
        "file",
        "command",
        "cmd",
        "command_line",
        "commandLine",
        "script",
        "input",
        "patch",
        "description",
        "query",
        "url",
    }
)
_INPUT_CHARS = 2000


def _slim_input(value: Any) -> dict[str, Any]:
    """The parts of a tool input a summary uses (paths, commands, patch headers), bounded.

    A `Write` call's file content or an `Edit`'s new text is never journaled.
    """
    slim: dict[str, Any] = {}
    for key, item in as_mapping(value).items():
        if key not in _INPUT_KEYS:
            continue
        if isinstance(item, str) and "*** Begin Patch" in item:
            item = "\n".join(ln for ln in item.splitlines() if ln.startswith("*** "))
        if isinstance(item, str):
            slim[key] = redact_excerpt(item, _INPUT_CHARS, 0)
        elif isinstance(item, list) and all(isinstance(v, str) for v in item):
            slim[key] = [redact_excerpt(v, _INPUT_CHARS, 0) for v in item[:50]]
    return slim


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """One journal event; `tool` events carry name, input, output, error, exit_code, server.

    Long texts keep their start and end (`redact_excerpt`: redacted before being cut, so a
    secret is never half-kept); `Journal.append` redacts the whole event again.
    """
    half = TOOL_OUTPUT_CHARS // 2
    if "output" in fields:
        fields["output"] = redact_excerpt(_stringify(fields["output"]), half, half)
    if "input" in fields:
        fields["input"] = _slim_input(fields["input"])
    if isinstance(fields.get("text"), str):
        fields["text"] = redact_excerpt(fields["text"], 50_000, 10_000)
    return {"kind": kind, **{k: v for k, v in fields.items() if v not in (None, "", {}, [])}}


# -- per agent ---------------------------------------------------------------------------------
def _claude_like(hook: HookInput, payload: dict[str, Any]) -> None:
    """Claude Code, and Codex's Claude-compatible hooks (same field names)."""
    hook.event = str(payload.get("hook_event_name") or payload.get("hookEventName") or "")
    hook.session_id = _str(payload.get("session_id")) or _str(payload.get("sessionId"))
    hook.cwd = _str(payload.get("cwd"))
    hook.session_file = _path(payload.get("transcript_path"))
    hook.file_format = "claude" if hook.agent == "claude-code" else "codex"
    hook.file_expected = hook.session_file is not None
    hook.model = _str(payload.get("model"))
    name = hook.event
    if name == "UserPromptSubmit":
        hook.events.append(event("prompt", text=payload.get("prompt")))
    elif name in ("PostToolUse", "PostToolUseFailure"):
        failed = name == "PostToolUseFailure"
        hook.events.append(
            event(
                "tool",
                name=payload.get("tool_name"),
                input=as_mapping(payload.get("tool_input")),
                output=payload.get("error") if failed else payload.get("tool_response"),
                error=failed or None,
            )
        )
    elif name == "Stop":
        hook.final = _str(payload.get("last_assistant_message"))
        hook.events.append(event("final", text=hook.final))
    elif name == "SubagentStop":  # a subagent's answer, not the session's
        hook.events.append(event("assistant", text=payload.get("last_assistant_message")))
    elif name == "PostCompact":
        hook.events.append(event("compact", text=payload.get("compact_summary")))


def _codex(hook: HookInput, payload: dict[str, Any]) -> None:
    if payload.get("type") != "agent-turn-complete":
        _claude_like(hook, payload)
        return
    hook.event = "agent-turn-complete"
    hook.session_id = _str(payload.get("thread-id"))
    hook.cwd = _str(payload.get("cwd"))
    for message in payload.get("input-messages") or []:
        hook.events.append(event("prompt", text=message))
    hook.final = _str(payload.get("last-assistant-message"))
    hook.events.append(event("final", text=hook.final))
    if hook.session_id:
        hook.session_file = find_codex_rollout(hook.session_id)
        hook.file_format = "codex"


def find_codex_rollout(thread_id: str) -> Path | None:
    """The rollout file of a Codex thread, under `$CODEX_HOME/sessions/YYYY/MM/DD/`."""
    home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    sessions = home / "sessions"
    if not sessions.is_dir() or "/" in thread_id or "*" in thread_id:
        return None
    found = sorted(sessions.glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    return found[-1] if found else None


def _cursor(hook: HookInput, payload: dict[str, Any]) -> None:
    hook.event = str(payload.get("hook_event_name") or "")
    hook.session_id = _str(payload.get("conversation_id")) or _str(payload.get("session_id"))
    roots = payload.get("workspace_roots")
    hook.cwd = (_str(roots[0]) if isinstance(roots, list) and roots else None) or _str(
        payload.get("cwd")
    )
    hook.model = _str(payload.get("model"))
    name = hook.event
    if name == "beforeSubmitPrompt":
        hook.events.append(event("prompt", text=payload.get("prompt")))
    elif name == "afterFileEdit":
        hook.events.append(
            event("tool", name="edit", input={"file_path": payload.get("file_path")})
        )
    elif name == "afterShellExecution":
        hook.events.append(
            event(
                "tool",
                name="shell",
                input={"command": payload.get("command")},
                output=payload.get("output"),
            )
        )
    elif name in ("afterMCPExecution", "postToolUse", "postToolUseFailure"):
        hook.events.append(
            event(
                "tool",
                name=payload.get("tool_name"),
                input=as_mapping(payload.get("tool_input")),
                output=payload.get("result_json") or payload.get("tool_output"),
                error=(name == "postToolUseFailure") or None,
            )
        )
    elif name == "afterAgentResponse":
        hook.events.append(event("assistant", text=payload.get("text")))


def _windsurf(hook: HookInput, payload: dict[str, Any]) -> None:
    hook.event = str(payload.get("agent_action_name") or "")
    hook.session_id = _str(payload.get("trajectory_id"))
    info = _mapping(payload.get("tool_info"))
    hook.cwd = _str(info.get("cwd"))
    name = hook.event
    if name == "pre_user_prompt":
        hook.events.append(event("prompt", text=info.get("user_prompt")))
    elif name == "post_write_code":
        hook.events.append(
            event("tool", name="write_code", input={"file_path": info.get("file_path")})
        )
    elif name == "post_run_command":
        hook.events.append(
            event(
                "tool",
                name="shell",
                input={"command": info.get("command_line")},
                output=info.get("output"),
                exit_code=info.get("exit_code") if isinstance(info.get("exit_code"), int) else None,
                cwd=hook.cwd,
            )
        )
    elif name == "post_mcp_tool_use":
        hook.events.append(
            event(
                "tool",
                name=info.get("mcp_tool_name"),
                server=info.get("mcp_server_name"),
                input=as_mapping(info.get("mcp_tool_arguments")),
                output=info.get("mcp_result"),
            )
        )
    elif name == "post_cascade_response":
        hook.final = _str(info.get("response"))
        hook.events.append(event("final", text=hook.final))


def _gemini(hook: HookInput, payload: dict[str, Any]) -> None:
    hook.event = str(payload.get("hook_event_name") or "")
    hook.session_id = _str(payload.get("session_id"))
    hook.cwd = _str(payload.get("cwd"))
    hook.session_file = _path(payload.get("transcript_path"))
    hook.file_format = "gemini"
    name = hook.event
    if name in ("BeforeAgent", "AfterAgent"):
        hook.events.append(event("prompt", text=payload.get("prompt")))
    if name == "AfterAgent":
        hook.final = _str(payload.get("prompt_response"))
        hook.events.append(event("final", text=hook.final))
    elif name == "AfterTool":
        response = payload.get("tool_response")
        context = _mapping(payload.get("mcp_context"))
        hook.events.append(
            event(
                "tool",
                name=payload.get("tool_name"),
                server=context.get("server_name"),
                input=as_mapping(payload.get("tool_input")),
                output=response,
                error=bool(isinstance(response, dict) and response.get("error")) or None,
            )
        )


def copilot_event(payload: dict[str, Any]) -> str:
    """Copilot sends no event name: infer it from the fields (as memorix does)."""
    if "initialPrompt" in payload or ("source" in payload and "toolName" not in payload):
        return "sessionStart"
    if "reason" in payload:
        return "sessionEnd"
    if "prompt" in payload:
        return "userPromptSubmitted"
    if "toolName" in payload:
        return "postToolUse" if "toolResult" in payload else "preToolUse"
    if "error" in payload:
        return "errorOccurred"
    return "agentStop"


def _copilot(hook: HookInput, payload: dict[str, Any]) -> None:
    hook.event = copilot_event(payload)
    hook.cwd = _str(payload.get("cwd"))
    name = hook.event
    if name == "sessionStart":
        hook.events.append(event("prompt", text=payload.get("initialPrompt")))
    elif name == "userPromptSubmitted":
        hook.events.append(event("prompt", text=payload.get("prompt")))
    elif name == "postToolUse":
        result = _mapping(payload.get("toolResult"))
        hook.events.append(
            event(
                "tool",
                name=payload.get("toolName"),
                input=as_mapping(payload.get("toolArgs")),
                output=result.get("textResultForLlm"),
                error=result.get("resultType") in ("failure", "denied") or None,
            )
        )
    elif name == "errorOccurred":
        hook.events.append(event("error", text=_stringify(payload.get("error"))))


_FILE_KEYS = ("transcript_path", "rollout_path", "session_file", "sessionFile", "path", "file")


def _session_file(hook: HookInput, payload: dict[str, Any], arg: str | None) -> None:
    """codex-rollout, openclaw, specstory: the session file is the argument, or named in the
    payload."""
    path = _path(arg) if arg and not arg.lstrip().startswith("{") else None
    for key in _FILE_KEYS:
        path = path or _path(payload.get(key))
    if path is None and hook.agent == "openclaw":
        agent_id, session_id = _str(payload.get("agentId")), _str(payload.get("sessionId"))
        if agent_id and session_id:
            state = Path(os.environ.get("OPENCLAW_STATE_DIR") or Path.home() / ".openclaw")
            path = state / "agents" / agent_id / "sessions" / f"{session_id}.jsonl"
    if path is None:
        raise InvalidPayload(f"--source={hook.source} needs the session file (argument or path)")
    hook.session_file = path
    hook.file_format = {"codex": "codex", "specstory": "specstory"}.get(hook.agent, "openclaw")
    hook.file_expected = True
    hook.cwd = _str(payload.get("cwd"))
    hook.session_id = _str(payload.get("session_id")) or _str(payload.get("sessionId"))
    if hook.agent == "specstory":
        # One memory per history file: SpecStory can write one chat id into two files.
        hook.session_id = hook.session_id or path.stem
        history = path.resolve().parent
        if hook.cwd is None and history.name == "history" and history.parent.name == ".specstory":
            hook.cwd = str(history.parent.parent)


def _manual(hook: HookInput, payload: dict[str, Any], raw: str) -> None:
    hook.session_id = _str(payload.get("session_id")) or _str(payload.get("sessionId"))
    hook.cwd = _str(payload.get("cwd"))
    hook.title = _str(payload.get("title"))
    path = next((p for p in (_path(payload.get(k)) for k in _FILE_KEYS) if p), None)
    if path is not None:
        hook.session_file, hook.file_format, hook.file_expected = path, sniff(path), True
    prompts = payload.get("prompts") or payload.get("prompt") or []
    for prompt in [prompts] if isinstance(prompts, str) else prompts:
        hook.events.append(event("prompt", text=prompt))
    notes = payload.get("text") or payload.get("summary") or payload.get("body")
    if not payload and raw.strip():
        notes = raw
    hook.events.append(event("note", text=notes))
    hook.final = _str(payload.get("final_answer")) or _str(payload.get("final"))
    hook.events.append(event("final", text=hook.final))
    if hook.session_id is None:
        hook.session_id = hashlib.sha1(raw.encode("utf-8", "replace")).hexdigest()[:16]


_PARSERS = {
    "claude-code": _claude_like,
    "codex": _codex,
    "cursor": _cursor,
    "windsurf": _windsurf,
    "gemini": _gemini,
    "copilot": _copilot,
}


def parse_input(source: str, stdin_text: str, arg: str | None = None) -> HookInput:
    """Read one hook call; raises InvalidPayload when it cannot be understood."""
    if source not in SOURCES:
        raise InvalidPayload(f"unknown --source {source!r} (expected one of {', '.join(SOURCES)})")
    hook = HookInput(source=source, agent=AGENT_OF_SOURCE[source])
    text = arg if arg and arg.lstrip().startswith("{") else stdin_text
    if source == "manual":
        stripped = text.strip()
        payload = _load_json(stripped) if stripped.startswith("{") else {}
        _manual(hook, payload, text)
    elif source in ("codex-rollout", "openclaw", "specstory"):
        payload = _load_json(text) if text.strip() else {}
        _session_file(hook, payload, arg)
    else:
        if not text.strip():
            raise InvalidPayload("no hook payload on stdin")
        payload = _load_json(text)
        _PARSERS[source](hook, payload)
        hook.render = hook.event in RENDER_EVENTS[hook.agent]
    hook.ts = parse_ts(payload.get("timestamp"))
    return hook


def stdout_reply(source: str, stdin_text: str, arg: str | None = None) -> str:
    """What the agent expects on stdout from this hook (FORMATS.md §3.3, §4.1, §5).

    Claude Code, Codex, Windsurf, Copilot and OpenClaw need nothing (empty stdout is success;
    Claude Code would add plain text to the context of some events). Gemini CLI parses stdout
    as JSON on exit 0, so it gets `{}`. Cursor gets `{}`, and `{"continue": true}` for
    `beforeSubmitPrompt`, whose output decides whether the prompt goes through.
    """
    if source == "gemini":
        return "{}"
    if source != "cursor":
        return ""
    try:
        payload = json.loads(arg if arg and arg.lstrip().startswith("{") else stdin_text)
    except ValueError:
        return "{}"
    if isinstance(payload, dict) and payload.get("hook_event_name") == "beforeSubmitPrompt":
        return '{"continue": true}'
    return "{}"
