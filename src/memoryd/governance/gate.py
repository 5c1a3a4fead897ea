"""The gate: the one check every read of a sensitive scope passes, and the grants it honours.

A sensitive scope (`.memoryd-sensitive` at its root; `scope.json` says `sensitive`) is read
only under a grant: `memoryd grant PATH --duration once|session|task` writes
`grants/<scope_hash>.json` (0600, atomically; never synced) and the gate consults it on every
read. Without a grant a `get` is denied (PolicyDenied, with the hint to grant), recall and
search leave the scope's hits out and say how many, inject never shows them. Every grant,
revoke, allowed and denied read is an audit event whose details carry slugs and counts only
(never a title, a body or a path: the audit log is plain text).

Time comes from the service clock, so tests move it past a grant's end.

Grants and revokes are audited as they happen. Read events (allowed and denied) are kept and
appended in one batch by `flush` (the daemon's recall-count tick, every write of the gate,
reading the audit log, closing the service; at once past `READ_EVENTS_MAX`): an fsync per
recall would cost as much as the recall itself. A crash loses at most the last tick's.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import TypeAdapter, ValidationError

from memoryd.audit import AuditEvent
from memoryd.errors import InvalidInput, PolicyDenied, StorageError
from memoryd.models import GRANT_SECONDS, Grant, GrantDuration, HiddenResults, ScopeInfo
from memoryd.private import FILE_MODE, make_private_dir
from memoryd.sensitive.heap import scrub_freed_heap

logger = logging.getLogger(__name__)

GRANTS_DIR = "grants"
_GRANTS = TypeAdapter(list[Grant])
_TASK_MAX = 80
READ_EVENTS_MAX = 256
"""Read events kept before they are appended regardless of the tick."""


class Scoped(Protocol):
    """Anything a read returns that belongs to a scope (a hit, a summary, a row)."""

    @property
    def scope_hash(self) -> str: ...

    @property
    def slug(self) -> str: ...


S = TypeVar("S", bound=Scoped)


def grant_hint(path: str) -> str:
    return f"memoryd grant {path} --duration once|session|task"


class GrantStore:
    """`grants/<scope_hash>.json`: the grants of each scope, written atomically with mode 0600."""

    def __init__(self, home: Path) -> None:
        self.dir = home / GRANTS_DIR

    def read(self, scope_hash: str) -> list[Grant]:
        path = self.dir / f"{scope_hash}.json"
        try:
            return _GRANTS.validate_json(path.read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValidationError) as exc:
            # An unreadable grant file grants nothing: the gate fails closed.
            logger.warning("ignoring unreadable grant file %s: %s", path, exc)
            return []

    def scopes(self) -> list[str]:
        """The scopes that have a grant file (granted now or not)."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list the grants in {self.dir}: {exc}") from exc
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json"))

    def write(self, scope_hash: str, grants: Sequence[Grant]) -> None:
        path = self.dir / f"{scope_hash}.json"
        try:
            if not grants:
                path.unlink(missing_ok=True)
                return
            make_private_dir(self.dir)
            data = json.dumps(_GRANTS.dump_python(list(grants), mode="json"), indent=2) + "\n"
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(f"cannot write the grant file {path}: {exc}") from exc


