"""Interop benchmark: `memoryd import mcp-memory` of a 32k-line graph through the daemon.

    python bench/interop.py [--lines 32000] [--before-lines 300] [--json bench/results/interop.json]

The graph is generated (seeded) the way the official MCP memory server writes its
`memory.jsonl` (FORMATS.md §2, `fixtures/mcp_memory_graph.jsonl`): one JSON object per line,
entities (`type`, `name`, `entityType`, `observations`) first, then relations (`type`,
`from`, `to`, `relationType`). About 40% of the lines are entities of the types agents
create (person, project, library, tool, service, organization, concept, decision, file),
with 0-5 observations each (a sentence about the entity: what it is, who prefers what, a
decision and why, a version, a bug); the rest are relations, in the names agents give them
(`uses`, `works_on`, `depends on`, `inspired by`, `owned_by`, …), some to endpoints that are
never declared, as upstream allows.

A real `memoryd serve` holds the data dir; the real CLI imports the file through it and the
graph is exported again to check every entity, observation and relation arrived. Target
(issue 26): at least 1,000 lines a second. `--before-lines` measures the old path (one
`POST /v1/graph/facts` per observation or relation, what import did before batching) on a
prefix of the file, into a second data dir: the full file that way takes hours.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import memoryd
from _http_bench import Daemon
from memoryd.interop import mcp_memory, mcp_memory_import
from memoryd.models import EntityType, entity_id

TARGET_LINES_PER_S = 1000.0


def _words(text: str) -> list[str]:
    return text.split()


FIRST = _words(
    "Ana Ben Chen Dana Eli Fatima Goran Hana Ivan Jun Kofi Lena Mei Nils Omar Priya Quinn"
    " Rosa Sven Tariq Uma Vera Wen Yusuf Zoe"
)
LAST = _words(
    "Abe Borg Costa Diaz Eng Fischer Garcia Haas Ito Jensen Kim Lopez Moreau Nakamura Okafor"
    " Park Rossi Sato Tanaka Ueda Vogel Wang Xu Young Zhou"
)
LIBRARIES = _words(
    "React Solid Vue Svelte FastAPI Django Flask pydantic SQLAlchemy pandas numpy polars httpx"
    " requests pytest hypothesis tokio serde axum gin zod prisma vite webpack esbuild"
)
TOOLS = _words(
    "PostgreSQL SQLite Redis Kafka DuckDB Docker Kubernetes Terraform nginx Grafana Prometheus"
    " uv ruff mypy pnpm Bazel GitHub-Actions Sentry Vault Airflow"
)
DOMAINS = _words(
    "billing search auth checkout inventory notifications analytics onboarding payments ledger"
    " reports gateway scheduler exporter sync"
)
KINDS = _words("api service worker frontend cli sdk pipeline dashboard")
ORGS = _words("Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Tyrell Cyberdyne Soylent")
CONCEPTS = _words(
    "idempotency backpressure caching sharding feature-flags blue-green-deploys code-review"
    " trunk-based-development event-sourcing rate-limiting retries observability"
)
RELATIONS = [
    "uses", "works_on", "depends on", "inspired by", "owned_by", "maintains", "knows",
    "prefers", "deployed_on", "replaces", "calls", "reviewed", "reports_to", "part_of",
    "mentions", "blocked by", "migrated_to", "documents",
]  # fmt: skip
MONTHS = _words(
    "January February March April May June July August September October November December"
)


def _observation(rng: random.Random, name: str, etype: str) -> str:
    lib, tool, month = rng.choice(LIBRARIES), rng.choice(TOOLS), rng.choice(MONTHS)
    year = rng.choice([2024, 2025, 2026])
    person = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    templates = {
        "person": [
            f"Prefers {lib} over {rng.choice(LIBRARIES)} for new frontends",
            f"On call for the {rng.choice(DOMAINS)} service in {month}",
            f"Reviews every migration touching {tool}",
            "Asked to keep PR descriptions under 200 words",
            "Works from the Berlin office on Tuesdays and Thursdays",
            f"Owns the {rng.choice(DOMAINS)} runbook since {month} {year}",
        ],
        "project": [
            f"Moved from {rng.choice(LIBRARIES)} to {lib} in {month} {year} for bundle size",
            f"Runs on {tool} {rng.randint(12, 17)} in production",
            f"CI takes about {rng.randint(4, 25)} minutes on the main branch",
            f"Release every {rng.choice(['Monday', 'Wednesday', 'Friday'])} after the standup",
            f"Test suite uses pytest with {rng.randint(300, 4000)} tests",
            f"Lead maintainer is {person}",
        ],
        "library": [
            f"Pinned to {rng.randint(1, 9)}.{rng.randint(0, 30)} because of a breaking change",
            f"Chosen over {rng.choice(LIBRARIES)} after a benchmark in {month} {year}",
            "Its async client leaks connections unless closed explicitly",
            f"Used by {rng.randint(2, 14)} services",
        ],
        "tool": [
            f"Version {rng.randint(1, 17)}.{rng.randint(0, 9)} on the build machines",
            f"Configured through {rng.choice(['pyproject.toml', 'a YAML file', 'env vars'])}",
            f"Slow on cold caches: about {rng.randint(20, 300)} s for a full run",
            f"{person} set it up in {month} {year}",
        ],
        "service": [
            f"Talks to {tool} over a connection pool of {rng.randint(5, 50)}",
            f"p95 latency target is {rng.randint(20, 400)} ms",
            f"Deployed with {rng.choice(['Helm', 'Terraform', 'docker compose'])}",
            f"Pager alerts go to {person}",
        ],
        "organization": [
            f"Customer since {month} {year}",
            f"Contract renews every {rng.choice(['January', 'July'])}",
            f"Contact is {person}",
        ],
        "concept": [
            f"Applied in the {rng.choice(DOMAINS)} service after an incident in {month}",
            f"Documented in docs/adr/{rng.randint(1, 80):04d}.md",
        ],
        "decision": [
            f"Decided in {month} {year} by {person}",
            f"Reason: {lib} keeps the bundle under {rng.randint(80, 400)} KB",
            "Revisit when the team grows past ten engineers",
        ],
        "file": [
            f"Holds the {rng.choice(DOMAINS)} settings; edit through the admin UI only",
            f"Generated by {tool}; do not edit by hand",
        ],
    }
    return rng.choice(templates[etype])


def _names(rng: random.Random, wanted: int) -> list[tuple[str, str]]:
    """`wanted` distinct (name, entityType) pairs."""
    pools: list[tuple[str, list[str]]] = [
        ("person", [f"{f} {last}" for f in FIRST for last in LAST]),
        ("library", LIBRARIES),
        ("tool", TOOLS),
        ("organization", ORGS),
        ("concept", CONCEPTS),
    ]
    found: dict[str, str] = {}
    for etype, names in pools:
        for name in names:
            found[name] = etype
    while len(found) < wanted:
        domain, kind = rng.choice(DOMAINS), rng.choice(KINDS)
        n = rng.randint(1, 999)
        etype, name = rng.choice(
            [
                ("project", f"{domain}-{kind}-{n}"),
                ("service", f"{domain}-{kind}-svc-{n}"),
                ("decision", f"ADR-{n:04d} {domain} {kind}"),
                ("file", f"{domain}/{kind}/config-{n}.yaml"),
                ("person", f"{rng.choice(FIRST)} {rng.choice(LAST)}-{n}"),
            ]
        )
        found.setdefault(name, etype)
    items = list(found.items())
    rng.shuffle(items)
    return items[:wanted]


def generate(lines: int, seed: int = 26) -> str:
    """A `memory.jsonl` of exactly `lines` lines, as the official server writes it."""
    rng = random.Random(seed)
    entities = _names(rng, int(lines * 0.4))
    out: list[str] = []
    for name, etype in entities:
        count = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4, 5])
        observations = list(dict.fromkeys(_observation(rng, name, etype) for _ in range(count)))
        entity = {"type": "entity", "name": name, "entityType": etype, "observations": observations}
        out.append(json.dumps(entity, ensure_ascii=False, separators=(",", ":")))
    names = [name for name, _ in entities]
    seen: set[tuple[str, str, str]] = set()
    while len(out) < lines:
        src = rng.choice(names)
        dst = rng.choice(names) if rng.random() < 0.95 else f"{rng.choice(DOMAINS)}-legacy"
        kind = rng.choice(RELATIONS)
        if src == dst or (src, dst, kind) in seen:
            continue
        seen.add((src, dst, kind))
        relation = {"type": "relation", "from": src, "to": dst, "relationType": kind}
        out.append(json.dumps(relation, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(out)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (a load-independent cost)."""
    return sum(user_system_s(pid))


