"""One small declarative table per agent: where its hook and MCP configs live, in what shape.

Paths, event names and handler shapes follow interop/FORMATS.md (§3 Claude Code, §4 Codex,
§5 Cursor, Windsurf, Gemini CLI, Copilot CLI) and the fixtures beside it. Capture runs on the
events that end a turn, a session or a context window, and on the per-step events of agents
that keep no readable session file (their journal is the only record). Recall (`inject`) runs
on session start and prompt submit, for the agents whose hooks can add context.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memoryd.errors import ConfigError, InvalidInput

Scope = Literal["user", "project"]
Action = Literal["capture", "inject"]

HOOK_COMMAND = re.compile(r"\bmemoryd(?:\.exe)?['\"]?\s+(?:capture|inject|hook)\b")
"""A hook handler memoryd wrote (`hook` is the name the interop fixtures used before
`capture`/`inject` existed; no such command ships, so such an entry is always stale)."""
MCP_COMMAND = re.compile(r"\bmemoryd(?:\.exe)?['\"]?\s+mcp\b")


@dataclass(frozen=True)
class HookEvent:
    event: str
    action: Action
    matcher: str | None = None
    timeout: int | None = None  # in the agent's unit (seconds; Gemini CLI: milliseconds)


@dataclass(frozen=True)
class HookSpec:
    """Where the hooks live and how one handler looks.

    `nested` agents group handlers as event → [{matcher, hooks: [handler]}] (Claude Code,
    Codex, Gemini CLI); the others list handlers under the event directly.
    """

    user_path: str | None
    project_path: str | None
    events: tuple[HookEvent, ...]
    nested: bool
    command_key: str = "command"
    timeout_key: str | None = None
    base: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    top: Mapping[str, Any] = field(default_factory=dict)  # keys a hooks file must have
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class McpSpec:
    user_path: str | None
    project_path: str | None
    toml: bool = False
    base: Mapping[str, Any] = field(default_factory=dict)  # fields before command/args
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentSpec:
    name: str
    title: str
    hooks: HookSpec
    mcp: McpSpec | None
    default_scope: Scope = "user"


_CODEX_TRUST = "Codex reads a project's .codex/ config only when the project is trusted."

AGENTS: dict[str, AgentSpec] = {
    spec.name: spec
    for spec in (
        AgentSpec(
            "claude-code",
            "Claude Code",
            HookSpec(
                user_path=".claude/settings.json",
                project_path=".claude/settings.json",
                nested=True,
                base={"type": "command"},
                timeout_key="timeout",
                events=(
                    HookEvent("SessionStart", "inject", "startup|resume|clear|compact", 10),
                    HookEvent("UserPromptSubmit", "inject", None, 10),
                    HookEvent("Stop", "capture", None, 30),
                    HookEvent("PreCompact", "capture", "manual|auto", 60),
                    # SessionEnd hooks share 1.5 s unless a handler sets a longer timeout
                    HookEvent("SessionEnd", "capture", None, 10),
                ),
            ),
            McpSpec(user_path=".claude.json", project_path=".mcp.json", base={"type": "stdio"}),
        ),
        AgentSpec(
            "codex",
            "Codex",
            HookSpec(
                user_path=".codex/hooks.json",
                project_path=".codex/hooks.json",
                nested=True,
                base={"type": "command"},
                timeout_key="timeout",
                events=(
                    HookEvent("SessionStart", "inject", "startup|resume|clear", 10),
                    HookEvent("UserPromptSubmit", "inject", None, 10),
                    HookEvent("Stop", "capture", None, 30),
                    HookEvent("PreCompact", "capture", None, 60),
                ),
                notes=(
                    "Codex runs new command hooks only after you review and trust them.",
                    _CODEX_TRUST,
                ),
            ),
            McpSpec(
                user_path=".codex/config.toml",
                project_path=".codex/config.toml",
                toml=True,
                notes=(_CODEX_TRUST,),
            ),
        ),
        AgentSpec(
            "cursor",
            "Cursor",
            HookSpec(
                user_path=".cursor/hooks.json",
                project_path=".cursor/hooks.json",
                nested=False,
                top={"version": 1},
                events=(
                    HookEvent("sessionStart", "inject"),
                    # beforeSubmitPrompt cannot add context; capture journals the prompt
                    HookEvent("beforeSubmitPrompt", "capture"),
                    HookEvent("afterFileEdit", "capture"),
                    HookEvent("afterShellExecution", "capture"),
                    HookEvent("afterAgentResponse", "capture"),
                    HookEvent("preCompact", "capture"),
                    HookEvent("stop", "capture"),
                    HookEvent("sessionEnd", "capture"),
                ),
            ),
            McpSpec(user_path=".cursor/mcp.json", project_path=".cursor/mcp.json"),
        ),
        AgentSpec(
            "windsurf",
            "Windsurf",
            HookSpec(
                user_path=".codeium/windsurf/hooks.json",
                project_path=".windsurf/hooks.json",
                nested=False,
                extra={"show_output": False},
                # Windsurf hooks cannot add context, so there is no recall hook
                events=(
                    HookEvent("pre_user_prompt", "capture"),
                    HookEvent("post_write_code", "capture"),
                    HookEvent("post_run_command", "capture"),
                    HookEvent("post_mcp_tool_use", "capture"),
                    HookEvent("post_cascade_response", "capture"),
                ),
                notes=("Windsurf's hooks.json paths and shape are not verified upstream.",),
            ),
            McpSpec(user_path=".codeium/windsurf/mcp_config.json", project_path=None),
        ),
        AgentSpec(
            "gemini",
            "Gemini CLI",
            HookSpec(
                user_path=".gemini/settings.json",
                project_path=".gemini/settings.json",
                nested=True,
                base={"type": "command"},
                timeout_key="timeout",
                extra={"name": "memoryd"},
                events=(
                    HookEvent("SessionStart", "inject", None, 10000),
                    HookEvent("BeforeAgent", "inject", None, 10000),
                    HookEvent("AfterAgent", "capture", None, 30000),
                    HookEvent("AfterTool", "capture", None, 10000),
                    HookEvent("PreCompress", "capture", None, 30000),
                    HookEvent("SessionEnd", "capture", None, 10000),
                ),
            ),
            McpSpec(user_path=".gemini/settings.json", project_path=".gemini/settings.json"),
        ),
        AgentSpec(
            "copilot",
            "Copilot CLI",
            HookSpec(
                user_path=None,
                project_path=".github/hooks/memoryd.json",
                nested=False,
                command_key="bash",
                timeout_key="timeoutSec",
                base={"type": "command"},
                top={"version": 1},
                # sessionStart's output is ignored: no recall; capture opens the session there
                events=(
                    HookEvent("sessionStart", "capture", None, 30),
                    HookEvent("userPromptSubmitted", "capture", None, 30),
                    HookEvent("postToolUse", "capture", None, 30),
                    HookEvent("agentStop", "capture", None, 30),
                    HookEvent("sessionEnd", "capture", None, 30),
                ),
            ),
            None,
            default_scope="project",
        ),
    )
}


def get_agent(name: str) -> AgentSpec:
    try:
        return AGENTS[name]
    except KeyError:
        raise InvalidInput(
            f"unknown agent {name!r}", hint="use one of: " + ", ".join(AGENTS)
        ) from None


def pick_scope(spec: AgentSpec, *, project: bool, user: bool) -> Scope:
    if project and user:
        raise InvalidInput("--project and --user exclude each other")
    if project:
        return "project"
    return "user" if user else spec.default_scope


def config_path(
    spec: AgentSpec, kind: Literal["hooks", "mcp"], scope: Scope, user_home: Path, project: Path
) -> Path:
    """The file an agent reads at this scope; an agent without one there is an input error."""
    where: HookSpec | McpSpec | None = spec.hooks if kind == "hooks" else spec.mcp
    paths: dict[str, str | None] = (
        {"user": where.user_path, "project": where.project_path} if where else {}
    )
    relative = paths.get(scope)
    if relative is None:
        scopes = [s for s, p in paths.items() if p]
        hint = f"use --{scopes[0]}" if scopes else "configure it by hand in the agent"
        raise InvalidInput(f"{spec.title} has no documented {scope}-level {kind} config", hint=hint)
    return (user_home if scope == "user" else project) / relative


def resolve_executable(override: str | None) -> list[str]:
    """The argv prefix that runs memoryd: `--command`, else the installed script's absolute path.

    Hooks run without the user's shell setup (no venv on PATH), so a bare `memoryd` could
    miss; an absolute path keeps working as long as the install does.
    """
    if override is not None:
        argv = shlex.split(override)
        if not argv:
            raise InvalidInput("--command is empty")
        return argv
    found = shutil.which("memoryd")
    if found:
        return [str(Path(found).absolute())]
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if program is not None and program.name in ("memoryd", "memoryd.exe") and program.exists():
        return [str(program.absolute())]
    if program is not None and program.as_posix().endswith("memoryd/__main__.py"):
        return [sys.executable, "-m", "memoryd"]
    raise ConfigError(
        "cannot find the memoryd executable",
        hint='pass --command "/path/to/memoryd" (the command hooks should run)',
    )


PORTABLE_EXE = "memoryd"
"""What a project's MCP config and hooks run: `memoryd` from PATH, the same on every machine."""
MACHINE_ENV = ("MEMORYD_HOME",)
"""Variables an MCP entry may carry that name this machine (left out of a project's config)."""


