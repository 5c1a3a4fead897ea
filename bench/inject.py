"""Wall time of the `memoryd inject` process (start to exit), daemon running if it starts.

usage: python bench/inject.py [N]   (uses a temp data dir with a few hundred memories)
Prints a table and writes bench/results/inject.json. Target: p95 <= 300 ms with the daemon.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    tmp = Path(tempfile.mkdtemp(prefix="memoryd-bench-inject-"))
    home, project = tmp / "home", tmp / "project"
    project.mkdir()
    exe = [sys.executable, "-m", "memoryd"]
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
    daemon = (
        subprocess.run(
            [*exe, "serve", "--detach", "--home", str(home)],
            capture_output=True,
            text=True,
            timeout=60,
        ).returncode
        == 0
    )
    payloads = [
        {"hook_event_name": "SessionStart", "cwd": str(project)},
        {
            "hook_event_name": "UserPromptSubmit",
            "cwd": str(project),
            "prompt": "which tool do we use for task3?",
        },
    ]
    rows = []
    try:
        for payload in payloads:
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                subprocess.run(
                    [*exe, "inject", "--source=claude-code", "--home", str(home)],
                    input=json.dumps(payload),
                    capture_output=True,
                    text=True,
                )
                times.append((time.perf_counter() - start) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
            rows.append(
                {
                    "event": payload["hook_event_name"],
                    "mode": "daemon" if daemon else "embedded",
                    "runs": runs,
                    "p50_ms": round(times[len(times) // 2], 1),
                    "p95_ms": round(p95, 1),
                }
            )
    finally:
        if daemon:
            subprocess.run([*exe, "stop", "--home", str(home)], capture_output=True, timeout=60)
    print(f"{'event':<18} {'mode':<9} {'runs':>5} {'p50 ms':>8} {'p95 ms':>8}")
    for row in rows:
        print(
            f"{row['event']:<18} {row['mode']:<9} {row['runs']:>5}"
            f" {row['p50_ms']:>8.0f} {row['p95_ms']:>8.0f}"
        )
    out = Path(__file__).parent / "results" / "inject.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"target_p95_ms": 300, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
