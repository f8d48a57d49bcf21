"""Committed notebook outputs show what a learner should see: each made by its cell's current source
(the stamp scripts/refresh_notebook.py records), no progress bar frozen at 0%."""

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("refresh_notebook", ROOT / "scripts" / "refresh_notebook.py")
refresh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refresh)


def test_a_tqdm_bar_is_stored_finished():
    assert refresh.finished_bar("train:   0%|          | 0/300 [00:00<?, ?it/s]") == \
        "train: 100%|██████████| 300/300\n"
    assert refresh.finished_bar("  0%|          | 0/15 [00:00<?, ?it/s]") == "100%|██████████| 15/15\n"
    assert refresh.finished_bar("scan: 0%|          | 0/? [00:00<?, ?it/s]") == "scan: done\n"
    assert refresh.finished_bar("<Figure size 640x480 with 1 Axes>") is None


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_no_committed_progress_bar_is_frozen(path):
    notebook = json.loads(path.read_text())
    assert refresh.finish_progress_bars(notebook) == 0, (
        f"{path.name} stores tqdm bars frozen at 0%: python scripts/refresh_notebook.py {path} "
        "--finish-bars-only")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_every_committed_output_was_made_by_its_cells_source(path):
    """Every cell with outputs, tagged or not: its stamp is the hash of the source it has now."""
    stale = refresh.stale_outputs(json.loads(path.read_text()))
    assert not stale, (f"{path.name}: {'; '.join(stale)}: refresh its outputs with "
                       f"`python scripts/refresh_notebook.py notebooks/{path.name}`")


def test_a_hand_edited_source_line_leaves_its_output_stale(tmp_path):
    """The authoring route (course/AUTHORING.md): a line edited in the .py and synced into the .ipynb
    without a refresh leaves that cell's output stamped with the old source; nothing else changes."""
    name = "04_lora_qlora"
    for suffix in (".py", ".ipynb"):
        shutil.copy(ROOT / "notebooks" / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    shutil.copy(ROOT / "notebooks" / "jupytext.toml", tmp_path / "jupytext.toml")
    notebook = json.loads((tmp_path / f"{name}.ipynb").read_text())
    assert refresh.stale_outputs(notebook) == []
    line = 'print("adapters B still zero:", '
    edited = next(i for i, c in enumerate(notebook["cells"]) if line in "".join(c["source"]))
    assert notebook["cells"][edited]["outputs"]
    source = (tmp_path / f"{name}.py").read_text()
    (tmp_path / f"{name}.py").write_text(source.replace(line, line.replace("still zero", "all zero")))
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", str(tmp_path / f"{name}.py")],
                   check=True, capture_output=True, timeout=120)
    synced = json.loads((tmp_path / f"{name}.ipynb").read_text())
    assert refresh.stale_outputs(synced) == [f"cell {edited}: its output was made by another source"]


def test_a_refresh_keeps_what_a_longer_profile_made_while_its_source_is_unchanged():
    """`--profile cpu --cells N` stores a longer run's payoff in cell N; a later ci refresh keeps it
    until that cell's source changes, and stores the rest."""
    cells = [{"cell_type": "code", "source": f"print({i})", "metadata": {}, "outputs": [f"cpu {i}"]}
             for i in range(3)]
    committed = {"cells": cells}
    refresh.stamp(committed, "cpu")
    fresh = copy.deepcopy(committed)
    fresh["cells"][1]["source"] = "print(10)"  # edited since the cpu run
    for cell in fresh["cells"]:
        cell["outputs"] = ["ci"]
    refresh.stamp(fresh, "ci")
    assert refresh.keep_committed(fresh, committed, "ci", cells=None) == 2
    assert [c["outputs"] for c in fresh["cells"]] == [["cpu 0"], ["ci"], ["cpu 2"]]
    assert [refresh.stamp_of(c)[refresh.PROFILE] for c in fresh["cells"]] == ["cpu", "ci", "cpu"]
    assert refresh.stale_outputs(fresh) == []
    only_first = copy.deepcopy(fresh)
    refresh.stamp(only_first, "tpu")
    assert refresh.keep_committed(only_first, fresh, "tpu", cells={0}) == 2


def test_refresh_refuses_a_notebook_its_py_pair_no_longer_makes(tmp_path):
    """Running stale cells would store outputs of code the .py no longer has."""
    _notebook_with_output(tmp_path / "01_x.ipynb", "10\n")
    (tmp_path / "01_x.py").write_text("# %%\n# NBVAL_CHECK_OUTPUT\nprint(sum(range(5)))\n")
    refresh.check_paired(tmp_path / "01_x.ipynb")
    (tmp_path / "01_x.py").write_text("# %%\n# NBVAL_CHECK_OUTPUT\nprint(sum(range(6)))\n")
    with pytest.raises(SystemExit, match="jupytext --sync"):
        refresh.check_paired(tmp_path / "01_x.ipynb")


