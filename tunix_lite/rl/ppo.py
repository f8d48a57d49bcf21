"""PPO with a value head: the critic GRPO's groups replace, for comparison on the same budget.

    config = PPOConfig.from_yaml(...)
             # the same rollout, reward and clip options as GRPO (RLConfig)
    result = run_ppo(config)

The policy and its value function share one forward pass: a `ScalarHead` reads the policy's own
features, so one pass gives both log-probs and values (Schulman et al. 2017, arXiv 1707.06347,
eq. 9, with a shared trunk). Per rollout: sample, score once with the current weights (old
log-probs and values V_old), put each completion's reward on its last token, estimate advantages
with GAE(gamma, lambda) and whiten them, then take inner_iterations x mini_batches steps of
`ppo_loss`.

How this departs from PPO for language models as usually written (InstructGPT, arXiv 2203.02155):
- the KL to the reference is a loss term (beta x k3, as in GRPO), not a per-token penalty folded
  into the reward, so a comparison with GRPO differs only in how advantages are estimated;
- the value head is a linear head on the policy's features instead of a second model (half the
  compute), and the value loss trains that head alone, where eq. 9 trains the shared trunk on both
  losses: a value gradient in a shared LoRA trunk made the policy collapse
  (tunix_lite/course/results/06_rl_gemma.md);
- sequences are the episodes and tokens the actions; gamma defaults to 1 (no discount within a
  completion), and so does lambda (verl's defaults too; the PPO paper's 0.95 was tuned on control
  tasks that reward every step). With one reward at the end, lambda < 1 gives a token far from the
  end an advantage made mostly of the value head's guesses, which teach the policy to stop early
  (tunix_lite/course/results/06_rl.md, "GRPO, Dr. GRPO, RLOO, PPO").
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.models.heads import ScalarHead
from tunix_lite.rl.advantages import gae, whiten
from tunix_lite.rl.config import RLConfig
from tunix_lite.rl.losses import KL_ESTIMATORS, clipped_surrogate, clipped_value_loss, token_mean
from tunix_lite.rl.rollouts import GroupSampler, RolloutStream
from tunix_lite.rl.setup import rl_setup
from tunix_lite.tokenizer import padding_id
from tunix_lite.training.config import option
from tunix_lite.training.evals import plot_history, task_eval_fn
from tunix_lite.training.harness import RunResult
from tunix_lite.training.losses import sequence_log_probs
from tunix_lite.training.trainer import COUNT, pad_batch


@dataclasses.dataclass
class PPOConfig(RLConfig):
    """batch_size counts prompts per rollout, as for GRPO (group_size completions of each; 1 is
    classic PPO)."""

    algorithm: ClassVar[str] = "ppo"
    gamma: float = option(1.0, "discount per token", gt=0, le=1)
    lam: float = option(1.0, "GAE lambda: 1 uses the value head only as a baseline (R - V), 0 "
                        "trusts its predictions", ge=0, le=1)
    value_coef: float = option(0.1, "weight of the value loss beside the policy loss", ge=0)
    value_clip: float = option(
        0.2, "the value may move this far from V_old before the clipped loss takes over", gt=0)
    whiten_advantages: bool = option(
        True, "normalise advantages to mean 0, std 1 over each rollout's tokens")


def policy_and_values(critic: ScalarHead, batch: dict) -> tuple[jax.Array, jax.Array]:
    """(log-probs [B, T], values [B, T]) from one forward pass of the shared trunk."""
    policy = critic.backbone
    features = policy.features(batch["inputs"], batch["positions"],
                               segment_ids=batch.get("segment_ids"))
    # the value loss trains the head alone: through the shared trunk it wrecked the policy (see the
    # module doc)
    values = critic.head(jax.lax.stop_gradient(features).astype(jnp.float32))[..., 0]
    return sequence_log_probs(policy, batch, features), values


def ppo_loss(critic, batch: dict, frozen, *, epsilon_low: float = 0.2, epsilon_high: float = 0.2,
             beta: float = 0.0, kl_estimator: str = "k3", value_clip: float = 0.2,
             value_coef: float = 0.1):
    """PPO's loss on rollout rows {inputs, targets, weights, positions, segment_ids,
    old_logprobs, old_values, advantages, returns} [B, T], a token mean (count = completion tokens):

        l_t = -min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)
              + value_coef * L^V_t + beta * KL_t

    with L^V the clipped value loss (`tunix_lite.rl.losses.clipped_value_loss`). critic: the
    ScalarHead over the policy; frozen: the reference policy (None when beta = 0).
    """
    logp, values = policy_and_values(critic, batch)
    mask = batch["weights"]
    policy_term, ratio, clipped = clipped_surrogate(logp, batch["old_logprobs"],
                                                    batch["advantages"], mask,
                                                    eps_low=epsilon_low, eps_high=epsilon_high)
    value_term = clipped_value_loss(values, batch["old_values"], batch["returns"], value_clip)
    per_token = policy_term + value_coef * value_term
    metrics = {"policy_loss": token_mean(policy_term, mask)[0],
               "value_loss": token_mean(value_term, mask)[0],
               "value": token_mean(values, mask)[0], "ratio": token_mean(ratio, mask)[0],
               "clipped": token_mean(clipped.astype(logp.dtype), mask)[0]}
    if beta:
        kl = KL_ESTIMATORS[kl_estimator](logp,
                                         jax.lax.stop_gradient(sequence_log_probs(frozen, batch)))
        per_token = per_token + beta * kl
        metrics["kl"] = token_mean(kl, mask)[0]
    loss, count = token_mean(per_token, mask)
    return loss, {"loss": loss, COUNT: count} | metrics


@nnx.jit
def _score(critic, batch):
    return policy_and_values(critic, batch)


def last_token_rewards(rewards: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[R] sequence rewards -> [R, T] per-token rewards: each completion's reward on its last token,
    0 elsewhere."""
    T = mask.shape[1]
    last = T - 1 - np.argmax(mask[:, ::-1] > 0, axis=1)
    out = np.zeros(mask.shape, np.float32)
    out[np.arange(len(rewards)), last] = rewards * (mask.sum(axis=1) > 0)
    return out


