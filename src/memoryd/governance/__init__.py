"""Governance: the promotions queue, trigger statistics, profile history, the enrichment queue
and scheduled job runs in governance.db; and the lifecycle of memories: `decay` (alive → dim →
soft-forgotten → forgotten, restore), `merge` (fold duplicates, find them) and `schedule` (the
maintenance calendar). Each module has one job; the service lends them its stores (`stores`).

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
