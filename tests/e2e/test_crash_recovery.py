"""kill -9 at every step of a write, then open the stores again: recovery settles the write.

Each case runs the write in a child process that SIGKILLs itself at one step (right before or
after a real store call: no code of the write is replaced). The test then opens the data dir
as the next command would, and checks the four stores agree (vault, graph, search index,
audit log), `doctor` is clean, `audit verify` passes and the audit log says what was settled,
with no `reindex`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.audit import AuditLog
from memoryd.config import Settings
from memoryd.doctor import service_checks
from memoryd.inbox import Inbox, IndexRequest, now_ts
from memoryd.journal import IntentItem, Journal
from memoryd.models import (
    DecayState,
    Frontmatter,
    Memory,
    MemoryDraft,
    MemoryType,
    utcnow,
)
from memoryd.scope import resolve_scope
from memoryd.service import CREATING_EVENTS, MemoryService
from memoryd.vault import Vault
from memoryd.wiring import open_service
from tests.conftest import ENGINE

# The child: open the stores, arm one kill, run one write. Nothing of the write is replaced.
CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from memoryd.config import load_settings
from memoryd.models import MemoryDraft, MemoryType
from memoryd.wiring import open_service

args = json.loads(sys.argv[1])
module, _, attr = args["at"].partition(":")
cls_name, _, method = attr.partition(".")
cls = getattr(__import__(module, fromlist=[cls_name]), cls_name)
original = getattr(cls, method)

def armed(self, *a, **k):
    if args["when"] == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(self, *a, **k)
    if args["when"] != "never":  # the op kills itself
        os.kill(os.getpid(), signal.SIGKILL)
    return result

settings = load_settings(
    Path(args["home"]),
    graph={"engine": args["engine"], "buffer_pool_mb": 64},
    extraction={"enabled": False},
    search={"commit_delay_ms": args.get("commit_delay_ms", 1000)},
)
svc = open_service(settings)
setattr(cls, method, armed)
if args["op"] == "records":  # in a row, all returned, killed before the index commits them
    for i in range(3):
        svc.record(MemoryDraft(
            type=MemoryType.FACT, title=f"Quokka fact {i}",
            body=f"The quokka number {i} lives on Rottnest{i} island.", scope_path=args["project"],
        ))
    os.kill(os.getpid(), signal.SIGKILL)
elif args["op"] == "record":
    svc.record(MemoryDraft(
        type=MemoryType.DECISION, title="Use Postgres", body="We chose Postgres for billing.",
        scope_path=args["project"],
    ))
elif args["op"] == "archive":
    svc.archive(args["slug"])
elif args["op"] == "update":
    svc.update_keywords(args["slug"], tags=["db", "billing"])
elif args["op"] == "capture":
    svc.drain_inbox()
elif args["op"] == "merge":
    svc.merge_entities(args["keep"], args["drop"])
elif args["op"] == "sweep":
    from datetime import datetime
    import memoryd.governance.decay as decay
    decay.SWEEP_BATCH = 2  # several write intents open at once
    import memoryd.governance.renames as renames
    renames.CHILD_RENAMES = 1  # the renamer process, as a big sweep runs it
    svc.sweep_at(datetime.fromisoformat(args["now"]))
sys.exit(3)  # the kill never came: the step was not reached
"""

VAULT_WRITE = "memoryd.vault:Vault.write"
VAULT_REMOVE = "memoryd.vault:Vault.remove"
GRAPH_WRITE = "memoryd.graph.kuzu_store:KuzuGraphStore.upsert_memories"
INDEX_WRITE = "memoryd.search.index:SearchIndex.upsert"
AUDIT_WRITE = "memoryd.audit:AuditLog.append_many"
MERGE = "memoryd.graph.kuzu_store:KuzuGraphStore.merge_entities"
BEGIN = "memoryd.journal:Journal.begin"
GRAPH_DECAY = "memoryd.graph.kuzu_store:KuzuGraphStore.set_decay_states"
INDEX_DECAY = "memoryd.search.index:SearchIndex.set_decay_states"
DECAY_RENAME = "memoryd.governance.renames:Renames.send"

