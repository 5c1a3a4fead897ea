"""The FalkorDB store's redo log: every write the server acknowledged, kept until the server
says it is on its disk.

A FalkorDB server appends each write to its append-only file but fsyncs it about once a
second, so a machine crash can take the last second of acknowledged writes with it. Each
write transaction carries a sequence number, set in the graph in the same MULTI/EXEC as the
write (its Meta `commits`); once EXEC returned, the store appends the statements it sent,
with that number, to `falkordb.log` in the graph directory and fsyncs it. On the next open
the store replays the entries past the number the graph holds, in order, each with its own
number: exactly the writes the server lost, once each.

The first line is a header: the graph's id (a random token kept in its Meta `graph_id`, so a
log never replays into another graph) and `durable`, the number up to which the server
confirmed its fsync (`WAITAOF`). Entries up to it are dropped (`trim`), so the log holds
about the last second or two of writes. A graph behind `durable` lost writes its server had
confirmed on disk: only a reindex rebuilds it. A torn last line (a crash during the append,
before the write was acknowledged to its caller) is ignored: the write journal settles it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.errors import StorageError
from memoryd.private import FILE_MODE

logger = logging.getLogger(__name__)

LOG = "falkordb.log"
LEGACY_COMMITS = "falkordb.commits"
"""What an earlier memoryd kept instead (the acknowledged count alone): read as `durable`."""


@dataclass
class LogState:
    graph_id: str | None
    durable: int
    entries: list[tuple[int, list[str]]] = field(default_factory=list)
    """(sequence number, the query texts sent), in the order they were applied."""


class RedoLog:
    """`falkordb.log` in one graph directory; used under the store's write lock."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG
        self._legacy = directory / LEGACY_COMMITS
        self.bytes = 0
        """The log's size as this process last wrote it (trimming starts past a size)."""

    def read(self) -> LogState:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return LogState(None, self._legacy_count())
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        self.bytes = len(raw)
        lines = raw.split(b"\n")
        try:
            header = json.loads(lines[0])
            state = LogState(header.get("graph"), int(header["durable"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(
                f"unreadable redo log {self.path}: {exc}",
                hint="run `memoryd reindex` to rebuild the graph from the memory files",
            ) from exc
        # The last piece lacks its newline: an append a crash cut short, never acknowledged.
        for number, line in enumerate(lines[1:-1], 2):
            try:
                entry = json.loads(line)
                state.entries.append((int(entry["seq"]), [str(q) for q in entry["q"]]))
            except (ValueError, KeyError, TypeError) as exc:
                raise StorageError(
                    f"{self.path} line {number} is not a write: {exc}",
                    hint="run `memoryd reindex` to rebuild the graph from the memory files",
                ) from exc
        return state

    def _legacy_count(self) -> int:
        try:
            return int(self._legacy.read_text(encoding="ascii") or 0)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            raise StorageError(f"unreadable {self._legacy}: {exc}") from exc

    def append(self, seq: int, queries: list[str]) -> None:
        """Keep (fsynced) a write the server acknowledged, before its caller is told."""
        line = json.dumps({"seq": seq, "q": queries}, ensure_ascii=False) + "\n"
        data = line.encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot append to {self.path}: {exc.strerror or exc}") from exc
        self.bytes += len(data)

    def start(self, graph_id: str, durable: int) -> None:
        """Begin the log afresh (no entries): a new graph, or the log of another graph."""
        self._replace(graph_id, durable, [])

    def rewrite(self, durable: int) -> None:
        """Drop the entries up to `durable` (the server has them on disk), atomically."""
        state = self.read()
        kept = [(seq, queries) for seq, queries in state.entries if seq > durable]
        self._replace(state.graph_id, durable, kept)

    def _replace(
        self, graph_id: str | None, durable: int, entries: list[tuple[int, list[str]]]
    ) -> None:
        lines = [json.dumps({"graph": graph_id, "durable": durable})]
        lines += [json.dumps({"seq": s, "q": q}, ensure_ascii=False) for s, q in entries]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._legacy.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot rewrite {self.path}: {exc.strerror or exc}") from exc
        self.bytes = len(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError("write made no progress")
        view = view[written:]
