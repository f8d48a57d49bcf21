"""Distillation losses as pure functions: arrays in, per-token values or (loss, metrics) out.

Notation: z_t, z_s teacher and student logits [..., V]; T the temperature; p_t^T = softmax(z_t / T)
and p_s^T = softmax(z_s / T) the softened distributions; weights [B, T] the trained tokens
(0 on prompt and padding).

Logit KD (Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a Neural Network", section 2):

    L = alpha * T^2 * D(p_t^T, p_s^T) + (1 - alpha) * CE(y, softmax(z_s))

with D the forward KL in the paper; here also the reverse KL and the generalized Jensen-Shannon
divergence of on-policy distillation (Agarwal et al. 2024, "On-Policy Distillation of Language
Models: Learning from Self-Generated Mistakes", eq. 1). Every term is a mean over the trained tokens
only: never over the prompt or the padding (google-tunix averages its logit KD over every position,
padding included).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from tunix_lite.training.losses import chunks, masked_mean, token_log_probs
from tunix_lite.training.trainer import COUNT

Divergence = Literal["forward", "reverse", "jsd"]
# a finite log(0): logsumexp over it stays finite, and so do gradients
_NEG = float(jnp.finfo(jnp.float32).min)


def softened_log_probs(logits: jax.Array, temperature: float) -> jax.Array:
    """log softmax(z / T) [..., V] in float32. T > 1 flattens the distribution and shows the 'dark
    knowledge': how the teacher ranks the wrong answers."""
    return jax.nn.log_softmax(logits.astype(jnp.float32) / temperature, axis=-1)


def kl(log_p: jax.Array, log_q: jax.Array) -> jax.Array:
    """KL(p || q) = sum_v p_v (log p_v - log q_v) over the last axis, from log-probabilities.
    Categories where p_v = 0 (log p_v = -inf) contribute exactly 0, with a zero (not NaN)
    gradient."""
    p = jnp.exp(log_p)
    present = p > 0
    # double where: no inf - inf, no NaN
    diff = jnp.where(present, log_p - jnp.where(present, log_q, 0.0), 0.0)
    return jnp.sum(p * diff, axis=-1)


def divergence(log_p_teacher: jax.Array, log_p_student: jax.Array, kind: Divergence = "forward",
               beta: float = 0.5) -> jax.Array:
    """D(teacher, student) over the last axis [..., V] -> [...], from log-probabilities.

    forward  KL(p_t || p_s): mean-seeking, the student spreads its mass over everything the teacher
             allows.
    reverse  KL(p_s || p_t): mode-seeking, the student may drop teacher modes but must not put mass
             where the teacher puts none; GKD's choice on the student's own samples.
    jsd      beta * KL(p_t || m) + (1 - beta) * KL(p_s || m) with m = beta * p_t + (1 - beta) * p_s
             (GKD eq. 1, TRL's convention). Bounded by log 2 for beta = 1/2; beta -> 0 behaves like
             a scaled forward KL and beta -> 1 like a scaled reverse KL (the limits themselves are
             0: use "forward"/"reverse" for them).
    """
    if kind == "forward":
        return kl(log_p_teacher, log_p_student)
    if kind == "reverse":
        return kl(log_p_student, log_p_teacher)
    if kind == "jsd":
        if not 0.0 < beta < 1.0:
            raise ValueError(f"jsd needs 0 < beta < 1, got {beta}")
        log_m = jnp.logaddexp(jnp.log(beta) + log_p_teacher, jnp.log1p(-beta) + log_p_student)
        return beta * kl(log_p_teacher, log_m) + (1.0 - beta) * kl(log_p_student, log_m)
    raise ValueError(f"divergence kind must be 'forward', 'reverse' or 'jsd', got {kind!r}")


