"""GRPO and its variants (Dr. GRPO, RLOO, DAPO's pieces, GSPO), end to end: one config in, a trained policy out.

    config = GRPOConfig.from_yaml("configs/grpo_tiny.yaml")      # or GRPOConfig(model=..., steps=100, ...)
    result = run_grpo(config)
    result.before, result.after, result.history                 # task scores; per-step reward, KL, length...

Each step of the loop, for B prompts:
  1. sample G completions of each from the live policy (the rollout engine: `tunix_lite.rl.engine`; on the
     trainer's devices, or with `rollout_mesh:` on devices of its own, the new weights sent after each update);
  2. score them with the reward functions and turn the rewards into advantages, relative to the group;
  3. make fixed-length rows and take inner_iterations x mini_batches optimizer steps on `grpo_loss`.

How this departs from GRPO as published (DeepSeekMath, arXiv 2402.03300), each a config choice:
- `advantage`: "grpo" (r - mean) / std as published; "drgrpo" drops the / std (Dr. GRPO, arXiv 2503.20783);
  "rloo" uses the leave-one-out mean (arXiv 2402.14740).
- `aggregation`: "sequence-mean-token-mean" as published; "token-mean" (DAPO, arXiv 2503.14476);
  "sequence-mean-token-sum-norm" (Dr. GRPO).
- `epsilon_high` may differ from `epsilon_low` (DAPO's clip-higher); `ratio_level: sequence` is GSPO's ratio.
- `dynamic_sampling` (DAPO) drops groups with equal rewards and samples more prompts; `overlong_buffer`
  (DAPO) adds a length penalty in tokens.
- KL: the published k3 estimator by default, k1 optional; beta = 0 builds no reference model at all.
- Outcome rewards only (one number per completion), no process supervision; no iterative reward-model retraining.
- `rollout_dtype: bfloat16` samples from a bfloat16 copy of the policy; pi_old in the ratio is still the trained
  model's own float log-probs (recomputed, never the sampler's), so the samples are slightly off-policy, as with
  any bfloat16 inference engine.
- With one optimizer step per rollout (the default), old log-probs are the current ones under stop_gradient: the
  ratio is exactly 1 and the clip never acts; it matters with inner_iterations or mini_batches > 1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import ClassVar, Literal

import jax
import numpy as np

from tunix_lite import sharding
from tunix_lite.rl.advantages import ESTIMATORS, decoupled_advantages
from tunix_lite.rl.engine import SamplerEngine
from tunix_lite.rl.losses import KL_ESTIMATORS, aggregate, clipped_surrogate
from tunix_lite.rl.rollouts import (Prompts, RLOptions, RolloutStream, old_log_probs, padded_rows, plot_curves,
                                    reference_policy, task_eval_fn)
from tunix_lite.tokenizer import padding_id
from tunix_lite.training.config import (ConfigBase, ConfigError, DataOptions, ModelOptions, OptimOptions,
                                        RunOptions, check_mesh, option)
from tunix_lite.training.harness import Run, RunResult, build_model, trained_variables
from tunix_lite.training.losses import sequence_log_probs
from tunix_lite.training.trainer import COUNT


@dataclasses.dataclass
class GRPOConfig(ConfigBase, RLOptions, RunOptions, DataOptions, OptimOptions, ModelOptions):
    """batch_size counts prompts per rollout: each optimizer step trains on batch_size x group_size / mini_batches
    completions."""

    algorithm: ClassVar[str] = "grpo"
    advantage: Literal["grpo", "drgrpo", "rloo"] = option("grpo", "group advantage: (r - mean) / std, r - mean "
                                                                  "(Dr. GRPO), or leave-one-out (RLOO)")
    reward_aggregation: Literal["sum", "normalize_each"] = option(
        "sum", "several rewards: the group advantage of their weighted sum, or each reward's own group "
               "advantage, weighted, summed and rescaled over the batch (GDPO)")
    aggregation: Literal["token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum-norm"] = option(
        "sequence-mean-token-mean", "how per-token losses become one number (tunix_lite.rl.losses)")
    ratio_level: Literal["token", "sequence"] = option("token", "importance ratio per token, or one per sequence "
                                                                "(GSPO)")
    dynamic_sampling: bool = option(False, "drop groups whose rewards are all equal and sample more prompts (DAPO)")
    max_refills: int = option(4, "dynamic sampling: extra rollouts tried per batch before training on fewer groups",
                              ge=0)
    rollout_mesh: str | dict[str, int] | None = option(
        None, "sample on devices of their own: null (colocated: on the trainer's devices, from its weights), axis "
              "sizes {data: D, fsdp: F, tensor: T} over the last D x F x T devices, or a strategy (or sizes with one "
              "-1) over the last half; `mesh:` then spans the devices left, and after each update the trained "
              "weights (LoRA: only the adapters) are resharded onto the rollout copy", resume="free")

    def validate(self) -> None:
        super().validate()
        self.validate_rl()
        if self.group_size < 2:
            raise ConfigError(f"group_size: GRPO compares the completions of a prompt with each other; need at least "
                              f"2, got {self.group_size}")
        if self.rollout_mesh is not None:
            check_mesh(self.rollout_mesh, None, key="rollout_mesh")


def split_devices(config: GRPOConfig, devices=None) -> tuple[list, jax.sharding.Mesh | None]:
    """(the devices `mesh:` spans, the rollout mesh): every device and None when rollouts are colocated; else the
    first devices train and the last `rollout_mesh` ones sample. A ConfigError, before any compute, when the two
    meshes do not fit side by side on this machine's devices."""
    devices = list(devices) if devices is not None else jax.devices()
    spec, n = config.rollout_mesh, len(devices)
    if spec is None:
        return devices, None
    sizes = spec if isinstance(spec, dict) else {}
    take = math.prod(sizes.values()) if sizes and -1 not in sizes.values() else n // 2
    if not 0 < take < n:
        raise ConfigError(f"rollout_mesh: {spec!r} needs {max(take, 1)} device(s) and the trainer at least 1 more, "
                          f"this machine has {n}; give the rollouts fewer devices, or set rollout_mesh: null to sample "
                          "on the trainer's devices")
    check_mesh(spec, None, num_devices=take, key="rollout_mesh", devices=f"the rollouts get {take} (the last half "
                                                                          f"of this machine's {n})")
    if config.mesh is not None:  # sizes that would overlap the rollout devices, or a strategy that does not fit
        check_mesh(config.mesh, config.batch_size, config.micro_batches, num_devices=n - take,
                   devices=f"rollout_mesh: {spec} takes {take} of this machine's {n} and leaves {n - take} (the "
                           f"meshes may not share devices); make mesh: use {n - take} (a strategy name spans them)")
    return devices[:n - take], sharding.resolve_mesh(spec, devices[n - take:])


