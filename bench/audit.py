"""Audit log benchmark: bulk append_many, single appends, verify, read and reopen.

    python bench/audit.py [--records 100000] [--batch 1000] [--singles 2000]
                          [--dir DIR] [--json bench/results/audit.json]

Bulk ingest appends `--records` events with append_many in batches of `--batch` (one write and
one fsync per batch), then verifies that chain; then `--singles` appends one at a time (an
fsync and a head-anchor rename each). Every append is durable, so the numbers depend on the
disk: pass --dir to measure a particular file system (the default is a temp dir).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

from memoryd.audit import AuditEvent, AuditLog

SCOPES = [f"{i:012x}" for i in range(20)]
EVENT_TYPES = ["capture", "record", "promote", "decay", "recall", "supersede"]


def events(start: int, count: int) -> list[AuditEvent]:
    """Events shaped like the service's: ids and counts in details, never memory text."""
    return [
        AuditEvent(
            actor="daemon" if i % 3 else "cli",
            event_type=EVENT_TYPES[i % len(EVENT_TYPES)],
            scope_hash=SCOPES[i % len(SCOPES)],
            target_id=f"2026-05-18-{i:08d}",
            details={"type": "session", "source": "claude-code", "bytes": 1200 + i % 500},
        )
        for i in range(start, start + count)
    ]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def filesystem(path: Path) -> str:
    """The mount's file system type (Linux), since fsync cost is what the numbers measure."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    resolved = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and resolved.startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def run(records: int, batch: int, singles: int, directory: Path) -> dict[str, object]:
    log = AuditLog(directory)
    bulk = events(0, records)

    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, records, batch):
        log.append_many(bulk[start : start + batch])
    bulk_s, bulk_cpu_s = time.perf_counter() - t0, time.process_time() - c0

    t0 = time.perf_counter()
    verification = log.verify()
    verify_s = time.perf_counter() - t0
    if not verification.ok or verification.lines != records:
        raise SystemExit(f"verify failed after bulk ingest: {verification}")

    latencies = []
    t0 = time.perf_counter()
    for event in events(records, singles):
        t = time.perf_counter()
        log.append(
            actor=event.actor,
            event_type=event.event_type,
            scope_hash=event.scope_hash,
            target_id=event.target_id,
            details=event.details,
        )
        latencies.append((time.perf_counter() - t) * 1000)
    singles_s = time.perf_counter() - t0

    t = time.perf_counter()
    last = log.read(limit=20)
    read_last_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    in_scope = log.read(scope_hash=SCOPES[3], event_type="record")
    read_filtered_ms = (time.perf_counter() - t) * 1000

    # A new process's first append reads only the tail, however long the log is.
    t = time.perf_counter()
    reopened = AuditLog(directory)
    reopened.append(actor="cli", event_type="bench", scope_hash=None, target_id=None)
    reopen_append_ms = (time.perf_counter() - t) * 1000

    t0 = time.perf_counter()
    final = reopened.verify()
    verify_all_s = time.perf_counter() - t0
    total = records + singles + 1
    if not final.ok or final.lines != total:
        raise SystemExit(f"verify failed at the end: {final}")

    size = (directory / "audit.jsonl").stat().st_size
    return {
        "records": records,
        "batch": batch,
        "append_many_seconds": round(bulk_s, 3),
        "append_many_records_per_s": round(records / bulk_s),
        # CPU time of this process: what the numbers would be on an idle machine, roughly.
        "append_many_cpu_seconds": round(bulk_cpu_s, 3),
        "append_many_records_per_cpu_s": round(records / bulk_cpu_s),
        "verify_records": verification.lines,
        "verify_seconds": round(verify_s, 3),
        "verify_records_per_s": round(records / verify_s),
        "single_appends": singles,
        "single_appends_per_s": round(singles / singles_s),
        "single_append_p50_ms": round(pct(latencies, 0.5), 3),
        "single_append_p95_ms": round(pct(latencies, 0.95), 3),
        "single_append_max_ms": round(max(latencies), 3),
        "read_last_20_ms": round(read_last_ms, 1),
        "read_scope_and_type_ms": round(read_filtered_ms, 1),
        "read_scope_and_type_hits": len(in_scope),
        "read_last_20_hits": len(last),
        "reopen_first_append_ms": round(reopen_append_ms, 2),
        "verify_all_records": final.lines,
        "verify_all_seconds": round(verify_all_s, 3),
        "log_bytes": size,
        "bytes_per_record": round(size / total),
        "filesystem": filesystem(directory),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--singles", type=int, default=2_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: temp)")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "audit.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-audit-", dir=args.dir) as tmp:
        result = run(args.records, args.batch, args.singles, Path(tmp) / "audit")

    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
