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

When the sampler is not exactly the trained policy (bfloat16 rollouts, an external engine, rollouts
a few updates stale), `mismatch_metrics` measures how far apart the two are on the sampled tokens,
and `correction_weights` gives the importance weights that correct the surrogate for it.
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


# ------------------------------------------------------------ the sampler-trainer mismatch
# Notation: y_t ~ mu, the sampler's distribution (the weights and kernels that made the rollout,
# its temperature and filters applied: `GenerateOutput.sampled_logprobs`); pi the trained policy at
# the weights the rollout's first update starts from (pi_old in the clipped ratio), its log-probs
# recomputed by the trainer. delta_t = log pi(y_t) - log mu(y_t), rho_t = exp(delta_t).

CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# exp(2 x 20) ~ 2e17 still fits float32; a sequence's log-ratio beyond +-20 is an outlier already
_SEQUENCE_LOG_RATIO_LIMIT = 20.0


def rollout_log_ratio(train_logp: jax.Array, rollout_logp: jax.Array, mask: jax.Array,
                      level: str = "token") -> jax.Array:
    """delta_t = log pi(y_t) - log mu(y_t) on the completion tokens, 0 elsewhere [B, T]; level
    "sequence": every token of a row gets the row's sum_t delta_t, the log of rho_seq."""
    delta = (train_logp - rollout_logp) * mask.astype(jnp.float32)
    if level == "sequence":
        return jnp.broadcast_to(jnp.sum(delta, axis=-1, keepdims=True), delta.shape)
    return delta


def correction_weights(train_logp: jax.Array, rollout_logp: jax.Array, mask: jax.Array, *,
                       mode: str, cap: float) -> jax.Array:
    """Importance weights [B, T] that make samples of the sampler mu count as samples of the
    trained policy pi, bounded by `cap` = C (> 1), for `mode` in CORRECTIONS:

        token_truncate     w_t = min(rho_t, C)                       rho_t = pi(y_t) / mu(y_t)
        token_mask         w_t = rho_t * 1[rho_t <= C]
        sequence_truncate  w_t = min(rho_seq, C)   for every t of y,  rho_seq = prod_t rho_t
        sequence_mask      w_t = rho_seq * 1[rho_seq <= C]
        none               w_t = 1

    The policy-gradient term of the loss is multiplied by w (a constant: no gradient flows
    through it), so E_mu[w A grad log pi] is the on-policy gradient E_pi[A grad log pi] up to the
    cap. Truncation trades that bias for bounded variance: the truncated importance weights of
    IMPALA's V-trace (Espeholt et al. 2018, arXiv 1802.01561, whose rho-bar is C), which Yao et
    al. 2025 ("Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", TIS,
    fengyao.notion.site/off-policy-rl) apply per token to vLLM rollouts beside an FSDP trainer
    (NeMo RL's `truncated_importance_sampling_ratio`). A mask drops a token, or a whole sequence,
    whose ratio passes the cap instead of clipping it: masked importance sampling (MIS, the
    follow-up "When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference
    Mismatch", Liu, Li, Fu, Wang, Liu and Shen 2025, yingru.notion.site), which gives an outlier
    no say at all. rho_seq is the likelihood ratio of the whole completion, exp(sum_t delta_t),
    as TRL's `vllm_importance_sampling_mode` and ms-swift's `rollout_importance_sampling_mode`
    compute it (the same four modes).

    A dropped token keeps its place in the aggregation's count (its loss is 0), as in TRL. With
    identical log-probs (one model, float32, nothing stale) every rho is exactly 1 and so is every
    weight, in every mode. train_logp, rollout_logp, mask [B, T]."""
    if mode not in CORRECTIONS:
        raise ValueError(f"rollout_correction must be one of {CORRECTIONS}, got {mode!r}")
    if mode == "none":
        return jnp.ones_like(train_logp)
    level = mode.partition("_")[0]  # token | sequence
    ratio = jnp.exp(rollout_log_ratio(train_logp, rollout_logp, mask, level))
    if mode.endswith("truncate"):
        return jnp.minimum(ratio, cap)
    return jnp.where(ratio <= cap, ratio, 0.0)


def mismatch_metrics(train_logp: jax.Array, rollout_logp: jax.Array, mask: jax.Array, *,
                     cap: float, aggregation: str = "token-mean") -> dict[str, jax.Array]:
    """How far the sampler mu is from the trained policy pi on the sampled tokens, for the logs
    (the names ms-swift and verl log, defined here on delta_t = log pi - log mu, rho_t = e^delta):

        mismatch/kl_k1          mean_t(-delta_t)                 KL(mu || pi): Schulman's k1
        mismatch/kl_k3          mean_t(rho_t - 1 - delta_t)      KL(mu || pi): k3, never < 0
        mismatch/chi2_token     mean_t(rho_t^2) - 1              chi^2(pi || mu) per token
        mismatch/outside_cap    mean_t 1[rho_t > C or rho_t < 1/C]
        mismatch/ppl_ratio      mean_i exp(-mean_{t in y_i} delta_t)   PPL_pi / PPL_mu per sequence
        mismatch/chi2_sequence  mean_i exp(2 sum_{t in y_i} delta_t) - 1  chi^2 of whole sequences

    Token means follow `aggregation` as the loss's other metrics do (a mean over tokens, or over
    sequences of their token means); sequence metrics are means over the rows that hold a
    completion. Each is 0 (the ratio 1) exactly when the two log-probs are equal. The sequence
    log-ratio is clipped to +-20 before squaring, so one runaway sequence reads as e^40, not inf.
    train_logp, rollout_logp, mask [B, T]."""
    mask = mask.astype(jnp.float32)
    delta = rollout_log_ratio(train_logp, rollout_logp, mask)
    ratio = jnp.exp(delta)
    token_mode = "token-mean" if aggregation == "token-mean" else "sequence-mean-token-mean"
    tokens = jnp.sum(mask, axis=-1)
    present = (tokens > 0).astype(jnp.float32)

    def over_sequences(x):  # [B] -> the mean over rows with a completion
        return jnp.sum(x * present) / jnp.maximum(jnp.sum(present), 1.0)

    outside = (ratio > cap) | (ratio < 1.0 / cap)
    sequence_log_ratio = jnp.clip(jnp.sum(delta, axis=-1), -_SEQUENCE_LOG_RATIO_LIMIT,
                                  _SEQUENCE_LOG_RATIO_LIMIT)
    return {
        "mismatch/kl_k1": aggregate(-delta, mask, token_mode)[0],
        "mismatch/kl_k3": aggregate(ratio - 1.0 - delta, mask, token_mode)[0],
        "mismatch/chi2_token": aggregate(jnp.square(ratio), mask, token_mode)[0] - 1.0,
        "mismatch/outside_cap": aggregate(outside.astype(jnp.float32), mask, token_mode)[0],
        "mismatch/ppl_ratio": over_sequences(
            jnp.exp(-jnp.sum(delta, axis=-1) / jnp.maximum(tokens, 1.0))),
        "mismatch/chi2_sequence": over_sequences(jnp.exp(2.0 * sequence_log_ratio)) - 1.0,
    }


