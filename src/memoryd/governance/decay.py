"""The decay state machine of working memory (seeds/002 §4): alive → dim → soft-forgotten →
forgotten.

A session memory that nobody recalls fades: after its `ttl_days` (default 90) without a
recall it is *dim* (still found, ranked lower), 30 days later *soft-forgotten* (hidden from
recall, search and inject unless asked for), 90 days after that *forgotten*: its file moves to
`scopes/<hash>/forgotten/` and it leaves the graph and the search index (`restore` brings it
back). Idle time counts from `last_recalled_at`, or from `created_at` for a memory never
recalled. A recall or a get revives a dim or soft-forgotten memory to alive (the service does
that); long-term types (decision, preference, fact, playbook, warning) never decay.

The sweep only moves memories forward, so running it twice changes nothing the second time,
and a sweep after a long pause jumps a memory straight to where its idle time puts it. It is
safe beside agents writing: each file is rewritten under its lock, only if it still holds
what the graph said when the sweep planned the move. Time is a parameter, so tests can live
400 days.

How a sweep writes (decided after profiling a sweep that moves all of a 100k vault,
`bench/governance.py --decay-n 100000`; the numbers are in the commit that made it so):
* the plan is one graph query; nothing due reads no file (the daily no-op is about 0.1 s);
* the files go first, in batches of `SWEEP_BATCH`, each batch a write intent (one journal
  fsync) and one sync of the disk, with no fsync per file: until its intent ends, recovery
  tells a file that landed from one that did not by the sha256 the intent holds;
* then the graph (one statement for the states, one for the deletions), the search index (one
  commit; each document read once, its session neighbours looked up among those already
  read) and the audit log are written once for the whole sweep, and only then do the
  intents end. Before, each batch wrote them itself: 50 index commits at 100k, and every
  document read twice, which was a third of the sweep;
* a crash (kill -9) anywhere leaves the intents: the next open settles every file they name,
  rolled forward or back, with one graph and one index write per intent, and `doctor` is
  clean; the sweep being idempotent, the next one moves what it had not reached;
* a memory's file is rewritten whole (temp file and rename), never edited in place: only the
  frontmatter lines that change are edited in the text, but an in-place write torn by a
  crash would corrupt the source of truth. Files are written by lock stripe with a few
  threads (the syscalls release the GIL); a process pool would not help on two cores, where
  what is left is the disk's metadata work (a create, a rename and, for a forgotten memory,
  an unlink per file: two thirds of a 100k sweep's time on a shared disk) and the index's
  document rebuild.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from memoryd.audit import AuditEvent
from memoryd.errors import Conflict, MemorydError, NotFound
from memoryd.governance.stores import Stores
from memoryd.journal import Intent, IntentItem
from memoryd.memfile import lock_stripe
from memoryd.models import (
    DecayState,
    Frontmatter,
    Memory,
    MemoryType,
    Timestamp,
    format_ts,
    to_utc,
)
from memoryd.vault import FORGOTTEN_DIR, atomic_write, render

logger = logging.getLogger(__name__)

WRITERS = 4
"""Threads that rewrite files in a batch."""
SWEEP_BATCH = 2000
"""Memories per write intent: one journal fsync and one sync of their files. Graph, index
and audit log are written once for the whole sweep."""
DAY = timedelta(days=1)
_ORDER = {
    DecayState.ALIVE: 0,
    DecayState.DIM: 1,
    DecayState.SOFT_FORGOTTEN: 2,
    DecayState.FORGOTTEN: 3,
}


@dataclass(frozen=True)
class DecayPolicy:
    """The thresholds, in days (config `[decay]`). `dim_days` applies to a session memory
    without a `ttl_days` of its own; the other two count on from the step before."""

    dim_days: int = 90
    soft_forget_days: int = 30
    forget_days: int = 90

    def state_after(self, idle: timedelta, ttl_days: int | None) -> DecayState:
        """Where a decaying memory idle this long belongs."""
        dim = self.dim_days if ttl_days is None else ttl_days
        soft = dim + self.soft_forget_days
        if idle < dim * DAY:
            return DecayState.ALIVE
        if idle < soft * DAY:
            return DecayState.DIM
        if idle < (soft + self.forget_days) * DAY:
            return DecayState.SOFT_FORGOTTEN
        return DecayState.FORGOTTEN

    def soonest(self, ttl_days: int) -> tuple[timedelta, timedelta, timedelta]:
        """The idle time after which each of alive, dim and soft-forgotten may move on, for
        the shortest ttl in the vault: the sweep's graph query reads only those rows."""
        dim = ttl_days * DAY
        soft = dim + self.soft_forget_days * DAY
        return dim, soft, soft + self.forget_days * DAY


