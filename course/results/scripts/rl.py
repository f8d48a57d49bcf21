"""Held-out results of RL on the tiny model: GRPO after SFT, its variants and PPO on the same budget,
and reward hacking with a format-only reward (the static results notebooks/06_reinforcement_learning
shows). Each command, run from the repository root as `python course/results/scripts/rl.py ...`:

    sft                    stage 1: tunix_lite/configs/sft_tiny.yaml -> runs/sft_tiny/model
    run grpo               one variant from it -> course/results/06_rl/grpo.json
    run ppo --steps 60     (variants: grpo drgrpo rloo ppo format_only)
    overfit                the sanity check: GRPO drives 4 prompts to exact match
    passk                  greedy vs mean / pass@8 of samples, validation split, per domain
    run grpo --split validation --name X --set ...   choose settings on validation
    test --name X          then score the chosen run once on the test split
    table                  all of them -> course/results/06_rl.{md,png} (the plot: the variants; the .md
                           keeps its hand-written part above MARKER)
    gemma                  after `tunix-lite run grpo_gemma3_270m`: its stages ->
                           course/results/06_rl_gemma.{md,png}

Every variant starts from the same SFT model and runs tunix_lite/configs/grpo_tiny.yaml with one change (VARIANTS),
so they differ only in what the variant names. Accuracy is exact match of greedy answers on the held-out
test split of the synthetic tasks (heldout.py: never trained on, repeated prompts counted once, 95%
Wilson intervals, a 128-token answer budget), before and after, per domain. Variants are independent
processes: run them side by side on a machine with cores to spare
(`taskset -c 2,3 python course/results/scripts/rl.py run rloo`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tunix_lite import configs
from heldout import (RESULTS, ROOT, SHOWN, accuracy, interval, samples, test_records, validation_records,
                     verdicts)

SFT = ROOT / "runs" / "sft_tiny" / "model"
# name -> (algorithm, overrides of tunix_lite/configs/grpo_tiny.yaml, what it shows)
VARIANTS = {
    "grpo": ("grpo", {}, "GRPO as published: (r - mean) / std, sequence-mean-token-mean, k3 KL"),
    "drgrpo": ("grpo", {"advantage": "drgrpo", "aggregation": "sequence-mean-token-sum-norm"},
               "Dr. GRPO: r - mean, token sums / a constant length"),
    "rloo": ("grpo", {"advantage": "rloo"}, "RLOO: leave-one-out baseline"),
    "ppo": ("ppo", {}, "PPO: value head on the policy's features, GAE, whitened advantages"),
    "format_only": ("grpo", {"rewards": ["format"]}, "GRPO rewarded for the answer tag alone (reward hacking)"),
}
MARKER = "<!-- below: written by `python course/results/scripts/rl.py table` -->"
GEMMA_MARKER = "<!-- below: written by `python course/results/scripts/rl.py gemma` -->"
GEMMA_RUN = ROOT / "runs" / "grpo_gemma3_270m"
HISTORY_KEYS = ("reward", "reward/exact_match", "reward/format", "kl", "length", "entropy",
                "zero_signal_groups", "kept_groups", "grad_norm")


def config_for(variant: str, steps: int | None, changes: dict | None = None, start: Path = SFT):
    from tunix_lite.training.algorithms import config_class
    from tunix_lite.training.config import read_yaml

    algorithm, overrides, _ = VARIANTS[variant]
    values = read_yaml(configs.path("grpo_tiny")) | overrides | (changes or {})
    values |= {"algorithm": algorithm, "model": str(start), "output_dir": None, "n_test": 0, "n_accuracy": 0,
               "eval_every": 0}
    if steps:
        values |= {"steps": steps, "warmup_steps": min(values.get("warmup_steps", 0), steps // 10)}
    return config_class(algorithm).from_dict(values)


def run_sft() -> None:
    from tunix_lite.training.sft import SFTConfig, run_sft

    config = SFTConfig.from_yaml(configs.path("sft_tiny"), output_dir=str(SFT.parent), overwrite=True)
    run_sft(config)


def run_variant(variant: str, steps: int | None, changes: dict | None = None, *, split: str = "test",
                save: Path | None = None, start: Path = SFT) -> dict:
    """Train one variant from the SFT model (or `start`); accuracy before/after on the test split, or on the
    validation split when choosing settings (`split`); `save`: also export the trained model there (for `test`)."""
    import importlib

    import tunix_lite
    from tunix_lite.training.algorithms import ALGORITHMS

    if not start.is_dir():
        sys.exit(f"{start} does not exist: "
                 + ("run `python course/results/scripts/rl.py sft` first" if start == SFT
                    else "--model names a saved model's folder"))
    config = config_for(variant, steps, changes, start)
    module, _, driver = ALGORITHMS[config.algorithm]
    records = test_records() if split == "test" else validation_records()
    model, tokenizer = tunix_lite.load(str(start))
    before, before_texts = accuracy(model, tokenizer, records)
    del model
    began = time.perf_counter()
    result = getattr(importlib.import_module(module), driver)(config)
    seconds = time.perf_counter() - began
    after, after_texts = accuracy(result.model, tokenizer, records)
    if save is not None:
        from tunix_lite.export import export_model

        export_model(result.model, tokenizer, save, orbax=False)
    history = [{k: h[k] for k in ("step", *HISTORY_KEYS) if k in h} for h in result.history]
    return {"variant": variant, "what": VARIANTS[variant][2],
            "command": f"python course/results/scripts/rl.py run {variant}"
                       + (f" --steps {steps}" if steps else "")
                       + (f" --model {_shown(start)}" if start != SFT else "")
                       + "".join(f" --set {k}={json.dumps(v)}" for k, v in (changes or {}).items()),
            "changes": changes or {}, "split": split, "start": _shown(start),
            "config": {k: getattr(config, k) for k in ("algorithm", "steps", "batch_size", "group_size",
                                                       "max_new_tokens", "learning_rate", "beta", "rewards")},
            "seconds": round(seconds), "accuracy": {"before": before, "after": after},
            "verdicts": {name: verdicts(texts, records)  # per prompt: what a paired interval needs
                         for name, texts in (("before", before_texts), ("after", after_texts))},
            "history": history,
            "samples": samples(records, {"SFT": before_texts, variant: after_texts})}


def _shown(path: Path) -> str:
    """A path as a command line in the repository would name it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def test_saved(result: dict, model_dir: Path) -> dict:
    """A run chosen on the validation split, scored once on the test split: its JSON with the accuracy replaced."""
    import tunix_lite

    records = test_records()
    start, tokenizer = tunix_lite.load(str(ROOT / result.get("start", SFT)))
    before, before_texts = accuracy(start, tokenizer, records)
    model, _ = tunix_lite.load(str(model_dir / "hf"))
    after, after_texts = accuracy(model, tokenizer, records)
    return result | {"split": "test", "validation_accuracy": result["accuracy"],
                     "accuracy": {"before": before, "after": after},
                     "samples": samples(records, {"SFT": before_texts, result["variant"]: after_texts})}