def mcp_executable(override: str | None, scope: Scope) -> list[str]:
    """The argv prefix of memoryd's MCP entry or hooks. A project's config is shared
    (committed with the repository), so it runs `memoryd` from PATH: an absolute path would
    name this machine's install. A user's config keeps the absolute path
    (`resolve_executable`). `--command` wins at either scope."""
    if override is None and scope == "project":
        return [PORTABLE_EXE]
    return resolve_executable(override)


def project_mcp_notes(exe: Sequence[str], home: Path | None, runs: str = "mcp") -> list[str]:
    """What to know about a project's MCP config or hooks (`runs`: what memoryd command they
    run): whether it is portable, and what of this machine it leaves out."""
    notes = []
    if Path(exe[0]).is_absolute():
        notes.append(f"{exe[0]} is a path on this machine: other clones cannot run it.")
    else:
        notes.append(
            "This file names no path of this machine, so it can be committed: each machine"
            f" runs `{shlex.join(exe)} {runs}` from its PATH with its own data dir."
        )
    if home is not None:
        notes.append(
            f"The data dir {home} is not written into a project's config; set MEMORYD_HOME"
            " where the agent runs, or use --user."
        )
    return notes


def _home_args(home: Path | None) -> list[str]:
    return [f"--home={home}"] if home is not None else []


