"""The composition root: the only place that turns Settings into open stores."""

from __future__ import annotations

import functools
import logging
import os
import shutil
from contextlib import ExitStack
from pathlib import Path

from memoryd.audit import AuditLog
from memoryd.config import Settings
from memoryd.errors import StorageError
from memoryd.extraction.pipeline import Extractor
from memoryd.governance.store import GovernanceStore
from memoryd.graph.kuzu_store import KuzuGraphStore
from memoryd.graph.store import GraphStore
from memoryd.llm.base import LLMProvider
from memoryd.locking import HomeLock
from memoryd.search.index import SearchIndex
from memoryd.service import GraphFactory, MemoryService
from memoryd.vault import Vault

logger = logging.getLogger(__name__)

GRAPH_DIR = "graph"
SEARCH_DIR = "search"
AUDIT_DIR = "audit"
GOVERNANCE_DB = "governance.db"


def ensure_home(home: Path) -> None:
    """Create the data dir, or say plainly why it cannot be used."""
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the data dir {home}: {exc.strerror}",
            hint="point --home or MEMORYD_HOME at a writable directory",
        ) from exc
    if not os.access(home, os.W_OK | os.X_OK):
        raise StorageError(
            f"the data dir {home} is read-only",
            hint="make it writable, or point --home or MEMORYD_HOME at a writable directory",
        )


def graph_factory(settings: Settings) -> GraphFactory:
    def open_graph(directory: Path) -> GraphStore:
        return KuzuGraphStore(
            directory,
            engine=settings.graph.engine,
            buffer_pool_mb=settings.graph.buffer_pool_mb,
            max_fanout=settings.graph.max_fanout,
            query_timeout_ms=settings.graph.query_timeout_ms,
        )

    return open_graph


def open_search_index(home: Path) -> tuple[SearchIndex, bool]:
    """Open the search index. An unreadable or outdated one is derived data: it is replaced
    by an empty one, and the second value says it must be refilled from the vault."""
    directory = home / SEARCH_DIR
    try:
        return SearchIndex.open(directory), False
    except StorageError as exc:
        logger.warning("rebuilding the search index at %s: %s", directory, exc)
    shutil.rmtree(directory, ignore_errors=True)
    return SearchIndex.open(directory), True


@functools.cache
def shared_extractor(spacy_model: str | None) -> Extractor:
    """One extractor per process: its pipelines and lexicon take seconds to build, and it is
    thread-safe, so every service in the process (tests, the daemon) shares it."""
    return Extractor(spacy_model=spacy_model)


def llm_provider(settings: Settings) -> LLMProvider | None:
    """The configured LLM, or None: with none, extraction runs on the spaCy stage alone."""
    if settings.llm.provider == "none" or not settings.extraction.use_llm:
        return None
    from memoryd.llm.factory import provider_from_settings

    return provider_from_settings(settings.llm)


def open_service(settings: Settings, *, actor: str = "cli") -> MemoryService:
    """Lock the data dir and open every store; the service releases the lock on close()."""
    home = settings.home
    ensure_home(home)
    lock = HomeLock(home, timeout_s=settings.lock_timeout_s)
    lock.acquire()
    with ExitStack() as undo:
        undo.callback(lock.release)
        vault = Vault(home)
        factory = graph_factory(settings)
        graph = factory(home / GRAPH_DIR)
        undo.callback(graph.close)
        index, refill = open_search_index(home)
        undo.callback(index.close)
        audit = AuditLog(home / AUDIT_DIR)
        governance = GovernanceStore.open(home / GOVERNANCE_DB)
        undo.pop_all()
    service = MemoryService(
        extractor=shared_extractor(settings.extraction.spacy_model)
        if settings.extraction.enabled
        else None,
        llm=llm_provider(settings),
        home=home,
        vault=vault,
        graph=graph,
        index=index,
        audit=audit,
        governance=governance,
        graph_factory=factory,
        actor=actor,
        on_close=lock.release,
    )
    if refill:
        service.refill_search_index()
    return service
