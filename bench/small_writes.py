"""Small-writes benchmark (issue 28): `record` of one decision into a big scope, `record_many`
with extraction at several batch sizes, and peak RSS, in process and through a daemon.

    python bench/small_writes.py [--record-at 10000] [--many-at 100000]
        [--batches 100,1000,2000,5000] [--records 40] [--no-daemon]
        [--json bench/results/small_writes.json]

One home, extraction on, every memory in one scope (the worst case for supersede judging:
every older decision of the scope is a candidate). The home is grown with `record_many` in
chunks of 10,000 (`bench/_corpus.py`'s coding-agent notes) to `--record-at` memories, where
`--records` decisions are recorded one at a time (each judged against the scope's older
preferences, decisions and facts), then to `--many-at`, where a `record_many` of each batch
size runs (a batch of at most 2,000 is judged too), then the decisions again. The same
steps then run through a real `memoryd serve` on the home (`--no-daemon` skips them): wall
time per request and the daemon's CPU time.

Targets (issue 28): `record` p95 <= 50 ms at 10k; `record_many` >= 2,000 memories a second
at 100k whatever the batch size; peak RSS <= 1.5 GB at 100k (the process that holds the
stores: this one in process, the daemon through it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).parent))  # after the stdlib: bench/http.py must not shadow it

import memoryd
from _corpus import PROBLEMS, TOOLS, drafts, open_in_process
from _http_bench import Daemon
from memoryd.models import MemoryDraft, MemoryType
from memoryd.protocol import MemoryAPI

TARGET_RECORD_P95_MS = 50.0
TARGET_MANY_PER_S = 2000.0
TARGET_RSS_MB = 1536.0
CHUNK = 10_000

DECISIONS = [
    ("Use {a} instead of {b} for {area}", "We switched from {b} to {a} for {area} after {p}."),
    ("Switch {area} to {a}", "{area} moves from {b} to {a}: {b} kept hitting {p}."),
    ("Keep {a} for {area}", "{a} stays for {area}; {b} was tried and dropped after {p}."),
    ("Replace {b} with {a}", "{b} is replaced by {a} in {area} because of {p}."),
    ("Prefer {a} over {b}", "For {area} we prefer {a} over {b}; {b} showed {p}."),
]
AREAS = ["the job queue", "the billing service", "search", "the CI pipeline", "the dashboard"]


def decisions(count: int, scope: Path, *, seed: int, start: datetime) -> list[MemoryDraft]:
    """Decisions naming two of the corpus's tools, newer than everything in the home."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        a, b = rng.sample(TOOLS, 2)
        title, body = rng.choice(DECISIONS)
        words = {"a": a, "b": b, "area": rng.choice(AREAS), "p": rng.choice(PROBLEMS)}
        out.append(
            MemoryDraft(
                type=MemoryType.DECISION,
                title=f"{title.format(**words)} ({seed}-{i})",
                body=body.format(**words),
                scope_path=scope,
                created_at=start + timedelta(seconds=i),
                source="bench",
            )
        )
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds so far of this process (`pid` None) or of another one, with
    its live children's (the extraction worker a big batch starts: `extraction.workers`)."""
    own = os.getpid() if pid is None else pid
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if entry.name == str(own) or fields[1] == str(own):
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def peak_rss_mb(pid: int | None = None) -> float:
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def records(api: MemoryAPI, drafted: list[MemoryDraft], pid: int | None) -> dict[str, Any]:
    """One `record` per decision: wall and CPU per call (the daemon's CPU through it)."""
    wall: list[float] = []
    cpu: list[float] = []
    superseding = 0
    for draft in drafted:
        t, c = time.perf_counter(), cpu_s(pid)
        memory = api.record(draft)
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((cpu_s(pid) - c) * 1000)
        superseding += bool(memory.meta.supersede_decisions)
    return {
        "records": len(wall),
        "judged_with_a_decision": superseding,
        "p50_ms": round(statistics.median(wall), 1),
        "p95_ms": round(pct(wall, 0.95), 1),
        "cpu_p50_ms": round(statistics.median(cpu), 1),
        "cpu_p95_ms": round(pct(cpu, 0.95), 1),
    }


def many(
    api: MemoryAPI, projects: Path, sizes: list[int], start_at: int, pid: int | None
) -> list[dict[str, Any]]:
    """One `record_many` per batch size, of the corpus's next memories."""
    out = []
    for size in sizes:
        batch = drafts(size, projects, scopes=1, start_at=start_at)
        start_at += size
        t, c = time.perf_counter(), cpu_s(pid)
        api.record_many(batch)
        wall, cpu = time.perf_counter() - t, cpu_s(pid) - c
        out.append(
            {
                "batch": size,
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "per_s": round(size / wall, 1),
                "per_cpu_s": round(size / cpu, 1) if cpu else None,
            }
        )
    return out


def grow(home: Path, projects: Path, have: int, want: int) -> tuple[int, float]:
    """`record_many` in chunks of `CHUNK` until the home holds `want` memories."""
    started = time.perf_counter()
    with open_in_process(home, extraction={"enabled": True}) as svc:
        for start in range(have, want, CHUNK):
            svc.record_many(drafts(min(CHUNK, want - start), projects, scopes=1, start_at=start))
    return want, time.perf_counter() - started


