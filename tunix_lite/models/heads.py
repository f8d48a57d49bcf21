"""A scalar head on a transformer's features: the reward model (one score per sequence) and PPO's
value head (one value per position) are both this module.

    critic = ScalarHead(backbone, rngs=nnx.Rngs(0))
    values = critic(tokens, positions)         # [B, T] float32
    scores = critic.last(tokens, positions)    # [B]: the value at each row's last real token

The head reads `Transformer.features` (after the final norm), as the lm head does. Its kernel is an
nnx.Param under the path `head`, so it trains beside LoRA adapters with
`wrt=nnx.Any(nnx.LoRAParam, nnx.PathContains("head"))`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tunix_lite.models.transformer import Transformer


class ScalarHead(nnx.Module):
    def __init__(self, backbone: Transformer, *, rngs: nnx.Rngs):
        D = backbone.config.embed_dim
        self.backbone = backbone
        # zero init: a fresh head outputs 0 everywhere
        # (no initial bias toward either answer of a pair)
        self.head = nnx.Linear(D, 1, use_bias=True, kernel_init=nnx.initializers.zeros, rngs=rngs,
                               kernel_metadata={"logical_axes": ("embed", None)})

    def __call__(self, tokens: jax.Array, positions: jax.Array | None = None, *,
                 segment_ids: jax.Array | None = None) -> jax.Array:
        """tokens [B, T] -> one float32 scalar per position [B, T]."""
        features = self.backbone.features(tokens, positions, segment_ids=segment_ids)
        return self.head(features.astype(jnp.float32))[..., 0]

    def last(self, tokens: jax.Array, positions: jax.Array) -> jax.Array:
        """[B]: the scalar at each row's last real token (the largest position;
        padding has position -1)."""
        values = self(tokens, positions)
        last = jnp.argmax(positions, axis=1)
        return jnp.take_along_axis(values, last[:, None], axis=1)[:, 0]
