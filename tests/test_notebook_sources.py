"""Each lesson notebook is a pair: notebooks/NN_name.py, the source (jupytext's percent format), and
NN_name.ipynb, what learners open, with its committed outputs. The .ipynb's cells are exactly what the
.py makes, so the two never drift (course/AUTHORING.md: edit the .py, then `jupytext --sync`)."""

from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SYNC = "edit the .py, then run `jupytext --sync notebooks/{name}.py`"


def cells(path: Path) -> list[tuple[str, str, list[str]]]:
    """(cell type, source, tags) of every cell, as jupytext reads the file."""
    notebook = jupytext.read(path)
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in notebook.cells]


def test_every_notebook_has_its_py_pair():
    ipynb = {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    py = {p.stem for p in NOTEBOOKS.glob("*.py")}
    assert ipynb, "no notebooks found"
    assert ipynb == py, f"unpaired: {sorted(ipynb ^ py)} (`jupytext --sync notebooks/NAME.ipynb` pairs one)"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_the_ipynb_cells_are_what_its_py_makes(path):
    committed, source = cells(path), cells(path.with_suffix(".py"))
    assert len(committed) == len(source), (
        f"{path.name} has {len(committed)} cells, its .py {len(source)}: {SYNC.format(name=path.stem)}")
    for index, (stored, wanted) in enumerate(zip(committed, source)):
        assert stored == wanted, f"{path.name} cell {index} differs from its .py: {SYNC.format(name=path.stem)}"