def decays(memory_type: MemoryType) -> bool:
    """Only working memory decays; long-term memories have no TTL."""
    return not memory_type.long_term


def next_state(
    memory_type: MemoryType,
    ttl_days: int | None,
    current: DecayState,
    reference: datetime,
    now: datetime,
    policy: DecayPolicy,
) -> DecayState | None:
    """The state a sweep at `now` moves a memory to, or None when it stays (never backwards:
    only a recall revives)."""
    if not decays(memory_type):
        return None
    target = policy.state_after(to_utc(now) - to_utc(reference), ttl_days)
    return target if _ORDER[target] > _ORDER[current] else None


class DecayMove(BaseModel):
    """One memory the sweep moved (or, dry, would move)."""

    slug: str
    scope_hash: str
    title: str
    from_state: DecayState
    to_state: DecayState
    idle_days: int


class SweepReport(BaseModel):
    """What `memoryd decay-sweep` did."""

    at: Timestamp
    dry_run: bool
    checked: int = 0
    """Memories the sweep looked at closely: those whose idle time might move them."""
    moved: list[DecayMove] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)
    """slug → why it was left alone (changed meanwhile, encrypted, unreadable)."""
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(m.to_state.value for m in self.moved)
        return {
            state.value: found[state.value] for state in DecayState if state is not DecayState.ALIVE
        }


class RestoreResult(BaseModel):
    slug: str
    from_state: DecayState
    path: str


# -- planning ---------------------------------------------------------------------------------
_CANDIDATES = (
    "MATCH (m:Memory) WHERE m.type = 'session' AND m.ttl_days IS NOT NULL AND ("
    " (m.decay_state = 'alive' AND coalesce(m.last_recalled_at, m.created_at) <= $alive)"
    " OR (m.decay_state = 'dim' AND coalesce(m.last_recalled_at, m.created_at) <= $dim)"
    " OR (m.decay_state = 'soft-forgotten'"
    " AND coalesce(m.last_recalled_at, m.created_at) <= $soft))"
    " RETURN m.slug, m.scope_hash, m.title, m.ttl_days, m.decay_state, m.created_at,"
    " m.last_recalled_at, m.sensitive, m.path"
)
_FALLBACK_TTL = (
    "MATCH (m:Memory) WHERE m.type = 'session' AND m.decay_state <> 'forgotten'"
    " RETURN min(m.ttl_days), count(m)"
)


@dataclass(frozen=True)
class _Planned:
    move: DecayMove
    path: str
    sensitive: bool
    last_recalled_at: datetime | None


def plan(stores: Stores, now: datetime, policy: DecayPolicy) -> tuple[list[_Planned], int]:
    """The moves due at `now`, from the graph (no file is read), and how many rows it read."""
    shortest, count = stores.graph.cypher(_FALLBACK_TTL, limit=1).rows[0]
    if not count or shortest is None:
        return [], 0
    shortest = min(int(shortest), policy.dim_days)  # a session without ttl_days uses dim_days
    alive, dim, soft = policy.soonest(shortest)
    now = to_utc(now)
    rows = stores.graph.cypher(
        _CANDIDATES,
        {"alive": now - alive, "dim": now - dim, "soft": now - soft},
        limit=100_000_000,
    ).rows
    planned: list[_Planned] = []
    for slug, scope_hash, title, ttl, state, created, recalled, sensitive, path in rows:
        current = DecayState(state)
        recalled, created = _when(recalled), _when(created)
        reference = recalled or created
        if reference is None:
            continue
        target = next_state(MemoryType.SESSION, ttl, current, reference, now, policy)
        if target is None:
            continue
        idle = (now - to_utc(reference)) // DAY
        move = DecayMove.model_construct(  # typed already: a sweep may plan 100k moves
            slug=slug,
            scope_hash=scope_hash,
            title=title,
            from_state=current,
            to_state=target,
            idle_days=idle,
        )
        planned.append(_Planned(move, path or "", bool(sensitive), recalled))
    planned.sort(key=lambda p: (p.move.scope_hash, p.move.slug))
    return planned, len(rows)


# -- the frontmatter, edited in place -----------------------------------------------------------
def _frontmatter_end(text: str) -> int | None:
    """The offset of the closing `---` line of a memory file's frontmatter."""
    if not text.startswith("---\n"):
        return None
    match = re.search(r"^---[ \t]*$", text[4:], re.M)
    return None if match is None else match.start() + 4


