"""Deterministic, resumable batches: examples in, fixed-size batches of numeric rows out.

    batches = Batches(len(data), rows_fn, batch_size=16, seed=0)
    for batch in batches.stream(start=step):  # resume at step `step` of a run that took one
                                              # batch per step
        trainer.step(batch)

Every algorithm's data goes through this one stream: SFT's padded or packed rows, DPO's pairs,
distillation's cached teacher outputs. `rows_fn(order)` turns the examples at `order` into a dict of
arrays with rows first; `extras` are per-example arrays (e.g. reference log-probs [n, 2] or a top-k
teacher cache [n, T, k]) that ride beside the rows, indexed by the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

RowsFn = Callable[[Sequence[int]], dict[str, np.ndarray]]


class Batches:
    """Epoch e visits the examples in a permutation seeded by (seed, e) (in order when not
    `shuffle`).

    Every batch has `batch_size` rows except an epoch's last, which may be shorter (the trainer pads
    it, so its step does not compile again); `drop_last` skips it instead.
    """

    def __init__(self, n_examples: int, rows_fn: RowsFn, batch_size: int, *, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False,
                 extras: Mapping[str, np.ndarray] | None = None):
        if n_examples < 1:
            raise ValueError("no examples to batch")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for key, values in (extras or {}).items():
            if len(values) != n_examples:
                raise ValueError(f"extras[{key!r}] has {len(values)} entries for {n_examples} "
                                 "examples")
        self.n, self.rows_fn, self.batch_size, self.seed = n_examples, rows_fn, batch_size, seed
        self.shuffle, self.drop_last, self.extras = shuffle, drop_last, dict(extras or {})

    def order(self, epoch: int) -> np.ndarray:
        """The example indices of one epoch, in visiting order."""
        return (np.random.default_rng([self.seed, epoch]).permutation(self.n) if self.shuffle
                else np.arange(self.n))

    def epoch_rows(self, epoch: int) -> dict[str, np.ndarray]:
        """All rows of one epoch, in order, extras included."""
        order = self.order(epoch)
        rows = self.rows_fn(order)
        if self.extras:
            if len(next(iter(rows.values()))) != len(order):
                raise ValueError("per-example extras need one row per example (no packing)")
            rows |= {key: np.asarray(values)[order] for key, values in self.extras.items()}
        return rows

    def epoch(self, epoch: int) -> list[dict[str, np.ndarray]]:
        rows = self.epoch_rows(epoch)
        total = len(next(iter(rows.values())))
        stop = total - total % self.batch_size if self.drop_last else total
        return [{k: v[i:i + self.batch_size] for k, v in rows.items()}
                for i in range(0, stop, self.batch_size)]

    def stream(self, start: int = 0, epochs: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Batches epoch after epoch (forever unless `epochs`), skipping the first `start`: resuming
        at step s of a run that took one batch per step continues exactly where it stopped."""
        epoch, skipped = 0, 0
        while epochs is None or epoch < epochs:
            batches = self.epoch(epoch)
            if not batches:
                raise ValueError(f"an epoch has no full batch of {self.batch_size} rows "
                                 "(drop_last=True)")
            if skipped + len(batches) <= start:  # the whole epoch lies before the resume point
                skipped += len(batches)
            else:
                yield from batches[start - skipped:] if skipped < start else batches
                skipped = start
            epoch += 1
