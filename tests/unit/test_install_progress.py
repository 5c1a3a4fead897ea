"""`make install` (so `make demo` on a fresh clone) says what each step does and numbers the
packages as pip collects them, instead of minutes of silence (issue 29); a failed pip prints
its whole log and fails the step."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pip-progress.sh"


def test_every_install_step_of_make_demo_says_what_it_does(tmp_path: Path) -> None:
    # run under `make test` too: a sub-make would print its directory and inherit the flags
    alone = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
    plan = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=alone,
    ).stdout.splitlines()
    commands = [line for line in plan if not line.startswith("echo ")]
    assert commands[-1].endswith("memoryd demo")
    steps = [at for at, line in enumerate(plan) if " venv " in line or " pip " in line]
    assert len(steps) == 3  # the venv, pip itself, memoryd with its dependencies
    for at in steps:
        assert plan[at - 1].startswith("echo "), f"no step line before: {plan[at]}"
    installs = [line for line in plan if ".[dev]" in line]
    assert len(installs) == 1
    assert installs[0].startswith("scripts/pip-progress.sh ")
    assert "--quiet" not in installs[0]


def _wheel(directory: Path, name: str) -> Path:
    """A minimal pure-Python wheel that pip installs as it would any other."""
    path = directory / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    files = {
        f"{name}.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{file},,\n" for file in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(file, text)
    return path


def test_pip_progress_numbers_each_package_and_keeps_a_failure_loud(tmp_path: Path) -> None:
    wheels = [_wheel(tmp_path, name) for name in ("alpha_pkg", "beta_pkg")]
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target"]
    done = subprocess.run(
        [str(SCRIPT), *pip, str(tmp_path / "site"), *map(str, wheels)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("] ")[0].strip() for line in lines[:2]] == ["[  1", "[  2"]
    assert "alpha_pkg-0.1-py3-none-any.whl" in lines[0]
    assert "installing the 2 packages collected" in done.stdout
    assert "installed 2 packages" in done.stdout
    assert (tmp_path / "site" / "beta_pkg.py").is_file()

    failed = subprocess.run(
        [str(SCRIPT), *pip, str(tmp_path / "other"), "no-such-package-for-memoryd"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert failed.returncode != 0
    assert "no-such-package-for-memoryd" in failed.stderr  # pip's own words
    assert "pip failed" in failed.stderr
