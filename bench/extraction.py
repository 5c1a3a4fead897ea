"""Extraction speed (milliseconds per KB of text, by text size and language) and quality.

    python bench/extraction.py [--texts 200] [--json [bench/results/extraction.json]]
    python bench/extraction.py --quality [--show-errors] [--json [OUT]]

`--quality` scores the offline rules (blank spaCy pipelines, lexicon and patterns; no
pretrained model, no LLM) on the hand-labelled sentences of `tests/data/entities/`:
precision and recall of the entities proposed, by type and merge key, on the old part (written
in the shape of coding sessions; per language and overall, targets: precision >= 0.90, recall
>= 0.70) and on the real part (taken from public decision records and READMEs; tuning and
held-out thirds, target: precision >= 0.90); `--json` writes them to
bench/results/extraction-quality.json unless given a path.

The texts are coding-agent session notes built from realistic sentences (English, Chinese
and mixed; 0.5 KB to 20 KB) with a fixed seed, so runs compare. Timings are after warm-up
(pipelines and lexicon rulers built), with a graph of 300 known entities whose ruler is
built once and then cached; CPU time is reported beside wall time because the machine may be
shared.
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.entity_gold import (
    PRECISION_TARGET,
    REAL_PRECISION_TARGET,
    RECALL_TARGET,
    SPLITS,
    load_items,
    load_real_items,
    score,
)

from memoryd.extraction.linking import KnownEntity
from memoryd.extraction.pipeline import Extractor
from memoryd.models import EntityType

DEFAULT_JSON = Path(__file__).parent / "results" / "extraction.json"
DEFAULT_QUALITY_JSON = Path(__file__).parent / "results" / "extraction-quality.json"

LIBS = ["React", "Solid", "Vue", "FastAPI", "Django", "Pydantic", "SQLAlchemy", "httpx", "Zod"]
TOOLS = ["PostgreSQL", "SQLite", "Redis", "Kuzu", "Docker", "Kubernetes", "AWS", "pytest"]
TOOLS += ["ruff", "mypy", "uv", "pnpm", "Vite", "webpack", "Claude Code", "Cursor", "git"]
PEOPLE = ["@alice", "@bob", "@carol", "@dmitri", "@wei"]
PATHS = ["src/memoryd/graph/store.py", "tests/test_recall.py", "web/src/App.tsx", "pyproject.toml"]
EN = [
    "We switched from {a} to {b} because the bundle was too big.",
    "The API runs on {t} on AWS, behind an nginx ingress.",
    "{p} reviewed {path} and asked for a test around the lock timeout.",
    "Decided to keep {t} for governance because it needs no server.",
    "I prefer {t} over {u} for this repo; it is faster on CI.",
    "Ran `pip install {lib_lower}` and pinned it in the lock file.",
    "The flaky test in {path} was a race in the cache, fixed by a per-key lock.",
    "{a} is built on {b}, so upgrading {b} first avoids the peer warning.",
    "See https://github.com/kuzudb/kuzu/issues/{n} for the segfault on reopen.",
    "We replaced {u} with {t} and the p95 latency dropped from 140 ms to 35 ms.",
    "Next step: wire the MCP server into Claude Code and Cursor, then write the docs.",
    "The GraphStore protocol now wraps {t}; the adapter lives in memoryd.graph.kuzu_store.",
    "Tried three configs for the buffer pool; 1 GB was enough for 100k memories.",
    "{p} works on the recall ranking and owns the tantivy index.",
    "Remember to run ruff format and mypy --strict before pushing to GitHub.",
]
ZH = [
    "我们决定从 {u} 切到 {t},因为需要更好的并发写入。",
    "记忆引擎运行在 {t} 上,用 Redis 做缓存。",
    "{p} 负责「记忆引擎」的召回模块,他更喜欢 {a} 而不是 {b}。",
    "参考 {t} 官方文档,把连接池调到 16 之后超时问题消失了。",
    "这次迁移用 {t} 替换了 {u},测试全部通过。",
    "{path} 里的锁超时改成了 10 秒,避免 CI 上偶发失败。",
    "【注意】不要在 hook 里做网络请求,失败时必须静默。",
    "由于 jieba 首次加载要一秒多,我们在启动时预热分词器。",
]


def sentence(rng: random.Random, pool: list[str]) -> str:
    a, b = rng.sample(LIBS, 2)
    t, u = rng.sample(TOOLS, 2)
    return rng.choice(pool).format(
        a=a,
        b=b,
        t=t,
        u=u,
        p=rng.choice(PEOPLE),
        path=rng.choice(PATHS),
        lib_lower=rng.choice(LIBS).lower(),
        n=rng.randint(100, 9999),
    )


def make_text(rng: random.Random, size: int, lang: str) -> str:
    """Paragraphs of 3-6 sentences until `size` characters, with a bullet list now and then."""
    parts: list[str] = [f"## Session {rng.randint(1, 999)}\n"]
    length = 0
    while length < size:
        if lang == "zh":
            pool = ZH
        elif lang == "mixed":
            pool = ZH if rng.random() < 0.5 else EN
        else:
            pool = EN
        if rng.random() < 0.25:
            para = "\n".join(f"- {sentence(rng, pool)}" for _ in range(rng.randint(2, 4)))
        else:
            para = " ".join(sentence(rng, pool) for _ in range(rng.randint(3, 6)))
        parts.append(para)
        length += len(para) + 2
    return "\n\n".join(parts)


def corpus(n: int, seed: int = 11) -> list[tuple[str, str, str]]:
    """(size bucket, language, text), about a third each of 0.5, 1 and 2-5 KB, plus a few 20 KB."""
    rng = random.Random(seed)
    buckets = [("0.5KB", 500), ("1KB", 1000), ("2KB", 2000), ("5KB", 5000), ("20KB", 20000)]
    weights = [0.3, 0.3, 0.2, 0.12, 0.08]
    texts = []
    for _ in range(n):
        label, size = rng.choices(buckets, weights)[0]
        lang = rng.choices(["en", "zh", "mixed"], [0.6, 0.2, 0.2])[0]
        texts.append((label, lang, make_text(rng, size, lang)))
    return texts


def known_entities(n: int = 300) -> list[KnownEntity]:
    """A graph's worth of entities: the tools above plus project and person names."""
    known = [
        KnownEntity(id=f"entity:tool:{t}", name=t, type=EntityType.TOOL)
        for t in ("PostgreSQL", "SQLite", "Kuzu")
    ]
    known.append(
        KnownEntity(
            id="entity:project:memoryd", name="memoryd", type="project", aliases=["记忆引擎"]
        )
    )
    for i in range(n - len(known)):
        known.append(
            KnownEntity(
                id=f"entity:project:service-{i:03d}", name=f"service-{i:03d}", type="project"
            )
        )
    return known


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def quality(json_path: Path | None, show_errors: bool) -> int:
    """Precision and recall on the labelled set; exit 1 when a target is missed."""
    extractor = Extractor()
    items = load_items()
    scores = score(extractor, items)
    real = {split: score(extractor, load_real_items((split,)))["all"] for split in SPLITS}
    real["real"] = score(extractor, load_real_items())["all"]
    header = (
        f"{'set':<10}{'items':>6}{'gold':>6}{'found':>7}{'right':>7}{'precision':>11}{'recall':>8}"
    )
    print(header)
    print("-" * len(header))
    counts = {key: sum(1 for i in items if i.lang == key) for key in ("en", "zh")}
    counts["all"] = len(items)
    counts.update({split: len(load_real_items((split,))) for split in SPLITS})
    counts["real"] = len(load_real_items())
    rows = [(f"old {key}", counts[key], scores[key]) for key in ("en", "zh", "all")]
    rows += [(f"real {key}", counts[key], real[key]) for key in (*SPLITS, "real")]
    for label, n, s in rows:
        label = label.replace("real real", "real all")
        print(
            f"{label:<10}{n:>6}{s.gold:>6}{s.predicted:>7}{s.true_positives:>7}"
            f"{s.precision:>11.3f}{s.recall:>8.3f}"
        )
    overall = scores["all"]
    print(
        f"\ntargets: old precision >= {PRECISION_TARGET}, recall >= {RECALL_TARGET};"
        f" real precision >= {REAL_PRECISION_TARGET}"
    )
    if show_errors:
        for label, s in (("old", overall), ("real tune", real["tune"])):
            print(f"\n{label}: false entities:")
            for kind, name, text in s.false:
                print(f"  {kind}:{name}  <- {text[:90]!r}")
            print(f"\n{label}: missed entities:")
            for kind, name, text in s.misses:
                print(f"  {kind}:{name}  <- {text[:90]!r}")
        print("\n(held-out errors are not printed: they stay unread while tuning)")
    if json_path is not None:
        report = {
            "items": len(items),
            "targets": {
                "precision": PRECISION_TARGET,
                "recall": RECALL_TARGET,
                "real_precision": REAL_PRECISION_TARGET,
            },
            "scores": {key: scores[key].as_json() for key in ("en", "zh", "all")},
            "real": {key: real[key].as_json() for key in (*SPLITS, "real")},
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {json_path}")
    met = overall.precision >= PRECISION_TARGET and overall.recall >= RECALL_TARGET
    return 0 if met and real["real"].precision >= REAL_PRECISION_TARGET else 1


def enrichment_round(n: int) -> int:
    """The enrichment worker's steps per session memory, as the daemon runs them (no LLM):
    `prepare_enrichment` (the spaCy rules, the known entities, DURA's input; `extract` alone
    beside it) and `apply_enrichment` (the writes and the rules' supersede judging), CPU ms.
    A home of 2,000 bench memories, then `n` sessions queued by `record_many`."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import memoryd
    from _corpus import drafts
    from memoryd.models import MemoryType

    os.environ.setdefault("MEMORYD_CONFIG", os.devnull)
    with tempfile.TemporaryDirectory(prefix="memoryd-enrich-") as tmp:
        root = Path(tmp)
        with memoryd.open(root / "home", extraction={"enabled": True}) as svc:
            svc.record_many(drafts(2000, root / "projects"))
            notes = drafts(n + 5, root / "projects", seed=13, start_at=2000)
            for draft in notes:
                draft.type = MemoryType.SESSION
            svc.record_many(notes)
            due = svc.enrichment_due(n + 5)
            assert svc.extractor is not None
            extract = svc.extractor.extract
            spent: dict[str, list[float]] = {"extract": [], "prepare": [], "apply": []}

            def timed(text: str, **kwargs: object) -> object:
                started = time.process_time()
                try:
                    return extract(text, **kwargs)  # type: ignore[arg-type]
                finally:
                    spent["extract"].append(time.process_time() - started)

            svc.extractor.extract = timed  # type: ignore[method-assign]
            for i, slug in enumerate(due):
                started = time.process_time()
                job = svc.prepare_enrichment(slug)
                prepared = time.process_time()
                if job is not None:
                    svc.apply_enrichment(job, None)
                if i >= 5:  # the first few build the pipelines and caches
                    spent["prepare"].append(prepared - started)
                    spent["apply"].append(time.process_time() - prepared)
            spent["extract"] = spent["extract"][5:]
    report = {
        step: {
            "median_cpu_ms": round(statistics.median(values) * 1000, 2),
            "mean_cpu_ms": round(statistics.mean(values) * 1000, 2),
        }
        for step, values in spent.items()
        if values
    }
    print(json.dumps({"sessions": len(spent["prepare"]), "steps": report}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--json", nargs="?", const=True, default=None)
    parser.add_argument("--quality", action="store_true", help="score the labelled set")
    parser.add_argument("--show-errors", action="store_true", help="with --quality")
    parser.add_argument(
        "--enrichment",
        type=int,
        metavar="N",
        help="CPU per session of the enrichment worker's steps, in process, over N sessions",
    )
    args = parser.parse_args(argv)
    if args.enrichment:
        return enrichment_round(args.enrichment)
    if args.quality:
        target = None if args.json is None else DEFAULT_QUALITY_JSON
        if isinstance(args.json, str):
            target = Path(args.json)
        return quality(target, args.show_errors)
    if args.json is True:
        args.json = DEFAULT_JSON
    elif isinstance(args.json, str):
        args.json = Path(args.json)

    texts = corpus(args.texts)
    known = known_entities()

    t0 = time.perf_counter()
    extractor = Extractor()
    extractor.warm_up()
    warm_up_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    extractor.extract("Kuzu.", known=known)
    extractor.extract("记忆引擎。", known=known)
    known_build_ms = (time.perf_counter() - t0) * 1000

    rows: dict[str, list[tuple[float, float, float, int, int]]] = {}
    for label, lang, text in texts:
        kb = len(text.encode("utf-8")) / 1024
        wall0, cpu0 = time.perf_counter(), time.process_time()
        result = extractor.extract(text, known=known)
        wall = (time.perf_counter() - wall0) * 1000
        cpu = (time.process_time() - cpu0) * 1000
        for key in (label, f"lang:{lang}", "all"):
            rows.setdefault(key, []).append(
                (wall / kb, cpu / kb, wall, len(result.entities), len(result.relations))
            )

    order = ["0.5KB", "1KB", "2KB", "5KB", "20KB", "lang:en", "lang:zh", "lang:mixed", "all"]
    summary: dict[str, dict[str, float]] = {}
    header = (
        f"{'texts':<11}{'n':>4}{'ms/KB p50':>11}{'ms/KB p95':>11}{'cpu ms/KB':>11}"
        f"{'ms/text p50':>13}{'entities':>10}{'relations':>11}"
    )
    print(header)
    print("-" * len(header))
    for key in order:
        if key not in rows:
            continue
        data = rows[key]
        per_kb = [r[0] for r in data]
        cpu_kb = [r[1] for r in data]
        per_text = [r[2] for r in data]
        summary[key] = {
            "n": len(data),
            "ms_per_kb_p50": round(pct(per_kb, 0.5), 2),
            "ms_per_kb_p95": round(pct(per_kb, 0.95), 2),
            "cpu_ms_per_kb_mean": round(statistics.fmean(cpu_kb), 2),
            "ms_per_text_p50": round(pct(per_text, 0.5), 2),
            "ms_per_text_max": round(max(per_text), 2),
            "entities_mean": round(statistics.fmean(r[3] for r in data), 1),
            "relations_mean": round(statistics.fmean(r[4] for r in data), 1),
        }
        s = summary[key]
        print(
            f"{key:<11}{len(data):>4}{s['ms_per_kb_p50']:>11.2f}{s['ms_per_kb_p95']:>11.2f}"
            f"{s['cpu_ms_per_kb_mean']:>11.2f}{s['ms_per_text_p50']:>13.2f}"
            f"{s['entities_mean']:>10.1f}{s['relations_mean']:>11.1f}"
        )
    print(f"\nwarm-up (pipelines + lexicon rulers, en and zh): {warm_up_s:.2f} s")
    print(f"first call with 300 known entities (ruler build, en + zh): {known_build_ms:.0f} ms")

    if args.json is not None:
        report = {
            "texts": len(texts),
            "known_entities": len(known),
            "warm_up_seconds": round(warm_up_s, 2),
            "known_ruler_build_ms": round(known_build_ms, 1),
            "by_bucket": summary,
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "python": platform.python_version(),
            "machine": platform.machine(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
