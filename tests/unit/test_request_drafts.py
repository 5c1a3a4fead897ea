"""A write request's memories become the service's drafts without being validated a second
time (issue 26 item 9: a 5000-fact import batch dumped and re-validated every draft after
the route had validated the body), and each draft is the one validation would make."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.api.facts import _facts
from memoryd.api.schemas import GraphFactsBatch, MemoryCreate, memory_draft
from memoryd.errors import InvalidInput
from memoryd.models import GraphFact, MemoryDraft, RelationRef

FULL = {
    "type": "decision",
    "title": "Use uv",
    "body": "uv replaced pip",
    "scope": "/work/project",
    "source": "mcp",
    "tags": ["tooling"],
    "triggers": ["pip"],
    "category": "build",
    "created_at": "2026-05-01T10:00:00+02:00",
    "ttl_days": 30,
    "allow_duplicate": True,
    "supersedes": ["2026-04-01-use-pip-abc123"],
    "promoted_from": "2026-04-02-session-def456",
}


def _validated(body: MemoryCreate) -> MemoryDraft:
    return MemoryDraft(**body.model_dump(exclude={"scope"}), scope_path=Path(body.scope))


@pytest.mark.parametrize(
    "fields", [FULL, {"type": "fact", "title": "t", "scope": "/p"}], ids=["full", "defaults"]
)
def test_a_draft_is_what_validating_it_gives(fields: dict[str, Any]) -> None:
    body = MemoryCreate.model_validate(fields)
    draft = memory_draft(body)
    assert draft == _validated(body)
    assert draft.model_dump() == _validated(body).model_dump()
    assert draft.model_fields_set == _validated(body).model_fields_set
    assert list(draft.__dict__) == list(MemoryDraft.model_fields)


def test_drafts_share_no_value_but_what_requests_give() -> None:
    """Drafts are copies of one prototype: a field no request sets would be shared by every
    draft, so each such field must hold an immutable default."""
    given = {*MemoryCreate.model_fields, "scope_path"} - {"scope"}
    for name in set(MemoryDraft.model_fields) - given:
        assert isinstance(MemoryDraft.model_fields[name].get_default(), (str, int, type(None)))
    one = memory_draft(MemoryCreate.model_validate(FULL))
    two = memory_draft(MemoryCreate.model_validate(FULL))
    one.tags.append("more")
    assert two.tags == ["tooling"]


def test_every_request_field_is_a_draft_field() -> None:
    """`memory_draft` hands the request's fields over as they are: each must be a draft's."""
    drafts = MemoryDraft.model_fields
    for name, field in MemoryCreate.model_fields.items():
        if name == "scope":
            continue
        assert name in drafts
        assert field.annotation == drafts[name].annotation


def test_a_batch_becomes_facts_without_validating_again(monkeypatch: pytest.MonkeyPatch) -> None:
    body = GraphFactsBatch.model_validate(
        {
            "facts": [
                {
                    "memory": {**FULL, "created_at": datetime(2026, 5, 1, tzinfo=UTC).isoformat()},
                    "entity_ids": ["entity:tool:uv"],
                    "relations": [{"predicate": "uses", "object": "entity:tool:uv"}],
                }
            ]
            * 3
        }
    )

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr(MemoryDraft, "__init__", refused)
    monkeypatch.setattr(GraphFact, "__init__", refused)
    facts = _facts(body)
    monkeypatch.undo()
    assert len(facts) == 3
    want = GraphFact(
        draft=_validated(body.facts[0].memory),
        entity_ids=["entity:tool:uv"],
        relations=[RelationRef(predicate="uses", object="entity:tool:uv")],
    )
    assert all(fact == want for fact in facts)


def test_a_relative_scope_is_still_refused() -> None:
    body = MemoryCreate.model_validate({"type": "fact", "title": "t", "scope": "project"})
    with pytest.raises(InvalidInput, match="not an absolute path"):
        memory_draft(body)