def kd_per_token(student_logits: jax.Array, teacher_logits: jax.Array, *, temperature: float,
                 kind: Divergence = "forward", beta: float = 0.5) -> jax.Array:
    """T^2 * D(p_t^T, p_s^T) per position: [..., V] x 2 -> [...].

    Why T^2: the gradient of KL(p_t^T || p_s^T) with respect to the student's logits is
    (p_s^T - p_t^T) / T, and for large T both distributions approach uniform with p^T ~
    (1 + z / T) / V, so the difference shrinks like 1 / T too: the gradient falls off like 1 / T^2.
    Multiplying by T^2 keeps the soft targets' gradient on the same scale whatever T is, so changing
    T does not silently reweigh the soft term against the hard CE term (Hinton et al., section 2).
    tests/test_distill.py checks it numerically.
    """
    log_t = softened_log_probs(jax.lax.stop_gradient(teacher_logits), temperature)
    return temperature ** 2 * divergence(log_t, softened_log_probs(student_logits, temperature),
                                         kind, beta)


def combine(kd: jax.Array, ce: jax.Array, weights: jax.Array, *,
            alpha: float) -> tuple[jax.Array, dict]:
    """alpha * mean(kd) + (1 - alpha) * mean(ce), both means over the trained tokens
    (weights [B, T]); the metrics carry each part and "count" = the number of trained tokens, so the
    trainer's accumulation stays exact."""
    kd_mean, count = masked_mean(kd, weights)
    ce_mean, _ = masked_mean(ce, weights)
    loss = alpha * kd_mean + (1.0 - alpha) * ce_mean
    return loss, {"loss": loss, "kd": kd_mean, "ce": ce_mean, COUNT: count}


def kd_loss(student_logits: jax.Array, teacher_logits: jax.Array, targets: jax.Array,
            weights: jax.Array, *, alpha: float = 0.5, temperature: float = 2.0,
            kind: Divergence = "forward",
            beta: float = 0.5) -> tuple[jax.Array, dict]:
    """The whole logit-KD loss from full logits [B, T, V], targets and weights [B, T] (the reference
    form; `objective.DistillLoss` computes the same terms a chunk of tokens at a time)."""
    kd = kd_per_token(student_logits, teacher_logits, temperature=temperature, kind=kind, beta=beta)
    ce = -token_log_probs(student_logits, targets)
    return combine(kd, ce, weights, alpha=alpha)


# ---------------------------------------------------------------------- top-k KD (a cached teacher)


