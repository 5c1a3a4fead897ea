from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from memoryd.models import DecayState, Frontmatter, MemoryType, RelationRef, fingerprint


def meta(**overrides: object) -> Frontmatter:
    data: dict[str, object] = {
        "title": "Use Solid",
        "slug": "2026-06-01-use-solid-abc123",
        "type": "decision",
        "scope_hash": "d8e86b48589e",
        "source": "manual",
        "created_at": "2026-06-01T10:00:00Z",
    }
    data.update(overrides)
    return Frontmatter.model_validate(data)


def test_frontmatter_parses_seed_fields() -> None:
    m = meta(
        tags=["react", "solid", "react"],
        dura_score={"D": 0.7, "U": 0.8, "R": 0.6, "A": 0.9},
        relations=["mentions:entity:library:React"],
    )
    assert m.type is MemoryType.DECISION
    assert m.created_at == datetime(2026, 6, 1, 10, tzinfo=UTC)
    assert m.tags == ["react", "solid"]
    assert m.dura_score is not None
    assert m.dura_score.mean == pytest.approx(0.75)
    assert m.relations[0].object == "entity:library:React"
    assert m.decay_state is DecayState.ALIVE


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("type", "diary", "type"),
        ("title", "   ", "title is empty"),
        ("scope_hash", "XYZ", "12 lowercase hex"),
        ("slug", "../etc/passwd", "file name"),
    ],
)
def test_frontmatter_rejects_bad_fields(field: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        meta(**{field: value})


def test_relation_compact_round_trip() -> None:
    plain = RelationRef.model_validate("prefers:entity:library:Solid")
    assert plain.compact() == "prefers:entity:library:Solid"
    rich = RelationRef(predicate="supersedes", object="entity:library:React", confidence=0.7)
    assert RelationRef.model_validate(rich.compact()) == rich
    with pytest.raises(ValidationError, match="predicate:object"):
        RelationRef.model_validate("nonsense")


def test_yaml_dict_keeps_seed_order_and_drops_empties() -> None:
    data = meta(tags=["a"]).to_yaml_dict()
    assert list(data)[:6] == ["title", "slug", "type", "scope_hash", "source", "created_at"]
    assert "supersedes" not in data
    assert data["tags"] == ["a"]
    assert data["created_at"] == "2026-06-01T10:00:00Z"


def test_fingerprint_uses_first_500_chars() -> None:
    assert fingerprint("x" * 500 + "tail one") == fingerprint("x" * 500 + "tail two")
    assert fingerprint("a") != fingerprint("b")
