"""Preference losses as pure functions of completion log-probabilities:
one short function per paper.

Notation: x a prompt, y_w the chosen ("winner") and y_l the rejected ("loser") completion, π_θ the
policy, π_ref the frozen reference, and log π(y|x) = Σ_t log π(y_t | x, y_<t) over the completion's
tokens (its per-token mean with length normalisation). The implicit reward of DPO is r(y) = β (log
π_θ(y|x) - log π_ref(y|x)), and

    h = [log π_θ(y_w|x) - log π_ref(y_w|x)] - [log π_θ(y_l|x) - log π_ref(y_l|x)]

is the difference of the two log-ratios. Every function takes per-pair arrays [B] and `valid` [B] (1
for a real pair, 0 for a padded one) and returns (loss, metrics): the loss is the mean over real
pairs and metrics["count"] is their number, so the trainer's micro-batch accumulation is exact.
Metrics carry TRL's names (rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies,
logps/chosen, logps/rejected, kl), each a mean over real pairs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tunix_lite.training.losses import masked_mean
from tunix_lite.training.trainer import COUNT


def completion_log_probs(token_log_probs: jax.Array, weights: jax.Array, *,
                         normalize: bool = False) -> jax.Array:
    """Σ_t w_t log p_t over each sequence's completion: [..., T] -> [...]. With `normalize`, the
    per-token mean (0 for a sequence without completion tokens, such as a padded pair's)."""
    total = jnp.sum(token_log_probs * weights, axis=-1)
    if not normalize:
        return total
    count = jnp.sum(weights, axis=-1)
    return total / jnp.where(count > 0, count, 1.0)


def _mean(values: jax.Array, valid: jax.Array) -> jax.Array:
    return masked_mean(values, valid)[0]


def reward_metrics(chosen_rewards, rejected_rewards, chosen_logps, rejected_logps, valid) -> dict:
    """TRL's logged metrics, each a mean over the real pairs, and their count; plus
    logps/accuracies, how often the policy itself gives the chosen completion the higher log-prob
    (rewards/accuracies compares implicit rewards, which tie at 0 before training)."""
    margins = chosen_rewards - rejected_rewards
    return {"rewards/chosen": _mean(chosen_rewards, valid),
            "rewards/rejected": _mean(rejected_rewards, valid),
            "rewards/margins": _mean(margins, valid),
            "rewards/accuracies": _mean(margins > 0, valid),
            "logps/chosen": _mean(chosen_logps, valid),
            "logps/rejected": _mean(rejected_logps, valid),
            "logps/accuracies": _mean(chosen_logps > rejected_logps, valid),
            COUNT: jnp.sum(valid.astype(jnp.float32))}


def dpo_metrics(chosen, rejected, ref_chosen, ref_rejected, valid, beta) -> dict:
    """The metrics of the losses that compare with a reference: implicit rewards β log π_θ/π_ref,
    and "kl", the mean log-ratio log π_θ/π_ref over both completions. That is the estimate of
    KL(π_θ || π_ref) for completions sampled from π_θ; on offline pairs it says how far the policy
    has moved on the data."""
    chosen_ratio, rejected_ratio = chosen - ref_chosen, rejected - ref_rejected
    metrics = reward_metrics(beta * chosen_ratio, beta * rejected_ratio, chosen, rejected, valid)
    return metrics | {"kl": _mean((chosen_ratio + rejected_ratio) / 2, valid)}


def _pairwise(per_pair, chosen, rejected, ref_chosen, ref_rejected, valid,
              beta) -> tuple[jax.Array, dict]:
    loss = _mean(per_pair, valid)
    return loss, (dpo_metrics(chosen, rejected, ref_chosen, ref_rejected, valid, beta)
                  | {"loss": loss})


def sigmoid(chosen, rejected, ref_chosen, ref_rejected, valid, *, beta: float = 0.1,
            label_smoothing: float = 0.0) -> tuple[jax.Array, dict]:
    """DPO (Rafailov et al. 2023, eq. 7): L = -log σ(β h).

    Maximum likelihood of the Bradley-Terry model p(y_w ≻ y_l) = σ(r(y_w) - r(y_l)) with the
    implicit reward r. label_smoothing ε > 0 is conservative DPO (cDPO, Mitchell 2023): each label
    is taken as flipped with probability ε, L = -(1 - ε) log σ(β h) - ε log σ(-β h) (TRL 1.16 keeps
    ε only in its "robust" loss; older TRL had it here).
    """
    logits = beta * (chosen - ref_chosen - (rejected - ref_rejected))
    per_pair = (-(1 - label_smoothing) * jax.nn.log_sigmoid(logits)
                - label_smoothing * jax.nn.log_sigmoid(-logits))
    return _pairwise(per_pair, chosen, rejected, ref_chosen, ref_rejected, valid, beta)


def ipo(chosen, rejected, ref_chosen, ref_rejected, valid, *,
        beta: float = 0.1) -> tuple[jax.Array, dict]:
    """IPO (Azar et al. 2023, eq. 17): L = (h - 1/(2τ))², with τ = beta.

    A squared loss regresses h to the fixed target 1/(2τ) instead of pushing it to infinity, so the
    policy cannot drift without bound on pairs it already ranks right (DPO's over-optimisation on
    deterministic preferences). Departure, as TRL (confirmed with the IPO authors): the log-probs
    are per-token means, so that τ does not depend on completion length; the driver passes them
    normalised unless normalize_length is false.
    """
    h = chosen - ref_chosen - (rejected - ref_rejected)
    return _pairwise((h - 1 / (2 * beta)) ** 2, chosen, rejected, ref_chosen, ref_rejected, valid,
                     beta)


def hinge(chosen, rejected, ref_chosen, ref_rejected, valid, *,
          beta: float = 0.1) -> tuple[jax.Array, dict]:
    """SLiC-HF's calibration loss on the DPO log-ratios (Zhao et al. 2023; as in the DPO paper's
    appendix and TRL): L = max(0, 1 - β h). Pairs ranked with a margin of at least 1/β contribute
    nothing."""
    h = chosen - ref_chosen - (rejected - ref_rejected)
    return _pairwise(jax.nn.relu(1 - beta * h), chosen, rejected, ref_chosen, ref_rejected, valid,
                     beta)


def robust(chosen, rejected, ref_chosen, ref_rejected, valid, *, beta: float = 0.1,
           label_smoothing: float = 0.1) -> tuple[jax.Array, dict]:
    """Robust DPO (Chowdhury et al. 2024, eq. 9), for labels flipped with a known probability ε =
    label_smoothing < 1/2:

        L = [(1 - ε) (-log σ(β h)) - ε (-log σ(-β h))] / (1 - 2ε)

    an unbiased estimate of the clean-label DPO loss (cDPO above averages the two labels instead:
    it is biased)."""
    logits = beta * (chosen - ref_chosen - (rejected - ref_rejected))
    eps = label_smoothing
    per_pair = ((-(1 - eps) * jax.nn.log_sigmoid(logits) + eps * jax.nn.log_sigmoid(-logits))
                / (1 - 2 * eps))
    return _pairwise(per_pair, chosen, rejected, ref_chosen, ref_rejected, valid, beta)


def dpop(chosen, rejected, ref_chosen, ref_rejected, valid, *, beta: float = 0.1,
         lam: float = 50.0) -> tuple[jax.Array, dict]:
    """DPO-Positive (Pal et al. 2024, "Smaug", eq. 3): DPO with a penalty for the chosen completion
    falling below the reference,

        L = -log σ(β (h - λ max(0, log π_ref(y_w|x) - log π_θ(y_w|x))))

    DPO only needs the gap h to grow, and on pairs that differ in a few tokens (a wrong digit, a
    missing tag) it can grow while log π_θ(y_w|x) falls: pushing down the rejected side's tokens
    after the edit lowers the same tokens where the chosen side needs them. The penalty, zero while
    the chosen completion keeps its reference likelihood, makes any fall cost λ times the gap it
    buys. Rewards stay DPO's (the penalty is not part of them)."""
    penalty = jax.nn.relu(ref_chosen - chosen)
    logits = beta * (chosen - ref_chosen - (rejected - ref_rejected) - lam * penalty)
    loss, metrics = _pairwise(-jax.nn.log_sigmoid(logits), chosen, rejected, ref_chosen,
                              ref_rejected, valid, beta)
    return loss, metrics | {"dpop_penalty": _mean(penalty, valid)}


def with_nll(loss, metrics: dict, chosen_nll, valid, *, weight: float) -> tuple[jax.Array, dict]:
    """RPO (Pang et al. 2024, "Iterative Reasoning Preference Optimization", eq. 1): L + α
    L_NLL(y_w), α = weight.

    A preference loss can lower the chosen completion's likelihood too, as long as the rejected one
    falls faster; on tasks with one right answer that costs accuracy. The NLL of the chosen
    completion holds it up. chosen_nll [B] is its per-token mean; departure from TRL (loss_type
    ["sigmoid", "sft"]): the mean is per pair, then over pairs,
    so that the loss stays a mean over pairs."""
    nll = _mean(chosen_nll, valid)
    return loss + weight * nll, metrics | {"loss": loss + weight * nll, "nll_loss": nll}


def _log1mexp(x: jax.Array) -> jax.Array:
    """log(1 - exp(x)) for x < 0, accurate on both sides of -log 2 (Mächler 2012)."""
    return jnp.where(x < -jnp.log(2.0), jnp.log1p(-jnp.exp(x)), jnp.log(-jnp.expm1(x)))


def orpo(chosen, rejected, chosen_nll, valid, *, lam: float = 0.1) -> tuple[jax.Array, dict]:
    """ORPO (Hong et al. 2024, eqs. 4-7): SFT and preference in one reference-free loss,

        L = L_NLL(y_w) - λ log σ(log odds(y_w) - log odds(y_l)),    odds(y) = P(y|x) / (1 - P(y|x))

    with P(y|x) = exp(per-token mean log-prob) as the paper (and TRL) define it;
    log odds(y) = log P - log(1 - P). chosen_nll [B] is the chosen completion's per-token mean
    negative log-likelihood.
    Departures: the NLL is over the chosen completion's tokens, averaged per pair (TRL takes the
    token mean over prompt and completion of the whole batch), so that the loss is a mean over
    pairs; log P is clamped to at most -1e-6 so that a completion the model is certain of still
    gives a finite odds. Rewards are λ log P (as TRL logs).
    """
    # padded pairs get -1 (no log(0) in either branch of _log1mexp, whose gradient would be NaN)
    def safe(x):
        return jnp.minimum(jnp.where(valid > 0, x, -1.0), -1e-6)

    c, r = safe(chosen), safe(rejected)
    log_odds = (c - r) - (_log1mexp(c) - _log1mexp(r))
    ratio = jax.nn.log_sigmoid(log_odds)
    loss = _mean(chosen_nll - lam * ratio, valid)
    metrics = reward_metrics(lam * chosen, lam * rejected, chosen, rejected, valid)
    return loss, metrics | {"loss": loss, "nll_loss": _mean(chosen_nll, valid),
                            "log_odds_ratio": _mean(ratio, valid),
                            "log_odds_chosen": _mean(log_odds, valid)}


def simpo(chosen, rejected, valid, *, beta: float = 2.0, gamma: float = 0.5,
          label_smoothing: float = 0.0) -> tuple[jax.Array, dict]:
    """SimPO (Meng et al. 2024, eq. 6): a reference-free DPO whose reward is the per-token mean
    log-prob,

        L = -log σ(β (log π_θ(y_w|x)/|y_w| - log π_θ(y_l|x)/|y_l|) - γ)

    with a target margin γ (the paper's β ≈ 2-2.5, γ/β ≈ 0.5). label_smoothing ε smooths it as cDPO
    (TRL's CPO trainer does the same). The driver passes length-normalised log-probs;
    rewards are β log π_θ/|y|."""
    logits = beta * (chosen - rejected) - gamma
    per_pair = (-(1 - label_smoothing) * jax.nn.log_sigmoid(logits)
                - label_smoothing * jax.nn.log_sigmoid(-logits))
    loss = _mean(per_pair, valid)
    return loss, (reward_metrics(beta * chosen, beta * rejected, chosen, rejected, valid)
                  | {"loss": loss})


def kto(policy, ref, policy_mismatched, ref_mismatched, label, valid, *, beta: float = 0.1,
        desirable_weight: float = 1.0, undesirable_weight: float = 1.0) -> tuple[jax.Array, dict]:
    """KTO (Ethayarajh et al. 2024, eqs. 7-8): unpaired examples, each desirable
    (label 1) or undesirable (0),

        r = log π_θ(y|x) - log π_ref(y|x),
        z = max(0, mean over the batch of log π_θ(y'|x) - log π_ref(y'|x))
        L = λ_D (1 - σ(β (r - z)))  for desirable y,   λ_U (1 - σ(β (z - r)))  for undesirable y

    z, the reference point, estimates KL(π_θ || π_ref) from mismatched pairs (x, y') (another
    example's completion) and is not differentiated. Departures, as TRL: the loss is the mean over
    examples (not over the weighted sum of classes); z is estimated per micro-batch, so a step with
    k micro-batches differs slightly from one big batch. Metrics: rewards/chosen and logps/chosen
    average the desirable examples, .../rejected the undesirable ones.
    """
    ratio = policy - ref
    z = jax.lax.stop_gradient(jnp.maximum(_mean(policy_mismatched - ref_mismatched, valid), 0.0))
    desirable = (label > 0.5).astype(jnp.float32)
    per_example = jnp.where(desirable > 0,
                            desirable_weight * (1 - jax.nn.sigmoid(beta * (ratio - z))),
                            undesirable_weight * (1 - jax.nn.sigmoid(beta * (z - ratio))))
    loss = _mean(per_example, valid)
    good, bad = valid * desirable, valid * (1 - desirable)
    chosen_reward, rejected_reward = _mean(beta * ratio, good), _mean(beta * ratio, bad)
    return loss, {"loss": loss, "kl": z, "rewards/chosen": chosen_reward,
                  "rewards/rejected": rejected_reward,
                  "rewards/margins": chosen_reward - rejected_reward,
                  "logps/chosen": _mean(policy, good), "logps/rejected": _mean(policy, bad),
                  COUNT: jnp.sum(valid.astype(jnp.float32))}


# losses without π_ref: no reference forward, nothing precomputed
REFERENCE_FREE = ("orpo", "simpo")
# h-based, with a reference
PAIRWISE = {"sigmoid": sigmoid, "ipo": ipo, "hinge": hinge, "robust": robust, "dpop": dpop}
