"""The trainer core: a model, an optax optimizer, and a pure loss `loss_fn(model, batch) -> (loss, metrics)`.

The trainer never knows which algorithm it runs: SFT, DPO, GRPO and distillation differ only in `loss_fn`
(and in the batch keys it reads). `wrt` chooses which variables train: nnx.Param for full fine-tuning,
nnx.LoRAParam for adapters.

- Compile once: batches are fixed rectangles of numeric arrays; a short last batch is zero-padded
  (`pad_batch`), so one compiled step serves the whole run.
- Exact gradient accumulation: each batch is split into `micro_batches` pieces inside the one jitted step
  (a `lax.scan`, so compile time does not grow with their number). A loss that is a mean over tokens
  reports their count as metrics["tokens"]; micro-batch i then counts with weight n_i, and the step's
  gradient is sum_i n_i * grad(loss_i) / sum_i n_i, the gradient of the big batch's token mean. Losses
  without "tokens" (a mean over pairs or sequences) weigh micro-batches equally, which is exact when they
  hold the same number of examples. So report "tokens" only if your loss is a mean over those tokens.
- Metrics come back as floats in `history` (one dict per step): each is the weighted mean over
  micro-batches, except "tokens", which is the total.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

if TYPE_CHECKING:  # orbax is a slow import; only checkpointing runs need it
    from tunix_lite.training.checkpoint import Checkpoints

LossFn = Callable[[nnx.Module, dict], tuple[jax.Array, dict]]


def adamw_cosine(peak_lr: float, total_steps: int, *, warmup_steps: int = 0, weight_decay: float = 0.01,
                 clip_norm: float | None = 1.0, b2: float = 0.95) -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay to 10% of the peak, after global-norm clipping."""
    if warmup_steps >= total_steps:
        raise ValueError(f"warmup_steps={warmup_steps} must be less than the total steps={total_steps}")
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak_lr, max(warmup_steps, 1), max(total_steps, 2),
                                                  end_value=peak_lr * 0.1)
    adamw = optax.adamw(schedule, b2=b2, weight_decay=weight_decay)
    return optax.chain(optax.clip_by_global_norm(clip_norm), adamw) if clip_norm else adamw


def check_batch(batch: dict) -> dict:
    """Only numeric arrays with the same number of rows may reach jit (per-token keys are [B, T], per-row
    keys such as DPO's or GRPO's may be [B]): say which key is wrong, not a trace dump."""
    rows = None
    for key, value in batch.items():
        array = value if hasattr(value, "dtype") else np.asarray(value)  # no device-to-host copy
        if array.dtype.kind not in "iufb":
            raise TypeError(f"batch[{key!r}] has dtype {array.dtype}; only numeric arrays can be traced "
                            "(tokenize strings and pad ragged rows to one length before batching)")
        if array.ndim == 0:
            raise ValueError(f"batch[{key!r}] is a scalar; every batch entry needs a leading row dimension")
        if rows is not None and array.shape[0] != rows:
            raise ValueError(f"batch[{key!r}] has shape {array.shape}: {array.shape[0]} rows, expected {rows}")
        rows = array.shape[0] if rows is None else rows
    return batch


def pad_batch(batch: dict, rows: int) -> dict:
    """Zero-pad every array's leading (row) dimension to `rows`. Padded rows have zero weights and masks,
    so they add nothing to a masked loss, and the batch keeps the shape the step was compiled for."""
    def pad(x):
        x = np.asarray(x)
        if x.shape[0] > rows:
            raise ValueError(f"batch has {x.shape[0]} rows, more than the {rows} it should be padded to")
        return np.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1))
    return {key: pad(value) for key, value in batch.items()}


def split_micro_batches(batch: dict, k: int) -> dict:
    """[k*B, ...] -> [k, B, ...]. Micro-batch i takes rows i, i+k, i+2k, ... so that, on a mesh, each
    micro-batch keeps rows on every data shard (a plain reshape would give micro-batch 0 the first shards)."""
    return {key: x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1) for key, x in batch.items()}


def combine_micro_metrics(metrics: dict, weights: jax.Array) -> dict:
    """Per-micro-batch metrics [k] -> the weighted mean (the big batch's value for a token mean);
    "tokens" adds up."""
    total = jnp.sum(weights)
    out = {key: jnp.sum(weights * value) / jnp.where(total > 0, total, 1.0) for key, value in metrics.items()}
    return out | ({"tokens": total} if "tokens" in metrics else {})


@partial(nnx.jit, static_argnames=("loss_fn", "wrt", "micro_batches"))
def train_step(model, optimizer, batch, *, loss_fn: LossFn, wrt, micro_batches: int) -> dict:
    """One update: the weighted sum of the micro-batches' gradients, then the optimizer. Compiled once per
    model/optimizer structure, loss and batch shape (new Trainers with the same ones reuse it)."""
    graphdef, params, rest = nnx.split(model, wrt, ...)
    grad_fn = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, wrt), has_aux=True)

    def accumulate(carry, micro_batch):
        grad_sum, rest = carry  # rest: the state that does not train (e.g. dropout RNG counters) carried along
        model = nnx.merge(graphdef, params, rest, copy=True)  # copy: fresh Variables inside the scan's trace
        (_, metrics), grads = grad_fn(model, micro_batch)
        weight = jnp.asarray(metrics.get("tokens", 1.0), jnp.float32)
        grad_sum = jax.tree.map(lambda s, g: s + weight * g, grad_sum, grads)
        return (grad_sum, nnx.split(model, wrt, ...)[2]), (metrics, weight)

    zeros = jax.tree.map(jnp.zeros_like, params)
    (grad_sum, rest), (metrics, weights) = jax.lax.scan(accumulate, (zeros, rest),
                                                        split_micro_batches(batch, micro_batches))
    total = jnp.sum(weights)
    grads = jax.tree.map(lambda g: g / jnp.where(total > 0, total, 1.0), grad_sum)
    nnx.update(model, rest)
    optimizer.update(model, grads)
    return combine_micro_metrics(metrics, weights) | {"grad_norm": optax.tree.norm(grads)}


