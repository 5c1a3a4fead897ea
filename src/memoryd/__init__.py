"""memoryd: local-first, graph-centred long-term memory for AI coding agents.

The library API is `memoryd.open()` (a `MemoryAPI`: record, recall, edit) and, for
notebooks, `memoryd.connect()` (read-only, as DataFrames and networkx graphs). Internal
module paths may change; these two entry points do not. Importing memoryd does nothing
else: both load what they need on first call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryd.notebook import Notebook
    from memoryd.protocol import MemoryAPI

__version__ = "0.1.0"

__all__ = ["__version__", "connect", "open"]

LIBRARY_ACTOR = "python"
"""The actor a library user's writes are audited under."""


def open(home: str | os.PathLike[str] | None = None, **settings: Any) -> MemoryAPI:
    """The memories of the data dir `home` (default: MEMORYD_HOME, else the user's).

    `settings` override the config file and environment by section, as in `config.toml`:
    `memoryd.open(home, graph={"engine": "ladybug"}, extraction={"enabled": False})`. They
    apply to stores opened in this process; a running daemon keeps its own.

    When `memoryd serve` runs for that data dir this is the daemon's client (the daemon owns
    the graph); otherwise the stores are opened in this process, holding the data-dir lock
    until `close()`. Either way the answer is a `memoryd.protocol.MemoryAPI`; use it as a
    context manager:

        >>> with memoryd.open() as mem:
        ...     hits = mem.recall("why did we pick Postgres?").hits
    """
    from pathlib import Path

    from memoryd.client.connect import open_api
    from memoryd.config import load_settings

    config = load_settings(Path(home) if home is not None else None, **settings)
    return open_api(config, actor=LIBRARY_ACTOR)


def connect(home: str | os.PathLike[str] | None = None, *, row_limit: int = 10_000) -> Notebook:
    """A read-only client for notebooks: Cypher as DataFrames, subgraphs as networkx.

    Imported on first call, so `import memoryd` stays cheap (pandas, networkx and the stores
    load only then). See `memoryd.notebook`.
    """
    from memoryd.notebook import connect as connect_notebook

    return connect_notebook(home, row_limit=row_limit)
