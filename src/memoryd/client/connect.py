"""Reaching the daemon: whether one listens, its client (`RemoteService`) or the service in-process.

While a daemon runs it owns the graph, so every CLI command goes through the client over the
Unix socket; `open_api` picks the client when a daemon answers and the in-process service
otherwise. The client itself is `client.remote`, imported only when a daemon listens: it and
httpx are most of what a process opening the stores in-process would otherwise import for
nothing.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from memoryd.client.wire import PROBE_TIMEOUT_S
from memoryd.daemon_files import DaemonFiles
from memoryd.errors import GraphLocked, MemorydError, StorageError
from memoryd.inbox import Inbox
from memoryd.protocol import MemoryAPI
from memoryd.sensitive.sealed import waiting_captures

if TYPE_CHECKING:
    from memoryd.client.remote import RemoteService
    from memoryd.config import Settings

logger = logging.getLogger(__name__)


def is_remote(api: Any) -> TypeGuard[RemoteService]:
    """Whether `api` is the daemon's client, without importing it (and httpx) to ask: no
    instance exists until `connect` has imported the module."""
    remote = sys.modules.get("memoryd.client.remote")
    return remote is not None and isinstance(api, remote.RemoteService)


def socket_accepts(path: Path) -> bool:
    """Whether a process listens on the Unix socket; a killed daemon's file refuses.

    Probed with a plain socket because httpx leaks its socket when a connect fails.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return False
        except TimeoutError:
            return True  # a full backlog: someone listens; the health request decides
        except OSError as exc:
            logger.debug("cannot connect to %s: %s", path, exc)
            return False
    return True


def connect(home: Path, *, timeout_s: float = 120.0, actor: str = "cli") -> RemoteService | None:
    """A client of the daemon serving `home`, or None when no daemon answers there.

    A socket file that refuses connections is what a killed daemon leaves behind: that is
    "no daemon". A daemon that accepts but does not answer is an error, not a reason to open
    the graph beside it.
    """
    files = DaemonFiles(home)
    if not socket_accepts(files.socket):
        return None
    import httpx

    from memoryd.client.remote import RemoteService

    client = RemoteService(files.socket, timeout_s=timeout_s, actor=actor)
    try:
        client.health(timeout_s=PROBE_TIMEOUT_S)
    except httpx.TimeoutException as exc:
        client.close()
        pid = files.read_pid()
        raise StorageError(
            f"the daemon{f' (pid {pid})' if pid else ''} on {files.socket} does not answer",
            hint="`memoryd stop`, or end that process",
        ) from exc
    except httpx.TransportError:
        client.close()
        logger.debug("no daemon answers on %s (stale socket)", files.socket)
        return None
    except MemorydError:
        client.close()
        raise
    return client


def open_api(settings: Settings, *, rebuild: bool = False, actor: str = "cli") -> MemoryAPI:
    """The daemon's client when a daemon serves the data dir, else the service in-process;
    the caller closes it (`memoryd.open` is this for library users).

    A daemon that starts while this process waits for the data-dir lock is found on the
    second look, so opening never fails just because it raced `memoryd serve`. `rebuild`
    (reindex) opens a missing or broken graph for rebuilding (`wiring.open_service`).
    """
    timeout_s = settings.daemon.request_timeout_s
    remote = connect(settings.home, timeout_s=timeout_s, actor=actor)
    if remote is not None:
        return remote
    from memoryd.wiring import open_service  # the stores: only when no daemon answers

    try:
        return open_service(settings, actor=actor, rebuild=rebuild)
    except GraphLocked:
        remote = connect(settings.home, timeout_s=timeout_s, actor=actor)
        if remote is None:
            raise
        return remote


def index_captures(api: MemoryAPI) -> int:
    """Index the captures waiting in `inbox/`; how many. In process the spaCy rules run for
    as many queued sessions as it indexed, and the LLM work is left to a daemon; a daemon
    enriches what it indexes itself. The rest of a backlog (sessions recorded in bulk) is the
    daemon's background work: a user's `memoryd record` does not wait on it (1,600 queued
    sessions held one up for minutes)."""
    indexed = api.drain_inbox()
    if is_remote(api):
        return indexed  # (and the service's modules stay unloaded in a daemon's client)
    from memoryd.service import MemoryService

    if indexed and isinstance(api, MemoryService):
        api.enrich_pending(indexed, use_llm=False)
    return indexed


def captures_waiting(api: MemoryAPI, home: Path) -> int:
    """How many captures wait in `inbox/` for an in-process service to index (0 through a
    daemon: it indexes them as they come)."""
    if is_remote(api):
        return 0
    return len(Inbox(home).requested_slugs()) + len(waiting_captures(home))


@contextmanager
def open_service_or_client(settings: Settings, *, rebuild: bool = False) -> Iterator[MemoryAPI]:
    """`open_api` for the duration of a block (one CLI command)."""
    with open_api(settings, rebuild=rebuild) as api:
        yield api


__all__ = [
    "PROBE_TIMEOUT_S",
    "captures_waiting",
    "connect",
    "index_captures",
    "is_remote",
    "open_api",
    "open_service_or_client",
    "socket_accepts",
]