STEPS: dict[str, tuple[str, str]] = {
    "before the vault write": (VAULT_WRITE, "before"),
    "after the vault write": (VAULT_WRITE, "after"),
    "after the old file is removed": (VAULT_REMOVE, "after"),
    "after the graph write": (GRAPH_WRITE, "after"),
    "after the index write": (INDEX_WRITE, "after"),
    "before the audit line": (AUDIT_WRITE, "before"),
    "after the audit line": (AUDIT_WRITE, "after"),
    "after the graph merge": (MERGE, "after"),
    "after the first intent": (BEGIN, "after"),
    "before the graph's decay states": (GRAPH_DECAY, "before"),
    "after the index's decay states": (INDEX_DECAY, "after"),
    "between the ledger lines and the renames": (DECAY_RENAME, "before"),
    "after the last record returned": (BEGIN, "never"),
}


def crash(settings: Settings, project: Path, op: str, step: str, **extra: str) -> None:
    at, when = STEPS[step]
    args = {
        "home": str(settings.home),
        "engine": ENGINE,
        "project": str(project),
        "op": op,
        "at": at,
        "when": when,
        **extra,
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def assert_four_way_agreement(svc: MemoryService, settings: Settings) -> set[str]:
    """Vault, graph, search index and audit log hold the same memories, in the same state;
    doctor is clean and the audit log verifies. Returns the slugs."""
    files = {(m := svc.vault.read(p)).meta.slug: m for p in svc.vault.iter_files()}
    graph = svc.graph.memory_rows(sorted(svc.graph.memory_slugs()))
    index = svc.index.stored(sorted(svc.index.slugs()))
    logged = svc.audit.targets(CREATING_EVENTS)
    assert set(files) == set(graph) == set(index) == logged
    for slug, memory in files.items():
        assert graph[slug].path == str(memory.path)
        assert graph[slug].decay_state is memory.meta.decay_state
        assert index[slug].decay_state is memory.meta.decay_state
        assert index[slug].tags == memory.meta.tags
    failing = [c for c in service_checks(svc, settings) if not c.ok]
    assert failing == []
    assert svc.audit_verify().ok
    journal = Journal(svc.home)
    assert journal.pending() == []
    assert journal.path.stat().st_size == 0  # emptied once every intent was settled
    assert not list(svc.vault.scopes_dir.glob("*/*/.*.tmp"))
    return set(files)


def events(settings: Settings, event_type: str) -> list[dict[str, Any]]:
    """The audit events of a type, one per memory: a sweep's batched `decay` event lists its
    moves (slug, from, to, idle days) and counts as one event per move."""
    found: list[dict[str, Any]] = []
    for r in AuditLog(settings.home / "audit").read(event_type=event_type):
        details = json.loads(r.details)
        if r.target_id is None and "moves" in details:
            found.extend({"target": m[0], "from": m[1], "to": m[2]} for m in details["moves"])
        else:
            found.append({"target": r.target_id, **details})
    return found


@pytest.fixture
def quiet(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"extraction": settings.extraction.model_copy(update={"enabled": False})}
    )


# -- record ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "outcome"),
    [
        ("before the vault write", "rolled back"),
        ("after the vault write", "rolled forward"),
        ("after the graph write", "rolled forward"),
        ("after the index write", "rolled forward"),
        ("before the audit line", "rolled forward"),
        ("after the audit line", "complete"),
    ],
)
def test_a_record_killed_at_any_step_is_settled_on_the_next_open(
    quiet: Settings, project: Path, step: str, outcome: str
) -> None:
    crash(quiet, project, "record", step)
    with open_service(quiet) as svc:
        slugs = assert_four_way_agreement(svc, quiet)
        assert len(slugs) == (0 if outcome == "rolled back" else 1)
    records, recovers = events(quiet, "record"), events(quiet, "recover")
    if outcome == "complete":
        assert len(records) == 1
        assert "recovered" not in records[0]
        assert recovers == []
        return
    assert [r["outcome"] for r in recovers] == [outcome]
    assert recovers[0]["op"] == "record"
    assert recovers[0]["event"] == "record"
    if outcome == "rolled forward":
        assert records == [
            {
                "target": recovers[0]["target"],
                "type": "decision",
                "source": "manual",
                "recovered": True,
            }
        ]
    else:
        assert records == []
    # Settled once: opening again finds nothing to do.
    with open_service(quiet) as svc:
        assert svc.recover() == 0
    assert len(events(quiet, "recover")) == 1


