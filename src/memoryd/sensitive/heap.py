"""Freed heap memory is cleared in a process that handles a sensitive scope's plaintext.

Why: kuzu (0.11) writes the last page of its catalog from a `malloc`'d buffer it fills only in
part, and the rest of that page on disk is whatever the process last freed there. A sealed
import's test once found a grant view's plaintext snapshot (titles, bodies, tags) in
`graph/memoryd.kz` that way: no memoryd write put it there, the allocator handed kuzu the
freed bytes. The graph is on disk in the clear by design (skeletons only, DESIGN §7), so a
process that decrypts or seals a scope's memories sets glibc's `M_PERTURB`: from then on every
`malloc` outside the per-thread cache returns cleared bytes, and every `free` outside it
overwrites them. Buffers of kuzu's pages are above that cache's sizes (1,032 bytes), so they
come back cleared, whatever was freed into them before.

It is turned on by the first seal or open of a sensitive memory (`envelope`, `sealed`), by a
mark, and when the gate finds a sensitive scope, never at import. Every process has it on
while the engine checkpoints (`memoryd.native.heap_cleared`: any text before its redaction,
not only a sensitive scope's, reached a checkpoint page that way). Elsewhere (not
glibc: macOS, musl) there is no such switch in-process; `scrub_freed_heap` says so by returning
False, and a warning is logged once.

`M_PERTURB` does not reach two caches in front of glibc's `free`: CPython's own allocator
(pymalloc keeps objects up to 512 bytes, most of a memory's strings, in its arenas and never
clears a freed one) and glibc's per-thread cache (up to 7 freed chunks per size). A granted
scope's titles, bodies and tags outlived their grant there (bench/heap_canary.py counts
them). A daemon whose data dir holds a sensitive scope therefore runs with both off
(`daemon_env`, applied by re-executing `memoryd serve` once at start): every Python object is
a `malloc` chunk, and every freed one is overwritten at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path

from memoryd.native import clear_freed_heap
from memoryd.native import glibc as _glibc

logger = logging.getLogger(__name__)


@functools.cache
def scrub_freed_heap() -> bool:
    """Turn freed-memory clearing on for this process (once); whether it is on."""
    if clear_freed_heap():
        return True
    logger.warning(
        "this C library cannot clear freed memory in-process: a sensitive scope's"
        " plaintext freed by this process may reach a partly written graph page"
    )
    return False


DAEMON_HEAP_ENV = "MEMORYD_DAEMON_HEAP"
"""Set in the daemon's environment once it runs with `daemon_env` (so it re-executes once)."""
NO_TCACHE = "glibc.malloc.tcache_count=0"


def daemon_env(environ: Mapping[str, str], home: Path) -> dict[str, str] | None:
    """The environment the daemon re-executes itself with, so freed plaintext is cleared:
    CPython's allocator off (`PYTHONMALLOC=malloc`) and glibc's thread cache off (a
    tunable read at start). None when the process already runs so, is not on glibc, or
    its data dir has no sensitive scope: without pymalloc the daemon costs markedly more CPU
    (bench/RESULTS.md), paid only where there is plaintext to clear. A
    scope marked while the daemon runs is scrubbed from the daemon's next start."""
    if environ.get(DAEMON_HEAP_ENV) == "scrubbed" or not _glibc():
        return None
    if not any((home / "scopes").glob("*/key.json")):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    return {
        **environ,
        "PYTHONMALLOC": "malloc",
        "GLIBC_TUNABLES": f"{tunables}:{NO_TCACHE}" if tunables else NO_TCACHE,
        DAEMON_HEAP_ENV: "scrubbed",
    }
