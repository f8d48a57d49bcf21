"""Preference tuning: pairs of a better and a worse completion (DPO and its family, ORPO, SimPO,
KTO) and a Bradley-Terry reward model.

- data.py: TRL-convention records (prompt / chosen / rejected, or KTO's prompt / completion / label)
  -> [pairs, 2, T]
- losses.py: the losses as pure functions of completion log-probs, with TRL's metric names
- scoring.py: completion log-probs of pair rows (a window of the lm head, each prompt run once)
- dpo.py: DPOConfig and run_dpo (every loss above), on the shared run harness
- on_policy.py: pairs of the model's own replies, judged by the one judge
  (tunix_lite.rewards.judge): made from prompts, or rewriting given pairs (on-policy DPO)
- reward_model.py: a scalar head trained on the same pairs, and a TRL-style reward function for RL
- evaluation.py: exact match, format and the flaws of greedy generations
"""
