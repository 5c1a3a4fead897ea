"""restore's move of each team project to its new scope hash (`team.backup`): a server scope
is hashed by its directory's path, so a data dir restored elsewhere has new hashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memoryd.scope import scope_hash_of_path
from memoryd.team.backup import _rehome_projects


@pytest.mark.parametrize("written", ['"123e45678901"', "123e45678901"])
def test_a_restored_project_moves_to_its_new_scope_hash(tmp_path: Path, written: str) -> None:
    """YAML quotes a hash that reads as a number (123e45678901), and not others: both move."""
    old, new = tmp_path / "old", tmp_path / "new"
    project = new / "team-projects" / "github.com" / "acme" / "shop"
    (project / ".git").mkdir(parents=True)
    old_hash = "123e45678901"
    scope = new / "scopes" / old_hash
    (scope / "decisions").mkdir(parents=True)
    was = old / "team-projects" / "github.com" / "acme" / "shop"
    info: dict[str, object] = {"scope_hash": old_hash, "path": str(was), "git_toplevel": str(was),
            "git_remote": None, "aliases": [], "sensitive": False}  # fmt: skip
    (scope / "scope.json").write_text(json.dumps(info))
    memory = scope / "decisions" / "2026-01-01-x-abc123.md"
    memory.write_text(f"---\ntitle: x\nscope_hash: {written}\nsource: api\n---\nbody\n")
    personal = new / "scopes" / "aaaaaaaaaaaa"  # not a team project: left as it is
    personal.mkdir()
    (personal / "scope.json").write_text(json.dumps({**info, "scope_hash": "aaaaaaaaaaaa",
                                                     "path": "/elsewhere"}))  # fmt: skip

    _rehome_projects(new, old)

    new_hash = scope_hash_of_path(project)
    moved = new / "scopes" / new_hash
    assert not scope.exists()
    assert json.loads((moved / "scope.json").read_text())["path"] == str(project)
    text = (moved / "decisions" / memory.name).read_text()
    assert f'scope_hash: "{new_hash}"' in text
    assert old_hash not in text
    assert personal.exists()
