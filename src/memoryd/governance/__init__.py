"""Governance: the promotions queue, trigger statistics, profile history and the enrichment
queue in governance.db.

`store` owns the SQLite file; nothing else in memoryd opens it.
"""

from __future__ import annotations

from memoryd.governance.store import (
    GLOBAL_SCOPE,
    LATEST_VERSION,
    EnrichmentRow,
    EnrichmentState,
    GovernanceStore,
    TriggerStat,
)

__all__ = [
    "GLOBAL_SCOPE",
    "LATEST_VERSION",
    "EnrichmentRow",
    "EnrichmentState",
    "GovernanceStore",
    "TriggerStat",
]
