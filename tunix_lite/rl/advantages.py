"""From rewards to advantages: how much better than expected each completion (or token) did.

Group estimators read the G completions of one prompt as their own baseline, so no critic is needed.
Rewards are [R] with R = B * G, prompt-major (row b*G + g is sample g of prompt b, as the sampler
returns them); a group whose rewards are all equal carries no signal and gets advantage exactly 0
under every estimator here.

    A_grpo = (r - mean_group) / (std_group + eps)     GRPO (Shao et al. 2024, DeepSeekMath,
                                                      arXiv 2402.03300)
    A_dr   = r - mean_group                           Dr. GRPO ("GRPO Done Right", arXiv 2503.20783)
    A_rloo = r - mean of the group's *other* rewards  RLOO (Ahmadian et al. 2024, arXiv 2402.14740)

With several rewards, each of these reads their weighted sum, unless `decoupled_advantages` (GDPO)
normalises each reward within its group first.

PPO's estimator, GAE, instead reads a learned value per token (`gae`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp


def _groups(rewards: jax.Array, group_size: int) -> jax.Array:
    """[B*G] -> [B, G] (float32)."""
    rewards = jnp.asarray(rewards, jnp.float32)
    if group_size < 2 or rewards.shape[0] % group_size:
        raise ValueError(f"need groups of >= 2 completions that divide the {rewards.shape[0]} "
                         f"rewards, got group_size={group_size}")
    return rewards.reshape(-1, group_size)


def _flat(r: jax.Array, advantages: jax.Array) -> jax.Array:
    """[B, G] -> [B*G], exactly 0 in groups whose rewards are all equal
    (r - mean can be an ulp off)."""
    equal = (r.max(axis=1) == r.min(axis=1))[:, None]
    return jnp.where(equal, 0.0, advantages).reshape(-1)


def grpo_advantages(rewards: jax.Array, group_size: int, eps: float = 1e-6) -> jax.Array:
    """(r - mean_g) / (std_g + eps) per group: [B*G] -> [B*G].

    std is the sample standard deviation (ddof=1), as TRL and google-tunix compute it. Dr. GRPO
    points out that dividing by it weighs prompts the policy nearly always (or never) solves most, a
    difficulty bias."""
    r = _groups(rewards, group_size)
    centered = r - r.mean(axis=1, keepdims=True)
    return _flat(r, centered / (r.std(axis=1, ddof=1, keepdims=True) + eps))


def drgrpo_advantages(rewards: jax.Array, group_size: int) -> jax.Array:
    """r - mean_g per group: GRPO without the division by the group's std
    (Dr. GRPO). [B*G] -> [B*G]."""
    r = _groups(rewards, group_size)
    return _flat(r, r - r.mean(axis=1, keepdims=True))


def rloo_advantages(rewards: jax.Array, group_size: int) -> jax.Array:
    """r_i - mean_{j != i} r_j per group (REINFORCE leave-one-out): [B*G] -> [B*G].

    Leaving r_i out of its own baseline keeps the estimate unbiased; it equals G / (G - 1) * (r_i -
    mean_g), Dr. GRPO's advantage scaled up by a constant."""
    r = _groups(rewards, group_size)
    others = (r.sum(axis=1, keepdims=True) - r) / (group_size - 1)
    return _flat(r, r - others)


ESTIMATORS = {"grpo": grpo_advantages, "drgrpo": drgrpo_advantages, "rloo": rloo_advantages}


def decoupled_advantages(parts: Mapping[str, jax.Array], weights: Mapping[str, float],
                         group_size: int, estimator: Callable = grpo_advantages,
                         eps: float = 1e-6) -> jax.Array:
    """GDPO (Group reward-Decoupled normalization Policy Optimization, arXiv 2601.05242): each
    reward's own group advantage, weighted and summed, then rescaled over the batch:

        A = S / (std_batch(S) + eps),      S = sum_k w_k * A_group(r_k)

    parts: {name: [B*G]} one array per reward; A_group: `estimator` (GRPO's by default). Summing
    the rewards first lets the one with the widest spread decide the ranking inside a group:
    (correct, well-formatted) and (wrong, well-formatted) can end up with the same advantage as
    other combinations. Normalising each reward first gives each one its own say, in proportion
    to its weight. Departure: GDPO also subtracts the batch mean; every A_group here sums to 0
    within its group, so that mean is 0 and only the rescaling is left, which keeps a group
    without signal at exactly 0. [B*G] -> [B*G]."""
    summed = sum(w * estimator(parts[name], group_size) for name, w in weights.items())
    return summed / (jnp.std(summed) + eps)


def gae(rewards: jax.Array, values: jax.Array, mask: jax.Array, gamma: float,
        lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv 1506.02438) along each row:

        delta_t = r_t + gamma * V_{t+1} - V_t,      A_t = delta_t + gamma * lam * A_{t+1},
        returns_t = A_t + V_t

    rewards, values, mask [B, T]: the completion occupies the positions where mask is 1 (one
    contiguous span per row, as `rollout_rows` lays it out); V after the last completion token is 0
    (the episode ends there), and positions outside the span get A = returns = 0. Returns
    (advantages [B, T], returns [B, T]).
    """
    mask = jnp.asarray(mask, jnp.float32)
    rewards, values = (jnp.asarray(rewards, jnp.float32) * mask,
                       jnp.asarray(values, jnp.float32) * mask)

    def back(carry, xs):  # from the last position to the first
        next_value, next_advantage = carry
        r, v, m = xs
        delta = r + gamma * next_value - v
        advantage = (delta + gamma * lam * next_advantage) * m
        return (v, advantage), advantage  # outside the span both are 0: the next span starts fresh

    zeros = jnp.zeros(rewards.shape[0], jnp.float32)
    _, advantages = jax.lax.scan(back, (zeros, zeros), (rewards.T, values.T, mask.T), reverse=True)
    advantages = advantages.T
    return advantages, (advantages + values) * mask


def whiten(values: jax.Array, mask: jax.Array, eps: float = 1e-8) -> jax.Array:
    """(x - mean) / std over the positions where mask is 1 (PPO's advantage whitening);
    0 elsewhere."""
    mask = jnp.asarray(mask, jnp.float32)
    count = jnp.maximum(mask.sum(), 1.0)
    mean = (values * mask).sum() / count
    var = (jnp.square(values - mean) * mask).sum() / count
    return (values - mean) * jax.lax.rsqrt(var + eps) * mask