def hook_command(exe: Sequence[str], action: Action, agent: str, home: Path | None) -> str:
    return shlex.join([*exe, action, f"--source={agent}", *_home_args(home)])


def hook_entries(
    spec: AgentSpec, exe: Sequence[str], home: Path | None
) -> dict[str, list[dict[str, Any]]]:
    """Per event, the entries memoryd wants in the hooks file (groups or bare handlers)."""
    hooks = spec.hooks
    wanted: dict[str, list[dict[str, Any]]] = {}
    for item in hooks.events:
        handler: dict[str, Any] = dict(hooks.base)
        handler[hooks.command_key] = hook_command(exe, item.action, spec.name, home)
        if hooks.timeout_key is not None and item.timeout is not None:
            handler[hooks.timeout_key] = item.timeout
        handler.update(hooks.extra)
        entry = handler
        if hooks.nested:
            entry = {"matcher": item.matcher} if item.matcher is not None else {}
            entry["hooks"] = [handler]
        wanted.setdefault(item.event, []).append(entry)
    return wanted


def mcp_entry(spec: AgentSpec, exe: Sequence[str], home: Path | None) -> dict[str, Any]:
    """memoryd's MCP server entry: `memoryd mcp` over stdio."""
    base = spec.mcp.base if spec.mcp is not None else {}
    entry: dict[str, Any] = {**base, "command": exe[0], "args": [*exe[1:], "mcp"]}
    if home is not None:
        entry["env"] = {"MEMORYD_HOME": str(home)}
    return entry
