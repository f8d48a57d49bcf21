"""pytest settings for the whole run (tests/, notebooks/ and solutions/ under nbval).

The tests compile hundreds of tiny programs and run each for a step or two, so XLA:CPU's compile time is most of
their time: LLVM at -O0 compiles about a third faster (tests/test_rollouts.py + tests/test_distill.py: 158 -> 100
CPU s). Notebooks train for dozens of steps, where optimised code wins (01, 02, 03, 05: 357 -> 397 CPU s at -O0),
so their kernels start with the flags as they were. Subprocesses that tests start inherit -O0, so a test that
compares a subprocess's result bit for bit with its own compares like with like.
"""

import os

import pytest

FAST_COMPILE = "--xla_backend_optimization_level=0"
# the flags as given, less -O0 (xdist workers inherit it from the controller, which imported this file first)
AS_GIVEN = " ".join(flag for flag in os.environ.get("XLA_FLAGS", "").split() if flag != FAST_COMPILE)
WITH_FAST_COMPILE = f"{AS_GIVEN} {FAST_COMPILE}".strip()
os.environ["XLA_FLAGS"] = WITH_FAST_COMPILE  # before any test initialises jax's CPU backend


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """A notebook's kernel starts in its first cell's setup: give it the flags as they were."""
    if item.path.suffix != ".ipynb":
        yield
        return
    os.environ["XLA_FLAGS"] = AS_GIVEN
    try:
        yield
    finally:
        os.environ["XLA_FLAGS"] = WITH_FAST_COMPILE
