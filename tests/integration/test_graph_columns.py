"""A Kuzu bulk write sends the rows of its UNWIND statements as typed columns, one list per
field (`kuzu_support.as_columns`): the binding converted a list of dicts value by value, the
largest part of an import batch's graph statements (issue 26 item 9). What is stored must
be what the rows stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kuzu
import pytest

from memoryd.graph.kuzu_store import KuzuGraphStore
from memoryd.graph.kuzu_support import COLUMN_ROWS, as_columns
from memoryd.models import Frontmatter, Memory, RelationRef
from tests.conftest import ENGINE

pytestmark = pytest.mark.skipif(ENGINE != "kuzu", reason="Kuzu's parameter binding")

SCOPE = "0123456789ab"


def _memory(n: int, prefix: str) -> Memory:
    meta = Frontmatter.model_validate(
        {
            "title": f"memory {n}",
            "slug": f"{prefix}-{n:03d}",
            "type": "fact",
            "scope_hash": SCOPE,
            "source": "mcp-memory-import",
            "created_at": datetime(2026, 5, 1, tzinfo=UTC) + timedelta(minutes=n),
            "observations": [f"entity:person:P{n % 7}", "entity:tool:uv"],
            "relations": [
                RelationRef(
                    predicate="uses",
                    subject=f"entity:person:P{n % 7}",
                    object=f"entity:library:L{n % 5}",
                    label="depends on" if n % 2 else None,
                    confidence=0.5 + (n % 3) / 10,
                )
            ],
        }
    )
    return Memory(meta=meta, body=f"body {n}")


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[KuzuGraphStore]:
    store = KuzuGraphStore(tmp_path / "graph", buffer_pool_mb=128)
    yield store
    store.close()


def _stored(graph: KuzuGraphStore, prefix: str) -> dict[str, Any]:
    def rows(query: str) -> list[list[Any]]:
        found = graph.cypher(query, {"p": prefix}, limit=10_000).rows
        return sorted([str(v).removeprefix(prefix) for v in row] for row in found)

    return {
        "mentions": rows(
            "MATCH (m:Memory)-[r:MENTIONS]->(e) WHERE m.slug STARTS WITH $p"
            " RETURN m.slug, e.id, r.confidence"
        ),
        "relates": rows(
            "MATCH (a)-[r:RELATES]->(b) WHERE r.source_memory STARTS WITH $p"
            " RETURN a.id, b.id, r.predicate, r.confidence, r.source_memory, r.created_at,"
            " r.valid_from, r.superseded_at, r.label"
        ),
    }


def test_a_bulk_write_binds_its_rows_as_columns(
    graph: KuzuGraphStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No statement of a bulk write gets a long list of dicts, and it stores what the same
    memories written one at a time (rows bound as scalars) store."""
    bound: list[Any] = []
    execute = kuzu.Connection.execute

    def watched(self: kuzu.Connection, query: Any, parameters: Any = None) -> Any:
        bound.extend((parameters or {}).values())
        return execute(self, query, parameters) if parameters else execute(self, query)

    monkeypatch.setattr(kuzu.Connection, "execute", watched)
    count = 2 * COLUMN_ROWS
    graph.upsert_memories([_memory(n, "bulk") for n in range(count)], new=True)
    rows_bound = [
        v for v in bound if isinstance(v, list) and len(v) >= COLUMN_ROWS and type(v[0]) is dict
    ]
    assert rows_bound == []
    monkeypatch.undo()
    for n in range(count):
        graph.upsert_memories([_memory(n, "single")], new=True)
    bulk = _stored(graph, "bulk")
    assert len(bulk["mentions"]) == 2 * count
    assert len(bulk["relates"]) == count
    assert bulk == _stored(graph, "single")
    uv = graph.get_entity("entity:tool:uv")
    assert uv is not None
    assert uv.mention_count == 2 * count


