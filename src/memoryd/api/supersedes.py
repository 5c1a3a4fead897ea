"""The `/v1/supersedes` routes: supersede candidates, and a person's undo, accept or reject.

Judging a memory over HTTP runs in three steps, as the daemon's worker does: the pairs and
the rules' verdicts as a read, the LLM judge on a plain thread, the decisions as a write, so
a slow LLM never holds the writer.
"""

from __future__ import annotations

from typing import Annotated, Literal

import anyio.to_thread
from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from memoryd.api.routes import ERRORS, Actor, Api, Limit, Offset, ScopeQuery, page, scope_param
from memoryd.api.schemas import Page
from memoryd.graph.store import SupersedeRow
from memoryd.models import SupersedeDecision

router = APIRouter(
    prefix="/v1/supersedes",
    tags=["supersedes"],
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
)

Newer = Annotated[str, PathParam(description="slug of the newer memory (the one that replaces)")]
Older = Annotated[str, PathParam(description="slug of the older memory (the one replaced)")]


class SupersedeVerdict(BaseModel):
    """Who decides: a person at the CLI or HTTP (`user`), or one reviewing the digest."""

    decided_by: Literal["user", "digest"] = Field(default="user")
    agent: bool = Field(
        default=False,
        description="an agent decides (MCP): refused unless governance.agents_decide is set",
    )


@router.get("/candidates")
async def supersede_candidates(
    api: Api, scope: ScopeQuery = None, limit: Limit = 100, offset: Offset = 0
) -> Page[SupersedeRow]:
    """Supersede candidates (judged 0.5–0.85) waiting for a human, most confident first."""
    rows = await api.runner.read(api.service.supersede_candidates, scope_param(scope))
    return page(rows[offset : offset + limit + 1], limit, offset)


@router.get("/automatic")
async def automatic_supersedes(
    api: Api, scope: ScopeQuery = None, limit: Limit = 100, offset: Offset = 0
) -> Page[SupersedeRow]:
    """Automatic supersede decisions (active and candidates): the rule or model that made
    each, its rules version and its evidence, newest first."""
    rows = await api.runner.read(api.service.automatic_supersedes, scope_param(scope))
    return page(rows[offset : offset + limit + 1], limit, offset)


async def _decide(
    api: Api,
    actor: str,
    newer: str,
    older: str,
    action: Literal["undo", "accept", "reject"],
    body: SupersedeVerdict | None,
) -> SupersedeDecision:
    verdict = body if body is not None else SupersedeVerdict()
    return await api.write(
        actor,
        api.service.decide_supersede,
        newer,
        older,
        action,
        by=verdict.decided_by,
        agent=verdict.agent,
    )


@router.post("/{newer}/{older}/undo")
async def undo_supersede(
    api: Api, newer: Newer, older: Older, body: SupersedeVerdict | None = None, actor: Actor = "api"
) -> SupersedeDecision:
    """Undo an active supersede (automatic or by hand): the older memory is current again.
    The decision stays in the newer memory's file as `undone`, so it is not proposed again."""
    return await _decide(api, actor, newer, older, "undo", body)


@router.post("/{newer}/{older}/accept")
async def accept_supersede(
    api: Api, newer: Newer, older: Older, body: SupersedeVerdict | None = None, actor: Actor = "api"
) -> SupersedeDecision:
    """Accept a candidate: the older memory is superseded from now on."""
    return await _decide(api, actor, newer, older, "accept", body)


@router.post("/{newer}/{older}/reject")
async def reject_supersede(
    api: Api, newer: Newer, older: Older, body: SupersedeVerdict | None = None, actor: Actor = "api"
) -> SupersedeDecision:
    """Reject a candidate: both memories stay current and the pair is not proposed again."""
    return await _decide(api, actor, newer, older, "reject", body)


@router.post("/{newer}/judge")
async def judge_supersedes(api: Api, newer: Newer, actor: Actor = "api") -> list[SupersedeDecision]:
    """Judge whether this memory replaces older ones of its scope (rules, then the LLM when
    one is configured); returns the decisions it made (automatic or candidate)."""
    job = await api.runner.read(api.service.prepare_supersede, newer)
    if job is None:
        return []
    await anyio.to_thread.run_sync(api.service.judge_supersedes_llm, job)
    return await api.write(actor, api.service.apply_supersede, job)