# ----------------------------------------------------------------------- the GRPO family's loss


def grpo_objective(logp, old_logp, reference_logp, advantages, mask, *, epsilon_low: float = 0.2,
                   epsilon_high: float = 0.2, beta: float = 0.0, kl_estimator: str = "k3",
                   aggregation: str = "sequence-mean-token-mean", ratio_level: str = "token",
                   max_tokens: int | None = None, rollout_logp=None,
                   rollout_correction: str = "none", rollout_correction_cap: float = 2.0):
    """The GRPO family's loss from log-probs [B, T] (policy, old policy, reference: None when
    beta = 0), advantages [B] and the completion mask [B, T] (DeepSeekMath, arXiv 2402.03300,
    eq. 3):

        l_t = -w_t min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A)
              + beta * KL_t(pi || pi_ref)

    aggregated over tokens and sequences by `aggregation` (`aggregate` above), which also fixes
    the count. The options are the departures from the published loss that `tunix_lite.rl.grpo`'s
    header maps to config keys. rollout_logp [B, T]: the sampler's own log-probs of the tokens
    (None: not kept); with them the metrics add `mismatch_metrics` between the sampler and pi_old,
    and `rollout_correction` weighs the surrogate by w_t = `correction_weights` (1 with "none").
    The KL term is not weighted, as in TRL. Returns (loss, metrics): loss, count, kl, ratio, and
    clipped (the fraction of tokens whose gradient the clip removed), each metric a mean over the
    loss's own units (tokens, or sequences then tokens).
    """
    per_token, ratio, clipped = clipped_surrogate(logp, old_logp, advantages, mask,
                                                  eps_low=epsilon_low, eps_high=epsilon_high,
                                                  level=ratio_level)
    metrics_mode = "token-mean" if aggregation == "token-mean" else "sequence-mean-token-mean"
    metrics = {"ratio": aggregate(ratio, mask, metrics_mode)[0],
               "clipped": aggregate(clipped.astype(logp.dtype), mask, metrics_mode)[0]}
    if rollout_logp is not None:
        proximal = jax.lax.stop_gradient(old_logp)
        metrics |= mismatch_metrics(proximal, rollout_logp, mask, cap=rollout_correction_cap,
                                    aggregation=aggregation)
        if rollout_correction != "none":
            weights = correction_weights(proximal, rollout_logp, mask, mode=rollout_correction,
                                         cap=rollout_correction_cap)
            per_token = per_token * weights
            level = rollout_correction.partition("_")[0]
            # the tokens whose weight the cap changed (truncated, or dropped by the mask)
            capped = weights != jnp.exp(rollout_log_ratio(proximal, rollout_logp, mask, level))
            metrics["correction/weight"] = aggregate(weights, mask, metrics_mode)[0]
            metrics["correction/capped"] = aggregate(capped.astype(logp.dtype), mask,
                                                     metrics_mode)[0]
    elif rollout_correction != "none":
        raise ValueError(f"rollout_correction={rollout_correction!r} needs the sampler's "
                         "log-probs (rollout rows with rollout_logprobs)")
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
    advantages [B][, old_logprobs, rollout_logprobs [B, T]]} (`weights` = the completion mask);
    frozen: the reference policy (None when beta = 0). Without old_logprobs the ratio is
    exp(logp - stop_gradient(logp)) = 1: one optimizer step per rollout. rollout_logprobs: the
    sampler's log-probs of the tokens (`mismatch_metrics`, `rollout_correction`).

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
    rollout = gather(batch["rollout_logprobs"]) if "rollout_logprobs" in batch else None
    return grpo_objective(logp, old, reference, batch["advantages"], mask, rollout_logp=rollout,
                          **options)


# ----------------------------------------------------------------------------- the critic (PPO)


def clipped_value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array,
                       eps: float) -> jax.Array:
    """PPO's clipped value loss per token [B, T] (as in OpenAI baselines' ppo2):

        0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)

    The value may not move more than eps from the one the rollout saw before the larger
    error counts."""
    clipped = old_values + jnp.clip(values - old_values, -eps, eps)
    return 0.5 * jnp.maximum(jnp.square(values - returns), jnp.square(clipped - returns))
