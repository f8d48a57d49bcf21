"""The `impl` fixture: the notebook implementation selected by --impl, loaded once per notebook.

Each test module sets PHASE = "NN"; the fixture loads the NN_*.ipynb of the chosen folder (or the one
notebook given), running only its graded cells and imports (tunix_lite.course.notebook.load_impl).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tunix_lite.course.notebook import load_impl, phase_of

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _load(path: str):
    return load_impl(path)


def notebook_for(choice: str, phase: str) -> Path | None:
    p = Path(choice)
    if p.suffix == ".ipynb":
        return p if phase_of(p) == phase else None
    folder = p if p.is_absolute() or p.is_dir() else ROOT / p
    matches = sorted(folder.glob(f"{phase}_*.ipynb"))
    return matches[0] if matches else None


@pytest.fixture(scope="module")
def impl(request):
    phase = request.module.PHASE
    path = notebook_for(request.config.getoption("--impl"), phase)
    if path is None:
        pytest.skip(f"--impl={request.config.getoption('--impl')} has no phase {phase} notebook")
    return _load(str(path))
