"""Every notebook executes top to bottom on a real Jupyter kernel and shows a picture."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_tour.ipynb", "02_performance.ipynb", "03_cuda.ipynb", "04_dask.ipynb",
            "05_fusion.ipynb", "06_frameworks.ipynb", "07_training.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_shows_a_picture(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} shows no picture"
    text = "".join(o.get("text", "") for o in outputs)
    if path.stem == "03_cuda":
        assert "ran on:" in text
