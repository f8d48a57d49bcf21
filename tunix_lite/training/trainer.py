"""The trainer core: a model, an optax optimizer, and a pure loss `loss_fn(model, batch) -> (loss, metrics)`.

The step is compiled once (batches are fixed rectangles of integer arrays); `wrt` chooses which
variables train (nnx.Param for full fine-tuning, nnx.LoRAParam for adapters).
"""

from __future__ import annotations

from typing import Callable, Iterable

import jax
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

LossFn = Callable[[nnx.Module, dict], tuple[jax.Array, dict]]


def adamw_cosine(peak_lr: float, total_steps: int, *, warmup_steps: int = 0, weight_decay: float = 0.01,
                 clip_norm: float | None = 1.0, b2: float = 0.95) -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay to 10% of the peak, after global-norm clipping."""
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak_lr, max(warmup_steps, 1), max(total_steps, 2),
                                                  end_value=peak_lr * 0.1)
    adamw = optax.adamw(schedule, b2=b2, weight_decay=weight_decay)
    return optax.chain(optax.clip_by_global_norm(clip_norm), adamw) if clip_norm else adamw


def check_batch(batch: dict) -> dict:
    """Only integer/float arrays of one shape may reach jit: say which key is wrong, not a trace dump."""
    shape = None
    for key, value in batch.items():
        array = np.asarray(value)
        if array.dtype.kind not in "iufb":
            raise TypeError(f"batch[{key!r}] has dtype {array.dtype}; only numeric arrays can be traced "
                            "(tokenize strings before batching)")
        if shape is not None and array.shape[:2] != shape:
            raise ValueError(f"batch[{key!r}] has shape {array.shape}, expected leading dims {shape}")
        shape = shape or array.shape[:2]
    return batch


class Trainer:
    def __init__(self, model: nnx.Module, tx: optax.GradientTransformation, loss_fn: LossFn, *, wrt=nnx.Param):
        self.model, self.loss_fn = model, loss_fn
        self.optimizer = nnx.Optimizer(model, tx, wrt=wrt)
        self.history: list[dict] = []

        @nnx.jit
        def train_step(model, optimizer, batch):
            grad_fn = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, wrt), has_aux=True)
            (_, metrics), grads = grad_fn(model, batch)
            optimizer.update(model, grads)
            return metrics | {"grad_norm": optax.tree.norm(grads)}

        self._train_step = train_step

    def step(self, batch: dict) -> dict:
        metrics = self._train_step(self.model, self.optimizer, check_batch(batch))
        metrics = {k: float(v) for k, v in metrics.items()}
        if not np.isfinite(metrics["loss"]):
            raise FloatingPointError(f"loss became {metrics['loss']} at step {len(self.history)}; "
                                     "lower the learning rate or check the data")
        self.history.append(metrics)
        return metrics

    def fit(self, batches: Iterable[dict], steps: int, *, log_every: int = 10, desc: str = "train") -> list[dict]:
        bar = tqdm(range(steps), desc=desc)
        for _, batch in zip(bar, batches):
            metrics = self.step(batch)
            if len(self.history) % log_every == 0:
                bar.set_postfix(loss=f"{metrics['loss']:.3f}")
        return self.history
