"""The grading worker: runs a notebook's graded code and the tests, and reports over the grader's pipe.

Started by `tunix_lite.course.grading.grade` (never by hand): it reads its orders from stdin (the per-run
nonce, the seed, the code to run, which exercises), closes stdin, and only then runs learner code. Every
message carries the nonce; the results pipe, the nonce and the functions that write to it are bound before
learner code runs, so patching `json`, `print` or this module later changes nothing. A guard compares the
grader's modules and the libraries the tests lean on (numpy.testing, jax.numpy, ...) with a snapshot taken
before learner code ran: a change marks every later test "not allowed". The worker leaves with os._exit,
so atexit hooks the learner registered never run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types


def run_test(test, impl, rng) -> tuple[str, str]:
    """(outcome, message); outcome is passed | failed | error | not_implemented."""
    import jax

    from tunix_lite.course.notebook import _short

    try:
        with jax.default_matmul_precision("float32"):  # TPU defaults to bf16 passes; grade at float32
            test(impl, rng)
    except NotImplementedError as e:
        return "not_implemented", str(e)
    except AssertionError as e:
        return "failed", _short(str(e) or "assertion failed")
    except BaseException as e:  # noqa: BLE001 - any crash in learner code (sys.exit included) fails the test
        return "error", _short(f"{type(e).__name__}: {e}")
    return "passed", ""


class Guard:
    """Identity snapshot of the functions the tests and the worker call. Learner code that swaps one
    (`np.testing.assert_allclose = ...`, a test's `__code__`) shows up in `changed()`."""

    MODULES = ("builtins", "numpy", "numpy.testing", "jax", "jax.numpy", "jax.nn", "jax.random", "jax.lax",
               "jax.tree", "flax.nnx", "optax", "tunix_lite.course.graded", "tunix_lite.course.notebook")

    def __init__(self, *extra: types.ModuleType):
        for name in self.MODULES:  # numpy.testing and friends load lazily: import them before the snapshot
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        self.modules = [sys.modules[m] for m in self.MODULES if m in sys.modules] + list(extra)
        self.snapshot = self._take()

    def _take(self) -> dict:
        out = {}
        for module in self.modules:
            for name, value in list(vars(module).items()):
                if callable(value) or isinstance(value, types.ModuleType):
                    out[(module.__name__, name)] = (id(value), id(getattr(value, "__code__", None)),
                                                    id(getattr(value, "__wrapped__", None)))
        return out

    def changed(self) -> str | None:
        now = self._take()
        for key, ids in self.snapshot.items():
            if now.get(key) != ids:
                return f"{key[0]}.{key[1]}"
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description="the grading worker (started by tunix-lite grade)")
    parser.add_argument("--results-fd", type=int, required=True)
    fd = parser.parse_args().results_fd
    orders = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # nothing more comes from the grader: learner code reads an empty stdin

    channel = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
    write, flush, dumps, nonce = channel.write, channel.flush, json.dumps, orders["nonce"]

    def send(**message) -> None:
        write(dumps({"nonce": nonce, **message}) + "\n")
        flush()

    del orders["nonce"]
    import jax  # noqa: F401 - before the guard's snapshot, so jax's modules are in it

    from tunix_lite.course import graded
    from tunix_lite.course.notebook import GradedCode, build_impl

    module = (graded.load_source(orders["tests_source"], f"phase{orders['phase']}", orders["tests_name"])
              if orders.get("tests_source") else graded.module_for(orders["phase"]))
    exercises = [ex for ex in graded.exercises(orders["phase"], module) if ex.name in orders["exercises"]]
    test_rng, run = graded.test_rng, run_test
    guard = Guard(module, sys.modules[__name__])

    code = GradedCode(tuple(orders["imports"]), tuple((src, tuple(names)) for src, names in orders["cells"]))
    impl, errors = build_impl(code, where=orders["where"], skip_cells=orders["skip_cells"],
                              before_cell=lambda index: send(kind="cell", index=index))
    tampered = guard.changed()
    send(kind="loaded", errors=errors)
    for ex in exercises:
        send(kind="start", exercise=ex.name)
        for test in ex.tests:
            if tampered:
                outcome, message = "not_allowed", f"the graded code changed {tampered}, which the grader relies on"
            elif ex.name in errors:
                outcome, message = "error", errors[ex.name]
            elif not callable(getattr(impl, ex.name, None)):
                outcome, message = "error", f"the notebook defines no function {ex.name!r}"
            else:
                outcome, message = run(test, impl, test_rng(orders["seed"], test))
                tampered = tampered or guard.changed()
                if tampered:
                    outcome, message = "not_allowed", f"the graded code changed {tampered} while it ran"
            send(kind="result", exercise=ex.name, test=test.__name__, outcome=outcome, message=message)
    send(kind="done")
    os._exit(0)  # skip atexit hooks and finalizers: nothing the learner registered runs after the tests


if __name__ == "__main__":
    main()
