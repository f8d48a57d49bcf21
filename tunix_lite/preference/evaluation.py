"""What preference tuning changed, measured on held-out data: pair metrics and the flaws of greedy answers.

The synthetic pairs (`synthetic.preference_pairs`) reject three flaws: a wrong tagged answer, an untagged answer and
an unclosed tag. `answer_flaws` counts the same three in the model's own greedy answers, so a lesson can see whether
the generations moved the way the pairs push them, beside exact match (which must not fall).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tunix_lite.data.synthetic import ANSWER_OPEN, answer_of


def answer_flaw(text: str, answer: str) -> str:
    """"correct", "wrong" (a closed tag with another answer), "untagged" (no <answer>) or "unclosed" (<answer> but
    no complete <answer>...</answer>)."""
    if ANSWER_OPEN not in text:
        return "untagged"
    got = answer_of(text)
    if got is None:
        return "unclosed"
    return "correct" if got.split() == answer.split() else "wrong"


def answer_flaws(texts: Sequence[str], answers: Sequence[str]) -> dict[str, float]:
    """The share of `texts` with each flaw: {"flaw/wrong", "flaw/untagged", "flaw/unclosed"} (the rest are correct)."""
    kinds = [answer_flaw(t, a) for t, a in zip(texts, answers, strict=True)]
    return {f"flaw/{kind}": float(np.mean([k == kind for k in kinds])) for kind in ("wrong", "untagged", "unclosed")}


def prompt_records(pairs: Sequence[dict], limit: int | None = None) -> list[dict]:
    """Each distinct prompt of `pairs` once (`distinct_prompts`), in order, as a generation check's records {"prompt",
    "answer", "completion" (the chosen one) [, "domain"]}; at most `limit`. Held-out pairs repeat a prompt where a
    domain has few questions (the test split's 40 facts pairs ask 10 questions)."""
    from tunix_lite.evaluation import distinct_prompts

    return distinct_prompts(({"prompt": p["prompt"], "answer": p["answer"], "completion": p["chosen"],
                              **({"domain": p["domain"]} if "domain" in p else {})} for p in pairs), limit)


def generation_eval(model, tokenizer, records, **task_eval_options):
    """eval_fn(model) -> TaskEval's exact match and format on `records` ({"prompt", "answer", "completion"
    [, "domain"]}), plus `answer_flaws` of the same greedy answers."""
    from tunix_lite.evaluation import TaskEval

    task = TaskEval(model, tokenizer, records, **task_eval_options)

    def evaluate(model) -> dict[str, float]:
        scores = task(model)
        return scores | answer_flaws(task.last_texts, [r["answer"] for r in task.records])

    evaluate.task = task  # its last_texts show the answers
    return evaluate


def heldout_report(policy, reference, tokenizer, pairs: Sequence[dict], *, seq_len: int = 128, beta: float = 0.1,
                   batch_size: int = 16, generate: bool = True) -> dict[str, float]:
    """Held-out scores of `policy` on `pairs` (e.g. preference_pairs(n, split="test")), against `reference` (the model
    training started from): the sigmoid-DPO pair metrics (rewards/accuracies: the implicit reward ranks the pair right;
    logps/accuracies: the policy gives the chosen completion the higher log-prob) and, with `generate`, exact match,
    format and answer flaws of greedy answers to the pairs' distinct prompts (`prompt_records`; "prompts" counts
    them). Any preference loss's policy can be compared on this one scale."""
    import jax.numpy as jnp

    from tunix_lite.preference.data import tokenize_pairs
    from tunix_lite.preference.dpo import PreferenceLoss, reference_log_probs

    data = tokenize_pairs(pairs, tokenizer, seq_len=seq_len, truncation="drop")
    # both models scored by the one compiled function, so that policy == reference ties exactly
    policy_sums, reference_sums = (jnp.asarray(reference_log_probs(m, data, batch_size)) for m in (policy, reference))
    counts = jnp.asarray([[m.sum() for m in data.sequences.mask[i:i + 2]] for i in range(0, 2 * len(data), 2)])
    loss, metrics = PreferenceLoss("sigmoid", beta=beta).loss_from_sums(policy_sums, counts, reference_sums)
    scores = {key: float(value) for key, value in (metrics | {"loss": loss}).items()}
    if generate:
        records = prompt_records(pairs)
        scores |= generation_eval(policy, tokenizer, records, batch_size=min(len(records), 64))(policy)
        scores["prompts"] = float(len(records))
    return scores
