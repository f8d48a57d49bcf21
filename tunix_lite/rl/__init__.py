"""Reinforcement learning on the post-training core: the GRPO family, PPO and a tool-using agent.

One job per module, read in this order:

- `config`: the config GRPO, PPO and the agent share (`RLConfig`): rollouts, rewards by name
  (tunix_lite.rewards: TRL-convention functions, weighted and checked, each logged on its own),
  the clipped update, the KL anchor.
- `advantages`: from rewards to advantages (group-normalised, mean-only, leave-one-out, GAE).
- `losses`: the policy-gradient pieces as pure array functions (clipped surrogate, KL
  estimators, aggregation modes, value loss) and the GRPO loss built from them.
- `engine`: the rollout engine seam (the built-in sampler; where vLLM or SGLang-JAX would plug in).
- `rollouts`: prompts -> G completions each -> rewards -> fixed-length training rows, and the one
  batch stream (resume, mini-batches, step metrics, how far a rollout lags) every RL driver trains
  on.
- `setup`: what every RL driver builds first (model, reference, rewards, engine, rollout devices).
- `grpo`, `ppo`, `agent`: the algorithms' configs and `run_*` drivers on the run harness.
"""
