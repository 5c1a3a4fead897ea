"""Scope resolution: the sensitive marker at a scope root covers every path below it."""

from __future__ import annotations

from pathlib import Path

from memoryd.models import ScopeInfo
from memoryd.scope import SENSITIVE_MARKER, project_names, resolve_scope


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


def test_a_project_goes_by_its_directorys_and_its_repositorys_names() -> None:
    info = ScopeInfo(
        scope_hash="0" * 12,
        path="/home/dev/src/shop-api",
        aliases=["remote:github.com/acme/shop"],
    )
    assert project_names(info) == ["shop-api", "shop"]
    same = ScopeInfo(scope_hash="0" * 12, path="/w/shop", aliases=["remote:github.com/acme/shop"])
    assert project_names(same) == ["shop"]
