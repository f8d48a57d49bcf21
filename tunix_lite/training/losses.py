"""Log-probabilities and the language-model loss, as pure functions: arrays (or a model and a batch)
in.

`sequence_log_probs` is the one way every algorithm scores tokens: SFT's loss, DPO's policy and
reference log-probs, GRPO's old/reference log-probs and distillation all call it. With a large
vocabulary it can work through the tokens in chunks so that the float32 [B, T, V] logits never exist
at once (see `chunked_token_log_probs`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from tunix_lite.training.trainer import COUNT


def token_log_probs(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """log p(target) per position: logits [B,T,V], targets [B,T] -> [B,T] (float32)."""
    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def chunks(x: jax.Array, size: int) -> jax.Array:
    """[N, ...] -> [N / size, size, ...], zero-padding N up to a multiple of size."""
    pad = -x.shape[0] % size
    x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
    return x.reshape(-1, size, *x.shape[1:])


def _chunk_log_probs(x, w, targets, softcap):
    """One chunk: x [C, D], w [D, V], targets [C] -> (log p(targets) [C], its gradient with
    respect to the uncapped logits x @ w [C, V]: onehot(targets) - softmax, times the soft-cap's
    slope when softcap is set)."""
    raw = jnp.dot(x, w.astype(x.dtype), preferred_element_type=jnp.float32)  # [C, V]
    logits = raw if softcap is None else jnp.tanh(raw / softcap) * softcap
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    grad = -jnp.exp(logits - lse[:, None]).at[jnp.arange(targets.shape[0]), targets].add(-1.0)
    if softcap is not None:  # d(cap * tanh(r / cap)) / dr = 1 - tanh(r / cap)**2
        grad = grad * (1.0 - jnp.square(logits / softcap))
    return picked - lse, grad


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def chunked_token_log_probs(features: jax.Array, head: jax.Array, targets: jax.Array, chunk: int,
                            softcap: float | None = None) -> jax.Array:
    """log p(targets) [N] from features [N, D] and the output projection head [D, V], `chunk` tokens
    at a time.
    softcap: the logits are cap * tanh((features @ head) / cap) (Gemma 2's final soft-capping).

    Equal to token_log_probs(features @ head, targets), but the [N, V] logits never exist: each
    chunk's [chunk, V] logits are made, used and dropped. The backward pass needs no logits either:
    the gradient of log p(t) with respect to the features is (onehot(t) - softmax) @ head.T, a
    [chunk, D] array computed in the forward pass while the chunk's softmax is at hand
    (the "fused linear cross-entropy" trick). So a LoRA step, whose head is frozen, does the two
    lm-head matmuls of a plain forward + backward and stores [N, D] instead of [N, V]. A trained
    head (full fine-tuning) also needs d head, which is recomputed chunk by chunk in the backward
    pass (one more logits matmul per chunk); when the head is frozen XLA drops that work as dead
    code.
    """
    return _chunked_forward(features, head, targets, chunk, softcap)[0]


def _chunked_forward(features, head, targets, chunk, softcap):
    def one(args):
        x, t = args
        logp, grad_logits = _chunk_log_probs(x, head, t, softcap)
        return logp, jnp.dot(grad_logits, head.T.astype(jnp.float32))  # d log p / d x: [C, D]

    n = features.shape[0]
    logp, grad_x = jax.lax.map(one, (chunks(features, chunk), chunks(targets, chunk)))
    logp, grad_x = logp.reshape(-1)[:n], grad_x.reshape(-1, features.shape[1])[:n]
    return logp, (features, head, targets, grad_x)


def _chunked_backward(chunk, softcap, residuals, g):
    features, head, targets, grad_x = residuals
    d_features = (g[:, None] * grad_x).astype(features.dtype)

    # d head += x.T @ (g * d log p / d logits), recomputing the chunk's softmax
    def one(d_head, args):
        x, t, gc = args
        _, grad_logits = _chunk_log_probs(x, head, t, softcap)
        return d_head + jnp.dot(x.T.astype(jnp.float32), gc[:, None] * grad_logits), None

    d_head, _ = jax.lax.scan(one, jnp.zeros(head.shape, jnp.float32),
                             (chunks(features, chunk), chunks(targets, chunk), chunks(g, chunk)))
    return d_features, d_head.astype(head.dtype), None


chunked_token_log_probs.defvjp(lambda f, h, t, c, s: _chunked_forward(f, h, t, c, s),
                               _chunked_backward)


def sequence_log_probs(model, batch: dict, features: jax.Array | None = None) -> jax.Array:
    """log p(targets[b, t] | inputs[b, :t+1]) [B, T] (float32) for a batch {inputs, targets,
    positions[, segment_ids]} [B, T]. Padding positions get a value too: mask them with the batch's
    weights.

    When the model's `logits_chunk` is set (`set_training_options(model, logits_chunk=...)`) and its
    output projection is a plain matrix, the vocabulary projection runs `logits_chunk` tokens at a
    time (`chunked_token_log_probs`); otherwise through the full [B, T, V] logits.
    features: the model's features [B, T, D] for the batch when the caller has them already
    (a value head reads the same ones), so the network runs once.
    """
    if features is None:
        features = model.features(batch["inputs"], batch["positions"],
                                  segment_ids=batch.get("segment_ids"))
    return feature_log_probs(model, features, batch["targets"])


def feature_log_probs(model, features: jax.Array, targets: jax.Array) -> jax.Array:
    """log p(targets) [B, T] from the model's final features [B, T, D] (the second half of
    `sequence_log_probs`, for a loss that scores only some positions: gather their features first
    and the lm head runs on those alone)."""
    chunk = getattr(model, "logits_chunk", None)
    head = model.head_weight() if chunk else None
    if head is None:
        return token_log_probs(model.logits(features), targets)
    B, T, D = features.shape
    softcap = model.config.final_logit_softcap  # `logits` caps the full projection the same way
    return chunked_token_log_probs(features.reshape(B * T, D), head, targets.reshape(-1), chunk,
                                   softcap).reshape(B, T)


def masked_mean(values: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sum(values * weights) / sum(weights), sum(weights)); 0 when every weight is 0. The pair is
    what a loss returns as (loss, metrics["count"]): the mean times its count is exactly the sum,
    which makes the trainer's count-weighted accumulation exact."""
    weights = weights.astype(jnp.float32)
    count = jnp.sum(weights)
    return jnp.sum(values * weights) / jnp.where(count > 0, count, 1.0), count


def next_token_loss(logits: jax.Array, targets: jax.Array,
                    weights: jax.Array) -> tuple[jax.Array, dict]:
    """Token-weighted mean cross-entropy from logits [B,T,V]. weights [B,T] is 0 on padding
    (and on prompts for SFT). Reports the token count as metrics["count"]."""
    loss, count = masked_mean(-token_log_probs(logits, targets), weights)
    return loss, {"loss": loss, COUNT: count}


def lm_loss(model, batch: dict, frozen=None) -> tuple[jax.Array, dict]:
    """SFT's loss: the mean next-token cross-entropy of `model` over the trained tokens of a batch
    {inputs, targets, weights, positions[, segment_ids]} [B, T]; metrics["count"] is the number of
    trained tokens."""
    loss, count = masked_mean(-sequence_log_probs(model, batch), batch["weights"])
    return loss, {"loss": loss, COUNT: count}
