"""Where the team server's graph reads go: users' Cypher, the entities and the graph page read
the FalkorDB replica (`graph/falkordb_replica.py`) while it is in sync or behind by at most
`replica_max_lag_s`, else the primary, and each answer says which (`X-Memoryd-Graph-Source`;
`X-Memoryd-Graph-Note` says why the replica did not serve). Either way they read the caller's
cut of the graph (`team/views.py`), made on the server that serves them. Writes never read
the replica.

`[team] replica = true` (the default) starts one with the team server; it needs the primary
on a TCP port. A replica that cannot start leaves the server on the primary alone, which
`memoryd team status` says.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memoryd.errors import MemorydError

logger = logging.getLogger(__name__)

REPLICA_DIR = "falkordb-replica"
REFRESH_S = 0.5
"""How long a look at the replica's state is reused (each is three local round trips)."""
HEAL_S = 5.0
"""How often the team server checks that the replica's server still runs."""


class ReplicaReads:
    """The replica's state, looked at no more than every `REFRESH_S`, and the choice it makes."""

    def __init__(self, replica: Any | None, off: str | None = None) -> None:
        """`replica`: a started `falkordb_replica.Replica`; None with `off`, why there is none."""
        self._replica = replica
        self._off = off
        self._lock = threading.Lock()
        self._state: Any = None
        self._looked = 0.0
        self._serving: bool | None = None
        self._closed = False

    def state(self) -> Any:
        """The replica's `ReplicaState` (None when there is no replica)."""
        if self._replica is None:
            return None
        with self._lock:
            if self._state is None or time.monotonic() - self._looked >= REFRESH_S:
                self._state, self._looked = self._replica.state(), time.monotonic()
                if self._state.serving != self._serving:
                    self._serving = self._state.serving
                    if self._serving:
                        logger.info("graph reads go to the FalkorDB replica")
                    else:
                        logger.warning(
                            "graph reads go to the primary: the replica is %s (%s)",
                            self._state.state,
                            self._state.detail,
                        )
            return self._state

    def graph(self) -> Any | None:
        """A read-only store on the replica while it serves; None: read the primary."""
        state = self.state()
        if state is None or not state.serving:
            return None
        try:
            return self._replica.store() if self._replica is not None else None
        except MemorydError as exc:
            logger.warning("cannot read the FalkorDB replica: %s", exc)
            return None

    def served_by(self) -> tuple[str, str | None]:
        """Which server answers graph reads now, and why not the replica if it does not."""
        state = self.state()
        if state is None:
            return "primary", None if self._off is None else f"no replica: {self._off}"
        if state.serving:
            return "replica", None
        return "primary", f"the replica is {state.state}: {state.detail}"

    def report(self) -> dict[str, Any]:
        """The replica for `team status`: its state and how far behind it is."""
        state = self.state()
        if state is None:
            return {"state": "off", "detail": self._off or "replica = false in team.toml"}
        return {**state.as_json(), "max_lag_s": self._replica.max_lag_s if self._replica else None}

    def heal(self) -> bool:
        """Start the replica again if its server died (reads go to the primary meanwhile);
        whether it was started."""
        if self._replica is None or self._replica.alive():
            return False
        with self._lock:
            if self._closed:
                return False
            logger.warning("the FalkorDB replica's server stopped: starting it again")
            self._replica.stop()
            try:
                self._replica.start()
            except MemorydError as exc:
                logger.warning("cannot start the FalkorDB replica again: %s", exc)
                return False
            finally:
                self._state = None
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._replica is not None:
                self._replica.stop()


async def keep_replica(reads: ReplicaReads) -> None:
    """The team server's chore: start the replica again whenever its server died."""
    while True:
        await asyncio.sleep(HEAL_S)
        await asyncio.to_thread(reads.heal)


def start_replica(
    home: Path, primary: Callable[[], Any], max_lag_s: float, enabled: bool
) -> ReplicaReads:
    """The replica of the team graph, started (its first sync goes on in the background), or
    the reason there is none."""
    if not enabled:
        return ReplicaReads(None, "replica = false in team.toml")
    from memoryd.graph.falkordb_replica import Replica

    replica = Replica(home / REPLICA_DIR, primary, max_lag_s)
    try:
        replica.start()
    except MemorydError as exc:
        logger.warning("no FalkorDB replica: %s", exc)
        return ReplicaReads(None, f"{exc}" + (f" ({exc.hint})" if exc.hint else ""))
    return ReplicaReads(replica)
