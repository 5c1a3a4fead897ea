"""The settings the suite runs memoryd with, wherever memoryd runs: in the test process, in
the CLI subprocesses, in the README's shell and in test daemons (`tests.daemon_harness`).

Results must not depend on what is installed on the machine running the suite: the vector
extra is installed on some (a developer's venv) and not on others (CI).
"""

from __future__ import annotations

import os

ENGINE = os.environ.get("MEMORYD_TEST_ENGINE", "kuzu")
"""The graph engine under test (`MEMORYD_TEST_ENGINE=ladybug` runs the suite on the fork)."""

PINNED_ENV = {
    "MEMORYD_GRAPH__ENGINE": ENGINE,
    # Recall ranks the same whether or not the vector extra is installed; the vector stage's
    # own tests (test_vectors.py) turn it on.
    "MEMORYD_RECALL__VECTORS": "off",
    # One recall reader, not one per core: a test daemon's first recalls start its readers,
    # each a Python process that imports memoryd and opens the stores (about a second of CPU
    # on a box the suite shares). One keeps recall going through a reader as it does for a
    # user; test_readers.py sets its own counts to test the pool.
    "MEMORYD_DAEMON__RECALL_READERS": "1",
    # A hook that finds no daemon starts one in the background (`memoryd.autostart`); the
    # suite's hooks recall in-process instead, so no test leaves a daemon behind. The
    # autostart tests (test_hook_autostart.py) turn it on.
    "MEMORYD_DAEMON__AUTOSTART": "0",
}
"""Environment every memoryd the suite starts gets, unless a test sets the key itself."""
