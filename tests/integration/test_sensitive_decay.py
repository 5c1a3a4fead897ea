"""Decay in a sensitive scope: its encrypted session memories move alive → dim →
soft-forgotten → forgotten like any other, without the scope key (the sweep reads no file:
the graph skeleton plans, the decay ledger holds opaque slugs, a forgotten file is renamed
sealed), and `restore` brings one back, sealed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.config import Settings
from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.search.overlay import OVERLAY_FILE
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.integration.test_sensitive_mark import leaks

NOW = datetime(2027, 1, 1, tzinfo=UTC)
SECRET = "Zorblax7731"  # a canary `leaks` looks for (test_sensitive_mark.CANARIES)


@pytest.fixture
def keyed_svc(settings: Settings, file_keyring: object) -> Iterator[MemoryService]:
    service = open_service(settings)
    try:
        yield service
    finally:
        service.close()


def session(svc: MemoryService, project: Path, name: str, idle_days: int) -> str:
    draft = MemoryDraft(
        type=MemoryType.SESSION,
        title=f"{SECRET} session {name}",
        body=f"We moved the {SECRET} ledger to the new host ({name}).",
        scope_path=project,
        created_at=NOW - timedelta(days=idle_days),
    )
    return svc.record(draft).slug


def test_a_sensitive_memory_decays_without_the_key_and_is_restored_sealed(
    keyed_svc: MemoryService, project: Path, home: Path
) -> None:
    svc = keyed_svc
    svc.sensitive_mark(project)
    slugs = {name: session(svc, project, name, idle) for name, idle in
             {"dim": 100, "soft": 130, "gone": 300, "fresh": 10}.items()}  # fmt: skip
    sealed = {name: svc.vault.find(slug) for name, slug in slugs.items()}
    before = {name: path.read_bytes() for name, path in sealed.items() if path is not None}
    assert all(path.name.endswith(".md.enc") for path in sealed.values() if path is not None)
    # The sweep needs no key: a vault that holds no cipher cannot open a sealed file at all.
    cipher, svc.vault.cipher = svc.vault.cipher, None
    try:
        report = svc.sweep_at(NOW)
    finally:
        svc.vault.cipher = cipher
    assert report.skipped == {}
    assert {m.slug: m.to_state for m in report.moved} == {
        slugs["dim"]: DecayState.DIM,
        slugs["soft"]: DecayState.SOFT_FORGOTTEN,
        slugs["gone"]: DecayState.FORGOTTEN,
    }
    assert all(m.title == "" for m in report.moved)  # the skeleton has no title to show
    # The on-disk index withholds them, so its decay overlay names none of them either.
    assert not (svc.index.directory / OVERLAY_FILE).exists()
    # The skeletons hold the states; the forgotten one left the graph.
    rows = svc.graph.memory_rows(list(slugs.values()))
    assert rows[slugs["dim"]].decay_state is DecayState.DIM
    assert rows[slugs["soft"]].decay_state is DecayState.SOFT_FORGOTTEN
    assert rows[slugs["fresh"]].decay_state is DecayState.ALIVE
    assert slugs["gone"] not in rows
    # No file was decrypted or re-sealed: the same bytes, the forgotten one renamed.
    gone = svc.vault.find(slugs["gone"])
    assert gone is not None
    assert gone.parent.name == "forgotten"
    assert gone.name.endswith(".md.enc")
    for name, path in sealed.items():
        assert (gone if name == "gone" else path).read_bytes() == before[name]  # type: ignore[union-attr]
    # The ledger names opaque slugs, states and times only.
    scope_hash = rows[slugs["dim"]].scope_hash
    ledger = svc.vault.decay_ledger_path(scope_hash).read_text(encoding="utf-8")
    assert {json.loads(line)["slug"] for line in ledger.splitlines()} == {
        slugs[n] for n in ("dim", "soft", "gone")
    }
    # With the key, the files read in their new states.
    assert svc.vault.read(gone).meta.decay_state is DecayState.FORGOTTEN
    assert svc.vault.read(gone).meta.forgotten_at == NOW
    dim_path = sealed["dim"]
    assert dim_path is not None
    assert svc.vault.read(dim_path).meta.decay_state is DecayState.DIM
    # Restore brings the forgotten one back, sealed, alive, into the graph as a skeleton.
    svc.clock = lambda: NOW + timedelta(days=1)
    restored = svc.restore(slugs["gone"])
    assert restored.from_state is DecayState.FORGOTTEN
    back = Path(restored.path)
    assert back.parent.name == "sessions"
    assert back.name.endswith(".md.enc")
    assert not gone.exists()
    assert svc.vault.read(back).meta.decay_state is DecayState.ALIVE
    row = svc.graph.get_memory(slugs["gone"])
    assert row is not None
    assert row.decay_state is DecayState.ALIVE
    assert row.title == ""
    # A reindex from the vault alone gives every memory the state the sweep left.
    svc.reindex()
    rows = svc.graph.memory_rows(list(slugs.values()))
    assert {name: rows[slug].decay_state for name, slug in slugs.items()} == {
        "dim": DecayState.DIM,
        "soft": DecayState.SOFT_FORGOTTEN,
        "gone": DecayState.ALIVE,
        "fresh": DecayState.ALIVE,
    }
    assert svc.consistency() == (set(), set(), set())
    assert svc.audit_verify().ok
    svc.close()
    assert leaks(home) == []


def test_marking_a_scope_renames_its_decay_ledger_and_keeps_the_states(
    keyed_svc: MemoryService, project: Path, home: Path
) -> None:
    """Memories that decayed before the mark keep their state under their opaque slugs, and
    the ledger no longer names them by their title-derived slugs."""
    svc = keyed_svc
    slugs = {name: session(svc, project, name, idle) for name, idle in
             {"dim": 100, "soft": 130, "fresh": 10}.items()}  # fmt: skip
    svc.sweep_at(NOW)
    scope_hash = svc.graph.memory_rows([slugs["dim"]])[slugs["dim"]].scope_hash
    ledger = svc.vault.decay_ledger_path(scope_hash)
    assert slugs["dim"] in ledger.read_text(encoding="utf-8")
    svc.sensitive_mark(project)
    text = ledger.read_text(encoding="utf-8")
    assert all(slug not in text for slug in slugs.values())
    states = {row.decay_state for row in svc.graph.memory_rows(
        [json.loads(line)["slug"] for line in text.splitlines()]).values()}  # fmt: skip
    assert states == {DecayState.DIM, DecayState.SOFT_FORGOTTEN}
    svc.reindex()  # the vault alone still gives the states, under the new slugs
    assert sorted(r.decay_state.value for r in svc.graph.list_memories()) == sorted(
        ["dim", "soft-forgotten", "alive"]
    )
    assert svc.audit_verify().ok
    svc.close()
    assert leaks(home) == []
