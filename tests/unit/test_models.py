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


def _varied_frontmatters() -> list[Frontmatter]:
    """Every field empty, set, zero or None, alone and together, and assigned after parsing."""
    full = meta(
        updated_at="2026-06-02T11:30:00.250000+02:00",
        tags=["react", "数据库"],
        triggers=["when"],
        category="frontend",
        ttl_days=0,
        decay_state="dim",
        recall_count=3,
        last_recalled_at="2026-06-03T00:00:00Z",
        dura_score={"D": 0.7, "U": 0.8, "R": 0.6, "A": 1.0, "by": "heuristic-v1"},
        promoted_from="2026-05-01-x-aaaaaa",
        supersedes=["2026-05-01-old-bbbbbb"],
        supersede_decisions=[
            {"older": "2026-05-01-old-bbbbbb", "decided_at": "2026-06-01T10:00:00Z"},
            {"older": "2026-05-02-y-cccccc", "status": "rejected", "reason": "no", "judge": "u"},
        ],
        observations=["entity:library:React"],
        relations=[
            "mentions:entity:library:React",
            {"predicate": "uses", "object": "entity:tool:uv", "confidence": 0.5, "label": "runs"},
            {"predicate": "mentions", "object": "x", "valid_from": "2026-06-01T10:00:00Z"},
        ],
        forgotten_at="2026-07-01T00:00:00Z",
    )
    varied = [meta(), full, meta(ttl_days=7, dura_score={"D": 0, "U": 0, "R": 0, "A": 0})]
    for name in Frontmatter.model_fields:
        varied.append(meta(**{name: getattr(full, name)}))
    assigned = meta()
    assigned.title = "  Renamed  "
    assigned.tags = ["a", "a", "b"]
    assigned.updated_at = datetime(2026, 6, 5, 1, 2, 3)
    varied.append(assigned)
    return varied


def test_yaml_dict_spelled_out_is_pydantics_dump() -> None:
    """The spelled-out `to_yaml_dict` (files are rendered from it) gives what pydantic's dump
    gives, key order and value types included."""
    for m in _varied_frontmatters():
        spelled = m.to_yaml_dict()
        dumped = m._yaml_dict_dumped()
        assert spelled == dumped
        assert list(spelled) == list(dumped)
        assert [type(v) for v in spelled.values()] == [type(v) for v in dumped.values()]


def test_yaml_dict_keeps_unknown_keys_as_json_values() -> None:
    m = meta(reviewed_at=datetime(2026, 6, 1, tzinfo=UTC), note="kept", relations=["uses:x"])
    assert m.to_yaml_dict() == m._yaml_dict_dumped()
    assert list(m.to_yaml_dict())[-3:] == ["reviewed_at", "note", "relations"]
    assert m.to_yaml_dict()["reviewed_at"] == "2026-06-01T00:00:00Z"
