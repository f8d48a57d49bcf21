"""GRPO and its variants (Dr. GRPO, RLOO, DAPO's pieces, GSPO), end to end: one config in, a trained
policy out.

    config = GRPOConfig.from_yaml("grpo_tiny")
             # or GRPOConfig(model=..., steps=100, ...)
    result = run_grpo(config)
    result.before, result.after, result.history  # task scores; per-step reward, KL, length...

Each step of the loop, for B prompts:
  1. sample G completions of each from the live policy (the rollout engine: `tunix_lite.rl.engine`;
     on the trainer's devices, or with `rollout_mesh:` on devices of its own, the new weights sent
     after each update), or, with `max_staleness:`, from weights up to that many updates old,
     sampled on a thread while the trainer steps (`tunix_lite.rl.asynchronous`);
  2. score them with the reward functions and turn the rewards into advantages, relative to the
     group;
  3. make fixed-length rows and take inner_iterations x mini_batches optimizer steps on `grpo_loss`
     (`tunix_lite.rl.losses`, where the agent's GRPO finds it too).

How this departs from GRPO as published (DeepSeekMath, arXiv 2402.03300), each a config choice:
- `advantage`: "grpo" (r - mean) / std as published; "drgrpo" drops the / std (Dr. GRPO,
  arXiv 2503.20783); "rloo" uses the leave-one-out mean (arXiv 2402.14740).
- `aggregation`: "sequence-mean-token-mean" as published; "token-mean" (DAPO, arXiv 2503.14476);
  "sequence-mean-token-sum-norm" (Dr. GRPO).
- `epsilon_high` may differ from `epsilon_low` (DAPO's clip-higher); `ratio_level: sequence` is
  GSPO's ratio.
- `dynamic_sampling` (DAPO) drops groups with equal rewards and samples more prompts;
  `overlong_buffer` (DAPO) adds a length penalty in tokens.
- KL: the published k3 estimator by default, k1 optional; beta = 0 builds no reference model at all.
- Outcome rewards only (one number per completion), no process supervision; no iterative
  reward-model retraining.
- `rollout_dtype: bfloat16` samples from a bfloat16 copy of the policy; pi_old in the ratio is still
  the trained model's own float log-probs (recomputed, never the sampler's), so the samples are
  slightly off-policy, as with any bfloat16 inference engine. So are rollouts `max_staleness`
  updates old, and those of a temperature other than 1 (the loss scores the policy at 1). Every
  step logs how far the sampler is from pi_old on its tokens (`mismatch/*`: KL k1 and k3, the
  perplexity ratio, chi^2 per token and per sequence, the share of ratios outside
  [1/cap, cap]), and `rollout_correction` weighs the surrogate by the truncated or masked
  importance weight pi_old / pi_sampler (`tunix_lite.rl.losses.correction_weights`; "none" by
  default, as published). With a correction, pi_old is the decoupled objective's proximal policy
  (Hilton et al. 2021, arXiv 2110.00641): the weights the rollout's first update starts from.
- With one optimizer step per rollout (the default), old log-probs are the current ones under
  stop_gradient: the ratio is exactly 1 and the clip never acts; it matters with inner_iterations or
  mini_batches > 1.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import ClassVar, Literal

import numpy as np

from tunix_lite.rl.advantages import ESTIMATORS, decoupled_advantages
from tunix_lite.rl.config import RLConfig
from tunix_lite.rl.losses import grpo_loss
from tunix_lite.rl.rollouts import GroupSampler, RolloutStream, old_log_probs
from tunix_lite.rl.setup import rl_setup
from tunix_lite.tokenizer import padding_id
from tunix_lite.training.config import ConfigError, option
from tunix_lite.training.evals import plot_history, task_eval_fn
from tunix_lite.training.harness import RunResult
from tunix_lite.training.trainer import pad_batch


@dataclasses.dataclass
class GRPOConfig(RLConfig):
    """batch_size counts prompts per rollout: each optimizer step trains on batch_size x group_size
    / mini_batches completions."""

    algorithm: ClassVar[str] = "grpo"
    advantage: Literal["grpo", "drgrpo", "rloo"] = option(
        "grpo", "group advantage: (r - mean) / std, r - mean (Dr. GRPO), or leave-one-out (RLOO)")
    reward_aggregation: Literal["sum", "normalize_each"] = option(
        "sum", "several rewards: the group advantage of their weighted sum, or each reward's own "
               "group advantage, weighted, summed and rescaled over the batch (GDPO)")
    aggregation: Literal["token-mean", "sequence-mean-token-mean",
                         "sequence-mean-token-sum-norm"] = option(
        "sequence-mean-token-mean", "how per-token losses become one number (tunix_lite.rl.losses)")
    ratio_level: Literal["token", "sequence"] = option(
        "token", "importance ratio per token, or one per sequence (GSPO)")
    dynamic_sampling: bool = option(
        False, "drop groups whose rewards are all equal and sample more prompts (DAPO)")
    max_refills: int = option(
        4, "dynamic sampling: extra rollouts tried per batch before training on fewer groups", ge=0)
    rollout_correction: Literal["none", "token_truncate", "token_mask", "sequence_truncate",
                                "sequence_mask"] = option(
        "none", "weigh the surrogate by the sampler-to-policy importance ratio pi / pi_sampler per "
                "token or per sequence, truncated at rollout_correction_cap or dropped beyond it "
                "(tunix_lite.rl.losses.correction_weights); none: samples count as on-policy")
    rollout_correction_cap: float = option(
        2.0, "C: the largest importance weight kept; the mismatch metrics count the tokens whose "
             "ratio leaves [1/C, C]", gt=1)
    max_staleness: int | None = option(
        None, "null: sample each rollout from the newest weights, then train on it (in turn); an "
              "integer M: sample rollout k from the weights M updates before its first step, on a "
              "thread while the trainer steps (at the same time on rollout_mesh: devices, sharing "
              "them otherwise); 0 gives the in-turn run's numbers exactly", ge=0,
        resume="free")

    def check(self) -> None:
        if self.group_size < 2:
            raise ConfigError("group_size: GRPO compares the completions of a prompt with each "
                              f"other; need at least 2, got {self.group_size}")


def loss_from_config(config: GRPOConfig):
    """grpo_loss with the config's choices bound (one object per run: the train step
    compiles once)."""
    return functools.partial(grpo_loss, epsilon_low=config.epsilon_low,
                             epsilon_high=config.epsilon_high, beta=config.beta,
                             kl_estimator=config.kl_estimator, aggregation=config.aggregation,
                             ratio_level=config.ratio_level, max_tokens=config.max_new_tokens,
                             completion_tokens=config.max_new_tokens,
                             rollout_correction=config.rollout_correction,
                             rollout_correction_cap=config.rollout_correction_cap)


def grpo_rows(config: GRPOConfig, model, pad_id: int, weights: Mapping[str, float]):
    """prepare(groups) for the stream: rows + the sampler's log-probs of the tokens it drew
    (rollout_logprobs) + group advantages (+ old log-probs when a rollout feeds several optimizer
    steps), padded to batch_size x group_size rows. `weights`: each reward's, by name."""
    estimator = ESTIMATORS[config.advantage]

    def advantages(groups) -> np.ndarray:
        if config.reward_aggregation == "normalize_each":
            return np.asarray(decoupled_advantages(groups.parts, weights, config.group_size,
                                                   estimator))
        return np.asarray(estimator(groups.rewards, config.group_size))

    def prepare(groups):
        rows = groups.rows(pad_id, rollout_logprobs=groups.output.sampled_logprobs)
        rows["advantages"] = advantages(groups)
        rows = pad_batch(rows, config.batch_size * config.group_size)
        if config.steps_per_rollout > 1:
            rows["old_logprobs"] = old_log_probs(model, rows)
        return rows

    return prepare


