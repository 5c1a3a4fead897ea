"""The composition root: the only place that turns Settings into open stores."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import time
from contextlib import ExitStack
from pathlib import Path

from memoryd.audit import AuditLog
from memoryd.config import Settings, load_settings
from memoryd.enrichment import EnrichmentPolicy
from memoryd.errors import (
    AuditChainBroken,
    GraphLocked,
    MemorydError,
    PolicyDenied,
    StorageError,
)
from memoryd.extraction.pipeline import Extractor
from memoryd.governance.decay import DecayPolicy
from memoryd.governance.promotions import ReviewPolicy
from memoryd.governance.store import GovernanceStore
from memoryd.graph.falkordb_dialect import FALKOR_DIR, FALKOR_MARKER, FALKOR_SOCKET
from memoryd.graph.kuzu_store import DB_FILE, KuzuGraphStore
from memoryd.graph.sandbox import CypherLimits
from memoryd.graph.store import GraphStore
from memoryd.llm.base import LLMProvider
from memoryd.locking import HomeLock
from memoryd.native import limit_malloc_arenas
from memoryd.private import make_private_dir, tighten_if_empty, tighten_shallow
from memoryd.search.index import META_FILE as SEARCH_META_FILE
from memoryd.search.index import SearchIndex
from memoryd.sensitive.files import ScopeCipher
from memoryd.sensitive.keys import KeyStore
from memoryd.service import GraphFactory, MemoryService
from memoryd.vault import Vault, rebased

logger = logging.getLogger(__name__)

GRAPH_DIR = "graph"
SEARCH_DIR = "search"
VECTORS_DIR = "vectors"
AUDIT_DIR = "audit"
GOVERNANCE_DB = "governance.db"


def ensure_home(home: Path) -> None:
    """Create the data dir (mode 0700), or say plainly why it cannot be used. An empty data
    dir the user made (`mkdir`, mode 0755) is memoryd's from its first open, so it is made
    0700 as if memoryd had created it; a dir that already holds files keeps its mode
    (`memoryd doctor` names it)."""
    try:
        make_private_dir(home)
        tighten_if_empty(home)
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


def graph_file(settings: Settings) -> str:
    """The file in a graph directory that says a graph is there (the database, or for a
    server engine the marker naming its key)."""
    return FALKOR_MARKER if settings.graph.engine == "falkordb" else DB_FILE


def falkordb_address(settings: Settings) -> tuple[str, str]:
    """The FalkorDB server's URL and this data dir's graph name on it: by default the local
    server `memoryd setup falkordb` runs in `<home>/falkordb/`, and a name from the home's
    path."""
    home = settings.home.resolve()
    url = settings.graph.url or f"unix://{home / FALKOR_DIR / FALKOR_SOCKET}"
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return url, settings.graph.name or f"memoryd-{digest}"


def graph_factory(settings: Settings, *, read_only: bool = False) -> GraphFactory:
    def open_graph(directory: Path) -> GraphStore:
        if settings.graph.engine == "falkordb":
            from memoryd.graph.falkordb_server import graph_password
            from memoryd.graph.falkordb_store import FalkorGraphStore

            url, name = falkordb_address(settings)
            return FalkorGraphStore(
                directory,
                url=url,
                name=name,
                password=graph_password(url),
                owns_name=settings.graph.name is None,
                max_fanout=settings.graph.max_fanout,
                query_timeout_ms=settings.graph.query_timeout_ms,
                read_only=read_only,
            )
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


def open_search_index(home: Path, vault: Vault) -> tuple[SearchIndex, bool]:
    """Open the search index. An unreadable or outdated one is derived data: it is replaced
    by an empty one, and the second value says it must be refilled from the vault. So is a
    missing one while the vault holds memories (an empty index would answer every search
    with nothing)."""
    directory = home / SEARCH_DIR
    missing = (
        not (directory / SEARCH_META_FILE).exists()
        and (home / GOVERNANCE_DB).exists()  # opened before: not the first open of a home
        and vault.has_memories()
    )
    if missing:
        logger.warning("the search index %s is missing: refilling it from the vault", directory)
    try:
        return SearchIndex.open(directory), missing
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
    settings: Settings, *, actor: str = "cli", read_only: bool = False, rebuild: bool = False
) -> MemoryService:
    """Lock the data dir, open every store and settle the writes a crash left unfinished
    (`MemoryService.recover`); the service releases the lock on close().

    A graph that is missing while the vault holds memories, or that cannot be opened, is a
    StorageError naming `memoryd reindex`, except with `rebuild` (what reindex itself opens
    with): then a missing graph starts empty and a broken one is moved aside, for reindex to
    rebuild. `read_only` (notebooks without a daemon) takes no lock and writes nothing; see
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

        keys = KeyStore(home)
        vault = Vault(home, cipher=ScopeCipher(keys))
        factory = graph_factory(settings)
        graph = open_graph(home, vault, factory, rebuild=rebuild, marker=graph_file(settings))
        undo.callback(graph.close)
        rebase_moved_home(graph, vault)
        index, refill = open_search_index(home, vault)
        undo.callback(index.close)
        index.commit_delay_s = settings.search.commit_delay_ms / 1000
        audit = AuditLog(home / AUDIT_DIR)
        governance = GovernanceStore.open(home / GOVERNANCE_DB)
        undo.callback(governance.close)
        witness_audit(audit, governance)
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
        review=ReviewPolicy(
            dura_threshold=settings.governance.dura_threshold,
            agents_decide=settings.governance.agents_decide,
        ),
    )
    service.supersede_settings = settings.supersede
    service.llm_allow_sensitive = settings.llm.allow_sensitive
    service.keys = keys
    service.digest_settings = settings.digest
    service.decay_policy = DecayPolicy(
        dim_days=settings.decay.dim_days,
        soft_forget_days=settings.decay.soft_forget_days,
        forget_days=settings.decay.forget_days,
    )
    try:
        try:
            service.recover()
        except AuditChainBroken as exc:
            # Reads (and `audit verify`, which says what is wrong) must still work; the
            # intents stay and are settled once the log is restored.
            logger.error("unfinished writes are not settled: %s", exc)
        if not read_only:
            try:
                service.repair_supersedes()  # one query when nothing is owed
            except MemorydError as exc:
                logger.warning("supersede decisions of older rules not judged again: %s", exc)
            try:
                service.repair_stray_entities()  # one query when nothing is owed
            except MemorydError as exc:
                logger.warning("stray entities not merged: %s", exc)
        if refill:
            service.refill_search_index()
    except BaseException:
        service.close()
        raise
    open_vectors(service, settings.recall.vectors, settings.recall.vector_model)
    private_engine_files(home)
    return service


