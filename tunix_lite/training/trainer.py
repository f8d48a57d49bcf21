"""The trainer core: a model, an optax optimizer, and a pure loss
`loss_fn(model, batch, frozen) -> (loss, metrics)`.

The trainer never knows which algorithm it runs: SFT, DPO, GRPO and distillation differ only in
`loss_fn`, in the batch keys it reads and in what `frozen` holds. `wrt` chooses which variables
train: nnx.Param for full fine-tuning, nnx.LoRAParam for adapters (plus, e.g., a value head: any nnx
filter).

The conventions every loss follows:

- **Exact means over any unit.** A loss is a mean over some units: tokens (SFT), pairs (DPO),
  sequences or tokens (GRPO). It reports how many units its mean is over as `metrics["count"]`, and
  padded rows count zero. The trainer weighs micro-batch i by its count n_i, so the step's gradient
  is sum_i n_i * grad(loss_i) / sum_i n_i: exactly the gradient of the whole batch's mean, however
  unevenly the units fall into micro-batches. Every other metric is combined with the same weights,
  and `evaluate` does the same over batches.
- **What goes where.** Small per-example values prepared once outside jit ride in the batch:
  reference log-probs [B], advantages [B], cached top-k teacher logits [B, T, k]. Big or
  per-micro-batch work (a reference policy or a teacher run on the micro-batch) reaches the loss
  through `frozen`, an argument of the compiled step: a module (or any pytree of modules and arrays)
  whose weights enter the program as inputs, never as constants baked in by a closure, and never as
  full-vocabulary logits in the batch (Gemma's 262k vocabulary x 4,096 tokens in float32 would be
  4.3 GB outside the micro-batch scan). `frozen` is never differentiated.
- **Compile once.** Batches are fixed rectangles of numeric arrays with rows first; a short last
  batch is zero-padded (`pad_batch`), so one compiled step serves the whole run. Micro-batches are
  split inside the one jitted step by a `lax.scan`, so compile time does not grow with their number.
- **One code path on any mesh.** `mesh=` (see tunix_lite.sharding) places the model and `frozen` by
  the rules before the optimizer state is built (so the state is sharded like the parameters),
  splits every padded batch's rows over the data-parallel axes, and runs the step under the mesh. A
  batch whose rows the mesh cannot split evenly is refused. With several processes every process
  passes the same global batch and places only its rows.
- **Metrics stay on the device** until the host needs them: `fit` reads them every `log_every` steps
  (and before an evaluation or a checkpoint), so the host never waits for a step it has just
  dispatched. A non-finite loss or gradient norm then stops training and names the step where it
  first appeared.
"""

from __future__ import annotations

import time
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from tunix_lite import sharding
from tunix_lite.quantize import QuantizedWeight

if TYPE_CHECKING:  # orbax is a slow import; only checkpointing runs need it
    from tunix_lite.training.checkpoint import Checkpoints

LossFn = Callable[[nnx.Module, dict, Any], tuple[jax.Array, dict]]
# the metric a loss reports: how many units (tokens, pairs, sequences) its mean is over
COUNT = "count"


