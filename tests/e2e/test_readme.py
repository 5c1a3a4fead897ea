"""The README's shell examples run as written on a fresh machine.

Every ```sh block of README.md runs in one bash (so `cd` and variables carry from line to
line) against an empty temp home: HOME, MEMORYD_HOME and the XDG dirs all point into it, and
`memoryd` runs this checkout in embedded mode. Each command must exit 0. Only the lines in
SKIPPED do not run, each for the reason given there.

Each `memoryd` command is a process forked from one warmed-up interpreter (`tests.cli_forks`):
some 60 fresh interpreters importing memoryd took most of this test's minute or two.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import memoryd
from tests.cli_forks import forked_commands
from tests.pins import PINNED_ENV

README = Path(__file__).resolve().parents[2] / "README.md"
SKIPPED = {
    "make demo": "builds .venv from the package registry; `memoryd demo` is tested in test_demo",
    "make test": "runs the whole suite, this test included",
    ".venv/bin/python bench/*": "benchmarks take minutes each; their own tests run them small",
    "memoryd serve --detach": "needs the fixed port 7423, which another daemon may hold here",
    "memoryd status; memoryd stop; memoryd token": "needs the daemon of the line above",
    "curl *": "needs the daemon of the line above",
    "memoryd setup auto-install*": "needs a systemd user manager, launchd or crontab, and"
    " without --dry-run changes the real user's",
}
"""A command without its comment (or, ending in `*`, its start) → why that line does not run
here."""


@dataclass
class Command:
    line: int
    """README line number where the command starts."""
    text: str


def sh_blocks(readme: str) -> list[list[Command]]:
    """The ```sh blocks, as commands: continuation lines joined, comments kept (bash drops them)."""
    blocks: list[list[Command]] = []
    lines = readme.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```sh":
            i += 1
            continue
        block: list[Command] = []
        i += 1
        while lines[i].strip() != "```":
            start, text = i + 1, lines[i]
            while text.endswith("\\"):
                i += 1
                text = text[:-1] + lines[i]
            if text.strip() and not text.lstrip().startswith("#"):
                block.append(Command(start, text))
            i += 1
        blocks.append(block)
        i += 1
    return blocks


def skip_reason(command: Command) -> str | None:
    bare = re.sub(r"\s+#.*$", "", command.text).strip()
    return next(
        (
            why
            for key, why in SKIPPED.items()
            if bare == key or (key.endswith("*") and bare.startswith(key[:-1]))
        ),
        None,
    )


def test_the_readme_has_examples_and_a_short_skip_list() -> None:
    commands = [c for block in sh_blocks(README.read_text()) for c in block]
    assert len(commands) >= 20
    skipped = [c for c in commands if skip_reason(c) and "bench/" not in c.text]
    assert len(skipped) <= 8, skipped  # besides the benchmarks, a few lines at most
    assert len(commands) - len(skipped) >= 2 * len(skipped)
    for key in SKIPPED:  # no stale entry: each still names a line of the README
        assert any(c.text.startswith(key.rstrip("*")) for c in commands), key


def test_the_readme_commands_run_as_written(tmp_path: Path) -> None:
    home = tmp_path / "user"
    home.mkdir()
    shims = tmp_path / "bin"
    shims.mkdir()
    source = str(Path(memoryd.__file__).resolve().parents[1])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")},
        **PINNED_ENV,  # a fresh install has no vector extra: results as on one
        "HOME": str(home),
        "MEMORYD_HOME": str(home / "memoryd-data"),
        "MEMORYD_CONFIG": str(home / "no-config.toml"),
        "MEMORYD_GRAPH__BUFFER_POOL_MB": "128",
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])),
    }
    with forked_commands(shims / "memoryd", tmp_path / "cli.sock", env, cwd=home):
        run_blocks(tmp_path, home, env)
    # what the examples did is there: the first one's memory, and the agents' configs
    assert re.search(
        r"switch-the-storefront-to-solid",
        "".join(p.name for p in (home / "memoryd-data").rglob("*.md")),
    )


def run_blocks(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    """Each README block in one bash; every command must exit 0."""
    ran = 0
    for block in sh_blocks(README.read_text()):
        runnable = [c for c in block if not skip_reason(c)]
        if not runnable:
            continue
        failures = tmp_path / "failures"
        failures.write_text("")
        # One bash per block; the ERR trap names each failing command by its script line.
        script = ["set -o pipefail", f"trap 'echo \"$LINENO $?\" >> {failures}' ERR"]
        script += [c.text for c in runnable]
        result = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        failed = []
        for entry in failures.read_text().split("\n"):
            if entry:
                number, code = entry.split()
                command = runnable[int(number) - 3]
                failed.append(f"README line {command.line} exited {code}: {command.text}")
        assert not failed, "\n".join([*failed, "stderr:", result.stderr[-3000:]])
        assert result.returncode == 0, result.stderr
        ran += len(runnable)
    assert ran >= 20
