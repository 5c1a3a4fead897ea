"""The supersede rules' version, apart from the rules: an open checks whether any automatic
decision was made by older rules (`Superseding.repair_supersedes`) without loading the rules'
patterns, which only a write that judges needs."""

from __future__ import annotations

RULES_VERSION = 2
"""The version of the rules that made an automatic decision, kept with it: a data dir whose
automatic decisions an older version made gets them judged again on open. 1 (unrecorded):
any word after "no longer" / "instead of" was a replaced thing; 2: only a known name, an
explicit status line, at most `MAX_AUTOMATIC` at once."""