def _notebook_with_output(path: Path, printed: str) -> None:
    cell = {"cell_type": "code", "execution_count": 1, "id": "c0", "metadata": {},
            "source": ["# NBVAL_CHECK_OUTPUT\n", "print(sum(range(5)))"],
            "outputs": [{"name": "stdout", "output_type": "stream", "text": [printed]}]}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_ci_fails_when_a_deterministic_cells_committed_output_drifts(tmp_path):
    """CI runs every notebook under nbval: a cell marked `# NBVAL_CHECK_OUTPUT` must print what its
    committed output says, so an edited output (or an edited source whose output was not refreshed)
    fails the run."""
    import subprocess
    import sys

    results = {}
    for name, printed in (("committed.ipynb", "10\n"), ("edited.ipynb", "11\n")):
        _notebook_with_output(tmp_path / name, printed)
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                              "--nbval-current-env", str(tmp_path / name)],
                             capture_output=True, text=True, cwd=tmp_path, timeout=300)
        results[name] = run.returncode
    assert results == {"committed.ipynb": 0, "edited.ipynb": 1}


def test_ci_runs_each_lesson_from_the_wheel_in_an_empty_folder_and_fails_a_source_tree_read(tmp_path):
    """CI's nbval run of the lessons and solutions (conftest.py), in a stand-in repository with the
    same conftest.py: a notebook's kernel starts in an empty folder and imports tunix_lite from the
    wheel. A notebook that reads ../README.md fails, even where it checks that the file exists first
    or catches the error (its next cell fails), and so does one that reads the package's files by a
    path out of its folder (Colab has no ../tunix_lite); one that writes and reads its own folder and
    reads the package's files where the installed package says they are passes."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "tests").mkdir()
    for name in ("source_tree_guard.py", "hosted_runtime.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests")
    (tmp_path / "README.md").write_text("the repository's\n")
    for name in ("tunix_lite", "pyproject.toml"):  # what the wheel is built from
        (tmp_path / name).symlink_to(ROOT / name)
    cells = {"notebooks/outside.ipynb": ['saved = pathlib.Path("../README.md")\n'
                                         'text = saved.read_text() if saved.is_file() else ""'],
             "notebooks/climbs.ipynb": ['pathlib.Path("../tunix_lite/configs/sft_tiny.yaml").read_text()'],
             "notebooks/catches.ipynb": ['try:\n    pathlib.Path("../README.md").read_text()\n'
                                         'except PermissionError:\n    pass', "print('the next cell')"],
             "solutions/inside.ipynb": ['assert not list(pathlib.Path.cwd().iterdir())  # an empty folder\n'
                                        'pathlib.Path("notes.txt").write_text("written here")\n'
                                        'assert pathlib.Path("notes.txt").read_text() == "written here"\n'
                                        'import os, tunix_lite.configs\n'
                                        'assert tunix_lite.configs.__file__.startswith(os.environ["PYTHONPATH"])\n'
                                        'tunix_lite.configs.path("sft_tiny").read_text()']}
    for name, sources in cells.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"import pathlib\n{code}")
                                                   for code in sources])
        nbformat.write(notebook, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k != "TUNIX_LITE_LESSON_RUNTIME"}  # its own wheel
    run = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--nbval-lax",
                          "--nbval-current-env", "notebooks", "solutions"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600, env=env | {"PYTHONPATH": str(tmp_path)})
    outcomes = {cell: outcome for outcome, cell in
                re.findall(r"^(PASSED|FAILED) (\S+::Cell \d+)", run.stdout, re.M)}
    assert outcomes == {"notebooks/outside.ipynb::Cell 0": "FAILED",
                        "notebooks/climbs.ipynb::Cell 0": "FAILED",
                        "notebooks/catches.ipynb::Cell 0": "PASSED",
                        "notebooks/catches.ipynb::Cell 1": "FAILED",
                        "solutions/inside.ipynb::Cell 0": "PASSED"}, run.stdout[-3000:]
    assert "an earlier cell read ['../README.md'] and caught the error" in run.stdout
    for read in ("../README.md", "../tunix_lite/configs/sft_tiny.yaml"):
        assert f"a cell reads '{read}', a file of the source tree" in run.stdout
