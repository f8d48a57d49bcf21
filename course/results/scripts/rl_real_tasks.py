"""RL on real tasks (reasoning-gym, Gemma 3 270M): the candidate tables, then each run beside its
start.

    python course/results/scripts/rl_real_tasks.py
    # course/results/06_rl_reasoning_gym/*.json -> 06_rl_reasoning_gym.md
    # (the part from "## Notes" on is written by hand and kept)

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
  training nor selection), with 95% Wilson intervals; a gain counts only where the intervals do not
  overlap. One table per held-out set (data spec and seed).
"""

from __future__ import annotations

import json
from pathlib import Path

from heldout import RESULTS

DATA = RESULTS / "06_rl_reasoning_gym"
HEADROOM = 0.2  # pass@8 minus greedy, and minus 8 guesses: below this, little that RL can sharpen


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


def test_table(reports: dict[str, dict]) -> str:
    """Greedy held-out accuracy per model (rows) overall and per task (columns)."""
    tasks = sorted({t for r in reports.values() for t in r["per_task"]})
    lines = ["| model | n | all [95% CI] | format | " + " | ".join(tasks) + " |",
             "|---|---:|---|---:|" + "---:|" * len(tasks)]
    for name, r in reports.items():
        cells = " | ".join(_ci(r["per_task"][t]) if t in r["per_task"] else ""
                           for t in tasks)
        lines.append(f"| {name} | {r['n']} | {_ci(r)} | {r['format']:.2f} | {cells} |")
    return "\n".join(lines)


def _test_order(path: Path) -> tuple:
    _, test_set, model = path.stem.split("_", 2)
    kind, seed = test_set.rstrip("0123456789"), test_set[len(test_set.rstrip("0123456789")):]
    return kind != "seed", int(seed or 0), model != "start", model


def main() -> int:
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
    path = RESULTS / "06_rl_reasoning_gym.md"
    # the notes are written by hand: kept
    notes = path.read_text().partition("\n## Notes")[2] if path.exists() else ""
    path.write_text("\n".join(parts) + (f"\n## Notes{notes}" if notes else ""))
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
