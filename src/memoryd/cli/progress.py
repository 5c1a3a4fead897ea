"""A progress bar for the long commands (reindex, an import, a decay sweep), fed `(done, total)`
by the job.

Shown on stderr only when it is a terminal, the command prints no JSON, and the job has at
least `PROGRESS_MIN` items; otherwise the callback does nothing, so scripts and pipes see
exactly the output they saw before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

PROGRESS_MIN = 1_000
"""Jobs smaller than this finish before a bar would be read."""

ProgressFn = Callable[[int, int], None]


def shows_progress(*, quiet: bool) -> bool:
    """Whether a bar may be drawn: not asked to be quiet (--json), stderr a terminal."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress_bar(description: str, *, quiet: bool, steps: int = 1) -> Iterator[ProgressFn]:
    """A callback `(done, total)` that draws a transient rich bar while the block runs.

    `steps`: how many of the job's steps make one item (a decay sweep counts three per
    memory): the job is as big as `total // steps` items, and the bar shows a percentage."""
    if not shows_progress(quiet=quiet):
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TimeRemainingColumn,
    )

    bar: Progress | None = None
    task: TaskID | None = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None:
            if total // steps < PROGRESS_MIN:
                return
            bar = Progress(
                "{task.description}",
                BarColumn(),
                MofNCompleteColumn() if steps == 1 else TaskProgressColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            bar.start()
            task = bar.add_task(description, total=total)
        assert task is not None
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()
