"""`memoryd sync`: memories.json round trips, two diverging devices, tampering, bad input,
sensitive memories, and what mcp-memory-service's importer makes of an export."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import load_settings
from memoryd.models import DecayState, Memory, MemoryDraft, MemoryType
from memoryd.search.vectors import unavailable
from memoryd.service import MemoryService
from memoryd.sync.document import content_hash
from memoryd.wiring import open_service
from tests.conftest import ENGINE

runner = CliRunner()
NO_VECTORS = unavailable()
FIXTURES = Path("/work/shared/interop/fixtures")
V5_ONTOLOGY = {
    "observation", "decision", "learning", "error", "pattern", "planning", "ceremony",
    "milestone", "stakeholder", "meeting", "research", "communication", "note", "reference",
    "session", "insight", "gotcha", "bug",
}  # fmt: skip
"""mcp-memory-service HEAD's base types and the subtypes FORMATS.md §1.9 names."""


@contextmanager
def opened(home: Path) -> Iterator[MemoryService]:
    settings = load_settings(
        home, graph={"engine": ENGINE, "buffer_pool_mb": 128}, lock_timeout_s=1.0
    )
    svc = open_service(settings)
    try:
        yield svc
    finally:
        svc.close()


def draft(project: Path, title: str, body: str, **kw: Any) -> MemoryDraft:
    kw.setdefault("type", MemoryType.DECISION)
    return MemoryDraft(title=title, body=body, scope_path=project, **kw)


def edit(
    svc: MemoryService, slug: str, when: datetime, body: str | None = None, **changes: Any
) -> None:
    """Edit a memory as a person editing its file would (body and scalar fields)."""
    old = svc.get(slug)
    new = svc._edited(old, changes, old.path)
    if body is not None:
        new.body = body
    new.meta.updated_at = when
    svc._replace_everywhere(old, new, event_type="update", details={"test": True})


def vault_state(svc: MemoryService) -> dict[str, tuple[str, dict[str, Any], str]]:
    """slug → (path inside the data dir, frontmatter, body)."""
    out = {}
    for memory in svc.iter_vault(lambda _m: None):
        assert memory.path is not None
        rel = str(memory.path.relative_to(svc.home))
        out[memory.slug] = (rel, memory.meta.to_yaml_dict(), memory.body)
    return out


def graph_counts(svc: MemoryService) -> dict[str, int]:
    queries = {
        "memories": "MATCH (m:Memory) RETURN count(m)",
        "entities": "MATCH (e:Entity) RETURN count(e)",
        "mentions": "MATCH ()-[r:MENTIONS]->() RETURN count(r)",
        "relates": "MATCH ()-[r:RELATES]->() RETURN count(r)",
        "supersedes": "MATCH ()-[r:SUPERSEDES]->() RETURN count(r)",
        "promoted": "MATCH ()-[r:PROMOTED_FROM]->() RETURN count(r)",
    }
    return {k: int(svc.graph.cypher(q).rows[0][0]) for k, q in queries.items()}


def entity_view(svc: MemoryService) -> list[tuple[str, list[str], int]]:
    return sorted((e.id, sorted(e.aliases), e.mention_count) for e in svc.graph.entity_catalogue())


QUERIES = [
    "react solid", "bundle size", "postgres", "数据库", "备份", "deploy", "ruff lint", "cache",
    "migration staging", "frontend", "decision", "solid", "kafka consumer", "重复消费",
    "timeouts", "uv pip", "warning", "playbook release", "redis", "large notes",
]  # fmt: skip


