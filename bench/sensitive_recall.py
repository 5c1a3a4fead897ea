"""Recall under a grant at 10k sensitive memories (issue 17, the read half).

Builds `--n` memories in a project, marks it sensitive (every file sealed; the graph keeps
skeletons, the index nothing), then measures, as the daemon does it (`views_eager`: the grant
decrypts the scope into its in-memory index and entity view at once):

* `grant_to_first_recall_s` — `grant PATH --duration once` until the first recall in the
  scope has answered. Target: <= 2 s.
* `recall_p50_ms` / `recall_p95_ms` — recalls in the granted scope, one query after another.
  Target p95: <= 25 ms.
* `view_build_s` — rebuilding the view alone (decrypting and indexing every memory).

The key lives in a real keyring backend that needs no desktop (keyrings.alt's file backend
in the bench's temp dir). Extraction is off (spaCy over 10k bodies would take most of the
run), so the entity stages find nothing in either store. `plain_recall_*` is the control:
the same recalls over the same scope on disk before it is marked, on the same machine.

    .venv/bin/python bench/sensitive_recall.py [--n 10000] [--queries 300]
        [--json bench/results/sensitive_recall.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memoryd.config import load_settings  # noqa: E402
from memoryd.models import MemoryDraft, MemoryType  # noqa: E402
from memoryd.wiring import open_service  # noqa: E402

TARGETS = {"grant_to_first_recall_s": 2.0, "recall_p95_ms": 25.0}
WORDS = [
    *("deploy", "invoice", "ledger", "client", "migration", "postgres", "redis", "kafka"),
    *("auth", "token", "rotate", "backup", "replica", "failover", "schema", "index"),
    *("cache", "queue", "worker", "cron", "billing", "tenant", "audit", "export"),
]
TOOLS = ["PostgreSQL", "Redis", "Kafka", "Terraform", "Docker", "Kubernetes", "Django", "React"]


def use_file_keyring(work: Path) -> None:
    import keyring
    from keyrings.alt.file import PlaintextKeyring

    ring = PlaintextKeyring()
    ring.file_path = str(work / "keyring" / "keyring_pass.cfg")
    keyring.set_keyring(ring)
    # memoryd refuses a plaintext keyring for scope keys; a bench in a temp dir may use it,
    # as the tests do (the refusal check still runs).
    from memoryd.sensitive.keys import TEST_KEYRING_ENV

    os.environ[TEST_KEYRING_ENV] = "keyrings.alt.file.PlaintextKeyring"


def drafts(project: Path, n: int) -> list[MemoryDraft]:
    rng = random.Random(17)
    start = datetime.now(UTC) - timedelta(days=365)
    types = [MemoryType.DECISION, MemoryType.FACT, MemoryType.SESSION, MemoryType.WARNING]
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(50))
        tool = rng.choice(TOOLS)
        out.append(
            MemoryDraft(
                type=types[i % len(types)],
                title=f"Memory {i} about {rng.choice(WORDS)} {rng.choice(WORDS)} with {tool}",
                body=f"Decision {i}: we use {tool} for {words}. Host db-{i % 97}.internal.",
                scope_path=project,
                tags=[rng.choice(WORDS)],
                triggers=[f"{rng.choice(WORDS)} {rng.choice(WORDS)}"],
                created_at=start + timedelta(minutes=50 * i),
            )
        )
    return out


def queries(count: int) -> list[str]:
    rng = random.Random(5)
    shapes = [
        lambda: f"{rng.choice(WORDS)} {rng.choice(WORDS)}",
        lambda: f"why do we use {rng.choice(TOOLS)} for {rng.choice(WORDS)}",
        lambda: f"{rng.choice(TOOLS)} {rng.choice(WORDS)} host",
    ]
    return [rng.choice(shapes)() for _ in range(count)]


def timed(svc: Any, project: Path, asked: list[str]) -> tuple[list[float], int]:
    """Milliseconds of each recall in the project, and how many found something."""
    times, found = [], 0
    for query in asked:
        t0 = time.perf_counter()
        result = svc.recall(query, scope=project, k=10, track=False)
        times.append((time.perf_counter() - t0) * 1000)
        found += bool(result.hits)
    return times, found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(n: int, count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memoryd-sensitive-recall-") as tmp:
        work = Path(tmp)
        use_file_keyring(work)
        home, project = work / "home", work / "project"
        (project / ".git").mkdir(parents=True)
        # Extraction off: spaCy over 10k bodies would take most of the run; the graph of a
        # sensitive scope is a skeleton either way.
        settings = load_settings(home, graph={"buffer_pool_mb": 512}, extraction={"enabled": False})
        started = time.perf_counter()
        asked = queries(count)
        with open_service(settings) as svc:
            svc.record_many(drafts(project, n))
            build_s = time.perf_counter() - started
            svc.prepare_recall()
            plain = timed(svc, project, asked)  # the control: the same scope, not yet marked
            started = time.perf_counter()
            svc.sensitive_mark(project)
            mark_s = time.perf_counter() - started
        with open_service(settings) as svc:
            svc.views_eager = True  # as the daemon: the grant builds the view
            svc.prepare_recall()
            started = time.perf_counter()
            svc.grant(project, "session")
            first = svc.recall(asked[0], scope=project, k=10)
            grant_to_first = time.perf_counter() - started
            if not first.hits:
                raise SystemExit("the first recall under the grant found nothing")
            times, found = timed(svc, project, asked[1:])
            scope_hash = svc.scope_show(project).scope_hash
            svc.views.drop(scope_hash)
            t0 = time.perf_counter()
            view = svc.granted_view(scope_hash)
            view_build_s = time.perf_counter() - t0
            held = len(view.memories) if view is not None else 0
            svc.revoke(project)
    p95 = percentile(times, 0.95)
    return {
        "memories": n,
        "view_memories": held,
        "build_s": round(build_s, 2),
        "mark_s": round(mark_s, 2),
        "grant_to_first_recall_s": round(grant_to_first, 3),
        "view_build_s": round(view_build_s, 3),
        "recalls": len(times),
        "recalls_with_hits": found,
        "recall_p50_ms": round(statistics.median(times), 2),
        "recall_p95_ms": round(p95, 2),
        "plain_recall_p50_ms": round(statistics.median(plain[0]), 2),
        "plain_recall_p95_ms": round(percentile(plain[0], 0.95), 2),
        "load_average": os.getloadavg()[0],
        "targets": TARGETS,
        "ok": grant_to_first <= TARGETS["grant_to_first_recall_s"]
        and p95 <= TARGETS["recall_p95_ms"],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = run(args.n, args.queries)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
