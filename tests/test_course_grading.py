"""The grader, both ways round: solutions pass every graded test and stubs fail every one; and every attack on
the grader named in issue 17 is performed here and shown to fail (issue 34's are in test_grader_security.py).

Most attacks run against a tiny hidden phase ("99": double / square / negate integers drawn per run), so each
costs one worker start (python + jax, a few seconds), not a phase's tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tunix_lite.course import grading
from tunix_lite.course.build import dumps
from tunix_lite.course.graded import exercises, module_for

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
STUBBED = "08_scaling_exercises.ipynb"  # the cheapest phase to grade (plain arithmetic)

pytestmark = pytest.mark.slow

TINY_PHASE = '''
from tunix_lite.course.graded import graded

HINTS = {"double": ["twice x", "x + x", "return 2 * x"], "square": "x * x", "negate": "-x"}
FORBIDDEN = {"negate": ("operator.neg",)}


@graded("double", reference=True)
def test_double(impl, rng):
    """doubles integers drawn for this run"""
    for x in rng.integers(-10**9, 10**9, size=4).tolist():
        assert impl.double(x) == 2 * x, f"double({x}) = {impl.double(x)}"


@graded("double")
def test_double_zero(impl, rng):
    """double(0) == 0"""
    assert impl.double(0) == 0


@graded("square", reference=True)
def test_square(impl, rng):
    """squares integers drawn for this run"""
    for x in rng.integers(-10**4, 10**4, size=4).tolist():
        assert impl.square(x) == x * x, f"square({x})"


@graded("negate", reference=True)
def test_negate(impl, rng):
    """negates integers drawn for this run"""
    for x in rng.integers(-10**9, 10**9, size=4).tolist():
        assert impl.negate(x) == -x, f"negate({x})"
'''

RIGHT = {"double": "def double(x):\n    return 2 * x", "square": "def square(x):\n    return x * x",
         "negate": "def negate(x):\n    return -x"}
STUBS = {name: f"def {name}(x):\n    raise NotImplementedError('Exercise {name}: ...')" for name in RIGHT}


def _cell(*sources: str, graded: bool = True) -> dict:
    """A code cell made of `sources`, each dedented on its own."""
    src = "\n".join(textwrap.dedent(s).strip("\n") for s in sources)
    return {"cell_type": "code", "metadata": {"tags": ["graded"]} if graded else {}, "source": src,
            "execution_count": None, "outputs": []}


def _notebook(path: Path, *cells: dict) -> Path:
    path.write_text(dumps({"cells": [{**c, "id": f"c{i}"} for i, c in enumerate(cells)], "metadata": {},
                           "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.fixture
def tiny(tmp_path):
    """(hidden tests dir, a function that writes a phase-99 notebook from cells) for the attacks below."""
    tests = tmp_path / "hidden"
    tests.mkdir()
    (tests / "phase99.py").write_text(TINY_PHASE)

    def notebook(*cells: dict, name: str = "99_attack.ipynb") -> Path:
        return _notebook(tmp_path / name, _cell("import os, sys, json", graded=False), *cells)

    return tests, notebook


def _grade(tests, notebook, **kwargs) -> dict:
    return grading.grade(notebook, tests_dir=tests, **kwargs)


def _scores(report) -> dict[str, int]:
    return {r["exercise"]: r["passed"] for r in report["exercises"]}


# ----------------------------------------------------------------------------- both directions


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_solutions_score_full_marks_through_the_grader(solution, tmp_path, capsys):
    assert grading.main([str(solution), "--json", str(tmp_path / "sol.json")]) == 0, capsys.readouterr().out
    solved = json.loads((tmp_path / "sol.json").read_text())
    assert solved["score"] == solved["max_score"] > 0


def test_stubs_score_nothing_through_the_grader(tmp_path):
    """The stubs' side through the confined worker, on the cheapest phase: each test reports the
    stub's own NotImplementedError. Every phase's stubs raise it on every test and seed, in
    process (tests/test_grading_contract.py); the exercise notebooks are the solutions with the
    graded cells stubbed (`python -m tunix_lite.course.build --check`)."""
    assert grading.main([str(ROOT / "exercises" / STUBBED), "--json", str(tmp_path / "ex.json")]) == 1
    stub = json.loads((tmp_path / "ex.json").read_text())
    phase = STUBBED[:2]
    every = {t.__name__ for ex in exercises(phase, module_for(phase)) for t in ex.tests}
    assert stub["score"] == 0 and stub["max_score"] == len(every) > 0
    assert {t["test"] for t in stub["tests"]} == every
    wrong = [(t["test"], t["outcome"], t["message"]) for t in stub["tests"] if t["outcome"] != "not_implemented"]
    assert not wrong, wrong
    assert all(t["message"].startswith(f"Exercise {t['exercise']}:") for t in stub["tests"])


def test_the_graded_tests_run_in_process_when_named(subprocess_env):
    """The instructors' route, `pytest tests/graded --impl ...`: `pytest tests` leaves tests/graded
    out (the test above grades every solution with those tests), so naming it must still collect it.
    Phase 8's tests are the quickest; the exercises' stubs fail them."""
    def graded(impl: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               str(ROOT / "tests" / "graded" / "test_08_scaling.py"), "--impl", impl],
                              capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=300)

    solved, stubs = graded("solutions"), graded("exercises")
    assert solved.returncode == 0 and " passed" in solved.stdout, solved.stdout[-2000:]
    assert stubs.returncode == 1 and " failed" in stubs.stdout, stubs.stdout[-2000:]


def test_right_answers_score_full_marks_and_write_gradescope(tiny, tmp_path, capsys):
    tests, notebook = tiny
    path = notebook(*(_cell(src) for src in RIGHT.values()))
    out = tmp_path / "results" / "grade.json"
    assert grading.main([str(path), "--tests", str(tests), "--json", str(out)]) == 0, capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["score"] == report["max_score"] == 4 and report["hidden_tests"] == str(tests)
    gradescope = json.loads((out.parent / "results.json").read_text())
    assert gradescope["score"] == gradescope["max_score"] == 4
    assert {t["status"] for t in gradescope["tests"]} == {"passed"} and len(gradescope["tests"]) == 4
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "no temporary file left behind"


def test_a_call_under_the_graders_jit_runs_compiled_in_the_worker(tmp_path):
    """A test that jits the learner's function calls it in the worker once per run of the
    program: the worker compiles it once for those shapes, as the in-notebook `check()` would,
    instead of running it op by op each time (every operation compiling anew). Counted by the
    learner's own code: one run for the grader's trace (its output shapes), one for the compile."""
    tests = tmp_path / "hidden"
    tests.mkdir()
    (tests / "phase99.py").write_text(textwrap.dedent('''
        import jax
        import numpy as np

        from tunix_lite.course.graded import graded

        HINTS = {"double": "return 2 * x"}


        @graded("double", reference=True)
        def test_double_under_jit(impl, rng):
            """doubles under jit and under grad; four calls at one shape run its code twice"""
            double, x = jax.jit(lambda x: impl.double(x)), np.arange(3.0, dtype=np.float32)
            for _ in range(4):
                np.testing.assert_allclose(np.asarray(double(x)), 2 * x)
            assert impl.runs() == 2, f"the learner's code ran {impl.runs()} times"
            grad = jax.grad(lambda x: impl.double(x).sum())(x)
            np.testing.assert_allclose(np.asarray(grad), np.full(3, 2.0))
        '''))
    learner = _cell("""
        RUNS = [0]

        def double(x):
            RUNS[0] += 1
            return 2 * x

        def runs():
            return RUNS[0]
        """)
    report = _grade(tests, _notebook(tmp_path / "99_counted.ipynb", learner))
    assert report["score"] == report["max_score"] == 1, report["tests"]


# ----------------------------------------------------------------------------- attacks on the results channel


def test_forged_result_lines_on_stdout_are_ignored(tiny):
    """Before: the worker printed `@@tunix-lite-grade {json}` lines to stdout, so a graded cell could print them."""
    tests, notebook = tiny
    forged = [{"exercise": name, "test": test, "description": "", "outcome": "passed", "message": ""}
              for name, test in [("double", "test_double"), ("double", "test_double_zero"),
                                 ("square", "test_square"), ("negate", "test_negate")]]
    lines = "".join(f"print('@@tunix-lite-grade ' + {json.dumps(json.dumps(f))})\n" for f in forged)
    lines += "".join(f"print({json.dumps(json.dumps({'kind': 'result', **f}))})\n" for f in forged)
    report = _grade(tests, notebook(_cell(lines, *STUBS.values())))
    assert report["score"] == 0


def test_an_atexit_hook_cannot_add_results(tiny):
    """Before: an atexit hook printed forged lines after the tests. The worker now leaves with os._exit."""
    tests, notebook = tiny
    hook = ("import atexit\natexit.register(lambda: print('@@tunix-lite-grade ' + json.dumps({'exercise': 'double', "
            "'test': 'test_double', 'outcome': 'passed', 'message': '', 'description': ''})))\n")
    report = _grade(tests, notebook(_cell(hook, *STUBS.values())))
    assert report["score"] == 0


def test_lines_written_to_the_results_pipe_are_not_results(tiny):
    """A graded cell finds the worker's pipes (any fd that is a pipe) and writes forged results into them: the
    worker answers calls with values only, and the tests that judge them run in the grader."""
    tests, notebook = tiny
    forge = """
    for fd in map(int, os.listdir('/proc/self/fd')):
        try:
            if os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):
                for test in ('test_double', 'test_double_zero'):
                    os.write(fd, (json.dumps({'nonce': 'guess', 'kind': 'result', 'exercise': 'double',
                                              'test': test, 'outcome': 'passed', 'message': ''}) + '\\n').encode())
        except OSError:
            pass
    """
    report = _grade(tests, notebook(_cell(forge, *STUBS.values())))
    assert report["score"] == 0


IMPORT = """
_b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
_imp = _b['__imp' + 'ort__']  # an import the static scan cannot see
"""


def test_replacing_the_test_runner_or_assertions_changes_nothing(tiny):
    """Before: a graded cell could swap the runner, or patch numpy.testing. Now neither is in the worker's
    reach: the runner, the assertions and the score live in the grader, so a patch leaves the true score.
    The dynamic import below also slips past the static no-library scan on purpose."""
    tests, notebook = tiny
    runner = """
    _imp('tunix_lite.course.worker', fromlist=['x']).run_test = lambda test, impl, rng: ('passed', '')
    _imp('tunix_lite.course.grading', fromlist=['x']).gate = lambda results: results
    """
    report = _grade(tests, notebook(_cell(IMPORT, runner, *STUBS.values())))
    assert report["score"] == 0

    for when in ("while loading", "while a test runs"):
        patch = "_imp('numpy').testing.assert_allclose = lambda *a, **k: None"
        patched = (f"{patch}\n{RIGHT['double']}" if when == "while loading" else
                   f"def double(x):\n    {patch}\n    return 2 * x")
        report = _grade(tests, notebook(_cell(IMPORT, patched), _cell(RIGHT["square"])))
        assert _scores(report) == {"double": 2, "square": 1, "negate": 0}, when


def test_first_result_wins(tiny, tmp_path):
    """A later exercise's code that reaches the worker's own sender (through the call stack) and re-sends a
    passing result for an earlier, failed test does not change it: results are decided in the grader."""
    tests, notebook = tiny
    resend = """
    import sys
    def square(x):
        frame = sys._getframe(1)
        while frame and 'send' not in frame.f_locals:
            frame = frame.f_back
        try:
            frame.f_locals['send'](kind='result', exercise='double', test='test_double', outcome='passed')
        except Exception:  # the worker's own sender (if any) carries values, not results
            pass
        return x * x
    """
    report = _grade(tests, notebook(_cell("def double(x):\n    return 0"), _cell(resend)))
    assert _scores(report) == {"double": 0, "square": 1, "negate": 0}


def test_a_detached_process_cannot_rewrite_the_report(tiny, tmp_path):
    """Before: a graded cell started a process that outlived the grader and rewrote its JSON. Now every process
    the worker started, even one in its own session, is killed before the report is written."""
    tests, notebook = tiny
    out, marker = tmp_path / "report.json", tmp_path / "daemon.pid"
    daemon = f"""
    import subprocess
    forged = json.dumps({{'score': 5, 'max_score': 5}})
    code = ("import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(6); "
            "open({str(out)!r}, 'w').write({{forged!r}})".format(forged=forged))
    subprocess.Popen([sys.executable, '-c', code], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    """
    path = notebook(_cell(daemon, *STUBS.values()))
    assert grading.main([str(path), "--tests", str(tests), "--json", str(out)]) == 1
    time.sleep(7)  # longer than the daemon's sleep
    assert json.loads(out.read_text())["score"] == 0, "the report was rewritten after grading"
    assert not marker.is_file() or not Path(f"/proc/{marker.read_text()}").exists(), "the daemon survived"


# ----------------------------------------------------------------------------- attacks on the inputs


def test_a_lookup_table_of_answers_fails_with_fresh_inputs(tiny):
    """Before: tests used fixed, visible seeds, so a table of expected outputs scored full marks. A table built
    for one run's inputs passes that run only (shown with --seed), not the next one."""
    from tunix_lite.course import graded

    tests, notebook = tiny
    module = graded.module_for("99", tests)
    test = module.test_double
    seen = graded.test_rng(1234, test).integers(-10**9, 10**9, size=4).tolist()
    table = {x: 2 * x for x in seen} | {0: 0}
    path = notebook(_cell(f"TABLE = {table!r}\ndef double(x):\n    return TABLE.get(x, 1)"))
    assert _scores(_grade(tests, path, seed=1234))["double"] == 2  # the run the table was made for
    assert _scores(_grade(tests, path))["double"] == 0  # a fresh seed: new inputs


def test_graded_tests_draw_every_input_from_the_run_seed():
    """No test in the package may seed anything with a literal: every input comes from `rng`."""
    import re

    literal = re.compile(r"(default_rng|Rngs|random\.key|PRNGKey|RandomState|random\.seed)\(\s*\d")
    for path in (ROOT / "tunix_lite" / "course" / "graded").glob("phase*.py"):
        hits = [line for line in path.read_text().splitlines() if literal.search(line)]
        assert not hits, f"{path.name} seeds with a literal: {hits}"


# ----------------------------------------------------------------------------- attacks on the machine


def test_the_worker_runs_in_a_fresh_directory_with_a_scrubbed_environment(tiny, tmp_path, monkeypatch):
    """Before: a graded cell could delete files where `grade` was started, and read the grader's environment."""
    tests, notebook = tiny
    start = tmp_path / "start"
    start.mkdir()
    (start / "precious.txt").write_text("keep me")
    monkeypatch.setenv("TUNIX_LITE_TEST_SECRET", "s3cret")
    monkeypatch.chdir(start)
    wipe = """
    import shutil
    for name in os.listdir('.'):
        shutil.rmtree(name, ignore_errors=True) if os.path.isdir(name) else os.remove(name)
    def square(x):
        raise ValueError(json.dumps({'secret': 'TUNIX_LITE_TEST_SECRET' in os.environ,
                                      'pwd': 'PWD' in os.environ, 'cwd': os.getcwd()}))
    """
    report = _grade(tests, notebook(_cell(wipe, RIGHT["double"])))
    assert _scores(report)["double"] == 2
    assert (start / "precious.txt").read_text() == "keep me"
    message = next(t["message"] for t in report["tests"] if t["exercise"] == "square")
    seen = json.loads(message.split(": ", 1)[1])
    assert not seen["secret"] and not seen["pwd"]
    assert not Path(seen["cwd"]).exists() and Path(seen["cwd"]) != start, "a temporary directory, removed after"


def test_a_hang_costs_one_exercise_and_its_grandchildren_die(tiny):
    """Before: one 600 s timeout for the whole notebook; a hang zeroed every later exercise and a grandchild
    (even one in its own session) survived the kill. Now each exercise has its own limit, the worker restarts
    for the next one, and everything it started is killed."""
    tests, notebook = tiny
    token = f"grandchild-{os.getpid()}-{time.monotonic_ns()}"
    hang = f"""
    import subprocess
    def square(x):
        # /bin/sh: the worker runs as nobody, who may not run a Python in root's home (pyenv)
        subprocess.Popen(['/bin/sh', '-c', 'sleep 300; true', {token!r}], start_new_session=True)
        while True:
            pass
    """
    start = time.monotonic()
    report = _grade(tests, notebook(_cell(RIGHT["double"]), _cell(hang), _cell(RIGHT["negate"])), timeout=3)
    assert _scores(report) == {"double": 2, "square": 0, "negate": 1}
    assert {t["outcome"] for t in report["tests"] if t["exercise"] == "square"} == {"timeout"}
    assert time.monotonic() - start < 60
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                assert token.encode() not in (proc / "cmdline").read_bytes(), "the grandchild outlived the grader"
            except OSError:
                pass


def test_a_crash_or_a_hang_while_loading_costs_only_its_own_cell(tiny):
    tests, notebook = tiny
    report = _grade(tests, notebook(_cell("def double(x):\n    return 2 * x\nwhile True:\n    pass"),
                                    _cell(RIGHT["square"]),
                                    _cell("import os\ndef negate(x):\n    return -x\nos._exit(3)")), timeout=3)
    assert _scores(report) == {"double": 0, "square": 1, "negate": 0}
    outcomes = {t["exercise"]: t["outcome"] for t in report["tests"]}
    assert outcomes["double"] == "timeout" and outcomes["negate"] == "error"


def test_broken_demo_cells_cost_nothing(tiny):
    """Before: the imports of every untagged cell ran as one block, so one missing module zeroed the notebook."""
    tests, notebook = tiny
    demo = _cell("import this_module_does_not_exist\nfrom tunix_lite.nothing import here\n"
                 "raise RuntimeError('a demo that fails')", graded=False)
    syntax = _cell("def broken(:\n    pass", graded=False)
    report = _grade(tests, notebook(demo, syntax, *(_cell(src) for src in RIGHT.values())))
    assert report["score"] == report["max_score"]


def test_a_broken_graded_cell_costs_only_its_exercises(tiny):
    tests, notebook = tiny
    report = _grade(tests, notebook(_cell("def double(x)\n    return 2 * x"), _cell(RIGHT["square"])))
    assert _scores(report) == {"double": 0, "square": 1, "negate": 0}
    assert all("SyntaxError" in t["message"] for t in report["tests"] if t["exercise"] == "double")


# ----------------------------------------------------------------------------- rules


def test_the_no_library_rule_scores_not_allowed(tiny):
    tests, notebook = tiny
    report = _grade(tests, notebook(_cell("import operator\ndef negate(x):\n    return operator.neg(x)"),
                                    _cell(RIGHT["double"])))
    negate = [t for t in report["tests"] if t["exercise"] == "negate"]
    assert {t["outcome"] for t in negate} == {"not_allowed"} and "operator.neg" in negate[0]["message"]
    assert _scores(report)["double"] == 2


def test_invariants_count_only_once_the_reference_passes(tiny):
    tests, notebook = tiny
    report = _grade(tests, notebook(_cell("def double(x):\n    return 3 * x")))  # right at 0, wrong elsewhere
    outcomes = {t["test"]: t["outcome"] for t in report["tests"]}
    assert outcomes["test_double"] == "failed" and outcomes["test_double_zero"] == "blocked"
    assert _scores(report)["double"] == 0


def test_hints_get_more_specific_with_each_failing_attempt(tiny, tmp_path, capsys):
    tests, notebook = tiny
    path = notebook(_cell("def double(x):\n    return x"))
    out = tmp_path / "attempts.json"
    hints = []
    for _ in range(4):
        grading.main([str(path), "--tests", str(tests), "--json", str(out)])
        hints.append(next(r["hint"] for r in json.loads(out.read_text())["exercises"] if r["exercise"] == "double"))
    assert [h.split(":")[0] for h in hints] == ["hint 1/3", "hint 2/3", "hint 3/3", "hint 3/3"]
    assert "return 2 * x" in hints[2]


def test_the_json_report_is_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "report.json"
    grading.write_json(out, {"score": 1})

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        grading.write_json(out, {"score": 2})
    assert json.loads(out.read_text()) == {"score": 1}


# ----------------------------------------------------------------------------- check() agrees with grade


AGREE = [
    ("imports", "import jax.numpy as jnp\nfrom tunix_lite.course.grading import check"),
    ("helper", "def _weighted_sum(x, mask, axis):\n    return jnp.sum(x * mask, axis=axis)"),
    ("graded", "def masked_mean(x, mask, axis=None):\n    mask = mask.astype(x.dtype)\n"
               "    return _weighted_sum(x, mask, axis) / jnp.maximum(jnp.sum(mask, axis=axis), 1.0)"),
    ("check", "check(masked_mean)"),
]


def test_check_and_grade_agree_on_a_helper_in_another_cell(tmp_path):
    """Before: a helper defined in an untagged cell passed check() (the notebook's globals had it) and failed
    grade. Now both build the function from the same cells, so both fail, and check() says why."""
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for _, src in AGREE]
    path = tmp_path / "01_helper.ipynb"
    nbformat.write(nb, path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    checked = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "✗ masked_mean: 0/4" in checked and "NameError" in checked and "move it into the cell" in checked
    report = grading.grade(path)
    row = next(r for r in report["exercises"] if r["exercise"] == "masked_mean")
    assert row["passed"] == 0 and any("NameError" in t["message"] for t in report["tests"]
                                      if t["exercise"] == "masked_mean")


def test_check_prints_pass_fail_tiers_and_not_allowed(capsys):
    import jax.numpy as jnp
    import optax

    def masked_mean(x, mask, axis=None):
        mask = mask.astype(x.dtype)
        return jnp.sum(x * mask, axis=axis) / jnp.maximum(jnp.sum(mask, axis=axis), 1.0)

    grading.check(masked_mean)
    assert capsys.readouterr().out.startswith("✓ masked_mean: 4/4 checks passed")

    def masked_mean(x, mask, axis=None):  # noqa: F811 - the classic mistake: divides by the full size
        return jnp.sum(x * mask, axis=axis) / x.size

    grading._FAILURES.pop("masked_mean", None)
    for tier in (1, 2, 3, 3):
        grading.check(masked_mean)
        out = capsys.readouterr().out
        assert "✗ masked_mean: 0/4" in out and f"hint {tier}/3:" in out

    def clip_by_global_norm(tree, max_norm):
        return optax.clip_by_global_norm(max_norm), None

    grading.check(clip_by_global_norm)
    out = capsys.readouterr().out
    assert "⊘ clip_by_global_norm: not allowed" in out and "optax.clip_by_global_norm" in out

    def masked_mean(x, mask, axis=None):  # noqa: F811
        raise NotImplementedError("Exercise masked_mean: ...")

    grading.check("masked_mean")
    assert "not implemented yet" in capsys.readouterr().out