def run_grpo(config: GRPOConfig, *, rewards=None, verbose: bool = True) -> RunResult:
    """Train config.model with GRPO (or the variant the config names); `rewards` (a
    tunix_lite.rewards.functions.Rewards) replaces the config's named rewards, e.g. with your own
    functions. Writes curves.png beside the run's other outputs."""
    setup = rl_setup(config, rewards=rewards, verbose=verbose)
    model, tokenizer, rewards = setup.model, setup.tokenizer, setup.rewards
    sampler = GroupSampler(config, model, setup.engine, setup.prompts, rewards)
    prepare = grpo_rows(config, model, padding_id(tokenizer), rewards.weights)
    stream = RolloutStream(config, sampler, prepare, dynamic_sampling=config.dynamic_sampling,
                           max_refills=config.max_refills, rollout_lag=config.max_staleness or 0,
                           asynchronous=config.max_staleness is not None)
    report = (f"{setup.prompts.report()} x {config.group_size} completions of <= "
              f"{config.max_new_tokens} tokens; rows of {sampler.row_len}; rewards "
              + " + ".join(f"{w:g} x {n}" for n, w in rewards.weights.items()))
    report += f"\n{setup.placement()}" if setup.placement() else ""
    setup.run.say(report)
    task_eval = task_eval_fn(config, model, tokenizer, setup.validation, n_test=config.n_test)
    result = setup.run.train(model, tokenizer, loss_from_config(config), stream.batches, task_eval,
                             frozen=setup.frozen, report=report, host_metrics=stream.metrics,
                             show=("reward", "kl", "length"))
    if note := stream.low_signal_note(result.history):
        setup.run.say(note)
    if setup.run.out is not None:
        curves = plot_history(result.history, ("reward", "kl", "length"),
                              title=f"{config.algorithm}: {config.model}")
        curves.savefig(setup.run.out / "curves.png")
    return result