def rich_vault(svc: MemoryService, project: Path) -> dict[str, str]:
    """A vault with every feature sync carries."""
    old = svc.record(
        draft(project, "Use React for the storefront", "We use React for the frontend storefront.")
    )
    new = svc.record(
        draft(
            project,
            "Switch the storefront to Solid",
            "We switched from React to Solid: bundle size halved.",
            supersedes=[old.slug],
        )
    )
    newest = svc.record(
        draft(
            project,
            "Solid stays, with Vite",
            "Solid stays; the build moves to Vite.",
            supersedes=[new.slug],
        )
    )
    zh = svc.record(
        draft(
            project,
            "数据库备份",
            "数据库每晚两点备份到 S3,PostgreSQL 连接池调到 20。",
            type=MemoryType.FACT,
        )
    )
    session = svc.record(
        draft(
            project,
            "Session: kafka consumer",
            "Fixed the Kafka consumer that consumed twice (重复消费).",
            type=MemoryType.SESSION,
        )
    )
    promoted = svc.record(
        draft(
            project,
            "Kafka consumers must be idempotent",
            "Every Kafka consumer dedupes by message id.",
            type=MemoryType.PLAYBOOK,
            promoted_from=session.slug,
        )
    )
    big = svc.record(
        draft(
            project,
            "Large notes on the Redis cache",
            "Redis cache notes. " + "The Redis cache keeps hot keys warm. " * 80,
            type=MemoryType.FACT,
        )
    )
    gone = svc.record(
        draft(project, "Prefer pip", "Prefer pip over uv.", type=MemoryType.PREFERENCE)
    )
    svc.archive(gone.slug)
    svc.record(
        draft(
            project,
            "Ruff lint warning",
            "Ruff warns on unused imports; fix them.",
            type=MemoryType.WARNING,
            tags=["lint"],
            triggers=["ruff"],
        )
    )
    svc.alias_entity("PostgreSQL", "pg")
    svc.recall("kafka consumer", k=3)
    svc.recall("数据库 备份", k=3)
    (svc.home / "profile").mkdir(exist_ok=True)
    (svc.home / "profile" / "identity.md").write_text("# Identity\n\nPrefers Solid and uv.\n")
    return {
        "old": old.slug,
        "new": new.slug,
        "newest": newest.slug,
        "zh": zh.slug,
        "big": big.slug,
        "promoted": promoted.slug,
        "gone": gone.slug,
    }


def test_round_trip_into_an_empty_home_keeps_everything(tmp_path: Path, project: Path) -> None:
    out = tmp_path / "out" / "memories.json"
    with opened(tmp_path / "a") as a:
        slugs = rich_vault(a, project)
        entities = [e.id for e in a.graph.entity_catalogue()]
        keep = next(e for e in entities if e.endswith(":Solid"))
        drop = next(e for e in entities if e.endswith(":React"))
        a.merge_entities(keep, drop)
        report = a.sync_export(out, include_audit_chain=True, chunk_size_mb=0.001)
        first = out.read_bytes()
        again = a.sync_export(out, include_audit_chain=True, chunk_size_mb=0.001)
        assert out.read_bytes() == first
        assert again.sha256 == report.sha256
        assert report.chunks
        assert report.identity_snapshot
        assert report.audit_lines > 0
        want_vault = vault_state(a)
        want_counts = graph_counts(a)
        want_entities = entity_view(a)
        want_chain = a.supersedes_chain(slugs["newest"])
        want_recall = {q: [h.slug for h in a.recall(q, k=10, track=False).hits] for q in QUERIES}
        identity = (a.home / "profile" / "identity.md").read_text()
    with opened(tmp_path / "b") as b:
        dry = b.sync_import(out, dry_run=True)
        assert not b.vault.has_memories()  # a dry run writes nothing
        real = b.sync_import(out)
        assert dry.model_copy(update={"dry_run": False}) == real  # exactly what it did
        assert sorted(real.added) == sorted(want_vault)
        assert real.entities_merged
        assert vault_state(b) == want_vault  # paths, every frontmatter field, bodies
        assert graph_counts(b) == want_counts
        assert entity_view(b) == want_entities  # aliases and merges replayed
        assert b.supersedes_chain(slugs["newest"]) == want_chain
        got = {q: [h.slug for h in b.recall(q, k=10, track=False).hits] for q in QUERIES}
        assert got == want_recall
        assert (b.home / "profile" / "identity.md").read_text() == identity
        assert b.audit_verify().ok
        imported = b.audit_records(event_type="import")
        remote = [r for r in imported if '"remote_audit"' in r.details]
        assert len(remote) == report.audit_lines
        assert all(report_head(out) in r.details for r in remote)
        again_report = b.sync_import(out)  # idempotent
        assert again_report.added == []
        assert again_report.updated == []
        assert again_report.audit_events_imported == 0
        assert vault_state(b) == want_vault
        assert len(b.audit_records(event_type="import")) == len(imported)


def report_head(out: Path) -> str:
    return str(json.loads(out.read_text())["export_metadata"]["audit_chain_head"]["hash"])


