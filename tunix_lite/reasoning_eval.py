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
  `tunix_lite.verifiers.reward_math` do).
- best-of-k: the sample a reference-free score ranks first (`tunix_lite.verifiers.check_steps`,
  worked arithmetic that checks out, plus the format), ties broken at random; what a deployed
  system without the answer can do.
- maj@k (self-consistency, Wang et al. 2023): the most frequent tagged answer of k samples
  (ties at random).

Right and wrong are the training reward's verdict (`reward_fn`, exact match by default; full
marks count as right).

Compute cost of N samples per prompt: the prompt's prefill once plus N completions, in generated
tokens and in forward FLOPs (2 x parameters per token, attention ignored).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tunix_lite.data.synthetic import answer_of, has_reasoning, reward_exact_match, reward_format

SCALING = (1, 2, 4, 8, 16)
# majority votes: every k-subset when there are at most this many, else this many at random
MAX_SUBSETS = 2000


# --------------------------------------------------------------------- estimators (pure, on counts)


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


# ----------------------------------------------------------------------------- sampling a model


@dataclasses.dataclass
class ReasoningReport:
    summary: dict[str, float]  # greedy and sampled figures, see evaluate_reasoning
    scaling: dict[int, dict[str, float]]  # N -> pass, best_of, majority, tokens, flops (per prompt)
    examples: list[dict]  # the first few greedy transcripts
    seconds: float
    greedy_right: list[int] = dataclasses.field(default_factory=list)  # 1 / 0 per prompt, in order

    def to_json(self) -> dict:
        return {"summary": self.summary, "scaling": {str(k): v for k, v in self.scaling.items()},
                "examples": self.examples, "seconds": self.seconds,
                "greedy_right": self.greedy_right}

    @classmethod
    def from_json(cls, data: Mapping) -> ReasoningReport:
        return cls(dict(data["summary"]), {int(k): v for k, v in data["scaling"].items()},
                   list(data["examples"]), float(data["seconds"]),
                   list(data.get("greedy_right", [])))


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
    from tunix_lite.chat import format_chat
    from tunix_lite.sampler import Sampler

    prompts = [format_chat(tokenizer, [{"role": "user", "content": r["prompt"]}], template=template)
               for r in records]
    sampler = Sampler(model, tokenizer)
    completions, lengths = [], []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))  # one batch shape: one compile
        out = sampler.generate(padded, max_new_tokens, num_samples=samples, temperature=temperature,
                               top_p=top_p, seed=seed + i)
        completions += out.texts[:len(chunk) * samples]
        lengths += out.lengths[:len(chunk) * samples].tolist()
        if progress is not None:
            progress.update(len(chunk))
    return completions, lengths


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
    from tunix_lite.evaluation import RIGHT, TaskEval, score

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
    right = (score(reward_fn, repeated, completions) >= RIGHT).reshape(len(records), samples)
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
    from tunix_lite.verifiers import reward_steps

    return (np.asarray(reward_steps(None, completions))
            + np.asarray(reward_format(None, completions)))


# ----------------------------------------------------------------------------- tables and plots

_COLUMNS = (("accuracy", "greedy acc"), ("format", "format"), ("reasoning", "reasoning"),
            ("length", "length"))


