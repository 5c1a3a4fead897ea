"""The CLI end to end in embedded mode: arguments, stdin, output, exit codes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app

runner = CliRunner()


def cli(home: Path, *args: str, input: str | bytes | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--home", str(home)], input=input)
    return result.exit_code, result.stdout, result.stderr


def record(home: Path, project: Path, title: str, body: str, type: str = "decision") -> str:
    code, out, err = cli(
        home, "record", "--type", type, "--title", title, "--body", body, "--scope", str(project)
    )
    assert code == 0, err
    return out.strip()


def test_every_command_has_help() -> None:
    for command in (
        ["record"],
        ["get"],
        ["list"],
        ["search"],
        ["reindex"],
        ["audit"],
        ["audit", "verify"],
        ["scope", "show"],
        ["doctor"],
        ["demo"],
    ):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, command
        assert "--home" in result.stdout or command == ["scope"], command


def test_record_get_list_search(home: Path, project: Path) -> None:
    slug = record(home, project, "Prefer ruff", "Use ruff for lint and format.")
    assert "prefer-ruff" in slug
    code, out, _ = cli(home, "get", slug)
    assert code == 0
    assert out.startswith("---\ntitle: Prefer ruff\n")
    assert "Use ruff for lint and format." in out
    code, out, _ = cli(home, "get", slug, "--json")
    assert json.loads(out)["meta"]["slug"] == slug
    code, out, _ = cli(home, "list", "--json", "--scope", str(project))
    assert [m["slug"] for m in json.loads(out)] == [slug]
    code, out, _ = cli(home, "search", "ruff", "--json")
    assert json.loads(out)[0]["slug"] == slug
    code, out, _ = cli(home, "search", "ruff")
    assert "Prefer ruff" in out


def test_body_from_stdin(home: Path, project: Path) -> None:
    code, out, err = cli(
        home,
        "record",
        "--type",
        "fact",
        "--title",
        "Piped",
        "--scope",
        str(project),
        "--tags",
        "a,b",
        "--triggers",
        "pipe",
        input="body from a pipe\n",
    )
    assert code == 0, err
    _, shown, _ = cli(home, "get", out.strip(), "--json")
    data = json.loads(shown)
    assert data["body"] == "body from a pipe"
    assert data["meta"]["tags"] == ["a", "b"]
    assert data["meta"]["triggers"] == ["pipe"]


@pytest.mark.parametrize(
    ("args", "stdin", "code", "message"),
    [
        (["--type", "diary", "--title", "t", "--body", "b"], None, 2, "diary"),
        (["--type", "fact", "--title", " ", "--body", "b"], None, 2, "title is empty"),
        (["--type", "fact", "--title", "t"], b"caf\xe9 latin-1", 2, "not UTF-8"),
    ],
)
def test_bad_record_input(
    home: Path, project: Path, args: list[str], stdin: bytes | None, code: int, message: str
) -> None:
    exit_code, _, err = cli(home, "record", *args, "--scope", str(project), input=stdin)
    assert exit_code == code
    assert message in err
    assert len(err.strip().splitlines()) <= 12  # typer boxes usage errors; ours are one line


def test_duplicate_exit_code_and_message(home: Path, project: Path) -> None:
    slug = record(home, project, "One", "same body")
    code, _, err = cli(
        home,
        "record",
        "--type",
        "fact",
        "--title",
        "Two",
        "--body",
        "same body",
        "--scope",
        str(project),
    )
    assert code == 4
    assert slug in err
    assert err.count("\n") == 1


def test_get_unknown_and_broken(home: Path, project: Path) -> None:
    code, _, err = cli(home, "get", "2026-01-01-none-000000")
    assert code == 3
    assert "no memory" in err
    slug = record(home, project, "Will break", "text")
    path = next(home.glob(f"scopes/*/decisions/{slug}.md"))
    path.write_text("---\ntitle: [broken\n---\n", encoding="utf-8")
    code, _, err = cli(home, "get", slug)
    assert code == 2
    assert str(path) in err
    assert "invalid YAML" in err


def test_reindex_warns_and_continues(home: Path, project: Path) -> None:
    record(home, project, "Fine", "fine text")
    slug = record(home, project, "Broken", "broken text")
    path = next(home.glob(f"scopes/*/decisions/{slug}.md"))
    path.write_text("garbage", encoding="utf-8")
    code, out, err = cli(home, "reindex")
    assert code == 0
    assert "indexed 1 memories" in out
    assert str(path) in err


def test_audit_list_and_verify(home: Path, project: Path) -> None:
    record(home, project, "A", "first")
    record(home, project, "B", "second")
    code, out, _ = cli(home, "audit", "--json", "--event-type", "record")
    assert code == 0
    assert [r["seq"] for r in json.loads(out)] == [1, 2]
    code, out, _ = cli(home, "audit", "verify")
    assert (code, out.strip()) == (0, "audit chain ok: 2 lines")
    log = home / "audit" / "audit.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[0] = lines[0].replace('"actor":"cli"', '"actor":"mallory"')
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = cli(home, "audit", "verify")
    assert code == 9
    assert "line 1" in err


def test_scope_show_hashes_git_toplevel(project: Path, home: Path) -> None:
    expected = hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:12]
    code, out, _ = cli(home, "scope", "show", str(project / "src"))
    assert code == 0
    assert out.split() == [expected, str(project.resolve())]
    code, out, _ = cli(home, "scope", "show", str(project), "--json")
    assert json.loads(out)["scope_hash"] == expected


def test_doctor_reports_and_fails_on_missing_file(home: Path, project: Path) -> None:
    slug = record(home, project, "Doc", "checked by doctor")
    code, out, _ = cli(home, "doctor")
    assert code == 0, out
    assert "FAIL" not in out
    next(home.glob(f"scopes/*/decisions/{slug}.md")).unlink()
    code, out, _ = cli(home, "doctor", "--json")
    assert code == 1
    failed = {c["name"]: c for c in json.loads(out) if not c["ok"]}
    assert "index consistency" in failed
    assert "reindex" in failed["index consistency"]["fix"]


def test_console_script_runs_as_a_process(home: Path, project: Path) -> None:
    """One real subprocess: the installed entry point, exit codes and stderr as a user sees them."""
    exe = Path(sys.executable).parent / "memoryd"
    ok = subprocess.run([str(exe), "scope", "show", str(project)], capture_output=True, text=True)
    assert ok.returncode == 0
    bad = subprocess.run(
        [
            str(exe),
            "record",
            "--type",
            "fact",
            "--title",
            "",
            "--body",
            "x",
            "--home",
            str(home),
            "--scope",
            str(project),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        == "error: title is empty (hint: give the memory a short title with --title)"
    )
