"""The notebooks in `notebooks/` run top to bottom on a CPU (each in a fresh kernel, in the
notebooks folder, as a reader would run them), leave nothing behind, and are stored stripped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 180
BUDGET_S = 180
"""Each notebook must run in well under this (they take 10–60 s on 2 cores)."""
MIN_PLOTS = {"01_quickstart": 2, "02_credit_assignment": 2, "03_sft_export": 1}
"""Plots each notebook draws at least (others: 2)."""


def test_notebooks_are_present() -> None:
    names = [p.name for p in NOTEBOOKS]
    for expected in (
        "01_quickstart.ipynb",
        "02_credit_assignment.ipynb",
        "03_sft_export.ipynb",
        "04_value_models.ipynb",
        "05_generations.ipynb",
    ):
        assert expected in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped(path: Path) -> None:
    """Stored notebooks hold code, not results: no outputs, execution counts or run metadata."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells, "empty notebook"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} of {path.name} has outputs"
            assert cell.execution_count is None, f"cell {i} of {path.name} has a count"
        assert "execution" not in cell.metadata, f"cell {i} of {path.name} has timings"
        assert cell.source.strip(), f"cell {i} of {path.name} is empty"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


def _errors_and_warnings(nb: Any) -> list[str]:
    """stderr output and error outputs of an executed notebook (warnings print to stderr)."""
    found = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                found.append(f"cell {i}: {output.ename}: {output.evalue}")
            elif output.output_type == "stream" and output.name == "stderr":
                found.append(f"cell {i} stderr: {output.text[:500]}")
    return found


def _images(nb: Any) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in nb.cells
        for output in cell.get("outputs", [])
    )


@pytest.mark.notebook
@pytest.mark.timeout(BUDGET_S + 60)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notebook executes without errors or warnings, draws its plots, and cleans up."""
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # Temporary directories the notebook creates land here, so leftovers can be seen.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    assert _errors_and_warnings(nb) == []
    assert _images(nb) >= MIN_PLOTS.get(path.stem, 2), "a plot is missing"
    assert seconds < BUDGET_S, f"{path.name} took {seconds:.0f} s"
    # torch keeps its compiler cache (`torchinductor_<user>`) in the temporary directory on
    # purpose, for every later process; anything else there would be the notebook's.
    left = [p.name for p in tmp_path.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == [], "the notebook left files behind"