def run(
    api: MemoryAPI, args: argparse.Namespace, work: Path, at: int, pid: int | None, phase: int
) -> Any:
    """`--records` decisions at `at` memories; each `phase` (the runs before and after the batch
    step) draws its own, so equal `--record-at` and `--many-at` never repeat a body."""
    scope = work / "projects" / "project-00"
    days = at // 1000 + (pid or 0) % 97 + 400 * phase
    later = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(days=days)
    seed = at + (pid or 1) + 1_000_003 * phase
    return records(api, decisions(args.records, scope, seed=seed, start=later), pid)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--record-at", type=int, default=10_000)
    parser.add_argument("--many-at", type=int, default=100_000)
    parser.add_argument("--batches", default="100,1000,2000,5000")
    parser.add_argument("--records", type=int, default=40)
    parser.add_argument("--no-daemon", action="store_true")
    parser.add_argument("--json", type=Path, default=Path("bench/results/small_writes.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.batches.split(",") if s]
    os.environ.setdefault("MEMORYD_DAEMON__AUTOSTART", "0")

    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} cores",
        "record_at": args.record_at,
        "many_at": args.many_at,
    }
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-small-") as tmp:
        work = Path(tmp)
        home, projects = work / "home", work / "projects"
        have, seconds = grow(home, projects, 0, args.record_at)
        result["grow_to_record_at_s"] = round(seconds, 1)
        next_at = 10 * args.many_at  # drafts after the grown corpus, never the same text
        with open_in_process(home, extraction={"enabled": True}) as svc:
            result["record_in_process"] = run(svc, args, work, have, None, 0)
        have, seconds = grow(home, projects, have, args.many_at)
        result["grow_to_many_at_s"] = round(seconds, 1)
        with open_in_process(home, extraction={"enabled": True}) as svc:
            result["many_in_process"] = many(svc, projects, sizes, next_at, None)
            next_at += sum(sizes)
            result["record_at_many_in_process"] = run(svc, args, work, have, None, 1)
        result["peak_rss_mb_in_process"] = round(peak_rss_mb(), 1)
        if not args.no_daemon:
            daemon = Daemon(home, "kuzu")
            try:
                pid = daemon.process.pid
                with memoryd.open(home) as api:
                    result["many_daemon"] = many(api, projects, sizes, next_at, pid)
                    result["record_at_many_daemon"] = run(api, args, work, have, pid, 2)
                result["peak_rss_mb_daemon"] = round(peak_rss_mb(pid), 1)
            finally:
                daemon.stop()
    result["load_average"] = round(os.getloadavg()[0], 1)
    report(result, args.json)


def report(result: dict[str, Any], out: Path) -> None:
    print(f"{'what':<44}{'p50 ms':>9}{'p95 ms':>9}{'CPU p50':>9}{'CPU p95':>9}")
    for key, label in (
        ("record_in_process", f"record, in process, at {result['record_at']}"),
        ("record_at_many_in_process", f"record, in process, at {result['many_at']}"),
        ("record_at_many_daemon", f"record, daemon, at {result['many_at']}"),
    ):
        if key in result:
            r = result[key]
            print(
                f"{label:<44}{r['p50_ms']:>9.1f}{r['p95_ms']:>9.1f}"
                f"{r['cpu_p50_ms']:>9.1f}{r['cpu_p95_ms']:>9.1f}"
            )
    print(f"\n{'record_many at ' + str(result['many_at']):<30}{'batch':>8}{'wall s':>9}"
          f"{'CPU s':>9}{'per s':>9}{'per CPU s':>11}")  # fmt: skip
    for key, label in (("many_in_process", "in process"), ("many_daemon", "daemon")):
        for r in result.get(key, []):
            print(
                f"{label:<30}{r['batch']:>8}{r['wall_s']:>9.2f}{r['cpu_s']:>9.2f}"
                f"{r['per_s']:>9.1f}{r['per_cpu_s'] or 0:>11.1f}"
            )
    rss = f"peak RSS in process {result['peak_rss_mb_in_process']:.0f} MB"
    if "peak_rss_mb_daemon" in result:
        rss += f", daemon {result['peak_rss_mb_daemon']:.0f} MB"
    print(f"{rss}; load average {result['load_average']}")
    p95 = max(result[k]["p95_ms"] for k in ("record_in_process", "record_at_many_in_process"))
    slowest = min(r["per_s"] for r in result["many_in_process"]) if result["many_in_process"] else 0
    peak = max(result["peak_rss_mb_in_process"], result.get("peak_rss_mb_daemon", 0.0))
    result["targets"] = {
        "record_p95_ms": {"target": TARGET_RECORD_P95_MS, "met": p95 <= TARGET_RECORD_P95_MS},
        "record_many_per_s": {"target": TARGET_MANY_PER_S, "met": slowest >= TARGET_MANY_PER_S},
        "peak_rss_mb": {"target": TARGET_RSS_MB, "met": peak <= TARGET_RSS_MB},
    }
    print(
        "targets: "
        + ", ".join(f"{k} {'met' if v['met'] else 'MISSED'}" for k, v in result["targets"].items())
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
