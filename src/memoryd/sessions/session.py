"""One agent session, whatever agent it came from, and what each tool call did.

Every source (`transcripts` for files, `journal` for hook events) fills a `Session`; `summary`
turns it into the memory body. Tool names differ per agent (`Bash`, `shell`, `exec_command`,
`run_shell_command`, `afterShellExecution` …), so they are classified here, once.
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import UTC, datetime
from typing import Any

SHELL_TOOLS = frozenset(
    {
        "bash",
        "shell",
        "exec_command",
        "local_shell",
        "local_shell_call",
        "run_shell_command",
        "run_terminal_cmd",
        "shell_command",
        "execute_command",
        "powershell",
        "terminal",
    }
)
WRITE_TOOLS = frozenset({"write", "create", "write_file", "create_file", "notebookedit"})
EDIT_TOOLS = frozenset(
    {
        "edit",
        "multiedit",
        "replace",
        "edit_file",
        "str_replace",
        "str_replace_editor",
        "str_replace_based_edit_tool",
        "update_file",
        "write_code",
        "search_replace",
        "edit_file_v2",
    }
)
PATCH_TOOLS = frozenset({"apply_patch"})
_PATH_KEYS = ("file_path", "filePath", "path", "notebook_path", "target_file", "file")
_COMMAND_KEYS = ("command", "cmd", "command_line", "commandLine", "script")
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", re.M)
_PATCH_ACTION = {"Add": "added", "Update": "edited", "Delete": "deleted"}
_MEMORYD_COMMAND = re.compile(
    r"^(?:\S*/)?(?:uv run |uvx |pipx run |python3? -m |npx -y )?memoryd(?:\s|$)"
)


def parse_ts(value: Any) -> datetime | None:
    """ISO-8601 (with `Z`) or epoch seconds/milliseconds, as UTC; None when unparseable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 10**11 else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    return None


def text_of(content: Any) -> str:
    """The text of a message content: a string, or the `text` of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif (
                isinstance(block, dict)
                and isinstance(block.get("text"), str)
                and block.get("type") in (None, "text", "input_text", "output_text")
            ):
                parts.append(block["text"])
        return "\n".join(p for p in parts if p)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""


def as_mapping(value: Any) -> dict[str, Any]:
    """Tool input as a mapping; agents send objects, JSON strings or bare strings."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            decoded = json.loads(value)
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


class ToolCall:
    """A tool call and the outcome that matters for a summary (not its bulk output)."""

    __slots__ = ("call_id", "error", "exit_code", "input", "name", "output", "server")

    def __init__(
        self,
        name: str,
        input: dict[str, Any] | None = None,
        output: str = "",
        error: bool = False,
        exit_code: int | None = None,
        call_id: str = "",
        server: str = "",
    ) -> None:
        self.name = name
        self.input: dict[str, Any] = input if input is not None else {}
        self.output = output
        self.error = error
        self.exit_code = exit_code
        self.call_id = call_id
        self.server = server
        """The MCP server, when the agent names it separately (Windsurf, Gemini)."""

    @property
    def kind(self) -> str:
        name = self.name.lower()
        if name in SHELL_TOOLS:
            return "command"
        if name in WRITE_TOOLS or name in EDIT_TOOLS or name in PATCH_TOOLS:
            return "file"
        return "other"

    @property
    def failed(self) -> bool:
        return self.error or (self.exit_code is not None and self.exit_code != 0)

    def command(self) -> str | None:
        """The shell command line, for shell tools."""
        if self.kind != "command":
            return None
        for key in _COMMAND_KEYS:
            value = self.input.get(key)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                if len(value) >= 3 and value[1] in ("-lc", "-c") and "sh" in value[0]:
                    return str(value[2])
                return shlex.join(value)
            if isinstance(value, str) and value.strip():
                return value
        return None

    def files(self) -> list[tuple[str, str]]:
        """(path, action) for each file this call wrote."""
        name = self.name.lower()
        if name in PATCH_TOOLS:
            patch = self.input.get("input") or self.input.get("patch") or ""
            found = []
            for match in _PATCH_FILE.finditer(str(patch)):
                if match.group(3):
                    found.append((match.group(3).strip(), "moved"))
                else:
                    found.append((match.group(2).strip(), _PATCH_ACTION[match.group(1)]))
            return found
        if name not in WRITE_TOOLS and name not in EDIT_TOOLS:
            return []
        action = "written" if name in WRITE_TOOLS else "edited"
        for key in _PATH_KEYS:
            value = self.input.get(key)
            if isinstance(value, str) and value.strip():
                return [(value.strip(), action)]
        return []

    def is_memoryd(self) -> bool:
        """memoryd's own calls (its MCP tools, `memoryd …` commands): never part of a summary."""
        if "memoryd" in self.name.lower() or "memoryd" in self.server.lower():
            return True
        command = self.command()
        return command is not None and _MEMORYD_COMMAND.match(command.strip()) is not None


class Session:
    """What a summary is made from, already stripped of agent scaffolding."""

    __slots__ = (
        "agent",
        "assistant",
        "assistant_tools",
        "compactions",
        "cwd",
        "errors",
        "final",
        "git_branch",
        "last_at",
        "model",
        "notes",
        "prompts",
        "session_id",
        "skipped_bytes",
        "started_at",
        "title_hint",
        "tools",
    )

    def __init__(
        self, agent: str, session_id: str | None = None, *, skipped_bytes: int = 0
    ) -> None:
        self.agent = agent
        self.session_id = session_id
        self.cwd: str | None = None
        self.started_at: datetime | None = None
        self.last_at: datetime | None = None
        self.title_hint: str | None = None
        self.model: str | None = None
        self.git_branch: str | None = None
        self.prompts: list[str] = []
        self.assistant: list[str] = []
        self.assistant_tools: list[int] = []
        """How many tool calls came before each of `assistant`: the calls after a message
        and before the next are the work that message led to."""
        self.tools: list[ToolCall] = []
        self.final: str | None = None
        self.compactions: list[str] = []
        self.errors: list[str] = []
        self.notes: list[str] = []
        """Free text given to `memoryd capture --source=manual`."""
        self.skipped_bytes = skipped_bytes
        """Bytes of a very large transcript that were not read (its middle)."""

    def seen(self, when: datetime | None) -> None:
        if when is None:
            return
        if self.started_at is None or when < self.started_at:
            self.started_at = when
        if self.last_at is None or when > self.last_at:
            self.last_at = when

    def add_prompt(self, text: str) -> None:
        text = text.strip()
        if text and (not self.prompts or self.prompts[-1] != text):
            self.prompts.append(text)

    def add_assistant(self, text: str) -> None:
        text = text.strip()
        if text and (not self.assistant or self.assistant[-1] != text):
            self.assistant.append(text)
            self.assistant_tools.append(len(self.tools))

    def steps(self) -> list[tuple[str, list[ToolCall]]]:
        """The agent's messages in order, each with the tool calls it led to (up to the next
        message); the final answer and repeats of a message are left out."""
        found: dict[str, list[ToolCall]] = {}
        ends = [*self.assistant_tools[1:], len(self.tools)]
        for text, start, end in zip(self.assistant, self.assistant_tools, ends, strict=False):
            if text != (self.final or "").strip():
                found.setdefault(text, []).extend(self.tools[start:end])
        return list(found.items())

    def visible_tools(self) -> list[ToolCall]:
        return [call for call in self.tools if not call.is_memoryd()]
