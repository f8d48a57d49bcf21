"""`tunix-lite eval`: score any model on any data with the reward it would train on, with intervals.

    records, reward_fn = eval_records("reasoning_gym:leg_counting", n=100, seed=1)
    report = evaluate(model, tokenizer, records, reward_fn, samples=8, temperature=1.0)
    print(report_text(report))     # or json.dumps(report)

Data: `synthetic` (the course's tasks, held-out test split), a records file with `prompt` and
`answer` columns (`tunix_lite.data.records.load_records`: .jsonl, .json, .csv, .parquet, a saved
dataset), or a reasoning-gym spec `reasoning_gym:TASK[,TASK...][?size=..&seed=..&TASK.key=value]`
(`tunix_lite.data.reasoning_gym`). Each prompt is scored once (`distinct_prompts`): a repeated
prompt would count one greedy answer several times.

The scorer is the one RL trains with, so "better on eval" and "more reward" mean the same thing:
the task's own scorer (`reward_reasoning_gym`) for reasoning-gym records (they carry an `entry`
column, also when read back from a file), exact match of the tagged answer (`reward_exact_match`)
for everything else (`tunix_lite.rewards.judge`, the one judge). Full marks count as right.

The report: greedy accuracy with a 95% Wilson interval, the format rate (a tagged answer ends the
reply), the mean reward, a per-task (`domain`) table with n and intervals; with K > 1 samples,
pass@K and maj@K over them (`tunix_lite.evaluation.statistics`: the unbiased pass@k estimator
and an exact majority vote).

Beside each figure, what guessing scores on the same prompts, from the reference answers alone:
`constant` is the accuracy of always giving each task's most common answer, and `guess_pass@K`
the pass@K of K guesses drawn from the task's other prompts' answers as often as they occur (a
guesser that knows the prior but not the prompt's own answer). On a task with few
possible answers (letter counting: "1" is right for over half the prompts) a greedy accuracy near
`constant`, or a pass@K near `guess_pass@K`, is the answers' prior, not a skill that RL can
sharpen.

`right` holds each prompt's greedy verdict (1: right) in the data's order, overall and per task:
two reports on the same data and seed compare prompt by prompt
(`tunix_lite.evaluation.statistics.paired_difference`), far more tightly than their two intervals
do.

Held out means asked in no training data (`tunix_lite.evaluation.decontamination`). `exclude`
sources (`--exclude`: a spec, a file, a run or pipeline directory) drop every prompt they ask
before scoring (`n_excluded`). Where the model is a run whose config names its data (and its start
model's), `n_seen` counts the scored prompts that data asks, and `seen` / `unseen` score the two
parts apart; `model_data` lists those sources (empty: a named model or bare checkpoint, whose data
is not listed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from tunix_lite.data.records import SUFFIXES, load_records, split_source
from tunix_lite.data.synthetic import make_splits
from tunix_lite.evaluation.accuracy import TaskEval, answer_budget, distinct_prompts
from tunix_lite.evaluation.decontamination import keys_of, run_records, seen_mask, without
from tunix_lite.evaluation.reasoning import sample_completions
from tunix_lite.evaluation.statistics import pass_and_majority, wilson
from tunix_lite.rewards.judge import RIGHT, reward_for, verdict_for
from tunix_lite.rewards.tags import answer_of

SYNTHETIC = "synthetic"
DEFAULT_N = 200  # synthetic prompts when --n is not given
# The least reply budget: a reference completion may be a bare tagged answer (reasoning-gym's), and
# a model that reasons first must not be cut off (the synthetic sort domain's reasoning needs ~90).
MIN_NEW_TOKENS = 128
SPECS = (f"{SYNTHETIC}, a records file ({', '.join(SUFFIXES)}) with prompt and answer columns, "
         "or reasoning_gym:TASK[,TASK...]")


def check_settings(*, n: int | None, samples: int, temperature: float,
                   max_new_tokens: int | None) -> None:
    """One line naming each bad value and its fix, before any data or weights load."""
    problems = []
    if n is not None and n < 1:
        problems.append(f"--n {n}: evaluate at least 1 prompt")
    if samples < 1:
        problems.append(f"--samples {samples}: need 1 (greedy only) or more")
    if samples > 1 and not temperature > 0:
        problems.append(f"--temperature {temperature}: sampling {samples} answers per prompt "
                        "needs a temperature > 0 (e.g. 1.0), or use --samples 1 for greedy only")
    if max_new_tokens is not None and max_new_tokens < 1:
        problems.append(f"--max-new-tokens {max_new_tokens}: need at least 1")
    if problems:
        raise ValueError("; ".join(problems))


def eval_records(spec: str, *, n: int | None = None,
                 seed: int | None = None) -> tuple[list[dict], Callable[..., Sequence[float]]]:
    """(records, reward_fn) for a data spec (see the module docstring): at most `n` distinct prompts
    (None: all of a file, DEFAULT_N synthetic ones, the spec's size for reasoning-gym); `seed` draws
    synthetic and reasoning-gym prompts (None: the spec's own, 0 for synthetic)."""
    from tunix_lite.data import reasoning_gym

    if reasoning_gym.is_spec(spec):
        # a scorer that passes any answer would make accuracy a lie
        reasoning_gym.probe_scorers(spec)
        # a task with few distinct questions (one-digit products: 100) repeats them
        records = distinct_prompts(reasoning_gym.make_records(spec, size=n, seed=seed))
    elif spec == SYNTHETIC:
        n = DEFAULT_N if n is None else n
        # Draw more rows than asked: the test split repeats some facts prompts, which are kept once.
        rows = make_splits(0, 0, 4 * n, seed=seed or 0)["test"]
        records = distinct_prompts(rows, limit=n)
    elif _is_records_file(spec):
        rows = load_records(spec, key="--data")
        missing = [column for column in ("prompt", "answer") if column not in rows[0]]
        if missing:
            raise ValueError(f"--data {spec}: the records have no {' or '.join(missing)} column "
                             f"(columns: {', '.join(sorted(rows[0]))}); evaluation needs prompt "
                             "and answer")
        records = distinct_prompts(rows, limit=n)
    else:
        raise ValueError(f"--data {spec!r}: not a data spec; give {SPECS}")
    return records, reward_for(records)


def _is_records_file(spec: str) -> bool:
    """A records file (`PATH?split=test` too) or a saved dataset's directory."""
    try:
        file = Path(split_source(spec)[0])
    except ValueError:  # a file with a bad query: load_records names it, under --data
        file = Path(spec.rpartition("?")[0])
    return file.suffix in SUFFIXES or file.expanduser().is_dir()


def decontaminate(records: Sequence[Mapping], model: str, exclude: Sequence[str] = ()
                  ) -> tuple[list[dict], dict, np.ndarray | None]:
    """(the records no `exclude` source asks, the report's fields n_excluded, exclude and
    model_data (the sources the model's run and its start model's trained on), the [n] bool mask
    of the kept records that data asks: None where no data is listed). A source that cannot be
    read is ValueError in one line, before any weights load."""
    kept, n_excluded = without(records, exclude) if exclude else (list(records), 0)
    if not kept:
        raise ValueError(f"--exclude {' '.join(exclude)}: all {n_excluded} prompts occur there; "
                         "nothing is left to score (evaluate on other data)")
    try:
        model_data = run_records(model)
    except (OSError, ValueError) as e:  # a run whose data moved: say so, score all the same
        print(f"eval: the data {model} trained on is not readable ({e}); its prompts are not "
              "counted", file=sys.stderr)
        model_data = []
    seen = seen_mask(kept, keys_of(model_data)) if model_data else None
    fields = {"n_excluded": n_excluded, "exclude": list(exclude),
              "model_data": [label for label, _ in model_data]}
    return kept, fields, seen


def split_by_seen(report: dict, seen: np.ndarray | None) -> dict:
    """The report with n_seen (None: the model's data is not listed) and, where some prompts were
    trained on, "seen" and "unseen" (where any is): greedy accuracy on each part, with n and its
    interval."""
    report["n_seen"] = None if seen is None else int(seen.sum())
    if seen is not None and seen.any():
        right = np.asarray(report["right"], bool)
        report |= {part: _interval(right[mask])
                   for part, mask in (("unseen", ~seen), ("seen", seen)) if mask.any()}
    return report


def _interval(right: np.ndarray) -> dict:
    k, n = int(right.sum()), right.size
    return {"accuracy": k / n, "ci95": list(wilson(k, n)), "n": n,
            "right": right.astype(int).tolist()}


def evaluate(model, tokenizer, records: Sequence[Mapping], reward_fn, *, samples: int = 1,
             temperature: float = 1.0, max_new_tokens: int | None = None, seed: int = 0,
             batch_size: int = 16, progress: bool = True) -> dict:
    """The report (a JSON-ready dict, see the module docstring) of `model`'s greedy answers to
    `records` and, for samples > 1, of `samples` answers per prompt at `temperature`.
    max_new_tokens None: MIN_NEW_TOKENS, or room for the longest reference completion
    (`answer_budget`) where that is more. A tqdm bar on stderr counts the prompts answered."""
    from tqdm import tqdm

    records = list(records)
    if max_new_tokens is None:
        max_new_tokens = MIN_NEW_TOKENS
        if "completion" in records[0]:
            references = [r["completion"] for r in records]
            max_new_tokens = max(max_new_tokens, answer_budget(tokenizer, references))
    task = TaskEval(model, tokenizer, records, max_new_tokens=max_new_tokens, batch_size=batch_size,
                    reward_fn=reward_fn)
    passes = 1 + (samples > 1)
    with tqdm(total=passes * len(records), desc="answering", unit="prompt", file=sys.stderr,
              disable=not progress) as bar:
        summary = task(progress=bar)
        if samples > 1:
            completions, _ = sample_completions(
                model, tokenizer, records, samples=samples, temperature=temperature,
                max_new_tokens=task.max_new_tokens, batch_size=task.batch_size, seed=seed,
                progress=bar)
    right = task.last_scores >= RIGHT
    report = {**_interval(right), "format": summary["format"],
              "reward": float(task.last_scores.mean()), "max_new_tokens": task.max_new_tokens}
    domains = [r.get("domain", "all") for r in records]
    report["per_task"] = {d: _interval(right[[x == d for x in domains]])
                          for d in sorted(set(domains))}
    report |= guessing(records, samples)
    for d, row in report["per_task"].items():
        row |= guessing([r for r in records if r.get("domain", "all") == d], samples)
    if samples > 1:
        repeated = [r for r in records for _ in range(samples)]
        right_k = verdict_for(repeated, completions, reward_fn).reshape(len(records), samples)
        answers = [answer_of(c) for c in completions]
        pass_k, maj_k = pass_and_majority(right_k, answers, samples, seed=seed)
        report |= {"samples": samples, "temperature": temperature, f"pass@{samples}": pass_k,
                   f"maj@{samples}": maj_k}
        # pass@K above greedy: what RL can sharpen, per task
        for d, row in report["per_task"].items():
            rows = np.flatnonzero([x == d for x in domains])
            picked = [answers[j * samples + i] for j in rows for i in range(samples)]
            row[f"pass@{samples}"], row[f"maj@{samples}"] = pass_and_majority(
                right_k[rows], picked, samples, seed=seed)
    return report


def guessing(records: Sequence[Mapping], samples: int = 1) -> dict:
    """What guessing from the reference answers scores on `records`, per task (`domain`): always its
    most common answer ("constant"), and for samples K > 1 at least one of K guesses drawn from
    the answers of the task's other prompts as often as they occur ("guess_pass@K")."""
    from collections import Counter

    constant, hit = 0, 0.0
    domains = Counter(r.get("domain", "all") for r in records)
    for domain in domains:
        answers = Counter(str(r["answer"]).strip() for r in records
                          if r.get("domain", "all") == domain)
        constant += max(answers.values())
        others = sum(answers.values()) - 1  # a prompt's own answer is not part of its prior
        if others:
            hit += sum(count * (1 - (1 - (count - 1) / others) ** samples)
                       for count in answers.values())
    out = {"constant": constant / len(records)}
    if samples > 1:
        out[f"guess_pass@{samples}"] = hit / len(records)
    return out


def report_text(report: Mapping) -> str:
    """The report for a terminal: the headline figures, then a markdown table per task."""
    lo, hi = report["ci95"]
    seed = "default" if report["seed"] is None else report["seed"]
    lines = [f"{report['model']} on {report['data']} (n={report['n']}, seed {seed}, "
             f"at most {report['max_new_tokens']} new tokens)"]
    if report.get("n_excluded"):
        lines.append(f"excluded {report['n_excluded']} prompts that "
                     f"{', '.join(report['exclude'])} ask; scored the other {report['n']}")
    if "n_seen" in report and report["n_seen"] is None:
        lines.append("the model's training data is not listed (a named model or checkpoint): "
                     "its prompts are not counted")
    elif "n_seen" in report and not report["n_seen"]:
        lines.append(f"no prompt occurs in the model's training data ({len(report['model_data'])}"
                     " sources): all unseen")
    for part in ("unseen", "seen"):  # held out first
        if part in report:
            row = report[part]
            lines.append(f"{part:<6} n={row['n']}: greedy {row['accuracy']:.3f} "
                         f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]"
                         + (" (in the model's training data)" if part == "seen" else ""))
    lines += [f"greedy accuracy {report['accuracy']:.3f}  95% interval [{lo:.3f}, {hi:.3f}] "
              "(Wilson)",
              f"always the commonest answer {report['constant']:.3f} (a guess, for scale)",
              f"format          {report['format']:.3f}",
              f"mean reward     {report['reward']:.3f}"]
    if "samples" in report:
        k = report["samples"]
        lines.append(f"pass@{k} {report[f'pass@{k}']:.3f}  maj@{k} {report[f'maj@{k}']:.3f}  "
                     f"({k} samples per prompt at temperature {report['temperature']}; "
                     f"{k} guesses: pass@{k} {report[f'guess_pass@{k}']:.3f})")
    k = report.get("samples")
    columns = ["constant"] + ([f"pass@{k}", f"guess_pass@{k}", f"maj@{k}"] if k else [])
    lines += ["", "| task | n | accuracy | 95% interval |" + "".join(f" {c} |" for c in columns),
              "|---|---|---|---|" + "---|" * len(columns)]
    for task, row in report["per_task"].items():
        lines.append(f"| {task} | {row['n']} | {row['accuracy']:.3f} | "
                     f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}] |"
                     + "".join(f" {row[c]:.3f} |" for c in columns))
    return "\n".join(lines)
