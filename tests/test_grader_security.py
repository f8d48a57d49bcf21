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

import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tunix_lite.rewards import sandbox
from tunix_lite.course import grading, roster
from tunix_lite.course.build import dumps

CAN = sandbox.capabilities()
SCOPED = CAN.get("namespaces") or CAN.get("landlock", 0) >= 6  # signals cannot leave the sandbox
MARK = f"hidden-source-{uuid.uuid4().hex}"  # a string found only in the hidden tests' file
PHASE = f'''
import numpy as np

from tunix_lite.course.graded import graded

HINTS = {{"double": "2 x", "square": "x * x"}}
FORBIDDEN = {{"double": ("optax",), "square": ("optax",)}}
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

    def run(*sources: str, env: dict | None = None, timeout: float = 20):
        cell = {"cell_type": "code", "outputs": [], "execution_count": None}
        cells = [{**cell, "metadata": {}, "source": "import os, sys, json, gc"}]
        graded = {**cell, "metadata": {"tags": ["graded"]}}
        cells += [{**graded, "source": textwrap.dedent(src).strip("\n")} for src in sources]
        path = tmp_path / "99_attack.ipynb"
        cells = [{**c, "id": f"c{i}"} for i, c in enumerate(cells)]
        path.write_text(dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        out = tmp_path / "results" / "grade.json"
        argv = [str(path), "--tests", str(tests), "--json", str(out), "--timeout", str(timeout)]
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
        subprocess.Popen(['/bin/sh', '-c', 'sleep 120; true', {token!r}],  # nobody runs /bin/sh
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


# ------------------------------------------------------------------ issue 56: the design known
ROOT = Path(__file__).resolve().parents[1]
COLLIDING = 2**61 - 1  # every multiple of this int hashes to 0
WRITE_TO_EVERY_FD = """
def _tell(line):
    for fd in range(3, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
"""


@pytest.mark.skipif(CAN.get("seccomp", os.uname().machine in ("x86_64", "aarch64")) is False,
                    reason="no seccomp filter here: learner code can connect to the unix sockets "
                    "its user may reach (tunix_lite/rewards/sandbox.py)")
def test_the_worker_reaches_no_unix_socket_and_no_banned_module(grade, unix_servers):
    """Before: the worker (kernel uid 0) connected to a root-only unix socket while the report said
    "no network"; and `os.sys.modules['optax']`, which the static rule does not see, used a banned
    library for 3/3 where naming it scores 0."""
    paths = unix_servers.paths
    attack = f"""
    import socket

    def _connect_all():
        for path in {paths!r}:
            try:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.connect(path)
                client.sendall(b'x')
            except OSError:
                pass

    def double(x):
        _connect_all()
        return 2 * x * len(os.sys.modules['optax'].__name__) / 5  # KeyError once banned

    def square(x):
        load = os.sys.modules['builtins'].__dict__['__imp' + 'ort__']
        return x * x * len(load('optax').__name__) / 5
    """
    report, printed, results = grade(attack)
    assert unix_servers.peer_uids() == [[], []]
    assert report["score"] == results["score"] == 0, printed
    messages = {t["test"]: t["message"] for t in report["tests"]}
    assert "KeyError" in messages["test_double"] and "ImportError" in messages["test_square"]
    assert report["isolation"]["uid"] != 0 and report["isolation"]["seccomp"], report["isolation"]
    assert "no socket of any kind" in report["note"] and "runs as uid 65534" in printed.replace(
        f"uid {report['isolation']['uid']}", "uid 65534")


def test_an_answer_with_colliding_hashes_costs_its_exercise_only(grade):
    """Before: an answer that is a set of 40,000 ints all hashing to 0 took the grader minutes
    (quadratic) against `--timeout 5`. Now decoding refuses it at once, within the deadline."""
    values = [["int", COLLIDING * i] for i in range(1, 40_001)]
    answer = json.dumps({"kind": "answer", "value": ["set", values]})
    attack = f"""
    import time

    def double(x):
        return 2 * x

    def square(x):
        _tell(({answer!r} + '\\n').encode())  # the grader takes the first answer line
        time.sleep(60)
    """
    # --timeout 10 for the 1.2 MB answer to cross on a loaded machine (at 5, a busy CI machine
    # scored a timeout); before, the grader spent 47.6 s of CPU on it at --timeout 5
    timeout = 10
    gc.collect()  # process_time counts every thread of this xdist worker, and its collections
    cpu = time.process_time()  # this process's: the grader's own work, not the worker's
    report, printed, _ = grade(WRITE_TO_EVERY_FD + textwrap.dedent(attack), timeout=timeout)
    assert time.process_time() - cpu < timeout, printed
    outcomes = {t["test"]: (t["outcome"], t["message"]) for t in report["tests"]}
    assert outcomes["test_square"][0] == "error" and "share one hash" in outcomes["test_square"][1]
    assert report["score"] == 2, printed  # double's, as if nothing happened


def test_a_cell_cannot_move_its_deadline_or_break_the_grader(grade):
    """Before: any {"kind": "cell"} line reset the load deadline (152 s of `--timeout 10`), a cell
    index of the learner's choosing and a line nested 100,000 deep made `grade` end in a
    traceback. Now a cell message is accepted only for the next cell, once."""
    stall = """
    import time
    _tell(b'[' * 100000 + b'\\n')
    for _ in range(120):  # a minute of fresh deadlines, were they granted
        _tell(b'{"kind": "cell", "index": 0}\\n')
        time.sleep(0.5)

    def double(x):
        return 2 * x
    """
    chosen = """
    import time
    _tell(b'{"kind": "cell", "index": 99}\\n')
    time.sleep(60)

    def square(x):
        return x * x
    """
    start = time.monotonic()
    report, printed, _ = grade(*(WRITE_TO_EVERY_FD + textwrap.dedent(cell) for cell in (stall, chosen)),
                               timeout=5)
    assert time.monotonic() - start < 60, printed
    messages = {t["test"]: t["message"] for t in report["tests"]}
    assert all("broke the grader's protocol" in m for m in messages.values()), messages
    assert "cell 1 was next" in messages["test_double"] and "'99'" in messages["test_square"]


def test_a_module_planted_for_the_next_worker_never_runs_and_a_deep_tree_goes(grade, tmp_path,
                                                                             monkeypatch):
    """A cell writes argparse.py into the worker's folder, leaves a tree 2,000 deep there, and
    ends its worker: before, the next worker (`python -m`, its folder first on sys.path) ran the
    planted module before confining itself (as root), and the folder stayed on disk. Now neither."""
    if os.path.isdir("/dev/shm"):  # the folders on a tmpfs: this machine's disk takes 4 ms a rmdir
        monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")
    before = set(os.listdir(tempfile.gettempdir()))
    marker = tmp_path / "planted-module-ran"
    planted = f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit(0)\n"
    plant = f"""
    with open('argparse.py', 'w') as f:
        f.write({planted!r})
    for depth in range(2000):
        os.mkdir('d')
        os.chdir('d')
    os._exit(3)

    def double(x):
        return 2 * x
    """
    product = ("import jax.numpy as jnp\n\ndef square(x):\n    big = jnp.ones((512, 512))\n"
               "    return x * x + 0 * float((big @ big)[0, 0])")  # it failed in the worker before
    report, printed, _ = grade(textwrap.dedent(plant), product)
    messages = {t["test"]: t["message"] for t in report["tests"]}
    assert "the worker exited" in messages["test_double"], printed  # the cell ran, to its end
    assert not marker.exists()
    assert {t["test"]: t["outcome"] for t in report["tests"]}["test_square"] == "passed", printed
    assert set(os.listdir(tempfile.gettempdir())) <= before


MALFORMED = {
    "invalid JSON": b'{"cells": [',
    "not UTF-8": b'\xff\xfe{"cells": []}',
    "empty": b"",
    "a list": b"[1, 2]",
    "no cells": b'{"metadata": {}}',
    "cells not a list": b'{"cells": {"a": 1}}',
    "a cell not a dict": b'{"cells": [1]}',
    "a cell without a type": b'{"cells": [{"source": "x = 1"}]}',
    "a source that is a number": b'{"cells": [{"cell_type": "code", "source": 7}]}',
    "a source list with a number": b'{"cells": [{"cell_type": "code", "source": ["a", 1]}]}',
    "a NUL byte in a source": b'{"cells": [{"cell_type": "code", "source": "def double(x):\\u0000"}]}',
    "nested 100,000 deep": b'{"cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_notebook_is_one_line_and_a_report(name, tmp_path, capsys):
    """Before: 5 of 9 such files (and a chosen cell index) made `grade` end in a traceback with no
    report. Now: one line on stderr, exit code 2, and a report of score 0 with the reason."""
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "phase99.py").write_text(PHASE)
    notebook, out = tmp_path / "99_submission.ipynb", tmp_path / "results" / "grade.json"
    notebook.write_bytes(MALFORMED[name])
    code = grading.main([str(notebook), "--tests", str(tmp_path / "hidden"), "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 2 and "Traceback" not in printed.err + printed.out
    assert len(printed.err.strip().splitlines()) == 1 and "could not be read" in printed.err
    report, results = json.loads(out.read_text()), json.loads((out.parent / "results.json").read_text())
    assert report["score"] == results["score"] == 0 and report["max_score"] == 3
    assert {t["outcome"] for t in report["tests"]} == {"error"} and "could not be read" in results["output"]


def test_grade_all_never_grades_another_learners_file(tmp_path, monkeypatch, capsys):
    """Before: grade-all followed a symlinked notebook or learner folder, so a learner got another
    learner's grade. Now every such link, and a hard link to another learner's file, is one error
    row, and only the owner's notebook is graded."""
    submissions = tmp_path / "submissions"
    (submissions / "alice").mkdir(parents=True)
    alice = submissions / "alice" / "work.ipynb"
    alice.write_text("{}")
    (submissions / "bob.ipynb").symlink_to(alice)  # another learner's file
    (submissions / "carol").symlink_to(submissions / "alice")  # another learner's folder
    (submissions / "dave").mkdir()
    (submissions / "dave" / "work.ipynb").symlink_to("../alice/work.ipynb")  # out of its folder
    (submissions / "erin").mkdir()
    os.link(alice, submissions / "erin" / "work.ipynb")  # the same file
    (submissions / "frank").mkdir()
    (submissions / "frank" / "work.ipynb").write_text("{}")
    (submissions / "frank" / "data").symlink_to(tmp_path)  # a folder link: not followed
    (submissions / "gina.ipynb").symlink_to(tmp_path / "nothing.ipynb")  # a link to nothing
    graded = []

    def fake_grade(path, **kwargs):
        graded.append(Path(path))
        return {"score": 9, "max_score": 9, "exercises": [], "tests": [], "seed": 1, "seconds": 0.1}

    monkeypatch.setattr(grading, "grade", fake_grade)
    out = tmp_path / "grades.csv"
    assert roster.grade_all(submissions, out) == 0
    rows = {row["learner"]: row for row in __import__("csv").DictReader(out.open())}
    assert graded == [submissions / "frank" / "work.ipynb"]
    assert rows["frank"]["score"] == "9" and rows["frank"]["error"] == ""
    for learner, why in (("bob", "link to alice's notebook"), ("carol", "link to alice's notebook"),
                         ("dave", "link out of the learner's folder"),
                         ("alice", "same file as erin's"), ("erin", "same file as alice's"),
                         ("gina", "cannot be read")):
        assert rows[learner]["score"] == "0" and why in rows[learner]["error"], rows[learner]


def test_run_autograder_fails_closed(tmp_path):
    """Before: a results.json the learner wrote (17/17) stayed when the grader was killed. Now
    run_autograder removes it first and, unless the grader finished, writes 0 with the reason."""
    script = ROOT / "course" / "instructor" / "gradescope" / "run_autograder"
    root = tmp_path / "autograder"
    for folder in ("submission", "results", "venv/bin", "source/hidden"):
        (root / folder).mkdir(parents=True)
    (root / "submission" / "work.ipynb").write_text("{}")
    fake = root / "venv" / "bin" / "tunix-lite"
    results = root / "results" / "results.json"

    def run(grader: str) -> dict:
        fake.write_text("#!/usr/bin/env bash\n" + grader)
        fake.chmod(0o755)
        subprocess.run(["bash", str(script)], env=dict(os.environ, AUTOGRADER=str(root)),
                       capture_output=True, check=True, timeout=60)
        return json.loads(results.read_text())

    forged = f'echo \'{{"score": 17}}\' > {results}\n'
    assert run(forged + "kill -9 $$\n") == {
        "score": 0, "output": "the grader did not finish (exit status 137): no score"}
    results.write_text('{"score": 17}')  # planted before grading: removed, the grader wrote none
    assert run("exit 1\n")["score"] == 0
    assert run(f'echo \'{{"score": 9}}\' > {results}\nexit 1\n') == {"score": 9}
    (root / "submission" / "work.ipynb").unlink()
    assert run("exit 0\n") == {"score": 0, "output": "no notebook (.ipynb) in the submission"}
