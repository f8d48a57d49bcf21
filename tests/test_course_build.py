"""The exercise build: one source (solutions/), committed stubs in sync, regions named by their function."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tunix_lite.course import build
from tunix_lite.course.notebook import BEGIN, END, is_graded, phase_of, read, source

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_committed_exercises_match_a_fresh_build(capsys):
    rc = build.main(["--check", "--solutions", str(ROOT / "solutions"), "--exercises", str(ROOT / "exercises")])
    assert rc == 0, capsys.readouterr().out


def test_strip_solutions_keeps_indentation_and_names_the_function():
    src = f"def f(x):\n    y = 1\n    {BEGIN}\n    return x + y\n    {END}\n\ndef g():\n    pass"
    out = build.strip_solutions(src, "test")
    assert out == f"def f(x):\n    y = 1\n    {build.stub('f')}\n\ndef g():\n    pass"
    assert 'NotImplementedError("Exercise f:' in out


@pytest.mark.parametrize("src, error", [
    (f"def f():\n    {BEGIN}\n    return 1", "has no"),
    (f"{BEGIN}\nx = 1\n{END}", "inside a function"),
    (f"def f():\n    return 1\n    {END}", "without"),
])
def test_strip_solutions_rejects_malformed_regions(src, error):
    with pytest.raises(ValueError, match=error):
        build.strip_solutions(src, "test")


def test_build_ignores_outputs_and_volatile_metadata():
    nb = read(SOLUTIONS[0])
    noisy = json.loads(json.dumps(nb))
    noisy["metadata"]["language_info"] = {"name": "python", "version": "3.99"}
    for cell in noisy["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [{"output_type": "stream", "name": "stdout", "text": "x"}], 7
            cell["metadata"]["execution"] = {"iopub.status.busy": "2030-01-01"}
    assert build.dumps(build.build_notebook(noisy)) == build.dumps(build.build_notebook(nb))


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_graded_functions_match_the_registered_exercises(path):
    """Every graded function with a solution region has tests, and every registered exercise is in the notebook."""
    from tunix_lite.course import graded

    nb = read(path)
    with_regions = set()
    for cell in nb["cells"]:
        src = source(cell)
        assert BEGIN not in src or is_graded(cell), f"{path.name}: solution region outside a graded cell"
        if is_graded(cell):
            assert "check(" not in src, f"{path.name}: keep check() calls out of graded cells"
            tree = ast.parse(src)
            with_regions |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                             and BEGIN in ast.get_source_segment(src, node)}
    assert with_regions == {ex.name for ex in graded.exercises(phase_of(path))}


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_exercises_have_no_solutions_or_outputs(path):
    text = (ROOT / "exercises" / path.name).read_text(encoding="utf-8")
    assert BEGIN not in text and END not in text
    nb = json.loads(text)
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")


def test_stamp_follows_the_configured_repository(tmp_path, monkeypatch):
    from tunix_lite import course

    path = tmp_path / "01_core_concepts_jax_nnx.ipynb"
    path.write_text((ROOT / "notebooks" / path.name).read_text(encoding="utf-8"), encoding="utf-8")
    assert not build.stamp(path, f"notebooks/{path.name}")  # committed notebooks are already stamped
    monkeypatch.setattr(course, "REPO_URL", "https://github.com/someone/fork")
    monkeypatch.setattr(course, "RELEASED", True)  # a fork's published release: badges and routes
    assert build.stamp(path, f"notebooks/{path.name}")
    text = path.read_text(encoding="utf-8")
    assert f"colab.research.google.com/github/someone/fork/blob/{course.TAG}/notebooks/{path.name}" in text
    assert f"git+https://github.com/someone/fork@{course.TAG}" in text and "tunix-lite/tunix-lite" not in text
    assert not build.stamp(path, f"notebooks/{path.name}")


def test_demo_cells_that_need_an_exercise_may_raise_in_the_exercise_version():
    """`run all` on a fresh exercise notebook goes past demos of unwritten functions (and what they computed)."""
    def cell(src, tags=()):
        return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": src, "outputs": [],
                "execution_count": None}

    nb = {"cells": [cell(f"def f(x):\n    {BEGIN}\n    return x\n    {END}", ["graded"]), cell("check(f)"),
                    cell("y = f(1)"), cell("print(y + 1)"), cell("print(2)")], "metadata": {}, "nbformat": 4,
          "nbformat_minor": 5}
    tags = [c["metadata"].get("tags", []) for c in build.build_notebook(nb)["cells"]]
    assert tags == [["graded"], [], ["raises-exception"], ["raises-exception"], []]


def _solution_bodies() -> dict[str, str]:
    """{exercise function: the code between its BEGIN and END SOLUTION markers, one stripped line
    per line} for every solutions/ notebook."""
    bodies = {}
    for path in SOLUTIONS:
        for cell in read(path)["cells"]:
            lines = source(cell).splitlines()
            starts = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
            for start in starts:
                end = next(i for i in range(start, len(lines)) if lines[i].strip() == END)
                name = next(line.split("def ", 1)[1].split("(")[0]
                            for line in reversed(lines[:start]) if line.lstrip().startswith("def "))
                bodies[f"{path.name}:{name}"] = _normalized("\n".join(lines[start + 1:end]))
    return bodies


def _normalized(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _texts(folder: Path) -> dict[str, str]:
    """Every readable text under folder, notebooks as their cells' sources, normalized."""
    texts = {}
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # images, archives
        if path.suffix == ".ipynb":
            text = "\n".join(source(cell) for cell in json.loads(text)["cells"])
        texts[path.relative_to(folder).as_posix()] = _normalized(text)
    return texts


