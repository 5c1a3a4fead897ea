"""`POST /v1/graph/facts/batch`: many graph-fact memories in batched writes.

`import mcp-memory` through the daemon sends its facts here, thousands a request; one
`POST /v1/graph/facts` per observation or relation ran about 3 lines a second. Its
`/brief` twin answers slugs, scopes and supersedes only: the import needs no more, and
5000 whole memories an answer took the client longer to read than to send the batch.
"""

from __future__ import annotations

from fastapi import APIRouter

from memoryd.api.routes import ERRORS, Actor, Api
from memoryd.api.schemas import GraphFactsBatch, memory_draft
from memoryd.models import GraphFact, Memory, Recorded

router = APIRouter(
    prefix="/v1/graph",
    tags=["graph"],
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
)


@router.post("/facts/batch", status_code=201)
async def record_graph_facts_many(
    api: Api, body: GraphFactsBatch, actor: Actor = "api"
) -> list[Memory]:
    """Record many graph-fact memories in batched writes (`record_graph_facts_many`): all
    of them or, on a bad one, none."""
    return await api.write(actor, api.service.record_graph_facts_many, _facts(body))


@router.post("/facts/batch/brief", status_code=201)
async def record_graph_facts_brief(
    api: Api, body: GraphFactsBatch, actor: Actor = "api"
) -> list[Recorded]:
    """`POST /v1/graph/facts/batch`, answering each memory's slug, scope and what it
    superseded instead of the whole memory (`import mcp-memory` needs no more)."""
    return await api.write(actor, api.service.record_graph_facts_brief, _facts(body))


def _facts(body: GraphFactsBatch) -> list[GraphFact]:
    """The service's facts of a validated batch, not validated again (`memory_draft`)."""
    return [
        GraphFact.model_construct(
            draft=memory_draft(f.memory), entity_ids=f.entity_ids, relations=f.relations
        )
        for f in body.facts
    ]
