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
`bench/governance.py --decay-n 100000`; the numbers are in the commit that made it so and
in bench/RESULTS.md). A sweep never rewrites a memory file: rewriting each one (a temp file
and a rename per memory, and an unlink for a forgotten one) was most of a 100k sweep's time,
most of it waiting on the disk's metadata work. Instead (the vault's docstring has the
storage):
* dim and soft-forgotten are lines in the scope's decay ledger (`scopes/<hash>/decay.jsonl`,
  append-only, compacted), one append and one fsync per scope and batch; each line keeps the
  `last_recalled_at` it was decided on, so a later recall, get or restore, which writes a new
  one into the file, revives the memory without touching the ledger;
* forgotten is a ledger line and a plain rename into `forgotten/` (the folder is
  authoritative; the frontmatter keeps its old state until the file is next written);
* so the sweep needs no file content at all: a sensitive scope's encrypted memories decay
  like the others, without the scope key (planned from their graph skeletons; the ledger
  holds their opaque slugs, states and times only);
* the plan is one graph query; nothing due reads no file;
* each batch of `SWEEP_BATCH` is a write intent (op `decay`): the ledger lines first, then
  its forgotten files handed to the renames (`governance.renames`: for a sweep that forgets
  thousands, a child process moves them while this one goes on); then the search index,
  written while the renames run (a memory whose file could not be moved is indexed again
  from its file), and the graph in a worker thread (the states at once, then the deletions
  of each batch's files as soon as they moved, while the next batch is renamed); then the
  audit log (one `decay` event per batch
  and scope, listing its moves, and the moves whose file could not be moved as `skipped`:
  `audit verify` checks that every ledger line has one) once for the whole sweep, and only
  then do the intents end;
* a crash (kill -9) anywhere leaves the intents: the next open settles each memory they
  name: rolled forward when its ledger line landed (a rename left undone is finished),
  back when it did not, with one graph and one index write per intent, and `doctor` is
  clean; the sweep being idempotent, the next one moves what it had not reached.
The whole sweep runs under `native.fewer_collections` with a young threshold of
`SWEEP_YOUNG_OBJECTS`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from memoryd.audit import AuditEvent
from memoryd.errors import Conflict, MemorydError, NotFound
from memoryd.governance.renames import Rename, Renames
from memoryd.governance.stores import Stores
from memoryd.graph.store import GraphStore
from memoryd.journal import Intent, IntentItem
from memoryd.models import (
    AuditRecord,
    DecayState,
    Frontmatter,
    Memory,
    MemoryType,
    Timestamp,
    format_ts,
    to_utc,
    typed,
)
from memoryd.search.index import Placed
from memoryd.vault import FORGOTTEN_DIR, decay_line, render

logger = logging.getLogger(__name__)

SWEEP_BATCH = 25_000
"""Memories per write intent: one journal fsync, one ledger fsync and two folder fsyncs per
scope, one lock per stripe, one audit event per scope. What a batch costs beyond its
memories grows with the scopes it touches (20 scopes: about 60 fsyncs), so a first sweep of
100k in batches of 5,000 spent about 0.35 s in fsyncs alone; an intent of 25k items is a
few MB of journal. Graph and index are written once for the whole sweep."""
SWEEP_YOUNG_OBJECTS = 5_000_000
"""The young-generation threshold of the cyclic GC during a sweep (`native.fewer_collections`):
its objects are freed by reference counting, so a pass finds next to nothing to collect."""
DAY = timedelta(days=1)
_STATES = {state.value: state for state in DecayState}
_VALUES = {state: state.value for state in DecayState}
"""A state's value by lookup: an enum's `.value` is a descriptor call, 600k of them a sweep."""
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
        found = Counter(_VALUES[m.to_state] for m in self.moved)
        return {
            state.value: found[state.value] for state in DecayState if state is not DecayState.ALIVE
        }


class RestoreResult(BaseModel):
    slug: str
    from_state: DecayState
    path: str


# -- planning ---------------------------------------------------------------------------------
_FALLBACK_TTL = (
    "MATCH (m:Memory) WHERE m.type = 'session' AND m.decay_state <> 'forgotten'"
    " RETURN min(m.ttl_days), count(m)"
)


@dataclass(frozen=True, slots=True)
class _Planned:
    move: DecayMove
    path: str
    last_recalled_at: datetime | None
    created_at: datetime


def plan(stores: Stores, now: datetime, policy: DecayPolicy) -> tuple[list[_Planned], int]:
    """The moves due at `now`, from the graph (no file is read), and how many rows it read.
    The graph returns only the rows the shortest ttl may move; each row's state is then a
    comparison of its idle time with its ttl's thresholds, worked out once per ttl."""
    shortest, count = stores.graph.cypher(_FALLBACK_TTL, limit=1).rows[0]
    if not count or shortest is None:
        return [], 0
    shortest = min(int(shortest), policy.dim_days)  # a session without ttl_days uses dim_days
    alive, dim, soft = policy.soonest(shortest)
    now = to_utc(now)
    rows = stores.graph.decay_candidates(now - alive, now - dim, now - soft)
    limits: dict[int, tuple[timedelta, timedelta, timedelta]] = {}
    states = (DecayState.DIM, DecayState.SOFT_FORGOTTEN, DecayState.FORGOTTEN)
    planned: list[_Planned] = []
    for slug, scope_hash, title, ttl, state, since, recalled, path, created in rows:
        if since is None:
            continue
        bounds = limits.get(ttl)
        if bounds is None:
            bounds = limits[ttl] = policy.soonest(ttl)
        idle = now - since
        reached = 3 if idle >= bounds[2] else 2 if idle >= bounds[1] else 1
        current = _STATES[state]
        if idle < bounds[0] or reached <= _ORDER[current]:
            continue
        move = typed(  # typed already: a sweep may plan 100k moves
            DecayMove,
            slug=slug,
            scope_hash=scope_hash,
            title=title,
            from_state=current,
            to_state=states[reached - 1],
            idle_days=idle // DAY,
        )
        planned.append(_Planned(move, path or "", recalled, created))
    planned.sort(key=lambda p: (p.move.scope_hash, p.move.slug))
    return planned, len(rows)


# -- the sweep ----------------------------------------------------------------------------------
def _write_graph(graph: GraphStore, states: Mapping[str, DecayState], renames: Renames) -> set[str]:
    """The sweep's graph statements (in a worker thread): the states now, the deletions of
    each batch once its renames are done (only what moved leaves the graph), while the next
    batch is renamed. Returns the slugs renamed."""
    graph.set_decay_states(states)
    renamed: set[str] = set()
    for moved in renames.moved():
        graph.delete_memories(sorted(moved))
        renamed.update(moved)
    return renamed


def decay_moves(records: list[AuditRecord]) -> set[tuple[str, str]]:
    """(slug, to-state) of every move the `decay` audit events name: a sweep's batched
    events list theirs in `moves` (and those whose file could not be moved, their ledger
    line written, in `skipped`), a move settled by recovery is an event of its own."""
    moves: set[tuple[str, str]] = set()
    for record in records:
        if record.event_type != "decay":
            continue
        details = json.loads(record.details)
        if record.target_id is not None:
            moves.add((record.target_id, str(details.get("to"))))
        for move in (*details.get("moves", ()), *details.get("skipped", ())):
            moves.add((str(move[0]), str(move[2])))
    return moves


SWEEP_STEPS = 3
"""What a sweep's `progress(done, total)` counts per memory moved: its ledger line (batch by
batch), its index and graph change, and its audit event; `total` is this many times the
moves planned (the three parts take comparable time, bench/RESULTS.md)."""


class DecaySweep:
    """One decay sweep over the stores the service lends (`Stores`)."""

    def __init__(self, stores: Stores, policy: DecayPolicy) -> None:
        self.stores = stores
        self.policy = policy
        self._progress: Callable[[int, int], None] = lambda done, total: None

    def run(
        self,
        now: datetime,
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> SweepReport:
        """Plan and (unless `dry_run`) apply the moves due at `now`; `progress(done, total)`
        as the moves are written, in `SWEEP_STEPS` steps per memory."""
        started = time.perf_counter()
        planned, checked = plan(self.stores, now, self.policy)
        report = SweepReport(at=now, dry_run=dry_run, checked=checked)
        if dry_run:
            report.moved = [p.move for p in planned]
        elif planned:
            if progress is not None:
                self._progress = progress
            report.moved = self._apply(planned, to_utc(now), report.skipped)
        report.seconds = time.perf_counter() - started
        return report

    def _apply(
        self, todo: list[_Planned], now: datetime, skipped: dict[str, str]
    ) -> list[DecayMove]:
        """The ledger batch by batch, each batch a write intent, its forgotten files handed
        to the renamer; then the search index, while the renames run, and the graph; then
        the audit log, once for the whole sweep; then the intents end.

        The index is written before the renames are known to have happened (they nearly
        always do): a memory whose file could not be moved (its lock stayed taken, or it
        is gone) is indexed again from its file, in the state its ledger line then gives
        it. The graph deletes only what was moved: its edges come from other memories too."""
        stores = self.stores
        batches: list[tuple[Intent, list[_Planned]]] = []
        appended: dict[str, int] = {}
        renames = Renames(
            stores, skipped, sum(p.move.to_state is DecayState.FORGOTTEN for p in todo)
        )
        steps = SWEEP_STEPS * len(todo)
        self._progress(0, steps)
        try:
            try:
                for start in range(0, len(todo), SWEEP_BATCH):
                    batch = todo[start : start + SWEEP_BATCH]
                    intent, moving = self._write_batch(batch, now, appended)
                    renames.send(moving)
                    batches.append((intent, batch))
                    self._progress(start + len(batch), steps)
                states = {
                    p.move.slug: p.move.to_state
                    for p in todo
                    if p.move.to_state is not DecayState.FORGOTTEN
                }
                forgotten = [p for p in todo if p.move.to_state is DecayState.FORGOTTEN]
                placed = {  # the index then need not read them back
                    p.move.slug: Placed(p.move.scope_hash, p.move.from_state, p.created_at)
                    for p in todo
                }
                with ThreadPoolExecutor(max_workers=1, thread_name_prefix="decay-graph") as pool:
                    # The graph's statements run in kuzu without the GIL, beside the index's
                    # Python work (they share nothing); its deletions wait for the renames.
                    graph_written = pool.submit(_write_graph, stores.graph, states, renames)
                    try:
                        stores.index.set_decay_states(
                            states, [p.move.slug for p in forgotten], placed
                        )
                    finally:
                        renamed = graph_written.result()
                self._index_again([p for p in forgotten if p.move.slug not in renamed])
                self._progress(2 * len(todo), steps)
                done = {
                    p.move.slug
                    for p in todo
                    if p.move.to_state is not DecayState.FORGOTTEN or p.move.slug in renamed
                }
                stores.audit.append_many(
                    [
                        event
                        for _, batch in batches
                        for event in self._events(batch, done, skipped, now)
                    ]
                )
            finally:
                renames.close()
        except MemorydError:
            # What the ledger and the folders hold is the truth; the intents stay, and the
            # next start (`MemoryService.recover`) brings graph, index and audit log to it.
            logger.exception("decay sweep stopped midway; the next start settles it")
            raise
        for intent, _ in batches:
            stores.journal.end(intent)
        for scope_hash, size in sorted(appended.items()):
            stores.vault.compact_decay(scope_hash, size)
        self._progress(steps, steps)
        return [p.move for p in todo if p.move.slug in done]

    def _index_again(self, unmoved: list[_Planned]) -> None:
        """Index the memories whose files stayed where they were (a rename skipped), as their
        files now say (the ledger line of a rename that never happened does not count)."""
        stores = self.stores
        docs = []
        for p in unmoved:
            try:
                docs.append(stores.search_doc(stores.vault.read(Path(p.path))))
            except MemorydError:
                logger.warning("decay: %s stays out of the search index: %s", p.move.slug, p.path)
        stores.index.upsert(docs)

    def _events(
        self, batch: list[_Planned], done: set[str], skipped: dict[str, str], now: datetime
    ) -> list[AuditEvent]:
        """One `decay` event per scope of a batch, listing its moves (slug, from, to, idle
        days): 100k events chained one by one were a tenth of a 100k sweep. A move whose
        ledger line landed but whose file could not be moved is listed under `skipped`,
        with why (`audit verify` finds an event for every ledger line)."""
        by_scope: dict[str, tuple[list[list[object]], list[list[object]]]] = {}
        for p in batch:
            m = p.move
            made, missed = by_scope.setdefault(m.scope_hash, ([], []))
            line: list[object] = [m.slug, _VALUES[m.from_state], _VALUES[m.to_state], m.idle_days]
            if m.slug in done:
                made.append(line)
            else:
                missed.append([*line[:3], skipped.get(m.slug, "not moved")])
        events = []
        for scope_hash, (made, missed) in by_scope.items():
            details: dict[str, Any] = {"at": format_ts(now), "count": len(made), "moves": made}
            if missed:
                details["skipped"] = missed
            events.append(
                AuditEvent(
                    actor=self.stores.actor,
                    event_type="decay",
                    scope_hash=scope_hash,
                    details=details,
                )
            )
        return events

    def _write_batch(
        self, batch: list[_Planned], now: datetime, appended: dict[str, int]
    ) -> tuple[Intent, list[Rename]]:
        """One batch under a write intent (left open: the caller ends it once the graph,
        index and audit log hold the sweep): the ledger lines of each scope in one append
        (`appended` counts the ledger bytes per scope). Returns the intent and the files to
        rename into `forgotten/` (with their targets), which only then may move."""
        stores = self.stores
        at = format_ts(now)
        forgotten: dict[str, str] = {}
        targets = [self._target(p, forgotten) for p in batch]
        items = [
            IntentItem(
                slug=p.move.slug,
                path=target,
                event_type="decay",
                scope_hash=p.move.scope_hash,
                details={
                    "from": _VALUES[p.move.from_state],
                    "to": _VALUES[p.move.to_state],
                    "idle_days": p.move.idle_days,
                    "at": at,
                },
                old_path=p.path if target != p.path else None,
            )
            for p, target in zip(batch, targets, strict=True)
        ]
        intent = stores.journal.begin(
            op="decay", actor=stores.actor, audit_seq=stores.audit.last_seq(), items=items
        )
        lines: dict[str, list[str]] = {}
        for p in batch:
            lines.setdefault(p.move.scope_hash, []).append(
                decay_line(p.move.slug, p.move.from_state, p.move.to_state, now, p.last_recalled_at)
            )
        for scope_hash, scope_lines in lines.items():
            appended[scope_hash] = appended.get(scope_hash, 0) + stores.vault.append_decay(
                scope_hash, scope_lines
            )
        return intent, [
            Rename(p.move.slug, p.path, t)
            for p, t in zip(batch, targets, strict=True)
            if t != p.path
        ]

    def _target(self, p: _Planned, forgotten: dict[str, str]) -> str:
        """Where the file goes: its path, unless decay forgets it (then `forgotten/`, whose
        path `forgotten` keeps per scope)."""
        if p.move.to_state is not DecayState.FORGOTTEN:
            return p.path
        scope_hash = p.move.scope_hash
        folder = forgotten.get(scope_hash)
        if folder is None:
            folder = forgotten[scope_hash] = os.path.join(
                self.stores.vault.scope_dir(scope_hash), FORGOTTEN_DIR, ""
            )
        return folder + p.path.rpartition("/")[2]


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
