"""Real faults for tests: a directory no one may write into, as a full disk or a wrong
permission leaves it (no code of the store under test is replaced)."""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """No file can be created in `directory` (nor renamed or removed) while this lasts, by
    this process or any other: its mode drops the write bits, and for root, who ignores
    modes, it is made immutable (`chattr +i`). Skips the test where neither holds (root on
    a filesystem without the immutable attribute)."""
    mode = stat.S_IMODE(directory.stat().st_mode)
    immutable = os.geteuid() == 0
    if immutable:
        done = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make {directory} immutable as root: {done.stderr.strip()}")
    else:
        directory.chmod(mode & ~0o222)
    try:
        probe = directory / f".probe-{uuid.uuid4().hex}"
        try:
            probe.touch()
        except OSError:
            pass
        else:
            probe.unlink()
            pytest.skip(f"{directory} stays writable here")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        else:
            directory.chmod(mode)
