"""A process that handles a sensitive scope's plaintext hands no freed byte of it to kuzu
(`memoryd.sensitive.heap`): the graph file once held a grant view's plaintext, written by
kuzu from a partly filled buffer the allocator had given it from freed memory.

Each check runs in a fresh interpreter: clearing freed memory is a switch of the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memoryd.native import glibc as _glibc

pytestmark = pytest.mark.skipif(not _glibc(), reason="the switch is glibc's (M_PERTURB)")

PROBE = """
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
{setup}
secret = b"Qwertanium5501 billing cutover " * 160  # 4,960 bytes: a page buffer's size
freed = libc.malloc(len(secret))
ctypes.memmove(freed, secret, len(secret))
libc.free(freed)
buffer = libc.malloc(len(secret))  # what kuzu would be given next, and write out in part
print("leaked" if b"Qwertanium5501" in ctypes.string_at(buffer, len(secret)) else "clear")
"""


def probe(setup: str, tmp_path: Path) -> str:
    code = PROBE.format(setup=textwrap.dedent(setup))
    env = {**os.environ, "MEMORYD_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def test_freed_bytes_reach_the_next_buffer_unless_the_switch_is_on(tmp_path: Path) -> None:
    # The allocator's plain behaviour, which the leak came from, and import changes nothing.
    assert probe("import memoryd.sensitive.envelope, memoryd.governance.gate", tmp_path) == (
        "leaked"
    )
    assert probe(
        "from memoryd.sensitive.heap import scrub_freed_heap\nassert scrub_freed_heap()",
        tmp_path,
    ) == ("clear")


def test_sealing_or_opening_a_sensitive_memory_turns_the_switch_on(tmp_path: Path) -> None:
    seal = """
        import os
        from memoryd.sensitive import envelope
        key = envelope.ScopeKey(key_id=b"k" * 8, secret=os.urandom(32))
        blob = envelope.seal(b"plaintext", key, "scope", "slug")
    """
    assert probe(seal, tmp_path) == "clear"
    opened = """
        import os
        from memoryd.sensitive import envelope
        from memoryd.sensitive.heap import scrub_freed_heap
        key = envelope.ScopeKey(key_id=b"k" * 8, secret=os.urandom(32))
        blob = envelope.seal(b"plaintext", key, "scope", "slug")
        scrub_freed_heap.cache_clear()
        import ctypes
        ctypes.CDLL(None).mallopt(-6, 0)  # off again: only the open may turn it on
        assert envelope.open_(blob, key, "scope", "slug") == b"plaintext"
    """
    assert probe(opened, tmp_path) == "clear"


def test_a_service_over_a_home_with_a_sensitive_scope_turns_it_on(
    tmp_path: Path, project: Path, file_keyring: object
) -> None:
    import memoryd

    with memoryd.open(tmp_path / "home") as api:
        api.sensitive_mark(project)
    setup = f"""
        import memoryd
        with memoryd.open({str(tmp_path / "home")!r}) as api:
            api.list_memories()
    """
    assert probe(setup, tmp_path) == "clear"
