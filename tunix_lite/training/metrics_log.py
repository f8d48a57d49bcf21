"""Where step metrics go besides `Trainer.history`: a JSON-lines file, always, and the experiment
trackers `report_to` names (TensorBoard, trackio, Weights & Biases), each from its optional extra.

A logger is called with each step's metrics (a dict holding "step") and closed when the run ends."""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Literal

Tracker = Literal["tensorboard", "trackio", "wandb"]
PACKAGES: dict[Tracker, str] = {"tensorboard": "tensorboardX", "trackio": "trackio",
                                "wandb": "wandb"}
PROJECT = "tunix-lite"  # the trackio / wandb project of every run; a run is named by its output_dir


class JsonlLogger:
    """Appends one JSON object per step to `path` (pandas.read_json(path, lines=True) reads it).

    keep_through: a run resumed from the checkpoint at this step first drops the lines of later
    steps, which the interrupted run logged after its last checkpoint and the resumed run is about
    to log again (and a last line cut short by the interruption)."""

    def __init__(self, path: str | Path, *, keep_through: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep_through is not None and self.path.is_file():
            kept = [line for line in self.path.read_text().splitlines()
                    if _step(line) <= keep_through]
            self.path.write_text("".join(line + "\n" for line in kept))

    def __call__(self, metrics: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")

    def close(self) -> None:
        """Nothing to release: each line is written and the file closed at once, so a killed run
        keeps every line it logged."""


def _step(line: str) -> float:
    """The step a metrics line records; infinity for a blank or cut-short line."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return float("inf")


def missing_package(tracker: Tracker) -> str | None:
    """Why `tracker` cannot log in this environment (its package is not installed), or None.
    Looked up without importing the package, so the config check can afford it."""
    package = PACKAGES[tracker]
    if importlib.util.find_spec(package) is None:
        return f'{tracker} needs the {package} package: pip install "tunix-lite[{tracker}]"'
    return None


def _import(tracker: Tracker):
    """The tracker's package, or an ImportError naming the extra that installs it."""
    problem = missing_package(tracker)
    if problem:
        raise ImportError(problem)
    return importlib.import_module(PACKAGES[tracker])


def open_tracker(tracker: Tracker, output_dir: Path, config: dict, *, resumed: bool = False):
    """The logger for one `report_to` entry. trackio and wandb name the run after output_dir and
    keep the run's config beside its metrics; a resumed trackio run goes on in the run of that
    name."""
    if tracker == "tensorboard":
        return TensorBoardLogger(output_dir / "tensorboard")
    if tracker == "trackio":
        return TrackioLogger(str(output_dir), config, resume=resumed)
    return WandbLogger(str(output_dir), config, output_dir)


def _scalars(metrics: dict) -> dict:
    """A step's metrics without the step itself, which the trackers take as an argument."""
    return {key: value for key, value in metrics.items() if key != "step"}


class TensorBoardLogger:
    """Scalars for `tensorboard --logdir DIR` (needs `pip install "tunix-lite[tensorboard]"`)."""

    def __init__(self, log_dir: str | Path):
        self.writer = _import("tensorboard").SummaryWriter(str(log_dir))

    def __call__(self, metrics: dict) -> None:
        for key, value in _scalars(metrics).items():
            self.writer.add_scalar(key, value, metrics["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TrackioLogger:
    """A trackio run (needs `pip install "tunix-lite[trackio]"`), kept in a local database
    (TRACKIO_DIR, default ~/.cache/huggingface/trackio), so it works offline; `trackio show`
    opens the dashboard."""

    def __init__(self, name: str, config: dict, *, resume: bool = False):
        self.trackio = _import("trackio")
        self.trackio.init(project=PROJECT, name=name, config=config,
                          resume="allow" if resume else "never")

    def __call__(self, metrics: dict) -> None:
        self.trackio.log(_scalars(metrics), step=metrics["step"])

    def close(self) -> None:
        self.trackio.finish()


class WandbLogger:
    """A Weights & Biases run (needs `pip install "tunix-lite[wandb]"`), its files under `dir`;
    WANDB_MODE=offline keeps it local until `wandb sync`."""

    def __init__(self, name: str, config: dict, dir: str | Path):
        self.run = _import("wandb").init(project=PROJECT, name=name, config=config, dir=str(dir))

    def __call__(self, metrics: dict) -> None:
        self.run.log(_scalars(metrics), step=metrics["step"])

    def close(self) -> None:
        self.run.finish()
