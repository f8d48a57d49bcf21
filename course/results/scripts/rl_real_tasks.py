"""RL on real tasks (reasoning-gym, Gemma 3 270M): the candidate tables, then each run beside its
start.

    python course/results/scripts/rl_real_tasks.py
    # course/results/06_rl_reasoning_gym/*.json -> 06_rl_reasoning_gym.md (+ .png)
    # (the part from "## Notes" on is written by hand and kept)
    python course/results/scripts/rl_real_tasks.py --curve NAME METRICS.jsonl --until STEP
    # keeps a run's training curve (a tunix_lite metrics.jsonl or TRL's trl_history.jsonl)

Every figure comes from a `tunix-lite eval --json` report saved in
course/results/06_rl_reasoning_gym/ (the command that made it is in the report's own "command" key,
written below each table):

- candidates*.json: the start model (the format warm-up) on candidate tasks, greedy and 8 samples
  per prompt. Beside each figure, what guessing scores on the same prompts
  (`tunix_lite.model_eval.guessing`): always the task's commonest answer, and 8 guesses drawn from
  the other prompts' answers. A task is kept for RL when its pass@8 beats both greedy and 8 guesses
  by at least HEADROOM: right samples that come from skill, which a sharper policy can turn into
  greedy accuracy, rather than from the answers' prior.
- test_<set>_<model>.json: greedy accuracy of a model on held-out prompts (a seed used for neither
  training nor selection), with 95% Wilson intervals, and each model's change from the start model
  on the same prompts with its paired 95% interval (for reports that keep each prompt's verdict).
  One table per held-out set (data spec and seed).
- curves/<model>.jsonl: the training curve of each RL run, step by step up to the committed
  checkpoint, drawn in 06_rl_reasoning_gym.png and summed up beside the held-out accuracy of the
  same model (test_seed31_<model>.json): tunix_lite's GRPO, Dr. GRPO and RLOO, and TRL's
  GRPOTrainer on the identical setting (course/results/scripts/rl_trl_beside.py), which gets a table of its own
  beside tunix_lite's GRPO.
- entropy.json: the entropy of the GRPO policies, exact and as -log p of the sampled tokens, on the
  same samples (rl_entropy.py): TRL logs the first, tunix_lite the second.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from heldout import RESULTS, SHOWN, write_page

from tunix_lite.evaluation import paired_difference

DATA = RESULTS / "06_rl_reasoning_gym"
HEADROOM = 0.2  # pass@8 minus greedy, and minus 8 guesses: below this, little that RL can sharpen
CURVES = DATA / "curves"
CURVE_KEYS = ("reward", "reward@products", "reward@chain_sum", "entropy", "length")
HEADLINE_SET = "seed31"  # the held-out set the curves are summed up beside
WINDOW = 10  # steps per point of the drawn curves and per block of the table
OURS, TRL = "grpo", "trl_grpo"  # tunix_lite's GRPO run and TRL's on its identical setting
TRL_VERSION = "1.16"
ENTROPY = DATA / "entropy.json"  # course/results/scripts/rl_entropy.py


def _ci(row: dict) -> str:
    lo, hi = row["ci95"]
    return f"{row['accuracy']:.2f} [{lo:.2f}, {hi:.2f}]"


def with_guessing(report: dict) -> dict:
    """The report with what guessing scores on its own prompts, overall and per task (reports
    made before `tunix-lite eval` printed it lack it)."""
    from tunix_lite.data.reasoning_gym import make_records
    from tunix_lite.model_eval import guessing

    if "constant" in report:
        return report
    # what that eval scored: the spec's items as drawn (it did not yet drop repeated prompts)
    records = make_records(report["data"], size=report["n"], seed=report["seed"])
    k = report["samples"]
    report = report | guessing(records, k)
    report["per_task"] = {task: row | guessing([r for r in records if r["domain"] == task], k)
                          for task, row in report["per_task"].items()}
    return report


def room(row: dict, k: int) -> float:
    """What pass@k has beyond both greedy accuracy and k guesses from the answers' prior."""
    return row[f"pass@{k}"] - max(row["accuracy"], row[f"guess_pass@{k}"])


