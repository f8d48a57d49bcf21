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
