"""Does the tiny capstone's GRPO gain hold on questions that played no part in choosing its setting?

    python course/results/scripts/capstone_confirm.py runs/capstone_tiny [--seed 7]
    # writes RUN/confirm/prompts.jsonl and one `tunix-lite eval --json` report per stage beside
    # it, then prints each stage's greedy accuracy and the paired changes (for
    # tunix_lite/course/results/09_capstone.md)

The prompts are the test split of another synthetic seed, in the run's own domains, each prompt
once, without any prompt of the run's test set or of any stage's data (`--exclude RUN` drops the
latter again and reports n_excluded).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tunix_lite.data.records import load_records
from tunix_lite.data.synthetic import make_splits
from tunix_lite.evaluation import paired_difference
from tunix_lite.pipeline import load_pipeline
from tunix_lite.pipeline.state import write_jsonl

STAGES = ("sft", "dpo", "grpo")


def write_prompts(run: Path, seed: int, n: int) -> Path:
    """RUN/confirm/prompts.jsonl: up to `n` test-split prompts of `seed` that neither the run's test
    set nor its data section's training file asks."""
    data = load_pipeline(run / "pipeline.yaml").data
    asked = {prompt for name in ("test", "train")
             for prompt in load_records(run / "data" / f"{name}.jsonl")["prompt"]}
    rows = make_splits(0, 0, n, domains=data.domains, seed=seed, style=data.style)["test"]
    kept, seen = [], set()
    for row in rows:
        if row["prompt"] not in asked and row["prompt"] not in seen:
            seen.add(row["prompt"])
            kept.append(row)
    path = run / "confirm" / "prompts.jsonl"
    write_jsonl(path, kept)
    return path


def evaluate(run: Path, stage: str, prompts: Path) -> dict:
    command = ["tunix-lite", "eval", "--model", str(run / stage), "--data", str(prompts),
               "--exclude", str(run), "--json"]
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    (prompts.parent / f"{stage}.json").write_text(json.dumps(report, indent=1))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished capstone_tiny run's output_dir")
    parser.add_argument("--seed", type=int, default=7, help="the synthetic seed of the prompts")
    parser.add_argument("--n", type=int, default=1200, help="test-split rows drawn before dedup")
    args = parser.parse_args()
    prompts = write_prompts(args.run, args.seed, args.n)
    reports = {stage: evaluate(args.run, stage, prompts) for stage in STAGES}
    for stage, report in reports.items():
        lo, hi = report["ci95"]
        print(f"{stage}: {report['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] on n={report['n']} "
              f"(n_excluded {report['n_excluded']})")
    for start, end in (("sft", "dpo"), ("dpo", "grpo"), ("sft", "grpo")):
        change, lo, hi = paired_difference(reports[start]["right"], reports[end]["right"])
        print(f"{end} vs {start}: {change:+.3f} [{lo:+.3f}, {hi:+.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
