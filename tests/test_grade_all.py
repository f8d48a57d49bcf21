"""`tunix-lite grade-all`: a roster of phase-8 notebooks (the cheapest phase: plain arithmetic, a
few seconds per notebook) graded against the shipped rotated hidden tests into one CSV, via the CLI.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tunix_lite import cli
from tunix_lite.course import grading

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "08_scaling_exercises.ipynb"
STUB = ROOT / "exercises" / "08_scaling_exercises.ipynb"
HIDDEN = ROOT / "course" / "instructor" / "hidden"

pytestmark = pytest.mark.slow


def _crashing_copy(solution: Path, path: Path) -> Path:
    """The solution with a graded cell that kills the worker while it loads (choose_mesh's)."""
    nb = json.loads(solution.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "def choose_mesh(" in src:
            cell["source"] = "import os\nos._exit(3)\n" + src
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def _roster(folder: Path) -> Path:
    """Five learners: two solutions (a folder and a file), a stub, invalid JSON, a crashing cell."""
    (folder / "alice").mkdir(parents=True)
    shutil.copy(SOLUTION, folder / "alice" / SOLUTION.name)
    shutil.copy(SOLUTION, folder / "bob.ipynb")
    shutil.copy(STUB, folder / "carol.ipynb")
    (folder / "dave.ipynb").write_text(SOLUTION.read_text(encoding="utf-8")[:500], encoding="utf-8")
    (folder / "erin").mkdir()
    _crashing_copy(SOLUTION, folder / "erin" / "submission.ipynb")
    (folder / "notes.txt").write_text("not a learner")
    return folder


def _rows(path: Path) -> dict[str, dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return {row["learner"]: row for row in csv.DictReader(f)}


def test_grade_all_writes_one_row_per_learner_and_survives_broken_notebooks(tmp_path, capsys):
    submissions, out = _roster(tmp_path / "submissions"), tmp_path / "grades" / "out.csv"
    code = cli.main(["grade-all", str(submissions), "--tests", str(HIDDEN), "--csv", str(out),
                     "--phase", "08"])
    assert code == 0, capsys.readouterr()
    print(out.read_text(encoding="utf-8"))  # the CSV, for the record (pytest -s)
    rows = _rows(out)
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "erin"]
    assert all(row["max_score"] == "9" for row in rows.values())
    for learner in ("alice", "bob"):
        assert rows[learner]["score"] == "9" and rows[learner]["error"] == "", rows[learner]
    assert rows["carol"]["score"] == "0" and "not implemented" in rows["carol"]["exercises"]
    broken = rows["dave"]
    assert broken["score"] == "0" and broken["error"].startswith("JSONDecodeError")
    assert "\n" not in broken["error"]
    crashed = rows["erin"]
    assert crashed["score"] == "7" and "choose_mesh 0/2" in crashed["exercises"]
    assert crashed["error"].startswith("choose_mesh: its cell the worker exited"), crashed
    assert [p.name for p in out.parent.iterdir()] == ["out.csv"], "no temporary file left behind"


def test_an_interrupted_batch_keeps_the_old_csv_and_the_rows_so_far(tmp_path, monkeypatch, capsys):
    submissions, out = _roster(tmp_path / "submissions"), tmp_path / "out.csv"
    out.write_text("last term's grades\n")
    graded = []

    def grade_then_interrupt(path, **kwargs):
        if graded:
            raise KeyboardInterrupt
        graded.append(path)
        return {"score": 9, "max_score": 9, "exercises": [], "tests": [], "seed": 1, "seconds": 0.1}

    monkeypatch.setattr(grading, "grade", grade_then_interrupt)
    code = cli.main(["grade-all", str(submissions), "--csv", str(out), "--phase", "08"])
    assert code == 130
    assert out.read_text() == "last term's grades\n"
    (partial,) = tmp_path.glob(".out.csv.*.partial")
    assert [row["learner"] for row in _rows(partial).values()] == ["alice"]
    assert str(partial) in capsys.readouterr().out


def test_a_missing_hidden_test_module_stops_before_the_first_learner(tmp_path, capsys):
    submissions, out = _roster(tmp_path / "submissions"), tmp_path / "out.csv"
    code = cli.main(["grade-all", str(submissions), "--tests", str(tmp_path), "--csv", str(out),
                     "--phase", "08"])
    assert code == 2 and not out.exists()
    assert "no phase08.py there" in capsys.readouterr().err


FAKE_DOCKER = '''#!{python}
"""A stand-in for docker: `image inspect` knows one image; `run` logs its arguments, then grades as
the image would, with each mounted path mapped back to the host (read-only mounts stay unwritten)."""
import json, subprocess, sys
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    sys.exit(0 if args[2] == "tunix-lite-grader:test" else 1)
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
mounts, i = {{}}, 0
while args[i] != "tunix-lite-grader:test":
    if args[i] == "-v":
        host, inside = args[i + 1].split(":")[:2]
        mounts[inside] = host
        i += 1
    i += 1
command = args[i + 1:]
for inside, host in mounts.items():
    command = [c.replace(inside, host) if c.startswith(inside) else c for c in command]
sys.exit(subprocess.run([sys.executable, "-m", "tunix_lite.cli", *command[1:]]).returncode)
'''


def test_docker_grades_each_learner_in_its_own_container(tmp_path, monkeypatch, capsys):
    """`grade-all --docker IMAGE`: one `docker run` per learner, without network, read-only, the
    notebook and the hidden tests mounted read-only and only a fresh results folder writable; the
    rows are the grader's. A fake docker on PATH records the commands and grades as the image would.
    A missing image stops the batch before the first learner."""
    bin_dir, log = tmp_path / "bin", tmp_path / "docker.log"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER.format(python=sys.executable, log=str(log)))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    shutil.copy(SOLUTION, submissions / "alice.ipynb")
    shutil.copy(STUB, submissions / "carol.ipynb")
    out = tmp_path / "grades.csv"
    args = ["grade-all", str(submissions), "--tests", str(HIDDEN), "--csv", str(out), "--phase", "08"]
    assert cli.main([*args, "--docker", "no-such-image"]) == 2 and not out.exists()
    assert "no such image" in capsys.readouterr().err
    assert cli.main([*args, "--docker", "tunix-lite-grader:test"]) == 0, capsys.readouterr()
    rows = _rows(out)
    assert rows["alice"]["score"] == rows["alice"]["max_score"] == "9", rows["alice"]
    assert rows["carol"]["score"] == "0" and "not implemented" in rows["carol"]["exercises"]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 2
    for run in runs:
        assert run[:2] == ["run", "--rm"] and {"--read-only", "--network"} <= set(run)
        assert run[run.index("--network") + 1] == "none"
        mounts = [run[i + 1] for i, a in enumerate(run) if a == "-v"]
        assert any(m.endswith(":/in/submission.ipynb:ro") for m in mounts)
        assert any(m.endswith(":/hidden:ro") for m in mounts)
        assert [m for m in mounts if not m.endswith(":ro")] == [m for m in mounts if m.endswith(":/out")]