def ppo_rows(config: PPOConfig, critic: ScalarHead, pad_id: int):
    """prepare(groups) for the stream: rows + old log-probs and values (one forward of the
    current weights), GAE advantages (whitened) and returns, padded to batch_size x
    group_size rows."""

    def prepare(groups):
        rows = pad_batch(groups.rows(pad_id), config.batch_size * config.group_size)
        critic.eval()
        try:
            old_logprobs, old_values = map(np.asarray, _score(critic, {k: rows[k] for k in (
                "inputs", "targets", "positions", "segment_ids")}))
        finally:
            critic.train()
        mask = rows["weights"]
        rewards = np.zeros(len(mask), np.float32)
        rewards[:len(groups.rewards)] = groups.rewards
        advantages, returns = gae(last_token_rewards(rewards, mask), old_values, mask, config.gamma,
                                  config.lam)
        if config.whiten_advantages:
            advantages = whiten(advantages, mask)
        return rows | {"old_logprobs": old_logprobs, "old_values": old_values * mask,
                       "advantages": np.asarray(advantages), "returns": np.asarray(returns)}

    return prepare


def run_ppo(config: PPOConfig, *, rewards=None, verbose: bool = True) -> RunResult:
    """Train config.model with PPO and a value head on its features; exports the policy (the head
    is dropped)."""
    setup = rl_setup(config, rewards=rewards, verbose=verbose)
    policy, tokenizer = setup.model, setup.tokenizer
    critic = ScalarHead(policy, rngs=nnx.Rngs(config.seed))
    sampler = GroupSampler(config, policy, setup.engine, setup.prompts, setup.rewards)
    stream = RolloutStream(config, sampler, ppo_rows(config, critic, padding_id(tokenizer)))
    wrt = nnx.Any(nnx.LoRAParam, nnx.PathContains("head")) if config.lora_rank else nnx.Param
    loss = functools.partial(ppo_loss, epsilon_low=config.epsilon_low,
                             epsilon_high=config.epsilon_high, beta=config.beta,
                             kl_estimator=config.kl_estimator, value_clip=config.value_clip,
                             value_coef=config.value_coef)
    report = (f"{setup.prompts.report()} x {config.group_size} completions of <= "
              f"{config.max_new_tokens} tokens; value head on the policy's features; "
              f"GAE(gamma={config.gamma}, lambda={config.lam})")
    report += f"\n{setup.placement()}" if setup.placement() else ""
    setup.run.say(report)
    task_eval = task_eval_fn(config, critic, tokenizer, setup.validation, n_test=config.n_test,
                             policy=lambda m: m.backbone)
    result = setup.run.train(critic, tokenizer, loss, stream.batches, task_eval,
                             frozen=setup.frozen, wrt=wrt, report=report,
                             host_metrics=stream.metrics, show=("reward", "kl", "length"),
                             export_model=policy)
    if setup.run.out is not None:
        curves = plot_history(result.history, ("reward", "kl", "length", "value_loss"),
                              title=f"ppo: {config.model}")
        curves.savefig(setup.run.out / "curves.png")
    return dataclasses.replace(result, model=policy)
