"""Search index benchmark: bulk indexing, single upserts, scope-filtered search latency.

    python bench/search_index.py --n 10000 [--json bench/results/search_index.json]

The corpus (English with about a quarter Chinese, 20 scopes) and the 200 queries come from
bench/_corpus.py, shared with the other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _corpus import TOOLS, VERBS, body, queries
from memoryd.models import DecayState, MemoryType
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.text import segment

SCOPES = [f"{i:012x}" for i in range(20)]
# Mostly alive memories; the rest exercise the decay filter.
STATES = [DecayState.ALIVE] * 7 + [DecayState.DIM, DecayState.SOFT_FORGOTTEN, DecayState.FORGOTTEN]


def corpus(n: int, *, seed: int = 7) -> list[SearchDoc]:
    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    types = list(MemoryType)
    docs = []
    for i in range(n):
        a, b = rng.sample(TOOLS, 2)
        docs.append(
            SearchDoc(
                slug=f"{a.lower()}-{i:06d}",
                scope_hash=SCOPES[i % len(SCOPES)],
                type=rng.choice(types),
                decay_state=rng.choice(STATES),
                title=f"{rng.choice(VERBS).capitalize()} {a} ({i})",
                body=body(rng),
                tags=[a.lower(), b.lower()],
                triggers=[a],
                created_at=start + timedelta(minutes=7 * i),
            )
        )
    return docs


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(n: int, directory: Path, batch: int) -> dict[str, object]:
    docs = corpus(n)
    chinese = sum(1 for doc in docs if any("\u4e00" <= ch <= "\u9fff" for ch in doc.body))
    segment("预热")  # load jieba's dictionary outside the timings
    # Segmentation alone (jieba), to show its share of the indexing time.
    t0 = time.perf_counter()
    for doc in docs:
        for text in (doc.title, doc.body, *doc.tags, *doc.triggers):
            segment(text)
    segment_s = time.perf_counter() - t0
    with SearchIndex.open(directory) as index:
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            index.upsert(docs[start : start + batch])
        index_s = time.perf_counter() - t0

        single = []
        for doc in corpus(50, seed=99):
            t = time.perf_counter()
            index.upsert([doc])
            single.append((time.perf_counter() - t) * 1000)

        latencies = []
        hits = 0
        for i, query in enumerate(queries(200)):
            t = time.perf_counter()
            found = index.search(query, scope_hashes=[SCOPES[i % len(SCOPES)]], limit=10)
            latencies.append((time.perf_counter() - t) * 1000)
            hits += len(found)

        t = time.perf_counter()
        slugs = index.slugs()
        slugs_ms = (time.perf_counter() - t) * 1000
        count = index.count()

    t = time.perf_counter()
    SearchIndex.open(directory).close()
    reopen_ms = (time.perf_counter() - t) * 1000

    return {
        "n": n,
        "chinese_docs": chinese,
        "batch": batch,
        "index_seconds": round(index_s, 3),
        "index_docs_per_s": round(n / index_s),
        "segment_seconds": round(segment_s, 3),
        "single_upsert_p50_ms": round(pct(single, 0.5), 2),
        "single_upsert_p95_ms": round(pct(single, 0.95), 2),
        "search_queries": len(latencies),
        "search_p50_ms": round(pct(latencies, 0.5), 3),
        "search_p95_ms": round(pct(latencies, 0.95), 3),
        "search_max_ms": round(max(latencies), 3),
        "mean_hits": round(hits / len(latencies), 2),
        "slugs_ms": round(slugs_ms, 1),
        "slugs": len(slugs),
        "count": count,
        "reopen_ms": round(reopen_ms, 1),
        "index_bytes": du(directory),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10_000, help="documents per upsert (commit)")
    parser.add_argument(
        "--json",
        type=Path,
        default=Path(__file__).parent / "results" / "search_index.json",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-search-") as tmp:
        result = run(args.n, Path(tmp) / "search", args.batch)

    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
