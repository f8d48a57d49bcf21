"""The reasoning_gym reward's check as a verifier worker runs it (tunix_lite.rewards.reasoning_gym).

reasoning-gym is imported at the top on purpose: a worker imports a check's module while it loads
the call, before the call's timeout starts, and reasoning-gym takes ~1.5 s to load.
"""

import functools
import json

from reasoning_gym.factory import DATASETS


def score_entry(answer: str, entry: str) -> float:
    """The task's own `score_answer(answer, entry)` for one record's `entry` column: JSON holding
    the task's name and config beside its question, answer and metadata."""
    data = json.loads(entry)
    dataset = _dataset(data["task"], json.dumps(data["config"]))
    return float(dataset.score_answer(answer=answer, entry=data))


@functools.lru_cache(maxsize=64)
def _dataset(task: str, config_json: str):
    """One dataset object per task and config and process: some tasks build tables when created."""
    dataset_cls, config_cls = DATASETS[task]
    return dataset_cls(config_cls(**json.loads(config_json), size=1, seed=0))
