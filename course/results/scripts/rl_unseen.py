"""RL on questions no run trained on (reasoning-gym's chain_sum, Gemma 3 270M): the room before
training, the pipeline's table, and a re-score of the committed adapters on a fresh seed.

    python course/results/scripts/rl_unseen.py --keep NAME RUN_DIR
    # keeps a pipeline run's report as pipeline_NAME.json and each stage's training curve as
    # curves/STAGE_STEPS.jsonl (--stages: only those; the adapters are copied by hand)
    python course/results/scripts/rl_unseen.py
    # course/results/06_rl_unseen/*.json -> tunix_lite/course/results/06_rl_unseen.md (+ .png)
    # (the part from "## Notes" on is written by hand and kept)

What course/results/06_rl_unseen/ holds, each from a command written beside its table:

- candidates.json: the start model (the format warm-up) on the test side of each candidate task,
  greedy and 8 samples per prompt, beside what guessing scores (rl_real_tasks.candidates_table).
- pipeline_<name>.json: the report of `tunix-lite run grpo_chain_sum_unseen_gemma3_270m` (every
  stage from the same start, 500 test prompts of one seed, the seen ones scored apart).
- test_<set>_<model>.json: `tunix-lite eval --json` of each committed model on a seed that no run
  or selection used, with `--exclude` dropping every prompt a training source of the manifest asks.
- curves/<stage>_<steps>.jsonl: reward, entropy and the share of groups without signal, per step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from heldout import RESULTS, SHOWN, write_page
from rl_real_tasks import candidates_table, test_table, with_guessing

from tunix_lite.evaluation import paired_difference

DATA = RESULTS / "06_rl_unseen"
CURVES = DATA / "curves"
CURVE_KEYS = ("reward", "entropy", "zero_signal_groups")
WINDOW = 10  # steps per point of the drawn curves
ORDER = ("start", "grpo", "drgrpo", "rloo")  # the rows of the re-score's table


def keep(name: str, run: Path, stages: list[str] | None, data: Path = DATA) -> None:
    """A pipeline run's table (its `stages`, default all), which test prompts are seen and how
    many each stage's own data asks, and the stages' curves, under `name` in `data`."""
    table = json.loads((run / "report" / "table.json").read_text())
    decontamination = json.loads((run / "report" / "decontamination.json").read_text())
    stages = stages or [s for s in table if s != "base"]
    kept = {"test": decontamination["test"], "seen": decontamination["seen"],
            "base": table["base"], "stages": {}}
    curves = data / CURVES.name
    curves.mkdir(parents=True, exist_ok=True)
    for stage in stages:
        steps = json.loads((run / stage / "stage.json").read_text())["steps"]
        own = decontamination["stages"][stage]["n_seen"]
        kept["stages"][stage] = table[stage] | {"steps": steps, "n_seen_by_own_data": own}
        metrics = (run / stage / "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in metrics]
        curve = [{"step": r["step"]} | {k: r[k] for k in CURVE_KEYS if k in r}
                 for r in rows if "reward" in r]
        path = curves / f"{stage}_{steps}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in curve))
        print(path, len(curve), "steps")
    (data / f"pipeline_{name}.json").write_text(json.dumps(kept))


def _row(label: str, steps: str, row: dict, change: str) -> str:
    summary = row["summary"]
    lo, hi = summary["unseen_ci95"]
    slo, shi = summary["seen_ci95"]
    return (f"| {label} | {steps} | {summary['unseen']:.2f} [{lo:.2f}, {hi:.2f}] | {change} | "
            f"{summary['seen']:.2f} [{slo:.2f}, {shi:.2f}] | {summary['accuracy']:.2f} | "
            f"{summary['pass@8']:.2f} | {summary['maj@8']:.2f} |")


def pipeline_table(runs: dict[str, dict]) -> str:
    """One row per kept stage: unseen greedy accuracy first, its paired change from the start
    model on the same prompts, then the seen prompts and the samples' figures."""
    first = next(iter(runs.values()))
    base = first["base"]["summary"]
    lines = [f"| model | steps | unseen, n={base['n_unseen']} [95% CI] | vs start, unseen, paired "
             f"[95% CI] | seen, n={base['n_seen']} | all, n={base['n']} | pass@8 | maj@8 |",
             "|---|---:|---|---|---|---:|---:|---:|",
             _row("start (the warm-up)", "", first["base"], "")]
    for run in runs.values():
        seen = set(run["seen"])

        def unseen(right: list[int]) -> list[int]:
            return [v for i, v in enumerate(right) if i not in seen]

        start = unseen(run["base"]["greedy_right"])
        for stage, row in run["stages"].items():
            delta, lo, hi = paired_difference(start, unseen(row["greedy_right"]))
            change = f"{delta:+.2f} [{lo:+.2f}, {hi:+.2f}]"
            lines.append(_row(stage, str(row["steps"]), row, change))
    return "\n".join(lines)


