"""Committed notebook outputs show what a learner should see: no progress bar frozen at 0%."""

import importlib.util
import json
from pathlib import Path

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