def _stamp(path: str) -> tuple[int, int, int]:
    """A file's (inode, size, mtime), zeros when it is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (0, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class Gate:
    """Which scopes are sensitive, which are granted now, and the audit of every decision."""

    def __init__(
        self,
        home: Path,
        *,
        scopes: Callable[[], Iterable[ScopeInfo]],
        audit: Callable[[list[AuditEvent]], object] | None,
        clock: Callable[[], datetime],
        actor: Callable[[], str],
    ) -> None:
        self.home = home
        self.store = GrantStore(home)
        self._scopes = scopes
        self._audit = audit
        """None in a read-only service (a notebook, a recall reader): it cannot audit, so it
        honours no grant (see `readable`) and its daemon audits what it answered."""
        self._clock = clock
        self._actor = actor
        self._sensitive: tuple[tuple[tuple[str, int, int, int], ...], dict[str, str]] | None = None
        self._lock = threading.Lock()
        self._reads: list[AuditEvent] = []
        self._reads_lock = threading.Lock()

    # -- scopes ---------------------------------------------------------------------------
    def sensitive_scopes(self) -> dict[str, str]:
        """scope hash → path of every sensitive scope, re-read when a scope.json changed.

        A change is seen by each scope.json's inode, size and time: it is replaced by rename
        (a new inode) whenever it changes. The folder's time alone missed a change made within
        one tick of the kernel's coarse file clock (a scope registered plain, then marked),
        and a memory of the marked scope was then written as a plain one."""
        scopes_dir = self.home / "scopes"
        try:
            key = tuple(
                sorted(
                    (entry.name, *_stamp(os.path.join(entry.path, "scope.json")))
                    for entry in os.scandir(scopes_dir)
                    if entry.is_dir()
                )
            )
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StorageError(f"cannot list the scopes in {scopes_dir}: {exc}") from exc
        cached = self._sensitive
        if cached is not None and cached[0] == key:
            return cached[1]
        found = {info.scope_hash: info.path for info in self._scopes() if info.sensitive}
        if found:
            scrub_freed_heap()  # this process may come to hold their plaintext
        self._sensitive = (key, found)
        return found

    def forget_scopes(self) -> None:
        """Read the scopes' sensitive flags afresh on the next check (after `mark`)."""
        self._sensitive = None

    def path_of(self, scope_hash: str) -> str | None:
        """The path of a sensitive scope, None when the scope is not sensitive."""
        return self.sensitive_scopes().get(scope_hash)

    # -- grants ---------------------------------------------------------------------------
    def active(self, scope_hash: str | None = None) -> list[Grant]:
        """The grants in force now (of one scope, or all), oldest first."""
        now = self._clock()
        hashes = [scope_hash] if scope_hash is not None else self.store.scopes()
        return [g for h in hashes for g in self.store.read(h) if g.active(now)]

    def granted(self, scope_hash: str) -> bool:
        return bool(self.active(scope_hash))

    def readable(self, scope_hash: str) -> bool:
        """Whether this process may read the scope's plaintext now: granted, and able to
        audit the read."""
        return self._audit is not None and self.granted(scope_hash)

    def grant(self, scope: ScopeInfo, duration: GrantDuration, task: str | None) -> Grant:
        """Grant reads of a sensitive scope for `duration` (a task grant until revoked)."""
        if duration not in GRANT_SECONDS:
            raise InvalidInput(
                f"unknown grant duration {duration!r}", hint="use once, session or task"
            )
        if task is not None and not (0 < len(task.strip()) <= _TASK_MAX):
            raise InvalidInput(f"--task must be 1 to {_TASK_MAX} characters")
        if duration == "task" and task is None:
            raise InvalidInput(
                "a task grant needs a task name", hint="add --task NAME (revoke it by that name)"
            )
        if not scope.sensitive and scope.scope_hash not in self.sensitive_scopes():
            raise InvalidInput(
                f"{scope.path} is not a sensitive scope: its memories need no grant",
                hint=f"`memoryd sensitive mark {scope.path}` makes it one",
            )
        self._require_audit("grant a read")
        now = self._clock()
        seconds = GRANT_SECONDS[duration]
        grant = Grant(
            scope_hash=scope.scope_hash,
            path=scope.path,
            duration=duration,
            task=task.strip() if task else None,
            granted_at=now,
            expires_at=now + timedelta(seconds=seconds) if seconds is not None else None,
            actor=self._actor(),
        )
        with self._lock:
            kept = [g for g in self.store.read(scope.scope_hash) if g.active(now)]
            # One grant per (duration, task): granting again renews it.
            kept = [g for g in kept if (g.duration, g.task) != (grant.duration, grant.task)]
            self.store.write(scope.scope_hash, [*kept, grant])
        self._emit(
            "grant",
            scope.scope_hash,
            None,
            {
                "duration": duration,
                "task": grant.task,
                "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
            },
        )
        return grant

    def revoke(self, scope_hash: str, task: str | None = None) -> list[Grant]:
        """End the scope's grants (with `task`: only that task's); the ones ended."""
        self._require_audit("revoke a grant")
        now = self._clock()
        with self._lock:
            current = [g for g in self.store.read(scope_hash) if g.active(now)]
            ended = [g for g in current if task is None or g.task == task]
            self.store.write(scope_hash, [g for g in current if g not in ended])
        self._emit("revoke", scope_hash, None, {"task": task, "count": len(ended)})
        return ended

    def expire(self) -> list[Grant]:
        """Remove the grant files' ended grants; the grants that ended (for the daemon,
        which then drops their in-memory views)."""
        if self._audit is None:
            return []
        now = self._clock()
        ended: list[Grant] = []
        with self._lock:
            for scope_hash in self.store.scopes():
                grants = self.store.read(scope_hash)
                gone = [g for g in grants if not g.active(now)]
                if gone:
                    self.store.write(scope_hash, [g for g in grants if g.active(now)])
                    ended.extend(gone)
        if ended:
            self._emit_many(
                [
                    AuditEvent(
                        actor=self._actor(),
                        event_type="grant_expired",
                        scope_hash=g.scope_hash,
                        details={"duration": g.duration, "task": g.task},
                    )
                    for g in ended
                ]
            )
        return ended

    # -- decisions ------------------------------------------------------------------------
    def require(self, scope_hash: str, slug: str, surface: str) -> None:
        """Allow one read of a sensitive memory under a grant (audited), else deny it
        (audited too) with the hint to grant."""
        path = self.path_of(scope_hash)
        if path is None:
            return
        if self.readable(scope_hash):
            self.allowed(scope_hash, [slug], surface)
            return
        self.denied(scope_hash, [slug], surface)
        if self._audit is None and self.granted(scope_hash):
            raise PolicyDenied(
                f"memory {slug} is in the sensitive scope {path}; this read-only service"
                " cannot audit a read of it",
                hint="start `memoryd serve` and read it through the daemon",
            )
        raise PolicyDenied(
            f"memory {slug} is in the sensitive scope {path}, which needs a grant to read",
            hint=grant_hint(path),
        )

    def require_scope(self, scope_hash: str, surface: str) -> None:
        """Allow a read of a whole sensitive scope under a grant (`unmark` decrypts it all),
        else deny it; both audited."""
        path = self.path_of(scope_hash)
        if path is None:
            return
        if self.readable(scope_hash):
            self._keep("read_allowed", scope_hash, None, {"surface": surface, "count": 0})
            return
        self._keep("read_denied", scope_hash, None, {"surface": surface, "count": 0})
        raise PolicyDenied(
            f"{path} is a sensitive scope: {surface} reads all of it and needs a grant",
            hint=grant_hint(path),
        )

    def partition(
        self, items: Sequence[S], *, keep_granted: bool = True
    ) -> tuple[list[S], dict[str, list[str]]]:
        """`items` without those of sensitive scopes not granted (`keep_granted` False: of
        any sensitive scope), and the slugs left out, by scope."""
        sensitive = self.sensitive_scopes()
        if not sensitive or not items:
            return list(items), {}
        readable = {h: keep_granted and self.readable(h) for h in sensitive}
        kept: list[S] = []
        left: dict[str, list[str]] = {}
        for item in items:
            if item.scope_hash in sensitive and not readable[item.scope_hash]:
                left.setdefault(item.scope_hash, []).append(item.slug)
            else:
                kept.append(item)
        return kept, left

    def hidden(self, left: dict[str, list[str]], surface: str) -> list[HiddenResults]:
        """What to tell the caller about the results left out (audited as denied reads)."""
        if not left:
            return []  # most reads: no need to look at the scopes again
        sensitive = self.sensitive_scopes()
        out = []
        for scope_hash, slugs in sorted(left.items()):
            self.denied(scope_hash, slugs, surface)
            out.append(
                HiddenResults(
                    scope_hash=scope_hash, path=sensitive.get(scope_hash, ""), count=len(slugs)
                )
            )
        return out

    def whole_scope_hidden(self, scope_hash: str, count: int, surface: str) -> HiddenResults:
        """A read aimed at a sensitive scope without a grant: nothing in it was searched."""
        self._keep("read_denied", scope_hash, None, {"surface": surface, "count": count})
        return HiddenResults(
            scope_hash=scope_hash, path=self.path_of(scope_hash) or "", count=count
        )

    def audit_hidden(self, hidden: Iterable[HiddenResults], surface: str) -> None:
        """Audit what a read-only process (a recall reader) left out, from its answer."""
        for item in hidden:
            self._keep(
                "read_denied", item.scope_hash, None, {"surface": surface, "count": item.count}
            )

    def allowed(self, scope_hash: str, slugs: Sequence[str], surface: str) -> None:
        self._read_event("read_allowed", scope_hash, slugs, surface)

    def denied(self, scope_hash: str, slugs: Sequence[str], surface: str) -> None:
        self._read_event("read_denied", scope_hash, slugs, surface)

    def _read_event(
        self, event_type: str, scope_hash: str, slugs: Sequence[str], surface: str
    ) -> None:
        self._keep(
            event_type,
            scope_hash,
            slugs[0] if len(slugs) == 1 else None,
            {"surface": surface, "count": len(slugs), "slugs": list(slugs[:50])},
        )

    def _keep(
        self, event_type: str, scope_hash: str, target: str | None, details: dict[str, object]
    ) -> None:
        """A read event, appended with the next `flush`."""
        event = AuditEvent(
            actor=self._actor(),
            event_type=event_type,
            scope_hash=scope_hash,
            target_id=target,
            details=details,
        )
        with self._reads_lock:
            self._reads.append(event)
            full = len(self._reads) >= READ_EVENTS_MAX
        if full:
            self.flush()

    def flush(self) -> int:
        """Append the read events kept since the last flush; how many."""
        with self._reads_lock:
            events, self._reads = self._reads, []
        if events:
            self._emit_many(events)
        return len(events)

    # -- audit ----------------------------------------------------------------------------
    def _require_audit(self, action: str) -> None:
        if self._audit is None:
            raise PolicyDenied(
                f"cannot {action}: this memoryd service is read-only",
                hint="run it through `memoryd serve` or the CLI",
            )

    def _emit(
        self, event_type: str, scope_hash: str, target: str | None, details: dict[str, object]
    ) -> None:
        self.flush()  # the reads before it come first in the log
        self._emit_many(
            [
                AuditEvent(
                    actor=self._actor(),
                    event_type=event_type,
                    scope_hash=scope_hash,
                    target_id=target,
                    details=details,
                )
            ]
        )

    def _emit_many(self, events: list[AuditEvent]) -> None:
        if self._audit is None:
            # A read-only service writes nothing; its daemon audits what it returned.
            logger.info("not audited (read-only): %s", ", ".join(e.event_type for e in events))
            return
        self._audit(events)
