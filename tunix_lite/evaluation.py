"""Task accuracy through the sampler: does the model, prompted as a user, answer correctly and in format?"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from flax import nnx

from tunix_lite.chat import format_chat
from tunix_lite.data.synthetic import reward_exact_match, reward_format
from tunix_lite.sampler import Sampler

ANSWER_MARGIN = 16  # tokens beyond the longest reference completion: room for a longer (wrong) answer


def answer_budget(tokenizer, completions: Sequence[str], margin: int = ANSWER_MARGIN) -> int:
    """max_new_tokens that lets every reference completion finish: its tokens, the end-of-turn token, and
    `margin` more. A fixed budget cut the sort domain's reasoning off and under-reported accuracy."""
    return max(len(tokenizer.encode(c)) for c in completions) + 1 + margin


def distinct_prompts(records: Iterable[Mapping], limit: int | None = None) -> list[dict]:
    """The first record of each distinct prompt, in order; at most `limit`.

    Held-out splits repeat a prompt where a domain has few questions (`make_splits(1, 1, 280, seed=7)` asks 200
    distinct ones in its 280 test rows, one facts question 8 times). Greedy decoding answers a repeated prompt the
    same way each time, so counted per row one flipped answer moves exact match by several rows, and an interval
    would assume more independent answers than there are. Score each prompt once."""
    kept, seen = [], set()
    for record in records:
        if limit is not None and len(kept) == limit:
            break
        if record["prompt"] not in seen:
            seen.add(record["prompt"])
            kept.append(dict(record))
    return kept


class TaskEval:
    """Greedy answers to `records` ({"prompt", "answer"[, "completion", "domain"]}) scored by exact match of the
    tagged answer and by format. One sampler and fixed batch shapes (the last batch is padded by repeating a
    prompt), so evaluating again during training compiles nothing new; the sampler reads the model's current
    weights at every call.

    max_new_tokens: None sizes the budget from the records' reference completions (`answer_budget`), so that
    every correct answer fits; records without a "completion" column need an explicit budget.
    """

    def __init__(self, model: nnx.Module, tokenizer, records: Sequence[Mapping], *, template: str | None = None,
                 max_new_tokens: int | None = None, batch_size: int = 32):
        if not records:
            raise ValueError("TaskEval needs at least one record")
        missing = [k for k in ("prompt", "answer") if k not in records[0]]
        if missing:
            raise ValueError(f"evaluation records need {missing} (columns: {sorted(records[0])})")
        # no batch larger than the records: padding 8 prompts to 32 rows decoded 4x the rows that count
        self.records, self.batch_size = list(records), min(batch_size, len(records))
        if max_new_tokens is None:
            if "completion" not in self.records[0]:
                raise ValueError("TaskEval: records without a 'completion' column need max_new_tokens")
            max_new_tokens = answer_budget(tokenizer, [r["completion"] for r in self.records])
        self.max_new_tokens = max_new_tokens
        self.prompts = [format_chat(tokenizer, [{"role": "user", "content": r["prompt"]}], template=template)
                        for r in self.records]
        self.model = model
        self.sampler = Sampler(model, tokenizer)

    def completions(self) -> list[str]:
        texts = []
        for start in range(0, len(self.prompts), self.batch_size):
            chunk = self.prompts[start:start + self.batch_size]
            padded = chunk + [chunk[-1]] * (self.batch_size - len(chunk))
            texts += self.sampler.generate(padded, self.max_new_tokens).texts[:len(chunk)]
        return texts

    def __call__(self, model: nnx.Module | None = None) -> dict[str, float]:
        """{"accuracy", "format", "accuracy/<domain>"...}; `model` is accepted for Trainer.fit's eval_fn
        signature and must be the model this evaluator was built on."""
        if model is not None and model is not self.model:
            raise ValueError("TaskEval was built on a different model")
        texts = self.completions()
        correct = reward_exact_match(None, texts, [r["answer"] for r in self.records])
        formatted = reward_format(None, texts)
        out = {"accuracy": float(np.mean(correct)), "format": float(np.mean(formatted))}
        by_domain = defaultdict(list)
        for record, score in zip(self.records, correct):
            if "domain" in record:
                by_domain[record["domain"]].append(score)
        out |= {f"accuracy/{d}": float(np.mean(s)) for d, s in sorted(by_domain.items())}
        self.last_texts = texts
        return out