def kept_tasks(report: dict) -> list[str]:
    k = report["samples"]
    return [task for task, row in report["per_task"].items()
            if room(row, k) >= HEADROOM - 1e-9]  # 0.24 - 0.04 is 0.2 in exact terms


def candidates_table(report: dict) -> str:
    k = report["samples"]
    kept = set(kept_tasks(report))
    lines = [f"| task | n | greedy [95% CI] | commonest answer | pass@{k} | {k} guesses | "
             f"maj@{k} | pass@{k} - greedy | pass@{k} - max(greedy, {k} guesses) | kept |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for task, row in sorted(report["per_task"].items(), key=lambda kv: -room(kv[1], k)):
        lines.append(f"| {task} | {row['n']} | {_ci(row)} | {row['constant']:.2f} | "
                     f"{row[f'pass@{k}']:.2f} | {row[f'guess_pass@{k}']:.2f} | "
                     f"{row[f'maj@{k}']:.2f} | "
                     f"{row[f'pass@{k}'] - row['accuracy']:+.2f} | {room(row, k):+.2f} | "
                     f"{'yes' if task in kept else 'no'} |")
    lines.append(f"| all | {report['n']} | {_ci(report)} | {report['constant']:.2f} | "
                 f"{report[f'pass@{k}']:.2f} | {report[f'guess_pass@{k}']:.2f} | "
                 f"{report[f'maj@{k}']:.2f} | "
                 f"{report[f'pass@{k}'] - report['accuracy']:+.2f} | | |")
    return "\n".join(lines)


def _paired(before: dict, after: dict) -> str:
    """after - before on the same prompts with its paired 95% interval, where both reports carry
    each prompt's verdict (`right`); empty otherwise."""
    if "right" not in before or "right" not in after:
        return ""
    change, lo, hi = paired_difference(before["right"], after["right"])
    return f"{change:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def test_table(reports: dict[str, dict]) -> str:
    """Greedy held-out accuracy per model (rows) overall and per task (columns), and, where the
    reports keep each prompt's verdict, each model's change from the start model (paired)."""
    tasks = sorted({t for r in reports.values() for t in r["per_task"]})
    start = reports.get("start", {})
    paired = "right" in start
    lines = ["| model | n | all [95% CI] | " + ("vs start, paired [95% CI] | " if paired else "")
             + "format | " + " | ".join(tasks) + " |",
             "|---|---:|---|" + ("---|" if paired else "") + "---:|" + "---:|" * len(tasks)]
    for name, r in reports.items():
        cells = " | ".join(_ci(r["per_task"][t]) if t in r["per_task"] else ""
                           for t in tasks)
        change = f"{_paired(start, r) if name != 'start' else ''} | " if paired else ""
        lines.append(f"| {name} | {r['n']} | {_ci(r)} | {change}{r['format']:.2f} | {cells} |")
    return "\n".join(lines)


def keep_curve(name: str, metrics: Path, until: int) -> Path:
    """A run's per-step training metrics up to `until` (its committed checkpoint), CURVE_KEYS only,
    as curves/<name>.jsonl."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    kept = [{"step": r["step"]} | {k: r[k] for k in CURVE_KEYS if k in r}
            for r in rows if r["step"] <= until and "reward" in r]
    if [r["step"] for r in kept] != list(range(1, until + 1)):
        raise SystemExit(f"{metrics}: steps 1..{until} are not all there once")
    CURVES.mkdir(exist_ok=True)
    path = CURVES / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return path


def _mean_ci(values) -> str:
    """Mean with a normal 95% interval over steps (each step's reward is a mean of 64 samples)."""
    values = np.asarray(values, float)
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():.2f} ± {half:.2f}"


def curves_section(tests: dict[str, dict[str, dict]]) -> list[str]:
    """The runs' training reward by blocks of WINDOW steps beside their held-out accuracy, and
    the plot of their curves (06_rl_reasoning_gym.png)."""
    curves = {path.stem: [json.loads(line) for line in path.read_text().splitlines()]
              for path in sorted(CURVES.glob("*.jsonl"), key=lambda p: (p.stem != "grpo", p.stem))}
    if not curves:
        return []
    held_out = tests.get(HEADLINE_SET, {})
    steps = min(len(rows) for rows in curves.values())
    blocks = [(start, min(start + WINDOW, steps)) for start in range(0, steps, WINDOW)]
    lines = ["| run | " + " | ".join(f"reward, steps {a + 1}-{b}" for a, b in blocks)
             + f" | held out ({HEADLINE_SET}) [95% CI] |",
             "|---|" + "---:|" * len(blocks) + "---|"]
    start = held_out.get("start")
    if start:
        lines.append("| start model | " + " | " * len(blocks) + f"{_ci(start)} |")
    for name, rows in curves.items():
        cells = " | ".join(_mean_ci([r["reward"] for r in rows[a:b]]) for a, b in blocks)
        score = _ci(held_out[name]) if name in held_out else "not scored"
        lines.append(f"| {name} | {cells} | {score} |")
    plot(curves, SHOWN / "06_rl_reasoning_gym.png")
    return ["## The runs side by side: training reward and held-out accuracy", "",
            f"Sampled training reward (mean over the steps of each block, 64 completions a step, "
            f"± a normal 95% interval over the block's steps) and greedy accuracy of the same "
            f"step's model on the held-out set {HEADLINE_SET}. Curves: "
            f"`06_rl_reasoning_gym.png`, kept in `{CURVES.relative_to(RESULTS.parents[1])}/`.",
            "", *lines, "", *trl_section(curves, held_out)]


def trl_section(curves: dict[str, list[dict]], held_out: dict[str, dict]) -> list[str]:
    """TRL's GRPOTrainer on the identical setting (curves/trl_grpo.jsonl) beside tunix_lite's GRPO:
    the training reward step by step (both runs draw the same prompts at each step, so the
    difference is taken step by step), held-out accuracy (paired on the same prompts), and each
    policy's entropy measured both ways on the same samples (ENTROPY, rl_entropy.py)."""
    if TRL not in curves or OURS not in curves:
        return []
    steps = min(len(curves[OURS]), len(curves[TRL]))
    ours, theirs = (np.array([r["reward"] for r in curves[run][:steps]]) for run in (OURS, TRL))
    diff = theirs - ours
    half = 1.96 * diff.std(ddof=1) / np.sqrt(steps)
    rows = [(f"training reward, steps 1-{steps}", f"{ours.mean():.3f}", f"{theirs.mean():.3f}",
             f"{diff.mean():+.3f} ± {half:.3f} by step; correlation "
             f"{np.corrcoef(ours, theirs)[0, 1]:.2f}")]
    if OURS in held_out and TRL in held_out:
        a, b = held_out[OURS], held_out[TRL]
        rows.append((f"held out ({HEADLINE_SET}, n={a['n']}), greedy", _ci(a), _ci(b),
                     _paired(a, b) or "see the intervals"))
        rows += [(f"{task}", _ci(a["per_task"][task]), _ci(b["per_task"][task]),
                  _paired(a["per_task"][task], b["per_task"][task]))
                 for task in a["per_task"]]
    last = slice(steps - WINDOW, steps)
    logged = [np.mean([r["entropy"] for r in curves[run][last]]) for run in (OURS, TRL)]
    rows.append((f"entropy as logged, steps {steps - WINDOW + 1}-{steps}",
                 f"{logged[0]:.2f} (-log p of the sampled token)",
                 f"{logged[1]:.2f} (exact)", ""))
    if ENTROPY.is_file():
        measured = json.loads(ENTROPY.read_text())
        if OURS in measured and TRL in measured:
            a, b = measured[OURS], measured[TRL]
            n = f"{a['prompts']} prompts x {a['samples']} samples"
            for key, what in (("exact", "exact H"), ("sampled", "-log p of the sampled token")):
                cells = [f"{m[key]:.3f} [{m[key + '_ci95'][0]:.3f}, {m[key + '_ci95'][1]:.3f}]"
                         for m in (a, b)]
                rows.append((f"entropy at step {steps}, {what} ({n})", *cells, ""))
    lines = ["| | tunix_lite GRPO | TRL GRPOTrainer | TRL - tunix_lite [95% CI] |",
             "|---|---|---|---|"] + [f"| {' | '.join(row)} |" for row in rows]
    return ["## TRL beside us", "",
            f"TRL {TRL_VERSION}'s `GRPOTrainer` on the identical setting "
            "(course/results/scripts/rl_trl_beside.py: the same start weights, prompt ids in the same order, "
            "reward, schedule, LoRA and its initial A; only the sampling RNG differs), stopped "
            "at the same step. Its adapters are committed as "
            f"`course/results/rl_models/{TRL}`.", "", *lines, ""]


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    """Reward overall and per task, and entropy, of every run: the mean over WINDOW steps."""
    from matplotlib.figure import Figure

    keys = ("reward", "reward@products", "reward@chain_sum", "entropy")
    fig = Figure(figsize=(3.4 * len(keys), 3), layout="constrained")
    axes = [fig.add_subplot(1, len(keys), i + 1) for i in range(len(keys))]
    window = np.ones(WINDOW) / WINDOW
    for name, rows in curves.items():
        for ax, key in zip(axes, keys):
            points = np.array([(r["step"], r[key]) for r in rows if key in r])
            if len(points) >= WINDOW:
                ax.plot(points[WINDOW - 1:, 0], np.convolve(points[:, 1], window, "valid"),
                        label=name)
    for ax, key in zip(axes, keys):
        ax.set_title(key + ("\n(training rollouts)" if key.startswith("reward") else
                            f", nats\n({TRL}: exact H; others: -log p sampled)"), fontsize=9)
        ax.set_xlabel(f"step (mean of {WINDOW})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)  # TRL logs no per-task reward: the first panel has every run
    fig.savefig(path, dpi=110)


def _test_order(path: Path) -> tuple:
    _, test_set, model = path.stem.split("_", 2)
    kind, seed = test_set.rstrip("0123456789"), test_set[len(test_set.rstrip("0123456789")):]
    return kind != "seed", int(seed or 0), model != "start", model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curve", nargs=2, metavar=("NAME", "METRICS"),
                        help="keep a run's training curve as curves/NAME.jsonl")
    parser.add_argument("--until", type=int, help="with --curve: the committed checkpoint's step")
    args = parser.parse_args(argv)
    if args.curve:
        if not args.until:
            parser.error("--curve needs --until STEP")
        print(keep_curve(args.curve[0], Path(args.curve[1]), args.until))
        return 0
    parts = ["# RL on real tasks: reasoning-gym, Gemma 3 270M", "",
             "## Candidate tasks: where the start model has room", ""]
    for path in sorted(DATA.glob("candidates*.json")):
        report = with_guessing(json.loads(path.read_text()))
        k = report["samples"]
        seed = report["seed"] if report["seed"] is not None else "of the spec"
        parts += [f"The start model on {report['n']} prompts (data seed {seed}), greedy and {k} "
                  f"samples at temperature {report['temperature']}; beside them, what guessing "
                  f"scores on the same prompts. Kept for RL: pass@{k} - max(greedy, {k} guesses) "
                  f">= {HEADROOM}.", "",
                  candidates_table(report), "", f"Command: `{report['command']}`", ""]
    tests: dict[str, dict[str, dict]] = {}
    # test_<set>_<model>.json: sets in the order of their seeds, in each the start model first
    for path in sorted(DATA.glob("test_*.json"), key=_test_order):
        _, test_set, model = path.stem.split("_", 2)
        tests.setdefault(test_set, {})[model] = json.loads(path.read_text())
    for test_set, reports in tests.items():
        first = next(iter(reports.values()))
        data = first["data"]
        if ":" in data:  # a spec: its own seed, not drawn for training or selection
            tasks = data.partition(":")[2].partition("?")[0].replace(",", ", ")
            parts += [f"## Held out: {tasks} ({test_set})", "",
                      f"Greedy accuracy on {first['n']} distinct test prompts (`{data}`), a seed "
                      "used for neither training nor selection."]
        else:
            parts += [f"## Held out: {Path(data).name}", "",
                      f"Greedy accuracy on the {first['n']} prompts of `{data}`."]
        parts += ["", test_table(reports), ""]
        parts += [f"- {name}: `{r['command']}`" for name, r in reports.items()] + [""]
    parts += curves_section(tests)
    write_page("06_rl_reasoning_gym.md", parts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
