"""Synthetic but realistic memories for benchmarks: coding-agent notes, English and Chinese."""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import memoryd
from memoryd.models import MemoryDraft, MemoryType

if TYPE_CHECKING:  # imported where used: `bench/compare.py` runs `drafts` on old commits too
    from memoryd.recall import RecallConfig
    from memoryd.service import MemoryService

TOOLS = [
    "PostgreSQL",
    "SQLite",
    "Redis",
    "Kafka",
    "DuckDB",
    "FastAPI",
    "Django",
    "React",
    "Solid",
    "Vue",
    "TypeScript",
    "Rust",
    "Go",
    "Docker",
    "Kubernetes",
    "Terraform",
    "AWS",
    "GCP",
    "pytest",
    "ruff",
    "mypy",
    "uv",
    "Vite",
    "webpack",
    "Airflow",
    "Celery",
    "nginx",
    "gRPC",
    "GraphQL",
    "Kuzu",
    "tantivy",
    "spaCy",
    "jieba",
    "pandas",
    "numpy",
    "Prometheus",
    "Grafana",
]
VERBS = [
    "switched to",
    "decided to use",
    "benchmarked",
    "debugged",
    "migrated from",
    "configured",
    "removed",
    "upgraded",
    "documented",
    "profiled",
    "pinned",
    "replaced",
]
PROBLEMS = [
    "a memory leak",
    "flaky tests",
    "slow cold start",
    "a deadlock",
    "timeouts under load",
    "a schema drift",
    "wrong time zones",
    "a race in the cache",
    "N+1 queries",
    "a broken migration",
    "high p95 latency",
    "a missing index",
]
ZH = [
    "我们决定采用{a}来替换{b},因为性能更好。",
    "部署到{a}的时候遇到了超时问题,最后调整了连接池。",
    "团队偏好使用{a}做数据处理,{b}只用于测试环境。",
    "修复了{a}消费者重复消费的问题。",
    "把存储从{b}迁移到{a},查询延迟下降了一半。",
]


def body(rng: random.Random) -> str:
    a, b = rng.sample(TOOLS, 2)
    if rng.random() < 0.25:
        return "".join(rng.choice(ZH).format(a=a, b=b) for _ in range(rng.randint(1, 3)))
    sentences = [
        f"We {rng.choice(VERBS)} {a} after hitting {rng.choice(PROBLEMS)} in {b}.",
        f"The fix touched src/{a.lower()}/client.py and the {b} adapter.",
        f"Run `make test` before merging; {a} needs the integration fixtures.",
        f"Open question: should {b} stay in the hot path or move behind {a}?",
        f"Measured p95 {rng.randint(3, 400)} ms with {rng.randint(1, 64)} workers.",
    ]
    rng.shuffle(sentences)
    return " ".join(sentences[: rng.randint(2, 5)])


def drafts(
    n: int, root: Path, *, scopes: int = 20, seed: int = 7, start_at: int = 0
) -> list[MemoryDraft]:
    """Drafts number `start_at` … `start_at + n - 1` (chunks of one corpus, same for any split)."""
    rng = random.Random(seed * 1_000_003 + start_at)
    dirs = []
    for i in range(scopes):
        path = root / f"project-{i:02d}"
        path.mkdir(parents=True, exist_ok=True)
        dirs.append(path)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    types = list(MemoryType)
    out = []
    for i in range(start_at, start_at + n):
        a, b = rng.sample(TOOLS, 2)
        out.append(
            MemoryDraft(
                type=rng.choice(types),
                title=f"{rng.choice(VERBS).capitalize()} {a} ({i})",
                body=body(rng) + f" #{i}",
                scope_path=dirs[i % scopes],
                tags=[a.lower(), b.lower()],
                triggers=[a],
                created_at=start + timedelta(minutes=7 * i),
                source="bench",
            )
        )
    return out


def queries(count: int = 200, *, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        kind = rng.random()
        a, b = rng.sample(TOOLS, 2)
        if kind < 0.4:
            out.append(a.lower())
        elif kind < 0.7:
            out.append(f"{a} {rng.choice(PROBLEMS)}")
        elif kind < 0.85:
            out.append(f"{a} {b} {rng.choice(VERBS)}")
        else:
            out.append(
                rng.choice(["超时问题", "迁移 查询延迟", "消费者 重复", "数据处理", "连接池"])
            )
    return out


def _static_tables(home: Path) -> tuple[Path, Path]:
    """The home's static embedding table, and the machine's copy: distilled once per machine
    for the benches (a minute of CPU that every fresh bench home would otherwise spend again;
    it is the same derived data)."""
    from memoryd.search.vectors import STATIC_TABLE, VECTORS_DIR

    cache = Path(tempfile.gettempdir()) / "memoryd-bench" / STATIC_TABLE
    return home / VECTORS_DIR / STATIC_TABLE, cache


def open_in_process(home: Path, **settings: object) -> MemoryService:
    """`memoryd.open` for a bench that turns recall stages on and off (`recall_config`) or runs
    enrichment itself: those need the stores in this process, not a daemon's client. A home
    with the vector stage on starts with the machine's distilled static table, if any."""
    from memoryd.service import MemoryService

    table, cache = _static_tables(home)
    if cache.is_file() and not table.exists():
        table.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cache, table)
    api = memoryd.open(home, **settings)
    if not isinstance(api, MemoryService):
        api.close()
        raise SystemExit(f"a daemon serves {home}: stop it (the bench needs the stores here)")
    return api


def keep_static_table(home: Path) -> None:
    """Keep the table a bench home distilled for the next bench run (`_static_tables`)."""
    table, cache = _static_tables(home)
    if table.is_file() and not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(table, cache)


def ablation_table(base: RecallConfig, *, each: bool = True) -> dict[str, RecallConfig]:
    """The recall configurations a bench compares (issue 27 §4): the default, the graph stage
    toggled, the entity and graph stages off together, the text stage alone; with `each`,
    also every default stage off and every optional stage on, one at a time."""
    from memoryd.recall import STAGES

    toggled = "-graph" if "graph" in base.stages else "+graph"
    configs = {
        "default": base,
        toggled: replace(base, stages=base.stages ^ {"graph"}),
        "-entity -graph": replace(base, stages=base.stages - {"entity", "graph"}),
        "text alone": replace(base, stages=frozenset({"text"})),
    }
    if each:
        for stage in sorted(base.stages - {"graph"}):
            configs[f"-{stage}"] = replace(base, stages=base.stages - {stage})
        for stage in sorted(STAGES - base.stages - {"graph"}):
            configs[f"+{stage}"] = replace(base, stages=base.stages | {stage})
    return configs
