"""Two commits side by side on the paths a user waits on, in interleaved pairs (issue 28).

    python bench/compare.py BASE [HEAD] [--n 10000] [--rounds 3] [--workdir DIR]
                            [--paths recall,daemon,writes,capture]
                            [--json bench/results/compare.json]

Each commit is taken out with `git archive` into `<workdir>/<sha>` and run in its own
environment: when its dependencies (pyproject's `dependencies` and `optional-dependencies`)
are those of the checkout this script runs from, that checkout's venv with the commit's `src`
first on PYTHONPATH (said in the output: `env shared`); otherwise a venv of its own under
`<workdir>/<sha>/.venv` with the commit installed into it (pip's cache is reused); either way
its modules are compiled to bytecode first, as pip does on install. Each side builds its own
home from the same corpus (`_corpus.drafts`, extraction off, session memories recorded as
decisions so no enrichment backlog runs during the measurements; `--scopes` scopes, the first
one recalled), kept as built and copied afresh for every run, and a separate home for the
capture hook.

Each round runs every path on both sides one after the other, the side that goes first
alternating, so both see the same load:

- `recall` (a fresh process, twice): `memoryd.open`, the first recall, then 60 recalls
  (p50/p95, CPU median) in process; the first process's first recall follows the last
  round's `writes` (which dropped the scope's saved statistics: it counts them and saves),
  the second's loads them;
- `daemon`: a fresh `memoryd serve` (Unix socket): its first recall (wall, and the daemon
  process's CPU: it runs there while the readers start), then, once its readers are up,
  100 recalls (p50/p95, CPU per recall), 10 records through `POST /v1/memories`, and 15
  `memoryd inject` hooks (UserPromptSubmit, p50/p95 wall, CPU p50); stopped after;
- `writes` (a fresh process, default config: extraction on): `record` of one decision (10),
  `record_many` of 50 (3 batches, per memory);
- `capture`: 8 `memoryd capture` hooks on a 2 MB transcript (`bench/capture.py`'s), a new
  session each; then 8 more while the side's daemon serves the home they capture into (it
  indexes and enriches what they write: the hook's time beside its daemon).

`--paths` runs only some of these (the table leaves the others blank). Prints, per metric,
the medians of both sides and the median over rounds of the per-round ratio new/old (< 1: the
new side is faster), with the 1-minute load average seen during the run; writes everything
(every round's numbers) as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from _corpus import queries  # noqa: E402
from capture import Synth, payload  # noqa: E402

PROBE = BENCH / "_compare_probe.py"
TRANSCRIPT_BYTES = 2 * 1024 * 1024


class Side:
    """One commit: its tree, how to run Python on it, and its homes."""

    def __init__(self, name: str, sha: str, root: Path) -> None:
        self.name, self.sha, self.root = name, sha, root
        self.tree = root / "tree"
        self.home = root / "home"
        self.projects = root / "projects"
        self.capture_home = root / "capture-home"
        self.python = sys.executable
        self.shared_env = True
        self.env: dict[str, str] = {}

    @property
    def project(self) -> Path:
        return self.projects / "project-00"

    def prepare(self) -> None:
        if not self.tree.exists():
            self.tree.mkdir(parents=True)
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", self.sha], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(self.tree)], input=archive, check=True)
        self.shared_env = _dependencies(self.tree) == _dependencies(REPO)
        if self.shared_env:
            # Bytecode, as pip writes it for an installed package: without it every process
            # of this side compiles what it imports from source (more so with
            # PYTHONDONTWRITEBYTECODE set), and the side in its own venv does not.
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(self.tree / "src")], check=True
            )
        else:
            venv = self.root / ".venv"
            if not (venv / "bin" / "python").exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                subprocess.run(
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(self.tree)],
                    check=True,
                )
            self.python = str(venv / "bin" / "python")
        self.env = {
            **os.environ,
            "PYTHONPATH": f"{self.tree / 'src'}" if self.shared_env else "",
            "MEMORYD_CONFIG": os.devnull,
            "MEMORYD_DAEMON__AUTOSTART": "0",
            "MEMORYD_NO_AUTOSTART": "1",
        }
        where = self.run(["-c", "import memoryd; print(memoryd.__file__)"]).strip()
        expected = self.tree / "src" if self.shared_env else self.root / ".venv"
        if not where.startswith(str(expected)):
            raise SystemExit(f"{self.name}: memoryd imports from {where}, not {expected}")

    def run(self, args: list[str], env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [self.python, *args], env=env or self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def probe(self, *args: object) -> dict[str, Any]:
        out = self.run([str(PROBE), *map(str, args)])
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result


def _dependencies(tree: Path) -> tuple[object, object]:
    project = tomllib.loads((tree / "pyproject.toml").read_text())["project"]
    return project.get("dependencies"), project.get("optional-dependencies")


def _cpu_ms(pid: int) -> float:
    """User + system CPU of a live process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _family_cpu_ms(pid: int) -> float:
    """The CPU of a daemon and of its children (the recall readers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return _cpu_ms(pid) + sum(_cpu_ms(int(child)) for child in children)


def _children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


@contextlib.contextmanager
def serving(side: Side, home: Path) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """A `memoryd serve` of `side` on `home` (Unix socket only), once it answers; stopped
    (SIGTERM, as a user's `memoryd stop`) after."""
    log = open(side.root / "daemon.log", "ab")  # noqa: SIM115 - owned by the process
    process = subprocess.Popen(
        [side.python, "-m", "memoryd", "serve", "--home", str(home), "--no-tcp"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=side.env,
    )
    log.close()
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{side.name}: the daemon did not start; see {log.name}")
            try:
                transport = httpx.HTTPTransport(uds=str(home / "memoryd.sock"))
                http = httpx.Client(transport=transport, base_url="http://localhost", timeout=120)
                http.get("/v1/health").raise_for_status()
                break
            except (httpx.HTTPError, OSError):
                http.close()
                time.sleep(0.05)
        try:
            yield process, http
        finally:
            http.close()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def daemon_paths(side: Side, scope: Path, texts: list[str], serial: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with serving(side, side.home) as (process, http):
        time.sleep(1.0)  # the start-up's own work settles (the same wait on both sides)
        params: dict[str, Any] = {"scope": str(scope), "track": False, "limit": 10}
        # The first recall runs in the daemon itself (its readers start meanwhile, in
        # processes of their own: their start-up is not this recall's CPU).
        cpu, started = _cpu_ms(process.pid), time.perf_counter()
        http.get("/v1/recall", params={**params, "q": texts[0]}).raise_for_status()
        out["daemon_first_wall_ms"] = round((time.perf_counter() - started) * 1000, 1)
        out["daemon_first_cpu_ms"] = round(_cpu_ms(process.pid) - cpu, 1)
        # The first recall starts the recall readers, one per core, at most 4 (a version
        # without them has no such field): the steady state is measured once they are
        # up, after their first calls.
        wanted = min(4, os.cpu_count() or 1) if (os.cpu_count() or 1) > 1 else 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if http.get("/v1/health").json().get("recall_readers", wanted) >= wanted:
                break
            time.sleep(0.2)
        for q in texts[2:12]:
            http.get("/v1/recall", params={**params, "q": q}).raise_for_status()
        walls: list[float] = []
        cpu = _family_cpu_ms(process.pid)
        for q in texts[12:112]:
            started = time.perf_counter()
            http.get("/v1/recall", params={**params, "q": q}).raise_for_status()
            walls.append((time.perf_counter() - started) * 1000)
        out["http_recall_p50_ms"] = _pct(walls, 0.5)
        out["http_recall_p95_ms"] = _pct(walls, 0.95)
        out["http_recall_cpu_ms"] = round((_family_cpu_ms(process.pid) - cpu) / len(walls), 2)
        walls, cpu = [], _family_cpu_ms(process.pid)
        for i in range(10):
            body = {
                "type": "decision",
                "title": f"Route {serial}.{i}: use Envoy in front of the API",
                "body": f"We put Envoy in front of the API for retries ({serial}.{i}).",
                "scope": str(scope),
            }
            started = time.perf_counter()
            http.post("/v1/memories", json=body).raise_for_status()
            walls.append((time.perf_counter() - started) * 1000)
        out["http_record_p50_ms"] = _pct(walls, 0.5)
        out["http_record_cpu_ms"] = round((_family_cpu_ms(process.pid) - cpu) / len(walls), 2)
        out |= inject_hooks(side, scope, texts[0])
    return out


def inject_hooks(side: Side, scope: Path, text: str) -> dict[str, Any]:
    """`memoryd inject` as Claude Code's UserPromptSubmit hook, against the running daemon
    (`text`: a prompt whose recall scores over the injection floor on the bench corpus)."""
    prompt = {"hook_event_name": "UserPromptSubmit", "cwd": str(scope), "prompt": text}
    walls, cpus, injected = [], [], 0
    for _ in range(15):
        cpu, started = _children_cpu_ms(), time.perf_counter()
        done = subprocess.run(
            [side.python, "-m", "memoryd", "inject", "--source=claude-code", f"--home={side.home}"],
            input=json.dumps(prompt),
            capture_output=True,
            text=True,
            env=side.env,
            timeout=120,
        )
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append(_children_cpu_ms() - cpu)
        if done.returncode != 0:
            raise SystemExit(f"{side.name}: the inject hook failed: {done.stderr[-2000:]}")
        injected += "additionalContext" in done.stdout
    return {
        "inject_p50_ms": _pct(walls, 0.5),
        "inject_p95_ms": _pct(walls, 0.95),
        "inject_cpu_ms": round(statistics.median(cpus), 1),
        "inject_recalled": injected,
    }


def capture_hooks(side: Side, transcript: Path, project: Path) -> dict[str, Any]:
    """8 capture hooks with no daemon, then 8 while the side's daemon serves the home they
    capture into (it indexes and enriches what they write: its reply to captures)."""
    out = _capture_runs(side, transcript, project, "capture")
    with serving(side, side.capture_home):
        time.sleep(1.0)  # the start-up's own work settles (the same wait on both sides)
        out |= _capture_runs(side, transcript, project, "capture_daemon")
    return out


def _capture_runs(side: Side, transcript: Path, project: Path, name: str) -> dict[str, Any]:
    env = {**side.env, "MEMORYD_HOME": str(side.capture_home)}
    walls, cpus = [], []
    for _ in range(8):
        stdin = payload(str(uuid.uuid4()), transcript, project)
        cpu, started = _children_cpu_ms(), time.perf_counter()
        done = subprocess.run(
            [side.python, "-m", "memoryd", "capture", "--source=claude-code"],
            input=stdin,
            capture_output=True,
            env=env,
        )
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append(_children_cpu_ms() - cpu)
        if done.returncode != 0:
            raise SystemExit(f"{side.name}: the capture hook failed: {done.stderr[-2000:]!r}")
    return {
        f"{name}_p50_ms": _pct(walls, 0.5),
        f"{name}_p95_ms": _pct(walls, 0.95),
        f"{name}_cpu_ms": round(statistics.median(cpus), 1),
    }


# metric → (CPU metric or None): the rows of the table, wall first.
ROWS: list[tuple[str, str, str | None]] = [
    ("recall in process", "recall_p50_ms", "recall_cpu_ms"),
    ("recall in process p95", "recall_p95_ms", None),
    ("first recall, fresh process", "first_wall_ms", "first_cpu_ms"),
    ("first recall after CLI writes", "after_writes_first_wall_ms", "after_writes_first_cpu_ms"),
    ("memoryd.open", "open_wall_ms", "open_cpu_ms"),
    ("record (1 decision)", "record_p50_ms", "record_cpu_ms"),
    ("record p95", "record_p95_ms", None),
    ("record_many of 50, per memory", "record_many_per_memory_ms", "record_many_cpu_per_memory_ms"),
    ("daemon: first recall", "daemon_first_wall_ms", "daemon_first_cpu_ms"),
    ("daemon: HTTP recall", "http_recall_p50_ms", "http_recall_cpu_ms"),
    ("daemon: HTTP recall p95", "http_recall_p95_ms", None),
    ("daemon: HTTP record", "http_record_p50_ms", "http_record_cpu_ms"),
    ("inject hook (daemon)", "inject_p50_ms", "inject_cpu_ms"),
    ("inject hook p95", "inject_p95_ms", None),
    ("capture hook (2 MB)", "capture_p50_ms", "capture_cpu_ms"),
    ("capture hook p95", "capture_p95_ms", None),
    ("capture hook beside a daemon", "capture_daemon_p50_ms", "capture_daemon_cpu_ms"),
    ("capture hook beside a daemon p95", "capture_daemon_p95_ms", None),
]


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0:
        return None
    return new / old


def table(rounds: list[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for label, wall, cpu in ROWS:
        row: dict[str, Any] = {"path": label}
        for kind, metric in (("wall", wall), ("cpu", cpu)):
            if metric is None:
                continue
            olds = [r["base"].get(metric) for r in rounds]
            news = [r["head"].get(metric) for r in rounds]
            ratios = [x for o, n in zip(olds, news, strict=True) if (x := _ratio(n, o))]
            if not ratios:
                continue
            row[f"{kind}_old"] = round(statistics.median(o for o in olds if o is not None), 2)
            row[f"{kind}_new"] = round(statistics.median(n for n in news if n is not None), 2)
            row[f"{kind}_ratio"] = round(statistics.median(ratios), 2)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("base")
    parser.add_argument("head", nargs="?", default="HEAD")
    parser.add_argument("--n", type=int, default=10_000, help="memories in each side's home")
    parser.add_argument("--scopes", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="keep trees, venvs and homes here (reused)")
    parser.add_argument(
        "--paths",
        default="recall,daemon,writes,capture",
        help="which paths to run, comma-separated (recall, daemon, writes, capture); "
        "`writes` also drops the statistics the next round's first recall counts",
    )
    parser.add_argument(
        "--json", type=Path, default=BENCH / "results" / "compare.json", help="written at the end"
    )
    args = parser.parse_args()
    paths = [path.strip() for path in args.paths.split(",") if path.strip()]
    unknown = sorted(set(paths) - {"recall", "daemon", "writes", "capture"})
    if unknown:
        parser.error(
            f"--paths: unknown {', '.join(unknown)}; choose from recall, daemon, writes, capture"
        )
    shas = [
        subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for ref in (args.base, args.head)
    ]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="memoryd-compare-"))
    sides = {
        name: Side(name, sha, workdir / f"{name}-{sha[:10]}")
        for name, sha in zip(("base", "head"), shas, strict=True)
    }
    loads: list[float] = [os.getloadavg()[0]]
    texts = queries(120, seed=17)
    recalls = json.dumps(texts[:66])
    transcript = workdir / "transcript.jsonl"
    capture_project = workdir / "capture-project"
    if not transcript.exists():
        (capture_project / ".git").mkdir(parents=True, exist_ok=True)
        Synth(str(uuid.uuid4()), str(capture_project)).write(transcript, TRANSCRIPT_BYTES)
    built: dict[str, Any] = {}
    for side in sides.values():
        side.prepare()
        print(f"{side.name} {side.sha[:10]}: env {'shared' if side.shared_env else 'own venv'}",
              flush=True)  # fmt: skip
        built_home = side.root / "home-built"
        if set(paths) == {"capture"}:  # the capture hook has a home of its own
            continue
        if not (built_home / "governance.db").exists():
            shutil.rmtree(built_home, ignore_errors=True)
            built[side.name] = side.probe("build", built_home, side.projects, args.n, args.scopes)
            print(f"{side.name}: built {args.n} memories in {built[side.name]['built_s']} s",
                  flush=True)  # fmt: skip
        # Every run starts from the home as built: a kept workdir's home would otherwise hold
        # the writes of earlier runs on one side only (more near-duplicate decisions to judge).
        shutil.rmtree(side.home, ignore_errors=True)
        shutil.copytree(built_home, side.home, symlinks=True)
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for number in range(args.rounds):
            order = ["base", "head"] if number % 2 == 0 else ["head", "base"]
            found: dict[str, dict[str, Any]] = {"base": {}, "head": {}}
            tag = f"{number}-{uuid.uuid4().hex[:8]}"  # new bodies: never duplicates
            steps = [
                # After the last round's writes (a CLI writer drops the saved statistics of
                # the scope it changes, on both sides), then once more: saved by the first.
                (
                    "recall",
                    lambda s: {
                        f"after_writes_{k}": v
                        for k, v in s.probe("recall", s.home, s.project, recalls).items()
                        if k.startswith("first_")
                    },
                ),
                ("recall", lambda s: s.probe("recall", s.home, s.project, recalls)),
                ("daemon", lambda s, n=tag: daemon_paths(s, s.project, texts, n)),
                ("writes", lambda s, n=tag: s.probe("writes", s.home, s.project, n)),
                ("capture", lambda s: capture_hooks(s, transcript, capture_project)),
            ]
            for path, step in steps:
                if path not in paths:
                    continue
                for name in order:
                    loads.append(os.getloadavg()[0])
                    found[name] |= step(sides[name])
            found["load"] = {"1min": os.getloadavg()[0]}
            loads.append(os.getloadavg()[0])
            rounds.append(found)
            print(f"round {number + 1}: {json.dumps(found)}", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = table(rounds)
    print(f"\nbase {shas[0][:10]} → head {shas[1][:10]}: n={args.n}, {args.scopes} scope(s), "
          f"{len(rounds)} rounds, load (1 min) {min(loads):.1f}-{max(loads):.1f}")  # fmt: skip
    print(f"{'path':34} {'old ms':>9} {'new ms':>9} {'wall':>6} {'old cpu':>9} {'new cpu':>9} "
          f"{'cpu':>6}")  # fmt: skip
    for row in rows:
        cells = [row.get(k, "") for k in ("wall_old", "wall_new", "wall_ratio")]
        cells += [row.get(k, "") for k in ("cpu_old", "cpu_new", "cpu_ratio")]
        print(f"{row['path']:34} {cells[0]!s:>9} {cells[1]!s:>9} {cells[2]!s:>6} "
              f"{cells[3]!s:>9} {cells[4]!s:>9} {cells[5]!s:>6}")  # fmt: skip
    report = {
        "base": shas[0],
        "head": shas[1],
        "n": args.n,
        "scopes": args.scopes,
        "env": {name: "shared" if s.shared_env else "own venv" for name, s in sides.items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_1min": {"min": min(loads), "max": max(loads)},
        "built": built,
        "rows": rows,
        "rounds": rounds,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.json}")


if __name__ == "__main__":
    main()
