"""Recall over real decision records: memoryd against plain BM25, per repository.

    python bench/records.py [--repos owner/name,...] [--stages-off entity,graph] [--ablation]
                            [--ignore-supersedes] [--vectors off|auto|on] [--json OUT]

The records of tests/data/supersede/records/ (see SOURCES.md) are imported as a team would:
each repository's records as `decision` memories in one `record_many` call, one scope per
repository, in one fresh home (`memoryd.open` in process, no LLM: the offline rules, so the
supersede judging those imports run writes the edges recall then follows). The questions of
each repository's `questions.yaml` are asked in its scope, in a developer's words: what was
decided, why, what holds now (`current`: the record in force is the answer, the one the
records say it replaced is `stale`), and some no record answers (`none`).

Metrics as `bench/devmem.py` computes them (its helpers): hit@1, hit@5, MRR over the
answerable questions, overall and per kind; "current above stale" on the replacement
questions (the record in force ranks above the replaced one, which may be absent); abstention
ROC AUC of the top hit's score (answerable against `none`). The same for a stdlib Okapi BM25
over each repository's records. `--ablation` adds a table with each recall stage off (and text
alone), `--stages-off` runs the main pass without the named stages (`RecallConfig.stages`),
`--ignore-supersedes` undoes every automatic supersede the import wrote before asking (as a
person would with `memoryd supersede undo`). Targets: memoryd MRR ≥ BM25 MRR + 0.03 and
current above stale ≥ 0.9.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import _records
from _corpus import open_in_process
from devmem import K, Okapi, question_metrics, roc_auc
from memoryd.recall import STAGES
from memoryd.service import MemoryService

DEFAULT_JSON = Path(__file__).parent / "results" / "records.json"
MRR_MARGIN = 0.03
CURRENT_TARGET = 0.9
KEYS = ["hit@1", "hit@5", "mrr"]

Ranker = Any
"""(repository, question) → [(file, score)] best first."""


def bm25_ranker(repos: list[_records.Repo]) -> Ranker:
    indexes = {r.name: Okapi({f: r.text(f) for f in r.files}) for r in repos}
    return lambda repo, question: indexes[repo.name].rank(question)


def memoryd_ranker(
    svc: MemoryService,
    scopes: dict[str, Path],
    files: dict[str, dict[str, str]],
    latencies: list[float] | None = None,
) -> Ranker:
    def rank(repo: _records.Repo, question: str) -> list[tuple[str, float]]:
        t = time.perf_counter()
        result = svc.recall(question, scope=scopes[repo.name], k=K, track=False)
        if latencies is not None:
            latencies.append((time.perf_counter() - t) * 1000)
        slug_to_file = files[repo.name]
        return [(slug_to_file[h.slug], h.score) for h in result.hits if h.slug in slug_to_file]

    return rank


def above(ranked: list[str], current: str, stale: str) -> float:
    """Whether the record in force ranks above the replaced one (absent counts as below)."""
    if current not in ranked:
        return 0.0
    return float(stale not in ranked or ranked.index(current) < ranked.index(stale))


def evaluate(rank: Ranker, repos: list[_records.Repo]) -> dict[str, Any]:
    rows: list[tuple[str, str, dict[str, float]]] = []
    current: list[float] = []
    current_by_q: dict[str, float] = {}
    answerable_top: list[float] = []
    none_top: list[float] = []
    per_question: dict[str, float] = {}
    for repo in repos:
        for q in repo.questions:
            ranked = rank(repo, q["question"])
            top = ranked[0][1] if ranked else 0.0
            if q["kind"] == "none":
                none_top.append(top)
                continue
            answerable_top.append(top)
            ids = [f for f, _ in ranked]
            m = question_metrics(ids, q["answer"])
            rows.append((repo.name, q["kind"], m))
            per_question[q["id"]] = m["mrr"]
            if q["kind"] == "current":
                current_by_q[q["id"]] = above(ids, q["answer"][0], q["stale"])
                current.append(current_by_q[q["id"]])

    def mean(sub: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(statistics.fmean(m[k] for m in sub), 3) for k in KEYS}

    return {
        "overall": mean([m for _, _, m in rows]),
        "answerable": len(rows),
        "per_kind": {
            kind: {
                **mean([m for _, k, m in rows if k == kind]),
                "n": sum(k == kind for _, k, _ in rows),
            }
            for kind in sorted({k for _, k, _ in rows})
        },
        "per_repository": {
            name: {
                **mean([m for r, _, m in rows if r == name]),
                "n": sum(r == name for r, _, _ in rows),
            }
            for name in dict.fromkeys(r for r, _, _ in rows)
        },
        "current_above_stale": round(statistics.fmean(current), 3) if current else None,
        "current_n": len(current),
        "current_per_question": current_by_q,
        "abstention_auc": round(roc_auc(answerable_top, none_top), 3),
        "abstention_n": len(none_top),
        "per_question_mrr": per_question,
    }


def summary(report: dict[str, Any]) -> dict[str, Any]:
    return {
        **report["overall"],
        "current_above_stale": report["current_above_stale"],
        "abstention_auc": report["abstention_auc"],
    }


def undo_supersedes(svc: MemoryService, files: dict[str, dict[str, str]]) -> int:
    """Undo every automatic supersede between the imported records; how many were undone."""
    slugs = {s for by_repo in files.values() for s in by_repo}
    rows = svc.graph.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) WHERE r.status = 'active'"
        " AND r.decided_by = 'auto' RETURN n.slug, o.slug",
        limit=1_000_000,
    ).rows
    undone = 0
    for newer, older in rows:
        if newer in slugs and older in slugs:
            svc.decide_supersede(newer, older, "undo", by="user")
            undone += 1
    return undone


def run(args: argparse.Namespace, repos: list[_records.Repo]) -> dict[str, Any]:
    results: dict[str, Any] = {"bm25": evaluate(bm25_ranker(repos), repos)}
    with tempfile.TemporaryDirectory(prefix="memoryd-records-") as tmp:
        root = Path(tmp)
        svc = open_in_process(root / "home", recall={"vectors": args.vectors})
        try:
            scopes = {r.name: root / "projects" / r.path.name for r in repos}
            files: dict[str, dict[str, str]] = {}
            t = time.perf_counter()
            for repo in repos:
                print(f"importing {repo.name} ({len(repo.files)} records)", file=sys.stderr)
                files[repo.name] = _records.import_repo(svc, repo, scopes[repo.name])
            load_s = round(time.perf_counter() - t, 2)
            edges = sum(len(_records.supersede_edges(svc, f)) for f in files.values())
            undone = undo_supersedes(svc, files) if args.ignore_supersedes else 0
            if svc.vectors is not None:
                svc.embed_pending(limit=1_000_000)
            base = svc.recall_config
            off = {s.strip() for s in (args.stages_off or "").split(",") if s.strip()}
            if off - STAGES:
                raise SystemExit(f"unknown stage(s) {sorted(off - STAGES)}: use {sorted(STAGES)}")
            main_config = replace(base, stages=base.stages - off)
            svc.recall_config = main_config
            latencies: list[float] = []
            report = evaluate(memoryd_ranker(svc, scopes, files, latencies), repos)
            report.update(
                load_s=load_s,
                supersede_edges=edges,
                supersedes_undone=undone,
                stages=sorted(main_config.stages),
                recall_p50_ms=round(statistics.median(latencies), 2),
            )
            if args.ablation:
                report["ablation"] = {}
                for stage in sorted(main_config.stages):
                    svc.recall_config = replace(main_config, stages=main_config.stages - {stage})
                    one = evaluate(memoryd_ranker(svc, scopes, files), repos)
                    report["ablation"][stage] = summary(one)
                svc.recall_config = replace(main_config, stages=frozenset({"text"}))
                report["ablation"]["text alone"] = summary(
                    evaluate(memoryd_ranker(svc, scopes, files), repos)
                )
                svc.recall_config = main_config
            results["memoryd"] = report
        finally:
            svc.close()
    ours, theirs = results["memoryd"]["per_question_mrr"], results["bm25"]["per_question_mrr"]
    results["versus_bm25"] = {
        "better": sorted(q for q in ours if ours[q] > theirs[q]),
        "worse": sorted(q for q in ours if ours[q] < theirs[q]),
    }
    return results


def _fmt(value: object) -> str:
    return "-" if value is None else str(value)


def print_results(results: dict[str, Any]) -> list[tuple[str, bool]]:
    print(f"{'system':<12}" + "".join(f"{k:>8}" for k in KEYS) + f"{'current':>9}{'AUC':>7}")
    for name in ("bm25", "memoryd"):
        r = results[name]
        print(
            f"{name:<12}"
            + "".join(f"{r['overall'][k]:>8}" for k in KEYS)
            + f"{_fmt(r['current_above_stale']):>9}{_fmt(r['abstention_auc']):>7}"
        )
    m, b = results["memoryd"], results["bm25"]
    print(
        f"  {m['answerable']} answerable questions, {m['current_n']} about what is current,"
        f" {m['abstention_n']} unanswerable; {m['supersede_edges']} supersede edges written"
        f" by the import ({m['supersedes_undone']} undone); stages: {', '.join(m['stages'])}"
    )
    print(f"  {'per kind':<28}" + "".join(f"{k:>8}" for k in KEYS) + "   (memoryd | bm25 mrr)")
    for kind, row in m["per_kind"].items():
        print(
            f"  {kind + ' (' + str(row['n']) + ')':<28}"
            + "".join(f"{row[k]:>8}" for k in KEYS)
            + f"   | {b['per_kind'][kind]['mrr']}"
        )
    for name, row in m["per_repository"].items():
        print(
            f"  {name[:26] + ' (' + str(row['n']) + ')':<28}"
            + "".join(f"{row[k]:>8}" for k in KEYS)
            + f"   | {b['per_repository'][name]['mrr']}"
        )
    if "ablation" in m:
        print(
            f"  ablation: {'stage off':<16}"
            + "".join(f"{k:>8}" for k in KEYS)
            + f"{'current':>9}{'AUC':>7}"
        )
        for stage, row in m["ablation"].items():
            print(
                f"  {'':<10}{stage:<16}"
                + "".join(f"{row[k]:>8}" for k in KEYS)
                + f"{_fmt(row['current_above_stale']):>9}{_fmt(row['abstention_auc']):>7}"
            )
    v = results["versus_bm25"]
    print(f"  memoryd vs BM25 per question: better {len(v['better'])}, worse {len(v['worse'])}")
    stale_lost = [q for q, ok in m["current_per_question"].items() if not ok]
    if stale_lost:
        print(f"  current below stale: {', '.join(stale_lost)}")
    target = b["overall"]["mrr"] + MRR_MARGIN
    current = m["current_above_stale"] or 0.0
    return [
        (
            f"memoryd MRR {m['overall']['mrr']} >= BM25 {b['overall']['mrr']} + {MRR_MARGIN}",
            m["overall"]["mrr"] >= target,
        ),
        (f"current above stale {current} >= {CURRENT_TARGET}", current >= CURRENT_TARGET),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=Path, default=_records.RECORDS)
    parser.add_argument("--repos", default=None, help="owner/name,… (default: every repository)")
    parser.add_argument(
        "--stages-off", default="", help=f"recall stages to switch off: {', '.join(sorted(STAGES))}"
    )
    parser.add_argument("--ablation", action="store_true", help="each stage off in turn")
    parser.add_argument(
        "--ignore-supersedes",
        action="store_true",
        help="undo every automatic supersede the import wrote before asking",
    )
    parser.add_argument(
        "--vectors",
        choices=("auto", "on", "off"),
        default="off",
        help="recall.vectors (default off, as the default install)",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    only = set(args.repos.split(",")) if args.repos else None
    repos = [r for r in _records.load(args.records, only) if r.questions]
    if not repos:
        raise SystemExit(f"no questions.yaml under {args.records}")
    results = run(args, repos)
    ok = True
    for text, met in print_results(results):
        print(f"  target {'met' if met else 'NOT met'}: {text}")
        ok = ok and met
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")
    print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