@pytest.mark.parametrize("strategy", ["merge", "prefer-local", "prefer-remote"])
def test_two_devices_diverge_and_sync_both_ways(
    tmp_path: Path, project: Path, strategy: str
) -> None:
    a_file, b_file = tmp_path / "a.json", tmp_path / "b.json"
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    with opened(tmp_path / "a") as a:
        m = {
            k: a.record(draft(project, f"Memory {k}", f"Body of memory {k}.")).slug
            for k in ("keywords", "title", "gone", "body", "b_only")
        }
        a.sync_export(a_file)
    with opened(tmp_path / "b") as b:
        assert len(b.sync_import(a_file).added) == 5
        b.update_keywords(m["keywords"], triggers=["from-b"])
        edit(b, m["title"], t0 + timedelta(hours=2), title="Title from B")
        edit(b, m["body"], t0 + timedelta(hours=1), body="B rewrote the body.")
        edit(b, m["b_only"], t0 + timedelta(hours=1), body="Only B changed this body.")
        b.archive(m["gone"])
        b.sync_export(b_file)
    with opened(tmp_path / "a") as a:
        a.update_keywords(m["keywords"], tags=["from-a"])
        edit(a, m["title"], t0 + timedelta(hours=1), title="Title from A")
        edit(a, m["body"], t0 + timedelta(hours=3), body="A rewrote the body.")
        report = a.sync_import(b_file, conflict=strategy)  # type: ignore[arg-type]
        kw = a.get(m["keywords"]).meta
        assert kw.tags == ["from-a"]
        assert kw.triggers == ["from-b"]
        assert a.get(m["gone"]).meta.decay_state.value == "forgotten"  # one side: taken
        assert a.get(m["b_only"]).body == "Only B changed this body."
        title = a.get(m["title"]).meta.title
        body = a.get(m["body"]).body
        want_title = {
            "merge": "Title from B",
            "prefer-local": "Title from A",
            "prefer-remote": "Title from B",
        }
        assert title == want_title[strategy]  # merge: B's edit is newer
        conflicts = a.sync_conflicts()
        if strategy == "merge":
            assert body == "A rewrote the body."  # local kept…
            assert [c.slug for c in conflicts] == [m["body"]]  # …remote waits
            assert "B rewrote the body." in Path(conflicts[0].path).read_text()
            assert [c.slug for c in report.conflicts] == [m["body"]]
        else:
            assert conflicts == []
            want = "A rewrote the body." if strategy == "prefer-local" else "B rewrote the body."
            assert body == want
        again = a.sync_import(b_file, conflict=strategy)  # type: ignore[arg-type]
        assert again.updated == []
        assert again.added == []
        if strategy == "merge":
            resolved = a.sync_resolve(m["body"], "remote")
            assert resolved.removed
            assert a.sync_conflicts() == []
            assert a.get(m["body"]).body == "B rewrote the body."
        a.sync_export(a_file)
        final_a = vault_state(a)
    with opened(tmp_path / "b") as b:
        b.sync_import(a_file, conflict=strategy)  # type: ignore[arg-type]
        final_b = vault_state(b)
        for slug in m.values():  # both devices hold the same memories now
            assert final_b[slug][2] == final_a[slug][2]
            assert final_b[slug][1]["title"] == final_a[slug][1]["title"]
            assert final_b[slug][1].get("tags") == final_a[slug][1].get("tags")
        assert b.audit_verify().ok


def test_a_tampered_audit_line_refuses_the_import_and_names_it(
    tmp_path: Path, project: Path
) -> None:
    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        for i in range(3):
            a.record(draft(project, f"Decision {i}", f"We decided thing number {i}."))
        a.sync_export(out, include_audit_chain=True)
    lines = out.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith('  "audit_chain"'))
    target = start + 2  # the second audit line
    assert '"seq": 2' in lines[target]
    lines[target] = lines[target].replace('"actor": "cli"', '"actor": "mallory"')
    out.write_text("\n".join(lines))
    result = runner.invoke(
        app, ["sync", "import", "--from", str(out), "--home", str(tmp_path / "b")]
    )
    assert result.exit_code == 2
    assert "audit_chain[1]" in result.output
    assert f"line {target + 1}" in result.output
    assert "audit line 2" in result.output
    assert not (tmp_path / "b" / "scopes").exists()  # nothing written


def _export(tmp_path: Path, project: Path, **kw: Any) -> Path:
    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        a.record(draft(project, "First", "The first memory body, long enough to chunk. " * 3))
        a.record(draft(project, "Second", "The second memory body."))
        a.sync_export(out, **kw)
    return out