def overfit(steps: int = 30) -> list[float]:
    """Can GRPO learn at all? The pretrained tiny model, 4 `compare` prompts, G = 8, exact-match reward only,
    beta = 0, learning rate 3e-4: the rollouts' exact match per step (it should climb towards 1 within ~10 steps)."""
    from tunix_lite.rl.grpo import GRPOConfig, run_grpo

    config = GRPOConfig(model="tiny", train_data="synthetic", domains=["compare"], n_train=4, n_validation=4,
                        truncation="drop", seq_len=80, max_new_tokens=32, group_size=8, batch_size=4, steps=steps,
                        learning_rate=3e-4, warmup_steps=1, beta=0.0, rewards=["exact_match"], n_accuracy=0,
                        n_test=0, eval_every=0, log_every=1, output_dir=None, seed=1)
    return [round(h["reward/exact_match"], 2) for h in run_grpo(config, verbose=False).history]


def pass_at_k(model_path: Path, *, group_size: int = 8, temperature: float = 1.0, n: int = 280,
              chunk: int = 32) -> dict:
    """What RL can work with, per domain of the validation split: greedy exact match (pass@1 at temperature 0),
    the mean exact match of G samples at the rollouts' temperature, pass@G (some sample right), and the share of
    groups that carry signal (some but not all samples right). GRPO can only turn pass@G into greedy accuracy
    where pass@G is well above it; a group of all-wrong or all-right samples gives no gradient."""
    import numpy as np

    import tunix_lite
    from tunix_lite.rl.engine import SamplerEngine
    from tunix_lite.rl.rewards import reward_set
    from tunix_lite.rl.rollouts import Prompts, sample_groups
    from tunix_lite.training.config import read_yaml

    grpo = read_yaml(configs.path("grpo_tiny"))
    records = validation_records(n)
    model, tokenizer = tunix_lite.load(str(model_path))
    greedy, greedy_texts = accuracy(model, tokenizer, records)
    greedy_hits = verdicts(greedy_texts, records)
    prompts = Prompts.build(records, tokenizer, max_tokens=grpo["max_prompt_tokens"])
    engine = SamplerEngine(model, tokenizer, prompt_len=prompts.length)
    rewards = reward_set(["exact_match", "format"])
    row_len = min(grpo["seq_len"], prompts.length + grpo["max_new_tokens"] - 1)
    hits, formats = [], []
    for start in range(0, len(prompts), chunk):
        index = list(range(start, min(start + chunk, len(prompts))))
        index += [index[-1]] * (chunk - len(index))  # one shape: pad with the last prompt, drop its rows after
        groups = sample_groups(engine, prompts, index, rewards, group_size=group_size,
                               max_new_tokens=grpo["max_new_tokens"], row_len=row_len, temperature=temperature,
                               seed=start)
        keep = min(chunk, len(prompts) - start) * group_size
        hits.append(groups.parts["exact_match"][:keep].reshape(-1, group_size))
        formats.append(groups.parts["format"][:keep].reshape(-1, group_size))
    hits, formats = np.concatenate(hits), np.concatenate(formats)
    table = {}
    for domain in ["all", *sorted({r["domain"] for r in prompts.records})]:
        rows = [i for i, r in enumerate(prompts.records) if domain in ("all", r["domain"])]
        h = hits[rows]
        right = h.sum(axis=1)
        table[domain] = {"n": len(rows), "greedy": float(np.mean([greedy_hits[i] for i in rows])),
                         "sample_mean": float(h.mean()), f"pass@{group_size}": float((right > 0).mean()),
                         "signal_groups": float(((right > 0) & (right < group_size)).mean()),
                         "sample_format": float(formats[rows].mean())}
    return {"model": str(model_path), "group_size": group_size, "temperature": temperature, "n": len(prompts),
            "domains": table}


