"""Where step metrics go besides `Trainer.history`: a JSON-lines file, and TensorBoard when installed."""

from __future__ import annotations

import json
from pathlib import Path


class JsonlLogger:
    """Appends one JSON object per step to `path` (readable with pandas.read_json(path, lines=True)).

    keep_through: a run resumed from the checkpoint at this step first drops the lines of later steps, which
    the interrupted run logged after its last checkpoint and the resumed run is about to log again (and a last
    line cut short by the interruption)."""

    def __init__(self, path: str | Path, *, keep_through: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep_through is not None and self.path.is_file():
            kept = [line for line in self.path.read_text().splitlines() if _step(line) <= keep_through]
            self.path.write_text("".join(line + "\n" for line in kept))

    def __call__(self, metrics: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")


def _step(line: str) -> float:
    """The step a metrics line records; infinity for a blank or cut-short line."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return float("inf")


class TensorBoardLogger:
    """Scalars for `tensorboard --logdir DIR` (needs `pip install "tunix-lite[tensorboard]"`)."""

    def __init__(self, log_dir: str | Path):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError('TensorBoard logging needs tensorboardX: pip install "tunix-lite[tensorboard]"') from None
        self.writer = SummaryWriter(str(log_dir))

    def __call__(self, metrics: dict) -> None:
        for key, value in metrics.items():
            if key != "step":
                self.writer.add_scalar(key, value, metrics["step"])
        self.writer.flush()
