"""Orbax checkpoints of a training run: every `every` steps, keeping the last `keep`.

Each step folder holds three items:
  model      nnx.state(model, state_filter) as a plain nested dict of arrays
             (state_filter=nnx.LoRAParam writes adapters only; the default, `...`, writes every
             variable, RNG state included)
  optimizer  nnx.state(optimizer): the step counter and the optax state (moments, schedule count)
  meta       JSON: {"step": ..., plus what the caller passes, e.g. the trainer's history}
Restoring reads each array into the shape, dtype and sharding of the variable it replaces, so a
fresh model (or one sharded over a mesh) can be the target; a checkpoint whose arrays do not fit the
target is refused before anything is read, naming the first array that differs.

Failures reach the caller as one CheckpointError naming the step folder and the OS error
(disk full, permission), whether they happen while saving (in the background) or restoring; orbax's
own error logs and the "Event loop is closed" echoes of the same failure are held back, and
`close()` after a failure does not raise it a second time. A latest checkpoint whose files do not
read (truncated, corrupt) is reported as an UnreadableCheckpoint naming the newest earlier one that
reads, and how to resume from it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


class CheckpointError(RuntimeError):
    """A checkpoint that could not be written or read, or does not fit the model it is restored
    into."""


class UnreadableCheckpoint(CheckpointError):
    """Checkpoint `step` in `directory` whose files do not read (truncated, corrupt), and
    `intact`, the newest earlier step that reads in full (None: none does). `alternative`: another
    way to resume from `intact`, offered before moving the broken step out of the way."""

    def __init__(self, directory: Path, step: int, reason: str, intact: int | None,
                 alternative: str = ""):
        self.directory, self.step, self.reason, self.intact = directory, step, reason, intact
        broken = directory / str(step)
        message = f"could not read checkpoint {broken}: {reason}"
        if intact is not None:
            also = f"{alternative}, or " if alternative else ""
            message += (f"; it may be corrupt. Checkpoint {intact} reads: {also}move {broken} "
                        f"out of {directory} and rerun to resume from step {intact}")
        super().__init__(message)

    def offering(self, alternative: str) -> UnreadableCheckpoint:
        """The same error, offering `alternative` as another way to resume from `intact`."""
        return UnreadableCheckpoint(self.directory, self.step, self.reason, self.intact,
                                    alternative)


class _Unreadable(Exception):
    """A checkpoint whose files do not read (__cause__ says why): restore offers an earlier one."""


def _abstract(state: nnx.State) -> dict:
    """The restore target: shape, dtype and sharding of each array, as the same pure dict `save`
    writes."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, nnx.to_pure_dict(state))


def _placed_like(restored: jax.Array, current) -> jax.Array:
    """`restored` placed as `current` was. Orbax commits what it reads to a device, while a model
    built in this process is uncommitted, and jit lowers committed and uncommitted arguments to
    different programs: a resumed run would compile its step and sampler again, missing the
    persistent cache too. One device only: sharded arrays are committed either way."""
    if not isinstance(current, jax.Array) or current.committed or not restored.committed:
        return restored
    if jax.dtypes.issubdtype(restored.dtype, jax.dtypes.prng_key):
        data = jax.device_put(np.asarray(jax.random.key_data(restored)))
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(restored))
    return jax.device_put(np.asarray(restored))