def test_the_learner_copy_holds_no_solution_code_or_quiz_answers(tmp_path, capsys):
    """`--learner-copy DIR`: no solution function's body anywhere in the copy (the same search finds
    each one in solutions/, so it is not vacuous), no solutions/, instructor kit or tests, no quiz
    answers; the exercises, their public tests and the notebooks are there."""
    target = tmp_path / "course_copy"
    assert build.main(["--solutions", str(ROOT / "solutions"), "--learner-copy", str(target)]) == 0
    bodies = _solution_bodies()
    assert len(bodies) >= 40, sorted(bodies)
    copied = _texts(target)
    found = {name: [rel for rel, text in copied.items() if body in text]
             for name, body in bodies.items()}
    assert not any(found.values()), {name: where for name, where in found.items() if where}
    originals = _texts(ROOT / "solutions")
    assert all(any(body in text for text in originals.values()) for body in bodies.values())
    assert not [rel for rel in copied if rel.startswith(build.LEARNER_EXCLUDES)]
    for rel in ("exercises/06_rl_exercises.ipynb", "notebooks/06_reinforcement_learning.ipynb",
                "tunix_lite/course/graded/phase06.py", "course/CAPSTONE.md", "pyproject.toml"):
        assert rel in copied, rel
    assert not [rel for rel, text in copied.items() if "<summary>Answers" in text]
    assert build.main(["--solutions", str(ROOT / "solutions"), "--learner-copy", str(target)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


def test_quiz_answers_live_in_the_instructor_bank_only():
    """Every lesson notebook ends with a quiz and no answers; the bank has a section per phase, each
    with as many answers as its notebook asks questions."""
    bank = (ROOT / "course" / "instructor" / "quiz_answers.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "notebooks").glob("0[1-9]_*.py")):  # the lessons, not the starter
        text = path.read_text(encoding="utf-8")
        assert "Quiz" in text and "<summary>Answers" not in text, path.name
        quiz = text[text.index("Quiz"):]
        asked = len(re.findall(r"^# (\d+)\. ", quiz, re.M))
        section = bank.split(f"## Phase {int(path.name[:2])} ·", 1)[1].split("\n## Phase", 1)[0]
        answers = section.split("**Answers**", 1)[1]
        assert len(re.findall(r"^(\d+)\. ", answers, re.M)) == asked > 0, path.name


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")) + SOLUTIONS,
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_notebooks_are_in_the_layout_the_build_writes(path, tmp_path):
    """Whatever wrote a notebook (jupytext, scripts/refresh_notebook.py, the build), `--stamp` leaves
    it as it is: no diff of key order or layout for a release to carry."""
    copy = tmp_path / path.name
    copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    assert not build.stamp(copy, f"{path.parent.name}/{path.name}"), (
        f"{path}: python -m tunix_lite.course.build --stamp rewrites it")
