"""The write-intent journal: what a write was about to do, kept until it is done.

A write touches four stores in a fixed order (vault file, graph, search index, audit line), and
a crash (kill -9, power cut) can stop it between any two. So before its first step a write
records an *intent* in `<home>/journal/<id>.json` (atomically, fsynced): which memories, at
which paths, with which audit events. The intent is removed once the audit line is written (or
once a failed write was undone). An intent still there when the stores are next opened names
a write that did not finish; `MemoryService.recover` settles it, rolling it forward when its
vault file landed and back when it did not, and logs what it did to the audit log.

Removing an intent is not fsynced: an intent that outlives its finished write is settled as
"already complete", which recovery recognises (its audit events are in the log).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memoryd.errors import StorageError
from memoryd.vault import atomic_write, storage_error

logger = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
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


@dataclass(slots=True, kw_only=True)
class Intent:
    id: str
    op: str
    """`record` (new files), `replace` (an edit of existing files), `capture` (an inbox file)."""
    actor: str
    audit_seq: int
    """The audit log's last seq before the write: its events, if written, come after it."""
    items: list[IntentItem]
    file: Path | None = None


class Journal:
    """The intents in `<home>/journal/`."""

    def __init__(self, home: Path) -> None:
        self.dir = home / JOURNAL_DIR

    def begin(self, *, op: str, actor: str, audit_seq: int, items: list[IntentItem]) -> Intent:
        """Record an intent durably, before the write's first step."""
        intent = Intent(
            id=secrets.token_hex(8), op=op, actor=actor, audit_seq=audit_seq, items=items
        )
        path = self.dir / f"{intent.id}.json"
        data = {
            "version": INTENT_VERSION,
            "id": intent.id,
            "op": op,
            "actor": actor,
            "audit_seq": audit_seq,
            "items": [asdict(item) for item in items],
        }
        atomic_write(path, (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8"))
        intent.file = path
        return intent

    def end(self, intent: Intent) -> None:
        """The write is complete (or cleanly undone): forget the intent."""
        if intent.file is None:
            return
        try:
            intent.file.unlink(missing_ok=True)
        except OSError as exc:
            raise storage_error(exc, intent.file, "removing") from exc

    def pending(self) -> list[Intent]:
        """Intents left by writes that did not finish, oldest first.

        An unreadable intent (cut short by a power cut before its fsync) belongs to a write
        that had not started its first step: it is removed with a warning.
        """
        try:
            files = [p for p in self.dir.iterdir() if p.suffix == ".json"]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise storage_error(exc, self.dir, "listing") from exc
        found: list[tuple[int, Intent]] = []
        for path in files:
            try:
                raw = json.loads(path.read_bytes())
                intent = Intent(
                    id=str(raw["id"]),
                    op=str(raw["op"]),
                    actor=str(raw["actor"]),
                    audit_seq=int(raw["audit_seq"]),
                    items=[IntentItem(**item) for item in raw["items"]],
                    file=path,
                )
                mtime = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("removing unreadable write intent %s: %s", path, exc)
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            found.append((mtime, intent))
        found.sort(key=lambda pair: (pair[0], pair[1].id))
        return [intent for _, intent in found]

    def slugs_in_flight(self) -> set[str]:
        """The memories of writes under way (or cut short): read only, nothing is removed."""
        slugs: set[str] = set()
        try:
            files = [p for p in self.dir.iterdir() if p.suffix == ".json"]
        except FileNotFoundError:
            return slugs
        except OSError as exc:
            raise storage_error(exc, self.dir, "listing") from exc
        for path in files:
            try:
                items = json.loads(path.read_bytes())["items"]
                slugs.update(str(item["slug"]) for item in items)
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or unreadable: recovery deals with it
        return slugs

    def clean_temp_files(self) -> None:
        """Temp files of intents cut short while being written."""
        with contextlib.suppress(OSError):
            for path in self.dir.glob(".*.tmp"):
                path.unlink(missing_ok=True)


def remove_temp_files(path: Path) -> None:
    """The temp files an atomic write of `path` leaves when it is killed before its rename."""
    try:
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot remove temp files beside {path}: {exc}") from exc