def _os_reason(error: BaseException) -> str:
    """The OS error behind a failed write, e.g. "[Errno 28] No space left on device", found in the
    exception chain or in tensorstore's message ("... [os_error_code='28']"); else the error's first
    line."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return f"[Errno {e.errno}] {e.strerror}"
        code = re.search(r"os_error_code='?(\d+)", str(e))
        if code:
            return f"[Errno {code.group(1)}] {os.strerror(int(code.group(1)))}"
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    chain = [error]  # to the root cause: tensorstore's words, not orbax's repr of its spec
    while (cause := chain[-1].__cause__ or chain[-1].__context__) and cause not in chain:
        chain.append(cause)
    text = str(chain[-1]).strip().splitlines()
    return f"{type(chain[-1]).__name__}: {text[0][:300] if text else ''}"


def _flat(tree, prefix=()) -> dict[tuple, object]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items()
                for k, v in _flat(sub, prefix + (str(key),)).items()}
    return {prefix: tree}


def _stored_shape(target) -> tuple:
    """The shape an array is stored with: a typed PRNG key is stored as its raw key data."""
    if jax.dtypes.issubdtype(target.dtype, jax.dtypes.prng_key):
        return tuple(jax.eval_shape(jax.random.key_data, target).shape)
    return tuple(target.shape)


def _mismatch(item: str, stored, target) -> str | None:
    """The first difference between a checkpoint item's array metadata and the restore target
    (None: it fits)."""
    stored, target = _flat(stored), _flat(target)
    missing = [k for k in target if k not in stored]
    extra = [k for k in stored if k not in target]
    shapes = [k for k in target
              if k in stored and tuple(stored[k].shape) != _stored_shape(target[k])]
    problems = len(missing) + len(extra) + len(shapes)
    if not problems:
        return None
    more = f" (and {problems - 1} more differences)" if problems > 1 else ""
    name = lambda k: "/".join((item,) + k)
    if shapes:
        k = shapes[0]
        first = (f"{name(k)} is {tuple(stored[k].shape)} on disk, the model has "
                 f"{_stored_shape(target[k])}")
    elif missing:
        first = f"{name(missing[0])} is not in the checkpoint"
    else:
        first = f"{name(extra[0])} is in the checkpoint but not in the model"
    return first + more


class _HoldBackOrbaxErrors(logging.Filter):
    """Drops orbax's error logs, and asyncio's "Task exception was never retrieved" for orbax's
    other write tasks: each repeats, as a traceback, a failure that Checkpoints raises as one
    line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        return "orbax" not in record.pathname and "orbax" not in record.getMessage()


def _drop_closed_event_loop(previous):
    """When a background write fails, orbax closes its event loop while tensorstore still finishes
    the other writes; each then reports "RuntimeError: Event loop is closed" as an unraisable
    exception, before and after the failure reaches the caller. An unraisablehook that drops exactly
    those."""

    def hook(unraisable):
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            previous(unraisable)

    hook.drops_closed_event_loop = True
    return hook


def _quiet_orbax_noise() -> None:
    """Install these (once per process): a failed write is then one CheckpointError and nothing
    else."""
    if not getattr(sys.unraisablehook, "drops_closed_event_loop", False):
        sys.unraisablehook = _drop_closed_event_loop(sys.unraisablehook)
    for logger in (logging.getLogger("absl"), logging.getLogger("asyncio")):
        if not any(isinstance(f, _HoldBackOrbaxErrors) for f in logger.filters):
            logger.addFilter(_HoldBackOrbaxErrors())
    # the write tasks a failure cancels before they ran
    warnings.filterwarnings("ignore", message="coroutine 'async_serialize_from_host",
                            category=RuntimeWarning)


