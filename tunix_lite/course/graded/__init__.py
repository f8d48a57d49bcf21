"""Graded tests for the course exercises, one module per phase (`phase01.py`, `phase02.py`, ...).

A test is a function `test_*(impl)` that reaches the learner's code only through `impl`, a namespace
holding the exercise functions (CS336's adapter pattern). The same functions run three ways:
`check(fn)` in a notebook, `tunix-lite grade NOTEBOOK`, and pytest (`tests/graded/`, `--impl=...`).
They live in the package, not in tests/, so `check()` works on Colab after a pip install.

Each phase module declares `HINTS = {exercise: hint}` (the exercises, in notebook order) and tags each
test with `@graded(exercise)`. Tests are seeded invariants and numpy references in float32, so a
hard-coded answer fails.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable

_TESTS: dict[str, dict[str, list[Callable]]] = {}  # phase -> exercise -> tests, filled at import


@dataclasses.dataclass(frozen=True)
class Exercise:
    name: str
    phase: str
    hint: str
    tests: tuple[Callable, ...]


def graded(exercise: str) -> Callable[[Callable], Callable]:
    """Register the decorated test under `exercise` of the phase module it is defined in."""

    def register(fn: Callable) -> Callable:
        phase = fn.__module__.rsplit(".", 1)[-1].removeprefix("phase")
        _TESTS.setdefault(phase, {}).setdefault(exercise, []).append(fn)
        fn.exercise = exercise
        return fn

    return register


def phases() -> list[str]:
    return sorted(m.name.removeprefix("phase") for m in pkgutil.iter_modules(__path__) if m.name.startswith("phase"))


def exercises(phase: str) -> list[Exercise]:
    """The exercises of one phase, in notebook order."""
    module = importlib.import_module(f"{__name__}.phase{phase}")
    tests = _TESTS.get(phase, {})
    missing = set(module.HINTS) ^ set(tests)
    if missing:
        raise RuntimeError(f"phase {phase}: exercises without tests or hints: {sorted(missing)}")
    return [Exercise(name, phase, hint, tuple(tests[name])) for name, hint in module.HINTS.items()]


def find(name: str) -> Exercise:
    for phase in phases():
        for ex in exercises(phase):
            if ex.name == name:
                return ex
    known = [ex.name for p in phases() for ex in exercises(p)]
    raise KeyError(f"no graded exercise named {name!r}; known: {', '.join(known)}")


def describe(test: Callable) -> str:
    """A test's one-line description: the first line of its docstring."""
    return (test.__doc__ or test.__name__).strip().splitlines()[0]
