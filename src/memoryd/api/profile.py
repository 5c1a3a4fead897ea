"""The `/v1/profile` routes: the identity profile, its versions, diffs, rollback and the
monthly change reports.

A rewrite runs in three steps, as the daemon's weekly job does: the memories collected as a
read, the LLM on a plain thread, the version written on the writer, so a slow LLM never holds
the writer."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from memoryd.api.routes import ERRORS, Actor, Api
from memoryd.governance.profile import ProfileDiff, ProfileReport, ProfileRewrite
from memoryd.governance.store import ProfileChangeReport, ProfileVersion

router = APIRouter(
    prefix="/v1/profile",
    tags=["profile"],
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
)

Version = Annotated[int, Query(ge=1, description="a version number (`/v1/profile/versions`)")]


class RewriteRequest(BaseModel):
    compiled: bool = Field(default=False, description="compile without the LLM")
    scheduled: bool = Field(default=False, description="run as the weekly job (recorded)")


class RollbackRequest(BaseModel):
    version: int = Field(ge=1)


class ReportRequest(BaseModel):
    month: str | None = Field(
        default=None, description="YYYY-MM; default the previous month", max_length=32
    )
    scheduled: bool = Field(default=False, description="run as the monthly job (recorded)")


@router.get("")
async def show_profile(api: Api, version: Version | None = None) -> ProfileVersion:
    """The current identity version (or version `version`); 404 when there is none."""
    found: ProfileVersion = await api.runner.read(api.service.profile_show, version)
    return found


@router.post("")
async def rewrite_profile(
    api: Api, body: RewriteRequest | None = None, actor: Actor = "api"
) -> ProfileRewrite:
    """Rewrite profile/identity.md now; `written` is false when nothing changed."""
    request = body or RewriteRequest()
    service = api.service
    job = await api.runner.read(
        service.prepare_profile, compiled=request.compiled, scheduled=request.scheduled
    )
    await anyio.to_thread.run_sync(service.profile_llm, job)
    return await api.write(actor, service.apply_profile, job)


@router.get("/versions")
async def profile_versions(
    api: Api, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> list[ProfileVersion]:
    """The identity versions, newest first."""
    versions: list[ProfileVersion] = await api.runner.read(
        lambda: api.service.profile_history(limit=limit)
    )
    return versions


@router.get("/diff")
async def profile_diff(api: Api, from_version: Version, to_version: Version) -> ProfileDiff:
    """A unified diff from one version to another; 404 for an unknown version."""
    diff: ProfileDiff = await api.runner.read(api.service.profile_diff, from_version, to_version)
    return diff


@router.post("/rollback")
async def rollback_profile(api: Api, body: RollbackRequest, actor: Actor = "api") -> ProfileRewrite:
    """Make an older version's text current again, as a new version."""
    return await api.write(actor, api.service.profile_rollback, body.version)


@router.get("/reports")
async def profile_reports(api: Api) -> list[ProfileChangeReport]:
    """The monthly change reports written so far, newest month first."""
    reports: list[ProfileChangeReport] = await api.runner.read(api.service.profile_reports)
    return reports


@router.post("/reports")
async def write_profile_report(
    api: Api, body: ReportRequest | None = None, actor: Actor = "api"
) -> ProfileReport:
    """Write the change report of a month (422 for a malformed month, 404 for one that has
    not begun)."""
    request = body or ReportRequest()
    return await api.write(
        actor, api.service.profile_report, request.month, scheduled=request.scheduled
    )