def top_k_distribution(logits: jax.Array, k: int,
                       temperature: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """What a top-k teacher cache keeps per position: logits [..., V] -> (ids [..., k] int32, log
    p_t^T at those ids [..., k], the remaining mass 1 - sum of their probabilities [...]), exact
    (summed over the other ids, not 1 minus a rounded sum)."""
    log_p = softened_log_probs(logits, temperature)
    values, ids = jax.lax.top_k(log_p, k)
    rest = jnp.exp(jax.nn.logsumexp(_without(log_p, ids), axis=-1))  # exactly 0 when k = V
    return ids.astype(jnp.int32), values, rest


def _without(log_p: jax.Array, ids: jax.Array) -> jax.Array:
    """log_p [..., V] with the entries at ids [..., k] set to a finite log(0)."""
    flat, flat_ids = log_p.reshape(-1, log_p.shape[-1]), ids.reshape(-1, ids.shape[-1])
    rows = jnp.arange(flat.shape[0])[:, None]
    return flat.at[rows, flat_ids].set(_NEG).reshape(log_p.shape)


def bucket_log_probs(log_p: jax.Array, ids: jax.Array) -> jax.Array:
    """A distribution collapsed to k + 1 buckets: log p at ids [..., k], then the log of everything
    else's mass: [..., V] -> [..., k + 1]. KD between two collapsed distributions is a lower bound
    of the full KD (merging categories never increases a divergence) and equals it when k = V
    (the rest bucket is then empty)."""
    picked = jnp.take_along_axis(log_p, ids, axis=-1)
    return jnp.concatenate([picked, jax.nn.logsumexp(_without(log_p, ids), axis=-1, keepdims=True)],
                           axis=-1)


def top_k_kd_per_token(student_logits: jax.Array, ids: jax.Array, teacher_log_probs: jax.Array,
                       teacher_rest: jax.Array, *, temperature: float, kind: Divergence = "forward",
                       beta: float = 0.5) -> jax.Array:
    """T^2 * D over k + 1 buckets per position, from a cached teacher: student_logits [..., V], the
    cache's ids and log-probs [..., k] (softened at this temperature when cached) and rest mass
    [...] -> [...].

    Departure from full KD: the teacher's tail beyond its top k is one bucket, compared with the
    student's mass outside the same k ids; the student is not told how the teacher splits the tail
    (a 262k-vocabulary teacher's tail holds little mass, and k = V recovers full KD exactly:
    tests/test_distill.py).
    """
    log_rest = jnp.log(teacher_rest)[..., None]  # log 0 = -inf: an empty bucket, skipped by `kl`
    teacher = jnp.concatenate([teacher_log_probs.astype(jnp.float32), log_rest], axis=-1)
    student = bucket_log_probs(softened_log_probs(student_logits, temperature), ids)
    return temperature ** 2 * divergence(teacher, student, kind, beta)


# ------------------------------------------------------------------- attention and feature transfer


def attention_transfer(teacher_weights: jax.Array, student_weights: jax.Array) -> jax.Array:
    """Per query row, KL(teacher's attention row || student's): attention probabilities
    [B, N_t, T, S] and [B, N_s, T, S] -> [B, T]. Each model's heads are averaged first, so the head
    counts may differ.

    MiniLM (Wang et al. 2020, eq. 4) matches each head's attention distribution of the last layer
    with this KL; departures: any mapped layers, and head-averaged maps (head h of a student has no
    reason to play the role of head h of a teacher). Both maps must come from the same positions and
    segments, with windows that cover the sequence (a key the teacher sees but the student's mask
    hides would make the KL infinite).
    """
    p, q = jnp.mean(teacher_weights, axis=1), jnp.mean(student_weights, axis=1)  # [B, T, S]
    safe = lambda x: jnp.log(jnp.where(x > 0, x, 1.0))  # masked keys have probability exactly 0
    return kl(jnp.where(p > 0, safe(p), -jnp.inf), safe(q))


def feature_distance(student: jax.Array, teacher: jax.Array,
                     kind: Literal["mse", "cosine"] = "mse") -> jax.Array:
    """Distance per position between a (projected) student hidden state and the teacher's,
    [..., D] -> [...].

    mse: the mean squared difference of the RMS-normalised vectors (TinyBERT, Jiao et al.
    2020, eq. 8, matches the raw states; the residual stream's scale grows with depth and differs
    between models, so both are normalised first); cosine: 1 - cos(student, teacher), blind to scale
    altogether.
    """
    s, t = student.astype(jnp.float32), jax.lax.stop_gradient(teacher).astype(jnp.float32)
    if kind == "mse":
        normalise = lambda x: x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
        return jnp.mean((normalise(s) - normalise(t)) ** 2, axis=-1)
    if kind == "cosine":
        dot = jnp.sum(s * t, axis=-1)
        return 1.0 - dot * jax.lax.rsqrt(jnp.sum(s * s, axis=-1) * jnp.sum(t * t, axis=-1) + 1e-12)
    raise ValueError(f"feature distance must be 'mse' or 'cosine', got {kind!r}")


# -------------------------------------------------------------- memory: a chunk of tokens at a time


def map_token_chunks(fn, chunk: int | None, *arrays: jax.Array):
    """fn(*arrays) for arrays [N, ...] whose rows are tokens, computed `chunk` rows at a time;
    returns fn's outputs (a pytree of [N, ...]).

    Distillation needs both models' [N, V] logits: with Gemma's 262k vocabulary that is 1 GiB per
    model per 1,024 tokens in float32, plus as much again for the softmax the backward pass keeps.
    Here each chunk's logits are made, reduced to per-token values and dropped; `jax.checkpoint`
    makes the backward pass recompute them chunk by chunk instead of storing them, so memory holds
    one chunk's [chunk, V] logits at a time for one more forward of the two vocabulary projections.
    (training.losses.chunked_token_log_probs does the same for one model with a hand-written
    gradient; here the divergence can be any of the above, so autodiff does it.) chunk None or >= N:
    one piece, no recomputation.
    """
    n = arrays[0].shape[0]
    if not chunk or chunk >= n:
        return fn(*arrays)
    out = jax.lax.map(jax.checkpoint(lambda args: fn(*args)),
                      tuple(chunks(a, chunk) for a in arrays))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:])[:n], out)
