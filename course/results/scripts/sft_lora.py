"""The static results notebooks 03 and 04 show in every profile: full `cpu`-profile runs, measured once.

    nice -n 10 python course/results/scripts/sft_lora.py            # both (an hour on 2 busy cores)
    nice -n 10 python course/results/scripts/sft_lora.py --only 03  # SFT of the tiny model
    python course/results/scripts/sft_lora.py --plot-only           # redraw from the saved JSON

Writes course/results/{03_sft,04_lora}.{json,md,png}. Accuracy is exact match of greedy answers on the held-out
test split of the synthetic tasks (heldout.py: never trained on, repeated prompts counted once), with n and 95%
Wilson intervals per domain. Every sample names the model that wrote it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tunix_lite import configs
from heldout import MAX_NEW_TOKENS, ROOT, SHOWN, accuracy, interval, samples, test_records

COMMAND = "nice -n 10 python course/results/scripts/sft_lora.py --only {part}"


def curve(history: list[dict]) -> dict:
    return {"step": [h["step"] for h in history], "loss": [h["loss"] for h in history],
            "eval_step": [h["step"] for h in history if "eval_loss" in h],
            "eval_loss": [h["eval_loss"] for h in history if "eval_loss" in h]}


# ----------------------------------------------------------------------------- phase 3: full SFT of the tiny model


def run_03() -> dict:
    import tunix_lite
    from tunix_lite.training.sft import SFTConfig, run_sft

    records = test_records()
    config = SFTConfig.from_yaml(configs.path("sft_tiny"))
    config.steps, config.warmup_steps, config.eval_every = 300, 30, 25  # the notebook's cpu profile: 300 steps
    config.output_dir, config.n_accuracy = None, 0  # accuracy below, on the test split
    base, tokenizer = tunix_lite.load("tiny")
    before, before_texts = accuracy(base, tokenizer, records)
    result = run_sft(config)
    after, after_texts = accuracy(result.model, tokenizer, records)
    names = ("tiny (pretrained)", f"tiny + full SFT ({config.steps} steps)")
    return {"command": COMMAND.format(part="03"), "config": {k: getattr(config, k) for k in (
                "model", "n_train", "seq_len", "packing", "batch_size", "steps", "learning_rate")},
            "max_new_tokens": MAX_NEW_TOKENS, "seconds": round(result.seconds),
            "models": list(names), "accuracy": {names[0]: before, names[1]: after},
            "validation_loss": {names[0]: result.before["loss"], names[1]: result.after["loss"]},
            "curve": curve(result.history), "samples": samples(records, dict(zip(names, (before_texts, after_texts))))}


# ----------------------------------------------------------------------------- phase 4: LoRA, QLoRA, options, Gemma


def step_seconds(options: dict[str, dict], rounds: int = 5) -> dict[str, float]:
    """Median seconds per LoRA step of the tiny model (batch 16 x 128, rank 8) for each set of options, after
    the compile. The options take turns step by step, so a busy machine slows them alike."""
    import numpy as np
    from flax import nnx

    import tunix_lite
    from tunix_lite.data.sft import SFTBatches, tokenize_sft
    from tunix_lite.data.synthetic import make_splits
    from tunix_lite.lora import apply_lora
    from tunix_lite.models import set_training_options
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer, adamw_cosine

    trainers, streams = {}, {}
    for name, kw in options.items():
        model, tokenizer = tunix_lite.load("tiny")
        apply_lora(model, rank=8, alpha=16.0, rngs=nnx.Rngs(0))
        data = tokenize_sft(make_splits(400, 0, 0, seed=0)["train"], tokenizer, seq_len=128)
        streams[name] = SFTBatches(data, 16, seed=0, packing=True).stream()
        trainers[name] = Trainer(set_training_options(model, **kw), adamw_cosine(1e-2, 100), lm_loss,
                                 wrt=nnx.LoRAParam)
        trainers[name].step(next(streams[name]))  # compile
    seconds = {name: [] for name in options}
    for _ in range(rounds):
        for name, trainer in trainers.items():
            start = time.perf_counter()
            float(trainer.step(next(streams[name]))["loss"])  # the step runs asynchronously: wait for its result
            seconds[name].append(time.perf_counter() - start)
    return {name: float(np.median(s)) for name, s in seconds.items()}


def run_04() -> dict:
    import tunix_lite
    from flax import nnx

    from tunix_lite.lora import count_params
    from tunix_lite.training.sft import SFTConfig, run_sft

    records = test_records()
    base, tokenizer = tunix_lite.load("tiny")
    before, _ = accuracy(base, tokenizer, records)
    tiny = {"tiny (pretrained)": {"accuracy": before}}
    for name, kw in [("tiny + full SFT", dict(learning_rate=1e-3)),
                     ("tiny + LoRA r=8", dict(learning_rate=1e-2, lora_rank=8, lora_alpha=16)),
                     ("tiny + QLoRA nf4 r=8", dict(learning_rate=1e-2, lora_rank=8, lora_alpha=16, quantize="nf4"))]:
        config = SFTConfig.from_yaml(configs.path("sft_tiny"))
        config.steps, config.warmup_steps, config.eval_every = 150, 15, 25  # the notebook's cpu profile: 300 // 2
        config.output_dir, config.n_accuracy = None, 0
        for key, value in kw.items():
            setattr(config, key, value)
        result = run_sft(config)
        trained = count_params(result.model, nnx.LoRAParam if config.lora_rank else nnx.Param)
        tiny[f"{name} ({config.steps} steps)"] = {
            "accuracy": accuracy(result.model, tokenizer, records)[0], "validation_loss": result.after["loss"],
            "trained_params": trained, "seconds": round(result.seconds), "curve": curve(result.history)}

    options = {"float32": {}, "bfloat16": {"compute_dtype": "bfloat16"}, "remat": {"remat": True},
               "bfloat16 + remat": {"compute_dtype": "bfloat16", "remat": True}}
    timing = {name: round(value, 3) for name, value in step_seconds(options).items()}

    gemma_records = test_records(limit_per_domain=5)  # one batch: a 262k-token vocabulary decodes slowly on a CPU
    config = SFTConfig.from_yaml(configs.path("lora_gemma3_270m"))
    config.output_dir = None
    gemma_base, gemma_tokenizer = tunix_lite.load("gemma3-270m")
    gemma_before, before_texts = accuracy(gemma_base, gemma_tokenizer, gemma_records, batch_size=len(gemma_records))
    del gemma_base
    result = run_sft(config)
    gemma_after, after_texts = accuracy(result.model, gemma_tokenizer, gemma_records, batch_size=len(gemma_records))
    names = ("gemma3-270m (base)", f"gemma3-270m + LoRA r={config.lora_rank} ({config.steps} steps)")
    gemma = {"config": {k: getattr(config, k) for k in ("n_train", "seq_len", "batch_size", "steps", "learning_rate",
                                                        "lora_rank", "lora_alpha")},
             "seconds": round(result.seconds), "validation_loss": {names[0]: result.before["loss"],
                                                                   names[1]: result.after["loss"]},
             "accuracy": {names[0]: gemma_before, names[1]: gemma_after}, "curve": curve(result.history),
             "trained_params": count_params(result.model, nnx.LoRAParam), "params": count_params(result.model),
             "samples": samples(gemma_records, dict(zip(names, (before_texts, after_texts))))}
    return {"command": COMMAND.format(part="04"), "max_new_tokens": MAX_NEW_TOKENS, "tiny": tiny,
            "step_seconds": {"what": "tiny model, LoRA r=8, batch 16 x 128, median of 5 steps after the compile, "
                                     "the options taking turns, 2 shared CPU cores", **timing}, "gemma": gemma}


# ----------------------------------------------------------------------------- figures and tables


def _bars(ax, table: dict, names: list[str], title: str):
    import numpy as np

    domains = [d for d in table[names[0]] if d not in ("all", "format")]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        acc = [table[name][d]["accuracy"] for d in domains]
        err = [[a - table[name][d]["low"] for a, d in zip(acc, domains)],
               [table[name][d]["high"] - a for a, d in zip(acc, domains)]]
        ax.bar(np.arange(len(domains)) + i * width, acc, width, yerr=err, capsize=2,
               label=f"{name}: {table[name]['all']['accuracy']:.2f} overall")
    n = [table[names[0]][d]["n"] for d in domains]
    ax.set_xticks(np.arange(len(domains)) + width * (len(names) - 1) / 2, [f"{d}\nn={k}" for d, k in zip(domains, n)],
                  fontsize=8)
    ax.set(ylim=(0, 1), ylabel="exact-match accuracy", title=title)
    ax.legend(fontsize=7)


def _smooth(c: dict, k: int = 10):
    """(steps, the training loss averaged over the last k steps)."""
    import numpy as np

    k = min(k, len(c["loss"]))
    return c["step"][k - 1:], np.convolve(c["loss"], np.ones(k) / k, mode="valid")


def _pct(cell: dict) -> str:
    return f"{interval(cell)} (n={cell['n']})"


def figures_03(r: dict):
    import matplotlib.pyplot as plt

    names = r["models"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 3.6), gridspec_kw={"width_ratios": [1, 2]})
    c = r["curve"]
    left.plot(*_smooth(c), label="training (mean of 10)")
    left.plot(c["eval_step"], c["eval_loss"], "o-", label="validation")
    left.set(xlabel="step", ylabel="loss (nats per trained token)", title="full SFT of the tiny model")
    left.legend(fontsize=8)
    _bars(right, r["accuracy"], names, "held-out test accuracy per domain, 95% Wilson intervals")
    fig.suptitle(f"reproduce: {r['command']}", fontsize=8, y=0.02, ha="left", x=0.01, family="monospace")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(SHOWN / "03_sft.png", dpi=90)
    plt.close(fig)
    lines = [f"Reproduce: `{r['command']}` ({r['seconds']} s of training and evaluation on 2 shared CPU cores; "
             f"config `tunix_lite/configs/sft_tiny.yaml` with {r['config']['steps']} steps).", "",
             "| model | validation loss | test accuracy, all domains [95% CI] | format |", "|---|---|---|---|"]
    for name in names:
        lines.append(f"| {name} | {r['validation_loss'][name]:.3f} | {_pct(r['accuracy'][name]['all'])} | "
                     f"{r['accuracy'][name]['format']:.2f} |")
    lines += ["", "| domain | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for d in [d for d in r["accuracy"][names[0]] if d not in ("all", "format")]:
        lines.append(f"| {d} | " + " | ".join(_pct(r["accuracy"][n][d]) for n in names) + " |")
    lines += ["", "Greedy answers to the first test prompt of each domain (the model that wrote each is named):", ""]
    lines += _sample_lines(r["samples"])
    (SHOWN / "03_sft.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _sample_lines(items: list[dict]) -> list[str]:
    lines = []
    for s in items:
        lines.append(f"- **[{s['domain']}]** {s['prompt']} (expected: `{s['answer']}`)")
        for model, text in s["by_model"].items():
            lines.append(f"  - *{model}:* `{text.strip()!r}`")
    return lines


def figures_04(r: dict):
    import matplotlib.pyplot as plt

    tiny = r["tiny"]
    names = list(tiny)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 3.6), gridspec_kw={"width_ratios": [1, 2]})
    for name in names[1:]:
        left.plot(*_smooth(tiny[name]["curve"]), label=name)
    left.set(xlabel="step", ylabel="training loss (mean of 10)", title="same batches, same order")
    left.legend(fontsize=7)
    _bars(right, {n: tiny[n]["accuracy"] for n in names}, names, "held-out test accuracy, 95% Wilson intervals")
    fig.suptitle(f"reproduce: {r['command']}", fontsize=8, y=0.02, ha="left", x=0.01, family="monospace")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(SHOWN / "04_lora.png", dpi=90)
    plt.close(fig)
    g = r["gemma"]
    gnames = list(g["accuracy"])
    lines = [f"Reproduce: `{r['command']}` (2 shared CPU cores; the tiny runs use `tunix_lite/configs/sft_tiny.yaml` with 150 "
             "steps, the Gemma run `tunix_lite/configs/lora_gemma3_270m.yaml`).", "",
             "| tiny model | trained parameters | validation loss | test accuracy [95% CI] | seconds |",
             "|---|---|---|---|---|"]
    for name in names:
        row = tiny[name]
        loss = f"{row['validation_loss']:.3f}" if "validation_loss" in row else "-"
        trained = f"{row['trained_params']:,}" if "trained_params" in row else "-"
        lines.append(f"| {name} | {trained} | {loss} | {_pct(row['accuracy']['all'])} | "
                     f"{row.get('seconds', '-')} |")
    s = r["step_seconds"]
    lines += ["", f"Seconds per training step ({s['what']}):", "", "| options | s / step |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in s.items() if k != "what"]
    lines += ["", f"Gemma 3 270M, LoRA r={g['config']['lora_rank']} on {g['config']['n_train']} synthetic chats, "
              f"{g['config']['steps']} steps of {g['config']['batch_size']} x {g['config']['seq_len']} tokens "
              f"({g['trained_params']:,} adapter parameters trained, {g['params']:,} in all; {g['seconds']} s):", "",
              "| model | validation loss | test accuracy [95% CI] | format |", "|---|---|---|---|"]
    for name in gnames:
        lines.append(f"| {name} | {g['validation_loss'][name]:.3f} | {_pct(g['accuracy'][name]['all'])} | "
                     f"{g['accuracy'][name]['format']:.2f} |")
    lines += ["", "Greedy answers of Gemma 3 270M before and after (the model that wrote each is named):", ""]
    lines += _sample_lines(g["samples"])
    (SHOWN / "04_lora.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["03", "04"], help="one notebook's results")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the saved JSON")
    args = parser.parse_args(argv)
    for part, run, draw in [("03", run_03, figures_03), ("04", run_04, figures_04)]:
        if args.only and part != args.only:
            continue
        path = SHOWN / f"{part}_{'sft' if part == '03' else 'lora'}.json"
        if not args.plot_only:
            path.write_text(json.dumps(run(), indent=1) + "\n", encoding="utf-8")
        draw(json.loads(path.read_text(encoding="utf-8")))
        print(f"wrote {path.with_suffix('.png')} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