def _value(text: str):
    """A --set value as YAML reads it, with 3e-5 a number (YAML 1.1 wants 3.0e-5)."""
    import yaml

    value = yaml.safe_load(text)
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def table(results: dict[str, dict]) -> str:
    first = next(iter(results.values()))
    sft = first["accuracy"]["before"]
    n = sft["all"]["n"]
    lines = [f"Held-out test split, {n} prompts (exact match of greedy answers, 95% Wilson intervals; format = the "
             "share with one well-formed answer tag). Every variant starts from the same SFT model "
             "(`tunix_lite/configs/sft_tiny.yaml`) and runs `tunix_lite/configs/grpo_tiny.yaml` with the changes listed.", "",
             "| run | steps | training s | test accuracy | format | change vs SFT, config changes |", "|---|---:|---:|---|---:|---|",
             f"| SFT model (start) | | | {interval(sft['all'])} | {sft['format']:.2f} | |"]
    for name, r in results.items():
        a = r["accuracy"]["after"]
        changes = ", ".join(f"{k}={v}" for k, v in r.get("changes", {}).items())
        lines.append(f"| {name} | {r['config']['steps']} | {r['seconds']} | {interval(a['all'])} | {a['format']:.2f} | "
                     f"{a['all']['accuracy'] - sft['all']['accuracy']:+.2f} {changes} |")
    domains = [d for d in sft if d not in ("all", "format")]
    lines += ["", "| domain | SFT | " + " | ".join(results) + " |", "|---|---|" + "---|" * len(results)]
    for d in domains:
        lines.append(f"| {d} (n={sft[d]['n']}) | {sft[d]['accuracy']:.2f} | "
                     + " | ".join(f"{r['accuracy']['after'][d]['accuracy']:.2f}" for r in results.values()) + " |")
    lines += ["", "Reproduce: `python course/results/scripts/rl.py sft`, then for each column "
              + ", ".join(f"`{r['command']}`" for r in results.values())
              + ", then `python course/results/scripts/rl.py table`."]
    return "\n".join(lines)


