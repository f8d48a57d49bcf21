"""Language-model losses as pure functions: arrays in, (loss, metrics) out."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_log_probs(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """log p(target) per position: logits [B,T,V], targets [B,T] -> [B,T] (float32)."""
    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def next_token_loss(logits: jax.Array, targets: jax.Array, weights: jax.Array) -> tuple[jax.Array, dict]:
    """Token-weighted mean cross-entropy. weights [B,T] is 0 on padding (and on prompts for SFT).

    Returns the mean and, in metrics, the weighted sum and the token count, so gradient accumulation
    can combine micro-batches exactly (sum of sums / sum of counts).
    """
    nll = -token_log_probs(logits, targets)
    weights = weights.astype(jnp.float32)
    total, count = jnp.sum(nll * weights), jnp.sum(weights)
    loss = total / jnp.maximum(count, 1.0)
    return loss, {"loss": loss, "nll_sum": total, "tokens": count}


def lm_loss(model, batch: dict) -> tuple[jax.Array, dict]:
    """Next-token loss of `model` on a batch {inputs, targets, weights, positions, segment_ids} [B,T]."""
    logits = model(batch["inputs"], batch["positions"], segment_ids=batch.get("segment_ids"))
    return next_token_loss(logits, batch["targets"], batch["weights"])
