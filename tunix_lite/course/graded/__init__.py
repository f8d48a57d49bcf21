"""Graded tests for the course exercises, one module per phase (`phase01.py`, `phase02.py`, ...).

A test is a function `test_*(impl, rng)`: it reaches the learner's code only through `impl`, a namespace
holding the exercise functions (CS336's adapter pattern), and draws every input from `rng`, a numpy
Generator seeded per grading run, so a table of answers for yesterday's inputs does not pass today. The same
functions run three ways: `check(fn)` in a notebook, `tunix-lite grade NOTEBOOK`, and pytest (`tests/graded/`).
They live in the package, not in tests/, so `check()` works on Colab after a pip install.

A phase module declares (course/AUTHORING.md says why):

    HINTS = {exercise: [concept, more specific, code-shaped], ...}   # in notebook order; a str is one tier
    FORBIDDEN = {exercise: ("tunix_lite.sampler.top_p_filter", ...)}  # optional: what graded cells may not use

and tags each test with `@graded(exercise)`, or `@graded(exercise, reference=True)` for the tests that compare
with a reference: the exercise's other tests (invariants) count only once every reference test passes.
Hidden tests for instructors (`tunix-lite grade --tests DIR`) are modules of the same shape in DIR.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import pkgutil
import sys
import types
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Graded cells may use none of these for any exercise: the grader and its tests, and ways to reach a
# library function without naming it (course/AUTHORING.md, "the no-library rule").
ALWAYS_FORBIDDEN = ("tunix_lite.course", "importlib", "__import__", "eval", "exec", "compile", "sys.modules",
                    "globals", "builtins")


@dataclasses.dataclass(frozen=True)
class Exercise:
    name: str
    phase: str
    hints: tuple[str, ...]  # tiers: concept first, code-shaped last
    forbidden: tuple[str, ...]  # dotted names a graded cell may not use for this exercise
    tests: tuple[Callable, ...]


def graded(exercise: str, *, reference: bool = False) -> Callable[[Callable], Callable]:
    """Mark `fn(impl, rng)` as a test of `exercise`; `reference=True` gates the exercise's other tests."""

    def register(fn: Callable) -> Callable:
        fn.exercise, fn.reference = exercise, reference
        return fn

    return register


def include(module: types.ModuleType, namespace: dict) -> None:
    """Count `module`'s tests in another test module too: a hidden module that keeps the public
    tests and adds its own calls `include(phaseNN, globals())` first. Each test is registered again
    under the namespace's module, with its name, docstring and tags (so its inputs per seed are the
    same: `test_rng` mixes in the exercise and the name)."""
    for name, fn in list(vars(module).items()):
        if callable(fn) and hasattr(fn, "exercise") and fn.__module__ == module.__name__:
            def again(impl, rng, _test=fn):
                return _test(impl, rng)

            functools.update_wrapper(again, fn)
            again.__module__ = namespace["__name__"]
            namespace[name] = again


def phases() -> list[str]:
    return sorted(m.name.removeprefix("phase") for m in pkgutil.iter_modules(__path__) if m.name.startswith("phase"))


def module_for(phase: str, tests_dir: str | Path | None = None) -> types.ModuleType:
    """The test module of a phase: ours, or `DIR/phaseNN.py` (hidden tests) when tests_dir is given."""
    if tests_dir is None:
        return importlib.import_module(f"{__name__}.phase{phase}")
    path = Path(tests_dir) / f"phase{phase}.py"
    if not path.is_file():
        raise FileNotFoundError(f"--tests {tests_dir}: no phase{phase}.py there (hidden tests are DIR/phaseNN.py)")
    return load_source(path.read_text(encoding="utf-8"), f"phase{phase}", str(path))


def load_source(text: str, name: str, filename: str) -> types.ModuleType:
    """Import a test module from its source text (hidden tests: they run in the grader, never in the worker)."""
    module = types.ModuleType(f"tunix_lite_hidden_tests.{name}")
    module.__file__ = filename
    sys.modules[module.__name__] = module  # dataclasses and pickling look modules up by name
    exec(compile(text, filename, "exec"), module.__dict__)  # noqa: S102 - the instructor's own test file
    return module


def exercises(phase: str, module: types.ModuleType | None = None) -> list[Exercise]:
    """The exercises of one phase, in notebook order, with their tests in definition order."""
    module = module or module_for(phase)
    tests: dict[str, list[Callable]] = {}
    for value in vars(module).values():
        if callable(value) and hasattr(value, "exercise") and value.__module__ == module.__name__:
            tests.setdefault(value.exercise, []).append(value)
    hints, forbidden = module.HINTS, getattr(module, "FORBIDDEN", {})
    unmatched = (set(hints) ^ set(tests)) | (set(forbidden) - set(hints))
    if unmatched:
        raise RuntimeError(f"{module.__name__}: exercises without tests, hints or both: {sorted(unmatched)}")
    return [Exercise(name, phase, (tiers,) if isinstance(tiers, str) else tuple(tiers),
                     tuple(forbidden.get(name, ())), tuple(tests[name])) for name, tiers in hints.items()]


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


def test_rng(seed: int, test: Callable) -> np.random.Generator:
    """The inputs of one test in one grading run: the run's seed mixed with the test's name, so a test draws
    the same inputs whatever ran before it, and other inputs in the next run."""
    return np.random.default_rng([seed, zlib.crc32(f"{test.exercise}.{test.__name__}".encode())])
