"""A process that opens the stores itself loads no daemon client and no vector maths.

`memoryd.open()` with no daemon (a library or notebook user, a CLI command run embedded)
needs neither httpx, which only the daemon's client and the LLM providers use, nor numpy,
which only the optional vector stage uses; together they were about a quarter of the CPU such
a process spent opening (bench/RESULTS.md). Smaller ones are held to the same rule. Checked by
what a fresh interpreter has imported (`sys.modules`), not by a clock, so the test names the
import that came back and does not flake on a busy machine.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.service import MemoryService

ONLY_WHEN_USED = (
    "httpx",
    "numpy",
    "smtplib",
    "multiprocessing",
    "pickle",
    "cryptography",
    "yaml",
)
"""httpx: the daemon's client (when a daemon answers) and the LLM providers; numpy: the
vector stage (`recall.vectors` on, with its extra); smtplib: a digest sent by mail;
multiprocessing and pickle: the process a user's Cypher query runs in and the extraction
worker; cryptography: a sensitive scope's files and an encrypted sync export; yaml: a memory
file read."""
LOOKING_BACK = (
    "memoryd.governance.digest",
    "memoryd.governance.notify",
    "memoryd.governance.profile",
    "memoryd.governance.trends",
    "memoryd.governance.reports",
    "memoryd.llm.extract",
)
"""The weekly digest, the identity profile, trends and reports (with the LLM's answer
models): their service methods import them when called, not at open."""
NOT_CALLED = (
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
    "memoryd.governance.analyze",
)
"""Sync, supersede judging (its rules' patterns, the status lines), merge, the job calendar
and session scoring (`analyze`): only a sync command, a write that judges, a merge, the
scheduler or enrichment needs them. The
service's mixins import them in their methods (`memoryd.open` was 1.69x the CPU of 9e2a96f's
with them at module level, bench/RESULTS.md)."""
CLI_OUTPUT = ("click", "rich", "pygments")
"""httpx's command line (`httpx._main`) brought these into a library user's process."""


def loaded_modules(code: str, home: Path, *args: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` against `home`."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORYD_HOME": str(home), "MEMORYD_DAEMON__AUTOSTART": "0"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def heavy(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in loaded))


OPEN_AND_RECALL = """
import memoryd
with memoryd.open() as mem:
    assert type(mem).__name__ == "MemoryService", type(mem)
    mem.recall("why did we pick Postgres?")
"""


def test_an_embedded_open_and_recall_load_no_http_client_nor_numpy(home: Path) -> None:
    loaded = loaded_modules(OPEN_AND_RECALL, home)
    assert "memoryd.wiring" in loaded  # the stores were opened here, not through a daemon
    found = heavy(loaded, ONLY_WHEN_USED + CLI_OUTPUT + LOOKING_BACK + NOT_CALLED)
    assert found == [], f"an embedded memoryd.open() imports {found}: import them where used"


def test_the_cli_recall_without_a_daemon_loads_no_http_client_nor_numpy(
    home: Path, project: Path
) -> None:
    code = (
        "from memoryd.cli.main import app\n"
        "try:\n"
        "    app(['recall', 'why did we pick Postgres?', '--scope', sys.argv[1]])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )
    loaded = loaded_modules(code, home, str(project))
    assert "memoryd.wiring" in loaded
    found = heavy(loaded, ("httpx", "numpy"))  # (rich, for the CLI's output, loads pickle)
    assert found == [], f"`memoryd recall` with no daemon imports {found}: import them where used"


@pytest.mark.parametrize("module", ["memoryd.search.vectors", "memoryd.domain.sync_planning"])
def test_the_vector_modules_import_without_numpy(module: str, home: Path) -> None:
    """Their constants and text helpers (passages, fingerprints) serve the default path too."""
    assert "numpy" not in loaded_modules(f"import {module}", home)


def test_the_rules_version_an_open_checks_is_the_rules_own() -> None:
    """`repair_supersedes` (on every writable open) reads the version from
    `supersede_version`, so an open with nothing to repair does not load the rules; the rules
    stamp their decisions with the same number."""
    from memoryd.governance import supersede, supersede_rules, supersede_version

    assert supersede.RULES_VERSION is supersede_version.RULES_VERSION
    assert supersede_rules.RULES_VERSION is supersede_version.RULES_VERSION


def test_the_first_recall_builds_its_tables_with_the_collector_held_off(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entity matcher is kept for the process: a full collection in the middle of its
    building walked every object the imports made (~20 ms of an embedded first recall)."""
    from memoryd.domain import core

    held: list[bool] = []
    build = core.build_matcher  # type: ignore[attr-defined]

    def spy(*args: Any, **kwargs: Any) -> Any:
        held.append(gc.get_freeze_count() > 0)
        return build(*args, **kwargs)

    monkeypatch.setattr(core, "build_matcher", spy)
    svc.recall("why did we pick Postgres?", scope=project, track=False)
    svc.recall("and why Redis?", scope=project, track=False)
    assert held == [True]
    assert gc.get_freeze_count() == 0
