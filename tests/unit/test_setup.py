"""`memoryd setup`: agents' hook and MCP configs, backups and undo, and the schedules.

Every installer runs against temp dirs: HOME points into tmp_path (`--user`), `--dir` at a
temp project (`--project`). The interop fixtures are copied into tmp_path, never edited in
place. The schedulers' OS tools (systemctl, launchctl, crontab) are a fake runner.
"""

from __future__ import annotations

import json
import plistlib
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.errors import ConfigError
from memoryd.setup import agents, schedules
from memoryd.setup.agents import AGENTS

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "interop" / "fixtures"
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason=f"interop fixtures not found at {FIXTURES}"
)
EXE = "/opt/memoryd/bin/memoryd"
runner = CliRunner()


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "userhome"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def setup_cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["setup", *args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


def install(home: Path, kind: str, agent: str, *args: str) -> tuple[int, str, str]:
    return setup_cli(home, kind, "--agent", agent, "--command", EXE, *args)


def fixture_copy(name: str, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / name, target)  # copyfile: the copy is writable, unlike the source
    return target


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.memoryd-backup-*"))


def history(home: Path) -> list[dict[str, Any]]:
    path = home / "setup" / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def cmd(action: str, agent: str, home: Path | None) -> str:
    """A hook's command; a project's hooks (shared with the repository) name no data dir."""
    return f"{EXE} {action} --source={agent}" + (f" --home={home}" if home else "")


# -- hooks --------------------------------------------------------------------------------------
@needs_fixtures
def test_claude_code_hooks_merge_into_fixture(home: Path, user_home: Path) -> None:
    settings = fixture_copy("claude_code_settings.json", user_home / ".claude/settings.json")
    doc = json.loads(settings.read_text())
    lint = {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "/bin/lint.sh"}]}
    doc["hooks"]["PostToolUse"].insert(0, lint)
    doc["hooks"]["SessionStart"].append({"hooks": [{"type": "command", "command": "echo hi"}]})
    doc["permissions"] = {"allow": ["Bash(ls)"]}
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    original = settings.read_bytes()

    code, out, err = install(home, "hooks", "claude-code", "--user")
    assert code == 0, err
    assert out.startswith(f"updated {settings} (backup: ")

    hooks = json.loads(settings.read_text())["hooks"]
    assert list(json.loads(settings.read_text())) == ["hooks", "permissions"]
    assert hooks["PostToolUse"] == [lint]  # the user's hook stays; the stale `memoryd hook` goes
    assert hooks["SessionStart"] == [
        {
            "matcher": "startup|resume|clear|compact",
            "hooks": [
                {"type": "command", "command": cmd("inject", "claude-code", home), "timeout": 10}
            ],
        },
        {"hooks": [{"type": "command", "command": "echo hi"}]},
    ]
    assert hooks["UserPromptSubmit"] == [
        {
            "hooks": [
                {"type": "command", "command": cmd("inject", "claude-code", home), "timeout": 10}
            ]
        }
    ]
    capture = cmd("capture", "claude-code", home)
    assert hooks["Stop"] == [{"hooks": [{"type": "command", "command": capture, "timeout": 30}]}]
    assert hooks["PreCompact"] == [
        {
            "matcher": "manual|auto",
            "hooks": [{"type": "command", "command": capture, "timeout": 60}],
        }
    ]
    assert hooks["SessionEnd"] == [
        {"hooks": [{"type": "command", "command": capture, "timeout": 10}]}
    ]
    [saved] = backups(settings)
    assert saved.read_bytes() == original
    [record] = history(home)
    assert record["path"] == str(settings)
    assert record["existed"] is True
    assert record["backup"] == str(saved)
    assert record["agent"] == "claude-code"


def test_rerun_changes_nothing_and_makes_no_second_backup(home: Path, user_home: Path) -> None:
    settings = user_home / ".claude/settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n    "model": "opus"\n}\n')
    assert install(home, "hooks", "claude-code", "--user")[0] == 0
    after_first = settings.read_bytes()
    assert b'\n    "model": "opus"' in after_first  # the file's own 4-space indent is kept

    code, out, _ = install(home, "hooks", "claude-code", "--user")
    assert code == 0
    assert out.strip() == f"unchanged {settings}"
    assert settings.read_bytes() == after_first
    assert len(backups(settings)) == 1
    assert len(history(home)) == 1


def test_rerun_with_a_user_hook_added_after_keeps_order(home: Path, user_home: Path) -> None:
    assert install(home, "hooks", "codex", "--user")[0] == 0
    path = user_home / ".codex/hooks.json"
    doc = json.loads(path.read_text())
    mine = {"hooks": [{"type": "command", "command": "notify-send stop"}]}
    doc["hooks"]["Stop"].append(mine)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    before = path.read_bytes()
    code, out, _ = install(home, "hooks", "codex", "--user")
    assert code == 0
    assert "unchanged" in out
    assert path.read_bytes() == before


def test_new_command_replaces_memoryd_entries_in_place(home: Path, user_home: Path) -> None:
    assert install(home, "hooks", "cursor", "--user")[0] == 0
    code, _, _ = setup_cli(home, "hooks", "--agent", "cursor", "--command", "/new/memoryd")
    assert code == 0
    doc = json.loads((user_home / ".cursor/hooks.json").read_text())
    commands = [h["command"] for entries in doc["hooks"].values() for h in entries]
    assert len(commands) == len(AGENTS["cursor"].hooks.events)
    assert all(c.startswith("/new/memoryd ") for c in commands)


