"""`report_to`: experiment trackers beside metrics.jsonl. trackio (offline, a local database) gets
the same metrics as the file; a tracker that is unknown or not installed stops the run in one line
(exit 2) before any compute."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tunix_lite.cli import main
from tunix_lite.training.metrics_log import PROJECT

TINY_SFT = """\
algorithm: sft
model: tiny
train_data: synthetic
n_train: 16
n_validation: 4
seq_len: 128
truncation: drop
batch_size: 2
steps: 2
warmup_steps: 0
eval_every: 0
n_accuracy: 0
log_every: 1
"""


def write_config(tmp_path, report_to: str):
    path = tmp_path / "sft.yaml"
    path.write_text(TINY_SFT + f"output_dir: {tmp_path / 'run'}\nreport_to: {report_to}\n")
    return path


def python(*args, **env) -> subprocess.CompletedProcess:
    """A fresh process: trackio reads TRACKIO_DIR once, when it is imported."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, **env))
    assert result.returncode == 0, result.stderr
    return result


def only_error(capsys) -> str:
    """The one stderr line of a refused `train` (no traceback, no progress bar)."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunix-lite train: error: "), lines
    return lines[0].removeprefix("tunix-lite train: error: ")


@pytest.fixture
def no_compute(monkeypatch):
    """The run itself fails the test: what is checked must stop the command before it."""
    from tunix_lite.training import algorithms

    monkeypatch.setattr(algorithms, "run", lambda config: pytest.fail("the run started"))


@pytest.mark.skipif(importlib.util.find_spec("trackio") is None, reason="needs the [trackio] extra")
def test_trackio_gets_the_losses_metrics_jsonl_gets(tmp_path):
    store = str(tmp_path / "trackio")
    config = write_config(tmp_path, "[trackio]")
    python("-m", "tunix_lite.cli", "train", "--config", str(config), TRACKIO_DIR=store)
    logged = python("-m", "trackio.cli", "get", "metric", "--project", PROJECT, "--run",
                    str(tmp_path / "run"), "--metric", "loss", "--json", TRACKIO_DIR=store)
    tracked = {point["step"]: point["value"] for point in json.loads(logged.stdout)["values"]}
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    in_file = {entry["step"]: entry["loss"] for entry in map(json.loads, lines)}
    assert tracked == in_file and sorted(in_file) == [1, 2]


def test_an_unknown_tracker_lists_the_choices(tmp_path, capsys, no_compute):
    assert main(["train", "--config", str(write_config(tmp_path, "[mlflow]"))]) == 2
    assert only_error(capsys).endswith("report_to[0]: 'mlflow' is not supported; choose one of "
                                       "'tensorboard', 'trackio', 'wandb'")


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_a_tracker_not_installed_names_its_extra(tmp_path, capsys, no_compute):
    assert main(["train", "--config", str(write_config(tmp_path, "[wandb]"))]) == 2
    assert only_error(capsys).endswith('report_to: wandb needs the wandb package: '
                                       'pip install "tunix-lite[wandb]"')


def test_the_old_tensorboard_key_names_its_replacement(tmp_path, capsys):
    from tunix_lite.cli import main

    path = tmp_path / "old.yaml"
    path.write_text("algorithm: sft\ntensorboard: true\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("tensorboard: not a sft config key; it became report_to: [tensorboard]"), err