def _set(out: Path, change: Any) -> None:
    data = json.loads(out.read_text())
    change(data)
    out.write_text(json.dumps(data, indent=2, ensure_ascii=False))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("truncated", ["not valid JSON", "line ", "truncated"]),
        ("version", ["export_metadata.exporter_version", "unknown exporter_version 'memoryd-x'"]),
        ("content", ["memories[1].content", "a memory without content", "line "]),
        ("chunk", ["large_file_manifest[0]", "has sha256", "line "]),
        ("newer", ["export_metadata.exporter_version", "newer memoryd"]),
        ("deep", ["memories.json: $", "JSON nested deeper than 64 levels"]),
        ("deep line", ["memories[1] (line ", "JSON nested deeper than 64 levels"]),
        ("total", ["export_metadata.total_memories", "says 3 memories but `memories` holds 2"]),
    ],
)
def test_bad_files_exit_2_with_reason_and_position_and_write_nothing(
    tmp_path: Path, project: Path, damage: str, expected: list[str]
) -> None:
    out = _export(tmp_path, project, chunk_size_mb=0.0001)
    if damage == "truncated":
        text = out.read_text()
        out.write_text(text[: len(text) // 2])
    elif damage == "version":
        _set(out, lambda d: d["export_metadata"].update(exporter_version="memoryd-x"))
    elif damage == "content":
        _set(out, lambda d: d["memories"][1].pop("content"))
    elif damage == "chunk":
        chunk = next((out.parent / f"{out.name}.chunks").glob("*.bin"))
        chunk.write_text("replaced")
    elif damage == "deep":  # 200,000 levels: once a RecursionError traceback, exit 1
        _set(out, lambda d: d["memories"][0].update(metadata="DEEP"))
        out.write_text(out.read_text().replace('"DEEP"', "[" * 200_000 + "]" * 200_000))
    elif damage == "deep line":  # the same in memoryd's own layout, one memory per line
        lines = out.read_text().split("\n")
        at = next(i for i, line in enumerate(lines) if '"content": "The second' in line)
        lines[at] = lines[at].replace(
            '"content": ', '"x": ' + "[" * 100 + "]" * 100 + ', "content": '
        )
        out.write_text("\n".join(lines))
    elif damage == "total":
        text = out.read_text()
        out.write_text(text.replace('"total_memories": 2,', '"total_memories": 3,', 1))
    else:
        _set(out, lambda d: d["export_metadata"].update(exporter_version="memoryd-2"))
    home = tmp_path / "b"
    for command in (["import"], ["import", "--dry-run"], ["diff-with-remote"]):
        result = runner.invoke(app, ["sync", *command, "--from", str(out), "--home", str(home)])
        assert result.exit_code == 2, result.output
        for text in expected:
            assert text in result.output
        assert "nothing was imported" in result.output
    assert not (home / "scopes").exists()


def test_sensitive_memories_never_leave(tmp_path: Path, project: Path, other_project: Path) -> None:
    out = tmp_path / "memories.json"
    secret = "the launch code is swordfish"
    with opened(tmp_path / "a") as a:
        a.record(draft(project, "Public decision", "Use ruff."))
        hidden = a.record(draft(other_project, "Private decision", secret))
        info = a.scope_show(other_project)
        info.sensitive = True
        a.vault.write_scope(info)  # the existing flag: the whole scope is sensitive
        report = a.sync_export(out, include_audit_chain=True)
    text = out.read_text()
    assert report.omitted_sensitive == 1
    assert report.memories == 1
    assert secret not in text
    assert hidden.slug not in json.dumps(json.loads(text)["memories"])
    assert v5_import(json.loads(text))["imported"] == 1


def v5_import(data: dict[str, Any]) -> dict[str, Any]:
    """What mcp-memory-service's `sync/importer.py` (v5.0.1 l.118–231, FORMATS.md §1.6) does
    with a file: the top level, then per memory the fields it reads and how it reads them;
    memory types as HEAD's ontology coerces them."""
    if "export_metadata" not in data or "memories" not in data:
        raise ValueError("Invalid export format")
    source = data["export_metadata"].get("source_machine", "unknown")
    seen: set[str] = set()
    stored: list[dict[str, Any]] = []
    failed = 0
    for memory_data in data["memories"]:
        content_hash_ = memory_data.get("content_hash")
        if not content_hash_:
            failed += 1
            continue
        if content_hash_ in seen:
            continue
        try:
            created = datetime.fromtimestamp(memory_data["created_at"], UTC)  # float_to_iso
            updated = memory_data.get("updated_at", memory_data["created_at"])
            datetime.fromtimestamp(updated, UTC)
            tags = [*memory_data.get("tags", []).copy(), f"source:{source}"]
            metadata = memory_data.get("metadata", {}).copy()
            metadata["import_info"] = {"source_machine": source, "importer_version": "4.5.0"}
            memory_type = memory_data.get("memory_type") or "note"
            content = memory_data["content"]
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError):
            failed += 1
            continue
        seen.add(content_hash_)
        stored.append(
            {
                "content": content,
                "content_hash": content_hash_,
                "tags": tags,
                "created_at": created,
                "memory_type": memory_type if memory_type in V5_ONTOLOGY else "observation",
                "metadata": metadata,
            }
        )
    return {"imported": len(stored), "failed": failed, "memories": stored}


def test_the_export_is_what_mcp_memory_services_importer_reads(
    tmp_path: Path, project: Path
) -> None:
    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        for kind in MemoryType:
            a.record(
                draft(project, f"A {kind.value}", f"Body of the {kind.value}: 中文 too.", type=kind)
            )
        a.record(draft(project, "Big one", "x" * 3000, type=MemoryType.FACT))
        a.sync_export(out, chunk_size_mb=0.001)
    data = json.loads(out.read_text())
    result = v5_import(data)
    assert result["failed"] == 0
    assert result["imported"] == len(data["memories"]) == 7
    for raw, got in zip(data["memories"], result["memories"], strict=True):
        assert (
            raw["content_hash"]
            == hashlib.sha256(raw["content"].strip().lower().encode()).hexdigest()
        )
        assert got["memory_type"] != "observation"  # every type mapped into the ontology
        assert raw["metadata"]["memoryd"]["type"] in {t.value for t in MemoryType}
        for key in ("content", "content_hash", "tags", "created_at", "updated_at", "metadata"):
            assert raw[key] is not None
        assert isinstance(raw["created_at"], float)
        assert raw["created_at"] < 1e11
    chunked = [m for m in data["memories"] if "large_file_pointer" in m]
    assert len(chunked) == 1
    assert chunked[0]["content"].strip()


def test_imports_mcp_memory_service_and_compatible_fixtures(tmp_path: Path, project: Path) -> None:
    with opened(tmp_path / "b") as b:
        v5 = b.sync_import(FIXTURES / "mcp_memory_service_v5_export.json", scope=project)
        assert len(v5.added) == 3
        assert v5.scope_mappings[0].how == "--scope"
        types = sorted(b.get(s).meta.type.value for s in v5.added)
        assert types == ["decision", "fact", "fact"]
        again = b.sync_import(FIXTURES / "mcp_memory_service_v5_export.json", scope=project)
        assert again.added == []
        assert again.unchanged == 3
        ours = b.sync_import(FIXTURES / "memoryd_memories_json_v5_compatible.json")
        assert sorted(ours.added) == ["2026-05-05-0c0ffee0", "2026-05-12-a1b2c3d4"]
        kept = b.get("2026-05-12-a1b2c3d4")
        assert kept.meta.supersedes == ["2026-04-01-9f8e7d6c"]
        assert kept.meta.triggers
        assert b.get("2026-05-05-0c0ffee0").meta.type is MemoryType.PREFERENCE


def test_scopes_map_by_git_remote_and_by_option(tmp_path: Path) -> None:
    import subprocess

    def repo(path: Path) -> Path:
        path.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(path)], check=True)
        url = "git@github.com:abble/shop.git"
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", url], check=True)
        return path

    laptop, workstation = (
        repo(tmp_path / "Users" / "a" / "shop"),
        repo(tmp_path / "home" / "a" / "shop"),
    )
    loose, target = tmp_path / "loose", tmp_path / "target"
    loose.mkdir()
    target.mkdir()
    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        a.record(draft(laptop, "Shop uses Solid", "The shop uses Solid."))
        a.record(draft(loose, "Loose note", "A note from a folder without git."))
        loose_hash = a.scope_hash_of(loose)
        a.sync_export(out)
    with opened(tmp_path / "b") as b:
        b.record(draft(workstation, "Shop deploys on Fridays", "Deploys happen on Fridays."))
        assert loose_hash is not None
        report = b.sync_import(out, map_scope={loose_hash: str(target)})
        how = {m.how for m in report.scope_mappings}
        assert how == {"git remote", "--map-scope"}
        by_how = {m.how: m for m in report.scope_mappings}
        assert by_how["git remote"].local == b.scope_hash_of(workstation)
        assert by_how["--map-scope"].local == b.scope_hash_of(target)
        assert b.count_memories(scope=workstation) == 2


