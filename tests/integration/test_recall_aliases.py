"""Recall through an entity's other names (issue 27): the lexicon's aliases, a name taught
with `entity alias`, a Chinese kind word. Real Kuzu and index."""

from __future__ import annotations

from pathlib import Path

from memoryd.models import MemoryDraft
from memoryd.service import MemoryService


def rec(svc: MemoryService, project: Path, title: str, body: str) -> str:
    draft = MemoryDraft(type="decision", title=title, body=body, scope_path=project)
    return svc.record(draft).slug


def test_a_name_engineers_type_reaches_the_memory_that_uses_another(
    svc: MemoryService, project: Path
) -> None:
    hosting = rec(svc, project, "Hosting", "Services run on a self-managed Kubernetes cluster.")
    rec(svc, project, "Linting", "We lint with ruff before every commit.")
    result = svc.recall("k8s", scope=project)
    assert [h.slug for h in result.hits] == [hosting]
    assert result.hits[0].stages == ["entity"]
    assert result.entities == ["entity:tool:Kubernetes"]


def test_a_taught_alias_reaches_the_memory(svc: MemoryService, project: Path) -> None:
    orm = rec(svc, project, "ORM", "Models are mapped with SQLAlchemy.")
    rec(svc, project, "Linting", "We lint with ruff before every commit.")
    assert svc.recall("sqla", scope=project).hits == []
    svc.alias_entity("SQLAlchemy", "sqla")
    assert [h.slug for h in svc.recall("why sqla", scope=project).hits] == [orm]


def test_a_chinese_kind_word_reaches_the_entity_of_that_kind(
    svc: MemoryService, project: Path
) -> None:
    store = rec(svc, project, "Storage", "The orders service stores data in PostgreSQL.")
    rec(svc, project, "Linting", "We lint with ruff before every commit.")
    hits = svc.recall("我们用的是什么数据库？", scope=project).hits
    assert [h.slug for h in hits] == [store]
    assert hits[0].stages == ["kind"]