def user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far. The system part is mostly the
    kernel's file creation, which on ext4 without a journal grows many times right after
    many files were deleted nearby (`memoryd.bulkfiles`): a run on a fresh tmpfs has none
    of that."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def import_through_daemon(home: Path, project: Path, source: Path) -> dict[str, Any]:
    """The real CLI, importing through a running daemon: wall time, what it reports, and
    the memories the graph then holds by kind (counted after the daemon stopped)."""
    home.mkdir(parents=True)
    daemon = Daemon(home, "kuzu")
    try:
        system = user_system_s(daemon.process.pid)[1]
        cpu = cpu_s(daemon.process.pid)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "memoryd", "import", "mcp-memory", str(source),
             "--scope", str(project), "--home", str(home), "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        cpu = cpu_s(daemon.process.pid) - cpu
        system = user_system_s(daemon.process.pid)[1] - system
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI, waited for above
        client_cpu = sum(getattr(after, f) - getattr(children, f) for f in ("ru_utime", "ru_stime"))
        if done.returncode != 0:
            raise SystemExit(f"import failed:\n{done.stderr}")
    finally:
        daemon.stop()
    # The daemon's whole life, its start and its stop included (the index commit and the
    # saves an import leaves to a timer or to close are here, not in `cpu`).
    stopped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = sum(getattr(stopped, f) - getattr(after, f) for f in ("ru_utime", "ru_stime"))
    counts: dict[str, int] = {}
    with memoryd.open(home) as svc:
        for kind, tag in (
            ("all", mcp_memory.TAG),
            ("relations", mcp_memory.RELATION_TAG),
            ("placeholders", mcp_memory.EMPTY_TAG),
        ):
            counts[kind] = svc.cypher(
                "MATCH (m:Memory) WHERE list_contains(m.tags, $t) RETURN count(m)", {"t": tag}
            ).rows[0][0]
        counts["entities"] = svc.cypher("MATCH (e:Entity) RETURN count(e)").rows[0][0]
    report = json.loads(done.stdout)
    return {
        "seconds": seconds,
        "daemon_cpu_s": cpu,
        "daemon_system_s": system,
        "daemon_cpu_total_s": total,
        "client_cpu_s": client_cpu,
        "report": report,
        "counts": counts,
    }


