"""`memoryd.connect()`: the graph from Jupyter, as pandas DataFrames and networkx graphs.

A notebook is a reader (DESIGN.md §2). When a daemon serves the data dir every call goes
through it over the Unix socket. When none runs, each call opens the data dir read-only for
its own duration and closes it again: an idle kernel then never holds the graph, so it cannot
stop `memoryd serve` or a CLI command from opening it. The embedded path takes no lock and
writes nothing (no inbox drain, no recall counting); anything that would write raises
PolicyDenied.

    >>> mem = memoryd.connect()
    >>> mem.cypher("MATCH (e:Entity) RETURN e.name, e.mention_count ORDER BY e.mention_count DESC")
    >>> g = mem.subgraph("PostgreSQL", depth=1)
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from memoryd.client.connect import connect as connect_daemon
from memoryd.client.connect import is_remote, socket_accepts
from memoryd.config import Settings, load_settings
from memoryd.daemon_files import DaemonFiles
from memoryd.errors import GraphLocked, InvalidInput, MissingExtra, PolicyDenied, StorageError
from memoryd.governance.reports import SupersedeReport
from memoryd.governance.trends import Trends
from memoryd.graph.store import CypherResult, EntityContext
from memoryd.models import DecayState, Memory, MemoryType, RecallResult

try:
    import networkx as nx
    import pandas as pd
except ImportError as exc:  # the base install leaves them out
    raise MissingExtra("memoryd.connect() (notebooks)", "notebooks", exc.name or "pandas") from exc

if TYPE_CHECKING:
    from memoryd.client.remote import RemoteService
    from memoryd.protocol import MemoryAPI

logger = logging.getLogger(__name__)

Mode = Literal["daemon", "embedded"]

MAX_ROWS = 10_000  # the daemon's cap on one Cypher answer
MAX_DEPTH = 3
# The one shape memoryd gives TIMESTAMP values in query results (see kuzu_store._jsonable).
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")


def connect(home: str | os.PathLike[str] | None = None, *, row_limit: int = MAX_ROWS) -> Notebook:
    """A notebook client of the data dir `home` (default: MEMORYD_HOME, else the user's).

    Nothing is opened yet: each call finds the daemon, or opens the data dir read-only.
    """
    if not 1 <= row_limit <= MAX_ROWS:
        raise InvalidInput(f"row_limit must be between 1 and {MAX_ROWS} (got {row_limit})")
    settings = load_settings(Path(home) if home is not None else None)
    return Notebook(settings, row_limit=row_limit)


def demo_home(home: str | os.PathLike[str] | None = None) -> Path:
    """Load the shipped demo vault into `home` (default: a new temp dir) and return it, so a
    notebook opened without MEMORYD_HOME has something to show."""
    from rich.console import Console

    from memoryd.demo import run_demo

    report = run_demo(
        Path(home) if home is not None else None, as_json=False, console=Console(quiet=True)
    )
    return report.home


class Notebook:
    """Read-only access to one data dir for notebooks. Make it with `memoryd.connect()`."""

    def __init__(self, settings: Settings, *, row_limit: int = MAX_ROWS) -> None:
        self.settings = settings
        self.home = settings.home
        self.row_limit = row_limit
        self._remote: RemoteService | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Drop the daemon connection, if any; the embedded path holds nothing between calls."""
        self._closed = True
        if self._remote is not None:
            self._remote.close()
            self._remote = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"via {self.mode}"
        return f"<memoryd.connect home={str(self.home)!r} {state}>"

    @property
    def mode(self) -> Mode:
        """`daemon` when a daemon serves the data dir now, else `embedded` (read-only)."""
        return "daemon" if self._daemon() is not None else "embedded"

    def _daemon(self) -> RemoteService | None:
        """The daemon's client, probed afresh: one that stopped is dropped, one that started
        is picked up, so a long-lived kernel follows `memoryd serve` coming and going."""
        socket = DaemonFiles(self.home).socket
        if self._remote is not None and not socket_accepts(socket):
            self._remote.close()
            self._remote = None
        if self._remote is None:
            self._remote = connect_daemon(
                self.home, timeout_s=self.settings.daemon.request_timeout_s
            )
        return self._remote

    @contextmanager
    def _backend(self) -> Iterator[MemoryAPI]:
        """The daemon, else the data dir opened read-only for the duration of the block."""
        if self._closed:
            raise StorageError("this memoryd connection is closed", hint="memoryd.connect() again")
        remote = self._daemon()
        if remote is not None:
            yield remote
            return
        from memoryd.wiring import open_service

        try:
            service = open_service(self.settings, actor="notebook", read_only=True)
        except GraphLocked as exc:
            remote = self._daemon()  # a daemon may have started since the probe
            if remote is None:
                raise GraphLocked(
                    f"the graph at {self.home} is open in another memoryd process (a CLI"
                    " command, or a daemon still starting), and Kuzu lets no reader in beside"
                    " a writer",
                    hint="run `memoryd serve`: notebooks then read through the daemon; or retry"
                    " once the command has finished",
                ) from exc
            yield remote
            return
        with service:
            yield service

    # -- Cypher ---------------------------------------------------------------------------
    def cypher(
        self,
        query: str,
        /,
        params: Mapping[str, Any] | None = None,
        *,
        limit: int | None = None,
        **kwparams: Any,
    ) -> pd.DataFrame:
        """Read-only Cypher as a DataFrame, one column per RETURN item (named as written or
        by its alias). Parameters come as keywords (`$scope` ← `scope=...`) or, for names
        like `limit`, in `params`. Timestamp columns become UTC datetimes. Write clauses
        raise PolicyDenied. More than `limit` rows (default: the client's `row_limit`) are
        cut off, logged, and flagged in `df.attrs["truncated"]`."""
        merged = {**(params or {}), **kwparams}
        with self._backend() as backend:
            result = backend.cypher(query, merged, limit=limit or self.row_limit)
        return _frame(result)

    def _rows(self, backend: MemoryAPI, query: str, **params: Any) -> Any:
        return backend.cypher(query, params, limit=MAX_ROWS).rows

    # -- memories -------------------------------------------------------------------------
    def get(self, slug: str) -> Memory:
        """One memory, read from its vault file (body, frontmatter, path)."""
        with self._backend() as backend:
            return backend.get(slug)

    def memories(
        self,
        *,
        scope: Path | str | None = None,
        type: MemoryType | None = None,
        state: DecayState | None = None,
        limit: int = 1000,
    ) -> pd.DataFrame:
        """Memories newest first, one row each (no bodies: `get` reads one)."""
        with self._backend() as backend:
            rows = backend.list_memories(scope=scope, type=type, state=state, limit=limit)
        return _dated(pd.DataFrame([r.model_dump(mode="json") for r in rows]))

    def recall(
        self,
        query: str,
        *,
        scope: Path | str | None = None,
        types: Sequence[MemoryType] | None = None,
        k: int = 10,
        include_forgotten: bool = False,
        track: bool = False,
    ) -> RecallResult:
        """What memoryd would tell an agent about `query`, each hit explaining itself.

        Exploring is not recalling, so by default hits are not counted (`track=False`);
        counting writes, and needs the daemon.
        """
        with self._backend() as backend:
            if track and not is_remote(backend):
                raise PolicyDenied(
                    "counting recalls writes to the graph, and no daemon runs",
                    hint="start `memoryd serve`, or recall with track=False",
                )
            return backend.recall(
                query,
                scope=scope,
                types=types,
                k=k,
                include_forgotten=include_forgotten,
                track=track,
            )

    def recall_df(self, query: str, **kwargs: Any) -> pd.DataFrame:
        """`recall` as a DataFrame: one row per hit, best first, with a `rank` column."""
        result = self.recall(query, **kwargs)
        frame = pd.DataFrame([hit.model_dump(mode="json") for hit in result.hits])
        if not frame.empty:
            frame.insert(0, "rank", range(1, len(frame) + 1))
        frame.attrs["entities"] = result.entities
        return _dated(frame)

    def supersedes(self, slug: str | None = None, *, entity: str | None = None) -> pd.DataFrame:
        """Which memory replaced which, oldest decision first: the chain through one memory
        (`slug`), or every decision about an entity (`entity`, by id, name or alias)."""
        if (slug is None) == (entity is None):
            raise InvalidInput("give either a memory slug or entity=")
        with self._backend() as backend:
            if slug is not None:
                rows = backend.supersedes_chain(slug)
            else:
                assert entity is not None
                rows = backend.entity_supersedes(entity)
            slugs = sorted({r.newer for r in rows} | {r.older for r in rows})
            titles = dict(
                self._rows(
                    backend,
                    "MATCH (m:Memory) WHERE m.slug IN $slugs RETURN m.slug, m.title",
                    slugs=slugs,
                )
            )
        frame = pd.DataFrame([r.model_dump(mode="json") for r in rows])
        if not frame.empty:
            frame.insert(1, "newer_title", frame["newer"].map(titles))
            frame.insert(3, "older_title", frame["older"].map(titles))
        return _dated(frame)

    # -- trends and reports ---------------------------------------------------------------
    def trends(self, days: int = 7, *, scope: Path | str | None = None) -> Trends:
        """`memoryd trends`: top triggers, rising entities, recent supersedes, hot recalls and
        mentions per day of the top entities over the last `days` days (today included)."""
        with self._backend() as backend:
            return backend.trends(days, scope)

    def trends_df(
        self, days: int = 7, *, scope: Path | str | None = None
    ) -> dict[str, pd.DataFrame]:
        """`trends` as DataFrames: one per section (`top_triggers`, `rising_entities`,
        `recent_supersedes`, `hot_recalls`), and `mentions` with a row per day (a UTC
        DatetimeIndex) and a column per top entity, ready to plot."""
        result = self.trends(days, scope=scope)
        frames = {
            name: _dated(
                pd.DataFrame([row.model_dump(mode="json") for row in getattr(result, name)])
            )
            for name in ("top_triggers", "rising_entities", "recent_supersedes", "hot_recalls")
        }
        index = pd.DatetimeIndex(pd.to_datetime(result.days, utc=True), name="day")
        frames["mentions"] = pd.DataFrame(
            {series.name: series.counts for series in result.mentions}, index=index
        )
        return frames

    def supersede_report(
        self,
        *,
        since: datetime | None = None,
        entity: str | None = None,
        scope: Path | str | None = None,
    ) -> SupersedeReport:
        """`memoryd report supersedes`: the chain of decisions per entity (`.markdown()`
        renders it)."""
        with self._backend() as backend:
            return backend.supersede_report(since=since, entity=entity, scope=scope)

    def supersede_report_df(
        self,
        *,
        since: datetime | None = None,
        entity: str | None = None,
        scope: Path | str | None = None,
    ) -> pd.DataFrame:
        """`supersede_report` as one row per decision and entity, oldest decision first
        within each entity (a decision filed under two entities has two rows)."""
        report = self.supersede_report(since=since, entity=entity, scope=scope)
        rows = [
            {"entity": chain.name, "entity_id": chain.entity_id, **d.model_dump(mode="json")}
            for chain in report.chains
            for d in chain.decisions
        ]
        return _dated(pd.DataFrame(rows))

    # -- entities -------------------------------------------------------------------------
    def entities(
        self, *, type: str | None = None, query: str | None = None, limit: int = 1000
    ) -> pd.DataFrame:
        """Entities, most mentioned first; `query` matches names and aliases."""
        with self._backend() as backend:
            rows = backend.entities(type=type, query=query, limit=limit)
        return _dated(pd.DataFrame([r.model_dump(mode="json") for r in rows]))

    def entity(self, name_or_id: str, *, limit: int = 20) -> EntityContext:
        """An entity with its relations and the memories about it, current ones first."""
        with self._backend() as backend:
            return backend.entity_context(name_or_id, limit=limit)

    def neighbours(self, name_or_id: str, *, depth: int = 1) -> pd.DataFrame:
        """Current entity↔entity relations within `depth` hops (1–3, fan-out capped)."""
        with self._backend() as backend:
            return _frame(backend.neighbors(name_or_id, depth=depth))

    def subgraph(
        self,
        entity: str,
        depth: int = 1,
        *,
        max_neighbours: int = 12,
        memories: bool = False,
    ) -> nx.MultiDiGraph:
        """The entities around `entity` (id, name or alias) as a networkx MultiDiGraph.

        A hop follows a current RELATES edge or a co-mention (two entities named by the same
        memory); each node keeps its `max_neighbours` strongest neighbours, relations first,
        so hubs stay drawable. Edges are keyed by predicate and carry `predicate`,
        `confidence`, `kind` (`relation` or `co_mention`, which also has `count`, the number
        of shared memories) and `sources` (the memories behind the edge). Nodes carry the
        entity's fields plus `kind` and `hop`.
        With `memories`, the memories that mention `entity` join as nodes (kind `memory`)
        with their `mentions` and `supersedes` edges.
        """
        if not 1 <= depth <= MAX_DEPTH:
            raise InvalidInput(f"depth must be 1, 2 or 3 (got {depth})")
        if max_neighbours < 1:
            raise InvalidInput(f"max_neighbours must be at least 1 (got {max_neighbours})")
        with self._backend() as backend:
            centre = backend.resolve_entity(entity).id
            hops = self._expand(backend, centre, depth, max_neighbours)
            graph = nx.MultiDiGraph(centre=centre, depth=depth, home=str(self.home))
            self._add_entities(backend, graph, hops)
            if memories:
                self._add_memories(backend, graph, centre, list(hops))
        return graph

    def _expand(self, backend: MemoryAPI, centre: str, depth: int, cap: int) -> dict[str, int]:
        """Entity id → hop, breadth first from `centre`."""
        hops = {centre: 0}
        frontier = [centre]
        for hop in range(1, depth + 1):
            if not frontier:
                break
            ranked: dict[str, list[str]] = {eid: [] for eid in frontier}
            related = self._rows(
                backend,
                "MATCH (a:Entity)-[r:RELATES]-(b:Entity) WHERE a.id IN $ids AND a.id <> b.id"
                " AND r.superseded_at IS NULL RETURN a.id, b.id, max(r.confidence) AS c"
                " ORDER BY c DESC, b.id",
                ids=frontier,
            )
            shared = self._rows(
                backend,
                "MATCH (a:Entity)<-[:MENTIONS]-(m:Memory)-[:MENTIONS]->(b:Entity)"
                " WHERE a.id IN $ids AND a.id <> b.id AND m.decay_state <> 'forgotten'"
                " RETURN a.id, b.id, count(DISTINCT m) AS n ORDER BY n DESC, b.id",
                ids=frontier,
            )
            for src, dst, *_ in [*related, *shared]:
                if dst not in ranked[src]:
                    ranked[src].append(dst)
            frontier = []
            for neighbours in ranked.values():
                for dst in neighbours[:cap]:
                    if dst not in hops:
                        hops[dst] = hop
                        frontier.append(dst)
        return hops

    def _add_entities(
        self, backend: MemoryAPI, graph: nx.MultiDiGraph, hops: dict[str, int]
    ) -> None:
        ids = list(hops)
        for eid, name, etype, mentions, aliases, first, last, scope in self._rows(
            backend,
            "MATCH (e:Entity) WHERE e.id IN $ids RETURN e.id, e.name, e.type, e.mention_count,"
            " e.aliases, e.first_seen_at, e.last_seen_at, e.scope_hash",
            ids=ids,
        ):
            graph.add_node(
                eid,
                kind="entity",
                label=name,
                name=name,
                type=etype,
                mention_count=mentions or 0,
                aliases=aliases or [],
                first_seen_at=_timestamp(first),
                last_seen_at=_timestamp(last),
                scope_hash=scope,
                hop=hops[eid],
            )
        for src, dst, predicate, confidence, source in self._rows(
            backend,
            "MATCH (a:Entity)-[r:RELATES]->(b:Entity) WHERE a.id IN $ids AND b.id IN $ids"
            " AND a.id <> b.id AND r.superseded_at IS NULL"
            " RETURN a.id, b.id, r.predicate, r.confidence, r.source_memory",
            ids=ids,
        ):
            data = graph.get_edge_data(src, dst, key=predicate)
            if data is None:
                graph.add_edge(
                    src,
                    dst,
                    key=predicate,
                    kind="relation",
                    predicate=predicate,
                    confidence=confidence,
                    sources=[source],
                )
            else:  # several memories assert the same relation: keep the surest
                data["confidence"] = max(data["confidence"], confidence)
                data["sources"].append(source)
        # Aggregated here: kuzu 0.11.3 returns NULL for an aggregate over a CASE expression.
        shared: dict[tuple[str, str], dict[str, float]] = {}
        for src, dst, slug, conf_a, conf_b in self._rows(
            backend,
            "MATCH (a:Entity)<-[ra:MENTIONS]-(m:Memory)-[rb:MENTIONS]->(b:Entity)"
            " WHERE a.id IN $ids AND b.id IN $ids AND a.id < b.id"
            " AND m.decay_state <> 'forgotten'"
            " RETURN a.id, b.id, m.slug, ra.confidence, rb.confidence",
            ids=ids,
        ):
            both = min(conf_a if conf_a is not None else 1.0, conf_b if conf_b is not None else 1.0)
            memories = shared.setdefault((src, dst), {})
            memories[slug] = max(memories.get(slug, 0.0), both)
        for (src, dst), memories in shared.items():
            graph.add_edge(
                src,
                dst,
                key="co_mentioned",
                kind="co_mention",
                predicate="co_mentioned",
                confidence=max(memories.values()),
                count=len(memories),
                sources=sorted(memories),
            )

    def _add_memories(
        self,
        backend: MemoryAPI,
        graph: nx.MultiDiGraph,
        centre: str,
        ids: list[str],
    ) -> None:
        rows = self._rows(
            backend,
            "MATCH (m:Memory)-[:MENTIONS]->(:Entity {id: $id}) WHERE m.decay_state <> 'forgotten'"
            " RETURN m.slug, m.title, m.type, m.created_at, m.scope_hash, m.recall_count"
            " ORDER BY m.created_at",
            id=centre,
        )
        for slug, title, mtype, created, scope, recalls in rows:
            graph.add_node(
                slug,
                kind="memory",
                label=title,
                title=title,
                type=mtype,
                created_at=_timestamp(created),
                scope_hash=scope,
                recall_count=recalls,
            )
        slugs = [row[0] for row in rows]
        for slug, eid, confidence in self._rows(
            backend,
            "MATCH (m:Memory)-[r:MENTIONS]->(e:Entity) WHERE m.slug IN $slugs AND e.id IN $ids"
            " RETURN m.slug, e.id, r.confidence",
            slugs=slugs,
            ids=ids,
        ):
            graph.add_edge(
                slug,
                eid,
                key="mentions",
                kind="mention",
                predicate="mentions",
                confidence=confidence,
            )
        for newer, older, confidence in self._rows(
            backend,
            "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) WHERE n.slug IN $slugs"
            " AND o.slug IN $slugs AND r.status = 'active' RETURN n.slug, o.slug, r.confidence",
            slugs=slugs,
        ):
            graph.add_edge(
                newer,
                older,
                key="supersedes",
                kind="supersede",
                predicate="supersedes",
                confidence=confidence,
            )


def _timestamp(value: Any) -> Any:
    """An ISO timestamp from a query result as a pandas UTC Timestamp; anything else as is."""
    if isinstance(value, str) and _TIMESTAMP.fullmatch(value):
        return pd.Timestamp(value)
    return value


def _dated(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns whose every value is a memoryd timestamp string become UTC datetimes."""
    for position in range(frame.shape[1]):  # by position: RETURN may repeat a name
        column = frame.iloc[:, position]
        values = column.dropna()
        if values.empty or not all(isinstance(v, str) and _TIMESTAMP.fullmatch(v) for v in values):
            continue
        frame.isetitem(position, pd.to_datetime(column, utc=True, format="ISO8601"))
    return frame


def _frame(result: CypherResult) -> pd.DataFrame:
    frame = pd.DataFrame(result.rows, columns=result.columns)
    frame.attrs["truncated"] = result.truncated
    if result.truncated:
        logger.warning(
            "the Cypher result was cut off at %d rows; pass limit= (at most %d) or narrow it",
            len(result.rows),
            MAX_ROWS,
        )
    return _dated(frame)