# One object per setting: the optimizer is part of the step's compile key, so a rerun with the same
# settings (a notebook cell, a resumed run in the same process) reuses the compiled step.
@cache
def adamw_cosine(peak_lr: float, total_steps: int, *, warmup_steps: int = 0,
                 weight_decay: float = 0.01, clip_norm: float | None = 1.0,
                 b2: float = 0.95) -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay to 10% of the peak, after global-norm clipping."""
    if warmup_steps >= total_steps:
        raise ValueError(f"warmup_steps={warmup_steps} must be less than the total "
                         f"steps={total_steps}")
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak_lr, max(warmup_steps, 1),
                                                  max(total_steps, 2), end_value=peak_lr * 0.1)
    adamw = optax.adamw(schedule, b2=b2, weight_decay=weight_decay)
    return optax.chain(optax.clip_by_global_norm(clip_norm), adamw) if clip_norm else adamw


def check_batch(batch: dict) -> dict:
    """Only numeric arrays with the same number of rows may reach jit (per-token keys are [B, T],
    per-row keys such as DPO's or GRPO's may be [B]): say which key is wrong, not a trace dump."""
    rows = None
    for key, value in batch.items():
        array = value if hasattr(value, "dtype") else np.asarray(value)  # no device-to-host copy
        if array.dtype.kind not in "iufb":
            raise TypeError(f"batch[{key!r}] has dtype {array.dtype}; only numeric arrays can be "
                            "traced (tokenize strings and pad ragged rows to one length before "
                            "batching)")
        if array.ndim == 0:
            raise ValueError(f"batch[{key!r}] is a scalar; every batch entry needs a leading row "
                             "dimension")
        if rows is not None and array.shape[0] != rows:
            raise ValueError(f"batch[{key!r}] has shape {array.shape}: {array.shape[0]} rows, "
                             f"expected {rows}")
        rows = array.shape[0] if rows is None else rows
    return batch


def batch_rows(batch: dict) -> int:
    return len(next(iter(batch.values())))


def pad_batch(batch: dict, rows: int) -> dict:
    """Zero-pad every array's leading (row) dimension to `rows`. Padded rows have zero weights and
    masks, so they count zero in every loss, and the batch keeps the shape the step was compiled
    for."""
    def pad(x):
        x = np.asarray(x)
        if x.shape[0] > rows:
            raise ValueError(f"batch has {x.shape[0]} rows, more than the {rows} it should be "
                             "padded to")
        return np.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1))
    return {key: pad(value) for key, value in batch.items()}


def split_micro_batches(batch: dict, k: int) -> dict:
    """[k*B, ...] -> [k, B, ...]. Micro-batch i takes rows i, i+k, i+2k, ... so that, on a mesh,
    each micro-batch keeps rows on every data shard (a plain reshape would give micro-batch 0 the
    first shards)."""
    return {key: x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1)
            for key, x in batch.items()}


def combine_metrics(metrics: dict, counts: jax.Array) -> dict:
    """Per-piece metrics [k] -> the count-weighted mean over pieces (the whole batch's value for a
    mean over the units the loss counts); "count" adds up. Pieces with a zero count contribute
    nothing."""
    total = jnp.sum(counts)
    out = {key: jnp.sum(counts * value) / jnp.where(total > 0, total, 1.0)
           for key, value in metrics.items() if key != COUNT}
    return out | {COUNT: total}


def _count(metrics: dict) -> jax.Array:
    if COUNT not in metrics:
        raise KeyError(f"the loss must report metrics[{COUNT!r}], how many units (tokens, pairs, "
                       "sequences) its mean is over (0 for an all-padding batch); it reported "
                       f"{sorted(metrics)}")
    return jnp.asarray(metrics[COUNT], jnp.float32)


# Weights that never train in a step: a LoRA base, quantized or not. They enter the compiled step
# and never leave it, so the arrays stay the very ones a reference view (`without_adapters`) or a
# rollout copy shares; returning them would make XLA write a fresh copy of the whole base every
# step.
FIXED = nnx.Any(nnx.Param, QuantizedWeight)


def _train_step(graphdef, trained, fixed, carried, opt_graphdef, opt_state, frozen_graphdef,
                frozen_state, batch, *, loss_fn: LossFn, wrt, micro_batches: int):
    """One update as a pure function of the model's pieces: what trains (`wrt`), the fixed weights,
    and the state a forward pass may change (`carried`: dropout RNG counters), plus the optimizer's
    and `frozen`'s states. Returns (trained, carried, opt_state, metrics): only what changed leaves
    the program."""
    grad_fn = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, wrt), has_aux=True)

    def accumulate(carry, micro_batch):
        grad_sum, carried = carry
        # copy: fresh Variables in the scan's trace
        model = nnx.merge(graphdef, trained, fixed, carried, copy=True)
        frozen = nnx.merge(frozen_graphdef, frozen_state, copy=True)
        (_, metrics), grads = grad_fn(model, micro_batch, frozen)
        count = _count(metrics)
        grad_sum = jax.tree.map(lambda s, g: s + count * g, grad_sum, grads)
        return (grad_sum, nnx.split(model, wrt, FIXED, ...)[3]), metrics | {COUNT: count}

    zeros = jax.tree.map(jnp.zeros_like, trained)
    (grad_sum, carried), metrics = jax.lax.scan(accumulate, (zeros, carried),
                                                split_micro_batches(batch, micro_batches))
    total = jnp.sum(metrics[COUNT])
    grads = jax.tree.map(lambda g: g / jnp.where(total > 0, total, 1.0), grad_sum)
    model = nnx.merge(graphdef, trained, fixed, carried)
    optimizer = nnx.merge(opt_graphdef, opt_state)
    optimizer.update(model, grads)
    metrics = combine_metrics(metrics, metrics[COUNT]) | {"grad_norm": optax.tree.norm(grads)}
    return nnx.state(model, wrt), carried, nnx.state(optimizer), metrics


_train_step.__name__ = "train_step"  # what compile logs and profiles call it: jit(train_step)
_compiled_step = jax.jit(_train_step, static_argnames=("graphdef", "opt_graphdef",
                                                        "frozen_graphdef", "loss_fn", "wrt",
                                                        "micro_batches"))


def _step_args(model, optimizer, frozen, batch, wrt) -> tuple[tuple, dict]:
    graphdef, trained, fixed, carried = nnx.split(model, wrt, FIXED, ...)
    opt_graphdef, opt_state = nnx.split(optimizer)
    frozen_graphdef, frozen_state = nnx.split(frozen)
    return (trained, fixed, carried, opt_state, frozen_state, batch), dict(
        graphdef=graphdef, opt_graphdef=opt_graphdef, frozen_graphdef=frozen_graphdef)


def train_step(model, optimizer, frozen, batch, *, loss_fn: LossFn, wrt,
               micro_batches: int) -> dict:
    """One update of `model` and `optimizer` in place: the count-weighted sum of the micro-batches'
    gradients, then the optimizer. Compiled once per model/optimizer/frozen structure, loss and
    batch shape (new Trainers with the same ones reuse it). Returns the metrics (device scalars)."""
    (trained, fixed, carried, opt_state, frozen_state, batch), graphdefs = _step_args(
        model, optimizer, frozen, batch, wrt)
    trained, carried, opt_state, metrics = _compiled_step(
        trained=trained, fixed=fixed, carried=carried, opt_state=opt_state,
        frozen_state=frozen_state, batch=batch, loss_fn=loss_fn, wrt=wrt,
        micro_batches=micro_batches, **graphdefs)
    nnx.update(model, trained, carried)
    nnx.update(optimizer, opt_state)
    return metrics


def lower_train_step(model, optimizer, frozen, batch, *, loss_fn: LossFn, wrt, micro_batches: int):
    """The step's `jax.stages.Lowered` for these arguments: `.compile()` gives its HLO
    (`.as_text()`) and XLA's memory analysis (`.memory_analysis()`); a later step with the same
    shapes reuses that compile."""
    (trained, fixed, carried, opt_state, frozen_state, batch), graphdefs = _step_args(
        model, optimizer, frozen, batch, wrt)
    return _compiled_step.lower(trained=trained, fixed=fixed, carried=carried, opt_state=opt_state,
                                frozen_state=frozen_state, batch=batch, loss_fn=loss_fn, wrt=wrt,
                                micro_batches=micro_batches, **graphdefs)


class Trainer:
    """Train `model` on `loss_fn` with optax `tx`; see the module docstring for the conventions.

    frozen: what `loss_fn` receives as its third argument (None by default): a reference policy, a
    teacher, or a pytree of them. Put it in eval mode (no dropout): it is read, never updated.
    mesh: a jax Mesh with tunix_lite.sharding's axes (`sharding.resolve_mesh("fsdp")`, a course
    profile's `profile.mesh()`): the model and `frozen` are placed on it in place, arrays they share
    staying shared. Default: the mesh the model was already placed on (`sharding.shard_model`), if
    any.
    """

    def __init__(self, model: nnx.Module, tx: optax.GradientTransformation, loss_fn: LossFn, *,
                 wrt=nnx.Param, micro_batches: int = 1, frozen: Any = None,
                 mesh: jax.sharding.Mesh | None = None):
        if micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
        self.model, self.loss_fn, self.wrt, self.micro_batches = model, loss_fn, wrt, micro_batches
        # placed already: stay there
        self.mesh = mesh if mesh is not None else sharding.model_mesh(model)
        # before the optimizer: its moments are made like the parameters they follow
        if self.mesh is not None:
            sharding.shard_model((model, frozen), self.mesh)
        self.frozen = frozen
        self.optimizer = nnx.Optimizer(model, tx, wrt=wrt)
        # the moments are placed already; the step counter joins the mesh too
        if self.mesh is not None:
            sharding.shard_model((model, self.optimizer), self.mesh)
        self._history: list[dict] = []  # on the host: one dict of floats per step
        self._pending: list[dict] = []  # steps dispatched whose metrics are still on the device
        self._rows = None  # the batch rows the step was compiled for; shorter batches get padded

    @property
    def steps_done(self) -> int:
        return len(self._history) + len(self._pending)

    @property
    def history(self) -> list[dict]:
        """Every step's metrics as floats (reading it waits for the steps in flight)."""
        self.flush()
        return self._history

    def _prepare(self, batch: dict) -> dict:
        """Check, pad a short batch to the compiled rows, and split it over the mesh."""
        batch = check_batch(batch)
        rows = batch_rows(batch)
        self._rows = self._rows or rows
        if rows < self._rows:  # the last, short batch: pad instead of compiling a second step
            batch, rows = pad_batch(batch, self._rows), self._rows
        if rows % self.micro_batches:
            raise ValueError(f"a batch of {rows} rows cannot be split into {self.micro_batches} "
                             "micro-batches")
        shards = sharding.batch_shards(self.mesh)
        if rows % (self.micro_batches * shards):
            raise ValueError(f"a batch of {rows} rows cannot be split into {self.micro_batches} "
                             f"micro-batch(es) of whole rows on each of the mesh's {shards} data x "
                             "fsdp shards; use a batch size that is a multiple of "
                             f"{self.micro_batches * shards}")
        return sharding.shard_batch(batch, self.mesh) if self.mesh is not None else batch

    def step(self, batch: dict) -> dict:
        """Dispatch one optimizer update on `batch`; returns its metrics as device scalars without
        waiting for them (float() one to wait). `history` gets them at the next `flush`."""
        batch = self._prepare(batch)
        with sharding.use_mesh(self.mesh):
            metrics = train_step(self.model, self.optimizer, self.frozen, batch,
                                 loss_fn=self.loss_fn, wrt=self.wrt,
                                 micro_batches=self.micro_batches)
        metrics = {"step": self.steps_done + 1} | metrics
        self._pending.append(metrics)
        return metrics

    def lower(self, batch: dict):
        """The compiled-to-be step for `batch` (`jax.stages.Lowered`): `.compile().as_text()` is its
        HLO (the collectives a mesh implies), `.compile().memory_analysis()` XLA's memory plan. The
        next `step` on a batch of this shape reuses the compile."""
        batch = self._prepare(batch)
        with sharding.use_mesh(self.mesh):
            return lower_train_step(self.model, self.optimizer, self.frozen, batch,
                                    loss_fn=self.loss_fn, wrt=self.wrt,
                                    micro_batches=self.micro_batches)

    def flush(self) -> list[dict]:
        """Bring the pending steps' metrics to the host (one transfer), append them to history and
        return them. A non-finite loss or gradient norm raises FloatingPointError naming the first
        step where it appeared; history then ends just before that step."""
        if not self._pending:
            return []
        pending, self._pending = jax.device_get(self._pending), []
        new = [{k: (v if k == "step" else float(v)) for k, v in m.items()} for m in pending]
        for i, metrics in enumerate(new):
            for key in ("loss", "grad_norm"):
                if not np.isfinite(metrics[key]):
                    self._history.extend(new[:i])
                    seen = f" (noticed at step {new[-1]['step']})" if i < len(new) - 1 else ""
                    raise FloatingPointError(
                        f"{key} became {metrics[key]} at step {metrics['step']}{seen}; lower "
                        "the learning rate or check the data (the parameters now hold non-finite "
                        "values)")
        self._history.extend(new)
        return new

    def fit(self, batches: Iterable[dict], steps: int, *, log_every: int = 10, desc: str = "train",
            eval_fn: Callable[[nnx.Module], dict] | None = None, eval_every: int = 0,
            checkpoints: Checkpoints | None = None, loggers: Iterable[Callable[[dict], None]] = (),
            meta: Callable[[], dict] | None = None,
            host_metrics: Callable[[int], dict] | None = None,
            show: Sequence[str] = ("loss",), deadline: float | None = None) -> list[dict]:
        """Run `steps` steps (fewer if `batches` runs out or the `deadline` passes); returns the
        history.

        eval_fn(model) -> {name: number} runs every `eval_every` steps (0: never in between) and
        always after the last one; its results join that step's history entry as "eval_<name>".
        `checkpoints` saves every `checkpoints.every` steps and after the last one (with `meta()`'s
        dict beside the history). Each of `loggers` gets every step's metrics when they reach the
        host (see metrics_log). host_metrics(step) -> {name: number}: values the host knew when it
        made that step's batch (an RL rollout's rewards and lengths), joined to the step's entry as
        they are. `show`: the entry's keys on the progress bar. deadline: a time.monotonic() value;
        the first step that ends after it is the last (at least one step runs, so every session
        makes progress), and the checkpoint after the last step is saved as usual, so a wall-clock
        budget ends in a checkpoint to resume from.
        """
        if log_every < 1:
            raise ValueError(f"log_every must be >= 1, got {log_every}")
        bar = tqdm(total=steps, desc=desc, disable=not sharding.is_main_process())
        last = self.steps_done + steps

        def arrived(new: list[dict]) -> None:
            for entry in new:
                entry.update(host_metrics(entry["step"]) if host_metrics else {})
                for log in loggers:
                    log(entry)

        try:
            for _, batch in zip(range(steps), batches):
                step = self.step(batch)["step"]
                evaluate_now = eval_fn is not None and ((eval_every and step % eval_every == 0)
                                                        or step == last)
                save_now = checkpoints is not None and step % checkpoints.every == 0
                if evaluate_now or save_now or step % log_every == 0 or step == last:
                    new = self.flush()
                    if evaluate_now:
                        new[-1].update({f"eval_{k}": float(v)
                                        for k, v in eval_fn(self.model).items()})
                    arrived(new)
                    if save_now:
                        self.save(checkpoints, meta=meta)
                    bar.update(len(new))
                    bar.set_postfix({k: f"{new[-1][k]:.3f}" for k in show if k in new[-1]})
                if deadline is not None and time.monotonic() >= deadline:
                    break
            arrived(self.flush())  # `batches` ran out before `steps`
        finally:
            bar.close()
        if checkpoints is not None and self._history:
            self.save(checkpoints, force=True, meta=meta)
            checkpoints.wait()
        return self._history

    def save(self, checkpoints: Checkpoints, *, force: bool = False,
             meta: Callable[[], dict] | None = None) -> bool:
        """Save model, optimizer and history at the current step if it is due (or `force`)."""
        history = self.history
        extra = meta() if meta is not None else {}
        return checkpoints.save(len(history), self.model, self.optimizer,
                                meta={"history": history} | extra, force=force)

    def restore(self, checkpoints: Checkpoints, step: int | None = None) -> dict:
        """Load a checkpoint (the latest by default) into this trainer; returns its meta ("step",
        "history", and what `fit`'s `meta` added). The trainer takes one batch per step, so resume
        the data stream at batch index meta["step"]."""
        self.flush()
        meta = checkpoints.restore(self.model, self.optimizer, step=step)
        self._history = meta["history"]
        return meta


