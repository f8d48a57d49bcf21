"""Grade course exercises: `check(fn)` inside a notebook, or `tunix-lite grade NOTEBOOK` from a shell.

Both run the same tests (tunix_lite.course.graded). The command executes the notebook's graded cells
in a subprocess with a timeout, so a learner's infinite loop or crash cannot hang or kill the grader,
then prints a score table and writes JSON:

    tunix-lite grade exercises/01_jax_nnx_exercises.ipynb [--json out.json] [--timeout 600]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

_MARK = "@@tunix-lite-grade "  # prefixes the worker's result lines, so learner prints do not confuse us

SYMBOL = {"passed": "✓", "failed": "✗", "error": "✗", "not_implemented": "·", "timeout": "⏱"}


def run_test(test: Callable, impl) -> tuple[str, str]:
    """(outcome, message); outcome is passed | failed | error | not_implemented."""
    import jax

    try:
        with jax.default_matmul_precision("float32"):  # TPU defaults to bf16 passes; grade at float32
            test(impl)
    except NotImplementedError as e:
        return "not_implemented", str(e)
    except AssertionError as e:
        return "failed", _short(str(e) or "assertion failed")
    except Exception as e:  # noqa: BLE001 - any crash in learner code is a failed test, not a grader crash
        return "error", _short(f"{type(e).__name__}: {e}")
    return "passed", ""


def _short(message: str, limit: int = 300) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    text = " | ".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- in the notebook


def check(fn_or_name: Callable | str) -> None:
    """Run the graded tests of one exercise on your function and print what passed, with a hint.

        check(masked_mean)      # or check("masked_mean")
    """
    if isinstance(fn_or_name, str):
        caller = inspect.currentframe().f_back
        _check(fn_or_name, caller.f_locals.get(fn_or_name, caller.f_globals.get(fn_or_name)))
    else:
        _check(fn_or_name.__name__, fn_or_name)


def check_all(phase: str) -> None:
    """check() every exercise of a phase, looking the functions up in the calling notebook."""
    from tunix_lite.course import graded

    names = inspect.currentframe().f_back.f_globals
    scores = [_check(ex.name, names.get(ex.name)) for ex in graded.exercises(phase)]
    print(f"phase {phase}: {sum(p for p, _ in scores)}/{sum(t for _, t in scores)} checks passed")


def _check(name: str, fn: Callable | None) -> tuple[int, int]:
    from tunix_lite.course import graded

    exercise = graded.find(name)
    if fn is None:
        print(f"✗ {name}: not defined yet; run the cell that defines it first")
        return 0, len(exercise.tests)
    impl = types.SimpleNamespace(**{name: fn})
    results = [(test, *run_test(test, impl)) for test in exercise.tests]
    passed = sum(outcome == "passed" for _, outcome, _ in results)
    if all(outcome == "not_implemented" for _, outcome, _ in results):
        print(f"· {name}: not implemented yet; replace the `raise NotImplementedError` in its cell")
        return 0, len(results)
    mark = "✓" if passed == len(results) else "✗"
    print(f"{mark} {name}: {passed}/{len(results)} checks passed")
    for test, outcome, message in results:
        if outcome != "passed":
            print(f"  {SYMBOL[outcome]} {graded.describe(test)}: {message}")
    if passed < len(results):
        print(f"  hint: {exercise.hint}")
    return passed, len(results)


# ----------------------------------------------------------------------------- worker (subprocess side)


def _worker(path: str, phase: str) -> None:
    from tunix_lite.course import graded
    from tunix_lite.course.notebook import load_impl

    exercises = graded.exercises(phase)
    try:
        impl = load_impl(path)
        load_error = None
    except BaseException as e:  # noqa: BLE001 - report, do not crash: every test then errors
        impl, load_error = None, _short(f"the graded cells failed to run: {type(e).__name__}: {e}")
    for ex in exercises:
        for test in ex.tests:
            if load_error:
                outcome, message = "error", load_error
            elif not hasattr(impl, ex.name):
                outcome, message = "error", f"the notebook defines no function {ex.name!r} in a graded cell"
            else:
                outcome, message = run_test(test, impl)
            print(_MARK + json.dumps({"exercise": ex.name, "test": test.__name__, "description": graded.describe(test),
                                      "outcome": outcome, "message": message}), flush=True)


# ----------------------------------------------------------------------------- grader (parent side)


def grade(path: str | Path, *, timeout: float = 600, phase: str | None = None) -> dict:
    """Grade one notebook in a subprocess; returns the report that `main` prints and saves."""
    from tunix_lite.course import graded
    from tunix_lite.course.notebook import phase_of

    path = Path(path)
    phase = phase or phase_of(path)
    expected = [(ex, t) for ex in graded.exercises(phase) for t in ex.tests]
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # works from a checkout without pip install
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("JAX_PLATFORMS", "cpu")
    cmd = [sys.executable, "-m", "tunix_lite.course.grading", "--worker", str(path), "--phase", phase]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        stdout, stderr, status = proc.stdout, proc.stderr, ("ok" if proc.returncode == 0 else "crashed")
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, status = "", "timeout"
    seconds = time.perf_counter() - start
    results = {(r["exercise"], r["test"]): r for r in
               (json.loads(line[len(_MARK):]) for line in stdout.splitlines() if line.startswith(_MARK))}
    tests = []
    for ex, test in expected:
        r = results.get((ex.name, test.__name__))
        if r is None:
            why = f"grader {status} after {seconds:.0f}s" + (f": {_short(stderr)}" if stderr.strip() else "")
            r = {"exercise": ex.name, "test": test.__name__, "description": graded.describe(test),
                 "outcome": "timeout" if status == "timeout" else "error", "message": why}
        tests.append(r)
    rows = []
    for ex in graded.exercises(phase):
        mine = [t for t in tests if t["exercise"] == ex.name]
        rows.append({"exercise": ex.name, "passed": sum(t["outcome"] == "passed" for t in mine),
                     "total": len(mine), "status": _status(mine), "hint": ex.hint})
    passed = sum(r["passed"] for r in rows)
    total = sum(r["total"] for r in rows)
    return {"notebook": str(path), "phase": phase, "score": passed, "max_score": total,
            "percent": round(100.0 * passed / max(total, 1), 1), "seconds": round(seconds, 1),
            "exercises": rows, "tests": tests}


def _status(tests: list[dict]) -> str:
    outcomes = {t["outcome"] for t in tests}
    if outcomes == {"passed"}:
        return "passed"
    if outcomes == {"not_implemented"}:
        return "not implemented"
    return "timeout" if "timeout" in outcomes else "failing"


def format_report(report: dict) -> str:
    width = max(len("exercise"), *(len(r["exercise"]) for r in report["exercises"]))
    lines = [f"grading {report['notebook']} (phase {report['phase']})",
             f"{'exercise':<{width}}  tests  status"]
    for r in report["exercises"]:
        lines.append(f"{r['exercise']:<{width}}  {r['passed']:>2}/{r['total']:<2}  {r['status']}")
    lines.append(f"{'score':<{width}}  {report['score']:>2}/{report['max_score']:<2}  "
                 f"{report['percent']:.0f}% in {report['seconds']:.0f}s")
    failing = [t for t in report["tests"] if t["outcome"] not in ("passed", "not_implemented")]
    for t in failing:
        lines.append(f"  {SYMBOL[t['outcome']]} {t['exercise']}: {t['description']}: {t['message']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`tunix-lite grade`: 0 when every test passes, 1 when some fail, 2 when the notebook is missing."""
    parser = argparse.ArgumentParser(prog="tunix-lite grade", description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="a course notebook, e.g. exercises/01_jax_nnx_exercises.ipynb")
    parser.add_argument("--json", help="where to write the JSON report (default: ./<notebook>.grade.json)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before the grader gives up")
    parser.add_argument("--phase", help="override the phase read from the file name (NN_...)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.notebook, args.phase)
        return 0
    if not Path(args.notebook).is_file():
        print(f"no such notebook: {args.notebook}", file=sys.stderr)
        return 2
    report = grade(args.notebook, timeout=args.timeout, phase=args.phase)
    print(format_report(report))
    out = Path(args.json or f"{Path(args.notebook).stem}.grade.json")
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0 if report["score"] == report["max_score"] else 1


if __name__ == "__main__":
    sys.exit(main())
