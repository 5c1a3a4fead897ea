"""Plan `memoryd setup hooks` and `memoryd setup mcp` for one agent: the file and its new text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.setup.agents import (
    MACHINE_ENV,
    AgentSpec,
    Scope,
    config_path,
    hook_entries,
    mcp_entry,
)
from memoryd.setup.configfiles import FileChange, plan_json, plan_toml
from memoryd.setup.merge import merge_hooks, merge_mcp_json, merge_mcp_toml

if TYPE_CHECKING:
    from tomlkit.toml_document import TOMLDocument


def plan_hooks(
    spec: AgentSpec,
    scope: Scope,
    *,
    user_home: Path,
    project: Path,
    exe: Sequence[str],
    home: Path | None = None,
) -> FileChange:
    """The agent's hooks file with memoryd's capture and recall hooks merged in. A project's
    file is shared, so its hooks name no data dir (as a project's MCP config)."""
    path = config_path(spec, "hooks", scope, user_home, project)
    wanted = hook_entries(spec, exe, None if scope == "project" else home)

    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        return merge_hooks(
            doc, wanted, nested=spec.hooks.nested, top=spec.hooks.top, where=str(path)
        )

    return plan_json(path, edit)


def plan_mcp(
    spec: AgentSpec,
    scope: Scope,
    *,
    user_home: Path,
    project: Path,
    exe: Sequence[str],
    home: Path | None = None,
) -> FileChange:
    """The agent's MCP config with a `memoryd mcp` stdio server in it. A project's config
    is shared, so it gets no data dir, and loses one an earlier run wrote there."""
    path = config_path(spec, "mcp", scope, user_home, project)
    shared = scope == "project"
    entry = mcp_entry(spec, exe, None if shared else home)
    drop = MACHINE_ENV if shared else ()
    if spec.mcp is not None and spec.mcp.toml:

        def edit_toml(doc: TOMLDocument) -> None:
            merge_mcp_toml(doc, entry, where=str(path), drop_env=drop)

        return plan_toml(path, edit_toml)

    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        return merge_mcp_json(doc, entry, where=str(path), drop_env=drop)

    return plan_json(path, edit)
