"""Wall time of the `memoryd inject` hook process, from a cold start to a warm daemon.

usage: python bench/inject.py [N] [--baseline K] [--home HOME --cwd PROJECT]

The data dir is a temp one with 300 memories, or a copy of `--home` (a prebuilt bench home,
e.g. `bench/http.py`'s HOME/<n>/home; copied with `cp -a`, never changed), whose prompts come
from the bench corpus's queries (`_corpus.queries`) in the scope of `--cwd` (one of the
home's project paths, as its scope.json names it: the hook reads nothing there).

1. cold: no daemon, autostart on (as a user's first prompt after boot): the first prompt's wall
   and CPU, then one prompt every 0.5 s until one gets recall (the hook started the daemon);
2. warm: N SessionStart and N UserPromptSubmit hooks against that daemon (p50 / p95);
3. `--baseline K`: K prompts with `MEMORYD_NO_AUTOSTART=1` and no daemon (recall in the hook's
   own process, what every prompt cost before hooks started the daemon).
Prints a table and writes bench/results/inject.json. Targets: the first prompt <= 1.5 s wall,
p95 <= 150 ms with the daemon (issue 29).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = [sys.executable, "-m", "memoryd"]
FIRST_TARGET_MS = 1500
WARM_TARGET_MS = 150


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hook(home: Path, payload: dict[str, str], env: dict[str, str]) -> tuple[float, float, bool]:
    """One hook process: wall ms, CPU ms, whether it injected memories."""
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(
        [*EXE, "inject", "--source=claude-code", "--home", str(home)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    wall = (time.perf_counter() - start) * 1000
    if proc.returncode != 0 or proc.stderr:
        raise SystemExit(f"the hook failed: {proc.returncode} {proc.stderr}")
    return wall, (_children_cpu() - cpu) * 1000, "additionalContext" in proc.stdout


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def seed(home: Path, project: Path) -> None:
    import memoryd
    from memoryd.models import MemoryDraft, MemoryType

    with memoryd.open(home) as svc:
        kinds = list(MemoryType)
        svc.record_many(
            [
                MemoryDraft(
                    type=kinds[i % len(kinds)],
                    title=f"Memory {i} about topic {i % 17}",
                    body=f"Decision {i}: we use tool{i % 23} for task{i % 11}. It works.",
                    scope_path=project,
                    allow_duplicate=True,
                )
                for i in range(300)
            ]
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="?", type=int, default=20)
    parser.add_argument("--baseline", type=int, default=0, metavar="K")
    parser.add_argument("--home", type=Path, help="a prebuilt home to copy instead of 300 memories")
    parser.add_argument("--cwd", type=Path, help="with --home: the project the prompts come from")
    opts = parser.parse_args()
    if (opts.home is None) != (opts.cwd is None):
        parser.error("--home and --cwd go together")
    tmp = Path(tempfile.mkdtemp(prefix="mdbi-"))
    try:
        run(opts, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(opts: argparse.Namespace, tmp: Path) -> None:
    home = tmp / "home"
    if opts.home is None:
        project = tmp / "project"
        project.mkdir()
        seed(home, project)
        prompts = ["do we use tool3 for task3?"]
    else:
        subprocess.run(["cp", "-a", str(opts.home), str(home)], check=True)
        project = opts.cwd
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _corpus import queries

        prompts = queries(max(opts.runs, 1))
    env = {k: v for k, v in os.environ.items() if k != "MEMORYD_NO_AUTOSTART"}
    env.update({"MEMORYD_DAEMON__AUTOSTART": "1", "MEMORYD_DAEMON__PORT": "0"})
    start_payload = {"hook_event_name": "SessionStart", "cwd": str(project)}
    prompt = {"hook_event_name": "UserPromptSubmit", "cwd": str(project), "prompt": prompts[0]}
    result: dict[str, object] = {
        "first_target_ms": FIRST_TARGET_MS,
        "warm_target_p95_ms": WARM_TARGET_MS,
        "load_1min": os.getloadavg()[0],
    }
    rows = []
    try:
        if opts.baseline:
            off = {**env, "MEMORYD_NO_AUTOSTART": "1"}
            runs = [hook(home, prompt, off) for _ in range(opts.baseline)]
            result["baseline_no_daemon"] = {
                "runs": opts.baseline,
                "wall_ms": [round(r[0]) for r in runs],
                "cpu_ms": [round(r[1]) for r in runs],
                "recalled": sum(r[2] for r in runs),
            }
        t0 = time.perf_counter()
        wall, cpu, recalled = hook(home, prompt, env)
        later = []
        while not later or not later[-1][2]:
            if time.perf_counter() - t0 > 120:
                raise SystemExit("no prompt got recall within 120 s of the first")
            time.sleep(0.5)
            later.append(hook(home, prompt, env))
        result["cold"] = {
            "first_wall_ms": round(wall),
            "first_cpu_ms": round(cpu),
            "first_recalled": recalled,
            "prompts_without_recall": int(not recalled) + sum(not r[2] for r in later),
            "first_recall_after_s": round(time.perf_counter() - t0, 1),
        }
        for payload in (start_payload, prompt):
            times = [
                hook(home, {**payload, "prompt": prompts[i % len(prompts)]}, env)
                if "prompt" in payload
                else hook(home, payload, env)
                for i in range(opts.runs)
            ]
            walls = [t[0] for t in times]
            rows.append(
                {
                    "event": payload["hook_event_name"],
                    "runs": opts.runs,
                    "p50_ms": round(percentile(walls, 0.5), 1),
                    "p95_ms": round(percentile(walls, 0.95), 1),
                    "cpu_p50_ms": round(percentile([t[1] for t in times], 0.5), 1),
                    "recalled": sum(t[2] for t in times),
                }
            )
    finally:
        subprocess.run([*EXE, "stop", "--home", str(home)], capture_output=True, timeout=90)
    result["warm"] = rows
    result["home"] = str(opts.home) if opts.home else "300 memories"
    result["load_1min_end"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    out = Path(__file__).parent / "results" / "inject.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
