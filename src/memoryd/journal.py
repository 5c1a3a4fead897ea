"""The write-intent journal: what a write was about to do, kept until it is done.

A write touches four stores in a fixed order (vault file, graph, search index, audit line), and
a crash (kill -9, power cut) can stop it between any two. So before its first step a write
appends a `begin` line to `<home>/journal/intents.jsonl` (fsynced): which memories, at which
paths, with which audit events. After its audit line (or once a failed write was undone) it
appends an `end` line. A `begin` with no `end` names a write that did not finish;
`MemoryService.recover` settles it when the stores are next opened, rolling it forward when its
vault file landed and back when it did not, and logs what it did to the audit log.

One append and one fsync per write: the file is created once, so no directory sync or rename
is needed. `end` lines are not fsynced: an intent that outlives its finished write is settled
as "already complete", which recovery recognises (its audit events are in the log). The file
is emptied whenever no intent is open, so it stays a few lines long. A torn last line (a power
cut during `begin`) belongs to a write that had not started its first step: it is ignored.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from memoryd.errors import StorageError
from memoryd.private import make_private_dir
from memoryd.vault import SCOPES_DIR, fsync_dir, rebased, storage_error

logger = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
JOURNAL_FILE = "intents.jsonl"
INTENT_VERSION = 1


@dataclass(slots=True, kw_only=True)
class IntentItem:
    """One memory a write is about to change."""

    slug: str
    path: str
    """Where the memory's file will be once the write is done."""
    event_type: str
    """The audit event the write ends with (`record`, `capture`, `update`, `archive` …)."""
    scope_hash: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    old_path: str | None = None
    """A replace that moves the file (archive): where it was before."""
    sha256: str | None = None
    """A replace: the hash of the new file's bytes, which tells the new content from the old."""


_ITEM_FIELDS = tuple(f.name for f in fields(IntentItem))


@dataclass(slots=True, kw_only=True)
class Intent:
    id: str
    op: str
    """`record` (new files), `replace` (an edit of existing files), `capture` (an inbox file),
    `entity` (a merge, alias or delete of an entity: its `slug` is the entity id)."""
    actor: str
    audit_seq: int
    """The audit log's last seq before the write: its events, if written, come after it."""
    items: list[IntentItem]


class Journal:
    """The intents in `<home>/journal/intents.jsonl`; one per process that owns the data dir."""

    def __init__(self, home: Path) -> None:
        self.dir = home / JOURNAL_DIR
        self.path = self.dir / JOURNAL_FILE
        self._scopes = home / SCOPES_DIR
        self._lock = threading.Lock()
        self._open: set[str] = set()
        self._unsettled: set[str] | None = None
        """Intents an earlier process left and recovery has not settled (None: not read yet);
        while there are any the file is never emptied."""
        self._dir_synced = False
        self._tail_checked = False

    def begin(self, *, op: str, actor: str, audit_seq: int, items: list[IntentItem]) -> Intent:
        """Record an intent durably, before the write's first step."""
        intent = Intent(
            id=secrets.token_hex(8), op=op, actor=actor, audit_seq=audit_seq, items=items
        )
        line = {
            "v": INTENT_VERSION,
            "begin": intent.id,
            "op": op,
            "actor": actor,
            "audit_seq": audit_seq,
            # Field by field: `asdict` deep-copies, a cost a 100k decay sweep pays per item.
            "items": [{name: getattr(item, name) for name in _ITEM_FIELDS} for item in items],
        }
        with self._lock:
            self._append(line, sync=True)
            self._open.add(intent.id)
        return intent

    def end(self, intent: Intent) -> None:
        """The write is complete (or cleanly undone), or recovery settled it: close it."""
        with self._lock:
            self._open.discard(intent.id)
            if self._unsettled is None:
                self._unsettled = {i.id for i in self._pending()}
            self._unsettled.discard(intent.id)
            if self._open or self._unsettled:
                self._append({"end": intent.id}, sync=False)
            else:
                self._empty()  # nothing open: every line in the file is settled

    def pending(self) -> list[Intent]:
        """Intents left by writes that did not finish, oldest first. Called by recovery
        before this process writes, so none of them is this process's."""
        with self._lock:
            found = self._pending()
            self._unsettled = {i.id for i in found} - self._open
            return [i for i in found if i.id not in self._open]

    def _pending(self) -> list[Intent]:
        begun, ended = self._read()
        return [intent for key, intent in begun.items() if key not in ended]

    def _item(self, fields: dict[str, Any]) -> IntentItem:
        """An intent's item, its paths in this home (`vault.rebased`): an intent a crash
        left before the home was moved or copied settles the files here."""
        item = IntentItem(**fields)
        item.path = rebased(item.path, self._scopes)
        if item.old_path:
            item.old_path = rebased(item.old_path, self._scopes)
        return item

    def slugs_in_flight(self) -> set[str]:
        """The memories of writes under way (or cut short): read only."""
        begun, ended = self._read()
        return {i.slug for key, intent in begun.items() if key not in ended for i in intent.items}

    # -- plumbing -------------------------------------------------------------------------
    def _append(self, obj: dict[str, Any], *, sync: bool) -> None:
        data = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            make_private_dir(self.dir)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if not self._tail_checked:
                    # A line cut short by a crash would swallow this one: end it first.
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        data = b"\n" + data
                    self._tail_checked = True
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    if written <= 0:
                        raise OSError(errno.EIO, "write made no progress")
                    view = view[written:]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if sync and not self._dir_synced:
                fsync_dir(self.dir)  # the file may have just been created
                self._dir_synced = True
        except OSError as exc:
            raise storage_error(exc, self.path, "writing") from exc

    def _empty(self) -> None:
        self._tail_checked = True  # an empty file has no torn tail
        try:
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)
        except OSError as exc:
            raise storage_error(exc, self.path, "emptying") from exc

    def _read(self) -> tuple[dict[str, Intent], set[str]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}, set()
        except OSError as exc:
            raise storage_error(exc, self.path, "reading") from exc
        begun: dict[str, Intent] = {}
        ended: set[str] = set()
        lines = raw.split(b"\n")
        # The last piece lacks its newline: being appended right now, or cut by a power cut
        # before its fsync returned, so its write had not started either way.
        for number, line in enumerate(lines[:-1], 1):
            try:
                obj = json.loads(line)
                if "end" in obj:
                    ended.add(str(obj["end"]))
                    continue
                begun[str(obj["begin"])] = Intent(
                    id=str(obj["begin"]),
                    op=str(obj["op"]),
                    actor=str(obj["actor"]),
                    audit_seq=int(obj["audit_seq"]),
                    items=[self._item(item) for item in obj["items"]],
                )
            except (ValueError, KeyError, TypeError) as exc:
                logger.warning("%s line %d is not an intent (%s); ignored", self.path, number, exc)
        return begun, ended


def remove_temp_files(paths: Sequence[Path]) -> None:
    """The temp files atomic writes of `paths` leave when killed before their rename: each
    directory is listed once, however many of its files a write touched."""
    names: dict[Path, set[str]] = {}
    for path in paths:
        names.setdefault(path.parent, set()).add(path.name)
    for directory, wanted in names.items():
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    name = entry.name
                    # `.<name>.<pid>.<token>.tmp`, as `vault.atomic_write` names them
                    if (
                        name.startswith(".")
                        and name.endswith(".tmp")
                        and name[1:].rsplit(".", 3)[0] in wanted
                    ):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
        except FileNotFoundError:
            continue  # no directory, no temp files
        except OSError as exc:
            raise StorageError(f"cannot remove temp files in {directory}: {exc}") from exc
