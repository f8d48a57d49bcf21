"""What preference tuning changed in greedy answers to held-out prompts: exact match, format, flaws.

The synthetic pairs (`synthetic.preference_pairs`) reject three flaws: a wrong tagged answer, an
untagged answer and an unclosed tag (`tunix_lite.rewards.tags.answer_flaw`). `answer_flaws` counts
the same three in the model's own greedy answers, so a lesson can see whether the generations moved
the way the pairs push them, beside exact match (which must not fall).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tunix_lite.evaluation.accuracy import TaskEval, distinct_prompts
from tunix_lite.rewards.tags import answer_flaw


def answer_flaws(texts: Sequence[str], answers: Sequence[str]) -> dict[str, float]:
    """The share of `texts` with each flaw: {"flaw/wrong", "flaw/untagged", "flaw/unclosed"} (the
    rest are correct)."""
    kinds = [answer_flaw(t, a) for t, a in zip(texts, answers, strict=True)]
    return {f"flaw/{kind}": float(np.mean([k == kind for k in kinds]))
            for kind in ("wrong", "untagged", "unclosed")}


def prompt_records(pairs: Sequence[dict], limit: int | None = None) -> list[dict]:
    """Each distinct prompt of `pairs` once (`distinct_prompts`), in order, as a generation check's
    records {"prompt", "answer", "completion" (the chosen one) [, "domain"]}; at most `limit`.
    Held-out pairs repeat a prompt where a domain has few questions (the test split's 40 facts pairs
    ask 10 questions)."""
    return distinct_prompts(({"prompt": p["prompt"], "answer": p["answer"],
                              "completion": p["chosen"],
                              **({"domain": p["domain"]} if "domain" in p else {})}
                             for p in pairs), limit)


def generation_eval(model, tokenizer, records, **task_eval_options):
    """eval_fn(model) -> TaskEval's exact match and format on `records` ({"prompt", "answer",
    "completion" [, "domain"]}), plus `answer_flaws` of the same greedy answers."""
    task = TaskEval(model, tokenizer, records, **task_eval_options)

    def evaluate(model) -> dict[str, float]:
        scores = task(model)
        return scores | answer_flaws(task.last_texts, [r["answer"] for r in task.records])

    evaluate.task = task  # its last_texts show the answers
    return evaluate