def open_vectors(service: MemoryService, mode: str, model: str = "minilm") -> None:
    """Give `service` the vector stage when `recall.vectors` allows it and the extra is
    installed; otherwise say why it runs without (`doctor`, `recall --explain`). The model
    loads on the first embedding, not here."""
    if mode == "off":
        service.vectors_absent = "recall.vectors is off"
        return
    from memoryd.search.vectors import VECTORS_DIR, unavailable

    reason = unavailable()
    if reason is not None:
        service.vectors_absent = reason
        return
    from memoryd.recall.vectors import DenseIndex
    from memoryd.search.vectors import Embedder, MiniLM, StaticMiniLM, VectorIndex

    embedder: Embedder = (
        MiniLM()
        if model == "minilm"
        else StaticMiniLM(service.home / VECTORS_DIR, build=not service.read_only)
    )
    try:
        store = VectorIndex.open(
            service.home / VECTORS_DIR,
            model=embedder.name,
            dim=embedder.dim,
            read_only=service.read_only,
        )
    except StorageError as exc:
        logger.warning("recall runs without the vector stage: %s", exc.message)
        service.vectors_absent = exc.message
        return
    service.attach_vectors(DenseIndex(store, embedder))


def open_graph(
    home: Path, vault: Vault, factory: GraphFactory, *, rebuild: bool, marker: str = DB_FILE
) -> GraphStore:
    """The live graph. It is derived from the vault but also holds what only `reindex` can
    bring back (entity merges and aliases replayed from the audit log), so a graph that is gone
    or unreadable is never silently replaced by an empty one: an empty answer would look like
    an empty memory."""
    directory = home / GRAPH_DIR
    hint = "run `memoryd reindex` to rebuild the graph from the memory files"
    if (
        not rebuild
        and not (directory / marker).exists()
        and _opened_before(home)
        and vault.has_memories()
    ):
        raise StorageError(
            f"the graph {directory / marker} is missing, but the vault {vault.scopes_dir} "
            "holds memories",
            hint=hint,
        )
    try:
        return factory(directory)
    except GraphLocked:
        raise
    except StorageError as exc:
        if not rebuild:
            raise StorageError(f"cannot open the graph: {exc.message}", hint=hint) from exc
        aside = directory.with_name(f"{GRAPH_DIR}.broken-{int(time.time())}")
        logger.warning("moving the unreadable graph %s to %s: %s", directory, aside, exc)
        try:
            directory.rename(aside)
        except OSError as move_exc:
            raise StorageError(
                f"cannot move the unreadable graph {directory} aside: {move_exc.strerror}",
                hint=f"move {directory} away by hand, then run `memoryd reindex`",
            ) from move_exc
        return factory(directory)


