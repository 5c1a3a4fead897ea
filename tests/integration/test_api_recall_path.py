"""What a recall costs the daemon besides its ranking: its thread hand-offs, and the answer's
JSON, which must stay what the response model's own dump gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from memoryd.api.app import create_app
from memoryd.api.runner import ServiceRunner
from memoryd.api.schemas import RecallPage
from memoryd.api.security import LocalOnly
from memoryd.config import Settings
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from memoryd.wiring import open_service


@pytest.fixture
def service(settings: Settings, project: Path) -> Iterator[MemoryService]:
    svc = open_service(settings)
    try:
        for title, body in [
            ("Use Redis for sessions", "Sessions live in Redis with a ten minute TTL."),
            ("Redis timeouts", "Raise the Redis client timeout to 5 s on the CI runners."),
            ("Postgres migrations", "Run alembic upgrade head before the deploy."),
        ]:
            svc.record(
                MemoryDraft(type=MemoryType.DECISION, title=title, body=body, scope_path=project)
            )
        yield svc
    finally:
        svc.close()


@pytest.fixture
def client(service: MemoryService, settings: Settings) -> Iterator[TestClient]:
    runner = ServiceRunner()
    app = create_app(service, runner, settings=settings)
    try:
        with TestClient(LocalOnly(app), base_url="http://localhost") as http:
            yield http
    finally:
        runner.close()


def test_a_recall_hands_off_to_a_thread_only_for_its_ranking(
    client: TestClient, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hand-off to the threadpool is a thread wake-up on the daemon's cores (the
    `backend` dependency, a plain function, used to be one per request)."""
    hops: list[str] = []
    plain = anyio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__qualname__", repr(fn)))
        return await plain(fn, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    params = {"q": "redis timeout", "scope": str(project), "track": "false"}
    response = client.get("/v1/recall", params=params)
    assert response.status_code == 200, response.text
    assert response.json()["hits"]
    assert len(hops) == 1, hops  # the ranking (`Backend.rank` on the runner)


def test_a_recall_answer_is_the_response_models_own_json(
    client: TestClient, service: MemoryService, project: Path
) -> None:
    """Byte for byte the JSON `RecallPage` dumps for the service's own recall: no encoder of
    the route's may drift from the model (field order, floats, timestamps, nulls)."""
    params: dict[str, str | int] = {
        "q": "redis timeout",
        "scope": str(project),
        "track": "false",
        "limit": 1,
    }
    response = client.get("/v1/recall", params=params)
    assert response.status_code == 200, response.text
    result = service.recall("redis timeout", scope=project, k=2, track=False)
    assert len(result.hits) == 2  # one for the page, one to know a next page exists
    expected = RecallPage(
        query=result.query,
        hits=result.hits[:1],
        entities=result.entities,
        stages=result.stages,
        notes=result.notes,
        hidden=result.hidden,
        limit=1,
        offset=0,
        next_offset=1,
    )
    assert response.content == expected.model_dump_json().encode()
    assert response.headers["content-type"] == "application/json"
    posted = client.post("/v1/recall", json={**params, "track": False})
    assert posted.content == response.content
