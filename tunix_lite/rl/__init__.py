"""Reinforcement learning on the post-training core: the GRPO family, PPO and a tool-using agent.

One job per module, read in this order:

- `rewards`: reward functions in TRL's convention, weighted and checked, each logged on its own.
- `advantages`: from rewards to advantages (group-normalised, mean-only, leave-one-out, GAE).
- `losses`: the policy-gradient pieces as pure array functions (clipped surrogate, KL
  estimators, aggregation modes, value loss) and the GRPO loss built from them.
- `engine`: the rollout engine seam (the built-in sampler; where vLLM or SGLang-JAX would plug in).
- `rollouts`: the shared RL config (`RLConfig`); prompts -> G completions each -> rewards ->
  fixed-length training rows, and the one batch stream (resume, mini-batches, step metrics) every
  RL driver trains on.
- `setup`: what every RL driver builds first (model, reference, rewards, engine, rollout devices).
- `grpo`, `ppo`, `agent`: the algorithms' configs and `run_*` drivers on the run harness.
"""
