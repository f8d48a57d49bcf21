"""The one judge of right and wrong: training, evaluation and on-policy pairs all ask it.

    right = verdict_for(records, completions)        # [R] bool, one completion per record

A record's judge is the reward it trains on (`reward_for`): a reasoning-gym task's own scorer for
records that carry its `entry` column, exact match of the tagged answer for everything else. The
reward is called as RL calls it (`score`: TRL's convention, every other column as a keyword), and
only full marks count as right (`RIGHT`), so a scorer that gives partial credit (some reasoning-gym
tasks do) cannot make a half-right answer count. "Better on evaluation" and "more reward" then
mean the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tunix_lite.rewards.reasoning_gym import reward_reasoning_gym
from tunix_lite.rewards.tags import reward_exact_match

RIGHT = 1.0 - 1e-9  # the lowest score that counts as a right answer (full marks, up to rounding)


def reward_for(records: Sequence[Mapping]):
    """The reward that judges these records, as training would: each reasoning-gym task's own scorer
    for records carrying an `entry` column, exact match of the tagged answer for everything else."""
    if records and "entry" in records[0]:
        return reward_reasoning_gym
    return reward_exact_match


def score(reward_fn, records: Sequence[Mapping], completions: Sequence[str]) -> np.ndarray:
    """reward_fn's scores of one completion per record, called as RL calls it: the prompts, the
    completions, and every other column of the records as a keyword (TRL's convention)."""
    prompts = [r["prompt"] for r in records]
    # the columns every record has: records built by hand may leave out an optional one (domain)
    columns = {k: [r[k] for r in records] for k in records[0]
               if k != "prompt" and all(k in r for r in records)}
    return np.asarray(reward_fn(prompts, list(completions), **columns), np.float64)


def verdict_for(records: Sequence[Mapping], completions: Sequence[str],
                reward_fn=None) -> np.ndarray:
    """[R] bool: whether each completion (one per record) is right, by `reward_fn` (default: the
    records' own, `reward_for`) with full marks."""
    return score(reward_fn or reward_for(records), records, completions) >= RIGHT
