"""Redaction quality and cost on the secret corpus (issue 26 item 3).

    python bench/redaction.py [--json bench/results/redaction.json]

Quality: of `tests/data/secrets/positives.jsonl`, the formats hidden whole (no 8-character
piece of a secret left); of `negatives.txt`, the lines changed; of the source of the modules
`tests/integration/test_capture_secrets.py` reads (standard library and dependencies), the
lines changed; and of random mixed-case letter strings (12-24 letters, seeded) after secret
names in six shapes, the share hidden. Cost: microseconds per KB to redact the negatives
(ordinary session text) and the positives, best of 5 passes.

Run it with PYTHONPATH pointing at another checkout's `src` to measure that one.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "secrets"
SHAPES = (
    "PASSWORD={}",
    "API_TOKEN={}",
    "export DB_PASSWORD={}",
    "  password: {}",
    '{{"password": "{}"}}',
    "deploy --token {}",
)


def leaked(secrets: list[str], text: str) -> bool:
    return any(s[i : i + 8] in text for s in secrets for i in range(max(1, len(s) - 7)))


def timed(redact: Any, lines: list[str]) -> float:
    """CPU microseconds per KB, best of 5 passes (CPU time: the machine is shared)."""
    size = sum(len(line) + 1 for line in lines) / 1024
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for line in lines:
            redact(line)
        best = min(best, time.process_time() - start)
    return best * 1e6 / size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from memoryd.redact import redact

    sys.path.insert(0, str(ROOT))
    from tests.integration.test_capture_secrets import library_lines

    positives = [json.loads(line) for line in (DATA / "positives.jsonl").read_text().splitlines()]
    negatives = [line for line in (DATA / "negatives.txt").read_text().splitlines() if line]
    missed = [r["format"] for r in positives if leaked(r["secrets"], redact(r["text"]))]
    changed = [line for line in negatives if redact(line) != line]
    library = library_lines()
    hidden_library = sum(redact(line) != line for line in library)
    rng = random.Random(26)
    letters: dict[str, float] = {}
    for shape in SHAPES:
        values = [
            "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(12, 24)))
            for _ in range(200)
        ]
        kept = sum(leaked([v], redact(shape.format(v))) for v in values)
        letters[shape] = round(1 - kept / len(values), 3)
    result = {
        "positives": len(positives),
        "positives_missed": missed,
        "negatives": len(negatives),
        "negatives_changed": changed,
        "library_lines": len(library),
        "library_changed": hidden_library,
        "letters_hidden": letters,
        "us_per_kb_negatives": round(timed(redact, negatives), 1),
        "us_per_kb_positives": round(timed(redact, [r["text"] for r in positives]), 1),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
