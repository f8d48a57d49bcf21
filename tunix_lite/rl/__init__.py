"""Reinforcement learning on the post-training core: the GRPO family and PPO.

One job per module, read in this order:

- `rewards`: reward functions in TRL's convention, weighted and checked, each logged on its own.
- `advantages`: from rewards to advantages (group-normalised, mean-only, leave-one-out, GAE).
- `losses`: the policy-gradient pieces as pure array functions (clipped surrogate, KL estimators, aggregation
  modes, value loss).
- `engine`: the rollout engine seam (the built-in sampler; where vLLM or SGLang-JAX would plug in).
- `rollouts`: prompts -> G completions each -> rewards -> fixed-length training rows.
- `grpo`, `ppo`: the algorithms' losses, configs and `run_*` drivers on the run harness.
"""