def grpo_objective(logp, old_logp, reference_logp, advantages, mask, *, epsilon_low: float = 0.2,
                   epsilon_high: float = 0.2, beta: float = 0.0, kl_estimator: str = "k3",
                   aggregation: str = "sequence-mean-token-mean", ratio_level: str = "token",
                   max_tokens: int | None = None):
    """The GRPO family's loss from log-probs [B, T] (policy, old policy, reference: None when beta = 0),
    advantages [B] and the completion mask [B, T]:

        l_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t(pi || pi_ref)

    aggregated over tokens and sequences by `aggregation` (tunix_lite.rl.losses), which also fixes the count.
    Returns (loss, metrics): loss, count, kl, ratio, and clipped (the fraction of tokens whose gradient the clip
    removed), each metric a mean over the loss's own units (tokens, or sequences then tokens).
    """
    per_token, ratio, clipped = clipped_surrogate(logp, old_logp, advantages, mask, eps_low=epsilon_low,
                                                  eps_high=epsilon_high, level=ratio_level)
    metrics_mode = "token-mean" if aggregation == "token-mean" else "sequence-mean-token-mean"
    metrics = {"ratio": aggregate(ratio, mask, metrics_mode)[0],
               "clipped": aggregate(clipped.astype(logp.dtype), mask, metrics_mode)[0]}
    if beta:
        kl = KL_ESTIMATORS[kl_estimator](logp, reference_logp)
        per_token = per_token + beta * kl
        metrics["kl"] = aggregate(kl, mask, metrics_mode)[0]
    loss, count = aggregate(per_token, mask, aggregation, max_tokens)
    return loss, {"loss": loss, COUNT: count} | metrics


