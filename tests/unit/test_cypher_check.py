"""`check_cypher` keeps a check a short query text passed with the same parameter names
(memoryd's own reads repeat a few texts, several for each `record`), never one that
failed, and never across other parameter names or procedures."""

from __future__ import annotations

import pytest

from memoryd.errors import InvalidInput, PolicyDenied
from memoryd.graph import store
from memoryd.graph.store import check_cypher


def test_a_passed_check_is_kept_for_the_same_text_and_names() -> None:
    query = "MATCH (m:Memory {slug: $slug}) RETURN m.slug // kept-check test"
    store._checked.cache_clear()
    check_cypher(query, {"slug": "a"})
    check_cypher(query, {"slug": "b"})
    info = store._checked.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    # Other names are checked again: an unused one is refused, a missing one too.
    with pytest.raises(InvalidInput, match=r"\$other"):
        check_cypher(query, {"slug": "a", "other": 1})
    with pytest.raises(InvalidInput, match=r"\$slug"):
        check_cypher(query, {})


def test_a_failed_check_fails_every_time() -> None:
    query = "MATCH (m:Memory) SET m.title = 'x' RETURN m.slug"
    for _ in range(3):
        with pytest.raises(PolicyDenied, match="SET"):
            check_cypher(query)
    with pytest.raises(PolicyDenied):
        check_cypher("CALL threads=1 RETURN 1", procedures=frozenset({"show_tables"}))


def test_a_long_text_is_checked_each_time_and_not_kept() -> None:
    query = "MATCH (m:Memory) RETURN m.slug /* " + "x" * store._KEPT_CHECK_CHARS + " */"
    store._checked.cache_clear()
    check_cypher(query)
    check_cypher(query)
    assert store._checked.cache_info().currsize == 0
