"""DevMemBench recall benchmark: coding-assistant sessions, one memory per session.

    python bench/devmem.py [--data ../shared/bench/devmem] [--paths record,capture] [--json OUT]
                           [--no-ablation | --ablation full|table] [--vectors auto|on|off]

Follows the protocol of the data's README (read from where it lies, never copied here):

* **capture** (the product path): each session becomes a Claude Code transcript (JSONL in the
  shapes of the interop fixture, timestamps on the session date) and a SessionEnd hook payload
  is piped into `memoryd capture --source=claude-code` with `cwd` = its project's directory
  (outside any git checkout: one scope per project; a `both` session is captured in each);
  then the inbox is drained and enrichment runs (the rules; no LLM).
* **record:** one `session` memory per session, body `user: …` / `assistant: …` lines,
  created_at = the session date, a neutral title.

A question is asked in the scope of its gold sessions; across all scopes when the gold spans
projects or lies only in `both` sessions, or for an abstention that names no project.

Metrics: hit@1/3/5, all@5, MRR, NDCG@5 overall and per type; newest-first for knowledge
updates with two or more gold sessions; abstention ROC AUC of the top hit's score; the share
of abstention questions on which `inject` (at its shipped threshold) stays silent and of
answerable ones on which it injects, decided as `inject` decides: by the best score among the
hits it is given (`capture.inject.DEFAULT_K`), which is not always the first hit's (evidence
that only reorders, like a session's kind stage, can put a hit first above better-scored
ones). The same metrics for a stdlib Okapi BM25 (k1 1.2, b 0.75, lower-cased word tokens,
per scope), and an ablation table (`_corpus.ablation_table`: the graph stage toggled, the
entity and graph stages off, the text stage alone; with `--ablation full` each stage off),
with how many questions each configuration changes.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _corpus import ablation_table, keep_static_table, open_in_process
from memoryd.capture import hook
from memoryd.capture.inject import DEFAULT_K as INJECT_K
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService


def _shared() -> Path:
    """`../shared` beside the repo (a worktree may sit one level deeper)."""
    here = Path(__file__).resolve().parents[1]
    for parent in here.parents:
        if (parent / "shared" / "bench").is_dir():
            return parent / "shared"
    return here.parent / "shared"


DEFAULT_DATA = _shared() / "bench" / "devmem"
FIXTURE = _shared() / "interop" / "fixtures" / "claude_code_transcript.jsonl"
BOTH = "both"
K = 10
WORD = re.compile(r"\w+")

Ranker = Callable[[str, str | None], list[tuple[str, float]]]
"""(question, project or None for all scopes) → [(session id, score)] best first."""


# -- loading ---------------------------------------------------------------------------------
def projects_of(sessions: list[dict[str, Any]]) -> list[str]:
    return sorted({s["metadata"]["project"] for s in sessions} - {BOTH})


def stored_in(session: dict[str, Any], projects: list[str]) -> list[str]:
    """The scopes a session lives in: its project's, or every project's for `both`."""
    project = session["metadata"]["project"]
    return list(projects) if project == BOTH else [project]


def session_start(session: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(session["metadata"]["date"]).replace(hour=10, tzinfo=UTC)


def record_body(session: dict[str, Any]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in session["messages"])


def load_record(svc: MemoryService, sessions: list[dict[str, Any]], dirs: dict[str, Path]) -> None:
    """One session memory per session and scope, created on the session date."""
    drafts = []
    for session in sessions:
        for project in stored_in(session, list(dirs)):
            drafts.append(
                MemoryDraft(
                    type=MemoryType.SESSION,
                    title=f"Session {session['sessionId']}",
                    body=record_body(session),
                    scope_path=dirs[project],
                    created_at=session_start(session),
                    source="devmem",
                    allow_duplicate=True,
                )
            )
    svc.record_many(drafts)


def transcript(session: dict[str, Any], cwd: Path, session_id: str) -> str:
    """The session as a Claude Code transcript, in the line shapes of the interop fixture."""
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    user_shape, text_shape = lines[1], lines[3]
    when = session_start(session)
    parent: str | None = None
    out = [json.dumps({"type": "summary", "summary": "", "leafUuid": str(uuid.uuid4())})]
    for message in session["messages"]:
        when += timedelta(seconds=30)
        uid = str(uuid.uuid4())
        entry = json.loads(json.dumps(user_shape if message["role"] == "user" else text_shape))
        entry.update(
            parentUuid=parent,
            cwd=str(cwd),
            sessionId=session_id,
            uuid=uid,
            timestamp=when.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        )
        if message["role"] == "user":
            entry["message"] = {"role": "user", "content": message["content"]}
        else:
            entry["message"]["content"] = [{"type": "text", "text": message["content"]}]
        out.append(json.dumps(entry))
        parent = uid
    return "\n".join(out) + "\n"


def session_of_slugs(svc: MemoryService, sessions: list[dict[str, Any]]) -> dict[str, str]:
    """slug → session id, by the body's first user message (both paths keep it)."""
    starts = {s["messages"][0]["content"][:80]: s["sessionId"] for s in sessions}
    found: dict[str, str] = {}
    for row in svc.list_memories(limit=10_000):
        body = _flat(svc.get(row.slug).body)
        for start, sid in starts.items():
            if _flat(start) in body:
                found[row.slug] = sid
                break
    return found


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- question scoping ------------------------------------------------------------------------
def question_project(
    question: dict[str, Any], by_id: dict[str, dict[str, Any]], projects: list[str]
) -> str | None:
    gold = question["haystackSessionIds"]
    if not gold:
        named = [p for p in projects if p in question["question"]]
        return named[0] if len(named) == 1 else None
    owners = {by_id[g]["metadata"]["project"] for g in gold} - {BOTH}
    return owners.pop() if len(owners) == 1 else None


