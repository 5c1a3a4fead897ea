"""`GET /v1/digest`: the weekly review page (`memoryd digest`) as JSON. A read: it runs beside
the writer, and sends nothing (notifications are the CLI's `--notify` and the daemon's
weekly job)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from memoryd.api.routes import ERRORS, Api, ScopeQuery, scope_param
from memoryd.governance.digest import MAX_LIMIT, Digest

router = APIRouter(
    prefix="/v1",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
    tags=["governance"],
)


@router.get("/digest")
async def digest(
    api: Api,
    scope: ScopeQuery = None,
    days: Annotated[
        int | None, Query(ge=1, le=365, description="fading within this many days")
    ] = None,
    limit: Annotated[
        int | None, Query(ge=1, le=MAX_LIMIT, description="items shown per section")
    ] = None,
) -> Digest:
    """Pending promotions with their DURA evidence, supersede candidates, duplicate pairs and
    the memories whose next decay step falls due within `days` (defaults: `[digest]`)."""
    built: Digest = await api.runner.read(
        api.service.digest, scope=scope_param(scope), days=days, limit=limit
    )
    return built
