"""Crash benchmark: kill -9 the daemon in the middle of writes, restart it, check nothing is lost.

Each cycle: 4 writers record memories over the Unix socket; once writes flow, the daemon is
killed with SIGKILL after a random delay; a new daemon is started on the same data dir. After
every restart: every acknowledged write (its 201 was read) is in the vault and the graph, the
graph opens, the audit chain verifies (a torn last line is repaired on start, with a warning),
and the four stores agree with no reindex: the vault's files, the graph's nodes, the search
index's documents and the audit log's record lines are the same set of memories, and doctor
is clean. A write the kill cut short is settled on start (rolled forward or back, with a
`recover` audit line); the totals are reported.

    python bench/crash.py --cycles 20 [--json bench/results/crash.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.daemon_harness import Daemon, check_after_restart, write_until_killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "crash.json"
    )
    args = parser.parse_args()
    os.environ.setdefault("MEMORYD_CONFIG", os.devnull)
    os.environ.setdefault("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
    rng = random.Random(args.seed)

    cycles = []
    acknowledged: list[str] = []
    with tempfile.TemporaryDirectory(prefix="memoryd-crash-") as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / "project"
        project.mkdir()
        daemon = Daemon(home).start()
        try:
            for cycle in range(args.cycles):
                result = write_until_killed(
                    daemon,
                    project,
                    writers=args.writers,
                    kill_after_s=rng.uniform(0.2, 1.2),
                    cycle=cycle,
                )
                acknowledged += result.acknowledged
                started = time.perf_counter()
                daemon = Daemon(home).start()
                restart_s = time.perf_counter() - started
                check = check_after_restart(daemon, acknowledged)
                repaired = "torn" in daemon.log_text().lower()
                stores = check["four_way"]
                row = {
                    "cycle": cycle,
                    "acknowledged": len(result.acknowledged),
                    "acknowledged_total": len(acknowledged),
                    "restart_s": round(restart_s, 2),
                    "missing": len(check["missing"]),
                    "audit_ok": check["audit"]["ok"],
                    "audit_lines": check["audit"]["lines"],
                    "search_status": check["search_status"],
                    "torn_audit_repaired_so_far": repaired,
                    "four_way_agree": stores["agree"],
                    "vault": stores["vault"],
                    "graph": stores["graph"],
                    "index": stores["index"],
                    "audit_memories": stores["audit"],
                    "differ": stores["differ"],
                    "rolled_forward_so_far": stores["rolled_forward"],
                    "rolled_back_so_far": stores["rolled_back"],
                    "doctor_failures": check["doctor_failures"],
                }
                cycles.append(row)
                print(json.dumps(row), flush=True)
        finally:
            daemon.stop()
            daemon.kill()
    ok = all(
        c["missing"] == 0
        and c["audit_ok"]
        and c["search_status"] == 200
        and c["four_way_agree"]
        and not c["doctor_failures"]
        for c in cycles
    )
    last = cycles[-1] if cycles else {}
    report = {
        "cycles": len(cycles),
        "acknowledged_writes": len(acknowledged),
        "lost_writes": max((c["missing"] for c in cycles), default=0),
        "four_way_agree_every_cycle": all(c["four_way_agree"] for c in cycles),
        "doctor_clean_every_cycle": all(not c["doctor_failures"] for c in cycles),
        "memories_at_end": last.get("vault", 0),
        "unacknowledged_rolled_forward": last.get("rolled_forward_so_far", 0),
        "unacknowledged_rolled_back": last.get("rolled_back_so_far", 0),
        "restart_s_median": round(statistics.median(c["restart_s"] for c in cycles), 2),
        "ok": ok,
        "per_cycle": cycles,
    }
    print(
        f"{len(cycles)} kill -9 cycles, {len(acknowledged)} acknowledged writes, "
        f"lost {report['lost_writes']}, audit chain ok in every cycle: "
        f"{all(c['audit_ok'] for c in cycles)}, vault = graph = index = audit in every cycle: "
        f"{report['four_way_agree_every_cycle']}, doctor clean in every cycle: "
        f"{report['doctor_clean_every_cycle']}, unfinished writes settled: "
        f"{report['unacknowledged_rolled_forward']} rolled forward, "
        f"{report['unacknowledged_rolled_back']} rolled back; "
        f"median restart {report['restart_s_median']}s -> {'OK' if ok else 'FAILED'}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
