"""The governance maintenance routes: decay sweep, restore, merge, duplicates, schedule.

Writes run on the writer thread like every other write (`Backend.write`), so a sweep or a
merge never races an agent's record or the recall-count flush."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from memoryd.api.routes import ERRORS, Actor, Api
from memoryd.governance.decay import RestoreResult, SweepReport
from memoryd.governance.merge import DuplicatePair, MergeResult
from memoryd.governance.schedule import JobStatus

router = APIRouter(
    prefix="/v1",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
    tags=["governance"],
)


class SweepRequest(BaseModel):
    dry_run: bool = False


class SweepReply(SweepReport):
    counts_by_state: dict[str, int] = Field(default_factory=dict)


class MergeRequest(BaseModel):
    keep: str = Field(min_length=1)
    drop: list[str] = Field(min_length=1, max_length=1000)
    across_scopes: bool = False


@router.post("/decay/sweep")
async def decay_sweep(api: Api, body: SweepRequest, actor: Actor = "api") -> SweepReply:
    """Move unused session memories along alive → dim → soft-forgotten → forgotten."""
    report = await api.write(actor, api.service.decay_sweep, dry_run=body.dry_run)
    return SweepReply(**report.model_dump(), counts_by_state=report.counts)


@router.post("/memories/{slug}/restore")
async def restore_memory(
    api: Api,
    slug: Annotated[str, PathParam(description="the memory's slug")],
    actor: Actor = "api",
) -> RestoreResult:
    """Bring a forgotten (or dim, soft-forgotten) memory back to alive."""
    return await api.write(actor, api.service.restore, slug)


@router.post("/merge")
async def merge_memories(api: Api, body: MergeRequest, actor: Actor = "api") -> MergeResult:
    """Fold `drop` into `keep`; 404 for an unknown slug, 422 across scopes without
    `across_scopes`."""
    return await api.write(
        actor, api.service.merge, body.keep, body.drop, across_scopes=body.across_scopes
    )


@router.get("/duplicates")
async def list_duplicates(
    api: Api, scope: Annotated[str | None, Query(pattern=r"^[0-9a-f]{12}$")] = None
) -> list[DuplicatePair]:
    """Candidate pairs to merge: equal fingerprints and near-duplicates."""
    return await api.runner.read(api.service.duplicates, scope=scope)


@router.get("/schedule")
async def schedule(api: Api) -> list[JobStatus]:
    """The maintenance jobs: calendar, last run, next run."""
    jobs: list[JobStatus] = await api.runner.read(api.service.schedule)
    return jobs
