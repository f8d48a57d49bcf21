"""The student's side: a smaller model cut from a bigger one, which layers face which, and the feature projection.

    keep_layers(model, [0, 5])                 # a 2-layer model from a 6-layer one (DistilBERT's initialisation)
    layer_map = uniform_layer_map(2, 6)        # {0: 2, 1: 5}: student block i learns from teacher block m(i)
    model = WithProjection(student, teacher_dim=..., pairs=len(layer_map), rngs=...)   # trained beside it
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx


def keep_layers(model: nnx.Module, layers: list[int]) -> nnx.Module:
    """Keep only the blocks at `layers` (in that order), in place; embeddings, final norm and head stay. Returns
    the model, whose config now says len(layers) layers.

    Sanh et al. (2019, DistilBERT) initialise a half-depth student with every other teacher layer; any subset
    works. A kept block takes the attention kind (sliding-window or global) of its new index, so the model is
    exactly what its config describes and exports as (the same thing when the window covers the sequence).
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


def uniform_layer_map(student_layers: int, teacher_layers: int) -> dict[int, int]:
    """Student block i -> teacher block (i + 1) * L_t / L_s - 1: evenly spaced, the last facing the last."""
    return {i: (i + 1) * teacher_layers // student_layers - 1 for i in range(student_layers)}


def check_layer_map(layer_map: dict[int, int], student_layers: int, teacher_layers: int) -> None:
    for s, t in layer_map.items():
        if not (0 <= s < student_layers and 0 <= t < teacher_layers):
            raise ValueError(f"layer_map {{{s}: {t}}}: the student has blocks 0..{student_layers - 1} and the "
                             f"teacher 0..{teacher_layers - 1}")


class WithProjection(nnx.Module):
    """A student with learned projections from its hidden size to the teacher's, one per mapped layer pair
    (FitNets' regressor, Romero et al. 2015). They train beside the student (they are nnx.Params under
    "projection", so `wrt=nnx.Param` or `nnx.Any(nnx.LoRAParam, nnx.PathContains("projection"))` reaches them)
    and are dropped at export: the exported model is `.student`.

    Initialised to the identity when the widths match (the student starts out compared with the teacher as is),
    else to a random matrix of unit-scale outputs.
    """

    def __init__(self, student: nnx.Module, *, teacher_dim: int, pairs: int, rngs: nnx.Rngs):
        self.student = student
        d = student.config.embed_dim
        if d == teacher_dim:
            init = jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32), (pairs, d, d))
        else:
            init = nnx.initializers.normal(d ** -0.5)(rngs.params(), (pairs, d, teacher_dim), jnp.float32)
        self.projection = nnx.Param(jnp.array(init))  # [P, D_s, D_t]

    def project(self, pair: int, hidden: jnp.ndarray) -> jnp.ndarray:
        """Student hidden state [..., D_s] -> the teacher's width [..., D_t] through pair `pair`'s projection."""
        return jnp.einsum("...d,de->...e", hidden, self.projection[pair].astype(hidden.dtype))
