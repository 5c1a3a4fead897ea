"""The identity profile's pure rules: months, versions, and the compiled text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memoryd.errors import InvalidInput, NotFound
from memoryd.governance.profile import (
    Source,
    check_version,
    compile_identity,
    entity_label,
    parse_month,
    previous_month,
)


def test_months() -> None:
    assert parse_month(" 2026-12 ") == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )
    assert previous_month(datetime(2026, 1, 1, 4, tzinfo=UTC)) == "2025-12"
    assert previous_month(datetime(2026, 3, 31, 23, tzinfo=UTC)) == "2026-02"
    for bad in ("2026-13", "2026-00", "0000-01", "9999-12", "2026-1", "26-01", "２０２６-０１", ""):
        with pytest.raises(InvalidInput, match="is not YYYY-MM"):
            parse_month(bad)


def test_version_numbers_out_of_range_are_unknown() -> None:
    assert check_version(3) == 3
    for bad in (0, -1, 2**63):
        with pytest.raises(NotFound, match=f"no profile version {bad}"):
            check_version(bad)


def source(slug: str, type: str, day: int, *entities: tuple[str, str, str]) -> Source:
    return Source(
        slug=slug,
        type=type,
        title=f"Title {slug}",
        body=f"Body of {slug}. It goes on.",
        scope_hash="0123456789ab",
        created_at=datetime(2026, 3, day, tzinfo=UTC),
        entities=entities,
    )


def test_compiled_identity_groups_by_entity_kind_whatever_the_input_order() -> None:
    uv = ("entity:tool:uv", "tool", "uv")
    solid = ("entity:library:Solid", "library", "Solid")
    sources = [
        source("b", "decision", 2, solid),
        source("a", "preference", 1, uv, solid),  # a tool and a library: Tools comes first
        source("c", "decision", 3),
        source("d", "preference", 4, solid),
    ]
    text = compile_identity(sources)
    assert text == compile_identity(list(reversed(sources)))
    assert text.splitlines() == [
        "# Identity",
        "",
        "_Compiled by memoryd without an LLM from 4 current preferences and decisions;"
        " each line cites its memory._",
        "",
        "## Tools",
        "",
        "- Title a: Body of a. It goes on. (preference, 2026-03-01; Solid, uv) [a]",
        "",
        "## Libraries",
        "",
        "- Title d: Body of d. It goes on. (preference, 2026-03-04; Solid) [d]",
        "- Title b: Body of b. It goes on. (decision, 2026-03-02; Solid) [b]",
        "",
        "## General",
        "",
        "- Title c: Body of c. It goes on. (decision, 2026-03-03) [c]",
    ]
    assert "No current preference or decision" in compile_identity([])
    assert entity_label("entity:library:Solid") == "Solid (library)"
