"""Real-sessions recall benchmark: public coding-agent transcripts, memoryd against plain BM25.

    python bench/sessions.py [--data tests/data/sessions] [--paths record,capture,specstory]
                             [--stages-off graph,entity] [--ablation] [--vectors off|on|auto]
                             [--json OUT]

The data (`tests/data/sessions/`, sources in its SOURCES.md) is SpecStory histories that public
projects committed: one Markdown file per session, `<owner>__<repo>/.specstory/history/*.md`,
with questions per project in `<owner>__<repo>/questions.yaml`. Each project is one scope (a
directory of its own, as a user's checkout would be).

* **record:** each session file becomes one `session` memory through `record_many`: the title
  is the transcript's own heading, the body the file as stored, created_at the session start
  in its file name (`2025-10-02_06-45Z-…`).
* **capture** (the hook's path): each session becomes a Claude Code transcript (its user and
  assistant turns, in the line shapes of the interop fixture, timestamps from the file name and
  the turns' own headers) and a SessionEnd hook payload goes to `memoryd capture
  --source=claude-code` with `cwd` = its project's directory; then the inbox is drained and
  enrichment runs (the rules; no LLM). Sessions the hook judges trivial are not captured, and
  their questions count as misses.
* **specstory** (the hook's path for the files as they are): each session file goes to
  `memoryd capture --source=specstory <file>` with `cwd` = its project's directory, which
  reads the SpecStory Markdown itself (`capture.specstory`: turns, tool-use blocks as tool
  calls, the heading as the title); then as capture.

A question is asked in its project's scope. Metrics: hit@1, hit@5, MRR over the first K hits
(a hit is any of the question's expected sessions); "later above earlier" for change questions
(the expected, later session ranks above the stale one it changed; missing counts as below);
abstention ROC AUC of the first hit's score, unanswerable questions against answerable ones.
The baseline is devmem's stdlib Okapi BM25 over the same session files, per project. With
`--ablation`, each recall stage is switched off in turn (`RecallConfig.stages`) and the table
says how many questions' ranks changed.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from _corpus import open_in_process
from devmem import FIXTURE, K, Okapi, embed_all, roc_auc
from memoryd import memfile
from memoryd.capture import hook
from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall import STAGES
from memoryd.redact import clean_slug
from memoryd.service import MemoryService

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "sessions"
HEADER = re.compile(r"^_\*\*(User|Assistant|Agent)\b[^\n]*\*\*_[ \t]*\r?$", re.MULTILINE)
STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}):(\d{2})Z")
FILE_START = re.compile(r"^(\d{4}-\d{2}-\d{2})_(\d{2})-(\d{2})")
TITLE = re.compile(r"^# (.+?)(?: \(\d{4}-\d{2}-\d{2} \d{2}:\d{2}Z\))?[ \t]*\r?$", re.MULTILINE)
METRICS = ("hit@1", "hit@5", "mrr")
Ranker = Callable[[str, str], list[tuple[str, float]]]
"""(question, project) → [(session file name, score)] best first."""


@dataclass
class Session:
    """One session file of one project."""

    project: str
    name: str
    text: str
    title: str
    started: datetime
    turns: list[tuple[str, str, datetime | None]] = field(default_factory=list)


# -- loading ---------------------------------------------------------------------------------
def parse_session(project: str, path: Path) -> Session:
    """The file as stored, its heading, its start (file name) and its user/assistant turns."""
    text = path.read_bytes().decode("utf-8")
    found = FILE_START.match(path.name)
    if found is None:
        raise SystemExit(f"{path}: the file name does not start with the session's date and time")
    day, hour, minute = found.groups()
    started = datetime.fromisoformat(f"{day}T{hour}:{minute}:00+00:00")
    heading = TITLE.search(text)
    title = heading.group(1).strip() if heading else path.stem
    turns: list[tuple[str, str, datetime | None]] = []
    marks = list(HEADER.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        content = text[mark.end() : end].strip()
        content = re.sub(r"(\s*---\s*)+$", "", content).strip()
        stamp = STAMP.search(mark.group(0))
        when = (
            datetime.fromisoformat(f"{stamp.group(1)}T{stamp.group(2)}:{stamp.group(3)}:00+00:00")
            if stamp
            else None
        )
        role = "user" if mark.group(1) == "User" else "assistant"
        if content:
            turns.append((role, content, when))
    return Session(project, path.name, text, title, started, turns)


def load(data: Path) -> tuple[dict[str, list[Session]], dict[str, list[dict[str, Any]]]]:
    """Sessions and questions per project (`<owner>__<repo>` directory name)."""
    sessions: dict[str, list[Session]] = {}
    questions: dict[str, list[dict[str, Any]]] = {}
    for qfile in sorted(data.glob("*/questions.yaml")):
        project = qfile.parent.name
        history = qfile.parent / ".specstory" / "history"
        files = sorted(history.glob("*.md"))
        if not files:
            raise SystemExit(f"{history}: no session files")
        sessions[project] = [parse_session(project, f) for f in files]
        names = {s.name for s in sessions[project]}
        loaded = yaml.safe_load(qfile.read_text(encoding="utf-8"))["questions"]
        for q in loaded:
            unknown = [f for f in [*q["expected"], *q.get("stale", [])] if f not in names]
            if unknown:
                raise SystemExit(f"{qfile}: question {q['id']} names no session file {unknown}")
        questions[project] = loaded
    if not sessions:
        raise SystemExit(f"no <owner>__<repo>/questions.yaml under {data}")
    return sessions, questions


def load_record(
    svc: MemoryService, sessions: list[Session], dirs: dict[str, Path]
) -> dict[str, str]:
    """One session memory per file; slug → file name."""
    drafts = [
        MemoryDraft(
            type=MemoryType.SESSION,
            title=s.title,
            body=s.text,
            scope_path=dirs[s.project],
            created_at=s.started,
            source="specstory",
            allow_duplicate=True,
        )
        for s in sessions
    ]
    recorded = svc.record_many(drafts)
    return {m.slug: s.name for m, s in zip(recorded, sessions, strict=True)}


def transcript(session: Session, cwd: Path, session_id: str) -> str:
    """The session as a Claude Code transcript (the interop fixture's line shapes)."""
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    user_shape, text_shape = lines[1], lines[3]
    when = session.started
    parent: str | None = None
    out = [json.dumps({"type": "summary", "summary": "", "leafUuid": str(uuid.uuid4())})]
    for role, content, stamp in session.turns:
        when = max(when + timedelta(seconds=30), stamp or when)
        uid = str(uuid.uuid4())
        entry = json.loads(json.dumps(user_shape if role == "user" else text_shape))
        entry.update(
            parentUuid=parent,
            cwd=str(cwd),
            sessionId=session_id,
            uuid=uid,
            timestamp=when.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        )
        if role == "user":
            entry["message"] = {"role": "user", "content": content}
        else:
            entry["message"]["content"] = [{"type": "text", "text": content}]
        out.append(json.dumps(entry))
        parent = uid
    return "\n".join(out) + "\n"


def load_capture(
    sessions: list[Session], dirs: dict[str, Path], home: Path, work: Path
) -> dict[str, str]:
    """Every session through the capture hook, no service open; slug → file name."""
    work.mkdir(parents=True, exist_ok=True)
    slugs = {}
    for session in sessions:
        session_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session.project}/{session.name}"))
        path = work / f"{session_id}.jsonl"
        path.write_text(transcript(session, dirs[session.project], session_id))
        payload = {
            "session_id": session_id,
            "transcript_path": str(path),
            "cwd": str(dirs[session.project]),
            "hook_event_name": "SessionEnd",
            "reason": "exit",
        }
        argv = ["--source=claude-code", f"--home={home}"]
        hook.main(argv, stdin=io.StringIO(json.dumps(payload)), stdout=io.StringIO())
        slugs[memfile.session_slug("claude-code", session_id)] = session.name
    return slugs