class Checkpoints:
    def __init__(self, directory: str | Path, *, every: int = 100, keep: int | None = 3,
                 state_filter=...):
        self.directory = Path(directory).expanduser().absolute()  # orbax wants absolute paths
        self.every, self.state_filter = every, state_filter
        # create=False: a mistyped restore path should fail loudly, not leave an empty folder
        # behind. Saving is decided here (step % every), so orbax's own interval policy is not used.
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=False)
        # known up front, so item_metadata can read shapes
        handlers = {"model": ocp.StandardCheckpointHandler(),
                    "optimizer": ocp.StandardCheckpointHandler(),
                    "meta": ocp.JsonCheckpointHandler()}
        self.manager = ocp.CheckpointManager(self.directory, options=options,
                                             item_handlers=handlers)
        self._writing: int | None = None  # the step whose background write may still be running
        self._failed = False
        _quiet_orbax_noise()

    def _error(self, step: int | None, error: BaseException,
               doing: str = "write") -> CheckpointError:
        self._failed = True
        where = self.directory / str(step) if step is not None else self.directory
        return CheckpointError(f"could not {doing} checkpoint {where}: {_os_reason(error)}")

    @property
    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, model: nnx.Module, optimizer: nnx.Optimizer | None = None, *,
             meta: dict | None = None, force: bool = False) -> bool:
        """Write a checkpoint if `step` is a multiple of `every` (or `force`); True if one was
        started. The write finishes in the background: call `wait()` before reading it from another
        process."""
        self.wait()  # a failed earlier write is reported as itself, naming its own step
        if not (force or step % self.every == 0) or step in self.steps:
            return False
        items = {"model": ocp.args.StandardSave(
                     nnx.to_pure_dict(nnx.state(model, self.state_filter))),
                 "meta": ocp.args.JsonSave(_snapshot({"step": step} | (meta or {})))}
        if optimizer is not None:
            items["optimizer"] = ocp.args.StandardSave(nnx.to_pure_dict(nnx.state(optimizer)))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            started = self.manager.save(step, args=ocp.args.Composite(**items), force=True)
        except Exception as e:
            raise self._error(step, e) from None
        self._writing = step if started else None
        return started

    def restore(self, model: nnx.Module, optimizer: nnx.Optimizer | None = None, *,
                step: int | None = None) -> dict:
        """Load checkpoint `step` (default: the latest) into `model` (and `optimizer`) in place;
        returns meta."""
        self.wait()
        steps = self.steps
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}: looked for step folders "
                                    f"({self.directory}/<step>/ holding model, optimizer and meta)")
        step = steps[-1] if step is None else step
        if step not in steps:
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}; it has "
                                    f"steps {steps}")
        owners = {"model": (model, nnx.state(model, self.state_filter))}
        if optimizer is not None:
            owners["optimizer"] = (optimizer, nnx.state(optimizer))
        targets = {name: _abstract(state) for name, (_, state) in owners.items()}
        try:
            restored = self._read(step, targets)
        except _Unreadable as e:
            raise self._unreadable(step, e.__cause__, targets) from None
        for name, (owner, state) in owners.items():
            placed = jax.tree.map(_placed_like, restored[name], nnx.to_pure_dict(state))
            nnx.replace_by_pure_dict(state, placed)
            nnx.update(owner, state)
        return restored["meta"]

    def _read(self, step: int, targets: dict) -> dict:
        """Checkpoint `step` read into `targets`' shapes; _Unreadable if its files do not read."""
        self._check_fits(step, targets)
        items = {name: ocp.args.StandardRestore(target) for name, target in targets.items()}
        items["meta"] = ocp.args.JsonRestore()
        try:
            return self.manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as e:
            raise _Unreadable from e

    def _unreadable(self, step: int, error: BaseException, targets: dict) -> UnreadableCheckpoint:
        """The read error, offering the newest earlier checkpoint that reads in full."""
        return UnreadableCheckpoint(self.directory, step, _os_reason(error),
                                    self._newest_readable(before=step, targets=targets))

    def _newest_readable(self, *, before: int, targets: dict) -> int | None:
        for earlier in reversed([s for s in self.steps if s < before]):
            try:
                self._read(earlier, targets)
            except (_Unreadable, CheckpointError):
                continue
            return earlier
        return None

    def delete(self, step: int) -> None:
        """Remove checkpoint `step` from disk, e.g. one that does not read, so a resumed run can
        write that step again (`save` skips a step that exists)."""
        self.manager.delete(step)

    def _check_fits(self, step: int, targets: dict) -> None:
        """CheckpointError naming the first array that differs, before orbax reads (and fails on)
        any of them."""
        try:
            stored = self.manager.item_metadata(step)
        except Exception as e:
            raise _Unreadable from e
        for item, target in targets.items():
            if stored.get(item) is None:
                raise CheckpointError(f"checkpoint {self.directory / str(step)} has no {item!r} "
                                      "item; it was not written by this kind of run")
            problem = _mismatch(item, dict(stored[item]), target)
            if problem:
                raise CheckpointError(f"checkpoint {self.directory / str(step)} does not fit this "
                                      f"model: {problem}. It was written for another model or "
                                      "config; use another output_dir")

    def wait(self):
        """Block until background writes are on disk (CheckpointError if one failed)."""
        try:
            self.manager.wait_until_finished()
        except Exception as e:
            raise self._error(self._writing, e) from None
        self._writing = None

    def close(self):
        """Finish background writes and release the manager; a failure already reported is not
        raised again."""
        try:
            self.manager.close()
        except Exception as e:
            if not self._failed:
                raise self._error(self._writing, e) from None


def run_state(wrt) -> nnx.Any:
    """What a training run checkpoints of its model: the variables it trains (`wrt`) plus RNG state
    (LoRA dropout), so a resumed run continues bit for bit."""
    return nnx.Any(wrt, nnx.RngState)


def _snapshot(meta: dict) -> dict:
    """A deep copy of `meta` as JSON reads it back. Orbax serializes meta in its background write,
    after `save` returns, so the live history list the trainer keeps appending to would otherwise
    reach the file with later steps in it (a resumed run then numbered its steps wrongly)."""
    return json.loads(json.dumps(meta))
