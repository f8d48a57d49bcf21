"""Both directions of the grader: solutions pass every graded test, generated stubs fail every one
with NotImplementedError (so no test passes vacuously), and a broken or hanging notebook is scored,
not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunix_lite.course import grading
from tunix_lite.course.build import dumps

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [(p, ROOT / "exercises" / p.name) for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("solution, exercise", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_solutions_pass_and_stubs_fail(solution, exercise, tmp_path, capsys):
    assert grading.main([str(solution), "--json", str(tmp_path / "sol.json")]) == 0, capsys.readouterr().out
    solved = json.loads((tmp_path / "sol.json").read_text())
    assert solved["score"] == solved["max_score"] > 0

    assert grading.main([str(exercise), "--json", str(tmp_path / "ex.json")]) == 1
    stub = json.loads((tmp_path / "ex.json").read_text())
    assert stub["score"] == 0 and stub["max_score"] == solved["max_score"]
    wrong = [(t["test"], t["outcome"], t["message"]) for t in stub["tests"] if t["outcome"] != "not_implemented"]
    assert not wrong, wrong
    assert all(t["message"].startswith(f"Exercise {t['exercise']}:") for t in stub["tests"])


def _notebook(path: Path, graded_source: str) -> Path:
    cells = [{"cell_type": "code", "id": "a", "metadata": {}, "source": "import jax.numpy as jnp",
              "execution_count": None, "outputs": []},
             {"cell_type": "code", "id": "b", "metadata": {"tags": ["graded"]}, "source": graded_source,
              "execution_count": None, "outputs": []}]
    path.write_text(dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_wrong_and_broken_notebooks_are_scored(tmp_path):
    wrong = _notebook(tmp_path / "01_wrong.ipynb",  # NaN on an empty mask; a hard-coded norm
                      "def masked_mean(x, mask):\n    return jnp.sum(x * mask) / jnp.sum(mask)\n\n"
                      "def global_norm(tree):\n    return 3.0")
    report = grading.grade(wrong)
    by_exercise = {r["exercise"]: r for r in report["exercises"]}
    assert report["score"] == 3  # masked_mean passes all but the empty-mask test
    assert by_exercise["masked_mean"]["status"] == "failing" and by_exercise["global_norm"]["passed"] == 0
    assert by_exercise["pad_to_bucket"]["passed"] == 0  # not defined at all
    assert any("defines no function 'pad_to_bucket'" in t["message"] for t in report["tests"])

    broken = _notebook(tmp_path / "01_broken.ipynb", "def masked_mean(x, mask)\n    return 0")
    report = grading.grade(broken)
    assert report["score"] == 0 and all("SyntaxError" in t["message"] for t in report["tests"])


def test_a_hanging_notebook_times_out(tmp_path):
    hanging = _notebook(tmp_path / "01_hang.ipynb", "while True:\n    pass")
    report = grading.grade(hanging, timeout=5)
    assert report["score"] == 0 and {t["outcome"] for t in report["tests"]} == {"timeout"}


def test_check_prints_pass_fail_and_hint(capsys):
    import jax.numpy as jnp

    def masked_mean(x, mask):
        mask = mask.astype(x.dtype)
        return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    grading.check(masked_mean)
    assert capsys.readouterr().out.startswith("✓ masked_mean: 4/4 checks passed")

    def masked_mean(x, mask):  # noqa: F811 - the classic mistake: divides by the full size
        return jnp.sum(x * mask) / x.size

    grading.check(masked_mean)
    out = capsys.readouterr().out
    assert "✗ masked_mean:" in out and "hint:" in out

    def masked_mean(x, mask):  # noqa: F811
        raise NotImplementedError("Exercise masked_mean: ...")

    grading.check("masked_mean")
    assert "not implemented yet" in capsys.readouterr().out
