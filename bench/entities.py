"""Entity traversal's own job, measured: questions that name a thing by another name, ask what is
known about it, or ask for the current decision about it (tests/data/recall/aliases.yaml).

    python bench/entities.py [--questions tests/data/recall/aliases.yaml]
                             [--records tests/data/supersede/records] [--devmem DIR]
                             [--edges rules|truth] [--json OUT]

Each (set, scope) the questions name is loaded into its own data dir as a team would: DevMemBench
sessions (read from ../shared/bench/devmem, never copied) as one `session` memory per session,
decision records as one `decision` memory per record in date order (`record_many`, so the
supersede rules judge them as they judge any import). `--edges truth` instead records each
replacement the records state (truth.yaml) as the newer memory's `supersedes` and undoes every
other active edge: the graph as it would be with correct supersedes.

Reported per question kind (alias, taught, about, current) and overall: hit@1 and MRR (top 10)
for memoryd as configured, memoryd with the entity and graph stages off (and the kind stage
too: every stage that reads the graph), and a stdlib Okapi
BM25 over the same texts (bench/devmem.py's), with how many questions each is better on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from _corpus import open_in_process
from devmem import DEFAULT_DATA as DEVMEM_DATA
from devmem import Okapi, record_body, session_start, stored_in
from memoryd.errors import MemorydError
from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall import RecallConfig
from memoryd.service import MemoryService

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "tests" / "data" / "recall" / "aliases.yaml"
RECORDS = ROOT / "tests" / "data" / "supersede" / "records"
K = 10
KINDS = ("alias", "taught", "about", "current")


# -- loading ---------------------------------------------------------------------------------
def devmem_docs(data: Path, project: str) -> list[tuple[str, MemoryDraft]]:
    """(session id, draft) for one DevMemBench project, as bench/devmem.py records them."""
    sessions = json.loads((data / "sessions.json").read_text())
    projects = sorted({s["metadata"]["project"] for s in sessions} - {"both"})
    return [
        (
            s["sessionId"],
            MemoryDraft(
                type=MemoryType.SESSION,
                title=f"Session {s['sessionId']}",
                body=record_body(s),
                scope_path=Path("/"),  # set per data dir by `load`
                created_at=session_start(s),
                source="devmem",
                allow_duplicate=True,
            ),
        )
        for s in sessions
        if project in stored_in(s, projects)
    ]


def record_docs(folder: Path) -> list[tuple[str, MemoryDraft]]:
    """(file name, draft) for one repository's decision records, oldest first: dated by
    truth.yaml where it says, else by file name order a day apart."""
    truth = _truth(folder)
    dates = {r["file"]: r.get("date") for r in truth.get("records", [])}
    start = datetime(2020, 1, 1, tzinfo=UTC)
    out: list[tuple[datetime, str, MemoryDraft]] = []
    for i, path in enumerate(sorted(folder.glob("*.md"))):
        text = path.read_text(encoding="utf-8")
        title = next(
            (line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")),
            path.stem,
        )
        stated = dates.get(path.name)
        when = (
            datetime.fromisoformat(str(stated)).replace(tzinfo=UTC)
            if stated
            else start + timedelta(days=i)
        ) + timedelta(seconds=i)  # records of one day keep their file order
        draft = MemoryDraft(
            type=MemoryType.DECISION,
            title=title[:200] or path.stem,
            body=text,
            scope_path=Path("/"),
            created_at=when,
            source="adr",
            allow_duplicate=True,
        )
        out.append((when, path.name, draft))
    return [(name, draft) for _, name, draft in sorted(out, key=lambda t: (t[0], t[1]))]


def _truth(folder: Path) -> dict[str, Any]:
    path = folder / "truth.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load(
    svc: MemoryService,
    scope: Path,
    docs: list[tuple[str, MemoryDraft]],
    truth: list[tuple[str, str]],
) -> dict[str, str]:
    """Record the documents in `scope`; returns slug → document id. With `truth` (newer,
    older) pairs, each newer names its older in `supersedes` and every other active edge is
    undone; without, the supersede rules judge the import as they judge any."""
    drafts = [replace_scope(d, scope) for _, d in docs]
    if not truth:
        written = svc.record_many(drafts)
        return {m.slug: doc for m, (doc, _) in zip(written, docs, strict=True)}
    slugs: dict[str, str] = {}
    older_of: dict[str, list[str]] = {}
    for newer, older in truth:
        older_of.setdefault(newer, []).append(older)
    for (doc, _), draft in zip(docs, drafts, strict=True):
        named = [slugs[o] for o in older_of.get(doc, []) if o in slugs]
        memory = svc.record(draft.model_copy(update={"supersedes": named}))
        slugs[doc] = memory.slug
    wanted = {(slugs[n], slugs[o]) for n, o in truth if n in slugs and o in slugs}
    mine = set(slugs.values())
    for row in svc.graph.supersede_edges().values():
        if row.older in mine and (row.newer, row.older) not in wanted:
            svc.decide_supersede(row.newer, row.older, "undo")
    return {slug: doc for doc, slug in slugs.items()}


def replace_scope(draft: MemoryDraft, scope: Path) -> MemoryDraft:
    return draft.model_copy(update={"scope_path": scope})


# -- metrics ---------------------------------------------------------------------------------
def reciprocal_rank(ranked: list[str], expected: list[str]) -> float:
    for i, doc in enumerate(ranked[:K]):
        if doc in expected:
            return 1.0 / (i + 1)
    return 0.0


def table(rows: list[dict[str, Any]], system: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in (*KINDS, "overall"):
        sub = [r for r in rows if kind in ("overall", r["kind"])]
        if sub:
            out[kind] = {
                "n": len(sub),
                "hit@1": round(statistics.fmean(r[system] == 1.0 for r in sub), 3),
                "mrr": round(statistics.fmean(r[system] for r in sub), 3),
            }
    return out


# -- the run ---------------------------------------------------------------------------------
def run_scope(
    key: tuple[str, str], questions: list[dict[str, Any]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    kind_of_set, scope_name = key
    if kind_of_set == "devmem":
        docs = devmem_docs(args.devmem, scope_name)
        truth: list[tuple[str, str]] = []
    else:
        folder = args.records / scope_name
        if not folder.is_dir():
            print(
                f"records {folder} not found: {len(questions)} questions skipped", file=sys.stderr
            )
            return []
        docs = record_docs(folder)
        stated = _truth(folder).get("supersedes", []) if args.edges == "truth" else []
        truth = [(s["newer"], s["older"]) for s in stated]
    okapi = Okapi({doc: f"{d.title}\n{d.body}" for doc, d in docs})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memoryd-entities-") as tmp:
        project = Path(tmp) / "project" / scope_name
        project.mkdir(parents=True)
        svc = open_in_process(Path(tmp) / "home")
        try:
            doc_of = load(svc, project, docs, truth)
            base = svc.recall_config
            no_entity = replace(base, stages=base.stages - {"entity", "graph"})
            no_graph = replace(base, stages=base.stages - {"entity", "graph", "kind"})
            for q in questions:
                if q.get("teach"):
                    entity, alias = q["teach"]
                    try:
                        svc.alias_entity(entity, alias)
                    except MemorydError as exc:
                        print(f"{q['id']}: could not teach {alias!r}: {exc}", file=sys.stderr)
                row = {"id": q["id"], "kind": q["kind"], "set": kind_of_set}
                for name, config in (
                    ("memoryd", base),
                    ("no_entity", no_entity),
                    ("no_graph", no_graph),
                ):
                    svc.recall_config = config
                    result = svc.recall(q["question"], scope=project, k=K, track=False)
                    ranked = [doc_of[h.slug] for h in result.hits if h.slug in doc_of]
                    row[name] = reciprocal_rank(ranked, q["expected"])
                    if name == "memoryd":
                        row["linked"] = result.entities
                        row["top"] = ranked[:3]
                svc.recall_config = base
                row["bm25"] = reciprocal_rank(
                    [d for d, _ in okapi.rank(q["question"])], q["expected"]
                )
                rows.append(row)
        finally:
            svc.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--devmem", type=Path, default=DEVMEM_DATA)
    parser.add_argument("--edges", choices=("rules", "truth"), default="rules")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "entities.json"
    )
    args = parser.parse_args()
    questions = yaml.safe_load(args.questions.read_text(encoding="utf-8"))["questions"]
    if not (args.devmem / "sessions.json").is_file():
        questions = [q for q in questions if q["set"] != "devmem"]
        print(f"DevMemBench not found in {args.devmem}: its questions skipped", file=sys.stderr)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for q in questions:
        groups.setdefault((q["set"], q["scope"]), []).append(q)
    rows: list[dict[str, Any]] = []
    for key in sorted(groups):
        print(f"loading {key[0]} {key[1]}", file=sys.stderr)
        rows += run_scope(key, groups[key], args)
    report: dict[str, Any] = {
        "edges": args.edges,
        "config": sorted(RecallConfig().stages),
        "systems": {s: table(rows, s) for s in ("memoryd", "no_entity", "no_graph", "bm25")},
        "versus_bm25": {
            "better": sum(r["memoryd"] > r["bm25"] for r in rows),
            "worse": sum(r["memoryd"] < r["bm25"] for r in rows),
        },
        "entity_stage_changes": sum(r["memoryd"] != r["no_entity"] for r in rows),
        "questions": rows,
    }
    print(f"edges: {args.edges}; {len(rows)} questions")
    print(f"{'system':<28}" + "".join(f"{k:>16}" for k in (*KINDS, "overall")))
    for system, label in (
        ("memoryd", "memoryd"),
        ("no_entity", "memoryd, entity+graph off"),
        ("no_graph", "  and kind off"),
        ("bm25", "BM25"),
    ):
        cells = []
        for kind in (*KINDS, "overall"):
            m = report["systems"][system].get(kind)
            cells.append(f"{m['mrr']:.3f} ({m['hit@1']:.2f})" if m else "-")
        print(f"{label:<28}" + "".join(f"{c:>16}" for c in cells))
    print(
        f"MRR (hit@1); memoryd vs BM25: better on {report['versus_bm25']['better']},"
        f" worse on {report['versus_bm25']['worse']}; the entity stage changes"
        f" {report['entity_stage_changes']} questions"
    )
    for r in rows:
        if r["memoryd"] < 1.0 or r["memoryd"] != r["no_entity"]:
            print(
                f"  {r['id']:<20} memoryd {r['memoryd']:.2f} off {r['no_entity']:.2f}"
                f" bm25 {r['bm25']:.2f} linked {r['linked']} top {r['top']}"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
