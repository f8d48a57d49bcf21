"""Preference pairs from the model's own samples, judged by a verifier: on-policy DPO data.

    pairs, counts = on_policy_pairs(model, tokenizer, records, samples=8, max_new_tokens=96)
    counts  # {"prompts": 512, "pairs": 201, "all_right": 240, "all_wrong": 71}

For each prompt the model samples `samples` replies, and the task's verifier (`reward_for`: a
reasoning-gym task's own scorer, else exact match of the tagged answer) marks each right or wrong.
A prompt with at least one of each gives one pair: chosen = a right reply, rejected = a wrong one,
both written by the model that DPO then starts from. Synthetic pairs teach the policy to prefer a
reference answer over a planted flaw it may never write; these move probability from the mistakes
it does make to answers it can write (Xu et al. 2024, "Is DPO Superior to PPO for LLM Alignment?",
find DPO much weaker on pairs from another model than on the policy's own samples).

A prompt whose samples are all right or all wrong gives no pair: like a GRPO group with equal
rewards, it carries no preference. `counts` says how many of each there were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def pairs_from_verdicts(records: Sequence[Mapping], completions: Sequence[str],
                        right: np.ndarray) -> tuple[list[dict], dict[str, int]]:
    """(pairs, counts) from `right` [P, S] (bool: sample s of record p is right) and the P * S
    `completions`, record after record. A pair takes the first right and the first wrong sample:
    the samples are independent draws, so the first of each is a random one."""
    right = np.asarray(right, bool)
    if right.ndim != 2 or right.shape[0] != len(records) or right.size != len(completions):
        raise ValueError(f"right {right.shape} must be [records, samples] for {len(records)} "
                         f"records and {len(completions)} completions")
    samples = right.shape[1]
    pairs = []
    for p, (record, verdicts) in enumerate(zip(records, right)):
        if verdicts.all() or not verdicts.any():
            continue
        chosen, rejected = int(np.argmax(verdicts)), int(np.argmin(verdicts))
        pairs.append({"prompt": record["prompt"],
                      "chosen": completions[p * samples + chosen],
                      "rejected": completions[p * samples + rejected]})
    counts = {"prompts": len(records), "pairs": len(pairs),
              "all_right": int(right.all(axis=1).sum()),
              "all_wrong": int((~right).all(axis=1).sum())}
    return pairs, counts


def on_policy_pairs(model, tokenizer, records: Sequence[Mapping], *, samples: int,
                    max_new_tokens: int, temperature: float = 1.0, batch_size: int = 16,
                    seed: int = 0, reward_fn=None) -> tuple[list[dict], dict[str, int]]:
    """(pairs, counts) of `model`'s samples on `records` ({"prompt", "answer"[, "entry"]}), judged
    by `reward_fn` (default: the records' own verifier, `evaluation.reward_for`)."""
    from tunix_lite.evaluation import RIGHT, reward_for, score
    from tunix_lite.reasoning_eval import sample_completions

    records = list(records)
    missing = [key for key in ("prompt", "answer") if key not in records[0]]
    if missing:
        raise ValueError(f"on-policy pairs need records with a prompt and its answer; these lack "
                         f"{missing} (columns: {sorted(records[0])})")
    completions, _ = sample_completions(
        model, tokenizer, records, samples=samples, temperature=temperature,
        max_new_tokens=max_new_tokens, batch_size=min(batch_size, len(records)), seed=seed)
    repeated = [r for r in records for _ in range(samples)]
    right = score(reward_fn or reward_for(records), repeated, completions) >= RIGHT
    return pairs_from_verdicts(records, completions, right.reshape(len(records), samples))
