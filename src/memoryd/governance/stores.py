"""The stores a governance change writes, handed over by the service for one operation.

Decay, restore and merge each touch the vault, the graph, the search index and the audit log
in the service's fixed order, under a write intent (`memoryd.journal`). The service owns the
stores and the locks; it lends them here as one bundle, so each governance module does its
one job without importing the service.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from memoryd.audit import AuditLog
from memoryd.graph.store import GraphStore
from memoryd.journal import Journal
from memoryd.models import Memory
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.vault import Vault


@dataclass(frozen=True)
class Stores:
    """The service's stores and helpers, as they are right now (reindex replaces some)."""

    home: Path
    vault: Vault
    graph: GraphStore
    index: SearchIndex
    audit: AuditLog
    journal: Journal
    actor: str
    lock: Callable[[str], AbstractContextManager[None]]
    """The memory file's lock (shared with the capture hook), as a bounded wait."""
    lock_timeout_s: float
    """How long `lock` waits (the decay renamer, a child process, waits as long)."""
    search_doc: Callable[[Memory], SearchDoc]
    """What the search index holds of a memory."""
