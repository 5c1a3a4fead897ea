"""`record`'s memory file is written and synced on a thread while its graph statements run
(issue 28): the file's fsyncs wait on the disk beside the graph's work, not before it; a
file that cannot be written leaves no graph row, no index document and no intent."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from memoryd.errors import StorageError
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService


def _draft(project: Path, title: str = "Use Kafka for the event bus") -> MemoryDraft:
    return MemoryDraft(
        type=MemoryType.DECISION,
        title=title,
        body="The event bus moves from Redis to Kafka.",
        scope_path=project,
    )


def _is_memory_file(fd: int, vault: Path) -> bool:
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return target.startswith(str(vault)) and target.endswith(".tmp") and "/decisions/" in target


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_the_memory_files_fsync_runs_while_its_graph_statements_run(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's fsync waits (up to 5 s) for the graph write to start: it starts, so the
    fsync ran beside it, on another thread; the record is whole afterwards."""
    graph_started = threading.Event()
    seen: list[tuple[bool, bool]] = []  # (the graph write had started, on the caller's thread)
    caller = threading.get_ident()
    fsync = os.fsync
    upsert = svc.graph.upsert_memories
    vault = svc.vault.scopes_dir

    def watched_fsync(fd: Any) -> None:
        if _is_memory_file(fd, vault):
            seen.append((graph_started.wait(5.0), threading.get_ident() == caller))
        fsync(fd)

    def watched_upsert(*args: Any, **kwargs: Any) -> None:
        graph_started.set()
        upsert(*args, **kwargs)

    monkeypatch.setattr(os, "fsync", watched_fsync)
    monkeypatch.setattr(svc.graph, "upsert_memories", watched_upsert)
    memory = svc.record(_draft(project))
    monkeypatch.undo()
    assert seen == [(True, False)]
    assert svc.get(memory.slug).meta.title == memory.meta.title
    assert svc.graph.get_memory(memory.slug) is not None
    assert [h.slug for h in svc.search("Kafka event bus")] == [memory.slug]
    assert svc.journal.pending() == []


def test_a_file_that_cannot_be_written_leaves_nothing_behind(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename of the memory file fails (a full or read-only disk): `record` raises a
    StorageError naming the file, and the graph, the index, the vault and the journal
    hold nothing of it; the next record is written whole."""
    replace = os.replace

    def failing(src: Any, dst: Any) -> None:
        if str(dst).endswith(".md") and "/decisions/" in str(dst):
            raise OSError(28, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(StorageError, match=r"disk full while writing .*use-kafka-for-the-event"):
        svc.record(_draft(project))
    monkeypatch.undo()
    assert svc.graph.cypher("MATCH (m:Memory) RETURN count(m)").rows == [[0]]
    assert list(svc.search("Kafka event bus")) == []
    assert not list(svc.vault.scopes_dir.rglob("*.md"))
    assert svc.journal.pending() == []
    memory = svc.record(_draft(project, "Use Kafka for the audit bus"))
    assert svc.graph.get_memory(memory.slug) is not None
