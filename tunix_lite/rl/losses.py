"""The policy-gradient pieces as pure functions of arrays: log-probs, advantages and masks in,
per-token losses out.

Shapes: B rows (completions), T positions of a rollout row; `mask` [B, T] is 1 on the completion's
tokens (the rows' `weights`). Log-probs are float32 [B, T] from
`tunix_lite.training.losses.sequence_log_probs`.

A loss is built from three choices, each a small function below:

1. the surrogate: `clipped_surrogate` (PPO's clip with DAPO's separate eps_low / eps_high, per token
   or, as GSPO, per sequence);
2. the KL penalty to the reference, estimated per token by `kl_k1` or `kl_k3`, times beta;
3. the aggregation of per-token losses into one number: `token_mean`, `sequence_mean_token_mean` or
   `sequence_mean_token_sum_norm`. Each returns (loss, count), the count being the units its mean is
   over, which is what the trainer needs for exact means over micro-batches (trainer.py's
   `metrics["count"]`).

`grpo_objective` puts the three together as the GRPO family's loss; `grpo_loss` reads its
log-probs from a model and rollout rows (GRPO's driver and the agent both train on it). PPO's critic
has `clipped_value_loss`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tunix_lite.training.losses import feature_log_probs
from tunix_lite.training.trainer import COUNT

# ----------------------------------------------------------------------------- the surrogate


def sequence_log_ratio(logp: jax.Array, old_logp: jax.Array, mask: jax.Array) -> jax.Array:
    """GSPO's sequence-level log importance ratio (Zheng et al. 2025, arXiv 2507.18071):

        log s_i = (1 / |y_i|) sum_t (log pi(y_i,t) - log pi_old(y_i,t))

    the length-normalised log of the sequences' likelihood ratio, [B, T] -> [B, 1] (broadcast over
    the tokens)."""
    mask = mask.astype(jnp.float32)
    return (jnp.sum((logp - old_logp) * mask, axis=-1, keepdims=True)
            / jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0))


def clipped_surrogate(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array,
                      mask: jax.Array, *,
                      eps_low: float = 0.2, eps_high: float = 0.2,
                      level: str = "token") -> tuple[jax.Array, jax.Array, jax.Array]:
    """PPO's clipped surrogate, negated to be minimised (Schulman et al. 2017, arXiv 1707.06347,
    eq. 7):

        loss_t = -min(rho_t * A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) * A_t),
        rho_t = pi(y_t) / pi_old(y_t)

    Departures from PPO: DAPO's clip-higher (arXiv 2503.14476) lets the upper bound differ from the
    lower one (eps_high = 0.28 keeps rare tokens' probabilities free to grow); `level="sequence"`
    uses GSPO's one ratio per sequence (`sequence_log_ratio`) for every token of it instead of a
    ratio per token.

    logp, old_logp [B, T]; advantages [B] (one per completion: GRPO) or [B, T] (per token: PPO with
    GAE). With one optimizer step per rollout, old_logp = stop_gradient(logp): rho = 1 and the
    gradient is the plain policy gradient A * d log pi. Returns (per-token loss [B, T], rho [B, T],
    clipped [B, T]: where the clip took the gradient away).
    """
    if advantages.ndim == 1:
        advantages = advantages[:, None]
    if level == "token":
        log_ratio = logp - old_logp
    elif level == "sequence":
        log_ratio = sequence_log_ratio(logp, old_logp, mask)
    else:
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    ratio = jnp.broadcast_to(jnp.exp(log_ratio), logp.shape)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    per_token = -jnp.minimum(unclipped, clipped)
    was_clipped = (((ratio < 1.0 - eps_low) & (advantages < 0))
                   | ((ratio > 1.0 + eps_high) & (advantages > 0)))
    return per_token, ratio, was_clipped


# ----------------------------------------------------------------------------- KL to the reference
# Schulman's estimators of KL(pi || pi_ref) from samples of pi
# (http://joschu.net/blog/kl-approx.html): with d = log pi_ref(y) - log pi(y), k1 = -d (unbiased,
# can be negative), k3 = exp(d) - d - 1 (unbiased and >= 0).


def kl_k1(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k1 = log pi(y) - log pi_ref(y) per token [B, T]: unbiased, but single samples can
    be negative."""
    return logp - ref_logp


def kl_k3(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k3 = exp(d) - d - 1 with d = log pi_ref(y) - log pi(y), per token [B, T]: unbiased and
    never negative (e^d >= 1 + d), 0 exactly where pi = pi_ref. GRPO's choice (DeepSeekMath, arXiv
    2402.03300, eq. 4)."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


KL_ESTIMATORS = {"k1": kl_k1, "k3": kl_k3}


# ----------------------------------------------------------------------------- aggregation
# Each returns (loss, count). Rows whose mask is all 0 (the trainer's padding) count 0 in
# every mode.


def token_mean(per_token: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """sum_i sum_t l_it / sum_i |y_i|: every token weighs the same, so long completions are
    not diluted (DAPO's "token-level policy gradient loss"; TRL's bnpo/dapo). count = tokens."""
    mask = mask.astype(jnp.float32)
    count = jnp.sum(mask)
    return jnp.sum(per_token * mask) / jnp.maximum(count, 1.0), count


def sequence_mean_token_mean(per_token: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(1/B) sum_i (1/|y_i|) sum_t l_it: GRPO as written in DeepSeekMath (eq. 3). A token of a
    short completion weighs more than one of a long completion, the length bias Dr. GRPO removes.
    count = sequences."""
    mask = mask.astype(jnp.float32)
    tokens = jnp.sum(mask, axis=-1)
    present = (tokens > 0).astype(jnp.float32)
    per_sequence = jnp.sum(per_token * mask, axis=-1) / jnp.maximum(tokens, 1.0)
    count = jnp.sum(present)
    return jnp.sum(per_sequence * present) / jnp.maximum(count, 1.0), count


def sequence_mean_token_sum_norm(per_token: jax.Array, mask: jax.Array,
                                 max_tokens: int) -> tuple[jax.Array, jax.Array]:
    """(1/B) sum_i (1/L) sum_t l_it with a constant L = `max_tokens` (the completion budget): Dr.
    GRPO's fix of the length bias (arXiv 2503.20783: GRPO's objective without the 1/|o_i|); TRL's
    dr_grpo. count = sequences."""
    mask = mask.astype(jnp.float32)
    present = (jnp.sum(mask, axis=-1) > 0).astype(jnp.float32)
    count = jnp.sum(present)
    return jnp.sum(per_token * mask) / (max_tokens * jnp.maximum(count, 1.0)), count


AGGREGATIONS = ("token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum-norm")


def aggregate(per_token: jax.Array, mask: jax.Array, mode: str, max_tokens: int | None = None):
    """(loss, count) of per-token values [B, T] under one of AGGREGATIONS."""
    if mode == "token-mean":
        return token_mean(per_token, mask)
    if mode == "sequence-mean-token-mean":
        return sequence_mean_token_mean(per_token, mask)
    if mode == "sequence-mean-token-sum-norm":
        if not max_tokens:
            raise ValueError("sequence-mean-token-sum-norm needs max_tokens "
                             "(the completion budget)")
        return sequence_mean_token_sum_norm(per_token, mask, max_tokens)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


# ----------------------------------------------------------------------- the GRPO family's loss


def grpo_objective(logp, old_logp, reference_logp, advantages, mask, *, epsilon_low: float = 0.2,
                   epsilon_high: float = 0.2, beta: float = 0.0, kl_estimator: str = "k3",
                   aggregation: str = "sequence-mean-token-mean", ratio_level: str = "token",
                   max_tokens: int | None = None):
    """The GRPO family's loss from log-probs [B, T] (policy, old policy, reference: None when
    beta = 0), advantages [B] and the completion mask [B, T] (DeepSeekMath, arXiv 2402.03300,
    eq. 3):

        l_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t(pi || pi_ref)

    aggregated over tokens and sequences by `aggregation` (`aggregate` above), which also fixes
    the count. The options are the departures from the published loss that `tunix_lite.rl.grpo`'s
    header maps to config keys. Returns (loss, metrics): loss, count, kl, ratio, and clipped (the
    fraction of tokens whose gradient the clip removed), each metric a mean over the loss's own
    units (tokens, or sequences then tokens).
    """
    per_token, ratio, clipped = clipped_surrogate(logp, old_logp, advantages, mask,
                                                  eps_low=epsilon_low, eps_high=epsilon_high,
                                                  level=ratio_level)
    metrics_mode = "token-mean" if aggregation == "token-mean" else "sequence-mean-token-mean"
    metrics = {"ratio": aggregate(ratio, mask, metrics_mode)[0],
               "clipped": aggregate(clipped.astype(logp.dtype), mask, metrics_mode)[0]}
    if beta:
        kl = KL_ESTIMATORS[kl_estimator](logp, reference_logp)
        per_token = per_token + beta * kl
        metrics["kl"] = aggregate(kl, mask, metrics_mode)[0]
    loss, count = aggregate(per_token, mask, aggregation, max_tokens)
    return loss, {"loss": loss, COUNT: count} | metrics


def completion_span(mask: jax.Array, length: int) -> tuple[jax.Array, jax.Array]:
    """(index [B, length], valid [B, length]) of each row's completion, for rows whose weighted
    positions are one run of at most `length` (a single-turn rollout row: prompt, then completion):
    the run starts at the row's first weighted position; `valid` is False past the row's end."""
    index = jnp.argmax(mask > 0, axis=1)[:, None] + jnp.arange(length)
    valid = index < mask.shape[1]
    return jnp.minimum(index, mask.shape[1] - 1), valid


def grpo_loss(model, batch: dict, frozen, *, completion_tokens: int | None = None, **options):
    """`grpo_objective` on rollout rows {inputs, targets, weights, positions, segment_ids [B, T],
    advantages [B][, old_logprobs [B, T]]} (`weights` = the completion mask); frozen: the reference
    policy (None when beta = 0). Without old_logprobs the ratio is exp(logp - stop_gradient(logp))
    = 1: one optimizer step per rollout.

    completion_tokens: the completion budget N when each row's completion is one run of at most N
    positions (GRPO's single-turn rows). The network still reads all T positions, but the lm head,
    the step's largest matmul, then scores only each row's N completion positions ([B, N], gathered
    by `completion_span`) instead of all T. None scores every position (the agent's turns)."""
    if completion_tokens is not None:
        index, valid = completion_span(batch["weights"], completion_tokens)

    def gather(x):  # [B, T, ...] -> [B, N, ...]: each row's completion positions
        if completion_tokens is None:
            return x
        return jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=1)

    mask = gather(batch["weights"]) * (1.0 if completion_tokens is None else valid)

    def log_probs(policy):  # [B, N] (or [B, T])
        features = policy.features(batch["inputs"], batch["positions"],
                                   segment_ids=batch.get("segment_ids"))
        return feature_log_probs(policy, gather(features), gather(batch["targets"]))

    logp = log_probs(model)
    old = (gather(batch["old_logprobs"]) if "old_logprobs" in batch
           else jax.lax.stop_gradient(logp))
    reference = jax.lax.stop_gradient(log_probs(frozen)) if options.get("beta") else None
    return grpo_objective(logp, old, reference, batch["advantages"], mask, **options)


# ----------------------------------------------------------------------------- the critic (PPO)


def clipped_value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array,
                       eps: float) -> jax.Array:
    """PPO's clipped value loss per token [B, T] (as in OpenAI baselines' ppo2):

        0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)

    The value may not move more than eps from the one the rollout saw before the larger
    error counts."""
    clipped = old_values + jnp.clip(values - old_values, -eps, eps)
    return 0.5 * jnp.maximum(jnp.square(values - returns), jnp.square(clipped - returns))