def test_export_out_refuses_a_symlink_or_a_fifo_and_writes_over_a_regular_file(
    tmp_path: Path, project: Path
) -> None:
    """The export is renamed over `--out`: never over a symlink (it would replace the link,
    and as root a device such as /dev/full), a FIFO, or anything not a regular file."""
    home = str(tmp_path / "a")
    with opened(tmp_path / "a") as a:
        a.record(draft(project, "Use Solid", "We use Solid."))
    target = tmp_path / "target.json"
    target.write_text("kept")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for out, kind in ((link, "a symlink"), (fifo, "a FIFO"), (tmp_path, "a directory")):
        result = runner.invoke(app, ["sync", "export", "--out", str(out), "--home", home])
        assert result.exit_code == 2, result.output
        assert f"{out} is {kind}" in result.output
        assert "nothing was written" in result.output
    assert link.is_symlink()
    assert target.read_text() == "kept"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.glob(".*.tmp")] == []
    result = runner.invoke(app, ["sync", "export", "--out", str(target), "--home", home])
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())["export_metadata"]["total_memories"] == 1


def test_cli_sync_commands(tmp_path: Path, project: Path) -> None:
    out = tmp_path / "memories.json"
    home_a, home_b = str(tmp_path / "a"), str(tmp_path / "b")
    with opened(tmp_path / "a") as a:
        slug = a.record(draft(project, "Use Solid", "We use Solid.")).slug
    result = runner.invoke(app, ["sync", "export", "--out", str(out), "--home", home_a, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["memories"] == 1
    result = runner.invoke(
        app, ["sync", "diff-with-remote", "--from", str(out), "--home", home_b, "--json"]
    )
    assert result.exit_code == 0
    assert json.loads(result.output)["added"] == [slug]
    result = runner.invoke(
        app, ["sync", "import", "--from", str(out), "--home", home_b, "--dry-run"]
    )
    assert result.exit_code == 0
    assert f"would add {slug}" in result.output
    result = runner.invoke(app, ["sync", "import", "--from", str(out), "--home", home_b])
    assert result.exit_code == 0
    assert f"add {slug}" in result.output
    result = runner.invoke(app, ["sync", "conflicts", "--home", home_b])
    assert result.exit_code == 0
    assert "no open sync conflicts" in result.output
    result = runner.invoke(app, ["sync", "resolve", slug, "--take", "local", "--home", home_b])
    assert result.exit_code == 3
    assert "no open sync conflict" in result.output
    result = runner.invoke(
        app, ["sync", "import", "--from", str(out), "--home", home_b, "--map-scope", "nope"]
    )
    assert result.exit_code == 2
    assert "OLD=NEW" in result.output


def test_merge_rules_field_by_field() -> None:
    from memoryd.models import Frontmatter
    from memoryd.sync.merge import digests, merge

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def memory(title: str, body: str, at: datetime, tags: list[str]) -> Memory:
        meta = Frontmatter(title=title, slug="s", type=MemoryType.FACT, scope_hash="0" * 12,
                           source="x", created_at=t0, updated_at=at, tags=tags)  # fmt: skip
        return Memory(meta=meta, body=body)

    base = digests(memory("T", "B", t0, []))
    local = memory("T", "B local", t0 + timedelta(hours=1), ["l"])
    remote = memory("T remote", "B", t0 + timedelta(hours=2), ["r"])
    merged = merge(local, remote, base, "merge")
    assert merged.memory.meta.title == "T remote"  # only remote changed the title
    assert merged.memory.body == "B local"  # only local changed the body
    assert merged.memory.meta.tags == ["l", "r"]
    assert not merged.body_conflict
    both = merge(local, memory("T", "B remote", t0 + timedelta(hours=2), []), base, "merge")
    assert both.body_conflict
    assert both.memory.body == "B local"
    assert (
        merge(local, memory("T", "B remote", t0, []), base, "prefer-remote").memory.body
        == "B remote"
    )


def test_field_digests_are_the_base_files_digests() -> None:
    """`digests` reads the frontmatter's fields directly and encodes with one JSON encoder:
    the digests are those a base file already holds (sha256 of the value's repr, or of its
    sorted JSON), for plain and for structured values."""
    import json as json_module

    from memoryd.models import Dura, Frontmatter
    from memoryd.sync.merge import BODY, SCALARS, _json, digests

    def reference(value: object) -> str:
        if isinstance(value, str):
            text = value
        elif isinstance(value, tuple) and all(v is None or isinstance(v, str | int) for v in value):
            text = repr(value)
        else:
            text = json_module.dumps(_json(value), sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    plain = Frontmatter(title="T", slug="s", type=MemoryType.FACT, scope_hash="0" * 12,
                        source="x", created_at=t0)  # fmt: skip
    full = plain.model_copy(
        update={
            "category": "数据库",
            "ttl_days": 0,
            "decay_state": DecayState.SOFT_FORGOTTEN,
            "forgotten_at": t0,
            "dura_score": Dura(D=0.5, U=1.0, R=0.0, A=0.25, by="heuristic-v1"),
            "promoted_from": "p",
        }
    )
    for meta in (plain, full):
        memory = Memory(meta=meta, body="正文 body")
        expected = {
            name: reference(tuple(getattr(meta, f) for f in fields))
            for name, fields in SCALARS.items()
        }
        expected[BODY] = reference(memory.body)
        assert digests(memory) == expected


def test_content_hash_is_bare_hex_of_stripped_lowered_content() -> None:
    assert content_hash("  Hello World \n") == hashlib.sha256(b"hello world").hexdigest()


def test_a_differing_identity_snapshot_waits_as_a_conflict(tmp_path: Path, project: Path) -> None:
    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        a.record(draft(project, "Use Solid", "We use Solid."))
        (a.home / "profile").mkdir()
        (a.home / "profile" / "identity.md").write_text("# Identity A\n")
        a.sync_export(out)
    with opened(tmp_path / "b") as b:
        (b.home / "profile").mkdir()
        (b.home / "profile" / "identity.md").write_text("# Identity B\n")
        assert b.sync_import(out).identity_snapshot == "conflict"
        assert (b.home / "profile" / "identity.md").read_text() == "# Identity B\n"
        assert [c.slug for c in b.sync_conflicts()] == ["identity"]
        assert b.sync_import(out).identity_snapshot == "conflict"  # not written twice
        b.sync_resolve("identity", "remote")
        assert (b.home / "profile" / "identity.md").read_text() == "# Identity A\n"
        assert b.sync_conflicts() == []
        assert b.sync_import(out).identity_snapshot == "same"


def test_memories_of_a_marked_sensitive_scope_are_not_exported(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    """The sensitive scopes of issue 17 (encrypted files): left out, counted, no plaintext."""
    out = tmp_path / "memories.json"
    secret = "Vellacorp runs on quuxhost-4417"
    with opened(tmp_path / "a") as a:
        a.sensitive_mark(project)
        a.record(draft(project, "Deploy billing", secret))
        a.record(draft(other_project, "Docs deploy", "The docs deploy on Fridays."))
        report = a.sync_export(out, include_audit_chain=True)
    text = out.read_text()
    assert report.memories == 1
    assert report.omitted_sensitive == 1
    assert "Vellacorp" not in text
    assert "quuxhost" not in text
    assert v5_import(json.loads(text))["imported"] == 1


def test_an_open_conflict_travels_so_the_other_side_keeps_its_body(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's body conflict is open (B's version in A's `_conflicts/`); A's next export names
    B's body as disputed, so B, whose body did not change since its export, keeps it and
    opens the conflict too, instead of silently taking A's."""
    a_file, b_file = tmp_path / "a.json", tmp_path / "b.json"
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    monkeypatch.setenv("HOSTNAME", "device-a")
    with opened(tmp_path / "a") as a:
        slug = a.record(draft(project, "Cache policy", "Cache for one hour.")).slug
        a.sync_export(a_file)
    monkeypatch.setenv("HOSTNAME", "device-b")
    with opened(tmp_path / "b") as b:
        b.sync_import(a_file)
        edit(b, slug, t0 + timedelta(hours=1), body="B: cache for a day.")
        b.sync_export(b_file)
    monkeypatch.setenv("HOSTNAME", "device-a")
    with opened(tmp_path / "a") as a:
        edit(a, slug, t0 + timedelta(hours=2), body="A: cache for ten minutes.")
        assert [c.slug for c in a.sync_import(b_file).conflicts] == [slug]
        a.sync_export(a_file)  # A's body, and B's named as disputed
    carried = json.loads(a_file.read_text())["memories"][0]["open_conflicts"]
    assert carried == [
        {
            "source": "device-b",
            "body_sha256": hashlib.sha256(b"B: cache for a day.").hexdigest(),
        }
    ]
    monkeypatch.setenv("HOSTNAME", "device-b")
    with opened(tmp_path / "b") as b:
        report = b.sync_import(a_file)
        assert b.get(slug).body == "B: cache for a day."  # not silently replaced
        assert [c.slug for c in report.conflicts] == [slug]
        [open_] = b.sync_conflicts()
        assert open_.source == "device-a"
        assert "A: cache for ten minutes." in Path(open_.path).read_text()
        assert b.sync_import(a_file).updated == []  # idempotent: the same conflict, once
        assert len(b.sync_conflicts()) == 1
        b.sync_export(b_file)
    monkeypatch.setenv("HOSTNAME", "device-a")
    with opened(tmp_path / "a") as a:
        a.sync_import(b_file)  # B's export disputes A's body: A keeps it, one conflict
        assert a.get(slug).body == "A: cache for ten minutes."
        assert len(a.sync_conflicts()) == 1
        a.sync_resolve(slug, "remote")  # A's person takes B's body
        a.sync_export(a_file)
    monkeypatch.setenv("HOSTNAME", "device-b")
    with opened(tmp_path / "b") as b:
        b.sync_import(a_file)
        assert b.get(slug).body == "B: cache for a day."  # both agree now
        b.sync_resolve(slug, "local")
        assert b.sync_conflicts() == []


@pytest.mark.skipif(
    NO_VECTORS is not None, reason=f"the vector extra is not installed: {NO_VECTORS}"
)
def test_include_embeddings_carries_the_vectors_not_recomputed(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--include-embeddings` carries every passage vector exactly, with the model and the
    text they were made from; an import keeps those that fit (same model, same text), so the
    embedding worker has nothing to redo, and leaves the rest to it."""
    import numpy as np

    monkeypatch.setenv("MEMORYD_RECALL__VECTORS", "on")
    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        assert a.vectors is not None
        slugs = [
            a.record(draft(project, "Cache policy", "Cache API answers for one hour.")).slug,
            a.record(draft(project, "Queue", "The queue retries three times. " * 150)).slug,
            a.record(draft(project, "数据库", "数据库每晚两点备份。", type=MemoryType.FACT)).slug,
        ]
        assert a.embed_pending(None) is not None
        want = {s: a.vectors.store.vectors(s) for s in slugs}
        several = want[slugs[1]]
        assert several is not None
        assert len(several) > 1  # several passages: all of them travel
        a.sync_export(out, include_embeddings=True)
    data = json.loads(out.read_text())
    assert data["export_metadata"]["include_embeddings"] is True
    for item in data["memories"]:
        assert len(item["embedding"]) == 384  # mcp-memory-service's field: the first passage
        assert item["embeddings"]["model"] == "all-MiniLM-L6-v2"
    with opened(tmp_path / "b") as b:
        assert b.vectors is not None
        report = b.sync_import(out)
        assert (report.embeddings_carried, report.embeddings_to_compute) == (3, 0)
        for slug in slugs:
            got = b.vectors.store.vectors(slug)
            assert got is not None
            assert np.array_equal(
                got, np.asarray(want[slug])
            )  # bit for bit: carried, not recomputed
        pending = b.embed_pending(None)
        assert pending is not None
        assert pending.embedded == 0  # the worker finds nothing to redo
    # A vector made from other text (the fingerprint says so) is left to be made here.
    data["memories"][0]["embeddings"]["fingerprint"] = "0" * 40
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data), encoding="utf-8")
    with opened(tmp_path / "c") as c:
        report = c.sync_import(changed)
        assert (report.embeddings_carried, report.embeddings_to_compute) == (2, 1)
        pending = c.embed_pending(None)
        assert pending is not None
        assert pending.embedded == 1


def test_an_import_failing_in_a_later_batch_undoes_the_batches_not_finished(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import writes batch by batch, each under its own intent: when the index refuses
    the second batch, its files are removed and its intent closed, the first stays whole,
    nothing of the third is written, and importing again finishes the rest."""
    import memoryd.domain.syncing as syncing
    from memoryd.errors import StorageError
    from memoryd.search.index import SearchIndex

    out = tmp_path / "memories.json"
    with opened(tmp_path / "a") as a:
        for n in range(6):
            a.record(draft(project, f"Rule {n}", f"Always run the linter, rule {n}."))
        a.sync_export(out)
    monkeypatch.setattr(syncing, "BULK_BATCH", 2)
    upsert = SearchIndex.upsert
    calls = []

    def refuse_second(self: SearchIndex, docs: Any) -> None:
        calls.append(len(docs))
        if len(calls) == 2:
            raise StorageError("index refused the batch (test)")
        upsert(self, docs)

    monkeypatch.setattr(SearchIndex, "upsert", refuse_second)
    home_b = tmp_path / "b"
    with opened(home_b) as b:
        with pytest.raises(StorageError, match="refused"):
            b.sync_import(out)
        files = sorted(p.name for p in (home_b / "scopes").rglob("*.md"))
        assert len(files) == 2  # the first batch, whole; no temp file
        assert not list((home_b / "scopes").rglob(".*.tmp"))
        assert b.journal.pending() == []
        assert len(b.search("linter", scope=project)) == 2
        monkeypatch.setattr(SearchIndex, "upsert", upsert)
        again = b.sync_import(out)
        assert (len(again.added), again.unchanged) == (4, 2)
        assert len(list((home_b / "scopes").rglob("*.md"))) == 6
