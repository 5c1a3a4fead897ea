"""The hook path's file lock (`memoryd.filelock`): one holder at a time across descriptors
(as across processes), given back by `unlock` or by closing the descriptor."""

from __future__ import annotations

import os
from pathlib import Path

from memoryd import filelock


def test_one_holder_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    second = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        filelock.lock(first)
        assert not filelock.try_lock(second)
        filelock.unlock(first)
        assert filelock.try_lock(second)
        assert not filelock.try_lock(first)
    finally:
        os.close(second)
    assert filelock.try_lock(first)  # closing the holder's descriptor gave it back
    os.close(first)
