"""Grade course exercises: `check(fn)` inside a notebook, or `tunix-lite grade NOTEBOOK` from a shell.

Both run the same tests (tunix_lite.course.graded) on the same code: the imports of every cell and the
cells that define exercise functions (tunix_lite.course.notebook states the rule), with the same no-library
rule (tunix_lite.course.rules) and the same partial credit (an exercise's invariant tests count only once
its reference tests pass). Inputs are drawn per run from a fresh seed.

`grade` runs the notebook's graded cells in a confined worker process (tunix_lite.course.worker)
and the tests here, in the grader: they call the learner's functions through the worker and get
plain data back (tunix_lite.course.calls), so references, hidden tests and the score never enter the
learner's process. Each exercise has a time limit; everything the worker started is killed; then
it prints a table (messages cut to MESSAGE_CHARS) and writes JSON (atomically). `--tests DIR` runs
hidden tests (course/GRADING.md):

    tunix-lite grade exercises/01_jax_nnx_exercises.ipynb [--json out.json] [--timeout 30] [--seed N]
    tunix-lite grade submission.ipynb --phase 01 --tests hidden/ --json results/grade.json   # + results.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import linecache
import os
import secrets
import sys
import tempfile
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path

from tunix_lite.course.notebook import shorten

EXERCISE_SECONDS = 30.0  # per exercise (and per graded cell while loading); the solutions take 1-5 s each
STARTUP_SECONDS = 120.0  # python + jax + the test module, before the first graded cell
SYMBOL = {"passed": "✓", "failed": "✗", "error": "✗", "not_implemented": "·", "timeout": "⏱",
          "not_allowed": "⊘", "blocked": "○"}
MESSAGE_CHARS = 500  # per test: the first failing value, not a dump of the learner's output
SELF_ASSESSMENT = ("self-assessment: the tests and this score ran in the grader's process, your code "
                   "in a confined worker ({isolation}); on your own machine you can still change the "
                   "grader itself (the installed package, its tests, this report), so the score is "
                   "evidence for you, not proof for others (course/GRADING.md)")
VISIBILITY = ("visible", "hidden", "after_due_date", "after_published")  # Gradescope's, per test
BLOCKED = "counts once this exercise's reference test passes"


def run_test(test, impl, rng) -> tuple[str, str]:
    """(outcome, message); outcome is passed | failed | error | not_implemented."""
    import jax

    from tunix_lite.course.sandbox import WorkerLost

    try:
        with jax.default_matmul_precision("float32"):  # TPU defaults to bf16 passes: grade at f32
            test(impl, rng)
    except NotImplementedError as e:
        return "not_implemented", str(e)
    except AssertionError as e:
        return "failed", shorten(str(e) or "assertion failed", MESSAGE_CHARS)
    except WorkerLost:
        raise
    except TimeoutError as e:  # decoding an answer ran past the exercise's deadline (the grader's)
        return "timeout", shorten(str(e), MESSAGE_CHARS)
    except BaseException as e:  # noqa: BLE001 - any crash in learner code (sys.exit too) fails it
        return "error", shorten(f"{type(e).__name__}: {e}", MESSAGE_CHARS)
    return "passed", ""


def gate(results: list[tuple[Callable, str, str]]) -> list[tuple[Callable, str, str]]:
    """Partial credit that means something: while a reference test fails, passing invariants score nothing."""
    if all(outcome == "passed" for test, outcome, _ in results if test.reference):
        return results
    return [(t, "blocked", BLOCKED) if outcome == "passed" and not t.reference else (t, outcome, message)
            for t, outcome, message in results]


def hint_for(hints: tuple[str, ...], failures: int) -> str:
    """The tier a learner has earned after `failures` failing attempts (1: the concept)."""
    tier = min(max(failures, 1), len(hints))
    more = "" if tier == len(hints) else " (a more specific hint comes with the next failing attempt)"
    return f"hint {tier}/{len(hints)}: {hints[tier - 1]}{more}"


# ----------------------------------------------------------------------------- in the notebook

_FAILURES: dict[str, int] = {}  # exercise -> failing check() calls in this notebook session
_PASSED: dict[str, object] = {}  # exercise -> the code that last passed all its checks (check_all skips it)
RULE = ("check() runs your function as `tunix-lite grade` does: with your notebook's imports and the cells "
        "that define exercise functions only. A helper from another cell is not there: move it into the cell "
        "of the function that uses it.")


def check(fn_or_name: Callable | str) -> None:
    """Run the graded tests of one exercise on your function and print what passed, with a hint.

        check(masked_mean)      # or check("masked_mean")
    """
    caller = inspect.currentframe().f_back
    if isinstance(fn_or_name, str):
        name, fn = fn_or_name, caller.f_locals.get(fn_or_name, caller.f_globals.get(fn_or_name))
    else:
        name, fn = fn_or_name.__name__, fn_or_name
    _check(name, fn, caller.f_globals)


def check_all(phase: str) -> None:
    """check() every exercise of a phase, looking the functions up in the calling notebook."""
    from tunix_lite.course import graded

    names = inspect.currentframe().f_back.f_globals
    scores = [_check(ex.name, names.get(ex.name), names, reuse=True) for ex in graded.exercises(phase)]
    print(f"phase {phase}: {sum(p for p, _ in scores)}/{sum(t for _, t in scores)} checks passed")


def _ipython_cells(fn: Callable, names: list[str], namespace: dict) -> tuple[list[str], list[str]] | None:
    """(every executed cell's source, the exercise cells as they are bound now) when fn comes from an
    IPython cell; None elsewhere (a script or a test), where check() tests the function object as it is."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    cells = getattr(getattr(shell, "compile", None), "_filename_map", None)
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if not cells or code is None or code.co_filename not in cells:
        return None
    defining = {}  # cell file -> (execution count, source), for the exercise functions bound now
    for name in names:
        obj = namespace.get(name)
        obj_code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
        if obj_code is not None and obj_code.co_filename in cells:
            cell = obj_code.co_filename
            defining[cell] = (cells[cell], "".join(linecache.getlines(cell)))
    # every cell this kernel has compiled, oldest first (IPython keeps their sources in linecache)
    history = ["".join(linecache.getlines(name)) for name, _ in sorted(cells.items(), key=lambda kv: kv[1])]
    return history, [src for _, src in sorted(defining.values())]


def _as_graded(exercise, fn: Callable, namespace: dict) -> tuple[object, str | None, list[str], list[str], object]:
    """(impl, why the cell failed or None, graded cells as (source, names), other cells' sources, a key of the
    code that ran), built as `grade` would build them."""
    from tunix_lite.course import graded
    from tunix_lite.course.notebook import build_impl, defines, graded_code

    names = [ex.name for ex in graded.exercises(exercise.phase)]
    cells = _ipython_cells(fn, names, namespace)
    if cells is None:
        try:
            source = textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
        except (OSError, TypeError):
            source = ""
        return types.SimpleNamespace(**{exercise.name: fn}), None, [(source, (exercise.name,))], [], id(fn)
    history, defining = cells
    others = [src for src in history if not defines(src, names)]
    code = graded_code(others + defining, names)
    impl, errors = build_impl(code, where="this notebook")
    return impl, errors.get(exercise.name), code.cells, others, code.cells  # more imports cannot break it


def _check(name: str, fn: Callable | None, namespace: dict, reuse: bool = False) -> tuple[int, int]:
    """Check one exercise; with `reuse`, code that already passed every check in this session is not rerun."""
    from tunix_lite.course import graded, rules
    exercise = graded.find(name)
    total = len(exercise.tests)
    if fn is None:
        print(f"✗ {name}: not defined yet; run the cell that defines it first")
        return 0, total
    impl, cell_error, graded_cells, other_sources, code_key = _as_graded(exercise, fn, namespace)
    broken = rules.violations(graded_cells, other_sources,
                              {name: exercise.forbidden + graded.ALWAYS_FORBIDDEN}).get(name)
    if broken:
        print(f"⊘ {name}: not allowed, 0/{total}: graded cells may not use {', '.join(broken)} "
              "(write it yourself: that is the exercise)")
        return 0, total
    if reuse and _PASSED.get(name) == code_key:
        print(f"✓ {name}: {total}/{total} checks passed")
        return total, total
    seed = secrets.randbits(63)  # new inputs on every check
    if cell_error:
        results = [(t, "error", cell_error) for t in exercise.tests]
    else:
        results = gate([(t, *run_test(t, impl, graded.test_rng(seed, t))) for t in exercise.tests])
    passed = sum(outcome == "passed" for _, outcome, _ in results)
    if all(outcome == "not_implemented" for _, outcome, _ in results):
        print(f"· {name}: not implemented yet; replace the `raise NotImplementedError` in its cell")
        return 0, total
    print(f"{'✓' if passed == total else '✗'} {name}: {passed}/{total} checks passed")
    if passed == total:
        _PASSED[name] = code_key
    for test, outcome, message in results:
        if outcome != "passed":
            print(f"  {SYMBOL[outcome]} {graded.describe(test)}: {message}")
    if passed < total:
        _FAILURES[name] = _FAILURES.get(name, 0) + 1
        print(f"  {hint_for(exercise.hints, _FAILURES[name])}")
        if any("NameError" in message for _, _, message in results):
            print(f"  note: {RULE}")
    return passed, total


# ----------------------------------------------------------------------------- the grader (parent side)


def grade(path: str | Path, *, timeout: float = EXERCISE_SECONDS, phase: str | None = None,
          tests_dir: str | Path | None = None, seed: int | None = None,
          previous: dict | None = None, startup_timeout: float = STARTUP_SECONDS) -> dict:
    """Grade one notebook: its graded cells run in a confined worker (tunix_lite.course.worker), the
    tests here, calling the learner's functions through it (tunix_lite.course.calls); returns the
    report `main` prints and saves.

    `previous` (the last report for this notebook) counts failing attempts, which unlock hint
    tiers."""
    from tunix_lite.rewards import sandbox
    from tunix_lite.course import calls, graded, rules
    from tunix_lite.course.notebook import defines, graded_code, phase_of
    from tunix_lite.course.sandbox import Worker, WorkerLost, reaping

    sandbox.harden_current_process()  # the worker cannot read our environment or memory
    path = Path(path)
    phase = phase or phase_of(path)
    module = graded.module_for(phase, tests_dir)
    exercises = graded.exercises(phase, module)
    by_name = {ex.name: ex for ex in exercises}
    sources = read_sources(path)
    code = graded_code(sources, by_name)
    seed = secrets.randbits(63) if seed is None else seed
    results: dict[tuple[str, str], tuple[str, str]] = {}

    def fill(names, outcome, message):
        for name in names:
            for test in by_name[name].tests:
                results.setdefault((name, test.__name__), (outcome, shorten(message, MESSAGE_CHARS)))

    others = [src for src in sources if not defines(src, by_name)]
    forbidden = {ex.name: ex.forbidden + graded.ALWAYS_FORBIDDEN for ex in exercises}
    for name, used in rules.violations(code.cells, others, forbidden).items():
        fill([name], "not_allowed",
             f"graded cells may not use {', '.join(used)} (write it yourself)")
    banned = _with_new_homes({name for ex in exercises for name in ex.forbidden} | {"tunix_lite.course"})
    public = f"{graded.__name__}.phase{phase}"  # where the tests' `inside` helpers come from
    orders = {"parent": os.getpid(), "where": path.name, "imports": list(code.imports),
              "cells": [[src, list(names)] for src, names in code.cells], "skip_cells": [],
              "graded": public if importlib.util.find_spec(public) else None, "banned": banned}
    start, isolation = time.perf_counter(), {}
    fresh = dict(prefix="tunix-lite-grade-", ignore_cleanup_errors=True)
    with (reaping() as sweep, _learners_folder() as workdir,
          tempfile.TemporaryDirectory(**fresh) as logdir):
        for attempt in range(len(exercises) + len(code.cells) + 1):
            todo = [ex.name for ex in exercises
                    if any((ex.name, t.__name__) not in results for t in ex.tests)]
            if not todo:
                break
            # -P: the worker's folder (learner code of an earlier attempt wrote there) is not on
            # its sys.path, so a planted argparse.py cannot run before the worker confines itself
            worker = Worker([sys.executable, "-P", "-m", "tunix_lite.course.worker"],
                            orders | {"exercises": todo}, workdir=workdir,
                            log=os.path.join(logdir, f"{attempt}.log"))
            worker.deadline = time.monotonic() + startup_timeout
            state = {"cell": None, "exercise": None}
            try:
                cells = [i for i in range(len(code.cells)) if i not in orders["skip_cells"]]
                loaded = _load(worker, timeout, state, cells, startup_timeout)
                isolation = isolation or loaded["isolation"]
                impl = calls.Remote(worker.ask, deadline=lambda: worker.deadline)
                for name in todo:
                    state["exercise"], worker.deadline = name, time.monotonic() + timeout
                    for test in by_name[name].tests:
                        if name in loaded["errors"]:
                            outcome, message = "error", str(loaded["errors"][name])
                        elif name not in loaded["defined"]:
                            outcome, message = "error", f"the notebook defines no function {name!r}"
                        else:
                            outcome, message = run_test(test, impl, graded.test_rng(seed, test))
                        if worker.lost:  # inside a jitted call it surfaced as another error
                            raise WorkerLost(worker.lost)
                        results.setdefault((name, test.__name__),
                                          (outcome, shorten(message, MESSAGE_CHARS)))
            except WorkerLost:
                tail = worker.log_tail().strip().splitlines()[-1:] or ["no output"]
                outcome, why = (("timeout", f"ran past the {timeout:.0f} s limit of one exercise")
                                if worker.lost == "timeout" else
                                ("error", f"the worker broke the grader's protocol: "
                                          f"{worker.lost.removeprefix(PROTOCOL)}")
                                if worker.lost.startswith(PROTOCOL) else
                                ("error", f"the worker exited: {tail[0][:200]}"))
                if state["exercise"] in by_name:
                    fill([state["exercise"]], outcome, why)
                elif state["cell"] is not None:
                    orders["skip_cells"].append(state["cell"])
                    fill(code.cells[state["cell"]][1], outcome,
                         f"its cell {why.replace('one exercise', 'a cell')}")
                else:
                    fill(by_name, outcome, f"the grader could not start: {why}")
            finally:
                worker.stop()
                sweep()
    return _report(path, phase, exercises, results, seed=seed,
                   seconds=time.perf_counter() - start, tests_dir=tests_dir, isolation=isolation,
                   previous=previous)


def _load(worker, timeout: float, state: dict, cells: list[int], startup: float) -> dict:
    """Follow the worker through its graded cells `cells` (indices, in order), each with `timeout`
    seconds, all of them within one budget (the startup's plus `timeout` per cell) that no message
    extends; its "loaded" line: {"errors": {exercise: why its cell failed}, "defined": [exercise],
    "isolation": {...}}. A cell message other than the next expected index is a protocol error:
    the worker is lost (learner code can write on its answers pipe: it must not move a
    deadline)."""
    from tunix_lite.course.sandbox import WorkerLost

    budget = time.monotonic() + startup + timeout * len(cells)
    worker.deadline = min(worker.deadline, budget)
    isolation, expected = {}, iter(cells)
    for message in worker.messages():
        if message is None:
            worker.lost = "timeout"
            break
        kind = message.get("kind")
        if kind == "ready" and not isolation:  # the first, sent before learner code ran
            ready = message.get("isolation")
            isolation = {k: ready.get(k) for k in ISOLATION} if isinstance(ready, dict) else {}
        elif kind == "cell":
            index, wanted = message.get("index"), next(expected, None)
            if type(index) is not int or index != wanted:
                worker.lost = (f"{PROTOCOL}a cell message for {str(index)[:50]!r} where cell "
                               f"{wanted} was next")
                break
            state["cell"], worker.deadline = index, min(time.monotonic() + timeout, budget)
        elif kind == "loaded":
            errors, defined = message.get("errors"), message.get("defined")
            if isinstance(errors, dict) and isinstance(defined, list):
                return {"errors": errors, "defined": defined, "isolation": isolation}
    worker.lost = worker.lost or "exited"
    raise WorkerLost(worker.lost)


def _with_new_homes(names: set[str]) -> list[str]:
    """`names` and, for a module that moved (tunix_lite.MOVED) at or below one of them, where it
    lives now: the worker bans both."""
    import tunix_lite

    moved = {new + name[len(old):] for name in names for old, new in tunix_lite.MOVED.items()
             if name == old or name.startswith(old + ".")}
    below = {new for name in names for old, new in tunix_lite.MOVED.items()
             if old.startswith(name + ".")}
    return sorted(names | moved | below)


PROTOCOL = "protocol: "  # WorkerLost's reason when the worker said what it may not
ISOLATION = ("namespaces", "uid", "landlock", "seccomp")  # the worker's confinement, as it reports


@contextlib.contextmanager
def _learners_folder():
    """The worker's working directory, removed without recursion whatever learner code left in it
    (a tree thousands deep included)."""
    from tunix_lite.rewards.sandbox import remove_tree

    folder = tempfile.mkdtemp(prefix="tunix-lite-grade-")
    try:
        yield folder
    finally:
        remove_tree(folder)


def read_sources(path: str | Path) -> list[str]:
    """The code cells of a notebook file; ValueError in one line naming the file and the fault for
    anything that is not a notebook (invalid JSON or UTF-8, no cells, a cell without a type, a
    source that is not text)."""
    from tunix_lite.course.notebook import code_sources, read

    try:
        return code_sources(read(path))
    except RecursionError:
        raise ValueError(f"{path}: nested too deep to be a notebook") from None


def _report(path, phase, exercises, results, *, seed, seconds, tests_dir, isolation,
            previous) -> dict:
    from tunix_lite.course import graded

    before = {r["exercise"]: r.get("failures", 0) for r in (previous or {}).get("exercises", [])}
    tests, rows = [], []
    for ex in exercises:
        gated = gate([(t, *results.get((ex.name, t.__name__), ("error", "no result"))) for t in ex.tests])
        mine = [{"exercise": ex.name, "test": t.__name__, "description": graded.describe(t), "outcome": outcome,
                 "message": message} for t, outcome, message in gated]
        tests += mine
        status = _status(mine)
        failures = 0 if status == "passed" else before.get(ex.name, 0) + (status != "not implemented")
        rows.append({"exercise": ex.name, "passed": sum(t["outcome"] == "passed" for t in mine), "total": len(mine),
                     "status": status, "failures": failures,
                     "hint": hint_for(ex.hints, failures) if status not in ("passed", "not implemented") else ""})
    passed, total = sum(r["passed"] for r in rows), sum(r["total"] for r in rows)
    return {"notebook": str(path), "phase": phase, "seed": seed, "tests": tests,
            "hidden_tests": str(tests_dir) if tests_dir else None, "score": passed, "max_score": total,
            "percent": round(100.0 * passed / max(total, 1), 1), "seconds": round(seconds, 1), "exercises": rows,
            "isolation": isolation,
            "note": SELF_ASSESSMENT.format(isolation=_confinement(isolation))}


def _confinement(isolation: dict) -> str:
    """What confined the worker, in words (tunix_lite.rewards.sandbox says what each part stops)."""
    from tunix_lite.rewards import sandbox

    if not isolation:
        return "never started"
    return f"own session, scrubbed environment; {sandbox.describe(isolation)}"


def unreadable_report(path, phase: str, tests_dir, reason: str) -> dict:
    """The report of a notebook that could not be read: every test an error with `reason`, 0."""
    from tunix_lite.course import graded

    exercises = graded.exercises(phase, graded.module_for(phase, tests_dir))
    results = {(ex.name, t.__name__): ("error", shorten(reason, MESSAGE_CHARS))
               for ex in exercises for t in ex.tests}
    return _report(path, phase, exercises, results, seed=None, seconds=0.0, tests_dir=tests_dir,
                   isolation={}, previous=None) | {"error": reason}


def _status(tests: list[dict]) -> str:
    outcomes = {t["outcome"] for t in tests}
    if outcomes == {"passed"}:
        return "passed"
    if outcomes == {"not_implemented"}:
        return "not implemented"
    for outcome, status in (("not_allowed", "not allowed"), ("timeout", "timeout")):
        if outcome in outcomes:
            return status
    return "failing"


def format_report(report: dict) -> str:
    width = max(len("exercise"), *(len(r["exercise"]) for r in report["exercises"]))
    lines = [f"grading {report['notebook']} (phase {report['phase']}, seed {report['seed']}"
             + (f", hidden tests {report['hidden_tests']})" if report["hidden_tests"] else ")"),
             f"{'exercise':<{width}}  tests  status"]
    for r in report["exercises"]:
        lines.append(f"{r['exercise']:<{width}}  {r['passed']:>2}/{r['total']:<2}  {r['status']}")
    lines.append(f"{'score':<{width}}  {report['score']:>2}/{report['max_score']:<2}  "
                 f"{report['percent']:.0f}% in {report['seconds']:.0f}s")
    for t in report["tests"]:
        if t["outcome"] not in ("passed", "not_implemented"):
            lines.append(f"  {SYMBOL[t['outcome']]} {t['exercise']}: {t['description']}: {t['message']}")
    lines += [f"  {r['exercise']}: {r['hint']}" for r in report["exercises"] if r["hint"]]
    lines.append(report["note"])
    return "\n".join(lines)


def gradescope(report: dict, visibility: str = "visible") -> dict:
    """The report as Gradescope's autograder results.json: one entry per test, each with
    `visibility` (VISIBILITY: "hidden" keeps a hidden test's name and message from the learner)."""
    score = f"{report['score']}/{report['max_score']}"
    return {"score": report["score"], "max_score": report["max_score"],
            "execution_time": report["seconds"], "visibility": "visible",
            "stdout_visibility": "hidden",
            "output": report.get("error")
            or f"phase {report['phase']}, seed {report['seed']}: {score}",
            "tests": [{"name": f"{t['exercise']}: {t['description']}", "number": f"{i + 1}",
                       "score": float(t["outcome"] == "passed"), "max_score": 1.0,
                       "status": "passed" if t["outcome"] == "passed" else "failed",
                       "visibility": visibility, "output": (f"{t['outcome']}: {t['message']}"
                                                             if t["message"] else t["outcome"])}
                      for i, t in enumerate(report["tests"])]}


def write_json(path: Path, data: dict) -> None:
    """Write atomically: a reader (or a crash) never sees half a file, and the old file stays until the new
    one is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _graded(args, previous: dict | None) -> dict:
    """The report for `tunix-lite grade`'s arguments; for a file that is not a notebook, one with
    every test an error and the reason in one line (its "error"), and no worker started."""
    from tunix_lite.course.notebook import phase_of

    try:
        read_sources(args.notebook)
    except ValueError as e:
        reason = shorten(f"the notebook could not be read: {e}", MESSAGE_CHARS)
        return unreadable_report(args.notebook, args.phase or phase_of(args.notebook), args.tests,
                                 reason)
    return grade(args.notebook, timeout=args.timeout, phase=args.phase, tests_dir=args.tests,
                 seed=args.seed, previous=previous)


def main(argv: list[str] | None = None) -> int:
    """`tunix-lite grade`: 0 when every test passes, 1 when some fail, 2 on bad arguments or a file
    that is not a notebook (then with a report: every test an error, the reason in one line)."""
    parser = argparse.ArgumentParser(prog="tunix-lite grade", description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="a course notebook, e.g. exercises/01_jax_nnx_exercises.ipynb")
    parser.add_argument("--json", help="where to write the JSON report (default: ./<notebook>.grade.json)")
    parser.add_argument("--timeout", type=float, default=EXERCISE_SECONDS,
                        help=f"seconds allowed per exercise and per graded cell (default {EXERCISE_SECONDS:.0f})")
    parser.add_argument("--phase", help="override the phase read from the file name (NN_...)")
    parser.add_argument("--tests", help="instructor mode: a folder of hidden test modules (phaseNN.py); also "
                                        "writes Gradescope's results.json beside the JSON report")
    parser.add_argument("--visibility", choices=VISIBILITY, default="visible",
                        help="instructor mode: Gradescope's visibility of each test (default visible)")
    parser.add_argument("--seed", type=int, help="reproduce a run's inputs (default: a fresh random seed)")
    args = parser.parse_args(argv)
    if not Path(args.notebook).is_file():
        print(f"no such notebook: {args.notebook}", file=sys.stderr)
        return 2
    out = Path(args.json or f"{Path(args.notebook).stem}.grade.json")
    results = out.parent / "results.json"
    if args.tests:  # only this process writes it, and only at the end: never a stale or planted one
        results.unlink(missing_ok=True)
    try:
        previous = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    except (ValueError, RecursionError):
        previous = None
    try:
        report = _graded(args, previous if previous and previous.get("notebook") == args.notebook
                         else None)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"tunix-lite grade: error: {e}", file=sys.stderr)
        return 2
    if "error" in report:
        print(f"tunix-lite grade: error: {report['error']}", file=sys.stderr)
    else:
        print(format_report(report))
    write_json(out, report)
    print(f"wrote {out}")
    if args.tests:
        write_json(results, gradescope(report, args.visibility))
        print(f"wrote {results} (Gradescope)")
    if "error" in report:
        return 2
    return 0 if report["score"] == report["max_score"] else 1


if __name__ == "__main__":
    sys.exit(main())
