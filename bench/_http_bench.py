"""HTTP benchmark: recall (and search) latency over the daemon's Unix socket (run bench/http.py).

For each corpus size the memories are ingested in-process with `record_many` (extraction on,
so recall has entities to traverse), then a real `memoryd serve` is started and queried by 1
and by 8 concurrent clients (threads, one keep-alive connection each).

    python bench/http.py                      # 10k and 100k, JSON in bench/results/http.json
    python bench/http.py --sizes 10000 --queries 200 --json /tmp/http.json
    python bench/http.py --home /tmp/h --settled  # build the homes once in /tmp/h/<n>, reuse

`--settled` marks the sessions the ingest queued for enrichment done before the daemon starts
(the recall without a backlog; `bench/backlog.py` measures it with one). Each row gives the
CPU per request of the daemon and its recall readers (/proc) and the load average.

Before each endpoint's first timed row, `--warmup` requests of that endpoint (default: 4
passes over the query set, as many as the 8-client row sends), untimed, sent by as many
clients as the largest `--clients`, warm the daemon and every recall reader; before every
timed row the daemon settles (`settle`: no write queued, its CPU and its readers' idle), so
a row pays nothing the one before left.
The first client count (x1) then runs again after the others, so one run gives the
many-client ratio both ways (x1 before x8, and x8 before x1) and `speedup` divides by the mean
of the two x1 rows (`repeat` marks the second).

Targets (issue 4): recall p95 <= 25 ms single-client at 10k and <= 50 ms at 100k; with 8
clients, total throughput >= 1.6x one client's (this machine has 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

import memoryd
from _corpus import drafts, queries
from memoryd.client.connect import socket_accepts
from memoryd.config import load_settings
from memoryd.scope import resolve_scope

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.daemon_harness import reader_pids  # the repository root, just added

BENCH_DIR = Path(__file__).resolve().parent
TARGET_P95_MS = {10_000: 25.0, 100_000: 50.0}
TARGET_SPEEDUP = 1.6
WARMUP_PASSES = 4
"""The default warm-up, in passes over the query set (the runs that chose it: bench/RESULTS.md,
s-timer)."""
INGEST_CHUNK = 10_000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ingest(home: Path, projects: Path, n: int, extraction: bool, engine: str) -> dict[str, Any]:
    started = time.perf_counter()
    with memoryd.open(home, graph={"engine": engine}, extraction={"enabled": extraction}) as svc:
        for start in range(0, n, INGEST_CHUNK):
            chunk = drafts(min(INGEST_CHUNK, n - start), projects, start_at=start)
            svc.record_many(chunk)
        entities = svc.cypher("MATCH (e:Entity) RETURN count(e)").rows[0][0]
    return {"ingest_s": round(time.perf_counter() - started, 1), "entities": entities}


class Daemon:
    def __init__(self, home: Path, engine: str) -> None:
        self.home = home
        env = {**os.environ, "MEMORYD_GRAPH__ENGINE": engine}
        log = open(home / "bench-daemon.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--home", str(home), "--no-tcp"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + 120
        while not socket_accepts(home / "memoryd.sock"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon did not start; see {home / 'bench-daemon.log'}")
            time.sleep(0.05)

    def client(self) -> httpx.Client:
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.home / "memoryd.sock")),
            base_url="http://localhost",
            timeout=60.0,
        )

    def stop(self) -> float:
        started = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=300)
        return time.perf_counter() - started


def run_clients(
    daemon: Daemon, path: str, requests: list[dict[str, Any]], clients: int
) -> dict[str, Any]:
    """`clients` threads share the request list round-robin; latency per request, wall time."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def work(mine: list[dict[str, Any]]) -> None:
        local: list[float] = []
        with daemon.client() as http:
            http.get("/v1/health")  # connect before the clock starts
            barrier.wait()
            for params in mine:
                started = time.perf_counter()
                response = http.get(path, params=params)
                local.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    with lock:
                        errors.append(response.text[:200])
        with lock:
            latencies.extend(local)

    threads = [threading.Thread(target=work, args=(requests[i::clients],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(pct(latencies, 0.95), 2),
        "p99_ms": round(pct(latencies, 0.99), 2),
        "req_per_s": round(len(latencies) / wall, 1),
    }


def wait_for_readers(daemon: Daemon, wanted: int) -> None:
    """The daemon starts its recall readers on the first recall: measure once they are up."""
    deadline = time.monotonic() + 120
    with daemon.client() as http:
        while http.get("/v1/health").json().get("recall_readers", 0) < wanted:
            if time.monotonic() > deadline:
                raise SystemExit(f"{wanted} recall readers did not start; see the daemon log")
            time.sleep(0.2)


def warm_up(
    daemon: Daemon, path: str, requests: list[dict[str, Any]], count: int, clients: int
) -> float:
    """`count` requests to `path` cycling over `requests`, by `clients` clients (so every
    recall reader gets its share), untimed: the first timed row then finds the caches as the
    later ones do. Returns the seconds it took."""
    if count <= 0:
        return 0.0
    load = [requests[i % len(requests)] for i in range(count)]
    started = time.perf_counter()
    result = run_clients(daemon, path, load, max(1, clients))
    if result["errors"]:
        raise SystemExit(f"the warm-up got {result['errors']} errors; see the daemon log")
    return time.perf_counter() - started


SETTLE_WINDOW_S = 0.5
SETTLE_IDLE = 0.1
"""Settled: the daemon and its readers used under this share of one core over a window."""
SETTLE_MAX_S = 60.0


def settle(daemon: Daemon) -> float:
    """Wait until the daemon has no write queued (recall counts the rows before made) and it
    and its readers are idle; at most `SETTLE_MAX_S`. Returns the seconds waited."""
    from backlog import daemon_cpu  # backlog imports this module

    started = time.perf_counter()
    pid = daemon.process.pid
    with daemon.client() as http:
        while time.perf_counter() - started < SETTLE_MAX_S:
            before = daemon_cpu(pid)
            time.sleep(SETTLE_WINDOW_S)
            idle = daemon_cpu(pid) - before < SETTLE_IDLE * SETTLE_WINDOW_S
            if idle and not http.get("/v1/health").json()["pending_writes"]:
                break
    return time.perf_counter() - started


def ratios(rows: list[dict[str, Any]], n: int, endpoint: str) -> dict[str, Any] | None:
    """The many-client throughput over one client's, x1 measured before and after x8, and
    over the mean of the two; None without both counts."""
    mine = [r for r in rows if r["n"] == n and r["endpoint"] == endpoint]
    ones = [r for r in mine if r["clients"] == 1]
    many = next((r for r in mine if r["clients"] > 1), None)
    if not ones or many is None:
        return None
    before = next((r for r in ones if not r.get("repeat")), ones[0])
    after = next((r for r in ones if r.get("repeat")), before)
    base = (before["req_per_s"] + after["req_per_s"]) / 2
    return {
        "clients": many["clients"],
        "x1_first_req_per_s": before["req_per_s"],
        "x1_after_req_per_s": after["req_per_s"],
        "many_req_per_s": many["req_per_s"],
        "x1_first": round(many["req_per_s"] / before["req_per_s"], 2),
        "many_first": round(many["req_per_s"] / after["req_per_s"], 2),
        "mean": round(many["req_per_s"] / base, 2),
    }


def bench_size(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.home is None:
        with tempfile.TemporaryDirectory(prefix="memoryd-http-") as tmp:
            return bench_home(n, Path(tmp), args)
    return bench_home(n, args.home / str(n), args)


def bench_home(n: int, root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from backlog import cpu_s, daemon_cpu, settle_queue  # backlog imports this module

    home, projects = root / "home", root / "projects"
    if home.exists():
        print(f"[{n}] reusing {home}", flush=True)
        facts: dict[str, Any] = {"ingest_s": None, "entities": None}
    else:
        print(f"[{n}] ingesting …", flush=True)
        facts = ingest(home, projects, n, args.extraction, args.engine)
        print(f"[{n}] ingested in {facts['ingest_s']}s ({facts['entities']} entities)", flush=True)
    if args.settled:
        settle_queue(home)
    scopes = [
        resolve_scope(projects / f"project-{i:02d}", with_remote=False).scope_hash
        for i in range(20)
    ]
    texts = queries(args.queries)
    requests = [
        {"q": q, "scope": scopes[i % len(scopes)], "limit": 10, "track": args.track}
        for i, q in enumerate(texts)
    ]
    daemon = Daemon(home, args.engine)
    rows: list[dict[str, Any]] = []
    try:
        run_clients(daemon, "/v1/recall", requests[:20], 1)  # starts the recall readers
        wait_for_readers(daemon, load_settings(home).daemon.reader_count())
        for path in ("/v1/recall", "/v1/search"):
            endpoint = path.rsplit("/", 1)[-1]
            params = (
                requests
                if endpoint == "recall"
                else [{k: v for k, v in r.items() if k != "track"} for r in requests]
            )
            warmup_s = warm_up(daemon, path, params, args.warmup, max(args.clients))
            print(f"[{n}] {endpoint:6} warm-up: {args.warmup} requests in {warmup_s:.1f}s"
                  " (untimed)", flush=True)  # fmt: skip
            # The first count again last: a ratio measured both ways round (module docstring).
            runs = [*args.clients, args.clients[0]] if len(args.clients) > 1 else args.clients
            for run, clients in enumerate(runs):
                # 8 clients send 4x the requests: long enough for a steady state.
                load = params * (4 if clients > 1 else 1)
                settle_s = settle(daemon)
                pid, load_before = daemon.process.pid, os.getloadavg()[0]
                cpu_before, own_before = daemon_cpu(pid), cpu_s(pid)
                result = run_clients(daemon, path, load, clients)
                done = result["requests"] or 1
                result["cpu_ms_per_request"] = round(
                    (daemon_cpu(pid) - cpu_before) * 1000 / done, 2
                )
                result["daemon_ms_per_request"] = round((cpu_s(pid) - own_before) * 1000 / done, 2)
                result["load"] = round((load_before + os.getloadavg()[0]) / 2, 2)
                with daemon.client() as http:
                    health = http.get("/v1/health").json()
                result |= {
                    "n": n,
                    "endpoint": endpoint,
                    "clients": clients,
                    "repeat": run >= len(args.clients),
                    "order": run,
                    "warmup_requests": args.warmup,
                    "settle_s": round(settle_s, 1),
                    "pending_writes_after": health["pending_writes"],
                    "daemon_rss_mb": round(rss_mb(daemon.process.pid), 1),
                    "recall_readers": health.get("recall_readers", 0),
                    "readers_rss_mb": round(
                        sum(rss_mb(p) for p in reader_pids(daemon.process.pid)), 1
                    ),
                    **facts,
                }
                rows.append(result)
                again = " (again)" if result["repeat"] else ""
                print(
                    f"[{n}] {endpoint:6} x{clients}{again}: p50 {result['p50_ms']} ms,"
                    f" p95 {result['p95_ms']} ms, {result['req_per_s']} req/s,"
                    f" CPU {result['cpu_ms_per_request']} ms a request (daemon's own"
                    f" {result['daemon_ms_per_request']}), load {result['load']}",
                    flush=True,
                )
    finally:
        shutdown_s = daemon.stop()
    for row in rows:
        row["shutdown_s"] = round(shutdown_s, 2)
    return rows


def verdicts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, target in TARGET_P95_MS.items():
        one = next((r for r in rows if r["n"] == n and r["endpoint"] == "recall"
                    and r["clients"] == 1 and not r.get("repeat")), None)  # fmt: skip
        if one is None:
            continue
        out[f"recall_p95_{n}"] = {
            "target_ms": target,
            "measured_ms": one["p95_ms"],
            "ok": one["p95_ms"] <= target,
        }
        ratio = ratios(rows, n, "recall")
        if ratio is not None:
            # Over the mean of x1 before and after the many clients: neither order favoured.
            out[f"recall_speedup_{n}"] = {
                "target": TARGET_SPEEDUP,
                "measured": ratio["mean"],
                "ok": ratio["mean"] >= TARGET_SPEEDUP,
                "x1_first": ratio["x1_first"],
                "many_first": ratio["many_first"],
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--queries", type=int, default=300, help="distinct queries per run")
    parser.add_argument("--warmup", type=int,
                        help="untimed requests before each endpoint's first row"
                             f" (default {WARMUP_PASSES} passes over the queries)")  # fmt: skip
    parser.add_argument("--engine", default="kuzu", choices=["kuzu", "ladybug"])
    parser.add_argument("--no-extraction", dest="extraction", action="store_false")
    parser.add_argument("--home", type=Path, help="keep the homes in HOME/<n>; reuse them")
    parser.add_argument("--settled", action="store_true",
                        help="mark the enrichment queue done before serving")  # fmt: skip
    parser.add_argument("--no-track", dest="track", action="store_false",
                        help="recall without counting hits (no writes)")  # fmt: skip
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "http.json"
    )
    args = parser.parse_args()
    if args.warmup is None:
        args.warmup = WARMUP_PASSES * args.queries
    os.environ.setdefault("MEMORYD_CONFIG", os.devnull)  # the user's config must not leak in

    rows = [row for n in args.sizes for row in bench_size(n, args)]
    print()
    print(f"{'memories':>9} {'endpoint':8} {'clients':>7} {'p50 ms':>8} {'p95 ms':>8}"
          f" {'req/s':>8} {'speedup':>8}")  # fmt: skip
    for row in rows:
        ones = [r["req_per_s"] for r in rows if r["n"] == row["n"]
                and r["endpoint"] == row["endpoint"] and r["clients"] == 1]  # fmt: skip
        speedup = row["req_per_s"] / statistics.mean(ones)  # over the mean of the x1 rows
        clients = f"{row['clients']}{'*' if row.get('repeat') else ''}"
        print(f"{row['n']:>9} {row['endpoint']:8} {clients:>7} {row['p50_ms']:>8}"
              f" {row['p95_ms']:>8} {row['req_per_s']:>8} {speedup:>7.2f}x")  # fmt: skip
    print("(* x1 again after the others; speedup is over the mean of the x1 rows)")
    both = {f"{endpoint}_{n}": ratio for n in args.sizes for endpoint in ("recall", "search")
            if (ratio := ratios(rows, n, endpoint)) is not None}  # fmt: skip
    for name, ratio in both.items():
        print(
            f"{name}: x{ratio['clients']}/x1 = {ratio['x1_first']}x with x1 first,"
            f" {ratio['many_first']}x with x{ratio['clients']} first, {ratio['mean']}x"
            " over their mean"
        )
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "engine": args.engine,
        "extraction": args.extraction,
        "track": args.track,
        "transport": "unix socket, HTTP/1.1 keep-alive, one connection per client",
        "warmup_requests": args.warmup,
        "results": rows,
        "ratios": both,
        "targets": verdicts(rows),
    }
    print()
    for name, verdict in report["targets"].items():
        print(f"{name}: {verdict}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten {args.json}")


if __name__ == "__main__":
    main()
