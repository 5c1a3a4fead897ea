"""The typed errors for what a FalkorDB server answers or fails to answer
(`falkordb_store.FalkorGraphStore`): read from the server's message, so this module needs
no client import."""

from __future__ import annotations

from memoryd.errors import (
    InvalidInput,
    MemorydError,
    PolicyDenied,
    QueryLimitExceeded,
    StorageError,
)
from memoryd.graph.store import MEMORY_HINT, TIME_HINT


def lost_writes(key: str, count: int) -> StorageError:
    """Acknowledged writes the server no longer has and the redo log cannot replay."""
    return StorageError(
        f"the FalkorDB graph {key} lost {count} acknowledged writes"
        " (its server restarted without them, and the redo log no longer holds them)",
        hint="run `memoryd reindex` to rebuild the graph from the memory files",
    )


def query_error(exc: Exception, timeout_ms: int) -> MemorydError:
    """The typed error for a query the server refused or stopped."""
    text = str(exc)
    lowered = text.lower()
    if "empty key" in lowered:
        return StorageError(
            f"the graph is gone from the FalkorDB server ({text})",
            hint="run `memoryd reindex` to rebuild the graph from the memory files",
        )
    if "timeout_max" in lowered:  # asked for more time than the server allows: never ran
        return StorageError(
            f"the FalkorDB server refused the query: it asked for {timeout_ms:,} ms, more than"
            f" the server's TIMEOUT_MAX allows ({text})",
            hint="raise the server's TIMEOUT_MAX, or lower graph.cypher_timeout_ms",
        )
    if "timed out" in lowered or "timeout" in lowered:
        return QueryLimitExceeded(
            f"the graph query ran past its time limit ({timeout_ms:,} ms) and was stopped",
            hint=f"{TIME_HINT}; or raise graph.cypher_timeout_ms",
            limit="time",
        )
    if "mem" in lowered and "capacity" in lowered:
        return QueryLimitExceeded(
            f"the graph query needed more memory than a query may use ({text})",
            hint=f"{MEMORY_HINT}; or raise the server's QUERY_MEM_CAPACITY",
            limit="memory",
        )
    if "read-only" in lowered or "RO_QUERY" in text:
        return PolicyDenied(
            f"graph queries are read-only: {text}",
            hint="use `memoryd record` and the entity commands to change the graph",
        )
    return InvalidInput(f"invalid Cypher: {text}")


def server_error(exc: Exception, url: str) -> StorageError:
    """The server at `url` cannot be reached or refused the connection."""
    return StorageError(
        f"cannot reach the FalkorDB server at {url}: {exc}",
        hint="start it (`memoryd setup falkordb`), or check graph.url and the password",
    )
