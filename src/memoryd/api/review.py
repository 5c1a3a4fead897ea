"""`/v1/promotions…` and `/v1/memories/{slug}/analyze`: DURA scoring and the review of the
promotions queue (issue 15). Decisions are writes, on the writer thread; an LLM score is
three steps, so the paid HTTP call never holds the writer."""

from __future__ import annotations

from typing import Annotated, Literal

import anyio.to_thread
from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from memoryd.api.routes import (
    ERRORS,
    Actor,
    Api,
    Limit,
    Offset,
    ScopeQuery,
    Slug,
    page,
    scope_param,
)
from memoryd.api.schemas import Page
from memoryd.errors import InvalidInput
from memoryd.governance.analyze import run_analysis
from memoryd.models import DuraAnalysis, MemoryType, Promotion

router = APIRouter(
    prefix="/v1",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
)
PromotionId = Annotated[int, PathParam(ge=1, le=2**63 - 1, description="the promotion's id")]
StatusQuery = Annotated[
    Literal["pending", "approved", "rejected", "merged", "all"],
    Query(description="which promotions; `all` for every status"),
]


class PromoteBody(BaseModel):
    """The proposal as it stands, or edited: another type, title or body."""

    model_config = ConfigDict(extra="forbid")

    type: MemoryType | None = None
    title: str | None = Field(default=None, min_length=1, max_length=500)
    body: str | None = Field(default=None, min_length=1, max_length=1_000_000)
    agent: bool = Field(
        default=False,
        description="an agent decides (MCP): refused unless governance.agents_decide is set",
    )
    team: bool = Field(
        default=False,
        description="share the promoted memory with the team too, with its supersedes chain:"
        " answered by a daemon that joined a team (`memoryd team join`), whose forwarder adds"
        " `team_slug`",
    )


class RejectBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=2000)
    agent: bool = False


class AnalyzeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "llm", "heuristic"] = "auto"


@router.get("/promotions", tags=["governance"])
async def list_promotions(
    api: Api,
    status: StatusQuery = "pending",
    scope: ScopeQuery = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Page[Promotion]:
    """The promotions queue, newest first, with the evidence for each: DURA scores and who
    scored (`dura.by`), the source session, the quoted sentences."""
    rows = await api.runner.read(
        api.service.list_promotions,
        status=None if status == "all" else status,
        scope=scope_param(scope),
        limit=limit + 1,
        offset=offset,
    )
    return page(rows, limit, offset)


@router.get("/promotions/{promotion_id}", tags=["governance"])
async def get_promotion(api: Api, promotion_id: PromotionId) -> Promotion:
    return await api.runner.read(api.service.get_promotion, promotion_id)


@router.post("/promotions/{promotion_id}/promote", tags=["governance"])
async def promote(
    api: Api, promotion_id: PromotionId, body: PromoteBody, actor: Actor = "api"
) -> Promotion:
    """Approve: write the long-term memory (404 unknown id or deleted source, 409 decided)."""
    if body.team:  # a daemon in a team takes `team` off before its app sees the request
        raise InvalidInput(
            "this data dir joined no team: nothing can be promoted to one",
            hint="run `memoryd team join URL --token-file F` (or promote without team)",
        )
    return await api.write(
        actor,
        api.service.promote,
        promotion_id,
        type=body.type,
        title=body.title,
        body=body.body,
        agent=body.agent,
    )


@router.post("/promotions/{promotion_id}/reject", tags=["governance"])
async def reject(
    api: Api, promotion_id: PromotionId, body: RejectBody, actor: Actor = "api"
) -> Promotion:
    """Reject (404 unknown id, 409 already decided)."""
    return await api.write(
        actor, api.service.reject, promotion_id, reason=body.reason, agent=body.agent
    )


@router.post("/memories/{slug}/analyze", tags=["governance"])
async def analyze_session(
    api: Api, slug: Slug, body: AnalyzeBody, actor: Actor = "api"
) -> DuraAnalysis:
    """Score a session memory on DURA again (`memoryd analyze-session`)."""
    job = await api.runner.read(api.service.prepare_analysis, slug, mode=body.mode)
    outcome = await anyio.to_thread.run_sync(run_analysis, api.service.llm, job)
    return await api.write(actor, api.service.apply_analysis, job, outcome)