def rebase_moved_home(graph: GraphStore, vault: Vault) -> None:
    """Point the graph's memory paths at this home's files when the home was moved or copied
    (`vault.rebased`): otherwise reads would miss every file, and writes, a decay sweep's
    renames among them, would change the old place's (a copy's source) instead of this one.
    One scan of the paths on each writable open; a path outside any vault layout is left as
    it is."""
    scopes = os.path.join(vault.scopes_dir, "")
    old_prefixes = {
        path[: len(path) - len(moved) + len(scopes)]
        for path in graph.memory_paths_outside(scopes)
        if (moved := rebased(path, vault.scopes_dir)) != path
    }
    for old in sorted(old_prefixes):
        if _same_folder(old, scopes):
            continue  # this home under another name (a symlink): its files are these
        count = graph.rebase_memory_paths(old, scopes)
        logger.warning(
            "the home moved: %d memory paths under %s now point to %s", count, old, scopes
        )


def _same_folder(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # gone (a moved home's old place): not this one
        return False


def private_engine_files(home: Path) -> None:
    """Kuzu and tantivy create their files with the process umask: in library use (no
    `private_umask`) they may be 0644. Their directories are 0700 from the start, so nobody
    else can reach them; this makes the files say so too."""
    tighten_shallow(home / GRAPH_DIR)
    tighten_shallow(home / SEARCH_DIR)
    tighten_shallow(home / VECTORS_DIR)


def open_read_only_service(settings: Settings, *, actor: str = "notebook") -> MemoryService:
    """A service over an existing data dir that reads and never writes.

    It takes no data-dir lock (so it does not make a CLI command wait), opens the graph
    read-only (Kuzu refuses while another process has it open read-write: GraphLocked), uses
    the search index as it is (never rebuilt here), and reads governance.db immutably so
    SQLite creates no -wal/-shm beside it. The service refuses writes (PolicyDenied),
    does not count recalls and saves no scope statistics.
    """
    home = settings.home
    _require_data(home, graph_file(settings))
    factory = graph_factory(settings, read_only=True)
    graph = factory(home / GRAPH_DIR)
    try:
        service = _read_only_service(home, graph, factory, actor=actor, saves=False)
    except BaseException:
        graph.close()
        raise
    service.cypher_limits = cypher_limits(settings)
    open_vectors(service, settings.recall.vectors, settings.recall.vector_model)
    return service


def open_reader_service(home: Path, graph: GraphStore) -> MemoryService:
    """The read-only service of a daemon's recall reader (`memoryd.daemon.readers`): the
    daemon owns the graph and lends `graph`, whose reads go back to it."""
    settings = load_settings(home)
    _require_data(home, graph_file(settings))

    def no_graph(directory: Path) -> GraphStore:
        raise PolicyDenied(f"a recall reader does not open graphs ({directory})")

    # Under its daemon's lock, a reader saves the statistics it counted for the next process.
    service = _read_only_service(home, graph, no_graph, actor="daemon", saves=True)
    # A reader ranks as its daemon does: the daemon's environment and config file are its.
    recall = settings.recall
    open_vectors(service, recall.vectors, recall.vector_model)
    return service


def _opened_before(home: Path) -> bool:
    """Whether the stores were ever opened here (they are created together). Before that, the
    vault may already hold sessions the capture hook wrote, waiting for their first index."""
    return (home / GOVERNANCE_DB).exists() or (home / SEARCH_DIR / SEARCH_META_FILE).exists()


def _require_data(home: Path, marker: str = DB_FILE) -> None:
    for needed in (
        home / GRAPH_DIR / marker,
        home / SEARCH_DIR / SEARCH_META_FILE,
        home / GOVERNANCE_DB,
    ):
        if not needed.exists():
            raise StorageError(
                f"no memoryd data to read at {home} ({needed.name} is missing)",
                hint="record a memory or run `memoryd demo --home <dir>` first, or start"
                " `memoryd serve`",
            )


def witness_audit(audit: AuditLog, governance: GovernanceStore) -> None:
    """governance.db witnesses every new end of the audit chain (`AuditLog.verify`);
    a database not seeded yet (new, or from before the witness) records the log's end
    as it is now. A log that does not load is left for `audit verify` to report."""
    audit.witness = governance.witness_audit
    found = governance.audit_witness()
    if found is None or found[0] != -1:
        return
    try:
        governance.witness_audit(*audit.chain_end())
    except AuditChainBroken as exc:
        logger.error("the audit witness is not seeded: %s", exc.message)


def _read_only_service(
    home: Path, graph: GraphStore, factory: GraphFactory, *, actor: str, saves: bool
) -> MemoryService:
    governance_path = home / GOVERNANCE_DB
    with ExitStack() as undo:
        index = SearchIndex.open(home / SEARCH_DIR, saves=saves)
        undo.callback(index.close)
        governance = GovernanceStore.open_read_only(governance_path)
        undo.pop_all()
    return MemoryService(
        home=home,
        vault=Vault(home, cipher=ScopeCipher(KeyStore(home))),
        graph=graph,
        index=index,
        audit=AuditLog(home / AUDIT_DIR),
        governance=governance,
        graph_factory=factory,
        actor=actor,
        read_only=True,
    )
