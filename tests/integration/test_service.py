"""The service facade over real stores: vault files, Kuzu, tantivy, audit log, SQLite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memoryd.config import Settings
from memoryd.errors import Conflict, GraphLocked, InvalidInput, NotFound
from memoryd.models import DecayState, MemoryDraft, MemoryType, Predicate, RelationRef
from memoryd.search.index import SCHEMA_VERSION
from memoryd.service import MemoryService
from memoryd.wiring import open_service


def draft(
    project: Path, title: str, body: str, type: str = "decision", **kw: object
) -> MemoryDraft:
    return MemoryDraft.model_validate(
        {"type": type, "title": title, "body": body, "scope_path": project, **kw}
    )


def test_record_is_written_everywhere(svc: MemoryService, project: Path, home: Path) -> None:
    memory = svc.record(
        draft(project, "Use PostgreSQL", "We picked PostgreSQL for JSONB.", tags=["db"])
    )
    assert memory.path is not None
    assert memory.path.is_file()
    assert memory.path.relative_to(home).parts[:3] == (
        "scopes",
        memory.meta.scope_hash,
        "decisions",
    )
    assert svc.get(memory.slug).body == "We picked PostgreSQL for JSONB."
    row = svc.graph.get_memory(memory.slug)
    assert row is not None
    assert row.fingerprint == memory.fingerprint
    assert [h.slug for h in svc.search("jsonb")] == [memory.slug]
    lines = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    last = json.loads(lines[-1])
    assert (last["event_type"], last["target_id"]) == ("record", memory.slug)
    assert "JSONB" not in lines[-1]  # the audit log records events, not memory text


def test_session_memories_get_a_ttl(svc: MemoryService, project: Path) -> None:
    session = svc.record(draft(project, "Session 1", "did things", type="session"))
    fact = svc.record(draft(project, "A fact", "water is wet", type="fact"))
    assert session.meta.ttl_days == 90
    assert fact.meta.ttl_days is None


def test_duplicate_body_is_refused_with_existing_slug(svc: MemoryService, project: Path) -> None:
    first = svc.record(draft(project, "One", "exactly the same body"))
    with pytest.raises(Conflict, match=first.slug) as info:
        svc.record(draft(project, "Two", "exactly the same body"))
    assert "--allow-duplicate" in info.value.hint
    second = svc.record(draft(project, "Two", "exactly the same body", allow_duplicate=True))
    assert second.slug != first.slug


def test_same_body_in_another_scope_is_fine(
    svc: MemoryService, project: Path, other_project: Path
) -> None:
    svc.record(draft(project, "One", "shared body"))
    svc.record(draft(other_project, "One", "shared body"))
    assert len(svc.list_memories()) == 2


def test_bad_input(svc: MemoryService, project: Path) -> None:
    with pytest.raises(InvalidInput, match="title is empty"):
        svc.record(draft(project, "   ", "body"))
    with pytest.raises(InvalidInput, match="does not exist"):
        svc.record(draft(project / "nope", "t", "body"))
    with pytest.raises(NotFound, match="no memory"):
        svc.get("2026-01-01-nothing-000000")
    with pytest.raises(NotFound, match="does not exist"):
        svc.record(draft(project, "t", "b", supersedes=["2026-01-01-missing-000000"]))
    assert svc.list_memories() == []


def test_list_filters(svc: MemoryService, project: Path, other_project: Path) -> None:
    svc.record(draft(project, "A", "a body", type="fact"))
    svc.record(draft(project, "B", "b body", type="warning"))
    svc.record(draft(other_project, "C", "c body", type="fact"))
    assert {m.title for m in svc.list_memories(scope=project)} == {"A", "B"}
    assert {m.title for m in svc.list_memories(type=MemoryType.FACT)} == {"A", "C"}
    scope_hash = svc.scope_show(other_project).scope_hash
    assert [m.title for m in svc.list_memories(scope=scope_hash)] == ["C"]


def test_chinese_word_inside_unspaced_sentence(svc: MemoryService, project: Path) -> None:
    memory = svc.record(draft(project, "存储方案", "我们决定采用向量数据库来存储记忆"))
    assert [h.slug for h in svc.search("数据库")] == [memory.slug]
    assert [h.slug for h in svc.search("向量", scope=project)] == [memory.slug]


def test_search_scope_filter(svc: MemoryService, project: Path, other_project: Path) -> None:
    svc.record(draft(project, "Redis cache", "cache sessions in redis"))
    svc.record(draft(other_project, "Redis queue", "redis as a job queue"))
    assert {h.title for h in svc.search("redis")} == {"Redis cache", "Redis queue"}
    assert [h.title for h in svc.search("redis", scope=other_project)] == ["Redis queue"]


def test_file_deleted_behind_our_back(svc: MemoryService, project: Path) -> None:
    memory = svc.record(draft(project, "Doomed", "will vanish"))
    assert memory.path is not None
    memory.path.unlink()
    with pytest.raises(NotFound, match="missing") as info:
        svc.get(memory.slug)
    assert "reindex" in info.value.hint
    report = svc.reindex()
    assert report.indexed == 0
    assert svc.search("vanish") == []


def test_reindex_skips_broken_file_and_keeps_the_rest(svc: MemoryService, project: Path) -> None:
    good = svc.record(draft(project, "Good", "a good memory about tantivy"))
    bad = svc.record(draft(project, "Bad", "to be broken by hand"))
    assert bad.path is not None
    bad.path.write_text("---\ntitle: [oops\n---\nbody", encoding="utf-8")
    warnings: list[str] = []
    report = svc.reindex(warnings.append)
    assert report.indexed == 1
    assert any(str(bad.path) in w for w in warnings)
    assert [h.slug for h in svc.search("tantivy")] == [good.slug]
    assert svc.graph.memory_slugs() == {good.slug}


def test_reindex_reproduces_graph_and_search(svc: MemoryService, project: Path) -> None:
    older = svc.record(draft(project, "Use React", "React for the storefront", type="preference"))
    svc.record(
        draft(
            project,
            "Switch to Solid",
            "Solid replaces React; bundle too big",
            supersedes=[older.slug],
        )
    )
    svc.record(draft(project, "会话", "我们讨论了部署到 Kubernetes 的方案", type="session"))
    before_graph = svc.graph.snapshot()
    before_search = [svc.search(q) for q in ("react", "solid", "部署", "bundle")]
    svc.reindex()
    assert svc.graph.snapshot() == before_graph
    assert [svc.search(q) for q in ("react", "solid", "部署", "bundle")] == before_search
    assert svc.consistency() == (set(), set(), set())


def test_second_embedded_process_waits_then_fails(svc: MemoryService, settings: Settings) -> None:
    quick = settings.model_copy(update={"lock_timeout_s": 0.2})
    with pytest.raises(GraphLocked, match="another memoryd process") as info:
        open_service(quick)
    assert "memoryd serve" in info.value.message


def test_full_disk_during_record_leaves_nothing_half_written(
    tmp_path: Path, project: Path, settings: Settings
) -> None:
    """A real full disk (tmpfs): the write fails with a clear error; what was stored stays."""
    import os
    import subprocess

    from memoryd.errors import StorageError

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)]).returncode:
        pytest.skip("cannot mount tmpfs")
    try:
        on_disk = settings.model_copy(update={"home": mount / "home"})
        with open_service(on_disk) as service:
            kept = service.record(draft(project, "Kept", "stays after the disk fills"))
            filler = mount / "filler"
            with open(filler, "wb") as handle:
                try:
                    while True:
                        handle.write(b"\0" * 65536)
                except OSError:
                    pass

            def keep_writing() -> None:
                for i in range(50):
                    service.record(draft(project, f"Lost {i}", "x" * 200_000 + str(i)))

            with pytest.raises(StorageError) as info:
                keep_writing()
            assert "disk" in str(info.value).lower() or "space" in str(info.value).lower()
            filler.unlink()
            slugs = {m.slug for m in service.list_memories()}
            files = {p.stem for p in service.vault.iter_files()}
            assert kept.slug in slugs
            assert slugs == files
            assert service.audit_verify().ok
        with open_service(on_disk) as service:
            assert service.get(kept.slug).body == "stays after the disk fills"
            assert service.consistency() == (set(), set(), set())
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_unreadable_search_index_is_refilled_from_the_vault(
    settings: Settings, project: Path, home: Path
) -> None:
    with open_service(settings) as service:
        kept = service.record(draft(project, "Kept", "the index is only derived data"))
    meta = home / "search" / "index_meta.json"
    meta.write_text('{"schema_version": 999}', encoding="utf-8")
    with open_service(settings) as service:
        assert [h.slug for h in service.search("derived")] == [kept.slug]
        assert service.consistency() == (set(), set(), set())


def test_a_search_index_of_schema_version_2_is_rebuilt_on_open(
    settings: Settings, project: Path, home: Path
) -> None:
    """`tests/data/search-index-v2` was written by the code of schema version 2 (before the
    `segmented` field): opening it rebuilds the index from the vault, in the current schema."""
    with open_service(settings) as service:
        kept = service.record(
            draft(
                project,
                "改用数据库",
                "我们决定改用数据库, an index rebuilt on open",
                type="session",
            )
        )
    old = Path(__file__).parent.parent / "data" / "search-index-v2"
    assert json.loads((old / "index_meta.json").read_text(encoding="utf-8")) == {
        "schema_version": 2
    }
    shutil.rmtree(home / "search")
    shutil.copytree(old, home / "search")
    with open_service(settings) as service:
        assert [h.slug for h in service.search("数据库")] == [kept.slug]
        assert service.search("schema version") == []  # the old index's documents are gone
        assert service.consistency() == (set(), set(), set())
        meta = json.loads((home / "search" / "index_meta.json").read_text(encoding="utf-8"))
        assert meta["schema_version"] == SCHEMA_VERSION
        assert SCHEMA_VERSION > 2


SOLID, REACT, APP = "entity:library:Solid", "entity:library:React", "entity:project:app"


def fact(
    svc: MemoryService,
    project: Path,
    title: str,
    entity_ids: list[str],
    relations: tuple[RelationRef, ...] = (),
    type: str = "fact",
) -> str:
    memory = svc.record_graph_facts(
        draft(project, title, title, type=type), entity_ids=entity_ids, relations=relations
    )
    return memory.slug


def test_graph_facts_never_store_a_secret_named_as_an_entity(
    svc: MemoryService, project: Path
) -> None:
    token = "ghp_R8x2Lq9VbN4tYp7KcW3mZs6HdJ1fGa0eUoQi"
    secret_id = f"entity:concept:{token}"
    uses = RelationRef(predicate=Predicate.USES, subject=APP, object=secret_id, label=token)
    slug = fact(svc, project, "app uses a token", [APP, secret_id], (uses,))

    memory = svc.get(slug)
    assert token not in memory.model_dump_json()
    rows = svc.cypher("MATCH (e:Entity) RETURN e.id, e.name").rows
    assert rows
    assert all(token not in str(value) for row in rows for value in row)


def test_delete_entity_archives_its_facts_unlinks_the_rest_and_stays_deleted(
    svc: MemoryService, project: Path
) -> None:
    uses = RelationRef(predicate=Predicate.USES, subject=APP, object=SOLID)
    decision = fact(svc, project, "App uses Solid", [APP, SOLID], (uses,), type="decision")
    only_solid = fact(svc, project, "Solid is fast", [SOLID])
    relation = fact(svc, project, "app uses Solid", [APP, SOLID], (uses,))
    both = fact(svc, project, "Solid and React use signals", [SOLID, REACT])
    svc.alias_entity("Solid", "SolidJS")

    done = svc.delete_entity("SolidJS")
    assert (done.entity_id, done.name) == (SOLID, "Solid")
    assert sorted(done.archived) == sorted([only_solid, relation])
    assert sorted(done.unlinked) == sorted([decision, both])
    assert svc.graph.get_entity(SOLID) is None
    kept = svc.get(decision)
    assert kept.meta.decay_state is DecayState.ALIVE
    assert (kept.meta.observations, kept.meta.relations) == ([APP], [])
    assert svc.get(both).meta.observations == [REACT]
    assert svc.get(only_solid).meta.decay_state is DecayState.FORGOTTEN
    assert svc.audit_records(event_type="entity_delete")[0].target_id == SOLID
    with pytest.raises(NotFound):
        svc.delete_entity("Solid")

    # a later memory naming it brings a new entity, without the deleted one's aliases
    fact(svc, project, "Solid 2 is out", [SOLID])
    assert svc.resolve_entity(SOLID).aliases == []
    snapshot = svc.graph.snapshot()
    svc.reindex()
    assert svc.graph.snapshot() == snapshot


def test_close_relations_keeps_them_as_history(svc: MemoryService, project: Path) -> None:
    uses = RelationRef(predicate=Predicate.USES, subject=APP, object=SOLID, label="depends on")
    stated = fact(svc, project, "app depends on Solid", [APP, SOLID], (uses,))
    decision = fact(svc, project, "We use Solid", [APP, SOLID], (uses,), type="decision")

    closed = svc.close_relations(stated, [uses])
    assert closed.meta.decay_state is DecayState.FORGOTTEN  # it only stated the relation
    assert closed.meta.relations[0].superseded_at is not None
    assert closed.meta.relations[0].label == "depends on"
    kept = svc.close_relations(decision, [uses])
    assert kept.meta.decay_state is DecayState.ALIVE
    assert svc.close_relations(decision, [uses]) == svc.get(decision)  # closed already
    with pytest.raises(NotFound):
        svc.close_relations(decision, [uses.model_copy(update={"label": None})])
    rows = svc.relations(entity="Solid", include_closed=True)
    assert {(r.label, r.superseded_at is not None) for r in rows} == {("depends on", True)}
    assert svc.relations(entity="Solid") == []
    snapshot = svc.graph.snapshot()
    svc.reindex()
    assert svc.graph.snapshot() == snapshot


def test_edits_wait_for_the_hooks_file_lock(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture hook rewrites session files under the same lock: an edit waits for it,
    and gives up with a clear error, changing nothing, when it is held too long."""
    import threading
    import time

    import memoryd.domain.core as service_module
    from memoryd.errors import StorageError
    from memoryd.memfile import memory_lock

    memory = svc.record(
        MemoryDraft(type=MemoryType.SESSION, title="Session", body="We met.", scope_path=project)
    )
    released = threading.Event()
    held = threading.Event()

    def hold(seconds: float) -> None:
        with memory_lock(svc.home, memory.slug):
            held.set()
            released.wait(seconds)

    holder = threading.Thread(target=hold, args=(0.3,))
    holder.start()
    assert held.wait(30)
    started = time.monotonic()
    svc.update_keywords(memory.slug, tags=["kept"])
    assert time.monotonic() - started >= 0.2  # it waited for the hook
    holder.join()
    assert svc.get(memory.slug).meta.tags == ["kept"]

    monkeypatch.setattr(service_module, "FILE_LOCK_TIMEOUT_S", 0.2)
    held.clear()
    holder = threading.Thread(target=hold, args=(5.0,))
    holder.start()
    assert held.wait(30)
    try:
        with pytest.raises(StorageError, match="cannot lock"):
            svc.archive(memory.slug)
    finally:
        released.set()
        holder.join()
    assert svc.get(memory.slug).meta.decay_state is DecayState.ALIVE
