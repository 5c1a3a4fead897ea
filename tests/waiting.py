"""Waiting for another thread or process without guessing how long it takes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T], *, what: str, timeout_s: float = 30.0, every_s: float = 0.01
) -> T:
    """Poll `check` until it returns something truthy, and return that; fail naming `what`
    never happened once `timeout_s` has passed (a busy machine is slow, not wrong)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s}s for {what}")
        time.sleep(every_s)