class Trainer:
    """Train `model` on `loss_fn` with optax `tx`; see the module docstring for the conventions."""

    def __init__(self, model: nnx.Module, tx: optax.GradientTransformation, loss_fn: LossFn, *,
                 wrt=nnx.Param, micro_batches: int = 1):
        self.model, self.loss_fn, self.wrt, self.micro_batches = model, loss_fn, wrt, micro_batches
        self.optimizer = nnx.Optimizer(model, tx, wrt=wrt)
        self.history: list[dict] = []
        self._rows = None  # the batch rows the step was compiled for; shorter batches get padded

    def step(self, batch: dict) -> dict:
        """One optimizer update on `batch`; returns (and appends to history) its metrics as floats."""
        batch = check_batch(batch)
        rows = len(next(iter(batch.values())))
        self._rows = self._rows or rows
        if rows < self._rows:  # the last, short batch: pad instead of compiling a second step
            batch, rows = pad_batch(batch, self._rows), self._rows
        if rows % self.micro_batches:
            raise ValueError(f"a batch of {rows} rows cannot be split into {self.micro_batches} micro-batches")
        metrics = train_step(self.model, self.optimizer, batch, loss_fn=self.loss_fn, wrt=self.wrt,
                             micro_batches=self.micro_batches)
        step = len(self.history) + 1
        metrics = {"step": step} | {k: float(v) for k, v in metrics.items()}
        for key in ("loss", "grad_norm"):
            if not np.isfinite(metrics[key]):
                raise FloatingPointError(f"{key} became {metrics[key]} at step {step}; lower the learning rate "
                                         "or check the data (the parameters now hold non-finite values)")
        self.history.append(metrics)
        return metrics

    def fit(self, batches: Iterable[dict], steps: int, *, log_every: int = 10, desc: str = "train",
            eval_fn: Callable[[nnx.Module], dict] | None = None, eval_every: int = 0,
            checkpoints: Checkpoints | None = None, loggers: Iterable[Callable[[dict], None]] = ()) -> list[dict]:
        """Run `steps` steps (fewer if `batches` runs out).

        eval_fn(model) -> {name: number} runs every `eval_every` steps and after the last one; its results
        join that step's history entry as "eval_<name>". `checkpoints` saves every `checkpoints.every`
        steps and after the last one. Each of `loggers` gets every step's metrics (see metrics_log).
        """
        bar = tqdm(range(steps), desc=desc)
        last = len(self.history) + steps
        for _, batch in zip(bar, batches):
            metrics = self.step(batch)
            if eval_fn is not None and eval_every and (metrics["step"] % eval_every == 0 or metrics["step"] == last):
                metrics.update({f"eval_{k}": float(v) for k, v in eval_fn(self.model).items()})
            for log in loggers:
                log(metrics)
            if checkpoints is not None:
                self.save(checkpoints)
            if metrics["step"] % log_every == 0:
                bar.set_postfix(loss=f"{metrics['loss']:.3f}")
        if checkpoints is not None and self.history:
            self.save(checkpoints, force=True)
            checkpoints.wait()
        return self.history

    def save(self, checkpoints: Checkpoints, *, force: bool = False) -> bool:
        """Save model, optimizer and history at the current step if it is due (or `force`)."""
        step = len(self.history)
        return checkpoints.save(step, self.model, self.optimizer, meta={"history": self.history}, force=force)

    def restore(self, checkpoints: Checkpoints, step: int | None = None) -> int:
        """Load a checkpoint (the latest by default) into this trainer; returns its step. The trainer takes
        one batch per step, so resume the data stream at batch index `step`."""
        meta = checkpoints.restore(self.model, self.optimizer, step=step)
        self.history = meta["history"]
        return meta["step"]


_eval_metrics = nnx.jit(lambda model, batch, loss_fn: loss_fn(model, batch)[1], static_argnums=2)


def evaluate(model: nnx.Module, loss_fn: LossFn, batches: Iterable[dict]) -> dict:
    """loss_fn's metrics over `batches` without training, combined as for micro-batches (weighted by
    "tokens" when reported). Short batches are padded; `loss_fn` is a static argument, so pass the same
    function object each time (a new lambda or partial compiles again)."""
    per_batch, rows = [], None
    for batch in batches:
        batch = check_batch(batch)
        rows = rows or len(next(iter(batch.values())))
        per_batch.append(_eval_metrics(model, pad_batch(batch, rows), loss_fn))
    if not per_batch:
        raise ValueError("evaluate got no batches")
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *per_batch)
    weights = stacked.get("tokens", jnp.ones(len(per_batch)))
    return {k: float(v) for k, v in combine_micro_metrics(stacked, weights).items()}


def plot_history(history: list[dict], keys=("loss",), *, title: str | None = None):
    """Plot history keys against the step (eval keys only where they were measured); returns the Figure."""
    from matplotlib.figure import Figure  # not pyplot: no global state, shown once in a notebook

    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    for key in [keys] if isinstance(keys, str) else keys:
        points = [(h["step"], h[key]) for h in history if key in h]
        if not points:
            raise KeyError(f"no history entry has {key!r}; keys seen: {sorted({k for h in history for k in h})}")
        ax.plot(*zip(*points), label=key, marker="o" if len(points) < 30 else None)
    ax.set_xlabel("step")
    ax.legend()
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig
