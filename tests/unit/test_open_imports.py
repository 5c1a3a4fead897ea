"""`memoryd.open` and a first recall load what they use, not every feature's modules.

The service's mixins and `domain/core.py` used to import sync, supersede judging (its rules'
patterns and the status lines), merge and the job calendar at module level, so every process
that opened the stores paid for them (issue 28: `memoryd.open` at 1.69x the CPU of 9e2a96f,
bench/RESULTS.md). Checked by what a fresh interpreter has imported (`sys.modules`), not by a
clock: the test names the module that came back and does not flake on a busy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NOT_AT_OPEN = (
    "memoryd.sync",
    "memoryd.governance.supersede",
    "memoryd.governance.supersede_graph",
    "memoryd.governance.supersede_pairs",
    "memoryd.governance.supersede_patterns",
    "memoryd.governance.supersede_rules",
    "memoryd.governance.supersede_names",
    "memoryd.governance.status_lines",
    "memoryd.governance.merge",
    "memoryd.governance.schedule",
    "memoryd.governance.digest",
    "memoryd.governance.trends",
)
"""Modules only a write that judges, a sync command, a merge or the scheduler needs."""

_PROBE = """
import json, sys
import memoryd
home, project = sys.argv[1], sys.argv[2]
with memoryd.open(home) as mem:
    opened = sorted(sys.modules)
    mem.recall("why did we pick postgres", scope=project, track=False)
    recalled = sorted(sys.modules)
print(json.dumps({"opened": opened, "recalled": recalled}))
"""


def _loaded(tmp_path: Path) -> dict[str, list[str]]:
    project = tmp_path / "project"
    project.mkdir()
    env = {**os.environ, "MEMORYD_DAEMON__AUTOSTART": "0", "MEMORYD_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "home"), str(project)],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
        env=env,
    )
    loaded: dict[str, list[str]] = json.loads(result.stdout)
    return loaded


def _features(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == x or m.startswith(x + ".") for x in NOT_AT_OPEN))


def test_open_and_a_first_recall_skip_the_features_they_do_not_call(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path)
    assert _features(loaded["opened"]) == [], "import these where they are used"
    assert _features(loaded["recalled"]) == [], "import these where they are used"
    # what an open does need is there: the stores and the service
    assert {"memoryd.service", "memoryd.graph.kuzu_store", "memoryd.search.index"} <= set(
        loaded["opened"]
    )


def test_the_rules_version_an_open_checks_is_the_rules_own() -> None:
    """`repair_supersedes` reads the version from `supersede_version` so that an open does
    not load the rules; the rules stamp their decisions with the same number."""
    from memoryd.governance import supersede, supersede_rules, supersede_version

    assert supersede.RULES_VERSION is supersede_version.RULES_VERSION
    assert supersede_rules.RULES_VERSION is supersede_version.RULES_VERSION
