"""The first recall in a fresh process against the hundredth (issue 28).

    python bench/first_recall.py [--sizes 10000 [100000]] [--runs 3] [--home DIR]
                                 [--json bench/results/first_recall.json]

Builds, once per size (kept under `--home` and reused when given), a home whose memories all
live in one scope (bench corpus, English with some Chinese, extraction off so the build is
quick; the cold path measured is the search side's), then times:

- `memoryd recall` as a user types it, in a fresh process each time (wall time);
- in a fresh Python process: `memoryd.open`, the first recall and the hundredth (after 98
  others with other queries), wall and CPU, and whether the first (English) recall loaded
  jieba;
- `memoryd record` of one decision with no daemon (wall time), then the first recall of a fresh
  process again (a write must leave the scope's saved statistics current);
- a fresh `memoryd serve`: its first recall over the Unix socket, then the median of 20 more.

Targets: first recall in a fresh process <= 300 ms at 10k and <= 500 ms at 100k.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memoryd
from _corpus import drafts, queries
from _http_bench import Daemon

QUERY = "redis timeout"
TARGET_MS = {10_000: 300.0, 100_000: 500.0}
IN_PROCESS = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import memoryd
with memoryd.open(sys.argv[1]) as svc:
    t1, c1 = time.perf_counter(), time.process_time()
    svc.recall(sys.argv[2], scope=sys.argv[3], track=False)
    t2, c2 = time.perf_counter(), time.process_time()
    jieba = "jieba" in sys.modules
    for q in json.loads(sys.argv[4]):
        svc.recall(q, scope=sys.argv[3], track=False)
    t3, c3 = time.perf_counter(), time.process_time()
    svc.recall(sys.argv[2] + " cache", scope=sys.argv[3], track=False)
    t4, c4 = time.perf_counter(), time.process_time()
print(json.dumps({
    "open_ms": round((t1 - t0) * 1000, 1), "first_ms": round((t2 - t1) * 1000, 1),
    "first_cpu_ms": round((c2 - c1) * 1000, 1), "hundredth_ms": round((t4 - t3) * 1000, 1),
    "hundredth_cpu_ms": round((c4 - c3) * 1000, 1), "jieba": jieba,
}))
"""


def build(root: Path, n: int) -> tuple[Path, Path]:
    home, projects = root / f"home-{n}", root / f"projects-{n}"
    if not (home / "governance.db").exists():
        started = time.perf_counter()
        with memoryd.open(home, extraction={"enabled": False}) as svc:
            for start in range(0, n, 10_000):
                svc.record_many(drafts(min(10_000, n - start), projects, scopes=1, start_at=start))
        print(f"[{n}] built in {time.perf_counter() - started:.0f}s", flush=True)
    return home, projects / "project-00"


def cli_recall(home: Path, scope: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "memoryd",
            "recall",
            QUERY,
            "--scope",
            str(scope),
            "--home",
            str(home),
            "--json",
        ],
        check=True,
        capture_output=True,
    )
    return (time.perf_counter() - started) * 1000


def cli_record(home: Path, scope: Path, run: int) -> tuple[float, float]:
    """A `memoryd record` in its own process: wall and CPU ms."""
    stamp = time.time_ns()  # a new memory each time (the same body would be a duplicate)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "memoryd",
            "record",
            "--scope",
            str(scope),
            "--type",
            "decision",
            "--title",
            f"Bench write {run} {stamp}",
            "--body",
            f"The redis timeout for the session cache is two seconds from now on ({stamp}).",
            "--home",
            str(home),
        ],
        check=True,
        capture_output=True,
    )
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return wall, cpu


def in_process(home: Path, scope: Path) -> dict[str, Any]:
    others = json.dumps(queries(98, seed=5))
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, str(home), QUERY, str(scope), others],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def daemon_recalls(home: Path, scope: Path) -> dict[str, Any]:
    daemon = Daemon(home, "kuzu")
    try:
        with daemon.client() as http:
            params: dict[str, str | bool] = {"q": QUERY, "scope": str(scope), "track": False}
            started = time.perf_counter()
            http.get("/v1/recall", params=params).raise_for_status()
            first = (time.perf_counter() - started) * 1000
            later = []
            for q in queries(20, seed=3):
                started = time.perf_counter()
                http.get("/v1/recall", params={**params, "q": q}).raise_for_status()
                later.append((time.perf_counter() - started) * 1000)
    finally:
        daemon.stop()
    return {"first_ms": round(first, 1), "later_median_ms": round(statistics.median(later), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--home", type=Path, help="keep the built homes here (reused)")
    parser.add_argument("--no-daemon", dest="daemon", action="store_false")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "first_recall.json"
    )
    args = parser.parse_args()
    os.environ.setdefault("MEMORYD_CONFIG", os.devnull)
    rows = []
    with tempfile.TemporaryDirectory(prefix="memoryd-first-recall-") as tmp:
        root = args.home or Path(tmp)
        for n in args.sizes:
            home, scope = build(root, n)
            for run in range(args.runs):
                row: dict[str, Any] = {"n": n, "run": run + 1, "load": os.getloadavg()[0]}
                row["cli_ms"] = round(cli_recall(home, scope), 1)
                row["in_process"] = in_process(home, scope)
                wall, cpu = cli_record(home, scope, run)
                row["record_ms"], row["record_cpu_ms"] = round(wall, 1), round(cpu, 1)
                row["after_write"] = in_process(home, scope)
                if args.daemon:
                    row["daemon"] = daemon_recalls(home, scope)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{'n':>7} {'cli':>8} {'open':>7} {'first':>7} {'cpu':>7} {'100th':>7}"
          f" {'jieba':>6} {'record':>7} {'1st after':>9} {'cpu':>7}"
          f" {'daemon 1st':>10} {'later':>7}")  # fmt: skip
    for row in rows:
        ip, dm = row["in_process"], row.get("daemon", {})
        cells = [row["n"], row["cli_ms"], ip["open_ms"], ip["first_ms"], ip["first_cpu_ms"]]
        after = row["after_write"]
        cells += [ip["hundredth_ms"], ip["jieba"], row["record_ms"], after["first_ms"]]
        cells += [after["first_cpu_ms"], dm.get("first_ms", "-"), dm.get("later_median_ms", "-")]
        widths = [7, 8, 7, 7, 7, 7, 6, 7, 9, 7, 10, 7]
        print(" ".join(f"{cell!s:>{width}}" for cell, width in zip(cells, widths, strict=True)))
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "query": QUERY,
        "targets_ms": TARGET_MS,
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.json}")


if __name__ == "__main__":
    main()