def test_records_killed_before_their_index_commit_are_found_after_the_next_open(
    quiet: Settings, project: Path
) -> None:
    """Three records returned, then kill -9 before the index's timer (a minute) committed
    them: their intents were still open, so the next open indexes them again."""
    crash(quiet, project, "records", "after the last record returned", commit_delay_ms="60000")
    with open_service(quiet) as svc:
        slugs = assert_four_way_agreement(svc, quiet)
        assert len(slugs) == 3
        for i in range(3):
            hits = svc.search(f"rottnest{i}", scope=project)
            assert [h.title for h in hits] == [f"Quokka fact {i}"]
    # Complete but for the index: their audit lines were written, so no `recover` line.
    assert len(events(quiet, "record")) == 3
    assert events(quiet, "recover") == []


# -- archive: the file moves to forgotten/ ------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "outcome"),
    [
        ("before the vault write", "rolled back"),
        ("after the vault write", "rolled forward"),
        ("after the old file is removed", "rolled forward"),
        ("after the graph write", "rolled forward"),
        ("after the index write", "rolled forward"),
        ("after the audit line", "complete"),
    ],
)
def test_an_archive_killed_at_any_step_is_settled_on_the_next_open(
    quiet: Settings, project: Path, step: str, outcome: str
) -> None:
    with open_service(quiet) as svc:
        slug = svc.record(
            MemoryDraft(type=MemoryType.FACT, title="Billing", body="x", scope_path=project)
        ).slug
    crash(quiet, project, "archive", step, slug=slug)
    with open_service(quiet) as svc:
        assert assert_four_way_agreement(svc, quiet) == {slug}
        state = svc.get(slug).meta.decay_state
        files = list(svc.vault.scopes_dir.glob(f"*/*/{slug}.md"))
    assert len(files) == 1  # never both the old and the moved file
    archived = outcome != "rolled back"
    assert (state is DecayState.FORGOTTEN) is archived
    assert (files[0].parent.name == "forgotten") is archived
    assert len(events(quiet, "archive")) == (1 if archived else 0)
    recovers = events(quiet, "recover")
    assert [r["outcome"] for r in recovers] == ([] if outcome == "complete" else [outcome])


def test_an_update_killed_after_its_graph_write_keeps_the_new_tags(
    quiet: Settings, project: Path
) -> None:
    with open_service(quiet) as svc:
        slug = svc.record(
            MemoryDraft(type=MemoryType.FACT, title="Tags", body="y", scope_path=project)
        ).slug
    crash(quiet, project, "update", "after the graph write", slug=slug)
    with open_service(quiet) as svc:
        assert_four_way_agreement(svc, quiet)
        assert svc.get(slug).meta.tags == ["db", "billing"]
    assert [e["target"] for e in events(quiet, "update")] == [slug]


# -- capture: the hook wrote the file and an inbox request; a drain is killed --------------------
def captured_session(home: Path, project: Path) -> str:
    """What `memoryd capture` leaves: the session file in the vault and an inbox request."""
    scope = resolve_scope(project)
    meta = Frontmatter(
        title="Session: billing",
        slug="2026-05-18-session-billing-abc123",
        type=MemoryType.SESSION,
        scope_hash=scope.scope_hash,
        source="claude-code",
        created_at=utcnow(),
    )
    vault = Vault(home)
    vault.write_scope(scope)
    memory = Memory(meta=meta, body="We moved billing to Postgres.")
    path = vault.write(memory)
    Inbox(home).submit(
        IndexRequest(
            slug=meta.slug,
            path=str(path),
            scope_hash=scope.scope_hash,
            scope_path=str(project),
            source="claude-code",
            ts=now_ts(),
        )
    )
    return meta.slug


