"""Trends and the supersede report on a big vault (issue 16): how long `trends(days)` and
`supersede_report()` take in process.

The vault: `--n` session memories of bench/_corpus.py (seven minutes apart, so 100k span
about 486 days), indexed with memoryd's spaCy rules so their MENTIONS edges are real; then
`--recalls` recalls tracked as of the newest memory (trigger_stats, recall counts). The
service's clock is set to the newest memory, so the windows hold data. Each timing is the
median and max of `--runs` calls.

    .venv/bin/python bench/trends.py [--n 20000] [--runs 5] [--json bench/results/trends.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

CHUNK = 2000


def timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return {"median_s": round(statistics.median(samples), 4), "max_s": round(max(samples), 4)}


def measure(n: int, runs: int, recalls: int, root: Path) -> dict[str, Any]:
    from _corpus import drafts, queries
    from memoryd.config import load_settings
    from memoryd.models import MemoryType
    from memoryd.wiring import open_service

    settings = load_settings(root / "home", graph={"buffer_pool_mb": 512})
    rows: dict[str, Any] = {"n": n, "runs": runs}
    with open_service(settings) as svc:
        t0 = time.perf_counter()
        newest = None
        for start in range(0, n, CHUNK):
            chunk = [
                d.model_copy(update={"type": MemoryType.SESSION})
                for d in drafts(min(CHUNK, n - start), root / "projects", start_at=start)
            ]
            svc.record_many(chunk)
            newest = chunk[-1].created_at
        rows["ingest_s"] = round(time.perf_counter() - t0, 1)
        assert newest is not None
        svc.clock = lambda: newest
        for query in queries(recalls):
            svc.recall(query, k=5)
        svc.flush_recall_counts()
        rows["mentions"] = svc.cypher("MATCH ()-[r:MENTIONS]->() RETURN count(r)").rows[0][0]
        for days in (7, 30, 366):
            result = svc.trends(days)
            rows[f"trends_{days}d"] = {
                **timed(lambda d=days: svc.trends(d), runs),  # type: ignore[misc]
                "rising": len(result.rising_entities),
                "triggers": len(result.top_triggers),
                "hot": len(result.hot_recalls),
                "series": len(result.mentions),
            }
            print(f"trends {days}d: {rows[f'trends_{days}d']}", flush=True)
        report = svc.supersede_report()
        rows["supersede_report"] = {
            **timed(svc.supersede_report, runs),
            "decisions": report.decisions,
        }
        print(f"supersede report: {rows['supersede_report']}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-trends-") as tmp:
        rows = measure(args.n, args.runs, args.recalls, Path(tmp))
    print(json.dumps(rows, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