def load_specstory(
    sessions: list[Session], dirs: dict[str, Path], home: Path, data: Path
) -> dict[str, str]:
    """Every session file through `memoryd capture --source=specstory <file>`, the file where
    SpecStory writes it in its project's checkout (the scope is that project); slug → file
    name."""
    slugs = {}
    for session in sessions:
        history = dirs[session.project] / ".specstory" / "history"
        history.mkdir(parents=True, exist_ok=True)
        path = history / session.name
        path.write_bytes(
            (data / session.project / ".specstory" / "history" / session.name).read_bytes()
        )
        argv = ["--source=specstory", f"--home={home}", str(path)]
        hook.main(argv, stdin=io.StringIO(""), stdout=io.StringIO())
        slugs[memfile.session_slug("specstory", clean_slug(path.stem))] = session.name
    return slugs


# -- rankers ---------------------------------------------------------------------------------
def bm25_ranker(sessions: dict[str, list[Session]]) -> Ranker:
    indexes = {p: Okapi({s.name: s.text for s in group}) for p, group in sessions.items()}
    return lambda question, project: indexes[project].rank(question)[:K]


def memoryd_ranker(
    svc: MemoryService, slug_to_file: dict[str, str], dirs: dict[str, Path], ms: list[float]
) -> Ranker:
    def rank(question: str, project: str) -> list[tuple[str, float]]:
        t = time.perf_counter()
        result = svc.recall(question, scope=dirs[project], k=K, track=False)
        ms.append((time.perf_counter() - t) * 1000)
        ranked: list[tuple[str, float]] = []
        for hit in result.hits:
            name = slug_to_file.get(hit.slug)
            if name is not None and name not in {n for n, _ in ranked}:
                ranked.append((name, hit.score))
        return ranked

    return rank