def stage_table(reports: Mapping[str, ReasoningReport]) -> tuple[str, dict]:
    """(markdown, json) of the per-stage held-out figures: one row per stage, in the order given.

    Where the reports count their prompts (summary["n"]), greedy accuracy carries its 95% Wilson
    interval, and "vs previous" is the change from the row above on the same prompts, with the
    paired interval (`paired_difference`): a stage helped or hurt only where that interval
    excludes 0. Where some test prompts were also training prompts (summary["n_unseen"] < n),
    "unseen" is greedy accuracy on the others, with its interval: the held-out figure proper."""
    if not reports:
        return "(no evaluations yet)\n", {}
    table = {stage: dict(r.summary) for stage, r in reports.items()}
    _add_intervals(reports, table)
    first = next(iter(reports.values())).summary
    ks = sorted(int(k.split("@")[1]) for k in first if k.startswith("pass@"))
    if ks:
        sampled = [(f"pass@{ks[0]}", f"pass@{ks[0]}"), (f"pass@{ks[-1]}", f"pass@{ks[-1]}"),
                   (f"maj@{ks[-1]}", f"maj@{ks[-1]}")]
        domains = sorted({k.split("/", 1)[1] for r in reports.values() for k in r.summary
                          if k.startswith("accuracy/")})
        greedy = ([("accuracy", "greedy acc [95% CI]"), ("vs_previous", "vs previous [95% CI]")]
                  if "n" in first else list(_COLUMNS[:1]))
        if first.get("n_unseen", first.get("n")) != first.get("n"):  # some were trained on
            greedy.append(("unseen", f"unseen, {first['n_unseen']} [95% CI]"))
        columns = (greedy + sampled + list(_COLUMNS[1:])
                   + [(f"accuracy/{d}", d) for d in domains])
    else:  # another evaluation's figures (e.g. the agent's with / without the tool), as they come
        columns = [(key, key) for key in first]
    lines = ["| stage | " + " | ".join(title for _, title in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for stage, row in table.items():
        cells = [_cell(key, row) for key, _ in columns]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", table


def _add_intervals(reports: Mapping[str, ReasoningReport], table: dict) -> None:
    """table[stage]["ci95"] (Wilson, of greedy accuracy) and ["vs_previous"] ([change, lo, hi]
    against the stage before, paired over the same prompts), where the reports allow them."""
    from tunix_lite.evaluation import paired_difference, wilson

    previous = None
    for stage, report in reports.items():
        n = int(report.summary.get("n", 0))
        if n and "accuracy" in report.summary:
            table[stage]["ci95"] = list(wilson(report.summary["accuracy"] * n, n))
        n_unseen = int(report.summary.get("n_unseen", 0))
        if n_unseen:
            table[stage]["unseen_ci95"] = list(wilson(report.summary["unseen"] * n_unseen,
                                                      n_unseen))
        right = report.greedy_right
        if previous is not None and right and len(right) == len(previous):
            table[stage]["vs_previous"] = list(paired_difference(previous, right))
        previous = right or None


def _cell(key: str, row: Mapping) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    interval = row.get({"accuracy": "ci95", "unseen": "unseen_ci95"}.get(key, ""))
    if interval is not None:
        return f"{value:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"
    if key == "vs_previous":
        return f"{value[0]:+.2f} [{value[1]:+.2f}, {value[2]:+.2f}]"
    return f"{value:.1f}" if key == "length" else f"{value:.2f}"


def scaling_table(reports: Mapping[str, ReasoningReport]) -> str:
    """Markdown: accuracy vs N samples per stage
    (pass@N / best-of-N / maj@N) and generated tokens per prompt."""
    lines = ["| stage | N | tokens/prompt | pass@N | best-of-N | maj@N |",
             "|---|---|---|---|---|---|"]
    for stage, report in reports.items():
        for n, row in report.scaling.items():
            lines.append(f"| {stage} | {n} | {row['tokens']:.0f} | {row['pass']:.2f} | "
                         f"{row['best_of']:.2f} | {row['majority']:.2f} |")
    return "\n".join(lines) + "\n"


def plot_stages(reports: Mapping[str, ReasoningReport]):
    """Bar chart: greedy accuracy per domain (and overall, with its 95% Wilson interval where the
    reports count their prompts), one bar group per stage. Returns a Figure."""
    from matplotlib.figure import Figure

    from tunix_lite.evaluation import wilson

    domains = sorted({k.split("/", 1)[1] for r in reports.values() for k in r.summary
                      if k.startswith("accuracy/")})
    keys = ["accuracy"] + [f"accuracy/{d}" for d in domains]
    labels = ["all"] + domains
    first = next(iter(reports.values())).summary if reports else {}
    if "accuracy" not in first:  # another evaluation's figures (the agent's): one group per figure
        keys = labels = list(first)
    fig = Figure(figsize=(max(6, 1.1 * len(keys)), 3.6))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(reports))
    for i, (stage, report) in enumerate(reports.items()):
        heights = [report.summary.get(k, 0.0) for k in keys]
        ax.bar(np.arange(len(keys)) + i * width, heights, width, label=stage)
        if keys[0] == "accuracy" and report.summary.get("n"):
            lo, hi = wilson(heights[0] * report.summary["n"], int(report.summary["n"]))
            ax.errorbar(i * width, heights[0], yerr=[[heights[0] - lo], [hi - heights[0]]],
                        fmt="none", ecolor="black", capsize=3)
    ax.set_xticks(np.arange(len(keys)) + width * (len(reports) - 1) / 2, labels, rotation=20)
    ax.set_ylabel("held-out (greedy)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_scaling(reports: Mapping[str, ReasoningReport]):
    """Test-time scaling: held-out accuracy vs generated tokens per prompt (N = 1, 2, 4, ...
    samples), one colour per stage; solid maj@N (self-consistency), dashed best-of-N (reference-free
    score), dotted pass@N (a perfect verifier). Returns a Figure."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    colours = {}
    for stage, report in reports.items():
        ns = sorted(report.scaling)
        x = [report.scaling[n]["tokens"] for n in ns]
        for key, style in (("majority", "-"), ("best_of", "--"), ("pass", ":")):
            line, = ax.plot(x, [report.scaling[n][key] for n in ns], style, marker="o",
                            markersize=3, color=colours.get(stage),
                            label=f"{stage}" if key == "majority" else None)
            colours.setdefault(stage, line.get_color())
        for n, xi in zip(ns, x):
            ax.annotate(f"N={n}", (xi, report.scaling[n]["majority"]), fontsize=6, alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("generated tokens per prompt (compute)")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.plot([], [], "k-", label="maj@N (self-consistency)")
    ax.plot([], [], "k--", label="best-of-N (reference-free verifier)")
    ax.plot([], [], "k:", label="pass@N (perfect verifier)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write_report(reports: Mapping[str, ReasoningReport], directory: str | Path) -> Path:
    """Write table.md, table.json, scaling.md, stages.png and scaling.png into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    markdown, table = stage_table(reports)
    (directory / "table.md").write_text(markdown, encoding="utf-8")
    (directory / "table.json").write_text(json.dumps(
        {stage: {"summary": table[stage], "scaling": {str(k): v for k, v in r.scaling.items()},
                 "greedy_right": r.greedy_right} for stage, r in reports.items()},
        indent=1) + "\n", encoding="utf-8")
    (directory / "scaling.md").write_text(scaling_table(reports), encoding="utf-8")
    plot_stages(reports).savefig(directory / "stages.png", dpi=110)
    plot_scaling(reports).savefig(directory / "scaling.png", dpi=110)
    return directory

