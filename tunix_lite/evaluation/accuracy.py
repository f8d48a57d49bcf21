"""Task accuracy through the sampler: does the model, prompted as a user, answer right, in format?

Answers are scored by the one judge (`tunix_lite.rewards.judge`): a reward function in TRL's
convention, the one RL trains on, so an evaluation and a training reward cannot disagree about what
is right. A scorer that gives partial credit (some reasoning-gym tasks do) counts only full marks as
right.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from flax import nnx

from tunix_lite.chat import format_chat
from tunix_lite.rewards.judge import RIGHT, score
from tunix_lite.rewards.tags import reward_exact_match, reward_format
from tunix_lite.sampler import Sampler

# tokens beyond the longest reference completion: room for a longer (wrong) answer
ANSWER_MARGIN = 16


def answer_budget(tokenizer, completions: Sequence[str], margin: int = ANSWER_MARGIN) -> int:
    """max_new_tokens that lets every reference completion finish: its tokens, the end-of-turn
    token, and `margin` more. A fixed budget cut the sort domain's reasoning off and under-reported
    accuracy."""
    return max(len(tokenizer.encode(c)) for c in completions) + 1 + margin


def distinct_prompts(records: Iterable[Mapping], limit: int | None = None) -> list[dict]:
    """The first record of each distinct prompt, in order; at most `limit`.

    Held-out splits repeat a prompt where a domain has few questions (`make_splits(1, 1, 280,
    seed=7)` asks 200 distinct ones in its 280 test rows, one facts question 8 times). Greedy
    decoding answers a repeated prompt the same way each time, so counted per row one flipped answer
    moves exact match by several rows, and an interval would assume more independent answers than
    there are. Score each prompt once."""
    kept, seen = [], set()
    for record in records:
        if limit is not None and len(kept) == limit:
            break
        if record["prompt"] not in seen:
            seen.add(record["prompt"])
            kept.append(dict(record))
    return kept


def generate_in_batches(sampler: Sampler, prompts: Sequence[str], batch_size: int,
                        max_new_tokens: int, *, num_samples: int = 1, temperature: float = 0.0,
                        top_p: float | None = None, seed: int = 0,
                        progress=None) -> tuple[list[str], list[int]]:
    """(texts, token lengths) of num_samples replies per prompt (prompt p's are rows
    p*num_samples ... + num_samples-1), batch_size prompts a call: the last batch is padded by
    repeating a prompt, so every call has one shape and compiles once. `progress` (a tqdm bar or
    None) counts the prompts answered."""
    texts, lengths = [], []
    for start in range(0, len(prompts), batch_size):
        chunk = list(prompts[start:start + batch_size])
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))
        out = sampler.generate(padded, max_new_tokens, num_samples=num_samples,
                               temperature=temperature, top_p=top_p, seed=seed + start)
        texts += out.texts[:len(chunk) * num_samples]
        lengths += out.lengths[:len(chunk) * num_samples].tolist()
        if progress is not None:
            progress.update(len(chunk))
    return texts, lengths


class TaskEval:
    """Greedy answers to `records` ({"prompt", "answer"[, "completion", "domain"]}) scored by
    `reward_fn` (default: exact match of the tagged answer) and by format. One sampler and fixed
    batch shapes (the last batch is padded by repeating a prompt), so evaluating again during
    training compiles nothing new; the sampler reads the model's current weights at every call.

    max_new_tokens: None sizes the budget from the records' reference completions (`answer_budget`),
    so that every correct answer fits; records without a "completion" column need an explicit
    budget.
    """

    def __init__(self, model: nnx.Module, tokenizer, records: Sequence[Mapping], *,
                 template: str | None = None, max_new_tokens: int | None = None,
                 batch_size: int = 32, reward_fn=reward_exact_match):
        if not records:
            raise ValueError("TaskEval needs at least one record")
        missing = [k for k in ("prompt", "answer") if k not in records[0]]
        if missing:
            raise ValueError(f"evaluation records need {missing} (columns: {sorted(records[0])})")
        # no batch larger than the records: padding 8 prompts to 32 rows decoded 4x the rows
        # that count
        self.records, self.batch_size = list(records), min(batch_size, len(records))
        if max_new_tokens is None:
            if "completion" not in self.records[0]:
                raise ValueError("TaskEval: records without a 'completion' column "
                                 "need max_new_tokens")
            max_new_tokens = answer_budget(tokenizer, [r["completion"] for r in self.records])
        self.max_new_tokens = max_new_tokens
        self.prompts = [format_chat(tokenizer, [{"role": "user", "content": r["prompt"]}],
                                    template=template)
                        for r in self.records]
        self.model, self.reward_fn = model, reward_fn
        self.sampler = Sampler(model, tokenizer)

    def completions(self, progress=None, *, num_samples: int = 1, temperature: float = 0.0,
                    seed: int = 0) -> list[str]:
        """num_samples replies per record (record r's are rows r*num_samples ... + num_samples-1),
        greedy unless a temperature is given; `progress` (a tqdm bar or None) counts the prompts
        answered."""
        texts, _ = generate_in_batches(self.sampler, self.prompts, self.batch_size,
                                       self.max_new_tokens, num_samples=num_samples,
                                       temperature=temperature, seed=seed, progress=progress)
        return texts

    def __call__(self, model: nnx.Module | None = None, *, progress=None) -> dict[str, float]:
        """{"accuracy", "format", "accuracy/<domain>"...}; `model` is accepted for Trainer.fit's
        eval_fn signature and must be the model this evaluator was built on. The replies and their
        scores stay in `last_texts` and `last_scores`."""
        if model is not None and model is not self.model:
            raise ValueError("TaskEval was built on a different model")
        texts = self.completions(progress)
        scores = score(self.reward_fn, self.records, texts)
        correct = scores >= RIGHT
        formatted = reward_format(None, texts)
        out = {"accuracy": float(np.mean(correct)), "format": float(np.mean(formatted))}
        by_domain = defaultdict(list)
        for record, right in zip(self.records, correct):
            if "domain" in record:
                by_domain[record["domain"]].append(right)
        out |= {f"accuracy/{d}": float(np.mean(s)) for d, s in sorted(by_domain.items())}
        self.last_texts, self.last_scores = texts, scores
        return out
