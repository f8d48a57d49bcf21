"""What makes GRPO lower greedy accuracy on tasks the model has already solved: one start model,
GRPO arms that each change one setting, and each arm's held-out change paired prompt by prompt.

    python course/results/scripts/grpo_drift.py   # course/results/09_grpo_drift/*.json -> the
                                                  # table in course/results/09_grpo_drift.md

Each JSON is one `rl.py run grpo`: its "command", plus
`--dir course/results/09_grpo_drift --name ARM`. All start from the same SFT model and are scored
greedily on the same test prompts before and after. The table gives, per arm, what its rollouts
taught from (the share of groups whose rewards were all equal, which GRPO's advantage zeroes; under
dynamic sampling, the share of the 8 trained groups that carry signal), how far the policy moved
(KL to the start, the sampled tokens' entropy), and what greedy decoding lost or gained overall and
in each domain.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from heldout import RESULTS
from rl import write_below

from tunix_lite.evaluation import paired_difference

RUNS = RESULTS / "09_grpo_drift"
TABLE = RESULTS / "09_grpo_drift.md"
MARKER = "<!-- below: written by `python course/results/scripts/grpo_drift.py` -->"
BASELINE = "plain"  # the arm the others differ from by one setting


def _mean(history: list[dict], key: str, part: slice = slice(None)) -> float | None:
    values = [h[key] for h in history if key in h][part]
    return float(np.mean(values)) if values else None


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def arm_row(name: str, run: dict, baseline: dict) -> str:
    """One table row: what the arm changed, its rollouts' signal, its drift, its held-out change."""
    changed = {k: v for k, v in run["changes"].items() if baseline["changes"].get(k) != v}
    history, quarter = run["history"], max(1, len(run["history"]) // 4)
    before, after = run["verdicts"]["before"], run["verdicts"]["after"]
    change, low, high = paired_difference(before, after)
    acc_before, acc_after = run["accuracy"]["before"], run["accuracy"]["after"]
    domains = [d for d in acc_before if d not in ("all", "format")]
    per_domain = ", ".join(f"{d} {acc_after[d]['accuracy'] - acc_before[d]['accuracy']:+.2f}"
                           for d in domains)
    # without dynamic sampling a step trains on every group it drew, the all-equal ones included
    zero = _mean(history, "zero_signal_groups")
    kept = _mean(history, "kept_groups")
    trained_with_signal = kept if kept is not None else None if zero is None else 1 - zero
    what = ", ".join(f"{k}={v}" for k, v in changed.items()) or "the 270M stage's settings"
    return (f"| {name} | {what} | {_fmt(zero)} "
            f"| {_fmt(trained_with_signal)} "
            f"| {_fmt(_mean(history, 'kl', slice(-quarter, None)), '.3f')} "
            f"| {_fmt(_mean(history, 'entropy', slice(None, quarter)))} → "
            f"{_fmt(_mean(history, 'entropy', slice(-quarter, None)))} "
            f"| {acc_before['all']['accuracy']:.2f} → {acc_after['all']['accuracy']:.2f} "
            f"| {change:+.2f} [{low:+.2f}, {high:+.2f}] | {per_domain} |")


def table(runs: dict[str, dict]) -> str:
    baseline = runs.get(BASELINE, next(iter(runs.values())))
    n = len(baseline["verdicts"]["before"])
    head = (f"Held out: {n} test prompts, one greedy answer each, before and after the arm's "
            "GRPO run; the change is paired prompt by prompt, with its 95% interval "
            "(Agresti-Min). Signal columns are means over the logged steps; KL and entropy's end "
            "are the last quarter's mean, entropy's start the first quarter's.\n\n"
            "| arm | changed | groups with all-equal rewards | trained groups with signal "
            "| KL to start, end | entropy, start → end | greedy acc | change [95% CI] "
            "| per domain |\n"
            "|---|---|---:|---:|---:|---|---|---|---|")
    return "\n".join([head] + [arm_row(name, run, baseline) for name, run in runs.items()])


def main() -> int:
    runs = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(RUNS.glob("*.json"))}
    if not runs:
        sys.exit(f"no runs in {RUNS}: run the commands in {TABLE.name} first")
    ordered = {BASELINE: runs.pop(BASELINE)} | runs if BASELINE in runs else runs
    text = table(ordered)
    write_below(TABLE, MARKER, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
