"""A granted scope's plaintext does not outlive its grant in the daemon's memory (issue 26):
the daemon runs with CPython's small-object allocator and glibc's thread cache off, so
`M_PERTURB` overwrites every freed string at once (`memoryd.sensitive.heap.daemon_env`).
Before, 60 canaries left about 260 copies in freed memory after the revoke."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from memoryd.config import Settings
from memoryd.models import MemoryDraft, MemoryType
from memoryd.native import glibc as _glibc
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client

CANARY = "Zephyrquill{:04d}"
MARK = re.compile(rb"Zephyrquill\d{4}")
CHUNK = 32 * 1024 * 1024


def copies(pid: int) -> int:
    """Canaries in the process's writable mappings (kuzu's huge reservation skipped)."""
    found = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if "w" not in parts[1] or end - start > 4 * 1024**3:
                continue
            for at in range(start, end, CHUNK):
                try:
                    mem.seek(at)
                    data = mem.read(min(CHUNK + 64, end - at))
                except (OSError, ValueError, OverflowError):
                    continue
                found += len(MARK.findall(data, 0, min(CHUNK, end - at) + 15))
    return found


@pytest.mark.skipif(not _glibc(), reason="the scrub needs glibc")
def test_no_plaintext_left_in_the_daemon_after_the_grant_ends(
    settings: Settings, file_keyring: object, home: Path, project: Path
) -> None:
    with open_service(settings) as svc:
        svc.record_many(
            [
                MemoryDraft(
                    type=MemoryType.DECISION,
                    title=f"Ledger rule {CANARY.format(i)}",
                    body=f"The ledger for {CANARY.format(i)} closes on the 3rd;"
                    f" invoices of {CANARY.format(i)} go out by mail.",
                    scope_path=project,
                )
                for i in range(60)
            ]
        )
        svc.sensitive_mark(project)
    with running(home) as daemon, uds_client(home) as http:
        try:
            assert copies(daemon.pid) == 0
        except PermissionError:
            pytest.skip("no ptrace rights over the daemon (/proc/PID/mem)")
        assert http.post("/v1/grants", json={"scope": str(project), "duration": "session"})
        for n in range(30):
            answer = http.post("/v1/recall", json={"q": f"ledger {CANARY.format(n)}",
                                                   "scope": str(project)})  # fmt: skip
            assert CANARY.format(n) in answer.text
        assert copies(daemon.pid) > 60  # the view holds them while granted
        http.delete("/v1/grants", params={"scope": str(project)})
        time.sleep(1)
        left = copies(daemon.pid)
        env = Path(f"/proc/{daemon.pid}/environ").read_bytes().split(b"\0")
    assert left <= 3, f"{left} copies of the canaries in the daemon after the revoke"
    assert b"PYTHONMALLOC=malloc" in env
    assert os.environ.get("PYTHONMALLOC") != "malloc"  # the test process itself untouched
