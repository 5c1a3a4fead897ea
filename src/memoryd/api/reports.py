"""The trends and report routes: `/v1/trends` and `/v1/reports/supersedes` (reads only)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from memoryd.api.routes import ERRORS, Api, ScopeQuery, scope_param
from memoryd.governance.reports import SupersedeReport
from memoryd.governance.trends import MAX_DAYS, Trends

router = APIRouter(
    prefix="/v1",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
    tags=["reports"],
)


@router.get("/trends")
async def trends(
    api: Api,
    days: Annotated[
        int, Query(description=f"the window in days, today included (1–{MAX_DAYS})")
    ] = 7,
    scope: ScopeQuery = None,
) -> Trends:
    """Over the last `days` days (today included) against the `days` before: top triggers,
    rising entities, recent supersedes, hot recalls, and mentions per day of the entities
    mentioned most (the graph page's chart)."""
    result: Trends = await api.runner.read(api.service.trends, days, scope_param(scope))
    return result


@router.get("/reports/supersedes")
async def supersede_report(
    api: Api,
    since: Annotated[
        datetime | None, Query(description="only decisions made since (ISO date or time)")
    ] = None,
    entity: Annotated[
        str | None, Query(min_length=1, max_length=500, description="an entity name, alias or id")
    ] = None,
    scope: ScopeQuery = None,
) -> SupersedeReport:
    """The chain of supersede decisions per entity: what replaced what, when, who decided
    (auto / user / digest) and why. 404 for an unknown entity."""
    report: SupersedeReport = await api.runner.read(
        api.service.supersede_report, since=since, entity=entity, scope=scope_param(scope)
    )
    return report
