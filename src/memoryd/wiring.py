"""The composition root: the only place that turns Settings into open stores."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import sqlite3
from contextlib import ExitStack
from pathlib import Path

from memoryd.audit import AuditLog
from memoryd.config import Settings
from memoryd.enrichment import EnrichmentPolicy
from memoryd.errors import PolicyDenied, StorageError
from memoryd.extraction.pipeline import Extractor
from memoryd.governance.store import GovernanceStore
from memoryd.graph.kuzu_store import DB_FILE, KuzuGraphStore
from memoryd.graph.sandbox import CypherLimits
from memoryd.graph.store import GraphStore
from memoryd.llm.base import LLMProvider
from memoryd.locking import HomeLock
from memoryd.native import limit_malloc_arenas
from memoryd.private import make_private_dir, tighten_shallow
from memoryd.search.index import META_FILE as SEARCH_META_FILE
from memoryd.search.index import SearchIndex
from memoryd.service import GraphFactory, MemoryService
from memoryd.vault import Vault

logger = logging.getLogger(__name__)

GRAPH_DIR = "graph"
SEARCH_DIR = "search"
AUDIT_DIR = "audit"
GOVERNANCE_DB = "governance.db"


def ensure_home(home: Path) -> None:
    """Create the data dir (mode 0700), or say plainly why it cannot be used."""
    try:
        make_private_dir(home)
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


def graph_factory(settings: Settings, *, read_only: bool = False) -> GraphFactory:
    def open_graph(directory: Path) -> GraphStore:
        return KuzuGraphStore(
            directory,
            engine=settings.graph.engine,
            buffer_pool_mb=settings.graph.buffer_pool_mb,
            max_fanout=settings.graph.max_fanout,
            query_timeout_ms=settings.graph.query_timeout_ms,
            read_only=read_only,
        )

    return open_graph


def cypher_limits(settings: Settings) -> CypherLimits:
    return CypherLimits(
        memory_mb=settings.graph.cypher_memory_mb,
        timeout_ms=settings.graph.cypher_timeout_ms,
        result_mb=settings.graph.cypher_result_mb,
    )


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


def open_service(
    settings: Settings, *, actor: str = "cli", read_only: bool = False
) -> MemoryService:
    """Lock the data dir and open every store; the service releases the lock on close().

    `read_only` (notebooks without a daemon) takes no lock and writes nothing; see
    `open_read_only_service`.
    """
    limit_malloc_arenas()  # a no-op once the process has made its arenas (see memoryd.native)
    if read_only:
        return open_read_only_service(settings, actor=actor)
    home = settings.home
    ensure_home(home)
    lock = HomeLock(home, timeout_s=settings.lock_timeout_s)
    lock.acquire()
    with ExitStack() as undo:
        undo.callback(lock.release)

        def release() -> None:
            private_engine_files(home)
            lock.release()

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
        on_close=release,
        cypher_limits=cypher_limits(settings),
        enrichment=EnrichmentPolicy(
            max_attempts=settings.enrichment.max_attempts,
            backoff_s=settings.enrichment.backoff_s,
        ),
    )
    if refill:
        service.refill_search_index()
    private_engine_files(home)
    return service


def private_engine_files(home: Path) -> None:
    """Kuzu and tantivy create their files with the process umask: in library use (no
    `private_umask`) they may be 0644. Their directories are 0700 from the start, so nobody
    else can reach them; this makes the files say so too."""
    tighten_shallow(home / GRAPH_DIR)
    tighten_shallow(home / SEARCH_DIR)


def open_read_only_service(settings: Settings, *, actor: str = "notebook") -> MemoryService:
    """A service over an existing data dir that reads and never writes.

    It takes no data-dir lock (so it does not make a CLI command wait), opens the graph
    read-only (Kuzu refuses while another process has it open read-write: GraphLocked), uses
    the search index as it is (never rebuilt here), and reads governance.db immutably so
    SQLite creates no -wal/-shm beside it. The service refuses writes (PolicyDenied) and
    does not count recalls.
    """
    home = settings.home
    _require_data(home)
    factory = graph_factory(settings, read_only=True)
    graph = factory(home / GRAPH_DIR)
    try:
        service = _read_only_service(home, graph, factory, actor=actor)
    except BaseException:
        graph.close()
        raise
    service.cypher_limits = cypher_limits(settings)
    return service


def open_reader_service(home: Path, graph: GraphStore) -> MemoryService:
    """The read-only service of a daemon's recall reader (`memoryd.daemon.readers`): the
    daemon owns the graph and lends `graph`, whose reads go back to it."""
    _require_data(home)

    def no_graph(directory: Path) -> GraphStore:
        raise PolicyDenied(f"a recall reader does not open graphs ({directory})")

    return _read_only_service(home, graph, no_graph, actor="daemon")


def _require_data(home: Path) -> None:
    for needed in (
        home / GRAPH_DIR / DB_FILE,
        home / SEARCH_DIR / SEARCH_META_FILE,
        home / GOVERNANCE_DB,
    ):
        if not needed.exists():
            raise StorageError(
                f"no memoryd data to read at {home} ({needed.name} is missing)",
                hint="record a memory or run `memoryd demo --home <dir>` first, or start"
                " `memoryd serve`",
            )


def _read_only_service(
    home: Path, graph: GraphStore, factory: GraphFactory, *, actor: str
) -> MemoryService:
    governance_path = home / GOVERNANCE_DB
    with ExitStack() as undo:
        index = SearchIndex.open(home / SEARCH_DIR)
        undo.callback(index.close)
        try:
            conn = sqlite3.connect(
                f"{governance_path.absolute().as_uri()}?mode=ro&immutable=1",
                uri=True,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read {governance_path}: {exc}") from exc
        governance = GovernanceStore(conn, governance_path)
        undo.pop_all()
    return MemoryService(
        home=home,
        vault=Vault(home),
        graph=graph,
        index=index,
        audit=AuditLog(home / AUDIT_DIR),
        governance=governance,
        graph_factory=factory,
        actor=actor,
        read_only=True,
    )
