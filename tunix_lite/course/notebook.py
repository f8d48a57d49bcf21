"""Read course notebooks and turn a learner's notebook into an importable implementation.

Only two kinds of code run when a notebook is graded: cells tagged `graded` (the exercise functions)
and the top-level import statements of every other code cell. Plots, demos, slow model loads and
`check()` calls are skipped, so grading takes seconds and a broken demo cell costs no points.
"""

from __future__ import annotations

import ast
import json
import re
import types
from pathlib import Path

GRADED_TAG = "graded"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def is_graded(cell: dict) -> bool:
    return cell["cell_type"] == "code" and GRADED_TAG in cell.get("metadata", {}).get("tags", [])


def phase_of(path: str | Path) -> str:
    """'01' for '.../01_jax_nnx_exercises.ipynb'."""
    m = re.match(r"(\d+)_", Path(path).name)
    if not m:
        raise ValueError(f"{path}: course notebooks are named NN_*.ipynb")
    return m.group(1)


def _without_magics(src: str) -> str:
    """Blank out IPython-only lines (%magic, !shell) so the cell parses as Python."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())


def _imports(src: str) -> list[str]:
    try:
        tree = ast.parse(_without_magics(src))
    except SyntaxError:
        return []  # a broken demo cell: its imports are not needed to grade
    return [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]


def graded_code(nb: dict) -> str:
    """The code a grader runs: every top-level import, then the graded cells in order."""
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    imports = [line for c in cells if not is_graded(c) for line in _imports(source(c))]
    graded = [_without_magics(source(c)) for c in cells if is_graded(c)]
    return "\n".join(dict.fromkeys(imports)) + "\n\n" + "\n\n".join(graded) + "\n"


def load_impl(path: str | Path) -> types.ModuleType:
    """Execute a notebook's graded code in a fresh module and return it (the `impl` the tests call)."""
    path = Path(path)
    module = types.ModuleType(f"notebook_{path.stem}")
    module.__file__ = str(path)
    code = compile(graded_code(read(path)), str(path), "exec")
    exec(code, module.__dict__)  # noqa: S102 - running the learner's own notebook is the point
    return module
