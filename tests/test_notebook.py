"""docs/tutorial.ipynb runs top to bottom in a fresh kernel (its asserts are its claims)."""

from __future__ import annotations

import pathlib
import tempfile
import time

import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"


def test_tutorial_notebook_executes():
    nbformat = pytest.importorskip("nbformat", reason="needs the test extra: pip install '.[test]'")
    nbclient = pytest.importorskip("nbclient", reason="needs the test extra: pip install '.[test]'")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
    client = nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",  # ipykernel's own kernel, installed with the test extra
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    started = time.time()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure
    left = [  # the chain cell's logs and GIF live in a directory that goes when it is done
        path
        for path in pathlib.Path(tempfile.gettempdir()).glob("*/chain_plain.jsonl")
        if path.stat().st_mtime >= started
    ]
    assert not left, f"the notebook left {left} behind"
    printed = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert "BudgetError" in printed and "lru: ok, slowdown" in printed
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if "data" in o]
    assert any("image/png" in o["data"] for o in images)
    # the chain animation, drawn from the runs' event logs, and a try-it cell per course step
    assert any("image/gif" in o["data"] for o in images)
    assert "frames, one per event of the longest log" in printed
    assert all(f"step {n}: " in printed for n in range(8))
    assert "not written yet" in printed and "3 of 3 checks pass" in printed
