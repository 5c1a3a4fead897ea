"""Core benchmark: bulk ingest, search latency, peak RSS, sizes, reindex time.

python bench/core.py --n 10000 [--json bench/results/core-10000.json] [--engine kuzu]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _corpus import drafts, queries
from memoryd.config import load_settings
from memoryd.wiring import open_service


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--engine", default="kuzu", choices=["kuzu", "ladybug"])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-reindex", action="store_true")
    args = parser.parse_args()
    out_path = args.json or Path(__file__).parent / "results" / f"core-{args.n}.json"

    with tempfile.TemporaryDirectory(prefix="memoryd-bench-") as tmp:
        root = Path(tmp)
        settings = load_settings(root / "home", graph={"engine": args.engine})
        items = drafts(args.n, root / "projects")
        svc = open_service(settings)
        try:
            t0 = time.perf_counter()
            for start in range(0, len(items), 10_000):
                svc.record_many(items[start : start + 10_000])
            ingest_s = time.perf_counter() - t0

            scope_paths = [root / "projects" / f"project-{i:02d}" for i in range(20)]
            latencies = []
            hits = 0
            for i, query in enumerate(queries()):
                t = time.perf_counter()
                found = svc.search(query, scope=scope_paths[i % 20], k=10)
                latencies.append((time.perf_counter() - t) * 1000)
                hits += bool(found)
            reindex_s = None
            if not args.skip_reindex:
                t = time.perf_counter()
                svc.reindex()
                reindex_s = time.perf_counter() - t
        finally:
            svc.close()
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {
            "n": args.n,
            "engine": args.engine,
            "ingest_s": round(ingest_s, 2),
            "ingest_per_s": round(args.n / ingest_s, 1),
            "search_p50_ms": round(statistics.median(latencies), 3),
            "search_p95_ms": round(pct(latencies, 0.95), 3),
            "queries_with_hits": hits,
            "reindex_s": round(reindex_s, 2) if reindex_s is not None else None,
            "peak_rss_mb": round(peak_rss_mb, 1),
            "vault_mb": round(du(root / "home" / "scopes") / 1e6, 1),
            "graph_mb": round(du(root / "home" / "graph") / 1e6, 1),
            "search_index_mb": round(du(root / "home" / "search") / 1e6, 1),
        }
    width = max(len(k) for k in result)
    print(f"{'metric':<{width}}  value")
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