# -- the BM25 baseline -----------------------------------------------------------------------
class Okapi:
    """Okapi BM25 (k1 1.2, b 0.75) over lower-cased word tokens of one scope's documents."""

    def __init__(self, docs: dict[str, str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tf = {d: Counter(WORD.findall(text.lower())) for d, text in docs.items()}
        self.lengths = {d: sum(c.values()) for d, c in self.tf.items()}
        self.avg = statistics.fmean(self.lengths.values()) if docs else 1.0
        self.df: Counter[str] = Counter()
        for counts in self.tf.values():
            self.df.update(counts.keys())
        self.n = len(docs)

    def rank(self, query: str) -> list[tuple[str, float]]:
        # summed in a fixed order: a set's order follows hash randomisation, and a float sum's
        # last digits follow its order (scores differed by 1e-15 run to run, enough for a tie)
        terms = sorted(set(WORD.findall(query.lower())))
        scores: dict[str, float] = {}
        for term in terms:
            df = self.df.get(term, 0)
            if not df:
                continue
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            for doc, counts in self.tf.items():
                tf = counts.get(term, 0)
                if tf:
                    norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[doc] / self.avg)
                    scores[doc] = scores.get(doc, 0.0) + idf * tf * (self.k1 + 1) / norm
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def bm25_ranker(sessions: list[dict[str, Any]], projects: list[str]) -> Ranker:
    indexes: dict[str | None, Okapi] = {
        None: Okapi({s["sessionId"]: record_body(s) for s in sessions})
    }
    for project in projects:
        docs = {
            s["sessionId"]: record_body(s) for s in sessions if project in stored_in(s, projects)
        }
        indexes[project] = Okapi(docs)
    return lambda question, project: indexes[project].rank(question)


def memoryd_ranker(
    svc: MemoryService,
    slug_to_session: dict[str, str],
    dirs: dict[str, Path],
    latencies: list[float] | None = None,
    cpu: list[float] | None = None,
) -> Ranker:
    def rank(question: str, project: str | None) -> list[tuple[str, float]]:
        scope = dirs[project] if project else None
        t, c = time.perf_counter(), time.thread_time()
        result = svc.recall(question, scope=scope, k=K, track=False)
        if latencies is not None:
            latencies.append((time.perf_counter() - t) * 1000)
        if cpu is not None:
            cpu.append((time.thread_time() - c) * 1000)
        ranked: list[tuple[str, float]] = []
        seen: set[str] = set()
        for hit in result.hits:
            sid = slug_to_session.get(hit.slug)
            if sid is not None and sid not in seen:
                seen.add(sid)
                ranked.append((sid, hit.score))
        return ranked

    return rank


# -- metrics ---------------------------------------------------------------------------------
def question_metrics(ranked: list[str], gold: list[str]) -> dict[str, float]:
    gold_set = set(gold)
    first = next((i for i, d in enumerate(ranked) if d in gold_set), None)
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:5]) if d in gold_set)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold_set), 5)))
    return {
        "hit@1": float(first is not None and first < 1),
        "hit@3": float(first is not None and first < 3),
        "hit@5": float(first is not None and first < 5),
        "all@5": float(gold_set <= set(ranked[:5])),
        "mrr": 1 / (first + 1) if first is not None else 0.0,
        "ndcg@5": dcg / ideal,
    }


