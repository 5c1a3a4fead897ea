"""`--help` reads cleanly and the shell completes memoryd's commands (issue 29).

Every command's help is rendered at 80 columns: options show click-style metavars (`SCOPE`),
flags none, a choice's values in its help text; never typer's `<bool>`/`<str>` labels, nor a
type label cut across lines. `--install-completion` exists and the bash protocol answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer.main
import typer.testing
from typer.core import TyperArgument, TyperGroup
from typer.testing import CliRunner

from memoryd.cli.main import app

runner = CliRunner()


def _paths(command: object, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield prefix
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from _paths(sub, (*prefix, name))


@pytest.fixture(scope="module")
def help_pages() -> dict[tuple[str, ...], str]:
    """Every command's and group's `--help` at 80 columns, rendered once for the tests below.

    typer's runner builds the click tree from the typer app on every invoke (0.19 s of CPU,
    most of a page's cost); here it is built once and each page rendered from it, as
    `memoryd … --help` renders its page from the tree that process builds."""
    root = typer.main.get_command(app)
    pages: dict[tuple[str, ...], str] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", lambda _app: root)
        for path in _paths(root):
            result = runner.invoke(
                app, [*path, "--help"], env={"COLUMNS": "80"}, prog_name="memoryd"
            )
            assert result.exit_code == 0, (path, result.output)
            pages[path] = result.output
    return pages


def test_every_help_page_shows_plain_metavars(help_pages: dict[tuple[str, ...], str]) -> None:
    for path, output in help_pages.items():
        options = [line for line in output.splitlines() if "--" in line]
        for label in ("<bool>", "<str>", "<int", "<float", "<path>", "<list["):
            assert not [line for line in options if label in line], (path, label, output)
    assert len(help_pages) > 50  # every command and group, not only the root


def test_every_argument_is_shown_by_its_name_alone(help_pages: dict[tuple[str, ...], str]) -> None:
    """A positional argument's row shows its name (`SLUG`) and no type label (`<str>`)."""
    root = typer.main.get_command(app)
    arguments = 0
    for path in _paths(root):
        command = root
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        names = [p.name.upper() for p in command.params if isinstance(p, TyperArgument)]
        if not names:
            continue
        panel = help_pages[path].split("Arguments", 1)[1].split("╰", 1)[0]
        for name in names:
            assert name in panel, (path, name, help_pages[path])
        labels = [line for line in panel.splitlines() if "<" in line and ">" in line]
        assert not labels, (path, labels)
        arguments += len(names)
    assert arguments > 30  # slugs, ids, paths, queries: every positional argument


def test_a_choice_lists_its_values_in_the_help_text() -> None:
    result = runner.invoke(app, ["recall", "--help"], env={"COLUMNS": "80"}, prog_name="memoryd")
    text = " ".join(result.output.replace("│", " ").split())
    assert "One of: session, decision, preference, fact, playbook, warning." in text


def test_shell_completion_is_on() -> None:
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "80"}, prog_name="memoryd")
    assert "--install-completion" in top.output
    script = runner.invoke(app, ["--show-completion", "bash"], prog_name="memoryd")
    assert script.exit_code == 0
    assert "_MEMORYD_COMPLETE=complete_bash" in script.output
    env = {
        "_MEMORYD_COMPLETE": "complete_bash",
        "COMP_WORDS": "memoryd setup ho",
        "COMP_CWORD": "2",
    }
    completed = runner.invoke(app, [], env=env, prog_name="memoryd")
    assert completed.output.split() == ["hooks"]
