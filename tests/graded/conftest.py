"""Fixtures of the graded tests: `impl`, the notebook selected by --impl, and `rng`, their inputs.

Each test module sets PHASE = "NN"; `impl` loads the NN_*.ipynb of the chosen folder (or the one notebook
given) by the grader's rule (tunix_lite.course.notebook). `rng` draws from --grade-seed, a fresh random seed
by default (printed in the header), as `tunix-lite grade` does: a solution must pass for any inputs.
"""

from __future__ import annotations

import functools
import secrets
from pathlib import Path

import pytest

from tunix_lite.course import graded
from tunix_lite.course.notebook import load_impl, phase_of

ROOT = Path(__file__).resolve().parents[2]
SEED = secrets.randbits(63)


def _seed(config) -> int:
    chosen = config.getoption("--grade-seed")
    return SEED if chosen is None else chosen


def pytest_report_header(config):
    return f"graded tests: --grade-seed={_seed(config)}"


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


@pytest.fixture
def rng(request):
    return graded.test_rng(_seed(request.config), request.function)
