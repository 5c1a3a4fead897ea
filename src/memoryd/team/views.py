"""What a team user sees of the team graph: a copy cut down to the projects they may read.

User Cypher, the entity routes and the graph page run over it, never over the team graph
itself, so no query, however written, can reach a memory (or what it says about an entity) in
a project the user has no grant on. The copy is the FalkorDB engine's `scoped_view`: one per
set of readable scopes, made again once the team graph has changed, kept under
`<home>/team-views/<digest of the set>/` (its marker) and used by one request at a time.
With a replica serving (`reads`, `team_server/replica.py`), the copy is cut on the replica
instead, its marker under `team-views/replica/`: a user's query never runs on the writer's
server then.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from memoryd.errors import NotForTeam, NotFound
from memoryd.graph.store import CypherResult, EntityRow

VIEWS_DIR = "team-views"
REPLICA_VIEWS = "replica"


class Reads(Protocol):
    """Where graph reads go (`team_server.replica.ReplicaReads`)."""

    def graph(self) -> Any | None:
        """A read-only store on the replica while it serves; None: read the primary."""

    def served_by(self) -> tuple[str, str | None]:
        """`replica` or `primary`, and why not the replica when it does not serve."""


class Views:
    """The readable cut of the team graph, per set of scopes; thread-safe."""

    def __init__(
        self, graph_of: Callable[[], Any], root: Path, *, reads: Reads | None = None
    ) -> None:
        self._graph_of = graph_of  # the service's graph now (a reindex replaces it)
        self._root = root
        self._reads = reads
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def view(self, scopes: Sequence[str]) -> Iterator[Any]:
        """The cut for `scopes`, a read-only graph store, held by this thread until closed."""
        wanted = sorted(set(scopes))
        name = hashlib.sha256("\n".join(wanted).encode("utf-8")).hexdigest()[:16]
        replica = self._reads.graph() if self._reads is not None else None
        graph = self._graph_of() if replica is None else replica
        place = self._root / name if replica is None else self._root / REPLICA_VIEWS / name
        if getattr(graph, "engine_name", None) != "falkordb":
            raise NotForTeam(
                "graph queries on a team server need the FalkorDB engine",
                hint='set graph.engine = "falkordb" (`memoryd team init --falkordb-url`)',
            )
        with self._guard:
            lock = self._locks.setdefault(str(place), threading.Lock())
        from memoryd.graph.falkordb_views import scoped_view  # the engine's client: lazily

        with lock:  # one request per view: the next may replace its copy
            view = scoped_view(graph, wanted, place)
            try:
                yield view
            finally:
                view.close()

    def served_by(self) -> tuple[str, str | None]:
        """Which server answers the reads now (`primary` with no replica), and a note."""
        return ("primary", None) if self._reads is None else self._reads.served_by()

    def cypher(
        self,
        scopes: Sequence[str],
        query: str,
        params: dict[str, Any],
        *,
        limit: int,
        timeout_ms: int | None,
    ) -> CypherResult:
        with self.view(scopes) as view:
            result: CypherResult = view.user_cypher(
                query, params, limit=limit, timeout_ms=timeout_ms
            )
            return result

    def entities(
        self, scopes: Sequence[str], *, type: str | None, query: str | None, limit: int, offset: int
    ) -> list[EntityRow]:
        with self.view(scopes) as view:
            rows: list[EntityRow] = view.list_entities(
                type=type, query=query, limit=limit, offset=offset
            )
            return rows

    def entity(self, scopes: Sequence[str], name_or_id: str) -> EntityRow:
        with self.view(scopes) as view:
            return resolve(view, name_or_id)


def resolve(view: Any, name_or_id: str) -> EntityRow:
    """By id, else by a name or alias the cut holds (exactly one)."""
    found: EntityRow | None = view.get_entity(name_or_id)
    if found is not None:
        return found
    wanted = name_or_id.casefold()
    named: list[EntityRow] = [
        row
        for row in view.list_entities(query=name_or_id, limit=50, offset=0)
        if row.name.casefold() == wanted or wanted in (a.casefold() for a in row.aliases)
    ]
    if len(named) != 1:
        raise NotFound(
            f"no entity named {name_or_id!r} in the projects you may read"
            if not named
            else f"{name_or_id!r} names several entities: {', '.join(r.id for r in named)}",
            hint="`GET /v1/entities?q=...` lists the entities you may see; pass the full id",
        )
    return named[0]
