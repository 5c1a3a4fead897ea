"""Scope resolution: the sensitive marker at a scope root covers every path below it."""

from __future__ import annotations

from pathlib import Path

from memoryd.scope import SENSITIVE_MARKER, resolve_scope


def test_a_marked_root_makes_its_scope_and_sub_directories_sensitive(tmp_path: Path) -> None:
    project = tmp_path / "client-x"
    (project / ".git").mkdir(parents=True)
    (project / "src" / "deep").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    assert resolve_scope(project, with_remote=False).sensitive is False

    (project / SENSITIVE_MARKER).write_text("")
    root = resolve_scope(project, with_remote=False)
    below = resolve_scope(project / "src" / "deep", with_remote=False)
    assert root.sensitive is True
    assert below.sensitive is True
    assert below.scope_hash == root.scope_hash
    assert resolve_scope(other, with_remote=False).sensitive is False
