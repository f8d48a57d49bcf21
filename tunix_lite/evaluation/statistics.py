"""The statistics of an evaluation: intervals, paired differences, and the sample estimators.

- `wilson(k, n)`: the 95% interval of an accuracy k / n;
- `paired_difference(before, after)`: the change between two evaluations of the same prompts, with
  its 95% interval (tighter than comparing two intervals);
- `pass_at_k`, `best_of_k`, `majority_at_k`: exact expectations over the k-subsets of n samples, so
  one sampling pass gives the whole test-time scaling curve (`pass_and_majority` per prompt).

Pure functions of counts and verdicts: no model, no sampler.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

# majority votes: every k-subset when there are at most this many, else this many at random
MAX_SUBSETS = 2000


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



def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n, c of them right, is right)
    = 1 - C(n - c, k) / C(n, k), as the stable product 1 - prod_{i = n-c+1}^{n} (1 - k / i)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def best_of_k(scores: Sequence[float], correct: Sequence[bool], k: int) -> float:
    """Expected correctness of the top-scored sample of a random k-subset (ties broken uniformly),
    exactly: a sample with t - 1 equal-scored rivals and a below it is chosen when j - 1 rivals and
    k - j lower samples join it, then wins the tie with probability 1 / j."""
    n = len(scores)
    if not 1 <= k <= n:
        raise ValueError(f"best_of_k needs 1 <= k <= {n}, got {k}")
    scores = np.asarray(scores, np.float64)
    total = math.comb(n, k)
    expected = 0.0
    for i in range(n):
        if not correct[i]:
            continue
        below, ties = int(np.sum(scores < scores[i])), int(np.sum(scores == scores[i]))
        expected += sum(math.comb(ties - 1, j - 1) * math.comb(below, k - j) / j
                        for j in range(1, min(k, ties) + 1))
    return expected / total


def _vote(answers: Sequence[str | None], right: Sequence[bool]) -> float:
    """The share of the most frequent answers (tied winners split the credit) that are right."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    winners = {a for a, c in counts.items() if c == top}
    right_answers = {a for a, r in zip(answers, right) if r}
    return len(winners & right_answers) / len(winners)


def majority_at_k(answers: Sequence[str | None], right: Sequence[bool], k: int, *,
                  seed: int = 0) -> float:
    """Expected correctness of a majority vote over a random k-subset of `answers` (None: no answer;
    it gets no vote). The winning answer is right when a sample giving it was scored right
    (`right[i]`, by the same scorer as every other figure, so the vote needs no reference string).
    Exact over all subsets when there are at most MAX_SUBSETS of them, else a seeded Monte Carlo."""
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"majority_at_k needs 1 <= k <= {n}, got {k}")
    norm = [" ".join(a.split()) if a is not None else None for a in answers]
    if math.comb(n, k) <= MAX_SUBSETS:
        subsets = itertools.combinations(range(n), k)
    else:
        rng = np.random.default_rng(seed)
        subsets = (rng.choice(n, k, replace=False) for _ in range(MAX_SUBSETS))
    votes = [_vote([norm[i] for i in subset], [right[i] for i in subset]) for subset in subsets]
    return float(np.mean(votes))


def pass_and_majority(right: np.ndarray, answers: Sequence[str | None], k: int, *,
                      seed: int = 0) -> tuple[float, float]:
    """(pass@k, maj@k) averaged over prompts, from `right` [prompts, N] (each sample scored) and the
    samples' tagged answers, N per prompt, prompt after prompt."""
    n = right.shape[1]
    pass_k = np.mean([pass_at_k(n, int(row.sum()), k) for row in right])
    maj_k = np.mean([majority_at_k(answers[j * n:(j + 1) * n], row, k, seed=seed)
                     for j, row in enumerate(right)])
    return float(pass_k), float(maj_k)