@pytest.mark.parametrize(
    ("step", "outcome"),
    [
        ("after the index write", "rolled forward"),
        ("after the graph write", "rolled forward"),
        ("before the audit line", "rolled forward"),
        ("after the audit line", "complete"),
    ],
)
def test_a_capture_drain_killed_at_any_step_is_settled_and_drains_once(
    quiet: Settings, project: Path, step: str, outcome: str
) -> None:
    with open_service(quiet):
        pass  # the stores exist, as they do once anything ran
    slug = captured_session(quiet.home, project)
    crash(quiet, project, "capture", step)
    with open_service(quiet) as svc:
        # Recovery ran first; the request it left is drained without a second line.
        assert svc.drain_inbox() == 0
        assert Inbox(quiet.home).pending() == []
        assert assert_four_way_agreement(svc, quiet) == {slug}
    captures = events(quiet, "capture")
    assert [c["target"] for c in captures] == [slug]
    recovers = events(quiet, "recover")
    assert [r["outcome"] for r in recovers] == ([] if outcome == "complete" else [outcome])


# -- entity changes: the graph first, then the audit line reindex replays ----------------------
def test_an_entity_merge_killed_before_its_audit_line_is_rolled_forward_and_reindex_keeps_it(
    quiet: Settings, project: Path
) -> None:
    react, reactjs = "entity:library:React", "entity:library:ReactJS"
    with open_service(quiet) as svc:
        svc.record_graph_facts(
            MemoryDraft(
                type=MemoryType.FACT, title="UI", body="React, ReactJS", scope_path=project
            ),
            entity_ids=[react, reactjs],
        )
        assert svc.graph.get_entity(reactjs) is not None
    crash(quiet, project, "merge", "after the graph merge", keep=react, drop=reactjs)
    with open_service(quiet) as svc:
        assert_four_way_agreement(svc, quiet)
        merges = events(quiet, "entity_merge")
        assert merges == [{"target": react, "drop": reactjs, "recovered": True}]
        assert [r["outcome"] for r in events(quiet, "recover")] == ["rolled forward"]
        svc.reindex()  # the merge lives in the audit log: a rebuilt graph replays it
        assert svc.graph.get_entity(reactjs) is None
        assert "ReactJS" in svc.resolve_entity(react).aliases


# -- the journal itself ------------------------------------------------------------------------
def test_an_unsettled_intent_survives_later_writes_and_a_torn_begin_is_ignored(
    tmp_path: Path,
) -> None:
    def item(slug: str) -> IntentItem:
        return IntentItem(slug=slug, path=f"/vault/{slug}.md", event_type="record")

    crashed = Journal(tmp_path).begin(op="record", actor="cli", audit_seq=4, items=[item("a")])
    journal = Journal(tmp_path)  # the next process, before recovery could settle `a`
    later = journal.begin(op="record", actor="cli", audit_seq=5, items=[item("b")])
    assert journal.slugs_in_flight() == {"a", "b"}
    journal.end(later)
    with journal.path.open("ab") as f:
        f.write(b'{"v": 1, "begin": "cut-short", "op": "rec')  # a power cut mid-append

    (left,) = Journal(tmp_path).pending()
    assert (left.id, left.audit_seq, left.items) == (crashed.id, 4, [item("a")])
    after = Journal(tmp_path)  # a write after the torn line is not swallowed by it
    crashed_again = after.begin(op="record", actor="cli", audit_seq=6, items=[item("c")])
    assert {i.id for i in Journal(tmp_path).pending()} == {crashed.id, crashed_again.id}
    after.end(crashed_again)
    journal.end(left)
    assert Journal(tmp_path).pending() == []


