"""The student's side: a smaller model cut from a bigger one, which layers face which, and the
feature projection.

    keep_layers(model, [0, 5])                   # a 2-layer model from a 6-layer one
                                                 # (DistilBERT's initialisation)
    path = prune_blocks(model, loss_fn, keep=4)  # or the 4 blocks it misses least, found on
                                                 # held-out data
    layer_map = uniform_layer_map(2, 6)          # {0: 2, 1: 5}: student block i learns from
                                                 # teacher block m(i)
    model = WithProjection(student, teacher_dim=..., pairs=len(layer_map), rngs=...)
                                                 # trained beside it
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import jax.numpy as jnp
from flax import nnx


def keep_layers(model: nnx.Module, layers: list[int]) -> nnx.Module:
    """Keep only the blocks at `layers` (in that order), in place; embeddings, final norm and head
    stay. Returns the model, whose config now says len(layers) layers.

    Sanh et al. (2019, DistilBERT) initialise a half-depth student with every other teacher layer;
    any subset works. A kept block takes the attention kind (sliding-window or global) of its new
    index, so the model is exactly what its config describes and exports as (the same thing when the
    window covers the sequence).
    """
    total = model.config.num_layers
    if not layers or any(not 0 <= i < total for i in layers) or len(set(layers)) != len(layers):
        raise ValueError(f"layers must be distinct block indices in [0, {total}), got {layers}")
    config = model.config.replace(num_layers=len(layers))
    blocks = [model.layers[i] for i in layers]
    for new_index, block in enumerate(blocks):
        block.attn.is_global = config.is_global(new_index)
    model.layers = nnx.List(blocks)
    model.config = config
    return model


@contextlib.contextmanager
def blocks_kept(model: nnx.Module, layers: list[int]):
    """`keep_layers` for the duration of a `with` block; the model has all its blocks again
    afterwards."""
    blocks, config = model.layers, model.config
    kinds = [block.attn.is_global for block in blocks]
    keep_layers(model, layers)
    try:
        yield model
    finally:
        model.layers, model.config = blocks, config
        for block, is_global in zip(blocks, kinds):
            block.attn.is_global = is_global


def prune_blocks(model: nnx.Module, loss_fn: Callable[[nnx.Module], float],
                 keep: int) -> list[tuple[list[int], float]]:
    """Which blocks can a student cut from `model` do without? Greedy depth pruning by measured
    importance: from all blocks, remove the one whose absence raises `loss_fn` least, and again,
    until `keep` are left.

    loss_fn(model) -> a held-out loss (the validation split's, never the test split's: this is a
    choice). Returns the path [(kept blocks, loss)], from every block to the `keep` chosen ones:
    `path[-1][0]` is the student's `student_layers`. The model is left with all its blocks. Costs
    about L^2 / 2 evaluations.

    Minitron (Muralidharan et al. 2024) ranks blocks by the LM loss without each, ShortGPT (Men et
    al. 2024) by how little a block changes its input; both prune once by that ranking. Removing one
    block at a time and measuring again costs more and sees interactions: two blocks can each be
    spared, but not both. An evenly spaced cut (DistilBERT's every other layer) ignores that blocks
    differ.
    Measured: tunix_lite/course/results/07_distill.md, "... a student of the 4 teacher blocks it
    misses least".
    """
    kept = list(range(model.config.num_layers))
    if not 1 <= keep <= len(kept):
        raise ValueError(f"keep must be in [1, {len(kept)}] (the model's blocks), got {keep}")
    path = [(kept, float(loss_fn(model)))]
    while len(kept) > keep:
        trials = []
        for block in kept:
            rest = [i for i in kept if i != block]
            with blocks_kept(model, rest):
                trials.append((float(loss_fn(model)), rest))
        loss, kept = min(trials)
        path.append((kept, loss))
    return path


def uniform_layer_map(student_layers: int, teacher_layers: int) -> dict[int, int]:
    """Student block i -> teacher block (i + 1) * L_t / L_s - 1: evenly spaced, the last facing the
    last."""
    return {i: (i + 1) * teacher_layers // student_layers - 1 for i in range(student_layers)}


def check_layer_map(layer_map: dict[int, int], student_layers: int, teacher_layers: int) -> None:
    for s, t in layer_map.items():
        if not (0 <= s < student_layers and 0 <= t < teacher_layers):
            raise ValueError(f"layer_map {{{s}: {t}}}: the student has blocks "
                             f"0..{student_layers - 1} and the teacher 0..{teacher_layers - 1}")


class WithProjection(nnx.Module):
    """A student with learned projections from its hidden size to the teacher's, one per mapped
    layer pair (FitNets' regressor, Romero et al. 2015). They train beside the student (they are
    nnx.Params under "projection", so `wrt=nnx.Param` or
    `nnx.Any(nnx.LoRAParam, nnx.PathContains("projection"))` reaches them) and are dropped at
    export: the exported model is `.student`.

    Initialised to the identity when the widths match (the student starts out compared with the
    teacher as is), else to a random matrix of unit-scale outputs.
    """

    def __init__(self, student: nnx.Module, *, teacher_dim: int, pairs: int, rngs: nnx.Rngs):
        self.student = student
        d = student.config.embed_dim
        if d == teacher_dim:
            init = jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32), (pairs, d, d))
        else:
            init = nnx.initializers.normal(d ** -0.5)(rngs.params(), (pairs, d, teacher_dim),
                                                      jnp.float32)
        self.projection = nnx.Param(jnp.array(init))  # [P, D_s, D_t]

    def project(self, pair: int, hidden: jnp.ndarray) -> jnp.ndarray:
        """Student hidden state [..., D_s] -> the teacher's width [..., D_t] through pair `pair`'s
        projection."""
        return jnp.einsum("...d,de->...e", hidden, self.projection[pair].astype(hidden.dtype))
