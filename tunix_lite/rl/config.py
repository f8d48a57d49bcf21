"""The config GRPO, PPO and the agent share: rollouts, rewards, the clipped update, the KL anchor.

    @dataclasses.dataclass
    class GRPOConfig(RLConfig):
        algorithm: ClassVar[str] = "grpo"
        ...

An algorithm extends `RLConfig` with its own fields and `check()`, as every run's config extends
`TrainConfig` (tunix_lite.training.config). The rewards are named as a config file lists them
(`tunix_lite.rewards.functions.reward_set`), checked here before any data or weights load.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from tunix_lite.data import reasoning_gym
from tunix_lite.rewards.functions import Rewards, overlong_penalty, reward_set
from tunix_lite.training.config import ConfigError, TrainConfig, check_mesh, option


@dataclasses.dataclass
class RLConfig(TrainConfig):
    """A TrainConfig with rollouts, rewards, the clipped update and the KL anchor: what GRPO, PPO
    and the agent share."""

    group_size: int = option(8, "G: completions sampled per prompt", ge=1)
    max_new_tokens: int = option(64, "completion budget in tokens", ge=1)
    max_prompt_tokens: int | None = option(
        None, "longest prompt allowed; a completion is cut where its row of seq_len tokens ends "
              "(null: seq_len + 1 - max_new_tokens, no cuts)", ge=1)
    temperature: float = option(
        1.0, "rollout sampling temperature (the loss scores the policy at 1.0)", gt=0)
    top_k: int | None = option(None, "sample from the k most likely tokens only (null: all)", ge=1)
    top_p: float | None = option(None, "nucleus sampling mass (null: off)", gt=0, le=1)
    rollout_dtype: Literal["float32", "bfloat16"] = option(
        "float32", "weights and matmuls of the rollout sampler: bfloat16 samples from a copy "
                   "cast once per update (half the bytes per token on GPU/TPU; slower on "
                   "XLA:CPU, see tunix_lite.sampler); the loss and old log-probs are computed "
                   "by the trained model")
    rewards: list[str] = option(["exact_match", "format"],
                                "reward functions by name (tunix_lite.rewards), or "
                                "reward_model:PATH for a trained reward model")
    reward_weights: list[float] | None = option(None, "one weight per reward (null: 1.0 each)")
    overlong_buffer: int = option(0, "DAPO's soft overlong punishment over the last N tokens of "
                                     "the budget, added as reward 'overlong' (0: off)", ge=0)
    inner_iterations: int = option(1, "mu: optimizer passes over each rollout batch", ge=1)
    mini_batches: int = option(
        1, "optimizer steps per pass: each rollout batch is split into this many", ge=1)
    epsilon_low: float = option(0.2, "clip the ratio below at 1 - epsilon_low", gt=0, lt=1)
    epsilon_high: float = option(
        0.2, "clip the ratio above at 1 + epsilon_high (DAPO's clip-higher: 0.28)", gt=0)
    beta: float = option(
        0.04, "KL penalty to the reference policy (0: no reference model at all)", ge=0)
    kl_estimator: Literal["k1", "k3"] = option(
        "k3", "per-token KL estimator (tunix_lite.rl.losses)")
    n_accuracy: int = option(
        64, "validation prompts answered greedily for exact match (0: none)", ge=0, resume="free")
    n_test: int = option(
        0, "held-out test-split prompts answered greedily before and after training (0: none)",
        ge=0, resume="free")
    rollout_mesh: str | dict[str, int] | None = option(
        None, "sample on devices of their own: null (colocated: on the trainer's devices, from its "
              "weights), axis sizes {data: D, fsdp: F, tensor: T} over the last D x F x T devices, "
              "or a strategy (or sizes with one -1) over the last half; `mesh:` then spans the "
              "devices left, and after each update the trained weights (LoRA: only the adapters) "
              "are resharded onto the rollout copy", resume="free")

    @property
    def steps_per_rollout(self) -> int:
        return self.inner_iterations * self.mini_batches

    def check(self) -> None:
        if "reasoning_gym" in self.rewards:
            self._check_reasoning_gym_reward()
        rows = self.batch_size * self.group_size
        if rows % (self.mini_batches * self.micro_batches):
            raise ConfigError(f"mini_batches: {self.batch_size} prompts x {self.group_size} "
                              f"completions = {rows} rows cannot be split into {self.mini_batches} "
                              f"mini-batches of {self.micro_batches} micro-batches")
        if self.checkpoint_every % self.steps_per_rollout:
            raise ConfigError(f"checkpoint_every: {self.checkpoint_every} is not a multiple of the "
                              f"{self.steps_per_rollout} optimizer steps each rollout feeds "
                              "(inner_iterations x mini_batches), so a resumed run could not "
                              "continue exactly")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.rewards):
            raise ConfigError(f"reward_weights: {len(self.reward_weights)} weights for "
                              f"{len(self.rewards)} rewards ({', '.join(self.rewards)})")
        # an unknown name is a ConfigError here, before any data or weights load
        self.reward_functions()
        if self.rollout_mesh is not None:
            check_mesh(self.rollout_mesh, None, key="rollout_mesh")
        if self.overlong_buffer > self.max_new_tokens:
            raise ConfigError(f"overlong_buffer: {self.overlong_buffer} is longer than "
                              f"max_new_tokens={self.max_new_tokens}")
        if self.prompt_budget < 1 or self.prompt_budget >= self.seq_len:
            raise ConfigError(f"seq_len: rows of {self.seq_len} tokens leave no room for both a "
                              f"prompt of up to {self.prompt_budget} tokens and a completion "
                              f"(max_new_tokens={self.max_new_tokens}); raise seq_len or set "
                              "max_prompt_tokens")

    def _check_reasoning_gym_reward(self) -> None:
        """The reasoning_gym reward scores reasoning_gym data (its entry column); its tasks'
        scorers are probed here, so an unsound one stops before any compute."""
        if self.train_data == "synthetic":
            raise ConfigError("rewards: reasoning_gym scores reasoning_gym data (its entry "
                              "column); set train_data: reasoning_gym:TASK")
        if reasoning_gym.is_spec(self.train_data):
            try:
                reasoning_gym.probe_scorers(self.train_data)
            except ValueError as e:
                raise ConfigError(f"rewards: {e}") from None

    @property
    def prompt_budget(self) -> int:
        """The longest prompt a row holds."""
        return self.max_prompt_tokens or self.seq_len + 1 - self.max_new_tokens

    def reward_functions(self) -> Rewards:
        try:
            rewards = reward_set(self.rewards, self.reward_weights,
                                 load_reward_model=_load_reward_model)
        except ValueError as e:
            raise ConfigError(f"rewards: {e}") from None
        if self.overlong_buffer:
            return Rewards(rewards.functions | {"overlong": overlong_penalty(self.max_new_tokens,
                                                                             self.overlong_buffer)},
                           list(rewards.weights.values()) + [1.0])
        return rewards


def _load_reward_model(path: str):
    """`reward_model:PATH`'s reward; its module (a JAX model) is imported only when a config names
    one."""
    from tunix_lite.preference.reward_model import reward_model_reward

    return reward_model_reward(path)
