"""notebooks/minbert.ipynb runs top to bottom (nbclient, the venv's own kernel): on the tiny random BERT, a few rows
of each data file and the CPU, with everything it writes under tmp_path. Any failing cell fails the test."""

from __future__ import annotations

import json
import sys

import nbformat  # test dependencies (requirements-test.txt, installed by make test): never skipped
from conftest import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "notebooks" / "minbert.ipynb"


def cell(nb: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.get("id") == cell_id)


def text(c: nbformat.NotebookNode) -> str:
    """A code cell's printed output and error, as one string."""
    parts = [o.get("text", "") for o in c.outputs if o.output_type == "stream"]
    parts += [f"{o.ename}: {o.evalue}" for o in c.outputs if o.output_type == "error"]
    return "".join(parts)


def test_notebook_is_committed_without_outputs():
    """Outputs would make every diff unreadable and carry one machine's paths; Colab and the test start clean."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


def test_notebook_runs_top_to_bottom(tmp_path, tiny_dir, monkeypatch):
    out = tmp_path / "notebook"
    monkeypatch.setenv("MINBERT_NOTEBOOK_MODEL", str(tiny_dir))
    monkeypatch.setenv("MINBERT_NOTEBOOK_TRAIN", "24")
    monkeypatch.setenv("MINBERT_NOTEBOOK_ROWS", "32")
    monkeypatch.setenv("MINBERT_NOTEBOOK_DEVICE", "cpu")
    monkeypatch.setenv("MINBERT_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")           # the kernel and its commands: tiny tensors, a busy machine

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel is this interpreter (the venv's), whatever kernels the user has installed: a spec of our own, found
    # first through JUPYTER_PATH; the notebook's directory is its working directory, as Jupyter starts it
    spec = tmp_path / "jupyter" / "kernels" / "minbert-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "minbert (tests)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    client = NotebookClient(nb, kernel_name="minbert-test", timeout=120, startup_timeout=60,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()          # raises CellExecutionError, naming the cell, if any cell fails

    assert f"Python {sys.executable}\n" in text(cell(nb, "common-setup"))
    assert "part 1 (minBERT): 6/6 parts pass; 100/100 points" in text(cell(nb, "check"))
    assert "cosine" in text(cell(nb, "first-use"))
    runs = list(out.glob("run-*"))
    assert len(runs) == 1
    run = runs[0]
    for name in ("run.json", "checkpoint.pt", "checkpoint.curves.jsonl", "checkpoint.curves.png"):
        assert (run / name).is_file(), name
    assert len(list((run / "predictions").glob("*-output.csv"))) == 6
    assert (out / "submission.zip").is_file()
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cell(nb, "curves").outputs)
    assert (out / "attention.png").is_file()
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cell(nb, "attention").outputs)
