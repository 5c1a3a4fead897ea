"""`context.Item` is a plain class (the inject hook must not import `dataclasses`), yet it
behaves as the dataclass it replaced: equal by its fields, unhashable, `vars` for the daemon's
route, and whole after a pickle round trip (the recall readers send items through a pipe)."""

from __future__ import annotations

import pickle

import pytest

from memoryd.context import Item


def test_an_item_survives_the_readers_pipe_and_compares_by_its_fields() -> None:
    item = Item("use-postgres", "decision", "Use Postgres", "Because of JSONB.", "2026-12-04")
    again = pickle.loads(pickle.dumps(item))
    assert again == item
    assert vars(again) == {
        "slug": "use-postgres",
        "type": "decision",
        "title": "Use Postgres",
        "body": "Because of JSONB.",
        "created_at": "2026-12-04",
    }
    assert item != Item("use-mysql", "decision", "Use Postgres", "Because of JSONB.", "2026-12-04")
    assert item != vars(item)
    assert repr(item).startswith("Item(slug='use-postgres', type='decision',")
    with pytest.raises(TypeError):
        hash(item)