def plot(results: dict[str, dict], path: Path, keys=("reward/exact_match", "reward/format", "kl", "length"),
         smooth: int = 1) -> None:
    """Each run's training curves, one panel per key; `smooth` > 1 draws the mean of that many steps."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.4 * len(keys), 3), layout="constrained")
    axes = [fig.add_subplot(1, len(keys), i + 1) for i in range(len(keys))]
    for name, r in results.items():
        for ax, key in zip(axes, keys):
            points = [(h["step"], h[key]) for h in r["history"] if key in h]
            if len(points) >= smooth:
                steps, values = np.array(points).T
                window = np.ones(smooth) / smooth
                ax.plot(steps[smooth - 1:], np.convolve(values, window, "valid"), label=name)
    for ax, key in zip(axes, keys):
        ax.set(title=key + (" (training rollouts)" if key.startswith("reward") else ""),
               xlabel="step" + (f" (mean of {smooth})" if smooth > 1 else ""))
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8)  # the last panel (length, kl) has every run; a format-only run has no exact match
    fig.savefig(path, dpi=110)


def gemma_tables(run: Path) -> tuple[str, dict[str, dict]]:
    """The Gemma pipeline's stages as two markdown tables (held out; training rollouts) and each RL stage's history."""
    import numpy as np
    import yaml

    held_out = json.loads((run / "report" / "table.json").read_text())
    timings = json.loads((run / "pipeline.json").read_text())["timings"]
    spec = yaml.safe_load((run / "pipeline.yaml").read_text())
    domains = spec["data"]["domains"]
    lines = [f"Held out: {spec['evaluation']['n_prompts']} test prompts of {', '.join(domains)}; greedy answers, and "
             f"{spec['evaluation']['samples']} samples at temperature 1 (pass@1 = their mean exact match).", "",
             f"| stage | greedy exact match | {' | '.join(domains)} | pass@1 | pass@4 | maj@4 | sampled format | "
             "sampled length |", "|---|" + "---:|" * (len(domains) + 6)]
    for stage, row in held_out.items():
        s = row["summary"]
        lines.append(f"| {stage} | {s['accuracy']:.2f} | "
                     + "".join(f"{s[f'accuracy/{d}']:.2f} | " for d in domains)
                     + f"{s['pass@1']:.2f} | {s['pass@4']:.2f} | {s['maj@4']:.2f} | {s['sampled_format']:.2f} | "
                     f"{s['sampled_length']:.1f} |")
    histories = {}
    lines += ["", "Training rollouts, the first 10 steps -> the last 10:", "",
              "| stage | completions a step | seconds (per step) | reward | exact match | format | length | "
              "zero-signal groups | rollout tokens/s |", "|---|---:|---:|---|---|---|---|---|---:|"]
    for stage in held_out:
        metrics = run / stage / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
        if not rows or "reward" not in rows[0]:
            continue  # not an RL stage
        histories[stage] = {"history": rows}
        config = yaml.safe_load((run / stage / "config.yaml").read_text())

        def change(key):
            values = np.array([r[key] for r in rows])
            return f"{values[:10].mean():.2f} -> {values[-10:].mean():.2f}"

        t = timings[stage]
        lines.append(f"| {stage} | {config['batch_size'] * config['group_size']} | {t['seconds']:.0f} "
                     f"({t['seconds'] / t['steps']:.1f}) | {change('reward')} | "
                     f"{change('reward/exact_match')} | {change('reward/format')} | {change('length')} | "
                     f"{change('zero_signal_groups')} | {np.median([r['rollout_tokens_per_s'] for r in rows]):.0f} |")
    return "\n".join(lines), histories


def write_below(path: Path, marker: str, text: str) -> None:
    """Write `text` under `marker` in `path`, keeping what is above the marker (the hand-written part)."""
    kept = path.read_text(encoding="utf-8").split(marker)[0] if path.is_file() else ""
    path.write_text(kept + marker + "\n\n" + text + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("sft", "run", "overfit", "table", "passk", "test", "gemma"))
    parser.add_argument("variant", nargs="?", choices=tuple(VARIANTS))
    parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change one more config key (the value in YAML), e.g. --set learning_rate=3e-4")
    parser.add_argument("--name", default=None, help="the JSON's name (default: the variant's)")
    parser.add_argument("--split", choices=("test", "validation"), default="test",
                        help="run: where accuracy is measured (validation to choose settings; then `test NAME`)")
    parser.add_argument("--model", type=Path, default=SFT, help="run: the model to start from; passk: the model "
                        "to measure (default: the SFT model)")
    parser.add_argument("--temperature", type=float, default=1.0, help="passk: the samples' temperature")
    parser.add_argument("--dir", type=Path, default=RESULTS / "06_rl", help="where each variant's JSON goes")
    parser.add_argument("--run", type=Path, default=GEMMA_RUN, help="gemma: the pipeline's output_dir")
    args = parser.parse_args()
    if args.what == "sft":
        run_sft()
    elif args.what == "test":
        if args.name is None:
            parser.error("test: --name NAME of a run made with --split validation")
        chosen = json.loads((RESULTS / "06_rl_validation" / f"{args.name}.json").read_text())
        result = test_saved(chosen, ROOT / "runs" / "rl_results" / args.name)
        result["command"] += f", then python course/results/scripts/rl.py test --name {args.name}"
        args.dir.mkdir(parents=True, exist_ok=True)
        (args.dir / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({"before": result["accuracy"]["before"]["all"], "after": result["accuracy"]["after"]["all"]}))
    elif args.what == "passk":
        result = pass_at_k(args.model, temperature=args.temperature)
        path = RESULTS / f"06_rl_passk_{args.name or args.model.parent.name}_t{args.temperature:g}.json"
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"{'domain':12s} {'n':>4s} greedy  sample-mean  pass@8  signal-groups  format")
        for d, v in result["domains"].items():
            print(f"{d:12s} {v['n']:4d} {v['greedy']:6.2f} {v['sample_mean']:12.2f} {v['pass@8']:7.2f} "
                  f"{v['signal_groups']:14.2f} {v['sample_format']:7.2f}")
    elif args.what == "gemma":
        text, histories = gemma_tables(args.run)
        write_below(SHOWN / "06_rl_gemma.md", GEMMA_MARKER, text)  # above it: how it was run, what it shows
        plot(histories, SHOWN / "06_rl_gemma.png", ("reward/exact_match", "reward/format", "length"), smooth=5)
        print(text)
    elif args.what == "overfit":
        print("rollout exact match per step:", overfit(args.steps or 30))
    elif args.what == "run":
        if args.variant is None:
            parser.error("run: name a variant")
        changes = {k: _value(v) for k, v in (item.split("=", 1) for item in args.set)}
        name = args.name or args.variant
        save = ROOT / "runs" / "rl_results" / name if args.split == "validation" else None
        result = run_variant(args.variant, args.steps, changes, split=args.split, save=save,
                             start=args.model.resolve())
        if args.split == "validation":
            args.dir = RESULTS / "06_rl_validation"
            result["command"] += f" --split validation --name {name}"
        args.dir.mkdir(parents=True, exist_ok=True)
        (args.dir / f"{args.name or args.variant}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({k: result[k] for k in ("variant", "seconds")} | {
            "before": result["accuracy"]["before"]["all"], "after": result["accuracy"]["after"]["all"]}))
    else:
        found = {p.stem: json.loads(p.read_text()) for p in args.dir.glob("*.json")}
        variants = [k for k in VARIANTS if k in found]  # first, in VARIANTS' order; then the settings tried
        results = {k: found[k] for k in variants + sorted(set(found) - set(variants))}
        text = table(results)
        write_below(SHOWN / "06_rl.md", MARKER, text)  # above it: the status, runs without a JSON
        plot({k: found[k] for k in variants} or results, SHOWN / "06_rl.png", smooth=10)  # the variants side by side
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