# -- metrics ---------------------------------------------------------------------------------
def position(ranked: list[str], wanted: list[str]) -> int | None:
    return next((i for i, name in enumerate(ranked) if name in wanted), None)


def evaluate(rank: Ranker, questions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The metrics overall and per project, and each question's reciprocal rank."""
    rows: dict[str, list[dict[str, float]]] = {}
    kinds: dict[str, list[dict[str, float]]] = {}
    later: list[float] = []
    top_answerable: list[float] = []
    top_abstain: list[float] = []
    rr: dict[str, float] = {}
    for project, group in questions.items():
        for q in group:
            hits = rank(q["question"], project)
            top = hits[0][1] if hits else 0.0
            if not q["expected"]:
                top_abstain.append(top)
                continue
            top_answerable.append(top)
            ranked = [name for name, _ in hits]
            first = position(ranked, q["expected"])
            m = {
                "hit@1": float(first == 0),
                "hit@5": float(first is not None and first < 5),
                "mrr": 1 / (first + 1) if first is not None else 0.0,
            }
            rows.setdefault(project, []).append(m)
            kinds.setdefault(q["kind"], []).append(m)
            rr[f"{project}/{q['id']}"] = m["mrr"]
            if q.get("stale"):
                stale = position(ranked, q["stale"])
                later.append(float(first is not None and (stale is None or first < stale)))
    every = [m for ms in rows.values() for m in ms]

    def mean(ms: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(statistics.fmean(m[k] for m in ms), 3) for k in METRICS}

    return {
        "overall": mean(every),
        "per_project": {p: mean(ms) | {"n": len(ms)} for p, ms in rows.items()},
        "per_kind": {k: mean(ms) | {"n": len(ms)} for k, ms in sorted(kinds.items())},
        "answerable": len(every),
        "later_above_earlier": round(statistics.fmean(later), 3) if later else None,
        "later_n": len(later),
        "abstention_auc": round(roc_auc(top_answerable, top_abstain), 3),
        "abstain_n": len(top_abstain),
        "reciprocal_ranks": rr,
    }


def summary(report: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    out = dict(report["overall"])
    out["later"] = report["later_above_earlier"]
    out["auc"] = report["abstention_auc"]
    if base is not None:
        mine, theirs = report["reciprocal_ranks"], base["reciprocal_ranks"]
        out["changed"] = sum(mine[q] != theirs[q] for q in mine)
    return out


def versus(ours: dict[str, Any], bm25: dict[str, Any]) -> dict[str, int]:
    mine, theirs = ours["reciprocal_ranks"], bm25["reciprocal_ranks"]
    return {
        "better": sum(mine[q] > theirs[q] for q in mine),
        "worse": sum(mine[q] < theirs[q] for q in mine),
    }


# -- running ---------------------------------------------------------------------------------
def run_path(
    path: str,
    sessions: dict[str, list[Session]],
    questions: dict[str, list[dict[str, Any]]],
    *,
    stages_off: frozenset[str],
    ablation: bool,
    vectors: str,
    data: Path = DEFAULT_DATA,
) -> dict[str, Any]:
    flat = [s for group in sessions.values() for s in group]
    with tempfile.TemporaryDirectory(prefix=f"memoryd-sessions-{path}-") as tmp:
        root = Path(tmp)
        home = root / "home"
        dirs = {p: root / "projects" / p for p in sessions}
        for d in dirs.values():
            d.mkdir(parents=True)
        settings = {"recall": {"vectors": vectors, "vector_model": "static"}}
        svc = open_in_process(home, **settings)
        try:
            t = time.perf_counter()
            if path == "record":
                slugs = load_record(svc, flat, dirs)
            else:
                svc.close()
                if path == "specstory":
                    slugs = load_specstory(flat, dirs, home, data)
                else:
                    slugs = load_capture(flat, dirs, home, root / "transcripts")
                svc = open_in_process(home, **settings)
                svc.drain_inbox()
                svc.enrich_pending(use_llm=False)
            load_s = time.perf_counter() - t
            stored = {row.slug for row in svc.list_memories(limit=100_000)}
            slugs = {slug: name for slug, name in slugs.items() if slug in stored}
            missing = sorted({s.name for s in flat} - set(slugs.values()))
            embed_all(svc)
            base = replace(svc.recall_config, stages=svc.recall_config.stages - stages_off)
            svc.recall_config = base
            ms: list[float] = []
            report = evaluate(memoryd_ranker(svc, slugs, dirs, ms), questions)
            report["stages"] = sorted(base.stages)
            report["memories"] = len(slugs)
            report["not_stored"] = missing
            report["load_s"] = round(load_s, 2)
            report["recall_p50_ms"] = round(statistics.median(ms), 1)
            if ablation:
                table: dict[str, Any] = {}
                for stage in sorted(base.stages):
                    svc.recall_config = replace(base, stages=base.stages - {stage})
                    off = evaluate(memoryd_ranker(svc, slugs, dirs, []), questions)
                    table[stage] = summary(off, report)
                svc.recall_config = replace(base, stages=frozenset({"text"}))
                off = evaluate(memoryd_ranker(svc, slugs, dirs, []), questions)
                table["text alone"] = summary(off, report)
                svc.recall_config = base
                report["ablation"] = table
        finally:
            svc.close()
    return report


def row(name: str, report: dict[str, Any]) -> str:
    o = report["overall"]
    return (
        f"{name:<24}"
        + "".join(f"{o[k]:>8}" for k in METRICS)
        + f"{report['later_above_earlier']!s:>8}{report['abstention_auc']:>8}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--paths", default="record,capture")
    parser.add_argument(
        "--stages-off",
        default="",
        help=f"recall stages to switch off for the run (of {', '.join(sorted(STAGES))})",
    )
    parser.add_argument("--ablation", action="store_true", help="each stage off in turn, too")
    parser.add_argument("--vectors", choices=("auto", "on", "off"), default="off")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "sessions.json"
    )
    args = parser.parse_args()
    stages_off = frozenset(s.strip() for s in args.stages_off.split(",") if s.strip())
    if stages_off - STAGES:
        raise SystemExit(f"unknown stages {sorted(stages_off - STAGES)}: use {sorted(STAGES)}")
    sessions, questions = load(args.data)
    results: dict[str, Any] = {
        "data": {
            p: {"sessions": len(g), "questions": len(questions[p])} for p, g in sessions.items()
        },
        "bm25": evaluate(bm25_ranker(sessions), questions),
    }
    for path in [p.strip() for p in args.paths.split(",") if p.strip()]:
        if path not in ("record", "capture", "specstory"):
            raise SystemExit(f"unknown loading path {path!r}: use record, capture, specstory")
        print(f"loading and ranking: {path}", file=sys.stderr)
        results[path] = run_path(
            path,
            sessions,
            questions,
            stages_off=stages_off,
            ablation=args.ablation,
            vectors=args.vectors,
            data=args.data,
        )
        results[path]["versus_bm25"] = versus(results[path], results["bm25"])
    n_sessions = sum(len(g) for g in sessions.values())
    n_questions = sum(len(q) for q in questions.values())
    print(f"{len(sessions)} projects, {n_sessions} sessions, {n_questions} questions")
    print(f"{'system':<24}" + "".join(f"{k:>8}" for k in METRICS) + f"{'later':>8}{'AUC':>8}")
    systems = [name for name in ("bm25", "record", "capture", "specstory") if name in results]
    for name in systems:
        print(row(name, results[name]))
    for project in sessions:
        print(f"  {project}")
        for name in systems:
            m = results[name]["per_project"][project]
            print(f"    {name:<20}" + "".join(f"{m[k]:>8}" for k in METRICS) + f"  n={m['n']}")
    kinds = sorted(results["bm25"]["per_kind"])
    print(f"  {'MRR per kind':<22}" + "".join(f"{k[:7]:>8}" for k in kinds))
    for name in systems:
        per = results[name]["per_kind"]
        print(f"    {name:<20}" + "".join(f"{per[k]['mrr']:>8}" for k in kinds))
    for name in systems[1:]:
        r = results[name]
        print(
            f"{name}: {r['memories']} memories, not stored {r['not_stored'] or 'none'};"
            f" vs BM25 per question {r['versus_bm25']}; recall p50 {r['recall_p50_ms']} ms"
        )
        if "ablation" in r:
            print(
                f"  ablation ({name}): {'stage off':<12}"
                + "".join(f"{k:>8}" for k in METRICS)
                + f"{'later':>8}{'AUC':>8}{'changed':>9}"
            )
            for stage, m in r["ablation"].items():
                print(
                    f"  {'':<20}{stage:<12}"
                    + "".join(f"{m[k]:>8}" for k in METRICS)
                    + f"{m['later']!s:>8}{m['auc']:>8}{m['changed']:>9}"
                )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