KEYS = ["hit@1", "hit@3", "hit@5", "all@5", "mrr", "ndcg@5"]


def newest_first(ranked: list[str], gold: list[str], by_id: dict[str, dict[str, Any]]) -> float:
    """Whether the newest gold session ranks above every older gold session."""
    newest = max(gold, key=lambda g: (by_id[g]["metadata"]["date"], g))
    if newest not in ranked:
        return 0.0
    at = ranked.index(newest)
    return float(all(g not in ranked[:at] for g in gold if g != newest))


def roc_auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counting half (Mann-Whitney)."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def evaluate(
    rank: Ranker,
    questions: list[dict[str, Any]],
    by_id: dict[str, dict[str, Any]],
    projects: list[str],
    threshold: float | None = None,
) -> dict[str, Any]:
    rows: list[tuple[str, dict[str, float]]] = []
    newest: list[float] = []
    answerable_top: list[float] = []
    abstention_top: list[float] = []
    answerable_best: list[float] = []
    abstention_best: list[float] = []
    per_question: dict[str, float] = {}
    for q in questions:
        ranked = rank(q["question"], question_project(q, by_id, projects))
        top = ranked[0][1] if ranked else 0.0
        best = max((score for _, score in ranked[:INJECT_K]), default=0.0)
        gold = q["haystackSessionIds"]
        if not gold:
            abstention_top.append(top)
            abstention_best.append(best)
            continue
        answerable_top.append(top)
        answerable_best.append(best)
        ids = [sid for sid, _ in ranked]
        m = question_metrics(ids, gold)
        rows.append((q["questionType"], m))
        per_question[q["questionId"]] = m["mrr"]
        if q["questionType"] == "knowledge-update" and len(gold) >= 2:
            newest.append(newest_first(ids, gold, by_id))
    overall = {k: round(statistics.fmean(m[k] for _, m in rows), 3) for k in KEYS}
    per_type: dict[str, dict[str, float]] = {}
    for qtype in sorted({t for t, _ in rows}):
        sub = [m for t, m in rows if t == qtype]
        per_type[qtype] = {k: round(statistics.fmean(m[k] for m in sub), 3) for k in KEYS}
        per_type[qtype]["n"] = len(sub)
    report: dict[str, Any] = {
        "overall": overall,
        "per_type": per_type,
        "answerable": len(rows),
        "newest_first": round(statistics.fmean(newest), 3) if newest else None,
        "newest_first_n": len(newest),
        "abstention_auc": round(roc_auc(answerable_top, abstention_top), 3),
        "per_question_mrr": per_question,
        "top_scores": {"answerable": answerable_top, "abstention": abstention_top},
    }
    if threshold is not None:
        report["inject_threshold"] = threshold
        report["abstention_silent"] = round(
            statistics.fmean(t < threshold for t in abstention_best), 3
        )
        report["answerable_injects"] = round(
            statistics.fmean(t >= threshold for t in answerable_best), 3
        )
    return report


