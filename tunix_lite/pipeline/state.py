"""A pipeline's state on disk, the markers its stages leave, and the session's time budget.

    output_dir/pipeline.json          which model each stage started from, the time its steps took
    output_dir/<stage>/stage.json     written when the stage finished: its id, source, steps, model
    output_dir/<stage>/checkpoints/   where a stage in training resumes from (`steps_done`)

Every file is written under a temporary name and renamed, so a kill never leaves half of one.
`pipeline` and `stage` below are `tunix_lite.pipeline.spec`'s `Pipeline` and `Stage`: this module
sits under spec (which checks the budget as it loads a file), so it reads them without importing it.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from tunix_lite.training.config import ConfigError

# FLOP/s no 2-8 core CPU exceeds in float32: the lower bound of a step's time before any timing
CPU_FLOPS = 1e12
# likewise for one accelerator chip (a TPU v5p or an H100 in bf16 is below this)
ACCELERATOR_FLOPS = 1e15


# ----------------------------------------------------------------------------- the session budget


class Budget:
    """The session's wall clock: `left()` seconds (inf without max_minutes)."""

    def __init__(self, max_minutes: float | None):
        self.max_minutes = max_minutes
        self.deadline = (time.monotonic() + 60 * max_minutes if max_minutes is not None
                         else math.inf)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def spent(self) -> bool:
        return self.left() <= 0


def step_seconds_lower_bound(config, model_config) -> float:
    """A bound no step can beat: 6 x parameters x the batch's tokens at a FLOP rate above any
    device of this kind."""
    import jax

    c = model_config
    attention = c.embed_dim * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads)
    params = c.vocab_size * c.embed_dim + c.num_layers * (attention + 3 * c.embed_dim * c.mlp_dim)
    flops = 6 * params * config.batch_size * config.seq_len
    return flops / (CPU_FLOPS if jax.default_backend() == "cpu" else ACCELERATOR_FLOPS)


def check_budget(pipeline, budget_minutes: float | None) -> None:
    """ConfigError when the session's budget cannot fit one step of the next stage to train: the
    time per step (loading and compiling included) measured in an earlier session of this run, else
    the FLOP bound."""
    if budget_minutes is None:
        return
    from tunix_lite.loading import model_config

    state = read_state(pipeline)
    for stage in pipeline.stages:
        if stage_done(pipeline, stage):
            continue
        timing = state.get("timings", {}).get(stage.name)
        if timing and timing.get("steps"):
            need = timing["seconds"] / timing["steps"]
            how = "measured in an earlier session, loading and compiling included"
        else:
            need = step_seconds_lower_bound(stage.config, model_config(pipeline.spec.model))
            how = "a lower bound from its FLOPs"
        if 60 * budget_minutes < need:
            raise ConfigError(f"max_minutes: {budget_minutes:g} ({60 * budget_minutes:.3g} s) is "
                              f"too short for one step of stage {stage.name!r} (at least "
                              f"{need:.3g} s, {how}); ask for at least "
                              f"{math.ceil(need / 60 * 1.5):g} min")
        return


# ----------------------------------------------------------------------------- state on disk


def write_json(path: Path, value) -> None:
    """Write then rename: a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_state(pipeline) -> dict:
    """pipeline.json: which model each stage started from, and the time its steps took."""
    return read_json(pipeline.root / "pipeline.json") or {}


def stage_marker(pipeline, stage) -> dict | None:
    """<stage>/stage.json, written when the stage finished: its id, source, steps and model."""
    return read_json(pipeline.stage_dir(stage.name) / "stage.json")


def stage_done(pipeline, stage) -> bool:
    marker = stage_marker(pipeline, stage)
    return marker is not None and marker["steps"] == stage.config.steps


def source_marker(pipeline, stage) -> dict | None:
    """The marker of the model the stage starts from (None: that stage has not finished)."""
    if stage.source == "base":
        return {"id": "base", "model_dir": pipeline.spec.model}
    source = next(s for s in pipeline.stages if s.name == stage.source)
    return stage_marker(pipeline, source)


def write_jsonl(path: Path, rows) -> None:
    """Write then rename: a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(dict(row)) + "\n")
    os.replace(tmp, path)


def steps_done(directory: Path) -> int:
    """The latest checkpoint step in a stage's folder (0: none yet)."""
    from tunix_lite.training.harness import checkpoint_steps  # JAX: only when a stage trains

    steps = checkpoint_steps(directory / "checkpoints")
    return steps[-1] if steps else 0