def plot(path: Path) -> None:
    """Training reward, entropy and the share of groups without signal, mean of WINDOW steps."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.6 * len(CURVE_KEYS), 3), layout="constrained")
    axes = [fig.add_subplot(1, len(CURVE_KEYS), i + 1) for i in range(len(CURVE_KEYS))]
    window = np.ones(WINDOW) / WINDOW
    for curve in sorted(CURVES.glob("*.jsonl")):
        rows = [json.loads(line) for line in curve.read_text().splitlines()]
        for ax, key in zip(axes, CURVE_KEYS):
            points = np.array([(r["step"], r[key]) for r in rows if key in r])
            ax.plot(points[WINDOW - 1:, 0], np.convolve(points[:, 1], window, "valid"),
                    label=curve.stem.replace("_", ", ", 1))
    titles = {"reward": "reward (training rollouts)", "entropy": "entropy, nats a token",
              "zero_signal_groups": "groups with all-equal rewards"}
    for ax, key in zip(axes, CURVE_KEYS):
        ax.set_title(titles[key], fontsize=9)
        ax.set_xlabel(f"step (mean of {WINDOW})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", nargs=2, metavar=("NAME", "RUN_DIR"),
                        help="keep a pipeline run's table and curves under NAME")
    parser.add_argument("--stages", nargs="+", help="with --keep: only these stages")
    args = parser.parse_args(argv)
    if args.keep:
        keep(args.keep[0], Path(args.keep[1]), args.stages)
        return 0
    parts = ["# RL on questions it never trained on: chain_sum, Gemma 3 270M", ""]
    tests: dict[str, dict] = {}
    for path in sorted(DATA.glob("test_*.json")):
        tests[path.stem.split("_", 2)[2]] = json.loads(path.read_text())
    tests = dict(sorted(tests.items(), key=lambda kv: (ORDER + (kv[0],)).index(kv[0])))
    if tests:
        first = next(iter(tests.values()))
        parts += ["## The committed adapters on a fresh seed, unseen prompts only", "",
                  f"Greedy accuracy on the {first['n']} distinct prompts of `{first['data']}` that "
                  f"no training source of the manifest asks ({first['n_excluded']} dropped by "
                  "`--exclude`); a seed used for neither training nor selection.", "",
                  test_table(tests), ""]
        parts += [f"- {name}: `{r['command']}`" for name, r in tests.items()] + [""]
    runs = {path.stem.partition("_")[2]: json.loads(path.read_text())
            for path in sorted(DATA.glob("pipeline_*.json"))}
    if runs:
        parts += ["## The pipeline's test set: 500 prompts of the test side", "",
                  "Each stage starts from the warm-up. Greedy accuracy on the test prompts that "
                  "no data the model saw asks (unseen), its paired change from the start model "
                  "on the same prompts, the prompts the warm-up's own data asked (seen), and 8 "
                  "samples at temperature 1.0.", "", pipeline_table(runs), "",
                  "Command: `tunix-lite run grpo_chain_sum_unseen_gemma3_270m` (GRPO at 120 steps: "
                  "the same file with `--set stages.0.steps=120`). Curves: `06_rl_unseen.png`.", ""]
        plot(SHOWN / "06_rl_unseen.png")
    candidates = DATA / "candidates.json"
    if candidates.exists():
        report = with_guessing(json.loads(candidates.read_text()))
        parts += ["## Room before training, on the test side", "",
                  f"The start model on {report['n']} test-side prompts, greedy and "
                  f"{report['samples']} samples; beside them, what guessing scores.", "",
                  candidates_table(report), "", f"Command: `{report['command']}`", ""]
    write_page("06_rl_unseen.md", parts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
