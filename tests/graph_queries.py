"""What Cypher a service runs: tests that count a step's graph reads wrap it in `queries`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from memoryd.service import MemoryService


@contextlib.contextmanager
def queries(svc: MemoryService) -> Iterator[list[str]]:
    """The Cypher texts the service's graph runs inside the block, in order (the real
    store runs them; this only notes them)."""
    calls: list[str] = []
    cypher = svc.graph.cypher

    def counted(query: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(query)
        return cypher(query, *args, **kwargs)

    svc.graph.cypher = counted  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del svc.graph.cypher
