"""The in-process half of `bench/compare.py`: run under one side's code (its `src` first on
PYTHONPATH, or its own venv), so only APIs both sides have are used (`memoryd.open`, `recall`,
`record`, `record_many`, `MemoryDraft`; on commits older than `memoryd.open` (9e2a96f) the
service is opened as their CLI opened it). Prints one JSON object.

    python bench/_compare_probe.py build HOME PROJECTS N SCOPES
    python bench/_compare_probe.py recall HOME SCOPE QUERIES_JSON
    python bench/_compare_probe.py writes HOME SCOPE SERIAL
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memoryd
from _corpus import drafts
from memoryd.models import MemoryDraft, MemoryType


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return (wall - start[0]) * 1000, (cpu - start[1]) * 1000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


def _open(home: Path, **settings: Any) -> Any:
    """`memoryd.open`, or on a commit older than it (9e2a96f) the service as its CLI opened it."""
    if hasattr(memoryd, "open"):
        return memoryd.open(home, **settings)
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    return open_service(load_settings(home, **settings))


def build(home: Path, projects: Path, n: int, scopes: int) -> dict[str, Any]:
    """The bench corpus without session memories: those queue enrichment, which would then
    run in the daemon during the measurements, on both sides, at its own pace."""
    started = _clock()
    with _open(home, extraction={"enabled": False}) as svc:
        for start in range(0, n, 10_000):
            chunk = drafts(min(10_000, n - start), projects, scopes=scopes, start_at=start)
            svc.record_many(
                [
                    d.model_copy(update={"type": MemoryType.DECISION})
                    if d.type is MemoryType.SESSION
                    else d
                    for d in chunk
                ]
            )
    return {"built_s": round(_since(started)[0] / 1000, 1)}


def recall(home: Path, scope: str, queries: list[str]) -> dict[str, Any]:
    """A fresh process: `memoryd.open`, the first recall, then the steady state."""
    started = _clock()
    with _open(home) as svc:
        opened = _since(started)
        started = _clock()
        svc.recall(queries[0], scope=scope, track=False)
        first = _since(started)
        for q in queries[1:6]:
            svc.recall(q, scope=scope, track=False)
        walls, cpus = [], []
        for q in queries[6:]:
            started = _clock()
            svc.recall(q, scope=scope, track=False)
            wall, cpu = _since(started)
            walls.append(wall)
            cpus.append(cpu)
    return {
        "open_wall_ms": round(opened[0], 1),
        "open_cpu_ms": round(opened[1], 1),
        "first_wall_ms": round(first[0], 1),
        "first_cpu_ms": round(first[1], 1),
        "recall_p50_ms": _pct(walls, 0.5),
        "recall_p95_ms": _pct(walls, 0.95),
        "recall_cpu_ms": round(statistics.median(cpus), 2),
    }


def writes(home: Path, scope: str, serial: str) -> dict[str, Any]:
    """Small writes with the default configuration (extraction on): `record` of one decision,
    ten times, then `record_many` of 50, three times."""
    text = "We chose {a} over {b} for the cache layer because {b} dropped writes (#{i})."
    tools = ["Redis", "Memcached", "Postgres", "SQLite", "Kafka", "RabbitMQ", "Nginx", "Envoy"]

    def draft(i: int) -> MemoryDraft:
        a, b = tools[i % len(tools)], tools[(i * 3 + 1) % len(tools)]
        return MemoryDraft(
            type=MemoryType.DECISION,
            title=f"Use {a} for the cache ({serial}.{i})",
            body=text.format(a=a, b=b, i=f"{serial}.{i}"),
            scope_path=Path(scope),
            source="bench",
        )

    with _open(home) as svc:
        svc.record(draft(0))  # the first write opens the writer and loads the extractor
        walls, cpus = [], []
        for i in range(1, 11):
            started = _clock()
            svc.record(draft(i))
            wall, cpu = _since(started)
            walls.append(wall)
            cpus.append(cpu)
        many_walls, many_cpus = [], []
        for batch in range(3):
            started = _clock()
            svc.record_many([draft(100 + batch * 50 + i) for i in range(50)])
            wall, cpu = _since(started)
            many_walls.append(wall / 50)
            many_cpus.append(cpu / 50)
    return {
        "record_p50_ms": _pct(walls, 0.5),
        "record_p95_ms": _pct(walls, 0.95),
        "record_cpu_ms": round(statistics.median(cpus), 2),
        "record_many_per_memory_ms": round(statistics.median(many_walls), 2),
        "record_many_cpu_per_memory_ms": round(statistics.median(many_cpus), 2),
    }


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "build":
        out = build(Path(args[0]), Path(args[1]), int(args[2]), int(args[3]))
    elif command == "recall":
        out = recall(Path(args[0]), args[1], json.loads(args[2]))
    elif command == "writes":
        out = writes(Path(args[0]), args[1], args[2])
    else:
        raise SystemExit(f"unknown probe {command!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
