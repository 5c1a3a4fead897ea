"""Sync benchmark: `sync export` and `sync import` of N memories (default 100k), each in its
own child process so its wall time and peak RSS are its own.

    python bench/sync.py [--n 100000] [--dir DIR] [--json bench/results/sync-100000.json]

The corpus is bench/_corpus's (20 scopes, English and Chinese), recorded without extraction
(spaCy over 100k bodies would dominate the run). Targets (issue 18): export ≤ 60 s and
≤ 1 GB peak RSS; the same for an import into an empty data dir. A second import of the
same file (idempotent: nothing written) and a second export (byte-identical) are measured
too.

With `--work`, each run imports into a fresh `WORK/imports/<time>` and deletes no earlier
import: on ext4 without a journal (as on the dev VM), creating a file scans past every
inode of its block group freed in the last 1-5 minutes, so removing the last run's 100k files
right before an import added up to 45 s of kernel time to it (issue 18, session 11). Remove
`WORK/imports` when no run follows within 5 minutes. Other processes' deletions near WORK
count too (the same block groups): under /tmp, where other benchmarks remove 100k-file
trees, the import took 7-39 s of kernel time; in a top-level folder nobody else writes to,
7.2-8.1 s in all three runs. Put WORK in such a folder for numbers that repeat.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).parent))  # after the stdlib

LIMIT_S = 60.0
LIMIT_MB = 1024.0


def child(argv: list[str]) -> dict[str, float]:
    """Run one phase in a fresh interpreter: its wall time and its own peak RSS (MB)."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"phase {argv[1]} failed:\n{proc.stderr}")
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    data["wall_s"] = round(seconds, 2)
    data["load_start"] = load
    return data


def phase(name: str, home: Path, file: Path, n: int, root: Path) -> None:
    import memoryd
    from _corpus import drafts

    started = time.perf_counter()
    out: dict[str, float] = {}
    # The corpus is recorded without extraction: spaCy over 100k bodies takes far longer than
    # what is measured here. Its entities, relations and supersedes sections are small.
    settings = {"extraction": {"enabled": False}} if name == "corpus" else {}
    with memoryd.open(home, **settings) as api:
        if name == "corpus":
            step = 10_000
            for start in range(0, n, step):
                api.record_many(drafts(min(step, n - start), root, start_at=start))
        elif name == "export":
            report = api.sync_export(file, include_audit_chain=True)
            out["memories"] = report.memories
            out["bytes"] = report.bytes
        elif name == "import":
            imported = api.sync_import(file, scope=root)
            out["added"] = len(imported.added)
            out["unchanged"] = imported.unchanged
            out["audit_events"] = imported.audit_events_imported
    out["seconds"] = round(time.perf_counter() - started, 2)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)  # honest on a loaded machine
    out["user_s"] = round(usage.ru_utime, 2)
    out["sys_s"] = round(usage.ru_stime, 2)  # kernel time: see the docstring
    out["load_end"] = os.getloadavg()[0]
    out["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    print(json.dumps(out))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--work", type=Path, default=None, help="Keep the data dirs here; reuse its corpus."
    )
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        phase(args.phase, args.home, args.file, args.n, args.root)
        return
    os.environ.setdefault("MEMORYD_CONFIG", os.devnull)
    os.environ.setdefault("MEMORYD_RECALL__VECTORS", "off")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = args.work or Path(tmp)
        a, root, file = base / "a", base / "projects", base / "memories.json"
        b = base / "b"
        if args.work:  # a fresh home, nothing deleted before the import (see the docstring)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            b = base / "imports" / f"{stamp}-{os.getpid()}"
        common = ["--n", str(args.n), "--root", str(root), "--file", str(file)]
        corpus = {"seconds": 0.0, "peak_rss_mb": 0.0, "reused": 1.0}
        if not (a / "scopes").is_dir():
            corpus = child(["--phase", "corpus", "--home", str(a), *common])
        export = child(["--phase", "export", "--home", str(a), *common])
        first = sha(file)
        again = child(["--phase", "export", "--home", str(a), *common])
        identical = sha(file) == first
        imported = child(["--phase", "import", "--home", str(b), *common])
        reimported = child(["--phase", "import", "--home", str(b), *common])
    result = {
        "n": args.n,
        "corpus": corpus,
        "export": export,
        "export_again": again,
        "export_byte_identical": identical,
        "import": imported,
        "import_again": reimported,
        "targets": {"seconds": LIMIT_S, "peak_rss_mb": LIMIT_MB},
        "ok": all(
            r["seconds"] <= LIMIT_S and r["peak_rss_mb"] <= LIMIT_MB for r in (export, imported)
        )
        and identical,
    }
    print(f"{'phase':<14}{'seconds':>10}{'cpu s':>10}{'sys s':>10}{'peak RSS MB':>14}{'load':>8}")
    for name in ("corpus", "export", "export_again", "import", "import_again"):
        row = result[name]
        assert isinstance(row, dict)
        print(
            f"{name:<14}{row['seconds']:>10}{row.get('cpu_s', 0):>10}{row.get('sys_s', 0):>10}"
            f"{row['peak_rss_mb']:>14}{row.get('load_start', 0):>8.1f}"
        )
    print(f"byte-identical re-export: {identical}; within targets: {result['ok']}")
    if args.work:
        print(f"the imported home is kept in {b} (see the docstring before removing it)")
    target = args.json or Path(__file__).parent / "results" / f"sync-{args.n}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
