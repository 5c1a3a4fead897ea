"""memoryd: local-first, graph-centred long-term memory for AI coding agents."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os

    from memoryd.notebook import Notebook

__version__ = "0.1.0"

__all__ = ["__version__", "connect"]


def connect(home: str | os.PathLike[str] | None = None, *, row_limit: int = 10_000) -> Notebook:
    """A read-only client for notebooks: Cypher as DataFrames, subgraphs as networkx.

    Imported on first call, so `import memoryd` stays cheap (pandas, networkx and the stores
    load only then). See `memoryd.notebook`.
    """
    from memoryd.notebook import connect as connect_notebook

    return connect_notebook(home, row_limit=row_limit)