def _line_value(head: str, key: str) -> str | None:
    """The raw value of a one-line top-level key (None: absent, or not a one-liner)."""
    found = re.findall(rf"^{key}:[ \t]*([^\n]*)\n(?![ \t-])", head, re.M)
    return found[0].strip() if len(found) == 1 else None


def _timestamp(raw: str | None) -> datetime | None:
    if raw is None or raw in ("", "null", "~"):
        return None
    try:
        return to_utc(datetime.fromisoformat(raw.strip("'\"").replace("Z", "+00:00")))
    except ValueError:
        return None


def edit_state(text: str, state: DecayState, extra: dict[str, str]) -> str | None:
    """`text` with its `decay_state` line set to `state` and `extra` lines (key → YAML
    scalar) set or added, without re-rendering the file: the sweep rewrites thousands of
    files. None when the frontmatter is not shaped as memoryd writes it (then the caller
    parses and renders the file instead)."""
    end = _frontmatter_end(text)
    if end is None:
        return None
    head, rest = text[:end], text[end:]
    if _line_value(head, "decay_state") is None:
        return None
    head = re.sub(r"^decay_state:[^\n]*$", f"decay_state: {state.value}", head, count=1, flags=re.M)
    for key, value in extra.items():
        if re.search(rf"^{key}:", head, re.M):
            if _line_value(head, key) is None:
                return None
            head = re.sub(rf"^{key}:[^\n]*$", f"{key}: {value}", head, count=1, flags=re.M)
        else:
            head += f"{key}: {value}\n"
    return head + rest


def _when(value: object) -> datetime | None:
    """A timestamp as a graph query returns it (a datetime, or ISO text)."""
    if isinstance(value, datetime):
        return to_utc(value)
    return _timestamp(value) if isinstance(value, str) else None


def _quoted(value: datetime) -> str:
    return f'"{format_ts(value)}"'


_Seen = tuple[int, int, int, int]


