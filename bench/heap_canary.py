"""Copies of a sensitive scope's plaintext left in the daemon's memory after its grant ended.

    python bench/heap_canary.py [--memories 60] [--recalls 30] [--env NAME=VALUE] [--json FILE]

A sensitive scope holds `--memories` memories, each with a unique canary in its title and
body. A real `memoryd serve` grants the scope (it decrypts the scope into its in-memory view),
answers `--recalls` recalls and gets under the grant, and the grant is revoked (the view is
dropped, as at expiry). Then every writable mapping of the daemon and of its reader processes
(/proc/PID/mem; needs ptrace rights over them, as root or the same user with ptrace_scope 0)
is searched for the canaries, and again after 20 s. Counted: occurrences in UTF-8 (Python
keeps ASCII strings as UTF-8 bytes) and in UTF-32 (a str with one wide character keeps
every character in 4 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from tests.daemon_harness import running, uds_client

CANARY = "Zephyrquill{:04d}"
MARK = re.compile(rb"Zephyrquill\d{4}")
WIDE = re.compile("Zephyrquill".encode("utf-32-le"))
CHUNK = 32 * 1024 * 1024
SKIP_ABOVE = 4 * 1024**3


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def scan(pid: int) -> dict[str, int]:
    """Canary occurrences in the process's writable memory, by kind of mapping."""
    counts = {"heap": 0, "anon": 0, "other": 0, "wide": 0}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            if "w" not in parts[1]:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            name = parts[5] if len(parts) > 5 else ""
            if end - start > SKIP_ABOVE:
                continue  # kuzu's buffer pool reservation: address space, not memory
            kind = "heap" if name == "[heap]" else "anon" if not name else "other"
            for at in range(start, end, CHUNK):
                try:
                    mem.seek(at)
                    data = mem.read(min(CHUNK + 64, end - at))
                except (OSError, ValueError, OverflowError):
                    continue
                # The 64 bytes of overlap may count a canary twice in 1 of ~500k: ignored.
                counts[kind] += len(MARK.findall(data, 0, min(CHUNK, end - at) + 15))
                counts["wide"] += len(WIDE.findall(data, 0, min(CHUNK, end - at) + 43))
    return counts


def run(memories: int, recalls: int, env: dict[str, str]) -> dict[str, Any]:
    import keyring
    from keyrings.alt.file import PlaintextKeyring

    from memoryd.config import load_settings
    from memoryd.models import MemoryDraft, MemoryType
    from memoryd.sensitive.keys import TEST_KEYRING_ENV
    from memoryd.wiring import open_service

    with tempfile.TemporaryDirectory(prefix="memoryd-bench-heap-") as tmp:
        work = Path(tmp)
        os.environ["XDG_DATA_HOME"] = str(work / "xdg")
        os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
        os.environ[TEST_KEYRING_ENV] = "keyrings.alt.file.PlaintextKeyring"  # a bench, in tmp
        ring = PlaintextKeyring()
        ring.file_path = str(work / "xdg" / "python_keyring" / "keyring_pass.cfg")
        keyring.set_keyring(ring)
        home, project = work / "home", work / "project"
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        settings = load_settings(home)
        with open_service(settings) as svc:
            svc.record_many(
                [
                    MemoryDraft(
                        type=MemoryType.DECISION,
                        title=f"Ledger rule {CANARY.format(i)}",
                        body=f"The billing ledger for {CANARY.format(i)} closes on the 3rd;"
                        f" invoices of {CANARY.format(i)} go out by mail.",
                        tags=[f"tag{CANARY.format(i)}".lower()],
                        scope_path=project,
                    )
                    for i in range(memories)
                ]
            )
            svc.sensitive_mark(project)
        with running(home, env=env) as daemon, uds_client(home) as http:
            before = scan(daemon.pid)
            assert http.post("/v1/grants", json={"scope": str(project), "duration": "session"})
            found = 0
            for i in range(recalls):
                n = i % memories
                answer = http.post(
                    "/v1/recall", json={"q": f"ledger {CANARY.format(n)}", "scope": str(project)}
                ).json()
                found += CANARY.format(n) in json.dumps(answer)
            granted = scan(daemon.pid)
            http.delete("/v1/grants", params={"scope": str(project)})
            time.sleep(2)
            after = scan(daemon.pid)
            readers = {pid: scan(pid) for pid in children(daemon.pid)}
            time.sleep(20)
            later = scan(daemon.pid)
    return {
        "memories": memories,
        "recalls": recalls,
        "recalls_that_found_the_canary": found,
        "daemon_before_grant": before,
        "daemon_under_grant": granted,
        "daemon_2s_after_revoke": after,
        "daemon_22s_after_revoke": later,
        "readers_2s_after_revoke": readers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=60)
    parser.add_argument("--recalls", type=int, default=30)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the daemon")
    parser.add_argument("--json", type=Path, default=Path("bench/results/heap_canary.json"))
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    result = run(args.memories, args.recalls, env)
    result["daemon_env"] = env
    print(f"{'when':<28}{'heap':>8}{'anon':>8}{'other':>8}{'wide':>8}")
    for when in ("before_grant", "under_grant", "2s_after_revoke", "22s_after_revoke"):
        c = result[f"daemon_{when}"]
        print(f"{when:<28}{c['heap']:>8}{c['anon']:>8}{c['other']:>8}{c['wide']:>8}")
    for pid, c in result["readers_2s_after_revoke"].items():
        print(
            f"{'reader ' + str(pid):<28}{c['heap']:>8}{c['anon']:>8}{c['other']:>8}{c['wide']:>8}"
        )
    print(
        f"recalls that found their canary: {result['recalls_that_found_the_canary']}/{args.recalls}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
