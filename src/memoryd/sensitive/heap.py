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
mark, and when the gate finds a sensitive scope, never at import. Elsewhere (not glibc: macOS,
musl) there is no such switch in-process; `scrub_freed_heap` says so by returning False, and
a warning is logged once.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

logger = logging.getLogger(__name__)

M_PERTURB = -6
"""glibc's `mallopt` parameter (malloc.h): fill freed bytes, and clear allocated ones."""
PERTURB_BYTE = 0xFF
"""Freed bytes become 0xFF; glibc fills allocated ones with its complement, 0x00."""


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # not a name this libc knows: not glibc
        return False


@functools.cache
def scrub_freed_heap() -> bool:
    """Turn freed-memory clearing on for this process (once); whether it is on."""
    if not _glibc():
        logger.warning(
            "this C library cannot clear freed memory in-process: a sensitive scope's"
            " plaintext freed by this process may reach a partly written graph page"
        )
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_PERTURB, PERTURB_BYTE) == 1)