def _seen(stat: os.stat_result) -> _Seen:
    """Which file a path held when it was read: inode, size, modification and change times."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


# -- the sweep ----------------------------------------------------------------------------------
class DecaySweep:
    """One decay sweep over the stores the service lends (`Stores`)."""

    def __init__(self, stores: Stores, policy: DecayPolicy) -> None:
        self.stores = stores
        self.policy = policy

    def run(self, now: datetime, *, dry_run: bool = False) -> SweepReport:
        started = time.perf_counter()
        planned, checked = plan(self.stores, now, self.policy)
        report = SweepReport(at=now, dry_run=dry_run, checked=checked)
        if dry_run:
            report.moved = [p.move for p in planned]
            report.seconds = time.perf_counter() - started
            return report
        for p in planned:
            if p.sensitive:
                report.skipped[p.move.slug] = "its scope is sensitive (the file is encrypted)"
        todo = [p for p in planned if not p.sensitive]
        if todo:
            report.moved = self._apply(todo, to_utc(now), report.skipped)
        report.seconds = time.perf_counter() - started
        return report

    def _apply(
        self, todo: list[_Planned], now: datetime, skipped: dict[str, str]
    ) -> list[DecayMove]:
        """The files batch by batch, each batch a write intent synced once; then graph,
        search index and audit log once for the whole sweep; then the intents end."""
        stores = self.stores
        intents: list[Intent] = []
        done: list[tuple[_Planned, IntentItem]] = []
        try:
            for start in range(0, len(todo), SWEEP_BATCH):
                written = self._write_batch(todo[start : start + SWEEP_BATCH], now, skipped)
                if written is not None:
                    intents.append(written[0])
                    done.extend(written[1])
            if not done:
                return []
            gone = [p.move.slug for p, _ in done if p.move.to_state is DecayState.FORGOTTEN]
            states = {
                p.move.slug: p.move.to_state
                for p, _ in done
                if p.move.to_state is not DecayState.FORGOTTEN
            }
            stores.graph.set_decay_states(states)
            stores.graph.delete_memories(gone)
            stores.index.set_decay_states(states, gone)
            stores.audit.append_many(
                [
                    AuditEvent(
                        actor=stores.actor,
                        event_type=item.event_type,
                        scope_hash=item.scope_hash,
                        target_id=item.slug,
                        details=item.details,
                    )
                    for _, item in done
                ]
            )
        except MemorydError:
            # The files that moved are the truth; the intents stay, and the next start
            # (`MemoryService.recover`) brings graph, index and audit log to them.
            logger.exception("decay sweep stopped midway; the next start settles it")
            raise
        for intent in intents:
            stores.journal.end(intent)
        return [p.move for p, _ in done]

    def _write_batch(
        self, batch: list[_Planned], now: datetime, skipped: dict[str, str]
    ) -> tuple[Intent, list[tuple[_Planned, IntentItem]]] | None:
        """One batch of files under a write intent (left open: the caller ends it once the
        graph, index and audit log hold the sweep). None when no file of it is to change."""
        stores = self.stores
        prepared: list[tuple[_Planned, str, _Seen, bytes]] = []
        for p in batch:
            try:
                with open(p.path, "rb") as handle:
                    seen = _seen(os.fstat(handle.fileno()))
                    old = handle.read()
            except OSError as exc:
                skipped[p.move.slug] = f"cannot read {p.path}: {exc.strerror or exc}"
                continue
            new = self._rewritten(p, old, now, skipped)
            if new is None:
                continue
            prepared.append((p, self._target(p), seen, new))
        if not prepared:
            return None
        items = [
            IntentItem(
                slug=p.move.slug,
                path=target,
                event_type="decay",
                scope_hash=p.move.scope_hash,
                details={
                    "from": p.move.from_state.value,
                    "to": p.move.to_state.value,
                    "idle_days": p.move.idle_days,
                },
                old_path=p.path if target != p.path else None,
                sha256=hashlib.sha256(new).hexdigest(),
            )
            for p, target, _, new in prepared
        ]
        # A `replace`: recovery brings graph and index to each file, and a file the sweep
        # forgot (`forgotten_at`) leaves them.
        intent = stores.journal.begin(
            op="replace",
            actor=stores.actor,
            audit_seq=stores.audit.last_seq(),
            items=items,
        )
        # No file is fsynced on its own: one sync of the whole batch (files and
        # directories) follows, and until the intent ends recovery rolls each file forward
        # or back by its hash. Files are written by lock stripe, each stripe taken once for
        # all its files, and the stripes by a few threads (the syscalls release the GIL).
        stripes: dict[int, list[int]] = {}
        for number, (p, *_) in enumerate(prepared):
            stripes.setdefault(lock_stripe(p.move.slug), []).append(number)
        groups = list(stripes.values())
        wrote = [False] * len(prepared)
        with ThreadPoolExecutor(max_workers=WRITERS) as pool:
            results = pool.map(
                lambda numbers: self._write_stripe([prepared[n] for n in numbers], skipped),
                groups,
            )
            for numbers, oks in zip(groups, results, strict=True):
                for number, ok in zip(numbers, oks, strict=True):
                    wrote[number] = ok
        stores.vault.sync_all()
        done = [(p, item) for (p, *_), item, ok in zip(prepared, items, wrote, strict=True) if ok]
        return intent, done

    def _target(self, p: _Planned) -> str:
        """Where the file goes: its path, unless decay forgets it (then `forgotten/`)."""
        if p.move.to_state is DecayState.FORGOTTEN:
            scope_dir = self.stores.vault.scope_dir(p.move.scope_hash)
            return os.path.join(scope_dir, FORGOTTEN_DIR, os.path.basename(p.path))
        return p.path

    def _rewritten(
        self, p: _Planned, old: bytes, now: datetime, skipped: dict[str, str]
    ) -> bytes | None:
        """The file's new bytes, or None (noted in `skipped`) when it no longer holds what the
        graph said: a recall, a capture or a hand edit got there first."""
        try:
            text = old.decode("utf-8")
        except UnicodeDecodeError:
            skipped[p.move.slug] = f"{p.path} is not UTF-8 text"
            return None
        end = _frontmatter_end(text)
        head = text[:end] if end is not None else ""
        state = _line_value(head, "decay_state")
        recalled = _timestamp(_line_value(head, "last_recalled_at"))
        if state is not None and (
            state.strip("'\"") != p.move.from_state.value or recalled != p.last_recalled_at
        ):
            skipped[p.move.slug] = "its file changed since it was indexed (reindex, or wait)"
            return None
        extra = {"forgotten_at": _quoted(now)} if p.move.to_state is DecayState.FORGOTTEN else {}
        edited = edit_state(text, p.move.to_state, extra) if state is not None else None
        if edited is not None:
            return edited.encode("utf-8")
        try:  # not shaped as memoryd writes it: parse and render it whole
            memory = self.stores.vault.read(Path(p.path))
            memory.meta.decay_state = p.move.to_state
            if extra:
                memory.meta.forgotten_at = now
        except MemorydError as exc:
            skipped[p.move.slug] = str(exc)
            return None
        return render(memory).encode("utf-8")

    def _write_stripe(
        self, jobs: list[tuple[_Planned, str, _Seen, bytes]], skipped: dict[str, str]
    ) -> list[bool]:
        """Write the files of one lock stripe under one hold of its lock, each only if it
        is still the file the sweep read (a capture or recall got there first otherwise).
        Whether each was written."""
        try:
            with self.stores.lock(jobs[0][0].move.slug):
                return [self._write(p, target, old, new, skipped) for p, target, old, new in jobs]
        except MemorydError as exc:  # the stripe stayed locked: none of its files is touched
            for p, *_ in jobs:
                skipped[p.move.slug] = str(exc)
            return [False] * len(jobs)

    @staticmethod
    def _write(p: _Planned, target: str, seen: _Seen, new: bytes, skipped: dict[str, str]) -> bool:
        """Write one file (its stripe's lock held), only if it is still the one read (same
        inode, size and times: memoryd's writers replace a file, so a change is a new inode;
        a stat instead of reading it again)."""
        try:
            if _seen(os.stat(p.path)) != seen:
                skipped[p.move.slug] = "its file changed during the sweep"
                return False
            atomic_write(Path(target), new, sync=False)
            if target != p.path:
                os.unlink(p.path)
        except FileNotFoundError:
            skipped[p.move.slug] = f"{p.path} is gone"
            return False
        except MemorydError as exc:
            skipped[p.move.slug] = str(exc)
            return False
        return True


# -- restore --------------------------------------------------------------------------------
def restore(stores: Stores, slug: str, now: datetime) -> RestoreResult:
    """Bring a forgotten memory back to alive: out of `forgotten/`, into the graph and the
    index, its idle clock restarted (`last_recalled_at` = now: a restore is a use, and the next
    sweep would otherwise forget it again at once). A dim or soft-forgotten memory is revived
    where it is. Restoring an alive memory is a Conflict."""
    row = stores.graph.get_memory(slug)
    path = Path(row.path) if row is not None and row.path else stores.vault.find(slug)
    if path is None:
        raise NotFound(
            f"no memory with slug {slug!r}, forgotten or not",
            hint="`memoryd audit --event-type decay` names the memories decay forgot",
        )
    with stores.lock(slug):
        old = stores.vault.read(path)
        if old.meta.slug != slug:
            raise NotFound(f"{path} holds {old.meta.slug!r}, not {slug!r}")
        state = old.meta.decay_state
        if state is DecayState.ALIVE and path.parent.name != FORGOTTEN_DIR:
            raise Conflict(f"memory {slug} is alive: there is nothing to restore")
        target = stores.vault.scope_dir(old.meta.scope_hash) / old.meta.type.dir_name / path.name
        if target != path and target.exists():
            raise Conflict(
                f"cannot restore {slug}: {target} exists already",
                hint="move one of the two files away, then run `memoryd reindex`",
            )
        changes: dict[str, Any] = {
            "decay_state": DecayState.ALIVE,
            "forgotten_at": None,
            "last_recalled_at": to_utc(now),
        }
        fields = {**old.meta.model_dump(), **changes}
        fields.pop("merged_into", None)  # a merged memory restored stands on its own again
        meta = Frontmatter.model_validate(fields)
        new = Memory(meta=meta, body=old.body, path=target, sensitive=old.sensitive)
        data = render(new).encode("utf-8")
        item = IntentItem(
            slug=slug,
            path=str(target),
            event_type="restore",
            scope_hash=meta.scope_hash,
            details={"from": state.value, "decayed": old.meta.forgotten_at is not None},
            old_path=str(path) if target != path else None,
            sha256=hashlib.sha256(data).hexdigest(),
        )
        intent = stores.journal.begin(
            op="replace", actor=stores.actor, audit_seq=stores.audit.last_seq(), items=[item]
        )
        try:
            stores.vault.write(new)
        except MemorydError:
            stores.journal.end(intent)  # an atomic write that failed changed nothing
            raise
        if target != path:
            stores.vault.remove(path)
        stores.graph.upsert_memories([new])
        stores.index.upsert([stores.search_doc(new)])
        stores.audit.append_many(
            [
                AuditEvent(
                    actor=stores.actor,
                    event_type="restore",
                    scope_hash=meta.scope_hash,
                    target_id=slug,
                    details=item.details,
                )
            ]
        )
        stores.journal.end(intent)
    return RestoreResult(slug=slug, from_state=state, path=str(target))
