"""MCP tools for supersede decisions and trends, over the service's own methods.

Listing candidates and reading trends are reads. Accept, reject and undo change which memory
recall treats as current: like promotions, an agent may make them only when the user set
`governance.agents_decide` (the service refuses otherwise, with the command to run instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp.types import ToolAnnotations
from pydantic import Field

from memoryd.mcp.params import Scope

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from memoryd.governance.supersede import SupersedeAction
    from memoryd.protocol import MemoryAPI

Run = Callable[[Callable[[], Any]], Any]
READ = ToolAnnotations(read_only_hint=True)
DECIDE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
Newer = Annotated[str, Field(description="Slug of the newer memory of the candidate pair")]
Older = Annotated[str, Field(description="Slug of the older memory it may replace")]


def add_governance_tools(server: MCPServer, svc: MemoryAPI, *, read: Run, write: Run) -> None:
    """Register the tools on `server`; `read` and `write` run a tool's body as the server's
    other tools do (one read or one write, MemorydError as a tool error)."""

    @server.tool(annotations=READ)
    def supersede_candidates(scope: Scope = None) -> dict[str, Any]:
        """Supersede candidates waiting for the user's decision, most confident first: a
        newer memory that may replace an older one (judged 50–85% sure), with the reason.
        `scope` is a project path or 12-hex scope hash; omit it for every project."""
        rows = read(lambda: svc.supersede_candidates(scope))
        return {"candidates": [r.model_dump(mode="json") for r in rows]}

    def decide(newer: str, older: str, action: SupersedeAction) -> dict[str, Any]:
        decision = write(lambda: svc.decide_supersede(newer, older, action, agent=True))
        return {"newer": newer, **decision.model_dump(mode="json")}

    @server.tool(annotations=DECIDE)
    def supersede_accept(newer: Newer, older: Older) -> dict[str, Any]:
        """Accept a supersede candidate: `newer` replaces `older`, and recall ranks the older
        memory below it. Refused unless the user let agents decide
        (`governance.agents_decide`); otherwise tell the user to run
        `memoryd supersede accept NEWER OLDER`."""
        return decide(newer, older, "accept")

    @server.tool(annotations=DECIDE)
    def supersede_reject(newer: Newer, older: Older) -> dict[str, Any]:
        """Reject a supersede candidate: both memories stay current and the pair is not
        proposed again. Refused unless the user let agents decide
        (`governance.agents_decide`)."""
        return decide(newer, older, "reject")

    @server.tool(annotations=DECIDE)
    def supersede_undo(newer: Newer, older: Older) -> dict[str, Any]:
        """Undo an active supersede (automatic or accepted): `older` is current again; the
        decision stays in the history as `undone`. Refused unless the user let agents decide
        (`governance.agents_decide`)."""
        return decide(newer, older, "undo")

    @server.tool(annotations=READ)
    def trends(
        days: Annotated[int, Field(description="How many days back, today included")] = 7,
        scope: Scope = None,
    ) -> dict[str, Any]:
        """What changed in the last `days` days (today included) against the days before:
        the trigger words that brought memories back most, entities mentioned more than
        before, supersede decisions made, the memories recalled most, and mentions per day
        of the top entities. `scope`: a project path or scope hash; omit it for all."""
        result = read(lambda: svc.trends(days, scope))
        data: dict[str, Any] = result.model_dump(mode="json")
        return data
