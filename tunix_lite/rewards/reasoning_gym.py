"""The reasoning_gym reward: each reasoning-gym task's own scorer, run in the verifier pool.

The records come from `tunix_lite.data.reasoning_gym.make_records`; their `entry` column carries
what the scorer reads (the task's name, config, question, answer and metadata). The scorer itself
(`reasoning_gym_scorer.score_entry`) imports reasoning-gym, the `tasks` extra: this module does not,
so the reward registry loads without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tunix_lite.rewards.tags import answer_of

INSTALL = "reasoning_gym data needs the tasks extra: pip install 'tunix-lite[tasks]'"


def reward_reasoning_gym(prompts, completions: Sequence[str], entry: Sequence[str],
                         **columns) -> list[float]:
    """The task's own scorer on each completion's tagged answer ('' when untagged), in the default
    verifier pool: a call past the pool's timeout, or a scorer that raises, scores 0.0 and is
    counted in the pool's stats. `entry` is make_records' column; rows may mix tasks."""
    # here, not at the top: every config imports INSTALL, and the pool's module starts a sandbox
    from tunix_lite.rewards.verifiers import default_pool

    try:  # the ImportError naming the extra, here rather than a 0.0 from every worker call
        from tunix_lite.rewards.reasoning_gym_scorer import score_entry
    except ImportError:
        raise ImportError(INSTALL) from None

    answers = [answer_of(c) or "" for c in completions]
    return default_pool().map(score_entry, list(zip(answers, entry, strict=True)))
