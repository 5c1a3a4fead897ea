"""The capture hook loads only what a capture uses: a process that starts for every agent
turn pays for each module and pattern it loads (issue 28: capture p95 <= 100 ms on the 2 MB
transcript, with the hook's own CPU at 90-100 ms). Checked in a fresh interpreter by what was
imported and compiled, not by a clock."""

from __future__ import annotations

import json
import subprocess
import sys


def run(code: str) -> object:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_the_hook_does_not_load_the_specstory_reader() -> None:
    loaded = run("import json, sys, memoryd.capture.hook; print(json.dumps(sorted(sys.modules)))")
    assert isinstance(loaded, list)
    assert "memoryd.capture.transcripts" in loaded
    assert "memoryd.capture.specstory" not in loaded


SPY = """
import json, re, sys
calls = []
real = re.compile
def spy(pattern, flags=0):
    if sys._getframe(1).f_code.co_filename.endswith(("redact/__init__.py", "redact/lazy.py")):
        calls.append(pattern)
    return real(pattern, flags)
re.compile = spy
import memoryd.redact as redaction
at_import = len(calls)
hidden = redaction.redact("export DB_PASSWORD=CorrectHorseBatteryStaple")
plain = redaction.redact("nothing secret here")
print(json.dumps({"at_import": at_import, "after": len(calls), "hidden": hidden, "plain": plain}))
"""


def test_redaction_compiles_its_patterns_when_a_text_needs_them() -> None:
    found = run(SPY)
    assert isinstance(found, dict)
    assert found["at_import"] == 0
    assert found["after"] > 0
    assert found["hidden"] == "export DB_PASSWORD=[REDACTED:secret]"
    assert found["plain"] == "nothing secret here"
