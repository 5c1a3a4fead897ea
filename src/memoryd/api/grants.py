"""The `/v1/grants` routes: grant, list and revoke reads of sensitive scopes.

A grant is a write (its file and its audit line); the daemon builds the scope's in-memory
view as it grants, so the first recall under it does not wait for the decryption.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from memoryd.api.routes import ERRORS, Actor, Api, scope_param
from memoryd.api.schemas import PathText
from memoryd.models import Grant, GrantDuration

router = APIRouter(
    prefix="/v1/grants",
    tags=["grants"],
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
)


class GrantRequest(BaseModel):
    """`memoryd grant PATH --duration once|session|task [--task NAME]`."""

    model_config = ConfigDict(extra="forbid")

    scope: PathText = Field(description="the scope's absolute path, or its 12-hex scope hash")
    duration: GrantDuration = "once"
    task: str | None = Field(default=None, description="names a task grant (to revoke it)")


@router.get("")
async def list_grants(api: Api) -> list[Grant]:
    """The grants in force now, oldest first."""
    return await api.runner.read(api.service.grants)


@router.post("")
async def grant(api: Api, body: GrantRequest, actor: Actor = "api") -> Grant:
    """Allow reads of a sensitive scope: once 90 s, session 8 h, task until revoked."""
    scope = scope_param(body.scope) or body.scope
    return await api.write(actor, api.service.grant, scope, body.duration, task=body.task)


@router.delete("")
async def revoke(
    api: Api,
    scope: Annotated[PathText, Query(description="the scope's absolute path, or its scope hash")],
    task: Annotated[str | None, Query(description="only this task's grant")] = None,
    actor: Actor = "api",
) -> list[Grant]:
    """End a scope's grants (with `task`, only that task's); answers those ended."""
    return await api.write(actor, api.service.revoke, scope_param(scope) or scope, task=task)
