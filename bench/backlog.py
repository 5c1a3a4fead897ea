"""Recall through the daemon while its enrichment worker has a backlog, and an idle daemon's CPU.

    python bench/backlog.py [--sessions 2000] [--queries 150] [--json bench/results/backlog.json]
    python bench/backlog.py --home /tmp/backlog-home   # build once, keep it, reuse it next time

Builds a home once: `--base` long-term memories (extraction on), then `--sessions` session
memories recorded in bulk, which queues each for the enrichment worker (spaCy rules, DURA
scoring, supersede judging). A copy of that home is served by a real `memoryd serve` (no TCP,
no LLM) for each run, so every run starts with the same full backlog:

1. recall p50/p95 over the Unix socket (one client, keep-alive) while the backlog is worked
   through (`backlog`), with the daemon's CPU seconds (its own and its recall readers', from
   /proc) over that stretch;
2. the daemon is stopped, the copy's queue marked done, a daemon started again: the same
   queries with nothing queued (`drained`);
3. that daemon's CPU over `--idle-s` seconds with nothing queued and no requests (`idle`).

Target (issue 28): backlog p95 <= 1.5x drained p95; idle CPU ~ 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.daemon_harness import reader_pids

import memoryd
from _corpus import drafts, queries
from _http_bench import Daemon, pct
from memoryd.models import MemoryType
from memoryd.scope import resolve_scope

SCOPES = 20


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` so far (/proc/<pid>/stat, clock ticks)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_cpu(pid: int) -> float:
    return cpu_s(pid) + sum(cpu_s(p) for p in reader_pids(pid))


def pending(home: Path) -> int:
    """Sessions still queued for enrichment (read-only look at governance.db)."""
    with sqlite3.connect(f"file:{home / 'governance.db'}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT count(*) FROM enrichment WHERE state = 'pending'").fetchone()
    return int(row[0])


def build(home: Path, projects: Path, base: int, sessions: int) -> None:
    with memoryd.open(home, extraction={"enabled": True}) as svc:
        svc.record_many(drafts(base, projects, scopes=SCOPES))
        notes = drafts(sessions, projects, scopes=SCOPES, seed=13, start_at=base)
        for draft in notes:
            draft.type = MemoryType.SESSION
        for start in range(0, len(notes), 1000):
            svc.record_many(notes[start : start + 1000])
    print(f"built {home}: {base} memories, {pending(home)} sessions queued", flush=True)


def recall_batch(
    daemon: Daemon, requests: list[dict[str, Any]], think_s: float = 0.0
) -> list[float]:
    """One client's recalls, `think_s` apart (an agent between two tool calls)."""
    latencies = []
    with daemon.client() as http:
        for params in requests:
            started = time.perf_counter()
            response = http.get("/v1/recall", params=params)
            latencies.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
            if think_s:
                time.sleep(think_s)
    return latencies


def summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "requests": len(latencies),
        "p50_ms": round(pct(latencies, 0.5), 2),
        "p95_ms": round(pct(latencies, 0.95), 2),
    }


def settle_queue(home: Path) -> None:
    """Mark every queued session done (a stopped daemon's copy): the recall baseline."""
    with sqlite3.connect(home / "governance.db") as conn:
        conn.execute("UPDATE enrichment SET state = 'done' WHERE state = 'pending'")
        conn.execute("DELETE FROM judge_queue")


def run(source: Path, projects: Path, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memoryd-backlog-run-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(source, home)
        scopes = [
            resolve_scope(projects / f"project-{i:02d}", with_remote=False).scope_hash
            for i in range(SCOPES)
        ]
        requests = [
            {"q": q, "scope": scopes[i % SCOPES], "limit": 10, "track": False}
            for i, q in enumerate(queries(args.queries))
        ]
        queued = pending(home)
        daemon = Daemon(home, "kuzu")
        try:
            pid = daemon.process.pid
            recall_batch(daemon, requests[:10])  # start the readers, warm the matcher
            before, started = daemon_cpu(pid), time.perf_counter()
            busy: list[float] = []
            while len(busy) < args.backlog_requests:
                busy += recall_batch(daemon, requests, args.think_ms / 1000)
                time.sleep(args.gap_s)
            busy_wall = time.perf_counter() - started
            busy_cpu = daemon_cpu(pid) - before
            left = pending(home)
        finally:
            daemon.stop()
        print(f"  backlog: {len(busy)} recalls, {queued - left} of {queued} enriched"
              f" in {busy_wall:.1f}s", flush=True)  # fmt: skip
        settle_queue(home)
        daemon = Daemon(home, "kuzu")
        try:
            pid = daemon.process.pid
            recall_batch(daemon, requests[:10])
            calm: list[float] = []
            while len(calm) < args.backlog_requests:
                calm += recall_batch(daemon, requests, args.think_ms / 1000)
                time.sleep(args.gap_s)
            time.sleep(args.settle_s)
            before, started = daemon_cpu(pid), time.perf_counter()
            time.sleep(args.idle_s)
            idle_cpu = daemon_cpu(pid) - before
            idle_wall = time.perf_counter() - started
        finally:
            daemon.stop()
        return {
            "queued": queued,
            "backlog": summary(busy)
            | {
                "enriched": queued - left,
                "wall_s": round(busy_wall, 2),
                "daemon_cpu_s": round(busy_cpu, 2),
            },
            "drained": summary(calm),
            "idle": {
                "wall_s": round(idle_wall, 1),
                "daemon_cpu_s": round(idle_cpu, 3),
                "cpu_share": round(idle_cpu / idle_wall, 4),
            },
            "ratio_p95": round(pct(busy, 0.95) / max(pct(calm, 0.95), 1e-9), 2),
            "load": os.getloadavg()[0],
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--base", type=int, default=2000, help="long-term memories first")
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--backlog-requests", type=int, default=300)
    parser.add_argument("--gap-s", type=float, default=0.0, help="pause between query rounds")
    parser.add_argument("--think-ms", type=float, default=0.0, help="pause after each recall")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--home", type=Path, help="keep the built home here (reused if present)")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "backlog.json"
    )
    args = parser.parse_args()
    os.environ.setdefault("MEMORYD_CONFIG", os.devnull)  # the user's config must not leak in
    os.environ["MEMORYD_LLM__PROVIDER"] = "none"

    with tempfile.TemporaryDirectory(prefix="memoryd-backlog-") as tmp:
        root = args.home or Path(tmp)
        home, projects = root / "home", root / "projects"
        if not (home / "governance.db").exists():
            build(home, projects, args.base, args.sessions)
        runs = []
        for i in range(args.runs):
            print(f"run {i + 1} of {args.runs}", flush=True)
            runs.append(run(home, projects, args))
            print(json.dumps(runs[-1]), flush=True)
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "sessions": args.sessions,
        "base": args.base,
        "runs": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.json}")


if __name__ == "__main__":
    main()
