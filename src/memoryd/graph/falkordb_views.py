"""A FalkorDB graph cut down to some scopes: what a team user may see (`memoryd.team.views`).

`scoped_view` copies the graph (`GRAPH.COPY`, on the server) and takes out of the copy every
memory of another scope with its edges, the relations no kept memory is the source of, the
other scopes, and the entities nothing kept reaches; an entity other scopes mention too keeps
its id, name and type but not the context, aliases and dates they may have given it, and the
co-mention counts are counted again over the memories kept. The copy
is made again once the graph's commit count (its Meta `commits`, kept across restarts) moved.
FalkorDB (4.16) makes the copy in a forked child, and a `GRAPH.COPY` that finds another child
running (a second copy, an AOF rewrite, a replica's sync) hangs the whole server: a copy takes
the server's fork lock (`falkordb_forks`, across processes), once no child runs.
Beside `falkordb_store`, the other module that imports `falkordb` and `redis`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from pathlib import Path

import redis
from falkordb import FalkorDB

from memoryd.errors import StorageError
from memoryd.graph.falkordb_forks import copy_graph
from memoryd.graph.falkordb_store import MARKER, FalkorGraphStore
from memoryd.graph.store import CO_MENTIONS_FILL
from memoryd.private import make_private_dir

CUTS = (
    "MATCH (m:Memory) WHERE m.scope_hash IS NULL OR NOT m.scope_hash IN $scopes DETACH DELETE m",
    "MATCH ()-[c:CO_MENTIONS]->() DELETE c",
    CO_MENTIONS_FILL,  # counted again over the memories kept
    "MATCH (s:Scope) WHERE NOT s.hash IN $scopes DELETE s",
    "MATCH ()-[r:RELATES]->() OPTIONAL MATCH (m:Memory {slug: r.source_memory})"
    " WITH r, m WHERE m IS NULL DELETE r",
    "MATCH (e:Entity) WHERE NOT (e)--() DELETE e",
    "MATCH (e:Entity) WHERE e.scope_hash IS NULL OR NOT e.scope_hash IN $scopes"
    " SET e.context = NULL, e.aliases = [], e.first_seen_at = NULL, e.last_seen_at = NULL",
    "MATCH (e:Entity) OPTIONAL MATCH (m:Memory)-[:MENTIONS]->(e)"
    " WITH e, count(m) AS n SET e.mention_count = n",
)
"""What the copy loses, in order (`$scopes`: the scopes kept)."""


def scoped_view(
    graph: FalkorGraphStore, scopes: Sequence[str], directory: Path
) -> FalkorGraphStore:
    """A read-only store over `graph` cut down to `scopes`; `directory` holds the copy's
    marker (which graph it is, and what it was cut from). The caller closes the store and
    uses one directory from one thread at a time."""
    wanted = sorted(set(scopes))
    found = graph.cypher("MATCH (m:Meta {key: 'commits'}) RETURN m.value").rows
    of = [graph.key, str(found[0][0]) if found else "0", wanted]
    marker = directory / MARKER
    try:
        made = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        made = {}
    password = graph.password
    client = redis.Redis.from_url(graph.url, password=password, decode_responses=True)
    try:
        if made.get("of") != of or not client.exists(made.get("graph", "")):
            key = f"{graph.name}:view:{secrets.token_hex(6)}"
            view = FalkorDB(connection_pool=client.connection_pool).select_graph(key)
            try:
                copy_graph(client, graph.url, graph.key, key)
                for statement in CUTS:
                    view.query(statement, {"scopes": wanted})
            except redis.RedisError as exc:
                client.delete(key)
                raise StorageError(
                    f"cannot cut a copy of the graph {graph.key} on {graph.url}: {exc}",
                    hint="check the FalkorDB server (`memoryd doctor`)",
                ) from exc
            make_private_dir(directory)
            tmp = marker.with_suffix(".tmp")
            tmp.write_text(json.dumps({"graph": key, "url": graph.url, "of": of}), "utf-8")
            tmp.replace(marker)
            if made.get("graph"):
                client.delete(str(made["graph"]))
    except redis.RedisError as exc:
        raise StorageError(f"FalkorDB at {graph.url}: {exc}") from exc
    finally:
        client.close()
    return FalkorGraphStore(
        directory,
        url=graph.url,
        name=graph.name,
        password=password,
        max_fanout=graph.max_fanout,
        read_only=True,
    )