# -- running ---------------------------------------------------------------------------------
def run_path(
    path: str,
    sessions: list[dict[str, Any]],
    questions: list[dict[str, Any]],
    ablation: str,
    vectors: str = "off",
    vector_model: str = "static",
) -> dict[str, Any]:
    by_id = {s["sessionId"]: s for s in sessions}
    projects = projects_of(sessions)
    with tempfile.TemporaryDirectory(prefix=f"memoryd-devmem-{path}-") as tmp:
        root = Path(tmp)
        home = root / "home"
        dirs = {p: root / "projects" / p for p in projects}
        for d in dirs.values():
            d.mkdir(parents=True)
        settings = {"recall": {"vectors": vectors, "vector_model": vector_model}}
        svc = open_in_process(home, **settings)
        try:
            t = time.perf_counter()
            if path == "record":
                load_record(svc, sessions, dirs)
            else:
                svc.close()
                load_capture_fresh(sessions, dirs, home, root / "transcripts")
                svc = open_in_process(home, **settings)
                svc.drain_inbox()
                svc.enrich_pending(use_llm=False)
            load_s = time.perf_counter() - t
            embed = embed_all(svc)
            slugs = session_of_slugs(svc, sessions)
            expected = sum(len(stored_in(s, projects)) for s in sessions)
            if len(slugs) != expected:
                raise SystemExit(f"{path}: {len(slugs)} memories found for {expected} sessions")
            latencies: list[float] = []
            cpu: list[float] = []
            base = svc.recall_config
            threshold = base.min_score
            report = evaluate(
                memoryd_ranker(svc, slugs, dirs, latencies, cpu),
                questions,
                by_id,
                projects,
                threshold,
            )
            ordered = sorted(latencies)
            report["recall_p50_ms"] = round(statistics.median(ordered), 2)
            report["recall_p95_ms"] = round(ordered[int(0.95 * (len(ordered) - 1))], 2)
            # The recall runs on this thread (a MiniLM query on a worker thread is not
            # counted): its CPU time is what it costs on an idle core, however busy the
            # machine is.
            on_cpu = sorted(cpu)
            report["recall_cpu_p95_ms"] = round(on_cpu[int(0.95 * (len(on_cpu) - 1))], 2)
            report["load_s"] = round(load_s, 2)
            report["vectors"] = embed
            if ablation:
                report["ablation"] = {}
                for name, config in ablation_table(base, each=ablation == "full").items():
                    svc.recall_config = config
                    off = evaluate(memoryd_ranker(svc, slugs, dirs), questions, by_id, projects)
                    report["ablation"][name] = summary(off)
                    report["ablation"][name]["changed"] = changed(report, off)
                svc.recall_config = base
        finally:
            svc.close()
    return report


def load_capture_fresh(
    sessions: list[dict[str, Any]], dirs: dict[str, Path], home: Path, work: Path
) -> None:
    """The capture hooks run with no service open, as they do for a user."""
    work.mkdir(parents=True, exist_ok=True)
    for session in sessions:
        for project in stored_in(session, list(dirs)):
            session_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session['sessionId']}/{project}"))
            path = work / f"{session_id}.jsonl"
            path.write_text(transcript(session, dirs[project], session_id))
            payload = {
                "session_id": session_id,
                "transcript_path": str(path),
                "cwd": str(dirs[project]),
                "hook_event_name": "SessionEnd",
                "reason": "exit",
            }
            argv = ["--source=claude-code", f"--home={home}"]
            hook.main(argv, stdin=io.StringIO(json.dumps(payload)), stdout=io.StringIO())


def embed_all(svc: MemoryService) -> dict[str, Any] | None:
    """Embed every memory now (the daemon's worker does it in the background), timed."""
    if svc.vectors is None:
        return None
    svc.vectors.embedder.encode(["warm up"])  # the model loads (or is distilled) once
    keep_static_table(svc.home)
    t, cpu = time.perf_counter(), time.thread_time()
    report = svc.embed_pending(limit=1_000_000)
    took, took_cpu = time.perf_counter() - t, time.thread_time() - cpu
    if report is None or report.pending:
        raise SystemExit("the vector stage left memories unembedded")
    return {
        "memories": report.embedded,
        "passages": report.passages,
        "embed_ms_per_memory": round(1000 * took / max(report.embedded, 1), 1),
        # The model runs on this thread (one torch thread): its CPU time is what embedding
        # costs on an idle core, however busy the machine is.
        "embed_cpu_ms_per_memory": round(1000 * took_cpu / max(report.embedded, 1), 1),
    }


