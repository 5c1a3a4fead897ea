"""A home that was moved or copied reads and writes its own files: the graph and the journal
keep the absolute paths they were given, and before this a copy's decay sweep renamed the
source home's files (and a moved home's `get` said every file was missing)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memoryd.config import Settings, load_settings
from memoryd.journal import IntentItem, Journal
from memoryd.models import DecayState, MemoryDraft
from memoryd.vault import rebased
from memoryd.wiring import open_read_only_service, open_service
from tests.conftest import ENGINE

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def settings_at(home: Path) -> Settings:
    return load_settings(home, graph={"engine": ENGINE, "buffer_pool_mb": 128}, lock_timeout_s=1.0)


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*.md"))
        if path.is_file()
    }


def fill(home: Path, project: Path) -> list[str]:
    with open_service(settings_at(home)) as svc:
        return [
            svc.record(
                MemoryDraft(
                    type=kind,
                    title=f"{kind} {i}",
                    body=f"note {i} about the release pipeline",
                    scope_path=project,
                    created_at=T0 + timedelta(hours=i),
                )
            ).slug
            for i, kind in enumerate(["session", "session", "decision"])
        ]


def copy_home(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.lock", "*.sock"))


def test_a_copied_home_reads_and_sweeps_its_own_files(tmp_path: Path, project: Path) -> None:
    source, copy = tmp_path / "home", tmp_path / "副本"  # kuzu counts characters, not bytes
    slugs = fill(source, project)
    before = files_under(source)
    copy_home(source, copy)
    with open_service(settings_at(copy)) as svc:
        for slug in slugs:
            memory = svc.get(slug)
            assert memory.path is not None
            assert memory.path.is_relative_to(copy)
            row = svc.graph.get_memory(slug)
            assert row is not None
            assert Path(row.path).is_relative_to(copy / "scopes")
        report = svc.sweep_at(T0 + timedelta(days=400))
        forgotten = {m.slug for m in report.moved if m.to_state is DecayState.FORGOTTEN}
        assert forgotten == set(slugs[:2])  # the sessions; the decision never decays
        for slug in forgotten:
            memory = svc.get(slug)
            assert memory.path is not None
            assert memory.path.parent == copy / "scopes" / memory.meta.scope_hash / "forgotten"
        restored = svc.restore(slugs[0])
        assert Path(restored.path).is_relative_to(copy / "scopes")
        assert Path(restored.path).is_file()
    assert files_under(source) == before  # the source home was not touched
    with open_service(settings_at(source)) as svc:  # and still reads as it was
        assert [svc.get(slug).meta.decay_state for slug in slugs] == [DecayState.ALIVE] * 3


def test_a_read_only_service_over_a_copy_reads_the_copys_files(
    tmp_path: Path, project: Path
) -> None:
    """A notebook cannot rebase the graph (it writes nothing): it reads each recorded path as
    the same file of its own home."""
    source, copy = tmp_path / "home", tmp_path / "copy"
    slugs = fill(source, project)
    copy_home(source, copy)
    for path in (copy / "scopes").rglob("*.md"):
        path.write_text(path.read_text().replace("release pipeline", "copied pipeline"))
    with open_read_only_service(settings_at(copy)) as svc:
        for slug in slugs:
            row = svc.graph.get_memory(slug)
            assert row is not None
            assert Path(row.path).is_relative_to(source)  # the graph as the source wrote it
            memory = svc.get(slug)
            assert memory.path is not None
            assert memory.path.is_relative_to(copy)
            assert "copied pipeline" in memory.body


def test_a_moved_home_finds_its_files(tmp_path: Path, project: Path) -> None:
    source, moved = tmp_path / "home", tmp_path / "elsewhere" / "home"
    slugs = fill(source, project)
    moved.parent.mkdir()
    source.rename(moved)
    with open_service(settings_at(moved)) as svc:
        assert [svc.get(slug).meta.slug for slug in slugs] == slugs
        assert svc.graph.memory_paths_outside(os.path.join(moved / "scopes", "")) == []


def test_a_home_opened_through_a_symlink_keeps_its_paths(tmp_path: Path, project: Path) -> None:
    """The same home under two names is not a move: nothing is rewritten either way."""
    real = tmp_path / "home"
    link = tmp_path / "link"
    real.mkdir(mode=0o700)
    link.symlink_to(real, target_is_directory=True)
    slugs = fill(link, project)
    with open_service(settings_at(real)) as svc:
        assert len(svc.graph.memory_paths_outside(os.path.join(real / "scopes", ""))) == 3
        for slug in slugs:
            memory = svc.get(slug)
            assert memory.path is not None
            assert memory.path.is_file()
    with open_service(settings_at(link)) as svc:
        assert svc.graph.memory_paths_outside(os.path.join(link / "scopes", "")) == []


def test_an_intent_left_before_a_copy_settles_the_copys_files(tmp_path: Path) -> None:
    source, copy = tmp_path / "home", tmp_path / "copy"
    in_scope = str(source / "scopes" / "abcdef012345" / "sessions" / "s.md")
    forgotten = str(source / "scopes" / "abcdef012345" / "forgotten" / "s.md")
    inbox = str(source / "inbox" / "claude-code" / "t.json")
    Journal(source).begin(
        op="decay",
        actor="cli",
        audit_seq=0,
        items=[
            IntentItem(slug="s", path=forgotten, old_path=in_scope, event_type="decay"),
            IntentItem(slug="t", path=inbox, event_type="capture"),
        ],
    )
    copy_home(source, copy)
    items = Journal(copy).pending()[0].items
    assert items[0].path == str(copy / "scopes" / "abcdef012345" / "forgotten" / "s.md")
    assert items[0].old_path == str(copy / "scopes" / "abcdef012345" / "sessions" / "s.md")
    assert items[1].path == inbox  # not a memory file: left as it was
    assert Journal(source).pending()[0].items[0].path == forgotten


def test_rebased_moves_only_memory_files_of_another_vault(tmp_path: Path) -> None:
    scopes = tmp_path / "home" / "scopes"
    mine = str(scopes / "abcdef012345" / "decisions" / "d.md")
    assert rebased(mine, scopes) == mine
    assert rebased("/old/home/scopes/abcdef012345/decisions/d.md", scopes) == mine
    assert rebased("/old/home/notes/abcdef012345/decisions/d.md", scopes).startswith("/old")
    assert rebased("scopes/x/y.md", scopes) == "scopes/x/y.md"
    assert rebased("", scopes) == ""
