"""Supersede judging on the labelled pairs: the confusion table per tier, rules alone.

    python bench/supersede.py [--show-errors] [--json [bench/results/supersede.json]]

Judges every pair of `tests/data/supersede/pairs.yaml` (coding memories in English and
Chinese: positives, plain negatives and hard negatives — two roles, "tried X, went back",
a change to one service only, a change only considered) with the offline rules of
`memoryd.governance.supersede`, exactly as the service runs them when no LLM is configured.
A pair is predicted to supersede at a tier when its confidence reaches the tier's threshold
(automatic ≥ 0.85, candidate ≥ 0.5). Targets at the automatic tier: precision ≥ 0.95,
recall ≥ 0.6. The `ho-*` pairs were written after the rules and measured before any change:
they are reported apart as the held-out check.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from memoryd.governance.supersede import Tiers, judge_by_rules, outcome_counts, precision_recall

PAIRS = Path(__file__).resolve().parent.parent / "tests" / "data" / "supersede" / "pairs.yaml"
DEFAULT_JSON = Path(__file__).parent / "results" / "supersede.json"
PRECISION_TARGET = 0.95
RECALL_TARGET = 0.6


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--show-errors", action="store_true", help="list the misjudged pairs")
    parser.add_argument("--json", nargs="?", const=DEFAULT_JSON, type=Path, default=None)
    args = parser.parse_args(argv)
    pairs = yaml.safe_load(args.pairs.read_text(encoding="utf-8"))
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
    if args.show_errors:
        for r in errors:
            print(
                f"  {r['id']}: label {r['label']}, {tier_of[r['id']]} ({r['reason'] or 'no rule'})"
            )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
        print(f"wrote {args.json}")
    auto = report["groups"]["all"]["auto"]
    ok = auto["precision"] >= PRECISION_TARGET and auto["recall"] >= RECALL_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