# -- a decay sweep: files batch by batch, then graph, index and audit once --------------------
def assert_swept_stores_agree(svc: MemoryService, settings: Settings) -> dict[str, Memory]:
    """Each memory has one file; graph and index hold every memory decay has not forgotten,
    in its file's state, and none it forgot (those sit in forgotten/); doctor is clean, the
    audit log verifies and no intent or temp file is left. Returns the files' memories."""
    paths = list(svc.vault.iter_files())
    files = {(m := svc.vault.read(p)).meta.slug: m for p in paths}
    assert len(files) == len(paths)  # never a memory in two files
    kept = {slug for slug, m in files.items() if m.meta.forgotten_at is None}
    graph = svc.graph.memory_rows(sorted(svc.graph.memory_slugs()))
    index = svc.index.stored(sorted(svc.index.slugs()))
    assert set(graph) == set(index) == kept
    for slug in kept:
        assert graph[slug].decay_state is files[slug].meta.decay_state
        assert index[slug].decay_state is files[slug].meta.decay_state
    for slug in set(files) - kept:
        assert files[slug].meta.decay_state is DecayState.FORGOTTEN
        path = files[slug].path
        assert path is not None
        assert path.parent.name == "forgotten"
    assert [c for c in service_checks(svc, settings) if not c.ok] == []
    assert svc.audit_verify().ok
    assert Journal(svc.home).pending() == []
    assert not list(svc.vault.scopes_dir.glob("*/*/.*.tmp"))
    return files


@pytest.mark.parametrize(
    ("step", "outcome"),
    [
        ("after the first intent", "rolled back"),
        ("between the ledger lines and the renames", "rolled forward"),
        ("before the graph's decay states", "rolled forward"),
        ("after the index's decay states", "rolled forward"),
        ("before the audit line", "rolled forward"),
        ("after the audit line", "complete"),
    ],
)
def test_a_decay_sweep_killed_at_any_step_is_settled_and_the_next_sweep_finishes_it(
    quiet: Settings, project: Path, step: str, outcome: str
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ages = {"a": 95, "b": 100, "c": 125, "d": 250, "e": 300}  # idle days at the sweep
    expected = {"a": DecayState.DIM, "b": DecayState.DIM, "c": DecayState.SOFT_FORGOTTEN}
    expected |= {"d": DecayState.FORGOTTEN, "e": DecayState.FORGOTTEN}
    now = start + timedelta(days=400)
    with open_service(quiet) as svc:
        slugs = {
            name: svc.record(
                MemoryDraft(
                    type=MemoryType.SESSION,
                    title=f"Session {name}",
                    body=f"Notes of session {name} about the nginx reload.",
                    scope_path=project,
                    created_at=now - timedelta(days=idle),
                )
            ).slug
            for name, idle in ages.items()
        }
    crash(quiet, project, "sweep", step, now=now.isoformat())
    with open_service(quiet) as svc:
        files = assert_swept_stores_agree(svc, quiet)
        states = {name: files[slug].meta.decay_state for name, slug in slugs.items()}
        moved = {name for name, state in states.items() if state is not DecayState.ALIVE}
        if outcome == "rolled back":  # killed before the first ledger line: nothing moved
            assert moved == set()
        elif step == "between the ledger lines and the renames":
            # Batches of two, oldest slug first: e and d had their ledger lines, their
            # renames into forgotten/ were not made (recovery makes them); the other
            # batches never began.
            assert moved == {"d", "e"}
            assert {name: states[name] for name in moved} == {n: expected[n] for n in moved}
        else:
            assert states == expected
        decays = {e["target"] for e in events(quiet, "decay")}
        assert decays == {slugs[name] for name in moved}
        recovers = events(quiet, "recover")
        settled = {r["outcome"] for r in recovers}
        assert settled == (set() if outcome == "complete" else {outcome})
        if outcome == "rolled forward":
            assert {r["target"] for r in recovers} == set(decays)
        # The next sweep (tomorrow's daily job) moves what is left; nothing twice.
        report = svc.sweep_at(now)
        assert {m.slug for m in report.moved} == {slugs[n] for n in set(expected) - moved}
        files = assert_swept_stores_agree(svc, quiet)
        assert {name: files[slug].meta.decay_state for name, slug in slugs.items()} == expected
    assert len(events(quiet, "decay")) == len(expected)
