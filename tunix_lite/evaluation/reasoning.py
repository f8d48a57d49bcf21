"""Held-out evaluation of a reasoning model, and test-time scaling: did the reasoning improve,
in numbers?

    report = evaluate_reasoning(model, tokenizer, test_records, samples=16)
    report.summary   # greedy accuracy (+ per domain), format, reasoning-marker rate, answer length,
                     # pass@k and maj@k over the samples
    report.scaling   # {N: pass@N, best-of-N, maj@N and the compute they cost},
                     # N = 1, 2, 4, ... samples

One greedy answer and `samples` sampled answers per prompt (`Sampler.generate(num_samples=N)`: one
prefill per prompt, shared by its N samples). Every figure for k < N samples is an exact (or, for
majority votes over many subsets, a seeded Monte Carlo) expectation over the k-subsets of the N
samples drawn, so one sampling pass gives the whole curve:

- pass@k: some one of k samples is right: the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen
  et al. (2021), with c right answers among n samples. It is also best-of-k with a perfect verifier
  (one that knows the reference answer, as `reward_exact_match` and
  `tunix_lite.rewards.verifiers.reward_math` do).
- best-of-k: the sample a reference-free score ranks first
  (`tunix_lite.rewards.verifiers.check_steps`, worked arithmetic that checks out, plus the format),
  ties broken at random; what a deployed system without the answer can do.
- maj@k (self-consistency, Wang et al. 2023): the most frequent tagged answer of k samples
  (ties at random).

Right and wrong are the training reward's verdict (`reward_fn`, exact match by default; full
marks count as right: `tunix_lite.rewards.judge`). The estimators are in `statistics.py`, the
tables and plots of several stages in `reports.py`.

Compute cost of N samples per prompt: the prompt's prefill once plus N completions, in generated
tokens and in forward FLOPs (2 x parameters per token, attention ignored).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np

from tunix_lite.chat import format_chat
from tunix_lite.evaluation.accuracy import TaskEval, generate_in_batches
from tunix_lite.evaluation.statistics import best_of_k, pass_and_majority
from tunix_lite.rewards.judge import RIGHT, verdict_for
from tunix_lite.rewards.tags import answer_of, has_reasoning, reward_exact_match, reward_format
from tunix_lite.sampler import Sampler

SCALING = (1, 2, 4, 8, 16)


# ----------------------------------------------------------------------------- sampling a model


@dataclasses.dataclass
class ReasoningReport:
    summary: dict[str, float]  # greedy and sampled figures, see evaluate_reasoning
    scaling: dict[int, dict[str, float]]  # N -> pass, best_of, majority, tokens, flops (per prompt)
    examples: list[dict]  # the first few greedy transcripts
    seconds: float
    greedy_right: list[int] = dataclasses.field(default_factory=list)  # 1 / 0 per prompt, in order
    # 1 where some training data asks the prompt, per prompt (empty: not counted); see
    # tunix_lite.evaluation.decontamination
    seen_prompts: list[int] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        return {"summary": self.summary, "scaling": {str(k): v for k, v in self.scaling.items()},
                "examples": self.examples, "seconds": self.seconds,
                "greedy_right": self.greedy_right, "seen_prompts": self.seen_prompts}

    @classmethod
    def from_json(cls, data: Mapping) -> ReasoningReport:
        return cls(dict(data["summary"]), {int(k): v for k, v in data["scaling"].items()},
                   list(data["examples"]), float(data["seconds"]),
                   list(data.get("greedy_right", [])), list(data.get("seen_prompts", [])))


def _params(model) -> int:
    import jax
    from flax import nnx

    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def sample_completions(model, tokenizer, records: Sequence[Mapping], *, samples: int,
                       temperature: float, max_new_tokens: int, top_p: float | None = None,
                       batch_size: int = 16, seed: int = 0, template: str | None = None,
                       progress=None) -> tuple[list[str], list[int]]:
    """(texts, token lengths) of `samples` sampled replies per record, record after record;
    `progress` (a tqdm bar, or None) counts the prompts answered."""
    prompts = [format_chat(tokenizer, [{"role": "user", "content": r["prompt"]}], template=template)
               for r in records]
    return generate_in_batches(Sampler(model, tokenizer), prompts, batch_size, max_new_tokens,
                               num_samples=samples, temperature=temperature, top_p=top_p,
                               seed=seed, progress=progress)


def evaluate_reasoning(model, tokenizer, records: Sequence[Mapping], *, samples: int = 16,
                       temperature: float = 1.0, top_p: float | None = None,
                       max_new_tokens: int | None = None, batch_size: int = 16,
                       scaling: Sequence[int] = SCALING, seed: int = 0, template: str | None = None,
                       score_fn=None, reward_fn=reward_exact_match) -> ReasoningReport:
    """Greedy and sampled answers of `model` to `records`
    ({"prompt", "answer"[, "domain", "completion"]}).

    summary: n (prompts), accuracy (greedy, scored right by `reward_fn`, the training reward: exact
    match by default; each prompt's verdict is in `greedy_right`), format (the tagged answer ends
    the reply), reasoning (a closed, non-empty <reasoning> block: the reasoning-marker rate), length
    (greedy reply tokens), accuracy/<domain>; then over the samples: pass@k and maj@k for each k
    in `scaling` up to `samples`, sampled_format, sampled_length.
    score_fn(completions) -> scores for best-of-N (default: `check_steps` in the verifier pool plus
    the format).
    """
    start = time.perf_counter()
    records = list(records)
    batch_size = min(batch_size, len(records))  # as TaskEval: no padded rows beyond the records
    ks = sorted(k for k in set(scaling) | {1, samples} if k <= samples)
    greedy = TaskEval(model, tokenizer, records, template=template, max_new_tokens=max_new_tokens,
                      batch_size=batch_size, reward_fn=reward_fn)
    summary = greedy() | {"n": len(records)}
    texts = greedy.last_texts
    greedy_right = [int(v >= RIGHT) for v in greedy.last_scores]
    summary["reasoning"] = float(np.mean([has_reasoning(t) for t in texts]))
    summary["length"] = float(np.mean([len(tokenizer.encode(t)) for t in texts]))

    completions, lengths = sample_completions(
        model, tokenizer, records, samples=samples, temperature=temperature,
        max_new_tokens=greedy.max_new_tokens, top_p=top_p, batch_size=batch_size, seed=seed,
        template=template)
    repeated = [r for r in records for _ in range(samples)]
    right = verdict_for(repeated, completions, reward_fn).reshape(len(records), samples)
    answers = [answer_of(c) for c in completions]
    scores = np.asarray(score_fn(completions) if score_fn
                        else _default_scores(completions)).reshape(right.shape)

    summary["sampled_format"] = float(np.mean(reward_format(None, completions)))
    summary["sampled_length"] = float(np.mean(lengths))
    prompt_tokens = float(np.mean([len(p) for p in greedy.prompts]))
    flops_per_token = 2 * _params(model)
    scaling_out = {}
    for k in ks:
        pass_k, maj_k = pass_and_majority(right, answers, k, seed=seed)
        best_k = np.mean([best_of_k(scores[j], right[j], k) for j in range(len(records))])
        tokens = k * summary["sampled_length"]
        scaling_out[k] = {"pass": pass_k, "best_of": float(best_k), "majority": maj_k,
                          "tokens": tokens, "flops": flops_per_token * (prompt_tokens + tokens)}
        summary[f"pass@{k}"], summary[f"maj@{k}"] = pass_k, maj_k
    examples = [{"prompt": r["prompt"], "answer": r["answer"], "greedy": t}
                for r, t in zip(records[:4], texts)]
    return ReasoningReport(summary, scaling_out, examples, time.perf_counter() - start,
                           greedy_right)


def _default_scores(completions: Sequence[str]) -> np.ndarray:
    """Reference-free best-of-N score: worked arithmetic that checks out
    (in the verifier pool) plus the format."""
    from tunix_lite.rewards.verifiers import reward_steps  # its pool: started on first use

    return (np.asarray(reward_steps(None, completions))
            + np.asarray(reward_format(None, completions)))
