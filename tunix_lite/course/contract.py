"""The grading contract, checked seed by seed: every graded test passes on the reference solution
and fails on the stub, whatever inputs the grader draws.

A test draws its inputs from `graded.test_rng(seed, test)`, so a seed the grader never happened to
draw can still hold a case the test cannot handle (an empty batch, a near-tie) and cost a right
answer its points. This module runs the tests in this process, against the functions the
notebooks define (what tests/graded's `impl` loads: solutions/NN_*.ipynb and exercises/NN_*.ipynb)
over many seeds, without a grading worker: the same inputs, at a fraction of the cost. Each failure
names the command that reproduces it through the grader:

    python -m tunix_lite.course.contract 06                 # phase 6's tests, 200 seeds each
    python -m tunix_lite.course.contract --seeds 1000 --first 5000   # seeds 5000..5999, every phase
    python -m tunix_lite.course.contract 08 --tests course/instructor/hidden   # hidden tests

(tests/test_grading_contract.py runs it in CI.) It exits 1 when a test fails a solution or passes a
stub, printing one line per failing seed with the command that reproduces it, e.g.
`tunix-lite grade solutions/06_rl_exercises.ipynb --seed N`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tunix_lite.course import graded
from tunix_lite.course.notebook import load_impl

SEEDS = 200  # per test and direction, unless a test says fewer (tests/test_grading_contract.py)
# A seed the grader drew that left one of phase 6's tests an empty batch (the reference scored 2/3):
# every sweep keeps it.
REGRESSIONS = (3790878087422224534,)
# One run of one test; past it the draw counts as a failure (a generator that loops forever on some
# draws hangs the grader until the exercise's limit, costing a right answer its points).
RUN_SECONDS = 60.0


class RanTooLong(Exception):
    pass


@contextlib.contextmanager
def _limit(seconds: float):
    """Raise RanTooLong in this (the main) thread once `seconds` have passed."""
    def ring(signum, frame):
        raise RanTooLong(f"one run took more than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclasses.dataclass(frozen=True)
class Failure:
    """One seed on which the contract broke: a solution that did not pass, or a stub that did not
    fail with its NotImplementedError."""

    notebook: Path
    test: str
    seed: int
    outcome: str
    message: str
    tests_dir: str | None = None

    def command(self) -> str:
        hidden = f" --tests {self.tests_dir}" if self.tests_dir else ""
        return f"tunix-lite grade {self.notebook} --seed {self.seed}{hidden}"

    def __str__(self) -> str:
        return f"{self.test}: {self.outcome}: {self.message} (reproduce: {self.command()})"


@dataclasses.dataclass
class Sweep:
    """What a sweep of one phase found: failures, and the CPU seconds each test took."""

    failures: list[Failure] = dataclasses.field(default_factory=list)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    runs: int = 0


def notebooks(phase: str, root: Path) -> tuple[Path, Path]:
    """(solution, stub) notebooks of a phase."""
    name = next((root / "solutions").glob(f"{phase}_*.ipynb"), None)
    if name is None:
        raise FileNotFoundError(f"no solutions/{phase}_*.ipynb under {root}")
    return name, root / "exercises" / name.name


def sweep(phase: str, seeds: Callable[[Callable], Iterable[int]], *, root: Path,
          tests_dir: str | Path | None = None, directions=("solution", "stub")) -> Sweep:
    """Run every test of `phase` on `seeds(test)` against the solution (it must pass) and the
    stub (it must raise the exercise's own NotImplementedError, "Exercise NAME: ...", not a crash
    of the test)."""
    from tunix_lite.course.grading import run_test

    module = graded.module_for(phase, tests_dir)
    solution, stub = notebooks(phase, root)
    wanted = {"solution": ("passed", solution), "stub": ("not_implemented", stub)}
    result = Sweep()
    for direction in directions:
        outcome_wanted, path = wanted[direction]
        impl = load_impl(path, [ex.name for ex in graded.exercises(phase, module)])
        for exercise in graded.exercises(phase, module):
            stubbed = f"Exercise {exercise.name}:"  # the stub's message, which the learner sees
            for test in exercise.tests:
                start = time.process_time()
                for seed in seeds(test):
                    with _limit(RUN_SECONDS):
                        outcome, message = run_test(test, impl, graded.test_rng(seed, test))
                    result.runs += 1
                    if outcome != outcome_wanted or (direction == "stub"
                                                     and not message.startswith(stubbed)):
                        result.failures.append(Failure(path.relative_to(root), test.__name__,
                                                       seed, outcome, message,
                                                       tests_dir and str(tests_dir)))
                key = f"{test.__name__} ({direction})"
                result.seconds[key] = result.seconds.get(key, 0.0) + time.process_time() - start
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tunix_lite.course.contract",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("phases", nargs="*", help="phases to sweep (default: every phase)")
    parser.add_argument("--seeds", type=int, default=SEEDS,
                        help=f"seeds per test (default {SEEDS})")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--tests", help="a folder of hidden test modules (phaseNN.py)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="the repository (its solutions/ and exercises/)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: sweep at least one seed")
    seeds = [*REGRESSIONS, *range(args.first, args.first + args.seeds)]
    broken = 0
    for phase in args.phases or graded.phases():
        found = sweep(phase, lambda test: seeds, root=args.root, tests_dir=args.tests)
        slowest = max(found.seconds, key=found.seconds.get)
        print(f"phase {phase}: {found.runs} runs in {sum(found.seconds.values()):.1f} s of CPU "
              f"(slowest: {slowest}, {found.seconds[slowest]:.1f} s), "
              f"{len(found.failures)} failing", flush=True)
        for failure in found.failures:
            print(f"  {failure}", flush=True)
        broken += len(found.failures)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
