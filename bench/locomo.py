"""LoCoMo recall benchmark: one memory per dialog turn, recall top-k within the conversation.

    python bench/locomo.py [--data ../shared/bench/locomo/locomo10.json] [--json OUT]
                           [--vectors auto|on|off]

Reads the data from where it lies (never copied into the repo); skips with a message if absent.
Turn-level hit@5, hit@10, all@10 and NDCG@10 over categories 1–4, overall and per category,
with and without the audit's evidence corrections; ingest ms per turn; recall p50/p95; an
ablation table (each recall stage off, each optional one on, the text stage alone).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from _corpus import ablation_table, keep_static_table, open_in_process
from devmem import Okapi  # the same stdlib BM25 as the DevMemBench baseline
from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall import RecallConfig
from memoryd.service import MemoryService

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo" / "locomo10.json"
CATEGORIES = {4: "single-hop", 1: "multi-hop", 2: "temporal", 3: "open-domain"}
DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def normalise_evidence(items: list[str]) -> list[str]:
    """Fix LoCoMo's malformed ids ("D8:6; D9:17", "D:11:26", "D30:05")."""
    out: list[str] = []
    for item in items:
        for session, turn in DIA_ID.findall(str(item)):
            out.append(f"D{int(session)}:{int(turn)}")
    return list(dict.fromkeys(out))


