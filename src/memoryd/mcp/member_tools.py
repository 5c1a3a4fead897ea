"""A developer daemon in a team: its own MCP tools (`/mcp`) in a shared project reach the team
as its HTTP routes do. `recall` merges the team's hits with the developer's by score, each
saying where it came from; `remember` records in the team (queued while the server is away);
`get_memory` of a slug this daemon does not hold asks the team (a team hit's).
The daemon hands `create_server` a `TeamCalls` (`team_member.forward.TeamTools`)."""

from __future__ import annotations

from typing import Any, Protocol

from mcp.server.mcpserver.exceptions import ToolError

from memoryd.errors import MemorydError

HIT = ("slug", "type", "title", "snippet", "created_at", "score", "superseded_by", "source",
       "recorded_by")  # fmt: skip
"""A recall hit's fields in a shared project, personal and team hits alike."""


class TeamCalls(Protocol):
    """Called from the tools' worker threads."""

    def project(self, scope: str | None) -> str | None:
        """The team project `scope` (a path or a scope hash) is in; None: personal."""
        ...

    def recall(
        self, project: str, query: str, k: int, mine: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], str]:
        """`mine` and the team's hits merged by score, and a note on where they came from."""
        ...

    def record(self, project: str, memory: dict[str, Any]) -> dict[str, Any]:
        """Record `memory` in the team: the team's answer."""
        ...

    def get(self, slug: str) -> dict[str, Any] | None:
        """The team's memory `slug` (None: the team holds none the user may read)."""
        ...


def _tool_error(exc: MemorydError) -> ToolError:
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    return ToolError(" ".join(f"{exc.message}{hint}".split()))


def team_recall(team: TeamCalls, out: dict[str, Any], scope: str | None, k: int) -> dict[str, Any]:
    """The recall tool's answer `out`, with the team's hits merged in a shared project."""
    try:
        project = team.project(scope)
        if project is None:
            return out
        merged, note = team.recall(project, out["query"], k, out["hits"])
    except MemorydError as exc:
        raise _tool_error(exc) from exc
    return {**out, "hits": [{key: hit.get(key) for key in HIT} for hit in merged], "notes": [note]}


def team_remember(
    team: TeamCalls, scope: str | None, memory: dict[str, Any]
) -> dict[str, Any] | None:
    """The remember tool's answer when `scope` is a shared project (None: it is personal)."""
    try:
        project = team.project(scope) if scope else None
        if project is None:
            return None
        answer = team.record(project, memory)
    except MemorydError as exc:
        raise _tool_error(exc) from exc
    meta = answer["meta"]
    return {"slug": meta["slug"], "type": memory["type"], "team": project,
            "queued": bool(answer.get("queued"))}  # fmt: skip


def team_get(team: TeamCalls, slug: str) -> dict[str, Any]:
    """The get_memory tool's answer for a slug only the team holds."""
    try:
        found = team.get(slug)
    except MemorydError as exc:
        raise _tool_error(exc) from exc
    if found is None:
        raise ToolError(f"no memory {slug!r} here or in the team (hint: recall to find one)")
    return {"slug": slug, "meta": found["meta"], "body": found["body"], "source": "team",
            "recorded_by": found.get("recorded_by")}  # fmt: skip
