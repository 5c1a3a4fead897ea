"""Supersede judging on real decision records, then on the short labelled pairs.

    python bench/supersede.py [--repos owner/name,...] [--show-errors] [--no-pairs]
                              [--json [bench/results/supersede.json]]

Part 1, the real-record set (tests/data/supersede/records/, see its SOURCES.md): per
repository, every record is recorded as a `decision` memory in one `record_many` call into a
fresh temp home (`memoryd.open`, in process, no LLM configured: the offline rules), exactly as
a team importing its ADR folder would. Then every SUPERSEDES edge between the records is read
from the graph and compared with what the records themselves state (`truth.yaml`) over ALL
pairs of the repository: an edge is right only as stated (newer → older); an edge on a pair the
records relate by `amends` only, or in the wrong direction, is false. Tiers as stored: an
automatic edge is `status active` decided by `auto` (confidence ≥ `Tiers.auto`), a candidate
is `status candidate` (between `Tiers.candidate` and `Tiers.auto`). Reported per repository
and overall: automatic precision and recall, false automatic edges per 50 records, candidate
precision, records superseded, the most older records one record superseded at once, and
which rules wrote the false edges. Targets: automatic precision ≥ 0.95 with at most one false
automatic edge per 50 records; candidate precision ≥ 0.5.

Part 2, `tests/data/supersede/pairs.yaml`: every short labelled pair judged by the rules
alone (`judge_by_rules`), the confusion table per tier. Targets at the automatic tier:
precision ≥ 0.95, recall ≥ 0.6. The `ho-*` pairs are reported apart as a held-out check.

Exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

import _records
from _corpus import open_in_process
from memoryd.governance.supersede import Tiers, judge_by_rules, outcome_counts, precision_recall

PAIRS = Path(__file__).resolve().parent.parent / "tests" / "data" / "supersede" / "pairs.yaml"
DEFAULT_JSON = Path(__file__).parent / "results" / "supersede.json"
PRECISION_TARGET = 0.95
RECALL_TARGET = 0.6
FALSE_PER_50_TARGET = 1.0
CANDIDATE_PRECISION_TARGET = 0.5


# -- part 1: the real records --------------------------------------------------------------------
def judge_repo(repo: _records.Repo) -> dict[str, Any]:
    """Import one repository into a fresh home and read back the edges the rules wrote."""
    with tempfile.TemporaryDirectory(prefix="memoryd-supersede-") as tmp:
        root = Path(tmp)
        svc = open_in_process(root / "home")
        try:
            started = time.perf_counter()
            slugs = _records.import_repo(svc, repo, root / "projects" / repo.path.name)
            took = time.perf_counter() - started
            edges = _records.supersede_edges(svc, slugs)
        finally:
            svc.close()
    return {"edges": edges, "import_s": round(took, 2)}


def score_repo(repo: _records.Repo, edges: list[dict[str, Any]]) -> dict[str, Any]:
    truth = {(e.newer, e.older) for e in repo.supersedes}
    amends = {(e.newer, e.older) for e in repo.amends}
    auto = [e for e in edges if e["status"] == "active" and e["decided_by"] == "auto"]
    candidates = [e for e in edges if e["status"] == "candidate"]

    def key(e: dict[str, Any]) -> tuple[str, str]:
        return (e["newer"], e["older"])

    auto_tp = sorted({key(e) for e in auto} & truth)
    auto_fp = [e for e in auto if key(e) not in truth]
    cand_tp = [e for e in candidates if key(e) in truth]
    cand_fp = [e for e in candidates if key(e) not in truth]
    either = {key(e) for e in auto + candidates} & truth
    per_newer = Counter(e["newer"] for e in auto)
    n = len(repo.files)
    return {
        "records": n,
        "pairs": n * (n - 1) // 2,
        "stated": len(truth),
        "stated_named": sum(e.named for e in repo.supersedes),
        "amends": len(amends),
        "auto": {
            "edges": len(auto),
            "tp": len(auto_tp),
            "fp": len(auto_fp),
            "fn": len(truth) - len(auto_tp),
            "precision": _ratio(len(auto_tp), len(auto)),
            "recall": _ratio(len(auto_tp), len(truth)),
            "false_per_50": round(50 * len(auto_fp) / n, 2),
            "on_amends": sum(key(e) in amends for e in auto_fp),
            "reversed": sum((e["older"], e["newer"]) in truth for e in auto_fp),
        },
        "candidate": {
            "edges": len(candidates),
            "tp": len(cand_tp),
            "fp": len(cand_fp),
            "precision": _ratio(len(cand_tp), len(candidates)),
        },
        "either_tier_recall": _ratio(len(either), len(truth)),
        "superseded_records": len({e["older"] for e in auto}),
        "stated_superseded": len({o for _, o in truth}),
        "most_at_once": max(per_newer.values(), default=0),
        "false_auto_by_rule": dict(Counter(e["judge"] for e in auto_fp).most_common()),
        "missed": sorted(f"{a} -> {b}" for a, b in truth - {key(e) for e in auto}),
        "false_auto": [
            {k: e[k] for k in ("newer", "older", "confidence", "judge", "reason")} for e in auto_fp
        ],
        "false_candidates": [
            {k: e[k] for k in ("newer", "older", "confidence", "judge", "reason")} for e in cand_fp
        ],
    }


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def total(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Overall: the counts summed over repositories, the ratios of the sums."""
    rs = list(reports.values())
    n = sum(r["records"] for r in rs)
    auto = {k: sum(r["auto"][k] for r in rs) for k in ("edges", "tp", "fp", "fn")}
    cand = {k: sum(r["candidate"][k] for r in rs) for k in ("edges", "tp", "fp")}
    stated = sum(r["stated"] for r in rs)
    rules: Counter[str] = Counter()
    for r in rs:
        rules.update(r["false_auto_by_rule"])
    return {
        "records": n,
        "pairs": sum(r["pairs"] for r in rs),
        "stated": stated,
        "auto": {
            **auto,
            "precision": _ratio(auto["tp"], auto["edges"]),
            "recall": _ratio(auto["tp"], stated),
            "false_per_50": round(50 * auto["fp"] / n, 2) if n else None,
            "on_amends": sum(r["auto"]["on_amends"] for r in rs),
            "reversed": sum(r["auto"]["reversed"] for r in rs),
        },
        "candidate": {**cand, "precision": _ratio(cand["tp"], cand["edges"])},
        "superseded_records": sum(r["superseded_records"] for r in rs),
        "stated_superseded": sum(r["stated_superseded"] for r in rs),
        "most_at_once": max((r["most_at_once"] for r in rs), default=0),
        "false_auto_by_rule": dict(rules.most_common()),
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_records(reports: dict[str, dict[str, Any]], overall: dict[str, Any]) -> str:
    head = (
        f"  {'repository':<42}{'recs':>5}{'stated':>7}{'auto':>6}{'tp':>4}{'fp':>5}"
        f"{'P':>7}{'R':>7}{'fp/50':>7}{'cand':>6}{'candP':>7}{'sup':>6}{'max':>5}"
    )
    lines = [
        f"real decision records ({overall['records']} records, {overall['pairs']} pairs)",
        head,
    ]
    for name, r in [*reports.items(), ("overall", overall)]:
        a, c = r["auto"], r["candidate"]
        lines.append(
            f"  {name:<42}{r['records']:>5}{r['stated']:>7}{a['edges']:>6}{a['tp']:>4}{a['fp']:>5}"
            f"{_fmt(a['precision']):>7}{_fmt(a['recall']):>7}{a['false_per_50']:>7}"
            f"{c['edges']:>6}{_fmt(c['precision']):>7}"
            f"{r['superseded_records']:>3}/{r['stated_superseded']:<2}{r['most_at_once']:>5}"
        )
    lines.append(
        "  (auto: active edges decided by auto; sup: records superseded / stated as superseded;"
        " max: most records one record superseded)"
    )
    if overall["false_auto_by_rule"]:
        lines.append(
            "  false automatic edges by rule: "
            + ", ".join(f"{k} {v}" for k, v in overall["false_auto_by_rule"].items())
        )
    return "\n".join(lines)


def records_targets(overall: dict[str, Any]) -> list[tuple[str, bool]]:
    a, c = overall["auto"], overall["candidate"]
    return [
        (
            f"automatic precision {_fmt(a['precision'])} >= {PRECISION_TARGET}",
            (a["precision"] if a["precision"] is not None else 1.0) >= PRECISION_TARGET,
        ),
        (
            f"false automatic edges per 50 records {a['false_per_50']} <= {FALSE_PER_50_TARGET}",
            a["false_per_50"] <= FALSE_PER_50_TARGET,
        ),
        (
            f"candidate precision {_fmt(c['precision'])} >= {CANDIDATE_PRECISION_TARGET}",
            (c["precision"] if c["precision"] is not None else 1.0) >= CANDIDATE_PRECISION_TARGET,
        ),
    ]


# -- part 2: the labelled pairs ------------------------------------------------------------------
def judge_all(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for pair in pairs:
        verdict = judge_by_rules(str(pair["newer"]), str(pair["older"]))
        out.append(
            {
                "id": pair["id"],
                "label": bool(pair["label"]),
                "kind": pair["kind"],
                "confidence": verdict.confidence if verdict else None,
                "judge": verdict.judge if verdict else None,
                "reason": verdict.reason if verdict else None,
            }
        )
    return out


def table(tiers: Tiers, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    counts = outcome_counts(tiers, [(r["label"], r["confidence"]) for r in rows])
    result: dict[str, dict[str, Any]] = {}
    for tier, c in counts.items():
        precision, recall = precision_recall(c)
        result[tier] = {**c, "precision": round(precision, 3), "recall": round(recall, 3)}
    return result


def render(name: str, result: dict[str, dict[str, Any]], n: int) -> str:
    lines = [
        f"{name} ({n} pairs)",
        f"  {'tier':<10} {'tp':>4} {'fp':>4} {'fn':>4} {'tn':>4} {'precision':>10} {'recall':>7}",
    ]
    for tier, r in result.items():
        lines.append(
            f"  {tier:<10} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} {r['tn']:>4}"
            f" {r['precision']:>10.3f} {r['recall']:>7.3f}"
        )
    return "\n".join(lines)


def run_pairs(path: Path, show_errors: bool) -> tuple[dict[str, Any], bool]:
    pairs = yaml.safe_load(path.read_text(encoding="utf-8"))
    tiers = Tiers()
    started = time.perf_counter()
    rows = judge_all(pairs)
    elapsed = time.perf_counter() - started
    groups = {
        "all": rows,
        "english": [r for r in rows if "zh-" not in r["id"]],
        "chinese": [r for r in rows if "zh-" in r["id"]],
        "hard negatives": [r for r in rows if r["kind"] == "hard-negative"],
        "held out (ho-*)": [r for r in rows if r["id"].startswith("ho-")],
    }
    report: dict[str, Any] = {
        "pairs": len(rows),
        "positives": sum(r["label"] for r in rows),
        "thresholds": {"auto": tiers.auto, "candidate": tiers.candidate},
        "ms_per_pair": round(1000 * elapsed / max(1, len(rows)), 3),
        "groups": {},
    }
    for name, group in groups.items():
        result = table(tiers, group)
        report["groups"][name] = result
        print(render(name, result, len(group)))
    tier_of = {
        r["id"]: tiers.tier(r["confidence"]) if r["confidence"] is not None else "none"
        for r in rows
    }
    errors = [r for r in rows if (tier_of[r["id"]] == "auto") != r["label"]]
    report["errors"] = [{**r, "tier": tier_of[r["id"]]} for r in errors]
    print(f"{report['ms_per_pair']} ms per pair; misjudged at the automatic tier: {len(errors)}")
    if show_errors:
        for r in errors:
            print(
                f"  {r['id']}: label {r['label']}, {tier_of[r['id']]} ({r['reason'] or 'no rule'})"
            )
    auto = report["groups"]["all"]["auto"]
    ok = auto["precision"] >= PRECISION_TARGET and auto["recall"] >= RECALL_TARGET
    return report, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=Path, default=_records.RECORDS)
    parser.add_argument("--repos", default=None, help="owner/name,… (default: every repository)")
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--no-pairs", action="store_true", help="skip part 2")
    parser.add_argument("--no-records", action="store_true", help="skip part 1")
    parser.add_argument("--show-errors", action="store_true", help="list the misjudged edges")
    parser.add_argument("--json", nargs="?", const=DEFAULT_JSON, type=Path, default=None)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    ok = True
    if not args.no_records:
        only = set(args.repos.split(",")) if args.repos else None
        reports: dict[str, dict[str, Any]] = {}
        for repo in _records.load(args.records, only):
            print(f"importing {repo.name} ({len(repo.files)} records)", file=sys.stderr)
            judged = judge_repo(repo)
            reports[repo.name] = {
                **score_repo(repo, judged["edges"]),
                "import_s": judged["import_s"],
            }
        overall = total(reports)
        print(render_records(reports, overall))
        if args.show_errors:
            for name, r in reports.items():
                for e in r["false_auto"]:
                    print(
                        f"  false auto {name}: {e['newer']} -> {e['older']}"
                        f" ({e['judge']}, {e['confidence']}): {e['reason']}"
                    )
                for e in r["false_candidates"]:
                    print(
                        f"  false candidate {name}: {e['newer']} -> {e['older']}"
                        f" ({e['judge']}, {e['confidence']}): {e['reason']}"
                    )
                for missed in r["missed"]:
                    print(f"  missed {name}: {missed}")
        for text, met in records_targets(overall):
            print(f"  target {'met' if met else 'NOT met'}: {text}")
            ok = ok and met
        report["records"] = {"overall": overall, "repositories": reports}
    if not args.no_pairs:
        pairs_report, pairs_ok = run_pairs(args.pairs, args.show_errors)
        ok = ok and pairs_ok
        report["pairs"] = pairs_report
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
        print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
