"""Read course notebooks and turn a learner's notebook into an importable implementation.

The rule, the same for `check()` and `tunix-lite grade`: what runs is the top-level imports of every code
cell, then every cell that defines an exercise function (`def masked_mean(...)` at the start of a line),
in notebook order, each on its own. Plots, demos, slow model loads and `check()` calls do not run, so a
broken demo cell (a failed import included) costs no points, and a cell that fails costs only the exercises
it defines. A helper that lives in another cell is not there: define it in the cell that uses it.

The `graded` tag marks those cells in solutions/ (the build strips solutions only there); the grader finds
them by what they define, so a copied or re-tagged notebook grades the same.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import types
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

GRADED_TAG = "graded"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_TOP_LEVEL_DEF = re.compile(r"^(?:async\s+)?def\s+(\w+)\s*\(", re.MULTILINE)  # also finds defs in broken cells


def read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def is_graded(cell: dict) -> bool:
    return cell["cell_type"] == "code" and GRADED_TAG in cell.get("metadata", {}).get("tags", [])


def code_sources(nb: dict) -> list[str]:
    """The source of every code cell; ValueError naming the cell for anything not a notebook's."""
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise ValueError("not a Jupyter notebook (no list of cells): save it from Jupyter as "
                         ".ipynb")
    sources = []
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise ValueError(f"cell {number} is not a notebook cell (no cell_type): save the "
                             "notebook from Jupyter again")
        if cell["cell_type"] != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(line, str) for line in src):
            src = "".join(src)
        if not isinstance(src, str) or "\0" in src:
            raise ValueError(f"cell {number}'s source is not text (a string or a list of lines "
                             "without NUL bytes): save the notebook from Jupyter again")
        sources.append(src)
    return sources


def phase_of(path: str | Path) -> str:
    """'01' for '.../01_jax_nnx_exercises.ipynb'."""
    m = re.match(r"(\d+)_", Path(path).name)
    if not m:
        raise ValueError(f"{path}: course notebooks are named NN_*.ipynb")
    return m.group(1)


def without_magics(src: str) -> str:
    """Blank out IPython-only lines (%magic, !shell) so the cell parses as Python (line numbers kept)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())


def parse(src: str) -> ast.Module | None:
    try:
        return ast.parse(without_magics(src))
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # nested too deep included
        return None


def defines(src: str, names: Iterable[str]) -> tuple[str, ...]:
    """The exercise functions a cell defines at top level (found textually, so a broken cell counts too)."""
    wanted = set(names)
    return tuple(dict.fromkeys(n for n in _TOP_LEVEL_DEF.findall(src) if n in wanted))


def top_level_imports(src: str) -> list[str]:
    tree = parse(src)
    return [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))] if tree else []


@dataclasses.dataclass(frozen=True)
class GradedCode:
    """What a grader runs: import statements (each alone; a failing one is skipped), then the graded cells."""

    imports: tuple[str, ...]
    cells: tuple[tuple[str, tuple[str, ...]], ...]  # (source, exercise functions it defines)

    @property
    def sources(self) -> list[str]:
        return [src for src, _ in self.cells]


def graded_code(sources: Sequence[str], names: Iterable[str]) -> GradedCode:
    """Split a notebook's code cells by the rule above; `names` are the phase's exercise functions."""
    names = tuple(names)
    cells, imports = [], []
    for src in sources:
        found = defines(src, names)
        if found:
            cells.append((without_magics(src), found))
        else:
            imports += top_level_imports(src)
    return GradedCode(tuple(dict.fromkeys(imports)), tuple(cells))


def build_impl(code: GradedCode, *, where: str = "notebook", skip_cells: Iterable[int] = (),
               before_cell: Callable[[int], None] | None = None) -> tuple[types.ModuleType, dict[str, str]]:
    """Run `code` in a fresh module: (module, {exercise: why its cell failed}). Nothing here is caught
    silently: a failed import shows up as the NameError of the function that needed it."""
    module = types.ModuleType(f"notebook_{Path(where).stem}")
    module.__file__ = where
    for statement in code.imports:
        try:
            exec(compile(statement, f"{where} (imports)", "exec"), module.__dict__)  # noqa: S102
        except Exception:  # noqa: BLE001 - a demo's missing package must not cost the graded cells anything
            pass
    errors, skip_cells = {}, set(skip_cells)
    for index, (src, names) in enumerate(code.cells):
        if index in skip_cells:
            continue
        if before_cell:
            before_cell(index)
        try:
            exec(compile(src, f"{where}, the cell defining {', '.join(names)}", "exec"), module.__dict__)  # noqa: S102
        except BaseException as e:  # noqa: BLE001 - sys.exit() in a cell is its own failure, not the grader's
            for name in names:
                errors[name] = shorten(f"the cell defining {name} failed: {type(e).__name__}: {e}")
    return module, errors


def load_impl(path: str | Path, names: Iterable[str] | None = None) -> types.ModuleType:
    """A notebook's implementation, built by the rule above (pytest's `impl`); a failing cell raises."""
    from tunix_lite.course import graded

    path = Path(path)
    names = names or [ex.name for ex in graded.exercises(phase_of(path))]
    module, errors = build_impl(graded_code(code_sources(read(path)), names), where=str(path))
    if errors:
        raise RuntimeError(f"{path}: " + "; ".join(errors.values()))
    return module


def shorten(message: str, limit: int = 300) -> str:
    """`message` on one line (its lines joined by " | "), cut to `limit` characters."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    text = " | ".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."
