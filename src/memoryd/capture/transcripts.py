"""Readers for the session files agents write (interop/FORMATS.md §3.4, §4.3, §5.3, §5.6).

* Claude Code transcript JSONL (`transcript_path`): user/assistant entries, one content block
  per line, tool results as `user` entries with `tool_result` blocks.
* Codex rollout JSONL: `session_meta`, `response_item`, `event_msg`, `turn_context`, `compacted`.
* OpenClaw (pi-coding-agent) session JSONL: a tree; the active branch ends at the latest leaf.
* Gemini CLI chat JSON: `{sessionId, startTime, messages: [{type, content, toolCalls}]}`.
* SpecStory Markdown histories (`.specstory/history/*.md`): read by `capture.specstory`.

Unknown entry types and fields are ignored; a line that is not JSON is skipped. A file larger
than `max_bytes` is read head and tail only (the middle is counted, not parsed).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memoryd.sessions.session import Session, ToolCall, as_mapping, parse_ts, text_of

logger = logging.getLogger(__name__)

FORMATS = ("claude", "codex", "openclaw", "gemini", "specstory")

_CLAUDE_TAGS = re.compile(
    r"<(system-reminder|local-command-stdout|local-command-stderr|command-message)>.*?</\1>",
    re.DOTALL,
)
_CLAUDE_COMMAND = re.compile(r"<command-name>(.*?)</command-name>", re.DOTALL)
_CLAUDE_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_MEMORYD_BLOCK = re.compile(r"<memoryd[^>]*>.*?</memoryd[^>]*>", re.DOTALL)
_CODEX_SCAFFOLDING = (
    "# AGENTS.md instructions",
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
)
_INTERRUPTED = "[Request interrupted by user"


class TranscriptUnreadable(Exception):
    """The session file is missing or cannot be read."""


def read_jsonl(
    path: Path, max_bytes: int, skip: re.Pattern[bytes] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSONL file and how many bytes in its middle were skipped.

    Lines matching `skip` are not decoded (bulky entries a summary never uses).
    """
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= max_bytes:
                chunks = [handle.read()]
                skipped = 0
            else:
                head = handle.read(max_bytes // 4)
                handle.seek(size - (max_bytes - max_bytes // 4))
                tail = handle.read()
                head = head[: head.rfind(b"\n") + 1]
                tail = tail[tail.find(b"\n") + 1 :]
                chunks = [head, tail]
                skipped = size - len(head) - len(tail)
    except OSError as exc:
        raise TranscriptUnreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
    entries = []
    decode = _decode_fast if sum(map(len, chunks)) > ORJSON_FROM_BYTES else _decode
    for chunk in chunks:
        for line in chunk.split(b"\n"):
            if not line.strip() or (skip is not None and skip.search(line)):
                continue
            entry = decode(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries, skipped


ORJSON_FROM_BYTES = 3 * 1024 * 1024
"""A transcript larger than this is parsed by orjson, a smaller one by the stdlib: importing
orjson loads dataclasses, inspect and uuid, a fixed cost its faster parsing repays only on a
large transcript (the crossing point was measured: bench/RESULTS.md)."""


def _decode(line: bytes) -> Any:
    """One JSON value, or None (no JSON, or nested too deep for the parser)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _decode_fast(line: bytes) -> Any:
    """`_decode` by orjson, much faster on a large transcript; the stdlib takes what orjson
    refuses (NaN, integers beyond 64 bits)."""
    import orjson

    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return _decode(line)


def sniff(path: Path) -> str | None:
    """Which of FORMATS a file is in, from its first lines; None when unknown."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return None
    text = head.decode("utf-8", "replace").lstrip()
    if text.startswith("<!--"):  # an HTML comment: only then is the SpecStory reader loaded
        from memoryd.capture import specstory

        if text.startswith(specstory.MARKER):
            return "specstory"
    if text.startswith("{") and '"messages"' in text and "\n{" not in text[:2000]:
        return "gemini"
    for line in text.splitlines()[:20]:
        if '"type":"session_meta"' in line.replace(" ", "") or '"response_item"' in line:
            return "codex"
        if '"type":"session"' in line.replace(" ", "") and '"version"' in line:
            return "openclaw"
        if '"sessionId"' in line or '"parentUuid"' in line or '"leafUuid"' in line:
            return "claude"
    return None


def read_session_file(path: Path, fmt: str, agent: str, max_bytes: int) -> Session:
    if fmt == "claude":
        return read_claude(path, agent, max_bytes)
    if fmt == "codex":
        return read_codex(path, agent, max_bytes)
    if fmt == "openclaw":
        return read_openclaw(path, agent, max_bytes)
    if fmt == "gemini":
        return read_gemini(path, agent, max_bytes)
    if fmt == "specstory":
        from memoryd.capture import specstory  # a hook on another format never loads it

        try:
            return specstory.read_specstory(path, agent, max_bytes)
        except specstory.SpecStoryUnreadable as exc:
            raise TranscriptUnreadable(str(exc)) from exc
    raise TranscriptUnreadable(f"{path}: unknown session file format {fmt!r}")


def clean_prompt(text: str) -> str:
    """A user prompt without harness scaffolding and memoryd's own injected context."""
    if "<" not in text:
        return text.strip()
    text = _MEMORYD_BLOCK.sub("", text)
    return _CLAUDE_TAGS.sub("", text).strip()


# -- Claude Code ---------------------------------------------------------------------------
def _claude_user(session: Session, entry: dict[str, Any], calls: dict[str, ToolCall]) -> None:
    message = entry.get("message") or {}
    content = message.get("content")
    if entry.get("isCompactSummary"):
        session.compactions.append(text_of(content))
        return
    if entry.get("isMeta"):
        return
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call = calls.get(str(block.get("tool_use_id")))
                if call is not None:
                    call.output = text_of(block.get("content"))
                    call.error = bool(block.get("is_error"))
        if all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return
    text = text_of(content)
    command = _CLAUDE_COMMAND.search(text)
    if command:
        args = _CLAUDE_ARGS.search(text)
        text = f"{command.group(1).strip()} {args.group(1).strip() if args else ''}".strip()
    text = clean_prompt(text)
    if text and not text.startswith(_INTERRUPTED):
        session.add_prompt(text)


def _claude_assistant(session: Session, entry: dict[str, Any], calls: dict[str, ToolCall]) -> None:
    message = entry.get("message") or {}
    if isinstance(message.get("model"), str) and message["model"] != "<synthetic>":
        session.model = message["model"]
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            session.add_assistant(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            call = ToolCall(
                name=str(block.get("name") or "tool"),
                input=as_mapping(block.get("input")),
                call_id=str(block.get("id") or ""),
            )
            calls[call.call_id] = call
            session.tools.append(call)


# Unescaped quotes: these match the entry's own JSON structure, never text quoted inside it.
_CLAUDE_BULK = re.compile(rb'"type":"(?:file-history-snapshot|progress|queue-operation)"')


def read_claude(path: Path, agent: str, max_bytes: int) -> Session:
    entries, skipped = read_jsonl(path, max_bytes, _CLAUDE_BULK)
    session = Session(agent=agent, skipped_bytes=skipped)
    calls: dict[str, ToolCall] = {}
    titles: dict[str, str] = {}
    stamps: list[Any] = []
    for entry in entries:
        kind = entry.get("type")
        if kind in ("summary", "ai-title", "custom-title"):
            title = entry.get("summary") or entry.get("title") or entry.get("customTitle")
            if isinstance(title, str) and title.strip():
                titles[str(kind)] = title.strip()
            continue
        if kind not in ("user", "assistant") or entry.get("isSidechain"):
            continue
        session.session_id = session.session_id or entry.get("sessionId")
        session.cwd = session.cwd or entry.get("cwd")
        session.git_branch = entry.get("gitBranch") or session.git_branch
        if entry.get("timestamp"):
            stamps.append(entry["timestamp"])
        if kind == "user":
            _claude_user(session, entry, calls)
        else:
            _claude_assistant(session, entry, calls)
    if stamps:  # a transcript is appended in time order: its ends bound the session
        session.seen(parse_ts(stamps[0]))
        session.seen(parse_ts(stamps[-1]))
    session.title_hint = (
        titles.get("custom-title") or titles.get("ai-title") or titles.get("summary")
    )
    if session.assistant:
        session.final = session.assistant[-1]
    return session


# -- Codex rollout ---------------------------------------------------------------------------
def _codex_output(raw: Any) -> tuple[str, int | None]:
    """`function_call_output.output`: often JSON `{"output", "metadata": {"exit_code"}}`."""
    if isinstance(raw, list):
        return text_of(raw), None
    text = str(raw or "")
    if text.startswith("{"):
        try:
            decoded = json.loads(text)
        except ValueError:
            return text, None
        if isinstance(decoded, dict):
            meta = decoded.get("metadata") if isinstance(decoded.get("metadata"), dict) else {}
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            return str(decoded.get("output") or ""), code if isinstance(code, int) else None
    return text, None


def _codex_item(session: Session, item: dict[str, Any], calls: dict[str, ToolCall]) -> None:
    kind = item.get("type")
    if kind == "message":
        text = text_of(item.get("content"))
        if item.get("role") == "user":
            if not text.lstrip().startswith(_CODEX_SCAFFOLDING):
                session.add_prompt(clean_prompt(text))
        elif item.get("role") == "assistant":
            session.add_assistant(text)
    elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
        if kind == "function_call":
            mapping = as_mapping(item.get("arguments"))
        elif kind == "custom_tool_call":
            mapping = {"input": item.get("input")}
        else:
            mapping = as_mapping(item.get("action"))
        name = str(item.get("name") or ("local_shell" if kind == "local_shell_call" else "tool"))
        call = ToolCall(name=name, input=mapping, call_id=str(item.get("call_id") or ""))
        calls[call.call_id] = call
        session.tools.append(call)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        done = calls.get(str(item.get("call_id")))
        if done is not None:
            done.output, code = _codex_output(item.get("output"))
            if code is not None:
                done.exit_code = code


def _codex_event(session: Session, event: dict[str, Any], calls: dict[str, ToolCall]) -> None:
    kind = event.get("type")
    if kind == "user_message":
        session.add_prompt(clean_prompt(str(event.get("message") or "")))
    elif kind == "agent_message":
        session.add_assistant(str(event.get("message") or ""))
    elif kind == "task_complete" and isinstance(event.get("last_agent_message"), str):
        session.final = event["last_agent_message"]
    elif kind == "exec_command_end":
        call = calls.get(str(event.get("call_id")))
        code = event.get("exit_code")
        if call is not None and isinstance(code, int):
            call.exit_code = code
            if code != 0 and not call.output:
                call.output = str(event.get("stderr") or event.get("aggregated_output") or "")


def read_codex(path: Path, agent: str, max_bytes: int) -> Session:
    entries, skipped = read_jsonl(path, max_bytes)
    session = Session(agent=agent, skipped_bytes=skipped)
    calls: dict[str, ToolCall] = {}
    stamps = [line["timestamp"] for line in entries if line.get("timestamp")]
    if stamps:  # a rollout is appended in time order: its ends bound the session
        session.seen(parse_ts(stamps[0]))
        session.seen(parse_ts(stamps[-1]))
    for line in entries:
        payload = line.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = line.get("type")
        if kind == "session_meta":
            session.session_id = session.session_id or payload.get("id")
            session.cwd = session.cwd or payload.get("cwd")
            session.seen(parse_ts(payload.get("timestamp")))
            git = payload.get("git")
            if isinstance(git, dict) and git.get("branch"):
                session.git_branch = str(git["branch"])
        elif kind == "turn_context":
            session.model = payload.get("model") or session.model
            session.cwd = session.cwd or payload.get("cwd")
        elif kind == "response_item":
            _codex_item(session, payload, calls)
        elif kind == "event_msg":
            _codex_event(session, payload, calls)
        elif kind == "compacted" and payload.get("message"):
            session.compactions.append(str(payload["message"]))
    if session.final is None and session.assistant:
        session.final = session.assistant[-1]
    return session


# -- OpenClaw ------------------------------------------------------------------------------
def _active_branch(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries on the path from the root to the latest leaf of the session tree."""
    by_id = {str(e["id"]): e for e in entries if e.get("id") is not None}
    parents = {str(e.get("parentId")) for e in entries if e.get("parentId") is not None}
    leaf = next((e for e in reversed(entries) if str(e.get("id")) not in parents), None)
    branch: list[dict[str, Any]] = []
    seen: set[str] = set()
    while leaf is not None and str(leaf.get("id")) not in seen:
        seen.add(str(leaf.get("id")))
        branch.append(leaf)
        parent = leaf.get("parentId")
        leaf = by_id.get(str(parent)) if parent is not None else None
    return list(reversed(branch))


def _openclaw_message(
    session: Session, message: dict[str, Any], calls: dict[str, ToolCall]
) -> None:
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        session.add_prompt(clean_prompt(text_of(content)))
    elif role == "assistant":
        if isinstance(message.get("model"), str):
            session.model = message["model"]
        session.add_assistant(text_of(content))
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                call = ToolCall(
                    name=str(block.get("name") or "tool"),
                    input=as_mapping(block.get("arguments")),
                    call_id=str(block.get("id") or ""),
                )
                calls[call.call_id] = call
                session.tools.append(call)
    elif role == "toolResult":
        done = calls.get(str(message.get("toolCallId")))
        if done is not None:
            done.output = text_of(content)
            done.error = bool(message.get("isError"))


def read_openclaw(path: Path, agent: str, max_bytes: int) -> Session:
    entries, skipped = read_jsonl(path, max_bytes)
    session = Session(agent=agent, skipped_bytes=skipped)
    header = next((e for e in entries if e.get("type") == "session"), None)
    if header is not None:
        session.session_id = header.get("id")
        session.cwd = header.get("cwd")
        session.seen(parse_ts(header.get("timestamp")))
    calls: dict[str, ToolCall] = {}
    for entry in _active_branch([e for e in entries if e.get("type") != "session"]):
        session.seen(parse_ts(entry.get("timestamp")))
        kind = entry.get("type")
        if kind == "message" and isinstance(entry.get("message"), dict):
            _openclaw_message(session, entry["message"], calls)
        elif kind == "model_change" and entry.get("modelId"):
            session.model = str(entry["modelId"])
        elif kind in ("compaction", "branch_summary") and entry.get("summary"):
            session.compactions.append(str(entry["summary"]))
    if session.assistant:
        session.final = session.assistant[-1]
    return session


# -- Gemini CLI ------------------------------------------------------------------------------
def _gemini_calls(message: dict[str, Any]) -> Iterator[ToolCall]:
    for raw in message.get("toolCalls") or []:
        if not isinstance(raw, dict):
            continue
        result = raw.get("resultDisplay") or text_of(raw.get("result"))
        yield ToolCall(
            name=str(raw.get("name") or "tool"),
            input=as_mapping(raw.get("args")),
            output=str(result or ""),
            error=raw.get("status") in ("error", "cancelled"),
            call_id=str(raw.get("id") or ""),
        )


def read_gemini(path: Path, agent: str, max_bytes: int) -> Session:
    try:
        if path.stat().st_size > max_bytes:
            raise TranscriptUnreadable(f"{path} is larger than {max_bytes} bytes")
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TranscriptUnreadable(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise TranscriptUnreadable(f"{path} is not a Gemini CLI chat file")
    session = Session(agent=agent, session_id=data.get("sessionId"))
    session.seen(parse_ts(data.get("startTime")))
    session.seen(parse_ts(data.get("lastUpdated")))
    if isinstance(data.get("summary"), str):
        session.title_hint = data["summary"]
    for message in data["messages"]:
        if not isinstance(message, dict):
            continue
        session.seen(parse_ts(message.get("timestamp")))
        text = text_of(message.get("content"))
        if message.get("type") == "user":
            session.add_prompt(clean_prompt(text))
        elif message.get("type") == "gemini":
            session.model = message.get("model") or session.model
            session.add_assistant(text)
            session.tools.extend(_gemini_calls(message))
        elif message.get("type") == "error" and text:
            session.errors.append(text)
    if session.assistant:
        session.final = session.assistant[-1]
    return session