def _eval_metrics(graphdef, state, frozen_graphdef, frozen_state, batch, loss_fn):
    return loss_fn(nnx.merge(graphdef, state), batch, nnx.merge(frozen_graphdef, frozen_state))[1]


_eval_metrics = jax.jit(_eval_metrics, static_argnames=("graphdef", "frozen_graphdef", "loss_fn"))


def evaluate(model: nnx.Module, loss_fn: LossFn, batches: Iterable[dict], *, frozen: Any = None,
             mesh: jax.sharding.Mesh | None = None) -> dict:
    """loss_fn's metrics over `batches` without training, weighted by each batch's count as in a
    step (so the result is the mean over every unit of every batch). Short batches are padded;
    `loss_fn` is a static argument, so pass the same function object each time (a new lambda or
    partial compiles again). mesh: the mesh to evaluate on (default: the one `model` was placed on,
    if any, e.g. by a Trainer): each batch's rows are split over it (padded to a multiple of its
    data-parallel shards)."""
    mesh = mesh if mesh is not None else sharding.model_mesh(model)
    per_batch, rows = [], None
    shards = sharding.batch_shards(mesh)
    for batch in batches:
        batch = check_batch(batch)
        rows = rows or -(-batch_rows(batch) // shards) * shards
        batch = pad_batch(batch, rows)
        if mesh is not None:
            batch = sharding.shard_batch(batch, mesh)
        with sharding.use_mesh(mesh):
            per_batch.append(_eval_metrics(*nnx.split(model), *nnx.split(frozen), batch,
                                           loss_fn=loss_fn))
    if not per_batch:
        raise ValueError("evaluate got no batches")
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *per_batch)
    return {k: float(v) for k, v in combine_metrics(stacked, _count(stacked)).items()}


def score_batch(fn: Callable, model: nnx.Module, *arrays, **options):
    """fn(model, *arrays, **options) compiled once per function, options (static: ints, bools,
    None) and array shapes: what a model says about a batch outside a train step, with no gradient
    (a reference's or the old policy's log-probs, a reward model's scores). `fn` is part of the
    compile key: pass a module-level function, not a new lambda or partial. The model runs as it
    is: call model.eval() first for dropout off."""
    return _score_batch(model, arrays, fn=fn, options=tuple(sorted(options.items())))


@partial(nnx.jit, static_argnames=("fn", "options"))
def _score_batch(model, arrays, fn, options):
    return fn(model, *arrays, **dict(options))
