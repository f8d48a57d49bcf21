"""RL on real tasks (reasoning-gym, Gemma 3 270M): the candidate table, then each run beside its start.

    python course/results/scripts/rl_real_tasks.py
    # course/results/06_rl_reasoning_gym/*.json -> 06_rl_reasoning_gym.md
    # (the part from "## Notes" on is written by hand and kept)

Every figure comes from a `tunix-lite eval --json` report saved in course/results/06_rl_reasoning_gym/
(the command that made it is in the report's own "command" key, written below each table):

- candidates.json: the start model (the format warm-up) on every candidate task, greedy and 8 samples per
  prompt. A task is kept for RL when pass@8 - greedy >= HEADROOM: room a sharper policy can take.
- test_<model>.json: greedy accuracy of a model on the held-out prompts (a seed used for neither training
  nor selection), with 95% Wilson intervals; a gain counts only where the intervals do not overlap.
"""

from __future__ import annotations

import json

from heldout import RESULTS

DATA = RESULTS / "06_rl_reasoning_gym"
HEADROOM = 0.2  # pass@8 - greedy of the start model: below this, RL has little a sharper policy can find


def _ci(row: dict) -> str:
    lo, hi = row["ci95"]
    return f"{row['accuracy']:.2f} [{lo:.2f}, {hi:.2f}]"


def kept_tasks(report: dict) -> list[str]:
    """The tasks whose pass@K exceeds greedy accuracy by at least HEADROOM."""
    k = report["samples"]
    return [task for task, row in report["per_task"].items()
            if row[f"pass@{k}"] - row["accuracy"] >= HEADROOM - 1e-9]  # 0.24 - 0.04 is 0.2 in exact terms


def candidates_table(report: dict) -> str:
    k = report["samples"]
    kept = set(kept_tasks(report))
    lines = [f"| task | n | greedy [95% CI] | pass@{k} | maj@{k} | pass@{k} - greedy | kept |",
             "|---|---:|---|---:|---:|---:|---|"]
    for task, row in sorted(report["per_task"].items(), key=lambda kv: kv[1]["accuracy"] - kv[1][f"pass@{k}"]):
        lines.append(f"| {task} | {row['n']} | {_ci(row)} | {row[f'pass@{k}']:.2f} | {row[f'maj@{k}']:.2f} | "
                     f"{row[f'pass@{k}'] - row['accuracy']:+.2f} | {'yes' if task in kept else 'no'} |")
    lines.append(f"| all | {report['n']} | {_ci(report)} | {report[f'pass@{k}']:.2f} | {report[f'maj@{k}']:.2f} | "
                 f"{report[f'pass@{k}'] - report['accuracy']:+.2f} | |")
    return "\n".join(lines)


def test_table(reports: dict[str, dict]) -> str:
    """Greedy held-out accuracy per model (rows) overall and per task (columns)."""
    tasks = sorted({t for r in reports.values() for t in r["per_task"]})
    lines = ["| model | n | all [95% CI] | format | " + " | ".join(tasks) + " |",
             "|---|---:|---|---:|" + "---:|" * len(tasks)]
    for name, r in reports.items():
        cells = " | ".join(f"{r['per_task'][t]['accuracy']:.2f}" if t in r["per_task"] else "" for t in tasks)
        lines.append(f"| {name} | {r['n']} | {_ci(r)} | {r['format']:.2f} | {cells} |")
    return "\n".join(lines)


def main() -> int:
    parts = ["# RL on real tasks: reasoning-gym, Gemma 3 270M", ""]
    candidates = DATA / "candidates.json"
    if candidates.exists():
        report = json.loads(candidates.read_text())
        parts += ["## Candidate tasks: where the start model has room", "",
                  f"The start model on {report['n']} prompts (data seed {report['seed']}), greedy and "
                  f"{report['samples']} samples at temperature {report['temperature']}. Kept for RL: "
                  f"pass@{report['samples']} - greedy >= {HEADROOM}.", "", candidates_table(report), "",
                  f"Command: `{report['command']}`", ""]
    tests = {p.stem.removeprefix("test_"): json.loads(p.read_text()) for p in sorted(DATA.glob("test_*.json"))}
    if tests:
        first = next(iter(tests.values()))
        parts += ["## Held out", "", f"Greedy accuracy on {first['n']} test prompts (data seed {first['seed']}, "
                  "used for neither training nor selection).", "", test_table(tests), ""]
        parts += [f"- {name}: `{r['command']}`" for name, r in tests.items()] + [""]
    path = RESULTS / "06_rl_reasoning_gym.md"
    notes = path.read_text().partition("\n## Notes")[2] if path.exists() else ""  # written by hand: kept
    path.write_text("\n".join(parts) + (f"\n## Notes{notes}" if notes else ""))
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
