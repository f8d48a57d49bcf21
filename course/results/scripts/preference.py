"""Held-out results of the preference recipes, as a markdown table (the numbers
notebooks/05_preference_tuning shows). From the repository root:

    python course/results/scripts/preference.py          # SFT -> DPO (tunix_lite/configs/dpo_tiny.yaml) beside
                                                         # ORPO (tunix_lite/configs/orpo_tiny.yaml)
    python course/results/scripts/preference.py --gemma  # LoRA-DPO of Gemma 3 270M
                                                         # (tunix_lite/configs/dpo_gemma3_270m.yaml): pair metrics
                                                         # before/after, step time and peak memory

Both runs are evaluated on the same held-out pairs (`preference_pairs(n, seed=2024, split="test")`:
prompts no training split contains) against the model each run started from: the SFT model for DPO,
the pretrained tiny model for ORPO. DPO needs the SFT stage first (`tunix-lite train --config
tunix_lite/configs/sft_tiny.yaml`). Rates carry a 95% Wilson interval. Choose a recipe on the validation split
(`--split validation --set KEY=VALUE ...`), report it on the test split once.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tunix_lite.evaluation import wilson

ROWS = [("rewards/accuracies", "pair accuracy: implicit reward (β log π/π_ref) ranks the pair right"),
        ("logps/accuracies", "pair accuracy: log π(chosen) > log π(rejected)"),
        ("rewards/margins", "mean implicit-reward margin"),
        ("logps/chosen", "log π(chosen), summed"),
        ("logps/rejected", "log π(rejected), summed"),
        ("accuracy", "exact match of greedy answers"),
        ("format", "well-formed answer tag"),
        ("flaw/wrong", "flaw: wrong tagged answer"),
        ("flaw/untagged", "flaw: no answer tag"),
        ("flaw/unclosed", "flaw: unclosed tag")]
PAIR_RATES = ("rewards/accuracies", "logps/accuracies")  # over the held-out pairs
ANSWER_RATES = ("accuracy", "format", "flaw/wrong", "flaw/untagged", "flaw/unclosed")  # over their distinct prompts


def table(columns: dict[str, dict], rows=ROWS, n: int | None = None) -> str:
    """Markdown table of the scores; with n (the pairs), rates get their 95% Wilson interval, those of the greedy
    answers over the column's distinct prompts (its "prompts")."""
    names = list(columns)
    lines = ["| held out | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]

    def cell(key, value, scores):
        count = n if key in PAIR_RATES else scores.get("prompts") if key in ANSWER_RATES else None
        if n is None or count is None:
            return f"{value:.3f}"
        low, high = wilson(value * count, count)
        return f"{value:.3f} [{low:.2f}, {high:.2f}]"

    domains = sorted({k for c in columns.values() for k in c if k.startswith("accuracy/")})
    for key, label in [*rows, *((d, f"exact match: {d.removeprefix('accuracy/')}") for d in domains)]:
        if all(key in c for c in columns.values()):
            lines.append(f"| {label} | " + " | ".join(cell(key, columns[name][key], columns[name]) for name in names)
                         + " |")
    return "\n".join(lines)


def verdict(before: dict, after: dict, n: int) -> str:
    """SFT -> DPO in one sentence: held-out implicit-reward pair accuracy with its interval, and whether
    greedy exact match moved."""
    low, _ = wilson(after["rewards/accuracies"] * n, n)
    changed = round(abs(after["accuracy"] - before["accuracy"]) * after["prompts"])
    return (f"What DPO did (SFT -> DPO): on held-out pairs the policy now prefers the chosen answer "
            f"{after['rewards/accuracies']:.3f} of the time (implicit reward; 95% interval from {low:.2f}); "
            f"greedy exact match went {before['accuracy']:.3f} -> {after['accuracy']:.3f}, {changed} of "
            f"{after['prompts']:.0f} distinct prompts' answers.")


def heldout_report(policy, reference, tokenizer, pairs: Sequence[dict], *, seq_len: int = 128,
                   beta: float = 0.1, batch_size: int = 16, generate: bool = True) -> dict[str, float]:
    """Held-out scores of `policy` on `pairs` (e.g. preference_pairs(n, split="test")), against
    `reference` (the model training started from): the sigmoid-DPO pair metrics
    (rewards/accuracies: the implicit reward ranks the pair right; logps/accuracies: the policy
    gives the chosen completion the higher log-prob) and, with `generate`, exact match, format and
    answer flaws of greedy answers to the pairs' distinct prompts (`prompt_records`; "prompts"
    counts them). Any preference loss's policy can be compared on this one scale."""
    import jax.numpy as jnp

    from tunix_lite.preference.data import tokenize_pairs
    from tunix_lite.preference.dpo import PreferenceLoss
    from tunix_lite.preference.evaluation import generation_eval, prompt_records
    from tunix_lite.preference.scoring import reference_log_probs

    data = tokenize_pairs(pairs, tokenizer, seq_len=seq_len, truncation="drop")
    # both models scored by the one compiled function, so that policy == reference ties exactly
    policy_sums, reference_sums = (jnp.asarray(reference_log_probs(m, data, batch_size))
                                   for m in (policy, reference))
    masks = data.sequences.mask
    counts = jnp.asarray([[m.sum() for m in masks[i:i + 2]] for i in range(0, 2 * len(data), 2)])
    loss, metrics = PreferenceLoss("sigmoid", beta=beta).loss_from_sums(policy_sums, counts,
                                                                        reference_sums)
    scores = {key: float(value) for key, value in (metrics | {"loss": loss}).items()}
    if generate:
        records = prompt_records(pairs)
        answers = generation_eval(policy, tokenizer, records, batch_size=min(len(records), 64))
        scores |= answers(policy)
        scores["prompts"] = float(len(records))
    return scores


def tiny(args, save=lambda text, scores: None) -> tuple[str, dict]:
    """The runs in args.runs, in order; `save(text, scores)` after each, so a long second run never loses the first."""
    import tunix_lite
    from tunix_lite.data.synthetic import preference_pairs
    from tunix_lite.preference.dpo import run_dpo
    from tunix_lite.training.algorithms import load_config

    if "dpo" in args.runs.split(",") and not Path(args.sft).is_dir():
        sys.exit(f"{args.sft} does not exist: run `tunix-lite train --config sft_tiny` first")
    test = preference_pairs(args.n_test, seed=2024, split=args.split)
    quiet = dict(output_dir=None, n_accuracy=0, eval_every=0) | ({"n_train": args.n_train} if args.n_train else {})
    settings = dict(overrides(args.set))
    runs = {"dpo": ("dpo_tiny", args.sft, "SFT model", "SFT → DPO"),
            "orpo": ("orpo_tiny", "tiny", "pretrained tiny", "tiny → ORPO")}
    scores, seconds, columns, steps, betas = {}, {}, {}, {}, {}
    for name in args.runs.split(","):
        config_file, start, before_name, after_name = runs[name]
        reference, tokenizer = tunix_lite.load(start)
        config = load_config(config_file, model=start, **quiet | settings)
        scores[f"{name}_before"] = heldout_report(reference, reference, tokenizer, test, beta=config.beta)
        print(json.dumps({f"{name}_before": scores[f"{name}_before"]}), flush=True)
        began = time.perf_counter()
        result = run_dpo(config)
        seconds[name], steps[name], betas[name] = time.perf_counter() - began, config.steps, config.beta
        scores[f"{name}_after"] = heldout_report(result.model, reference, tokenizer, test, beta=config.beta)
        columns |= {before_name: scores[f"{name}_before"], after_name: scores[f"{name}_after"]}
        print(json.dumps({name: {"before": scores[f"{name}_before"], "after": scores[f"{name}_after"]}}), flush=True)
        save(report(args, test, columns, scores, seconds, steps, betas, settings), scores)
    return report(args, test, columns, scores, seconds, steps, betas, settings), scores


def report(args, test, columns, scores, seconds, steps, betas, settings) -> str:
    text = table(columns, n=len(test))
    took = ", ".join(f"{seconds[n]:.0f} s ({n.upper()}, {steps[n]} steps)" for n in seconds)
    reproduce = (f"Reproduce: `nice -n 10 python course/results/scripts/preference.py "
                 f"{shlex.join(sys.argv[1:])}` (after `tunix-lite train --config sft_tiny`).")
    prompts = len({p["prompt"] for p in test})
    note = (f"{args.n_test} held-out {args.split} pairs (`preference_pairs({args.n_test}, seed=2024, split="
            f"\"{args.split}\")`), greedy answers to their {prompts} distinct prompts, rates with 95% Wilson intervals "
            f"(over the pairs or the prompts); implicit rewards against each run's "
            f"starting model, β = {', '.join(f'{b} ({n.upper()})' for n, b in betas.items())}"
            f"{f'; overrides {settings}' if settings else ''}"
            f"{f'; n_train = {args.n_train}' if args.n_train else ''}. Training took {took} on 2 shared CPU cores.")
    if "dpo_after" in scores:
        note += "\n\n" + verdict(scores["dpo_before"], scores["dpo_after"], len(test))
    return "\n\n".join([reproduce, text, note])


def gemma(args) -> tuple[str, dict]:
    """Pair metrics on held-out pairs before/after, and the training step's time and the process's peak memory."""
    import jax
    import numpy as np

    from tunix_lite.data.synthetic import preference_pairs
    from tunix_lite.preference.data import PreferenceBatches, tokenize_preferences
    from tunix_lite.preference.dpo import PreferenceLoss
    from tunix_lite.preference.scoring import reference_log_probs
    from tunix_lite.training.algorithms import load_config
    from tunix_lite.training.inputs import (build_model, load_data, reference_policy,
                                            synthetic_pairs, trained_variables)
    from tunix_lite.training.trainer import Trainer, adamw_cosine, evaluate

    config = load_config("dpo_gemma3_270m", output_dir=None, **({"steps": args.steps} if args.steps else {}))
    model, tokenizer = build_model(config)
    reference = reference_policy(model)  # the base view: adapters off, no copy
    train, _ = load_data(config, synthetic_pairs)
    train_data = tokenize_preferences(train, tokenizer, config, "train pairs")
    test_pairs = preference_pairs(args.n_test, seed=2024, split="test")
    test_data = tokenize_preferences(test_pairs, tokenizer, config, "test pairs")
    loss_fn = PreferenceLoss.from_config(config, train_data, test_data)
    scores = loss_fn.scoring_settings  # the reference scored as the policy is
    began = time.perf_counter()
    train_extras = {"ref_logps": reference_log_probs(reference, train_data, config.batch_size, **scores)}
    test_batches = PreferenceBatches(test_data, config.batch_size, shuffle=False, extras={
        "ref_logps": reference_log_probs(reference, test_data, config.batch_size, **scores)}).epoch(0)
    reference_seconds = time.perf_counter() - began
    before = evaluate(model, loss_fn, test_batches)
    trainer = Trainer(model, adamw_cosine(config.learning_rate, config.steps, warmup_steps=config.warmup_steps),
                      loss_fn, wrt=trained_variables(config))
    times = []
    for step, batch in zip(range(config.steps), PreferenceBatches(train_data, config.batch_size, seed=config.seed,
                                                                  extras=train_extras).stream()):
        began = time.perf_counter()
        jax.block_until_ready(trainer.step(batch))
        times.append(time.perf_counter() - began)
        print(f"step {step + 1}: {times[-1]:.1f} s", flush=True)
    after = evaluate(model, loss_fn, test_batches)
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    history = trainer.history
    rows = [("rewards/accuracies", "pair accuracy: implicit reward ranks the pair right"),
            ("logps/accuracies", "pair accuracy: log π(chosen) > log π(rejected)"),
            ("rewards/margins", "mean implicit-reward margin"), ("loss", "DPO loss"),
            ("logps/chosen", "log π(chosen), summed"), ("logps/rejected", "log π(rejected), summed")]
    tokens = 2 * config.batch_size * config.seq_len
    note = (f"Gemma 3 270M, LoRA r={config.lora_rank}, {config.steps} steps of {config.batch_size} pairs x 2 x "
            f"{config.seq_len} tokens, {len(test_data)} held-out test pairs; step time median "
            f"{np.median(times[1:]):.1f} s after a first (compiling) step of {times[0]:.0f} s "
            f"({tokens / np.median(times[1:]):.0f} tokens/s); reference log-probs of {len(train_data)} + "
            f"{len(test_data)} pairs precomputed in {reference_seconds:.0f} s; peak resident memory {peak_gib:.1f} GiB "
            f"(2 shared CPU cores). Training loss {history[0]['loss']:.3f} -> {history[-1]['loss']:.3f}.")
    return table({"before": before, "after": after}, rows) + "\n\n" + note, {"before": before, "after": after,
                                                                              "step_s": times, "peak_gib": peak_gib}


def overrides(pairs: list[str]) -> list[tuple[str, object]]:
    """KEY=VALUE strings -> (key, YAML-parsed value)."""
    import yaml

    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"--set {pair}: expected KEY=VALUE, e.g. --set beta=0.2")
        out.append((key, yaml.safe_load(value)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemma", action="store_true", help="the Gemma 3 270M LoRA-DPO run instead of the tiny ones")
    parser.add_argument("--sft", default="runs/sft_tiny/model", help="the SFT stage's model (tunix_lite/configs/sft_tiny.yaml)")
    parser.add_argument("--n-test", type=int, default=None, help="held-out pairs (default 140; Gemma 32)")
    parser.add_argument("--steps", type=int, default=None, help="Gemma: override the config's steps")
    parser.add_argument("--runs", default="dpo,orpo", help="tiny: which recipes, in order (dpo, orpo)")
    parser.add_argument("--n-train", type=int, default=None, help="tiny: override the configs' n_train (the "
                                                                   "reference log-probs cover every training pair)")
    parser.add_argument("--split", default="test", choices=("validation", "test"),
                        help="tiny: which held-out split scores the runs (choose recipes on validation)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="tiny: override a config key of every run (repeatable), e.g. --set steps=200")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (.md) and the scores (.json)")
    args = parser.parse_args()
    args.n_test = args.n_test or (32 if args.gemma else 140)

    def save(text, scores):
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
            args.out.with_suffix(".json").write_text(json.dumps(scores, indent=1) + "\n", encoding="utf-8")

    text, scores = gemma(args) if args.gemma else tiny(args, save)
    print(text)
    save(text, scores)
    return 0


if __name__ == "__main__":
    sys.exit(main())
