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

    Reports the token count as metrics["tokens"]: the trainer weighs micro-batches by it, which makes
    gradient accumulation exact (sum of token sums / total tokens).
    """
    nll = -token_log_probs(logits, targets)
    weights = weights.astype(jnp.float32)
    count = jnp.sum(weights)
    loss = jnp.sum(nll * weights) / jnp.where(count > 0, count, 1.0)  # loss * count is exactly the sum
    return loss, {"loss": loss, "tokens": count}


def lm_loss(model, batch: dict) -> tuple[jax.Array, dict]:
    """Next-token loss of `model` on a batch {inputs, targets, weights, positions, segment_ids} [B,T]."""
    logits = model(batch["inputs"], batch["positions"], segment_ids=batch.get("segment_ids"))
    return next_token_loss(logits, batch["targets"], batch["weights"])
