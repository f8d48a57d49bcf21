"""What the make_notebook_NN.py scripts share: cells written as Python strings, then one notebook file.

    from notebook_source import code, md, write
    md("# Phase N · ...")
    code("import tunix_lite")
    write("NN_name.ipynb")   # notebooks/NN_name.ipynb, without outputs (run it to fill them)
"""

import json
from pathlib import Path

CELLS = []


def md(text):
    CELLS.append({"cell_type": "markdown", "metadata": {}, "source": text.strip("\n")})


def code(text):
    CELLS.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                  "source": text.strip("\n")})


def write(name: str) -> None:
    for i, cell in enumerate(CELLS):
        cell["id"] = f"cell-{i:02d}"
    notebook = {"cells": CELLS, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                            "name": "python3"},
                                             "language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path = Path(__file__).resolve().parents[1] / "notebooks" / name
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")