def per_request_rate(home: Path, project: Path, text: str, lines: int) -> dict[str, Any]:
    """The path before batching: one request per observation and relation, on `lines`."""
    parsed = mcp_memory_import.parse_jsonl("\n".join(text.splitlines()[:lines]))
    home.mkdir(parents=True)
    daemon = Daemon(home, "kuzu")
    try:
        with memoryd.open(home) as svc:
            started = time.perf_counter()
            for ent in parsed.entities:
                if not mcp_memory.observe(
                    svc.record_graph_facts, ent.name, ent.entity_type, ent.observations,
                    scope_path=project,
                ):  # fmt: skip
                    mcp_memory.declare_entity(
                        svc.record_graph_facts, ent.name, ent.entity_type, scope_path=project
                    )
            for rel in parsed.relations:
                ends = [(n, entity_id(EntityType.CONCEPT, n)) for n in (rel.source, rel.target)]
                mcp_memory.relate(
                    svc.record_graph_facts, ends[0], ends[1], rel.relation_type,
                    scope_path=project,
                )  # fmt: skip
            seconds = time.perf_counter() - started
    finally:
        daemon.stop()
    return {"lines": lines, "seconds": round(seconds, 2), "lines_per_s": round(lines / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=32_000)
    parser.add_argument("--before-lines", type=int, default=300, help="0: skip the old path")
    parser.add_argument("--json", type=Path, default=Path("bench/results/interop.json"))
    args = parser.parse_args()

    text = generate(args.lines)
    expected = mcp_memory_import.parse_jsonl(text)
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-interop-") as tmp:
        work = Path(tmp)
        project = work / "project"
        (project / ".git").mkdir(parents=True)
        source = work / "memory.jsonl"
        source.write_text(text + "\n", encoding="utf-8")
        after = import_through_daemon(work / "home", project, source)
        before = (
            per_request_rate(work / "home-before", project, text, args.before_lines)
            if args.before_lines
            else None
        )
    counts = after["counts"]
    want_obs = sum(len([o for o in e.observations if o.strip()]) for e in expected.entities)
    empty = sum(1 for e in expected.entities if not any(o.strip() for o in e.observations))
    checked = (
        after["report"]["observations_added"] == want_obs
        and after["report"]["relations_added"] == len(expected.relations) == counts["relations"]
        and counts["placeholders"] == empty
        and counts["all"] == want_obs + empty + len(expected.relations)
        and counts["entities"] >= len(expected.entities)
    )
    rate = args.lines / after["seconds"]
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "lines": args.lines,
        "entities": len(expected.entities),
        "observations": want_obs,
        "relations": len(expected.relations),
        "import_s": round(after["seconds"], 2),
        "daemon_cpu_s": round(after["daemon_cpu_s"], 2),
        "daemon_system_s": round(after["daemon_system_s"], 2),
        "daemon_cpu_total_s": round(after["daemon_cpu_total_s"], 2),
        "client_cpu_s": round(after["client_cpu_s"], 2),
        "load_average": os.getloadavg()[0],
        "lines_per_s": round(rate, 1),
        "target_lines_per_s": TARGET_LINES_PER_S,
        "graph_counts": counts,
        "everything_arrived": checked,
        "before": before,
    }
    verdict = "met" if rate >= TARGET_LINES_PER_S else "MISSED"
    print(f"{'path':<34}{'lines':>8}{'seconds':>10}{'lines/s':>10}")
    if before is not None:
        print(f"{'one request per line (before)':<34}{before['lines']:>8}"
              f"{before['seconds']:>10.2f}{before['lines_per_s']:>10.1f}")  # fmt: skip
    print(f"{'batched (record_graph_facts_many)':<34}{args.lines:>8}"
          f"{after['seconds']:>10.2f}{rate:>10.1f}")  # fmt: skip
    print(f"daemon CPU {after['daemon_cpu_s']:.1f} s ({args.lines / after['daemon_cpu_s']:.0f}"
          f" lines per CPU second; system {after['daemon_system_s']:.1f} s),"
          f" client CPU {after['client_cpu_s']:.1f} s;"
          f" load average {os.getloadavg()[0]:.1f} on"
          f" {os.cpu_count()} cores")  # fmt: skip
    print(
        f"entities {len(expected.entities)}, observations {want_obs}, relations"
        f" {len(expected.relations)}; all in the graph: {checked};"
        f" target {TARGET_LINES_PER_S:.0f} lines/s: {verdict}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    if not checked:
        raise SystemExit("the exported graph does not hold what was imported")


if __name__ == "__main__":
    main()
