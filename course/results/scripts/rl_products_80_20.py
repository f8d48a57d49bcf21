"""RL on 80 multiplication facts: will the other 20 improve? (reasoning-gym's one-digit products,
Gemma 3 270M, `tunix_lite/configs/grpo_products_80_20_gemma3_270m.yaml`)

    python course/results/scripts/rl_products_80_20.py --keep NAME RUN_DIR
    # keeps a pipeline run's report as course/results/06_rl_products_80_20/NAME/pipeline_NAME.json
    # and its training curve (the adapters are copied by hand); NAME is a split: 80_20 or 50_50
    python course/results/scripts/rl_products_80_20.py
    # -> tunix_lite/course/results/06_rl_products_80_20.md (+ .png: the multiplication table
    # before and after, the held-out facts outlined; the part from "## Notes" on is kept)

The test set is all 100 facts, so the table's n is the whole population: the "seen" column is the
facts a run trained on, the "unseen" column the ones whose pair lies on the test side.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from heldout import RESULTS, SHOWN, write_page
from rl_unseen import keep, pipeline_table

from tunix_lite.data.questions import question_key
from tunix_lite.data.reasoning_gym import make_records
from tunix_lite.evaluation import distinct_prompts, paired_difference

DATA = RESULTS / "06_rl_products_80_20"
NAME = "06_rl_products_80_20"


def facts_asked(spec: str, n: int) -> list[tuple[int, int]]:
    """The (a, b) of each test prompt, in the order the pipeline scored them."""
    records = distinct_prompts(make_records(spec), n)
    return [tuple(int(t) for t in question_key(json.loads(r["entry"])).split(" * "))
            for r in records]


def fact_table(run: dict, facts: list[tuple[int, int]]) -> str:
    """Each held-out fact, its answer, and whether the start model and each stage answered it
    right greedily."""
    seen = set(run["seen"])
    stages = list(run["stages"])
    lines = ["| held-out fact | answer | start | " + " | ".join(stages) + " |",
             "|---|---:|:---:|" + ":---:|" * len(stages)]
    mark = {1: "right", 0: "wrong"}
    for i in sorted(set(range(len(facts))) - seen, key=lambda i: facts[i]):
        a, b = facts[i]
        cells = [mark[run["base"]["greedy_right"][i]]]
        cells += [mark[run["stages"][s]["greedy_right"][i]] for s in stages]
        lines.append(f"| {a} × {b} | {a * b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def beyond_zero_and_one(run: dict, facts: list[tuple[int, int]]) -> str:
    """The paired change on the facts with both factors from 2 to 9 (0 × b and 1 × b are answered
    by a rule, not recalled), held out and trained apart."""
    seen = set(run["seen"])
    out = []
    for side, label in ((False, "held out"), (True, "trained")):
        rows = [i for i, (a, b) in enumerate(facts) if min(a, b) >= 2 and (i in seen) == side]
        start = [run["base"]["greedy_right"][i] for i in rows]
        for stage, row in run["stages"].items():
            after = [row["greedy_right"][i] for i in rows]
            delta, lo, hi = paired_difference(start, after)
            out.append(f"- {label}, both factors 2-9 (n={len(rows)}): start {np.mean(start):.2f}, "
                       f"{stage} {np.mean(after):.2f}, paired {delta:+.2f} [{lo:+.2f}, {hi:+.2f}]")
    return "\n".join(out)


def plot(runs: dict[str, dict], facts: list[tuple[int, int]], path: Path) -> None:
    """The 10 x 10 table, right (green) or wrong (red) greedily, before and after each stage of each
    run (a row per run); the run's held-out facts outlined."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    columns = 1 + max(len(run["stages"]) for run in runs.values())
    fig = Figure(figsize=(3.4 * columns, 3.7 * len(runs)), layout="constrained")
    fig.suptitle("greedy answer to a × b: right (green) or wrong (red); outlined: held out",
                 fontsize=9)
    for r, (split, run) in enumerate(runs.items()):
        seen = set(run["seen"])
        for k, (name, row) in enumerate(({"start": run["base"]} | run["stages"]).items()):
            ax = fig.add_subplot(len(runs), columns, r * columns + k + 1)
            grid = np.full((10, 10), np.nan)
            for (a, b), right in zip(facts, row["greedy_right"]):
                grid[a, b] = right
            ax.imshow(grid, cmap=ListedColormap(["#e06c5a", "#6dbb6d"]), vmin=0, vmax=1)
            for i, (a, b) in enumerate(facts):
                if i not in seen:
                    ax.add_patch(Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, lw=2, ec="black"))
            held = [v for i, v in enumerate(row["greedy_right"]) if i not in seen]
            trained = [v for i, v in enumerate(row["greedy_right"]) if i in seen]
            ax.set_title(f"{split.replace('_', '/')} split, {name}: trained {sum(trained)}/"
                         f"{len(trained)}, held out {sum(held)}/{len(held)}", fontsize=8)
            ax.set_xticks(range(10))
            ax.set_yticks(range(10))
            ax.set_xlabel("b", fontsize=8)
            ax.set_ylabel("a", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.savefig(path, dpi=110)


def section(split: str, run: dict, facts: list[tuple[int, int]]) -> list[str]:
    n_held = len(facts) - len(run["seen"])
    return [f"## {len(run['seen'])} facts trained, {n_held} held out ({split.replace('_', '/')})",
            "",
            f"Greedy accuracy on all 100 one-digit products, each once: the {n_held} facts whose "
            "pair lies on the test side of the split (unseen: neither a × b nor b × a was ever a "
            f"training prompt) and the {len(run['seen'])} the run trained on (seen), with the "
            "paired change from the start model on the same facts and 8 samples at temperature "
            "1.0.", "", pipeline_table({split: run}), "", beyond_zero_and_one(run, facts), ""
            ] + (["### The held-out facts", "", fact_table(run, facts), ""] if n_held <= 20 else [])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", nargs=2, metavar=("NAME", "RUN_DIR"),
                        help="keep a pipeline run's table and curve under NAME")
    args = parser.parse_args(argv)
    if args.keep:
        name, run = args.keep
        (DATA / name).mkdir(parents=True, exist_ok=True)
        keep(name, Path(run), None, data=DATA / name)
        return 0
    runs = {path.parent.name: json.loads(path.read_text())
            for path in sorted(DATA.glob("*/pipeline_*.json"), reverse=True)}  # 80_20 first
    first = next(iter(runs.values()))
    facts = facts_asked(first["test"], first["base"]["summary"]["n"])
    if sorted(facts) != [(a, b) for a in range(10) for b in range(10)]:
        raise SystemExit(f"{first['test']}: the test prompts are not the 100 facts once each")
    parts = ["# RL on some multiplication facts: do the others improve? Gemma 3 270M", ""]
    for split, run in runs.items():
        parts += section(split, run, facts)
    parts += ["Command: `tunix-lite run grpo_products_80_20_gemma3_270m` (the 50/50 split: add "
              "`--set 'data.train=reasoning_gym:products?size=2000&seed=13&split=train&"
              "unordered=true&test_fraction=0.5&products.max_digits=1'`). The tables, fact by "
              f"fact: `{NAME}.png`.", ""]
    plot(runs, facts, SHOWN / f"{NAME}.png")
    write_page(f"{NAME}.md", parts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