def grpo_loss(model, batch: dict, frozen, **options):
    """`grpo_objective` on rollout rows {inputs, targets, weights, positions, segment_ids [B, T], advantages [B][,
    old_logprobs [B, T]]} (`weights` = the completion mask); frozen: the reference policy (None when beta = 0).
    Without old_logprobs the ratio is exp(logp - stop_gradient(logp)) = 1: one optimizer step per rollout."""
    logp = sequence_log_probs(model, batch)
    old = batch["old_logprobs"] if "old_logprobs" in batch else jax.lax.stop_gradient(logp)
    reference = jax.lax.stop_gradient(sequence_log_probs(frozen, batch)) if options.get("beta") else None
    return grpo_objective(logp, old, reference, batch["advantages"], batch["weights"], **options)


def loss_from_config(config: GRPOConfig):
    """grpo_loss with the config's choices bound (one object per run: the train step compiles once)."""
    return functools.partial(grpo_loss, epsilon_low=config.epsilon_low, epsilon_high=config.epsilon_high,
                             beta=config.beta, kl_estimator=config.kl_estimator, aggregation=config.aggregation,
                             ratio_level=config.ratio_level, max_tokens=config.max_new_tokens)


def grpo_rows(config: GRPOConfig, model, pad_id: int, weights: Mapping[str, float]):
    """prepare(groups) for the stream: rows + group advantages (+ old log-probs when a rollout feeds several
    optimizer steps), padded to batch_size x group_size rows. `weights`: each reward's, by name."""
    estimator = ESTIMATORS[config.advantage]

    def advantages(groups) -> np.ndarray:
        if config.reward_aggregation == "normalize_each":
            return np.asarray(decoupled_advantages(groups.parts, weights, config.group_size, estimator))
        return np.asarray(estimator(groups.rewards, config.group_size))

    def prepare(groups):
        rows = groups.rows(pad_id) | {"advantages": advantages(groups)}
        rows = padded_rows(rows, config.batch_size * config.group_size)
        if config.steps_per_rollout > 1:
            rows["old_logprobs"] = old_log_probs(model, rows)
        return rows

    return prepare


def run_grpo(config: GRPOConfig, *, rewards=None, verbose: bool = True) -> RunResult:
    """Train config.model with GRPO (or the variant the config names); `rewards` (a tunix_lite.rl.rewards.Rewards)
    replaces the config's named rewards, e.g. with your own functions. Writes curves.png beside the run's other
    outputs."""
    from tunix_lite.training.sft import load_data

    run = Run(config, verbose=verbose)
    run.devices, rollout_mesh = split_devices(config)
    model, tokenizer = build_model(config)
    train, validation = load_data(config)
    prompts = Prompts.from_config(config, train, tokenizer)
    rewards = rewards or config.reward_functions()
    frozen = reference_policy(model, bool(config.lora_rank)) if config.beta else None
    engine = SamplerEngine(model, tokenizer, prompt_len=prompts.length, mesh=rollout_mesh,
                           wrt=trained_variables(config), weights_dtype=config.rollout_dtype)
    prepare = grpo_rows(config, model, padding_id(tokenizer), rewards.weights)
    stream = RolloutStream(config, model, engine, prompts, rewards, prepare,
                           dynamic_sampling=config.dynamic_sampling, max_refills=config.max_refills)
    report = (f"{prompts.report()} x {config.group_size} completions of <= "
              f"{config.max_new_tokens} tokens; rows of {stream.row_len}; rewards "
              + " + ".join(f"{w:g} x {n}" for n, w in rewards.weights.items()))
    if rollout_mesh is not None:
        trainer_ids = [d.id for d in run.devices[:None if config.mesh else 1]]
        report += (f"\nrollouts on devices {[d.id for d in rollout_mesh.devices.flat]} ({dict(rollout_mesh.shape)}), "
                   f"training on {trainer_ids}: a copy of {engine.weights.last['bytes']:,} bytes, then "
                   f"{'the adapters' if config.lora_rank else 'every parameter'} sent after each update")
    run.say(report)
    result = run.train(model, tokenizer, loss_from_config(config), stream.batches,
                       task_eval_fn(config, model, tokenizer, validation), frozen=frozen, report=report,
                       host_metrics=stream.metrics, show=("reward", "kl", "length"))
    if run.out is not None:
        plot_curves(result.history, title=f"{config.algorithm}: {config.model}").savefig(run.out / "curves.png")
    return result