def _rows(n: int, **extra: Any) -> list[dict[str, Any]]:
    when = datetime(2026, 5, 1, tzinfo=UTC)
    return [
        {
            "s": f"s{i}",
            "n": i,
            "x": i / 2 if i % 2 else i,  # int and float: DOUBLE
            "t": when + timedelta(seconds=i) if i % 3 else None,
            "empty": None,
            "flag": bool(i % 2),
            **extra,
        }
        for i in range(n)
    ]


QUERY = (
    "UNWIND $rows AS r WITH r.s AS s, CAST(r.n AS INT64) AS n, CAST(r.x AS DOUBLE) AS x,"
    " CAST(r.t AS TIMESTAMP) AS t, CAST(r.empty AS STRING) AS empty, r.flag AS flag"
    " RETURN s, n, x, t, empty, flag"
)


def _runner(tmp_path: Path) -> Callable[[str, dict[str, Any]], list[Any]]:
    """A query runner on a new kuzu database: every row a statement returns."""
    conn = kuzu.Connection(kuzu.Database(str(tmp_path / "g")))

    def run(q: str, p: dict[str, Any]) -> list[Any]:
        result = conn.execute(q, p)
        assert isinstance(result, kuzu.QueryResult)
        out = []
        while result.has_next():
            out.append(result.get_next())
        return out

    return run


def test_columns_read_back_as_the_rows_did(tmp_path: Path) -> None:
    rows = _rows(COLUMN_ROWS + 5)
    rewritten = as_columns(QUERY, {"rows": rows})
    assert rewritten is not None
    query, params = rewritten
    assert "rows" not in params
    assert all(isinstance(v, list) and not isinstance(v[0], dict) for v in params.values())
    run = _runner(tmp_path)
    assert run(query, params) == run(QUERY, {"rows": rows})


def test_lists_of_strings_read_back_as_the_rows_did(tmp_path: Path) -> None:
    """A memory's tags and triggers (lists of strings, some empty, some null) go as one
    `STRING[]` column each: a bulk write of memories binds no rows either."""
    rows = [
        {**row, "tags": None if i % 5 == 0 else [f"t{j}" for j in range(i % 3)]}
        for i, row in enumerate(_rows(COLUMN_ROWS + 5))
    ]
    query = "UNWIND $rows AS r WITH CAST(r.tags AS STRING[]) AS tags, r.s AS s RETURN tags, s"
    rewritten = as_columns(query, {"rows": rows})
    assert rewritten is not None
    run = _runner(tmp_path)
    assert run(*rewritten) == run(query, {"rows": rows})
    assert [row[0] for row in run(*rewritten)[1:3]] == [["t0"], ["t0", "t1"]]


@pytest.mark.parametrize(
    ("query", "rows"),
    [
        (QUERY, _rows(COLUMN_ROWS - 1)),  # few rows: as they are
        (QUERY, _rows(COLUMN_ROWS, tags=[1])),  # a list of numbers
        (QUERY, [*_rows(COLUMN_ROWS), {"s": "short"}]),  # rows of other keys
        (QUERY, [{**r, "s": 1 if i else "a"} for i, r in enumerate(_rows(COLUMN_ROWS))]),
        ("UNWIND $rows AS r RETURN size($rows)", _rows(COLUMN_ROWS)),  # $rows again
        ("MATCH (m) RETURN m", _rows(COLUMN_ROWS)),  # no UNWIND
        ("UNWIND $rows AS s RETURN s", [f"s{i}" for i in range(COLUMN_ROWS)]),  # scalars
    ],
    ids=[
        "few",
        "list-of-numbers",
        "other-keys",
        "mixed-kinds",
        "rows-again",
        "no-unwind",
        "scalars",
    ],
)
def test_what_is_not_flat_rows_is_sent_as_it_is(query: str, rows: list[Any]) -> None:
    assert as_columns(query, {"rows": rows}) is None
