"""How right a model is: accuracy through the sampler, its statistics, reports, `tunix-lite eval`.

What counts as right is not decided here: every verdict is the one judge's
(`tunix_lite.rewards.judge`), the reward a record trains on, so evaluation and training agree.

    accuracy.py     TaskEval (greedy answers, accuracy and format per domain, reused during
                    training), `distinct_prompts` (score each prompt once), `answer_budget`
    statistics.py   Wilson intervals, paired differences, pass@k, best-of-k, maj@k
    reasoning.py    `evaluate_reasoning`: greedy and sampled answers, test-time scaling
                    (`ReasoningReport`), `sample_completions`
    decontamination.py  which test prompts a model trained on: the questions of a spec, a file,
                    a run or a pipeline (its data and its start model's), counted or excluded
    reports.py      per-stage tables with intervals (unseen first), the scaling table, their
                    plots, `write_report`
    model_eval.py   the `tunix-lite eval` driver: any model on any data, with guessing baselines

The names below are re-exported for the course's imports (`from tunix_lite.evaluation import
TaskEval`); `tunix_lite.reasoning_eval` is this package under its former name. Inside the library,
import from the module that defines a name.
"""

from tunix_lite.evaluation.accuracy import ANSWER_MARGIN, TaskEval, answer_budget, distinct_prompts
from tunix_lite.evaluation.reasoning import (SCALING, ReasoningReport, evaluate_reasoning,
                                             sample_completions)
from tunix_lite.evaluation.reports import (plot_scaling, plot_stages, scaling_table, stage_table,
                                           write_report)
from tunix_lite.evaluation.statistics import (MAX_SUBSETS, best_of_k, majority_at_k,
                                              paired_difference, pass_and_majority, pass_at_k,
                                              wilson)
from tunix_lite.rewards.judge import RIGHT, reward_for, score

__all__ = ["ANSWER_MARGIN", "MAX_SUBSETS", "RIGHT", "SCALING", "ReasoningReport", "TaskEval",
           "answer_budget", "best_of_k", "distinct_prompts", "evaluate_reasoning", "majority_at_k",
           "paired_difference", "pass_and_majority", "pass_at_k", "plot_scaling", "plot_stages",
           "reward_for", "sample_completions", "scaling_table", "score", "stage_table", "wilson",
           "write_report"]
