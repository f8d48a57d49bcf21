"""Task accuracy through the sampler: does the model, prompted as a user, answer right, in format?

Answers are scored by a reward function in TRL's convention (`tunix_lite.rl.rewards`), the one RL
trains on, so an evaluation and a training reward cannot disagree about what is right. A scorer
that gives partial credit (some reasoning-gym tasks do) counts only full marks as right.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from flax import nnx

from tunix_lite.chat import format_chat
from tunix_lite.data.synthetic import reward_exact_match, reward_format
from tunix_lite.sampler import Sampler

RIGHT = 1.0 - 1e-9  # the lowest score that counts as a right answer (full marks, up to rounding)
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


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k / n: unlike p +- z sqrt(p(1-p)/n), it stays
    inside [0, 1] and is not zero-width at 0 / n or n / n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def paired_difference(before: Sequence[int], after: Sequence[int],
                      z: float = 1.96) -> tuple[float, float, float]:
    """(change, lo, hi): the change in accuracy from `before` to `after`, two lists of 0 / 1
    verdicts on the same prompts, with its 95% Agresti-Min interval (Statistics in Medicine 24,
    2005: the Wald interval of the paired difference after adding 1/2 to each cell of the 2 x 2
    table). Pairing removes what the two share (which prompts are hard), so a change between two
    stages is judged far more tightly than by comparing their two Wilson intervals; the added
    halves keep the interval open when no answer changed, where the plain Wald interval shrinks to
    a point."""
    before, after = np.asarray(before, bool), np.asarray(after, bool)
    n = before.size
    gained, lost = int(np.sum(~before & after)), int(np.sum(before & ~after))
    center = (gained - lost) / (n + 2)
    half = z * math.sqrt(gained + lost + 1 - (gained - lost) ** 2 / (n + 2)) / (n + 2)
    return (gained - lost) / max(n, 1), max(-1.0, center - half), min(1.0, center + half)


def reward_for(records: Sequence[Mapping]):
    """The reward that judges these records, as training would: each reasoning-gym task's own scorer
    for records carrying an `entry` column, exact match of the tagged answer for everything else."""
    if records and "entry" in records[0]:
        from tunix_lite.data.reasoning_gym import reward_reasoning_gym

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
        texts = []
        for start in range(0, len(self.prompts), self.batch_size):
            chunk = self.prompts[start:start + self.batch_size]
            padded = chunk + [chunk[-1]] * (self.batch_size - len(chunk))
            out = self.sampler.generate(padded, self.max_new_tokens, num_samples=num_samples,
                                        temperature=temperature, seed=seed + start)
            texts += out.texts[:len(chunk) * num_samples]
            if progress is not None:
                progress.update(len(chunk))
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