def changed(base: dict[str, Any], other: dict[str, Any]) -> int:
    """How many questions' reciprocal rank differs between two runs."""
    ours, theirs = base["per_question_mrr"], other["per_question_mrr"]
    return sum(ours[q] != theirs.get(q) for q in ours)


def summary(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "hit@1": report["overall"]["hit@1"],
        "mrr": report["overall"]["mrr"],
        "newest_first": report["newest_first"],
        "abstention_auc": report["abstention_auc"],
    }


def print_report(name: str, report: dict[str, Any]) -> None:
    o = report["overall"]
    extra = ""
    if "abstention_silent" in report:
        extra = (
            f"  inject@{report['inject_threshold']}: silent {report['abstention_silent']},"
            f" injects {report['answerable_injects']}"
        )
    print(
        f"{name:<22}" + "".join(f"{o[k]:>8}" for k in KEYS) + f"{report['newest_first']:>8}"
        f"{report['abstention_auc']:>8}" + extra
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--paths", default="record,capture")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "devmem.json"
    )
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument(
        "--ablation",
        choices=("full", "table"),
        default="full",
        help="table: the default, graph toggled, entity+graph off, text alone (issue 27);"
        " full: also each stage off and each optional stage on",
    )
    parser.add_argument("--per-type", action="store_true")
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
    sessions_file, questions_file = args.data / "sessions.json", args.data / "questions.json"
    if not sessions_file.is_file() or not questions_file.is_file():
        print(f"DevMemBench data not found in {args.data}: skipping (pass --data DIR)")
        return
    sessions = json.loads(sessions_file.read_text())
    questions = json.loads(questions_file.read_text())
    by_id = {s["sessionId"]: s for s in sessions}
    projects = projects_of(sessions)
    results: dict[str, Any] = {
        "bm25": evaluate(bm25_ranker(sessions, projects), questions, by_id, projects)
    }
    for path in [p.strip() for p in args.paths.split(",") if p.strip()]:
        if path not in ("record", "capture"):
            raise SystemExit(f"unknown loading path {path!r}: use record and/or capture")
        print(f"loading and ranking: {path}", file=sys.stderr)
        results[path] = run_path(
            path,
            sessions,
            questions,
            "" if args.no_ablation else args.ablation,
            args.vectors,
            args.vector_model,
        )
    print(f"{'system':<22}" + "".join(f"{k:>8}" for k in KEYS) + f"{'newest':>8}{'AUC':>8}")
    for name, report in results.items():
        print_report(name, report)
        if args.per_type:
            for qtype, m in report["per_type"].items():
                print(f"  {qtype:<20}" + "".join(f"{m[k]:>8}" for k in KEYS) + f"  n={m['n']}")
    for path in ("record", "capture"):
        if path not in results:
            continue
        r = results[path]
        print(
            f"{path}: recall p50 {r['recall_p50_ms']} ms, p95 {r['recall_p95_ms']} ms"
            f" (CPU p95 {r['recall_cpu_p95_ms']} ms)"
        )
        if r["vectors"]:
            v = r["vectors"]
            print(
                f"  vectors: {v['memories']} memories, {v['passages']} passages,"
                f" {v['embed_ms_per_memory']} ms to embed a memory"
                f" ({v['embed_cpu_ms_per_memory']} ms CPU)"
            )
        if "ablation" in r:
            print(
                f"  ablation ({path}): {'stages':<14}{'hit@1':>8}{'mrr':>8}{'newest':>8}{'AUC':>8}"
            )
            for stage, m in r["ablation"].items():
                print(
                    f"  {'':<20}{stage:<14}{m['hit@1']:>8}{m['mrr']:>8}{m['newest_first']!s:>8}"
                    f"{m['abstention_auc']:>8}  {m['changed']} questions change"
                )
    compare = {}
    for path in ("record", "capture"):
        if path in results:
            ours, theirs = results[path]["per_question_mrr"], results["bm25"]["per_question_mrr"]
            compare[path] = {
                "better_than_bm25": sum(ours[q] > theirs[q] for q in ours),
                "worse_than_bm25": sum(ours[q] < theirs[q] for q in ours),
            }
            print(f"{path} vs BM25 per question: {compare[path]}")
    results["versus_bm25"] = compare
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
