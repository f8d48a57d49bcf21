"""Orbax checkpoints of a training run: every `every` steps, keeping the last `keep`.

Each step folder holds three items:
  model      nnx.state(model, state_filter) as a plain nested dict of arrays (state_filter=nnx.LoRAParam
             writes adapters only; the default, `...`, writes every variable, RNG state included)
  optimizer  nnx.state(optimizer): the step counter and the optax state (moments, schedule count)
  meta       JSON: {"step": ..., plus what the caller passes, e.g. the trainer's history}
Restoring reads each array into the shape, dtype and sharding of the variable it replaces, so a fresh
model (or one sharded over a mesh) can be the target.
"""

from __future__ import annotations

from pathlib import Path

import jax
import orbax.checkpoint as ocp
from flax import nnx


def _abstract(state: nnx.State) -> dict:
    """The restore target: shape, dtype and sharding of each array, as the same pure dict `save` writes."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, nnx.to_pure_dict(state))


class Checkpoints:
    def __init__(self, directory: str | Path, *, every: int = 100, keep: int | None = 3, state_filter=...):
        self.directory = Path(directory).expanduser().absolute()  # orbax wants absolute paths
        self.every, self.state_filter = every, state_filter
        # create=False: a mistyped restore path should fail loudly, not leave an empty folder behind.
        # Saving is decided here (step % every), so orbax's own interval policy is not used.
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=False)
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    @property
    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, model: nnx.Module, optimizer: nnx.Optimizer | None = None, *,
             meta: dict | None = None, force: bool = False) -> bool:
        """Write a checkpoint if `step` is a multiple of `every` (or `force`); True if one was started.
        The write finishes in the background: call `wait()` before reading it from another process."""
        if not (force or step % self.every == 0) or step in self.steps:
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        items = {"model": ocp.args.StandardSave(nnx.to_pure_dict(nnx.state(model, self.state_filter))),
                 "meta": ocp.args.JsonSave({"step": step} | (meta or {}))}
        if optimizer is not None:
            items["optimizer"] = ocp.args.StandardSave(nnx.to_pure_dict(nnx.state(optimizer)))
        return self.manager.save(step, args=ocp.args.Composite(**items), force=True)

    def restore(self, model: nnx.Module, optimizer: nnx.Optimizer | None = None, *, step: int | None = None) -> dict:
        """Load checkpoint `step` (default: the latest) into `model` (and `optimizer`) in place; returns meta."""
        self.wait()
        steps = self.steps
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}: looked for step folders "
                                    f"({self.directory}/<step>/ holding model, optimizer and meta)")
        step = steps[-1] if step is None else step
        if step not in steps:
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}; it has steps {steps}")
        model_state = nnx.state(model, self.state_filter)
        items = {"model": ocp.args.StandardRestore(_abstract(model_state)), "meta": ocp.args.JsonRestore()}
        if optimizer is not None:
            optimizer_state = nnx.state(optimizer)
            items["optimizer"] = ocp.args.StandardRestore(_abstract(optimizer_state))
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        nnx.replace_by_pure_dict(model_state, restored["model"])
        nnx.update(model, model_state)
        if optimizer is not None:
            nnx.replace_by_pure_dict(optimizer_state, restored["optimizer"])
            nnx.update(optimizer, optimizer_state)
        return restored["meta"]

    def wait(self):
        """Block until background writes are on disk."""
        self.manager.wait_until_finished()

    def close(self):
        self.manager.close()