def load_corrections(path: Path, samples: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The audit's corrected evidence by question id, `locomo_<conversation>_qa<n>` with n
    counted from 0; each entry's question is checked against the data it corrects."""
    corrections: dict[str, list[str]] = {}
    for entry in json.loads(path.read_text()):
        if not entry.get("correct_evidence"):
            continue
        qid = entry["question_id"]
        conversation, number = (int(n) for n in re.findall(r"\d+", qid)[-2:])
        asked = samples[conversation]["qa"][number]["question"]
        if " ".join(asked.lower().split()) != " ".join(entry["question"].lower().split()):
            raise SystemExit(f"errata {qid} names another question than the data: {asked!r}")
        corrections[qid] = normalise_evidence(entry["correct_evidence"])
    return corrections


def session_date(text: str) -> datetime:
    """LoCoMo dates look like '1:56 pm on 8 May, 2023'."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def metrics(ranked: list[str], gold: list[str]) -> dict[str, float]:
    gold_set = set(gold)
    top5, top10 = ranked[:5], ranked[:10]
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(top10) if d in gold_set)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold_set), 10)))
    return {
        "hit@5": float(any(d in gold_set for d in top5)),
        "hit@10": float(any(d in gold_set for d in top10)),
        "all@10": float(gold_set <= set(top10)),
        "ndcg@10": dcg / ideal if ideal else 0.0,
    }


def aggregate(rows: list[tuple[int, dict[str, float]]]) -> dict[str, object]:
    keys = ["hit@5", "hit@10", "all@10", "ndcg@10"]
    overall = {k: round(statistics.fmean(m[k] for _, m in rows), 3) for k in keys}
    per = {}
    for cat, name in CATEGORIES.items():
        sub = [m for c, m in rows if c == cat]
        if sub:
            per[name] = {k: round(statistics.fmean(m[k] for m in sub), 3) for k in keys}
            per[name]["n"] = len(sub)
    return {"overall": overall, "per_category": per, "questions": len(rows)}


def rank_questions(
    svc: MemoryService,
    sample: dict[str, Any],
    index: int,
    project: Path,
    slug_to_dia: dict[str, str],
    corrections: dict[str, list[str]],
) -> list[tuple[int, dict[str, float]]]:
    """One conversation's questions ranked again (errata applied), for the ablation."""
    rows = []
    for q_index, qa in enumerate(sample["qa"]):
        cat = qa.get("category")
        if cat not in CATEGORIES:
            continue
        gold = normalise_evidence(qa.get("evidence", []))
        fixed = corrections.get(f"locomo_{index}_qa{q_index}", gold)
        if not fixed:
            continue
        result = svc.recall(qa["question"], scope=project, k=10, track=False)
        ranked = [slug_to_dia[h.slug] for h in result.hits if h.slug in slug_to_dia]
        rows.append((cat, metrics(ranked, fixed)))
    return rows


def ablation_summary(rows: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    multi = [m for c, m in rows if c == 1]
    return {
        "hit@5": round(statistics.fmean(m["hit@5"] for _, m in rows), 3),
        "all@10": round(statistics.fmean(m["all@10"] for _, m in rows), 3),
        "multi-hop all@10": round(statistics.fmean(m["all@10"] for m in multi), 3)
        if multi
        else 0.0,
    }


def variants_of(base: RecallConfig, ablation: str) -> dict[str, RecallConfig]:
    """The configurations the ablation ranks again (`_corpus.ablation_table`; none when "")."""
    if not ablation:
        return {}
    table = ablation_table(base, each=ablation == "full")
    return {name: config for name, config in table.items() if name != "default"}


def changed(
    base: list[tuple[int, dict[str, float]]], other: list[tuple[int, dict[str, float]]]
) -> int:
    """How many questions' metrics differ between two runs over the same questions."""
    return sum(a != b for (_, a), (_, b) in zip(base, other, strict=True))


def warm_up(svc: MemoryService) -> None:
    """Load the vector stage's model now (once per process), not in the first recall."""
    if svc.vectors is not None:
        svc.vectors.embedder.encode(["warm up"])
        keep_static_table(svc.home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--errata", type=Path, default=None)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "locomo.json"
    )
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--no-extraction", action="store_true")
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument(
        "--ablation",
        choices=("full", "table"),
        default="full",
        help="table: the default, graph toggled, entity+graph off, text alone (issue 27);"
        " full: also each stage off and each optional stage on",
    )
    parser.add_argument(
        "--vectors",
        choices=("auto", "on", "off"),
        default="off",
        help="recall.vectors (default off: the default install has no vector stage; on needs"
        " `pip install 'memoryd[vectors]'`)",
    )
    parser.add_argument(
        "--vector-model",
        choices=("minilm", "static"),
        default="minilm",
        help="recall.vector_model: the static table distilled from MiniLM, or MiniLM itself",
    )
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"LoCoMo data not found at {args.data}: skipping (pass --data PATH)")
        return
    errata_path = args.errata or args.data.with_name("locomo-audit-errors.json")
    all_samples = json.loads(args.data.read_text())
    corrections = load_corrections(errata_path, all_samples) if errata_path.is_file() else {}
    samples = all_samples[: args.conversations]

    with tempfile.TemporaryDirectory(prefix="memoryd-locomo-") as tmp:
        root = Path(tmp)
        svc = open_in_process(
            root / "home",
            extraction={"enabled": not args.no_extraction},
            recall={"vectors": args.vectors, "vector_model": args.vector_model},
        )
        ingest_s = 0.0
        turns = 0
        embed_s = 0.0
        warm_up(svc)
        latencies: list[float] = []
        cpu_ms: list[float] = []
        raw_rows: list[tuple[int, dict[str, float]]] = []
        fixed_rows: list[tuple[int, dict[str, float]]] = []
        bm25_rows: list[tuple[int, dict[str, float]]] = []
        base = svc.recall_config
        variants = variants_of(base, "" if args.no_ablation else args.ablation)
        ablation_rows: dict[str, list[tuple[int, dict[str, float]]]] = {v: [] for v in variants}
        try:
            for index, sample in enumerate(samples):
                conv = sample["conversation"]
                project = root / f"conversation-{index}"
                project.mkdir()
                drafts: list[MemoryDraft] = []
                ids: list[str] = []
                n = 1
                while f"session_{n}" in conv:
                    when = session_date(conv[f"session_{n}_date_time"])
                    for i, turn in enumerate(conv[f"session_{n}"]):
                        text = turn["text"]
                        if turn.get("blip_caption"):
                            text += f" [shares a photo: {turn['blip_caption']}]"
                        drafts.append(
                            MemoryDraft(
                                type=MemoryType.SESSION,
                                title=f"{turn['speaker']} ({turn['dia_id']})",
                                body=f"{turn['speaker']}: {text}",
                                scope_path=project,
                                created_at=when + timedelta(seconds=i),
                                source="locomo",
                                allow_duplicate=True,
                            )
                        )
                        ids.append(turn["dia_id"])
                    n += 1
                t = time.perf_counter()
                written = svc.record_many(drafts)
                ingest_s += time.perf_counter() - t
                t = time.perf_counter()
                svc.embed_pending(limit=1_000_000)  # the daemon's worker, in the background
                embed_s += time.perf_counter() - t
                turns += len(drafts)
                slug_to_dia = {m.slug: d for m, d in zip(written, ids, strict=True)}
                okapi = Okapi({d: draft.body for draft, d in zip(drafts, ids, strict=True)})
                for q_index, qa in enumerate(sample["qa"]):
                    cat = qa.get("category")
                    if cat not in CATEGORIES:
                        continue
                    # The audit numbers questions from 0 within each conversation.
                    qid = f"locomo_{index}_qa{q_index}"
                    t, c = time.perf_counter(), time.process_time()
                    result = svc.recall(qa["question"], scope=project, k=10, track=False)
                    latencies.append((time.perf_counter() - t) * 1000)
                    cpu_ms.append((time.process_time() - c) * 1000)
                    ranked = [slug_to_dia[h.slug] for h in result.hits if h.slug in slug_to_dia]
                    gold = normalise_evidence(qa.get("evidence", []))
                    if gold:
                        raw_rows.append((cat, metrics(ranked, gold)))
                    fixed = corrections.get(qid, gold)
                    if fixed:
                        fixed_rows.append((cat, metrics(ranked, fixed)))
                        baseline = [d for d, _ in okapi.rank(qa["question"])[:10]]
                        bm25_rows.append((cat, metrics(baseline, fixed)))
                for name, config in variants.items():
                    svc.recall_config = config
                    ablation_rows[name] += rank_questions(
                        svc, sample, index, project, slug_to_dia, corrections
                    )
                    svc.recall_config = base
                print(f"conversation {index}: {len(drafts)} turns", file=sys.stderr)
        finally:
            svc.close()

    ordered = sorted(latencies)
    cpu_ordered = sorted(cpu_ms)
    report = {
        "errata_applied": aggregate(fixed_rows),
        "as_published": aggregate(raw_rows),
        "turns": turns,
        "extraction": not args.no_extraction,
        "ingest_ms_per_turn": round(1000 * ingest_s / max(turns, 1), 2),
        "vectors": args.vectors,
        "embed_ms_per_turn": round(1000 * embed_s / max(turns, 1), 2),
        "recall_p50_ms": round(statistics.median(ordered), 2),
        "recall_p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        # CPU time of the process: what a recall costs whatever else shares the machine.
        "recall_cpu_p50_ms": round(statistics.median(cpu_ordered), 2),
        "recall_cpu_p95_ms": round(cpu_ordered[int(0.95 * (len(cpu_ordered) - 1))], 2),
    }
    report["ablation"] = {
        name: {**ablation_summary(rows), "changed": changed(fixed_rows, rows)}
        for name, rows in ablation_rows.items()
    }
    report["bm25_baseline"] = ablation_summary(bm25_rows)
    report["overall"] = report["errata_applied"]["overall"]  # type: ignore[index]
    report["per_category"] = report["errata_applied"]["per_category"]  # type: ignore[index]
    print(
        f"{'set':<14}{'category':<13}{'n':>5}{'hit@5':>8}{'hit@10':>8}{'all@10':>8}{'ndcg@10':>9}"
    )
    for label in ("errata_applied", "as_published"):
        block = report[label]
        o = block["overall"]  # type: ignore[index]
        print(
            f"{label:<14}{'overall':<13}{block['questions']:>5}{o['hit@5']:>8}{o['hit@10']:>8}"  # type: ignore[index]
            f"{o['all@10']:>8}{o['ndcg@10']:>9}"
        )
        for name, m in block["per_category"].items():  # type: ignore[index]
            print(
                f"{'':<14}{name:<13}{m['n']:>5}{m['hit@5']:>8}{m['hit@10']:>8}{m['all@10']:>8}"
                f"{m['ndcg@10']:>9}"
            )
    print(
        f"ingest {report['ingest_ms_per_turn']} ms/turn,"
        f" embed {report['embed_ms_per_turn']} ms/turn;"
        f" recall p50 {report['recall_p50_ms']} ms, p95 {report['recall_p95_ms']} ms"
        f" (cpu p50 {report['recall_cpu_p50_ms']} ms, p95 {report['recall_cpu_p95_ms']} ms)"
    )
    b = report["bm25_baseline"]
    print(
        f"plain BM25 (stdlib Okapi over turn bodies, errata applied): hit@5 {b['hit@5']}"  # type: ignore[index]
        f" all@10 {b['all@10']} multi-hop all@10 {b['multi-hop all@10']}"  # type: ignore[index]
    )
    if ablation_rows:
        print(
            f"ablation (errata applied): {'stages':<18}{'hit@5':>8}{'all@10':>8}{'mh all@10':>10}"
        )
        for name, m in report["ablation"].items():  # type: ignore[union-attr]
            print(
                f"{'':<27}{name:<18}{m['hit@5']:>8}{m['all@10']:>8}{m['multi-hop all@10']:>10}"
                f"  {m['changed']} questions change"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
