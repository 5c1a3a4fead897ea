"""MemoryService: the one facade the CLI, HTTP API, MCP server and notebooks call.

It is the only place that coordinates more than one store. The work is done by one class per
job in `memoryd.domain` (ingest, recalling, entities, maintenance, enriching, governing,
superseding, lifecycle, reporting, digesting, profiling, syncing) over
the shared state of `domain.core`; this module composes them into the `MemoryAPI`
implementation and owns its lifecycle. Construct it with `wiring.open_service`.
"""

from __future__ import annotations

import logging
from typing import Self

from memoryd.domain.core import (
    BULK_BATCH,
    CREATING_EVENTS,
    FILE_LOCK_TIMEOUT_S,
    GraphFactory,
    copy_message,
)
from memoryd.domain.digesting import Digesting
from memoryd.domain.enriching import Enriching
from memoryd.domain.entities import Entities
from memoryd.domain.governing import Governing
from memoryd.domain.guarding import Guarding
from memoryd.domain.ingest import Ingest
from memoryd.domain.lifecycle import Lifecycle
from memoryd.domain.maintenance import Maintenance
from memoryd.domain.profiling import Profiling
from memoryd.domain.recalling import Recalling
from memoryd.domain.reporting import Reporting
from memoryd.domain.sensitivity import Sensitivity
from memoryd.domain.superseding import Superseding
from memoryd.domain.syncing import Syncing
from memoryd.domain.writes import MAX_BODY_CHARS, search_doc, slugify
from memoryd.errors import MemorydError
from memoryd.protocol import MemoryAPI

__all__ = [
    "BULK_BATCH",
    "CREATING_EVENTS",
    "FILE_LOCK_TIMEOUT_S",
    "MAX_BODY_CHARS",
    "GraphFactory",
    "MemoryService",
    "copy_message",
    "search_doc",
    "slugify",
]

logger = logging.getLogger(__name__)


class MemoryService(
    Ingest,
    Lifecycle,
    Recalling,
    Reporting,
    Entities,
    Maintenance,
    Enriching,
    Governing,
    Superseding,
    Guarding,
    Sensitivity,
    Digesting,
    Profiling,
    Syncing,
    MemoryAPI,
):
    """Record, read, search and rebuild memories. Construct it with `wiring.open_service`."""

    def close(self) -> None:
        try:
            self.views.drop_all()
            try:
                self.gate.flush()
            except MemorydError:
                logger.exception("could not audit the last reads of sensitive scopes")
            if self._sandbox is not None:
                self._sandbox.close()
            try:
                self.flush_recall_stats()
            except MemorydError:
                logger.exception("could not save recall stats")
            closers = [self.index.close, self.graph.close, self.governance.close]
            if self.vectors is not None:
                closers.append(self.vectors.store.close)
            for closer in closers:
                try:
                    closer()
                except MemorydError:
                    logger.exception("error while closing %s", closer)
        finally:
            if self._on_close is not None:
                self._on_close()
                self._on_close = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
