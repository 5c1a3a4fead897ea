"""Governance: the promotions queue, trigger statistics and profile history in governance.db.

`store` owns the SQLite file; nothing else in memoryd opens it.
"""

from __future__ import annotations

from memoryd.governance.store import GLOBAL_SCOPE, LATEST_VERSION, GovernanceStore, TriggerStat

__all__ = ["GLOBAL_SCOPE", "LATEST_VERSION", "GovernanceStore", "TriggerStat"]