@pytest.mark.parametrize(
    ("agent", "scope", "relative"),
    [
        ("claude-code", "user", ".claude/settings.json"),
        ("claude-code", "project", ".claude/settings.json"),
        ("codex", "user", ".codex/hooks.json"),
        ("codex", "project", ".codex/hooks.json"),
        ("cursor", "user", ".cursor/hooks.json"),
        ("cursor", "project", ".cursor/hooks.json"),
        ("windsurf", "user", ".codeium/windsurf/hooks.json"),
        ("windsurf", "project", ".windsurf/hooks.json"),
        ("gemini", "user", ".gemini/settings.json"),
        ("gemini", "project", ".gemini/settings.json"),
        ("copilot", "project", ".github/hooks/memoryd.json"),
    ],
)
def test_hooks_for_every_agent_and_scope(
    home: Path, user_home: Path, proj: Path, agent: str, scope: str, relative: str
) -> None:
    code, out, err = install(home, "hooks", agent, f"--{scope}", "--dir", str(proj))
    assert code == 0, err
    path = (user_home if scope == "user" else proj) / relative
    assert out.startswith(f"created {path}")
    doc = json.loads(path.read_text())
    spec = AGENTS[agent]
    assert list(doc["hooks"]) == list(dict.fromkeys(e.event for e in spec.hooks.events))
    for item in spec.hooks.events:
        [entry] = doc["hooks"][item.event]
        handler = entry["hooks"][0] if spec.hooks.nested else entry
        baked = home if scope == "user" else None
        assert handler[spec.hooks.command_key] == cmd(item.action, agent, baked)
        if spec.hooks.nested:
            assert entry.get("matcher") == item.matcher
    if agent in ("cursor", "copilot"):
        assert doc["version"] == 1
    other = proj if scope == "user" else user_home
    assert not (other / relative).exists()
    assert install(home, "hooks", agent, f"--{scope}", "--dir", str(proj))[1].startswith(
        "unchanged"
    )


def test_agent_hook_shapes(home: Path, user_home: Path, proj: Path) -> None:
    """Each agent's handler fields, exactly as its documented config shows them."""
    for agent in ("gemini", "windsurf", "copilot"):
        assert install(home, "hooks", agent, "--project", "--dir", str(proj))[0] == 0
    gemini = json.loads((proj / ".gemini/settings.json").read_text())["hooks"]
    assert gemini["SessionEnd"] == [
        {
            "hooks": [
                {
                    "type": "command",
                    "command": cmd("capture", "gemini", None),
                    "timeout": 10000,  # Gemini CLI counts milliseconds
                    "name": "memoryd",
                }
            ]
        }
    ]
    windsurf = json.loads((proj / ".windsurf/hooks.json").read_text())["hooks"]
    assert windsurf["post_cascade_response"] == [
        {"command": cmd("capture", "windsurf", None), "show_output": False}
    ]
    copilot = json.loads((proj / ".github/hooks/memoryd.json").read_text())
    assert copilot["hooks"]["agentStop"] == [
        {"type": "command", "bash": cmd("capture", "copilot", None), "timeoutSec": 30}
    ]


@needs_fixtures
@pytest.mark.parametrize(
    ("fixture", "agent", "relative"),
    [
        ("hook_configs/cursor.hooks.json", "cursor", ".cursor/hooks.json"),
        ("hook_configs/windsurf.hooks.json", "windsurf", ".windsurf/hooks.json"),
        ("hook_configs/copilot_cli.hooks.json", "copilot", ".github/hooks/memoryd.json"),
        ("codex_hooks.json", "codex", ".codex/hooks.json"),
        ("mcp_client_configs/gemini_cli.settings.json", "gemini", ".gemini/settings.json"),
    ],
)
def test_hooks_merge_into_each_fixture_and_undo(
    home: Path, proj: Path, fixture: str, agent: str, relative: str
) -> None:
    path = fixture_copy(fixture, proj / relative)
    doc = json.loads(path.read_text())
    doc.setdefault("hooks", {})["userEvent"] = [{"command": "/bin/true"}]
    path.write_text(json.dumps(doc, indent=2) + "\n")
    original = path.read_bytes()

    assert install(home, "hooks", agent, "--project", "--dir", str(proj))[0] == 0
    merged = json.loads(path.read_text())
    assert merged["hooks"]["userEvent"] == [{"command": "/bin/true"}]
    for key in doc:
        if key != "hooks":
            assert merged[key] == doc[key]  # gemini's mcpServers, cursor's version
    text = path.read_text()
    assert "memoryd hook" not in text
    assert text.count(f"{EXE} ") == len(AGENTS[agent].hooks.events)

    code, out, _ = setup_cli(home, "undo", "--agent", agent)
    assert code == 0
    assert out.startswith(f"restored {path} from ")
    assert path.read_bytes() == original


