"""Every notebook in notebooks/ runs top to bottom, headless, against the demo vault.

The kernel is the venv's own python (the `python3` kernelspec that ipykernel provides:
jupyter_client runs it with sys.executable), so the notebooks import this checkout's memoryd.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120


@pytest.fixture
def demo_vault(shared_demo: Path) -> Path:
    """The demo data dir, loaded once for the run: notebooks only read it."""
    return shared_demo


def test_notebooks_exist() -> None:
    assert [p.name for p in NOTEBOOKS][:2] == ["01_tour.ipynb", "02_supersede_and_trends.ipynb"]


def test_notebooks_are_stored_without_outputs() -> None:
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs, f"{path.name}: clear the outputs before committing"
                assert cell.execution_count is None, f"{path.name}: clear execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, demo_vault: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] in ("python", "python3", sys.executable), spec.argv
    monkeypatch.setenv("MEMORYD_HOME", str(demo_vault))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # headless: no display needed
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name} failed:\n{exc}", pytrace=False)
    errors = [
        output
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    assert not list(demo_vault.glob("governance.db-*")), "a notebook wrote beside governance.db"
