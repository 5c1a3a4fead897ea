"""`record`'s own graph reads (issue 28): in the process that writes, each is one engine
statement, kept prepared on its connection (the sandbox keeps its READ ONLY transaction
around users' Cypher and keeps none of it); the older memories of a record's few entities
are read entity by entity by key, and give the rows the UNWIND form gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.errors import PolicyDenied
from memoryd.governance import supersede_graph
from memoryd.governance.supersede_graph import _MENTIONED_BY, _MENTIONED_BY_ONE, _mentioned, _Shared
from memoryd.graph.kuzu_store import KuzuGraphStore
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.conftest import ENGINE

START = datetime(2026, 1, 1, tzinfo=UTC)
TOOLS = ["PostgreSQL", "Redis", "Kafka"]


def _statements(store: KuzuGraphStore, monkeypatch: pytest.MonkeyPatch, query: str) -> list[str]:
    """The engine statements `store.cypher(query)` runs."""
    seen: list[str] = []
    execute = store._engine.Connection.execute

    def counted(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(text if isinstance(text, str) else "<prepared>")
        return execute(self, text, *args, **kwargs)

    monkeypatch.setattr(store._engine.Connection, "execute", counted)
    try:
        store.cypher(query)
    finally:
        monkeypatch.undo()
    return seen


def test_own_reads_run_as_one_statement_and_the_sandbox_keeps_its_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "MATCH (m:Memory) RETURN count(m)"
    writer = KuzuGraphStore(tmp_path / "graph", engine=ENGINE, buffer_pool_mb=64)
    try:
        assert len(_statements(writer, monkeypatch, query)) == 1  # the query, kept prepared
        # A write clause is still refused before the engine sees it.
        with pytest.raises(PolicyDenied):
            writer.cypher("MATCH (m:Memory) SET m.title = 'x' RETURN m.slug")
    finally:
        writer.close()
    sandboxed = KuzuGraphStore(tmp_path / "graph", engine=ENGINE, buffer_pool_mb=64, sandboxed=True)
    try:
        assert _statements(sandboxed, monkeypatch, query) == [
            "BEGIN TRANSACTION READ ONLY",
            query,
            "ROLLBACK",
        ]
    finally:
        sandboxed.close()


def test_a_records_entity_lists_read_by_key_are_the_unwind_forms_rows(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three entities, older memories of every judged kind and others, one archived: the
    lists read one entity at a time hold what one UNWIND statement over the three gives."""
    kinds = ["decision", "fact", "preference", "playbook", "session"]
    written = svc.record_many(
        [
            MemoryDraft(
                type=MemoryType(kinds[i % 5]),
                title=f"Use {TOOLS[i % 3]} for part {i}",
                body=f"Part {i} moves from {TOOLS[(i + 1) % 3]} to {TOOLS[i % 3]}.",
                scope_path=project,
                created_at=START + timedelta(minutes=i),
            )
            for i in range(30)
        ]
    )
    svc.archive(next(m for m in written if m.meta.type is MemoryType.DECISION).slug)
    scope = written[0].meta.scope_hash
    ids = [f"entity:tool:{name}" for name in TOOLS]
    shared = {"newer": [_Shared(1, f"entity:tool:{name}", name, "tool", ()) for name in TOOLS]}
    where = {"newer": (scope, "2027-01-01T00:00:00Z")}
    asked: list[str] = []
    cypher = svc.graph.cypher

    def counted(query: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(query)
        return cypher(query, *args, **kwargs)

    monkeypatch.setattr(svc.graph, "cypher", counted)
    keyed, _ = _mentioned(svc.graph, shared, where, None, 10_000)
    assert asked == [_MENTIONED_BY_ONE] * 3
    asked.clear()
    monkeypatch.setattr(supersede_graph, "KEYED_ROWS", 0)
    unwound, _ = _mentioned(svc.graph, shared, where, None, 10_000)
    assert asked == [_MENTIONED_BY]
    assert sorted(keyed) == sorted(unwound) == [(eid, scope) for eid in sorted(ids)]
    for key, rows in keyed.items():
        assert sorted(rows) == sorted(unwound[key])
        assert rows


def test_own_reads_are_kept_prepared_and_users_queries_are_not(tmp_path: Path) -> None:
    query = "MATCH (m:Memory) RETURN count(m)"
    writer = KuzuGraphStore(tmp_path / "graph", engine=ENGINE, buffer_pool_mb=64)
    try:
        assert writer.cypher(query).rows == [[0]]
        kept = writer._local.kept
        assert query in kept._kept
        spent = kept.spent
        assert writer.cypher(query).rows == [[0]]
        assert writer._rows(query) == [[0]]
        assert writer._local.kept is kept
        assert kept.spent == spent  # a kept statement takes nothing of the budget
    finally:
        writer.close()
    sandboxed = KuzuGraphStore(tmp_path / "graph", engine=ENGINE, buffer_pool_mb=64, sandboxed=True)
    try:
        assert sandboxed.cypher(query).rows == [[0]]
        assert query not in sandboxed._local.kept._kept  # its own reads only
    finally:
        sandboxed.close()