def test_hooks_json_output(home: Path, user_home: Path) -> None:
    code, out, _ = install(home, "hooks", "codex", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["agent"] == "codex"
    assert report["kind"] == "hooks"
    assert report["scope"] == "user"
    assert report["dry_run"] is False
    assert report["files"] == [
        {"path": str(user_home / ".codex/hooks.json"), "status": "created", "backup": None}
    ]
    assert any("trust" in note for note in report["notes"])


def test_command_defaults_to_the_installed_executable(
    home: Path, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: "/usr/local/bin/memoryd")
    monkeypatch.delenv("MEMORYD_HOME", raising=False)
    result = runner.invoke(app, ["setup", "hooks", "--agent", "cursor"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads((user_home / ".cursor/hooks.json").read_text())
    assert doc["hooks"]["stop"] == [{"command": "/usr/local/bin/memoryd capture --source=cursor"}]
    assert agents.resolve_executable("'/opt/my tools/memoryd'") == ["/opt/my tools/memoryd"]
    assert agents.hook_command(["/opt/my tools/memoryd"], "capture", "codex", None) == (
        "'/opt/my tools/memoryd' capture --source=codex"
    )


def test_symlinked_config_is_written_through(home: Path, user_home: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles/cursor-hooks.json"
    real.parent.mkdir()
    real.write_text('{"version": 1, "hooks": {}}\n')
    link = user_home / ".cursor/hooks.json"
    link.parent.mkdir()
    link.symlink_to(real)
    assert install(home, "hooks", "cursor")[0] == 0
    assert link.is_symlink()
    assert "capture --source=cursor" in real.read_text()


def test_file_mode_is_kept(home: Path, user_home: Path) -> None:
    path = user_home / ".claude.json"
    path.write_text('{"numStartups": 3}\n')
    path.chmod(0o600)
    assert install(home, "mcp", "claude-code", "--user")[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    [saved] = backups(path)
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600


# -- dry run and malformed input ----------------------------------------------------------------
@needs_fixtures
def test_dry_run_prints_the_diff_and_writes_nothing(home: Path, user_home: Path) -> None:
    settings = fixture_copy("claude_code_settings.json", user_home / ".claude/settings.json")
    original = settings.read_bytes()
    code, out, _ = install(home, "hooks", "claude-code", "--dry-run")
    assert code == 0
    assert out.startswith(f"--- {settings}\n+++ {settings}\n")
    assert f'+            "command": "{cmd("capture", "claude-code", home)}",' in out
    assert '-      { "hooks": [ { "type": "command", "command": "memoryd hook claude-code' in out
    assert settings.read_bytes() == original
    assert backups(settings) == []
    assert history(home) == []

    code, out, _ = install(home, "mcp", "cursor", "--dry-run", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["files"][0]["status"] == "created"
    assert report["files"][0]["diff"].startswith("--- /dev/null\n")
    assert not (user_home / ".cursor").exists()


@pytest.mark.parametrize(
    ("agent", "kind", "relative", "text", "where"),
    [
        ("cursor", "hooks", ".cursor/hooks.json", '{\n  "version": 1,\n  "hooks": {,\n}\n', ":3:"),
        ("claude-code", "mcp", ".claude.json", '{"a": 1}\n{"b": 2}\n', ":2:"),
        ("codex", "mcp", ".codex/config.toml", 'model = "o3"\n[mcp_servers\n', ":2:"),
        ("gemini", "hooks", ".gemini/settings.json", '{"hooks": []}\n', "hooks"),
        ("cursor", "mcp", ".cursor/mcp.json", "[1, 2]\n", ":1:"),
    ],
)
def test_malformed_config_is_an_error_naming_file_and_line(
    home: Path, user_home: Path, agent: str, kind: str, relative: str, text: str, where: str
) -> None:
    path = user_home / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    code, _, err = install(home, kind, agent, "--user")
    assert code == 2
    assert f"error: {path}" in err
    assert where in err
    assert "nothing was written" in err
    assert path.read_text() == text
    assert backups(path) == []
    assert history(home) == []


def test_usage_errors(home: Path, user_home: Path) -> None:
    code, _, err = install(home, "hooks", "vim")
    assert code == 2
    assert "unknown agent 'vim'" in err
    code, _, err = install(home, "hooks", "cursor", "--user", "--project")
    assert (code, "exclude each other" in err) == (2, True)
    code, _, err = install(home, "hooks", "copilot", "--user")
    assert (code, "hint: use --project" in err) == (2, True)
    code, _, err = install(home, "mcp", "windsurf", "--project")
    assert (code, "hint: use --user" in err) == (2, True)
    code, _, err = install(home, "mcp", "copilot")
    assert code == 2
    assert "no documented" in err


# -- MCP ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("agent", "scope", "relative", "entry"),
    [
        ("claude-code", "project", ".mcp.json", {"type": "stdio"}),
        ("claude-code", "user", ".claude.json", {"type": "stdio"}),
        ("cursor", "project", ".cursor/mcp.json", {}),
        ("cursor", "user", ".cursor/mcp.json", {}),
        ("windsurf", "user", ".codeium/windsurf/mcp_config.json", {}),
        ("gemini", "project", ".gemini/settings.json", {}),
        ("gemini", "user", ".gemini/settings.json", {}),
    ],
)
def test_mcp_json_for_every_agent_and_scope(
    home: Path,
    user_home: Path,
    proj: Path,
    agent: str,
    scope: str,
    relative: str,
    entry: dict[str, str],
) -> None:
    code, _, err = install(home, "mcp", agent, f"--{scope}", "--dir", str(proj))
    assert code == 0, err
    path = (user_home if scope == "user" else proj) / relative
    # a project's config is shared: the data dir of this machine stays out of it
    env = {"env": {"MEMORYD_HOME": str(home)}} if scope == "user" else {}
    assert json.loads(path.read_text()) == {
        "mcpServers": {"memoryd": {**entry, "command": EXE, "args": ["mcp"], **env}}
    }
    assert install(home, "mcp", agent, f"--{scope}", "--dir", str(proj))[1].startswith("unchanged")


@needs_fixtures
@pytest.mark.parametrize(
    ("fixture", "agent", "relative"),
    [
        ("mcp_client_configs/claude_code.project.mcp.json", "claude-code", ".mcp.json"),
        ("mcp_client_configs/cursor.mcp.json", "cursor", ".cursor/mcp.json"),
        ("mcp_client_configs/gemini_cli.settings.json", "gemini", ".gemini/settings.json"),
    ],
)
def test_mcp_merge_into_fixture_updates_memoryd_in_place(
    home: Path, proj: Path, fixture: str, agent: str, relative: str
) -> None:
    path = fixture_copy(fixture, proj / relative)
    doc = json.loads(path.read_text())
    assert install(home, "mcp", agent, "--project", "--dir", str(proj))[0] == 0
    merged = json.loads(path.read_text())
    assert merged["mcpServers"]["memoryd-http"] == doc["mcpServers"]["memoryd-http"]
    server = merged["mcpServers"]["memoryd"]
    assert server["command"] == EXE
    assert server["args"] == ["mcp"]
    assert "env" not in server  # the fixture's MEMORYD_HOME named another machine's data dir
    for key in set(doc["mcpServers"]["memoryd"]) - {"command", "args", "env"}:
        assert server[key] == doc["mcpServers"]["memoryd"][key]  # gemini's timeout, trust
    assert merged.get("hooks") == doc.get("hooks")


@needs_fixtures
def test_windsurf_mcp_fixture(home: Path, user_home: Path) -> None:
    path = fixture_copy(
        "mcp_client_configs/windsurf.mcp_config.json",
        user_home / ".codeium/windsurf/mcp_config.json",
    )
    original = path.read_bytes()
    assert install(home, "mcp", "windsurf")[0] == 0
    assert json.loads(path.read_text())["mcpServers"]["memoryd"]["args"] == ["mcp"]
    assert setup_cli(home, "undo")[0] == 0
    assert path.read_bytes() == original


@pytest.mark.parametrize(
    ("agent", "relative", "entry"),
    [
        ("claude-code", ".mcp.json", {"type": "stdio"}),
        ("cursor", ".cursor/mcp.json", {}),
        ("gemini", ".gemini/settings.json", {}),
    ],
)
def test_a_project_mcp_config_names_nothing_of_this_machine(
    home: Path,
    user_home: Path,
    proj: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    relative: str,
    entry: dict[str, str],
) -> None:
    """Issue 29: `setup mcp --project` writes a file the team can commit (`memoryd` from
    PATH, no data dir); the user-level config keeps this machine's absolute paths."""
    monkeypatch.setattr("shutil.which", lambda name: "/home/me/.venv/bin/memoryd")
    code, out, err = setup_cli(home, "mcp", "--agent", agent, "--project", "--dir", str(proj))
    assert code == 0, err
    text = (proj / relative).read_text()
    assert json.loads(text) == {
        "mcpServers": {"memoryd": {**entry, "command": "memoryd", "args": ["mcp"]}}
    }
    for machine in ("/home/me", str(home), str(proj)):
        assert machine not in text
    assert "note: This file names no path of this machine, so it can be committed" in out
    assert f"note: The data dir {home} is not written into a project's config" in out
    # rerun: unchanged; the user's own config keeps the absolute paths
    again = setup_cli(home, "mcp", "--agent", agent, "--project", "--dir", str(proj))
    assert again[1].startswith("unchanged")
    if agent != "claude-code":
        return
    assert setup_cli(home, "mcp", "--agent", agent, "--user")[0] == 0
    server = json.loads((user_home / ".claude.json").read_text())["mcpServers"]["memoryd"]
    assert server["command"] == "/home/me/.venv/bin/memoryd"
    assert server["env"] == {"MEMORYD_HOME": str(home)}


def test_a_project_mcp_config_from_an_older_run_loses_its_machine_paths(
    home: Path, proj: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: "/home/me/.venv/bin/memoryd")
    old = {
        "command": "/home/me/.venv/bin/memoryd",
        "args": ["mcp"],
        "env": {"MEMORYD_HOME": "/home/me/.local/share/memoryd", "LOG_LEVEL": "debug"},
    }
    (proj / ".mcp.json").write_text(json.dumps({"mcpServers": {"mem": old}}))
    (proj / ".codex").mkdir()
    (proj / ".codex/config.toml").write_text(
        "# shared\n[mcp_servers.memoryd]\n"
        'command = "/home/me/.venv/bin/memoryd"\nargs = ["mcp"]\n'
        'env = { MEMORYD_HOME = "/home/me/.local/share/memoryd" }\n'
    )
    for agent in ("claude-code", "codex"):
        code, _, err = setup_cli(home, "mcp", "--agent", agent, "--project", "--dir", str(proj))
        assert code == 0, err
    server = json.loads((proj / ".mcp.json").read_text())["mcpServers"]["mem"]
    assert server == {
        "command": "memoryd",
        "args": ["mcp"],
        "env": {"LOG_LEVEL": "debug"},  # the user's own variable is kept
        "type": "stdio",
    }
    assert (proj / ".codex/config.toml").read_text() == (
        '# shared\n[mcp_servers.memoryd]\ncommand = "memoryd"\nargs = ["mcp"]\n'
    )


def test_project_hooks_are_portable(home: Path, proj: Path) -> None:
    """A project's hooks file is committed with the repository: without --command its hooks
    run `memoryd` from PATH and name no data dir, and the output says it can be committed."""
    code, out, err = setup_cli(
        home, "hooks", "--agent", "claude-code", "--project", "--dir", str(proj)
    )
    assert code == 0, err
    text = (proj / ".claude/settings.json").read_text()
    doc = json.loads(text)
    commands = [h["command"] for group in doc["hooks"].values() for g in group for h in g["hooks"]]
    assert commands
    assert all(c.startswith("memoryd ") and "--home" not in c for c in commands), commands
    assert str(home) not in text
    assert "note: This file names no path of this machine, so it can be committed" in out
    assert f"The data dir {home} is not written into a project's config" in out


def test_setup_undo_dry_run_says_what_it_would_do_and_changes_nothing(
    home: Path, user_home: Path, proj: Path
) -> None:
    path = user_home / ".cursor/hooks.json"
    path.parent.mkdir()
    path.write_text("{}\n")
    assert install(home, "hooks", "cursor")[0] == 0
    assert install(home, "hooks", "copilot", "--dir", str(proj))[0] == 0
    created = proj / ".github/hooks/memoryd.json"
    installed, before = path.read_bytes(), history(home)
    code, out, err = setup_cli(home, "undo", "--all", "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"would delete {created}"
    assert lines[1].startswith(f"would restore {path} from ")
    assert lines[2] == "(dry run: nothing was changed)"
    assert path.read_bytes() == installed
    assert created.exists()
    assert history(home) == before
    code, out, _ = setup_cli(home, "undo", "--all", "--dry-run", "--json")
    assert [(r["action"], r["dry_run"]) for r in json.loads(out)] == [
        ("deleted", True),
        ("restored", True),
    ]
    path.write_text("{ }\n")  # changed since: the dry run refuses as the undo would
    code, _, err = setup_cli(home, "undo", "--agent", "cursor", "--dry-run")
    assert code == 4, err
    assert f"{path} changed since memoryd wrote it" in err
    assert path.read_text() == "{ }\n"


def test_a_project_mcp_config_with_an_absolute_command_says_it_is_not_portable(
    home: Path, proj: Path
) -> None:
    code, out, _ = install(home, "mcp", "cursor", "--project", "--dir", str(proj))
    assert code == 0
    assert f"note: {EXE} is a path on this machine: other clones cannot run it." in out


def test_a_foreign_server_named_memoryd_is_a_conflict(home: Path, proj: Path) -> None:
    path = proj / ".mcp.json"
    text = '{"mcpServers": {"memoryd": {"type": "http", "url": "http://x/mcp"}}}\n'
    path.write_text(text)
    code, _, err = install(home, "mcp", "claude-code", "--project", "--dir", str(proj))
    assert code == 4
    assert "not run `memoryd mcp`" in err
    assert path.read_text() == text


@needs_fixtures
def test_codex_toml_keeps_comments_and_layout(home: Path, user_home: Path) -> None:
    path = fixture_copy("codex_config.toml", user_home / ".codex/config.toml")
    original = path.read_text()
    code, out, _ = install(home, "mcp", "codex", "--user")
    assert code == 0
    assert "note: Codex reads a project's .codex/ config only when the project is trusted." in out
    text = path.read_text()
    expected = original.replace('command = "memoryd"', f'command = "{EXE}"')
    expected = expected.replace('args = ["mcp", "serve", "--transport", "stdio"]', 'args = ["mcp"]')
    expected = expected.replace('"/Users/abble/.local/share/memoryd"', json.dumps(str(home)))
    assert text == expected  # every comment, the notify line and memoryd-http untouched
    assert install(home, "mcp", "codex", "--user")[1].startswith("unchanged")
    assert len(backups(path)) == 1


def test_codex_toml_new_and_alongside_other_servers(
    home: Path, user_home: Path, proj: Path
) -> None:
    assert install(home, "mcp", "codex", "--project", "--dir", str(proj))[0] == 0
    assert (proj / ".codex/config.toml").read_text() == (
        f'[mcp_servers.memoryd]\ncommand = "{EXE}"\nargs = ["mcp"]\n'
    )
    path = user_home / ".codex/config.toml"
    path.parent.mkdir()
    path.write_text('model = "o3"  # mine\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n')
    assert install(home, "mcp", "codex", "--user")[0] == 0
    doc = tomlkit.parse(path.read_text())
    assert doc["model"] == "o3"
    assert doc["mcp_servers"]["docs"]["command"] == "docs-mcp"
    assert doc["mcp_servers"]["memoryd"]["args"] == ["mcp"]
    assert path.read_text().startswith('model = "o3"  # mine\n')


# -- undo ---------------------------------------------------------------------------------------
def test_undo_deletes_created_files_and_dirs(home: Path, proj: Path) -> None:
    assert install(home, "hooks", "copilot", "--dir", str(proj))[0] == 0
    path = proj / ".github/hooks/memoryd.json"
    assert path.exists()
    code, out, _ = setup_cli(home, "undo", "--agent", "copilot", "--json")
    assert code == 0
    [done] = json.loads(out)
    assert done["action"] == "deleted"
    assert done["path"] == str(path)
    assert done["backup"] is None
    assert not (proj / ".github").exists()
    assert sorted(p.name for p in proj.iterdir()) == []
    code, _, err = setup_cli(home, "undo", "--agent", "copilot")
    assert code == 3
    assert "no setup change to undo for copilot" in err


def test_undo_keeps_dirs_that_gained_other_files(home: Path, proj: Path) -> None:
    assert install(home, "hooks", "cursor", "--project", "--dir", str(proj))[0] == 0
    (proj / ".cursor/rules.md").write_text("mine")
    assert setup_cli(home, "undo")[0] == 0
    assert not (proj / ".cursor/hooks.json").exists()
    assert (proj / ".cursor/rules.md").read_text() == "mine"


def test_undo_refuses_a_file_changed_since_unless_forced(home: Path, user_home: Path) -> None:
    path = user_home / ".cursor/mcp.json"
    path.parent.mkdir()
    path.write_text('{"mcpServers": {}}')
    original = path.read_bytes()
    assert install(home, "mcp", "cursor")[0] == 0
    path.write_text(path.read_text().replace("}", " }"))
    edited = path.read_bytes()
    code, _, err = setup_cli(home, "undo")
    assert code == 4
    assert f"{path} changed since memoryd wrote it" in err
    assert path.read_bytes() == edited
    code, _, _ = setup_cli(home, "undo", "--force")
    assert code == 0
    assert path.read_bytes() == original


def test_undo_all_walks_back_every_run(home: Path, user_home: Path, proj: Path) -> None:
    path = user_home / ".gemini/settings.json"
    path.parent.mkdir()
    path.write_text('{"theme": "dark"}\n')
    original = path.read_bytes()
    assert install(home, "hooks", "gemini")[0] == 0
    assert install(home, "mcp", "gemini")[0] == 0
    assert install(home, "hooks", "cursor", "--project", "--dir", str(proj))[0] == 0
    assert len(backups(path)) == 2

    code, out, _ = setup_cli(home, "undo", "--agent", "gemini", "--all")
    assert code == 0
    assert out.count("restored") == 2
    assert path.read_bytes() == original
    assert (proj / ".cursor/hooks.json").exists()  # another agent's run is not touched
    code, out, _ = setup_cli(home, "undo", "--all")
    assert code == 0
    assert out.startswith("deleted")
    assert len([r for r in history(home) if "undo" in r]) == 3
    assert setup_cli(home, "undo", "--all")[0] == 3  # nothing left to undo


def test_undo_needs_the_backup(home: Path, user_home: Path) -> None:
    path = user_home / ".cursor/hooks.json"
    path.parent.mkdir()
    path.write_text("{}\n")
    assert install(home, "hooks", "cursor")[0] == 0
    for saved in backups(path):
        saved.unlink()
    code, _, err = setup_cli(home, "undo")
    assert code == 3
    assert "is gone" in err


# -- schedules ----------------------------------------------------------------------------------
class FakeOS:
    """systemctl, launchctl and crontab as seen by the installers: records every call."""

    def __init__(self, *, systemd: bool = True, crontab: str | None = None) -> None:
        self.systemd = systemd
        self.crontab = crontab
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv: Sequence[str], input_text: str | None) -> schedules.Completed:
        self.calls.append((list(argv), input_text))
        if list(argv) == ["systemctl", "--user", "show-environment"]:
            return schedules.Completed(0 if self.systemd else 1, "")
        if list(argv) == ["crontab", "-l"]:
            if self.crontab is None:
                return schedules.Completed(1, "no crontab for tester\n")
            return schedules.Completed(0, self.crontab)
        if list(argv) == ["crontab", "-"]:
            self.crontab = input_text
        return schedules.Completed(0, "")

    def commands(self) -> list[list[str]]:
        probes = (["systemctl", "--user", "show-environment"], ["crontab", "-l"])
        return [argv for argv, _ in self.calls if argv not in probes]


def host(tmp_path: Path, system: str, fake: FakeOS, tools: Sequence[str]) -> schedules.Host:
    home = tmp_path / "userhome"
    return schedules.Host(
        system,
        home,
        home / ".config",
        fake,
        lambda name: f"/usr/bin/{name}" if name in tools else None,
    )


def test_backend_choice(tmp_path: Path) -> None:
    assert schedules.choose_backend(host(tmp_path, "Darwin", FakeOS(), [])) == "launchd"
    linux = host(tmp_path, "Linux", FakeOS(), ["systemctl", "crontab"])
    assert schedules.choose_backend(linux) == "systemd"
    no_manager = host(tmp_path, "Linux", FakeOS(systemd=False), ["systemctl", "crontab"])
    assert schedules.choose_backend(no_manager) == "cron"
    assert schedules.choose_backend(host(tmp_path, "FreeBSD", FakeOS(), ["crontab"])) == "cron"
    with pytest.raises(ConfigError, match="no scheduler"):
        schedules.choose_backend(host(tmp_path, "Linux", FakeOS(systemd=False), ["systemctl"]))


SERVICE = f"""[Unit]
Description=memoryd daemon: long-term memory for AI coding agents

[Service]
Type=simple
ExecStart={EXE} serve --no-tcp
Restart=on-failure
RestartSec=5

[Install]
WantedBy=default.target
"""
MAINTENANCE_SERVICE = f"""[Unit]
Description=memoryd maintenance: retry captures that failed (hourly)

[Service]
Type=oneshot
ExecStart={EXE} capture retry
"""
MAINTENANCE_TIMER = """[Unit]
Description=Run memoryd maintenance (hourly)

[Timer]
OnCalendar=hourly
Persistent=true

[Install]
WantedBy=timers.target
"""
DECAY_TIMER = """[Unit]
Description=Run memoryd decay-sweep (*-*-* 03:00:00)

[Timer]
OnCalendar=*-*-* 03:00:00
Persistent=true

[Install]
WantedBy=timers.target
"""


def test_systemd_install_is_exact_and_idempotent(tmp_path: Path, home: Path) -> None:
    fake = FakeOS()
    linux = host(tmp_path, "Linux", fake, ["systemctl"])
    plan = schedules.plan_schedules(linux, [EXE])
    schedules.apply_schedules(plan, linux, home / "setup")
    unit_dir = linux.home / ".config/systemd/user"
    assert (unit_dir / "memoryd.service").read_text() == SERVICE
    assert (unit_dir / "memoryd-maintenance.service").read_text() == MAINTENANCE_SERVICE
    assert (unit_dir / "memoryd-maintenance.timer").read_text() == MAINTENANCE_TIMER
    enable = [
        "systemctl",
        "--user",
        "enable",
        "--now",
        "memoryd.service",
        "memoryd-maintenance.timer",
        "memoryd-decay-sweep.timer",
        "memoryd-identity.timer",
        "memoryd-monthly-report.timer",
    ]
    assert fake.commands() == [["systemctl", "--user", "daemon-reload"], enable]

    fake.calls.clear()
    again = schedules.plan_schedules(linux, [EXE])
    assert not again.changed
    schedules.apply_schedules(again, linux, home / "setup")
    assert fake.commands() == [enable]

    fake.calls.clear()
    gone = schedules.plan_schedules(linux, [EXE], uninstall=True)
    schedules.apply_schedules(gone, linux, home / "setup")
    assert fake.commands() == [
        [
            "systemctl",
            "--user",
            "disable",
            "--now",
            "memoryd.service",
            "memoryd-maintenance.timer",
            "memoryd-decay-sweep.timer",
            "memoryd-identity.timer",
            "memoryd-monthly-report.timer",
        ],
        ["systemctl", "--user", "daemon-reload"],
    ]
    assert list(unit_dir.iterdir()) == []


def test_systemd_units_carry_home_and_quote_paths(home: Path) -> None:
    units = schedules.systemd_units(["/opt/my tools/memoryd"], home)
    assert 'ExecStart="/opt/my tools/memoryd" serve --no-tcp\n' in units["memoryd.service"]
    assert f"Environment=MEMORYD_HOME={home}\n" in units["memoryd.service"]
    assert f"Environment=MEMORYD_HOME={home}\n" in units["memoryd-maintenance.service"]


def test_systemd_failure_is_a_config_error(tmp_path: Path, home: Path) -> None:
    def failing(argv: Sequence[str], input_text: str | None) -> schedules.Completed:
        if "enable" in argv:
            return schedules.Completed(1, "Failed to connect to bus\n")
        return schedules.Completed(0, "")

    linux = host(tmp_path, "Linux", FakeOS(), ["systemctl"])
    linux = schedules.Host(linux.system, linux.home, linux.config_home, failing, linux.which)
    with pytest.raises(ConfigError, match="Failed to connect to bus"):
        schedules.apply_schedules(schedules.plan_schedules(linux, [EXE]), linux, home)


def test_launchd_install_and_uninstall(tmp_path: Path, home: Path) -> None:
    fake = FakeOS()
    mac = host(tmp_path, "Darwin", fake, [])
    schedules.apply_schedules(schedules.plan_schedules(mac, [EXE], home=home), mac, home)
    agent_dir = mac.home / "Library/LaunchAgents"
    serve = plistlib.loads((agent_dir / "dev.memoryd.serve.plist").read_bytes())
    assert serve == {
        "Label": "dev.memoryd.serve",
        "ProgramArguments": [EXE, "serve", "--no-tcp"],
        "EnvironmentVariables": {"MEMORYD_HOME": str(home)},
        "RunAtLoad": True,
        "KeepAlive": True,
    }
    job = plistlib.loads((agent_dir / "dev.memoryd.maintenance.plist").read_bytes())
    assert job == {
        "Label": "dev.memoryd.maintenance",
        "ProgramArguments": [EXE, "capture", "retry"],
        "EnvironmentVariables": {"MEMORYD_HOME": str(home)},
        "StartCalendarInterval": {"Minute": 0},
    }
    decay = plistlib.loads((agent_dir / "dev.memoryd.decay-sweep.plist").read_bytes())
    assert decay["ProgramArguments"] == [EXE, "decay-sweep"]
    assert decay["StartCalendarInterval"] == {"Hour": 3, "Minute": 0}
    identity = plistlib.loads((agent_dir / "dev.memoryd.identity.plist").read_bytes())
    assert identity["ProgramArguments"] == [EXE, "profile", "rewrite", "--scheduled"]
    assert identity["StartCalendarInterval"] == {"Hour": 2, "Minute": 0, "Weekday": 0}
    report = plistlib.loads((agent_dir / "dev.memoryd.monthly-report.plist").read_bytes())
    assert report["ProgramArguments"] == [EXE, "profile", "report", "--scheduled"]
    assert report["StartCalendarInterval"] == {"Hour": 4, "Minute": 0, "Day": 1}
    jobs = ("serve", "maintenance", "decay-sweep", "identity", "monthly-report")
    assert fake.commands() == [
        ["launchctl", "load", "-w", str(agent_dir / f"dev.memoryd.{job}.plist")] for job in jobs
    ]
    fake.calls.clear()
    assert not schedules.plan_schedules(mac, [EXE], home=home).changed
    schedules.apply_schedules(schedules.plan_schedules(mac, [EXE], home=home), mac, home)
    assert fake.commands() == []

    schedules.apply_schedules(schedules.plan_schedules(mac, [EXE], uninstall=True), mac, home)
    assert fake.commands() == [
        ["launchctl", "unload", "-w", str(agent_dir / f"dev.memoryd.{job}.plist")] for job in jobs
    ]
    assert list(agent_dir.iterdir()) == []


CRON_BLOCK = f"""# >>> memoryd schedules (managed by `memoryd setup auto-install`) >>>
@reboot {EXE} serve --no-tcp >/dev/null 2>&1
0 * * * * {EXE} capture retry >/dev/null 2>&1
0 3 * * * {EXE} decay-sweep >/dev/null 2>&1
0 2 * * 0 {EXE} profile rewrite --scheduled >/dev/null 2>&1
0 4 1 * * {EXE} profile report --scheduled >/dev/null 2>&1
# <<< memoryd schedules <<<
"""


def test_cron_block_keeps_the_users_lines(tmp_path: Path, home: Path) -> None:
    mine = "MAILTO=me\n30 2 * * * /usr/bin/backup\n"
    fake = FakeOS(crontab=mine)
    box = host(tmp_path, "Linux", fake, ["crontab"])
    result = schedules.apply_schedules(schedules.plan_schedules(box, [EXE]), box, home / "setup")
    assert fake.crontab == mine + CRON_BLOCK
    assert result.crontab_backup is not None
    assert result.crontab_backup.read_text() == mine

    fake.calls.clear()
    again = schedules.plan_schedules(box, [EXE])
    assert not again.changed
    schedules.apply_schedules(again, box, home / "setup")
    assert fake.commands() == []

    schedules.apply_schedules(schedules.plan_schedules(box, [EXE], uninstall=True), box, home)
    assert fake.crontab == mine


def test_cron_without_a_crontab_and_with_odd_paths(tmp_path: Path, home: Path) -> None:
    fake = FakeOS(crontab=None)
    box = host(tmp_path, "Linux", fake, ["crontab"])
    schedules.apply_schedules(schedules.plan_schedules(box, [EXE]), box, home / "setup")
    assert fake.crontab == CRON_BLOCK
    block = schedules.cron_block(["/opt/100%/memoryd"], Path("/data/my home"))
    assert "@reboot MEMORYD_HOME='/data/my home' /opt/100\\%/memoryd serve --no-tcp" in block


def test_auto_install_cli_dry_run_and_json(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeOS()
    linux = host(tmp_path, "Linux", fake, ["systemctl"])
    monkeypatch.setattr(schedules, "current_host", lambda: linux)
    code, out, err = setup_cli(home, "auto-install", "--dry-run", "--command", EXE)
    assert code == 0, err
    unit_dir = linux.home / ".config/systemd/user"
    assert out.startswith("scheduler: systemd\n")
    assert f"# {unit_dir / 'memoryd-maintenance.timer'} (created)\n{MAINTENANCE_TIMER}" in out
    assert "would run: systemctl --user enable --now memoryd.service" in out
    assert not unit_dir.exists()
    assert fake.commands() == []

    code, out, _ = setup_cli(home, "auto-install", "--command", EXE, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["backend"] == "systemd"
    assert [f["status"] for f in report["files"]] == ["created"] * 9
    assert report["commands"][-1] == {
        "argv": [
            "systemctl",
            "--user",
            "enable",
            "--now",
            "memoryd.service",
            "memoryd-maintenance.timer",
            "memoryd-decay-sweep.timer",
            "memoryd-identity.timer",
            "memoryd-monthly-report.timer",
        ],
        "returncode": 0,
    }
    assert f"Environment=MEMORYD_HOME={home}" in (unit_dir / "memoryd.service").read_text()

    code, out, _ = setup_cli(home, "auto-install", "--uninstall")
    assert code == 0
    assert not (unit_dir / "memoryd.service").exists()


def test_auto_install_cli_without_a_scheduler(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nothing = host(tmp_path, "Linux", FakeOS(systemd=False), [])
    monkeypatch.setattr(schedules, "current_host", lambda: nothing)
    code, _, err = setup_cli(home, "auto-install", "--command", EXE)
    assert code == 8
    assert "no scheduler" in err


def test_setup_help_lists_commands() -> None:
    result = runner.invoke(app, ["setup", "--help"])
    assert result.exit_code == 0
    for name in ("hooks", "mcp", "undo", "auto-install"):
        assert name in result.stdout


def test_setup_hooks_says_what_it_set_up_and_that_hooks_start_the_daemon(
    home: Path, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_DAEMON__AUTOSTART", "1")  # the suite pins it off
    code, out, _ = install(home, "hooks", "claude-code", "--user")
    assert code == 0
    assert "SessionStart, UserPromptSubmit run `memoryd inject`" in out
    assert "Stop, PreCompact, SessionEnd run `memoryd capture`" in out
    assert "start the memoryd daemon in the background" in out
    (user_home / ".claude/settings.json").unlink()
    monkeypatch.setenv("MEMORYD_NO_AUTOSTART", "1")
    code, out, _ = install(home, "hooks", "claude-code", "--user")
    assert code == 0
    assert "autostart is off" in out
    assert "memoryd serve --detach" in out
