"""The graph page's own routes on a big vault (issue 29): how long the home list, its filters,
a search, the projects, an entity's drawn neighbourhood and a memory's history take.

The vault: `--n` memories of bench/_corpus.py in 20 projects (seven minutes apart), indexed
with memoryd's spaCy rules so their MENTIONS edges (the co-mentions) are real. The routes run
in process over HTTP (`create_app` behind `LocalOnly`, fastapi's TestClient), so a timing is
the route's own work plus the ASGI round trip, without a socket. Each timing is the median
and max of `--runs` calls.

    .venv/bin/python bench/page.py [--n 10000] [--runs 9] [--json bench/results/page.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

CHUNK = 2000


def measure(n: int, runs: int, root: Path) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from _corpus import drafts
    from memoryd.api.app import create_app
    from memoryd.api.runner import ServiceRunner
    from memoryd.api.security import LocalOnly
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    settings = load_settings(root / "home", graph={"buffer_pool_mb": 512})
    rows: dict[str, Any] = {"n": n, "runs": runs}
    with open_service(settings) as svc:
        t0 = time.perf_counter()
        for start in range(0, n, CHUNK):
            svc.record_many(drafts(min(CHUNK, n - start), root / "projects", start_at=start))
        rows["ingest_s"] = round(time.perf_counter() - t0, 1)
        rows["mentions"] = svc.cypher("MATCH ()-[r:MENTIONS]->() RETURN count(r)").rows[0][0]
        runner = ServiceRunner()
        try:
            app = create_app(svc, runner, settings=settings)
            with TestClient(LocalOnly(app), base_url="http://localhost") as http:

                def get(path: str, **params: Any) -> Any:
                    response = http.get(path, params=params)
                    assert response.status_code == 200, response.text
                    return response.json()

                projects = get("/v1/projects")
                scope = projects[0]["scope_hash"]
                top = svc.cypher(
                    "MATCH (e:Entity) RETURN e.id, e.mention_count ORDER BY e.mention_count DESC"
                    " LIMIT 1"
                ).rows[0]
                slug = get("/v1/page/memories", limit=1)["items"][0]["slug"]
                cases: dict[str, tuple[str, dict[str, Any]]] = {
                    "projects": ("/v1/projects", {}),
                    "home": ("/v1/page/memories", {"scope": scope}),
                    "home_all": ("/v1/page/memories", {}),
                    "home_type_state": (
                        "/v1/page/memories",
                        {"scope": scope, "type": "decision", "state": "alive"},
                    ),
                    "home_old_window": (
                        "/v1/page/memories",
                        {"since": "2025-01-10", "until": "2025-01-20"},
                    ),
                    "home_search": ("/v1/page/memories", {"q": "postgresql timeout"}),
                    "history": (f"/v1/memories/{slug}/history", {}),
                }
                for depth in (1, 2, 3):
                    cases[f"graph_hub_depth{depth}"] = (
                        "/v1/page/graph",
                        {"entity": top[0], "depth": depth, "cap": 40},
                    )
                rows["hub"] = {"id": top[0], "mentions": top[1]}
                for name, (path, params) in cases.items():
                    answer = get(path, **params)  # warm
                    samples = []
                    for _ in range(runs):
                        t = time.perf_counter()
                        get(path, **params)
                        samples.append(time.perf_counter() - t)
                    rows[name] = {
                        "median_ms": round(1000 * statistics.median(samples), 1),
                        "max_ms": round(1000 * max(samples), 1),
                        **_size(answer),
                    }
                    print(f"{name}: {rows[name]}", flush=True)
        finally:
            runner.close()
    return rows


def _size(answer: Any) -> dict[str, Any]:
    if isinstance(answer, list):
        return {"rows": len(answer)}
    if "nodes" in answer:
        return {
            "nodes": len(answer["nodes"]),
            "edges": len(answer["edges"]),
            "left_out": answer["left_out"],
        }
    return {"rows": len(answer["items"]), "total": answer["total"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-page-") as tmp:
        rows = measure(args.n, args.runs, Path(tmp))
    print(json.dumps(rows, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
