"""Reports of held-out evaluations: a table per stage with intervals, the test-time scaling table,
and their plots (`write_report` writes them all into a folder).

    markdown, table = stage_table({"base": base_report, "sft": sft_report})

Each stage is a `ReasoningReport` (`tunix_lite.evaluation.reasoning.evaluate_reasoning`). Greedy
accuracy carries its 95% Wilson interval, and a stage's change from the one before is paired over
the same prompts (`tunix_lite.evaluation.statistics`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tunix_lite.evaluation.reasoning import ReasoningReport
from tunix_lite.evaluation.statistics import paired_difference, wilson

_COLUMNS = (("accuracy", "greedy acc"), ("format", "format"), ("reasoning", "reasoning"),
            ("length", "length"))


def stage_table(reports: Mapping[str, ReasoningReport],
                starts: Mapping[str, str] | None = None) -> tuple[str, dict]:
    """(markdown, json) of the per-stage held-out figures: one row per stage, in the order given.

    Where the reports count their prompts (summary["n"]), greedy accuracy carries its 95% Wilson
    interval, and "vs previous" is the change from the row above on the same prompts, with the
    paired interval (`paired_difference`): a stage helped or hurt only where that interval
    excludes 0. `starts` names the row each stage started from (a pipeline's `from:`) where that
    is not the row above: its change is then paired with that row, and the column reads "vs its
    start" (three stages from one base compare with the base, not with each other). Where the
    reports were decontaminated (summary["n_unseen"], and each report's `seen_prompts`:
    `tunix_lite.evaluation.decontamination`), the first column is greedy accuracy on the unseen
    prompts, those no training data asks (the held-out figure proper), and the change is paired
    over them; where some prompts were trained on, "seen" scores those and "all" every prompt.
    Sampled figures, format and domains count every prompt.

    The json: per stage its summary with "ci95" and "vs_previous" (the change, all prompts), and
    where decontaminated "unseen_ci95", "unseen_vs_previous", "seen_ci95"."""
    if not reports:
        return "(no evaluations yet)\n", {}
    table = {stage: dict(r.summary) for stage, r in reports.items()}
    order = list(reports)
    starts = {stage: (starts or {}).get(stage, above) for above, stage in zip(order, order[1:])}
    _add_intervals(reports, table, starts)
    change = ("vs previous" if all(starts[s] == above for above, s in zip(order, order[1:]))
              else "vs its start")
    first = next(iter(reports.values())).summary
    ks = sorted(int(k.split("@")[1]) for k in first if k.startswith("pass@"))
    if ks:
        # pass@ the least and the most samples (one column where they are one), maj@ the most
        sampled = [(name, name) for name in dict.fromkeys(
            (f"pass@{ks[0]}", f"pass@{ks[-1]}", f"maj@{ks[-1]}"))]
        domains = sorted({k.split("/", 1)[1] for r in reports.values() for k in r.summary
                          if k.startswith("accuracy/")})
        if "n_unseen" in first:  # decontaminated: the unseen prompts first
            greedy = _seen_columns(first, change)
        elif "n" in first:
            greedy = [("accuracy", "greedy acc [95% CI]"), ("vs_previous", f"{change} [95% CI]")]
        else:
            greedy = list(_COLUMNS[:1])
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


def _seen_columns(first: Mapping, change: str) -> list[tuple[str, str]]:
    """The greedy columns of decontaminated reports: unseen and its paired change first; where
    some prompts were trained on, seen and all."""
    columns = []
    if first["n_unseen"]:
        title = f"{change}, unseen [95% CI]" if first["n_seen"] else f"{change} [95% CI]"
        columns += [("unseen", f"unseen, n={first['n_unseen']} [95% CI]"),
                    ("unseen_vs_previous", title)]
    if first["n_seen"]:
        columns += [("seen", f"seen, n={first['n_seen']} [95% CI]"),
                    ("accuracy", f"all, n={first['n']} [95% CI]")]
    return columns


def _add_intervals(reports: Mapping[str, ReasoningReport], table: dict,
                   starts: Mapping[str, str]) -> None:
    """table[stage]["ci95"] (Wilson, of greedy accuracy) and ["vs_previous"] ([change, lo, hi]
    against the row the stage started from, `starts[stage]`, paired over the same prompts), where
    the reports allow them; the same on the unseen prompts ("unseen_ci95", "unseen_vs_previous")
    and on the seen ones ("seen_ci95") where the reports were decontaminated."""
    rights = {stage: np.asarray(report.greedy_right, int) for stage, report in reports.items()}
    for stage, report in reports.items():
        row, right = table[stage], rights[stage]
        n = int(report.summary.get("n", 0))
        if n and "accuracy" in report.summary:
            row["ci95"] = list(wilson(report.summary["accuracy"] * n, n))
        start = rights.get(starts.get(stage), np.zeros(0, int))
        comparable = right.size and start.size == right.size
        if comparable:
            row["vs_previous"] = list(paired_difference(start, right))
        seen = np.asarray(report.seen_prompts, bool)
        if right.size and seen.size == right.size:
            for part, mask in (("unseen", ~seen), ("seen", seen)):
                if mask.any():
                    row[f"{part}_ci95"] = list(wilson(right[mask].sum(), int(mask.sum())))
            if comparable and (~seen).any():
                row["unseen_vs_previous"] = list(paired_difference(start[~seen], right[~seen]))


def _cell(key: str, row: Mapping) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    interval = row.get({"accuracy": "ci95", "unseen": "unseen_ci95",
                        "seen": "seen_ci95"}.get(key, ""))
    if interval is not None:
        return f"{value:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"
    if key.endswith("vs_previous"):
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


def write_report(reports: Mapping[str, ReasoningReport], directory: str | Path,
                 starts: Mapping[str, str] | None = None) -> Path:
    """Write table.md, table.json, scaling.md, stages.png and scaling.png into `directory`
    (`starts`: as stage_table's)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    markdown, table = stage_table(reports, starts)
    (directory / "table.md").write_text(markdown, encoding="utf-8")
    (directory / "table.json").write_text(json.dumps(
        {stage: {"summary": table[stage], "scaling": {str(k): v for k, v in r.scaling.items()},
                 "greedy_right": r.greedy_right} for stage, r in reports.items()},
        indent=1) + "\n", encoding="utf-8")
    (directory / "scaling.md").write_text(scaling_table(reports), encoding="utf-8")
    plot_stages(reports).savefig(directory / "stages.png", dpi=110)
    plot_scaling(reports).savefig(directory / "scaling.png", dpi=110)
    return directory

