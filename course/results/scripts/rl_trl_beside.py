"""Run TRL's GRPOTrainer on exactly the setting of a tunix_lite GRPO run, side by side.

    python course/results/scripts/rl_trl_beside.py CONFIG.yaml [--stage NAME] --out DIR [--steps N] [--stop-at S]
                                     [--save-every K [--resume]]
    python course/results/scripts/rl_trl_beside.py CONFIG.yaml [--stage NAME] --out DIR --adapters-of CHECKPOINT

CONFIG.yaml is a training config (`algorithm: grpo`) or a pipeline file whose GRPO stage --stage
names. `--steps` overrides the config's steps as `tunix-lite train --steps` does (the learning-rate
schedule spans them): run tunix_lite with the same number to compare. `--stop-at S` ends TRL after
optimizer step S on the schedule of all the steps, as a tunix_lite run stopped by --max-minutes
and scored from its checkpoint S (`tunix-lite eval --model RUN/checkpoints/S`). `--save-every K`
keeps TRL's newest checkpoint (weights, optimizer, schedule, RNG) in DIR/trl_run, and `--resume`
carries on from it: a run of hours on CPU can be stopped and taken up again. `--adapters-of
DIR/trl_run/checkpoint-S` trains nothing: it writes that checkpoint's adapters into DIR/adapters-S,
to score TRL at step S. Writes into DIR:
    start_model/hf/    the start model as an HF checkpoint (a LoRA run as `model:` merged first)
    trl_history.jsonl  per optimizer step: reward, reward/<name>, kl, length, loss, lr, grad_norm
    model/             TRL's trained model (LoRA merged): `tunix-lite eval --model DIR/model`
    adapters/          a LoRA run's trained adapters alone (megabytes) in tunix_lite's layout, and
                       a config.yaml naming the start: `tunix-lite eval --model DIR/adapters`
    settings.json      every hyperparameter on both sides, and the prompt-id check

Matched: the start weights; the prompts, their chat-formatted token ids (checked for every prompt
fed, BOS included) and their order (tunix_lite's seeded `Batches` order with drop_last, prompts too
long dropped the same way; TRL reads them in that order with shuffling off); the reward functions
(tunix_lite's own, given each prompt's record) and weights; G completions per prompt and B prompts
per rollout, split into `mini_batches` optimizer steps and reused `inner_iterations` times; the
token budget and the stop tokens; the clipped surrogate (eps low/high, token or sequence ratio),
the k3 KL at beta, the loss aggregation and the advantage scaling; AdamW (b1 0.9, b2 0.95, eps
1e-8, weight decay), global-norm clipping, linear warmup then cosine decay to 10% (both sides take
their first step at learning rate 0); LoRA rank, alpha, dropout, the adapted layers and even the
adapters' initial A (tunix_lite's seeded init, copied; B starts at 0 on both sides).

Not matched: the sampling RNG, so the completions differ and only the statistics can agree (reward
curves, held-out accuracy); a completion's end where its row ends (tunix_lite also stops where
prompt + completion would pass seq_len + 1, TRL only at max_new_tokens); the advantage's epsilon
(1e-6 here, 1e-4 in TRL); `rollout_dtype: bfloat16` (TRL samples from the float32 model); HF's
Trainer exempts biases and norm weights from weight decay, optax does not (matters only with
weight_decay > 0 and full fine-tuning).

Refused with one line, as TRL 1.16 cannot reproduce them: RLOO advantages, the k1 KL estimator,
DAPO's dynamic sampling, a sampling temperature other than 1 (TRL scores the loss at the sampling
temperature, tunix_lite at 1), QLoRA, and GDPO (`reward_aggregation: normalize_each`) with an
advantage other than GRPO's.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

# tunix_lite `aggregation` -> TRL `loss_type` (the same table as tests/test_rl_trl_parity.py)
LOSS_TYPES = {
    "sequence-mean-token-mean": "grpo",
    "token-mean": "dapo",
    "sequence-mean-token-sum-norm": "dr_grpo",
}
SCALE_REWARDS = {"grpo": "group", "drgrpo": "none"}  # tunix_lite `advantage` -> TRL `scale_rewards`
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.95, 1e-8  # tunix_lite.training.trainer.adamw_cosine's AdamW
MIN_LR_RATE = 0.1  # adamw_cosine decays to 10% of the peak


class Refused(SystemExit):
    """A setting TRL cannot reproduce: one line, exit status 2."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message


# ----------------------------------------------------------------------------- the tunix_lite side


def load_grpo_config(path: str, stage: str | None, steps: int | None):
    """The checked GRPOConfig of a training file or a pipeline's stage, `steps` applied."""
    overrides = {"output_dir": None} | ({"steps": steps} if steps else {})
    if stage is None:
        from tunix_lite.training.algorithms import load_config

        return load_config(path, algorithm="grpo", **overrides)
    return stage_config(path, stage, overrides)


def stage_config(path: str, name: str, overrides: dict):
    """A pipeline stage's config as the pipeline would train it (its start model and data files)."""
    from tunix_lite import pipeline as pl
    from tunix_lite.rl.grpo import GRPOConfig

    pipe = pl.load_pipeline(path)
    stage = next((s for s in pipe.stages if s.name == name), None)
    if stage is None:
        raise Refused(f"--stage {name}: {path} has stages {', '.join(s.name for s in pipe.stages)}")
    if stage.algorithm != "grpo":
        raise Refused(f"--stage {name}: is {stage.algorithm}, not grpo")
    source = pl.source_marker(pipe, stage)
    if source is None:
        raise Refused(
            f"--stage {name}: starts from stage {stage.source!r}, which has not finished; "
            "run the pipeline up to it first"
        )
    pl.prepare_data(pipe)  # the synthetic data files the stage reads (a no-op for your own files)
    values = pl.stage_values(pipe.spec, stage, str(source["model_dir"]))
    return GRPOConfig.from_dict(values | overrides)


def refusals(config) -> list[str]:
    """What in the config TRL 1.16's GRPOTrainer cannot reproduce."""
    problems = []
    if config.advantage not in SCALE_REWARDS:
        problems.append(
            f"advantage: {config.advantage} (TRL's GRPOTrainer has group-std or no scaling only)"
        )
    if config.beta and config.kl_estimator != "k3":
        problems.append(f"kl_estimator: {config.kl_estimator} (TRL uses k3)")
    if config.dynamic_sampling:
        problems.append(
            "dynamic_sampling: true (TRL's GRPOTrainer does not resample zero-signal groups)"
        )
    if config.temperature != 1.0:
        problems.append(
            f"temperature: {config.temperature} (TRL scores the loss at the sampling temperature, "
            "tunix_lite at 1)"
        )
    if config.quantize:
        problems.append(
            f"quantize: {config.quantize} (tunix_lite's NF4/int8 base is not reproduced in torch)"
        )
    if config.reward_aggregation == "normalize_each" and config.advantage != "grpo":
        problems.append(
            "reward_aggregation: normalize_each with a non-GRPO advantage (TRL's "
            "normalize_then_sum always divides by the group std)"
        )
    return problems


def start_model(config):
    """(merged model, tokenizer) tunix_lite's GRPO starts from (a LoRA run's adapters folded in)."""
    from tunix_lite.loading import load
    from tunix_lite.lora import lora_layers, merge_lora

    model, tokenizer = load(config.model)
    return (merge_lora(model) if lora_layers(model) else model), tokenizer


def prompt_order(config, n_prompts: int) -> list[int]:
    """The prompt indices RolloutStream.batches samples, rollout after rollout, for config.steps."""
    from tunix_lite.data.batches import Batches

    rollouts = -(-config.steps // config.steps_per_rollout)
    order = Batches(
        n_prompts,
        lambda o: {"index": np.asarray(o)},
        config.batch_size,
        seed=config.seed,
        drop_last=True,
    )
    indices = []
    for _, batch in zip(range(rollouts), order.stream()):
        indices.extend(int(i) for i in batch["index"])
    return indices


def initial_adapters(config, model) -> dict[str, np.ndarray]:
    """{HF module name: A [in, r]} as tunix_lite's build_model seeds them (nnx.Rngs(seed))."""

    from tunix_lite.lora import lora_layers

    return {
        hf_module_name(path): np.asarray(layer.lora_a[...])
        for path, layer in lora_layers(lora_copy(config, model))
    }


def lora_copy(config, model):
    """A copy of the start model with LoRA layers as tunix_lite's build_model seeds them."""
    from flax import nnx

    from tunix_lite.lora import apply_lora

    copy = nnx.clone(model)
    apply_lora(
        copy,
        rank=config.lora_rank,
        alpha=config.lora_alpha,
        dropout=config.lora_dropout,
        rngs=nnx.Rngs(config.seed),
    )
    return copy


def hf_module_name(path: tuple) -> str:
    """tunix_lite's ("layers", 0, "attn", "q_proj") -> model.layers.0.self_attn.q_proj."""
    dotted = ".".join(map(str, path))
    return "model." + re.sub(r"\.attn\.", ".self_attn.", dotted)


# ----------------------------------------------------------------------------- the TRL side


def chat_texts(hf_tokenizer, records) -> list[str]:
    """Each record's prompt as the chat-formatted text TRL tokenizes as a plain string. The exported
    template writes the BOS token itself; the tokenizer adds one too, so the template's goes."""
    adds_bos = hf_tokenizer("x")["input_ids"][0] == hf_tokenizer.bos_token_id
    texts = []
    for record in records:
        text = hf_tokenizer.apply_chat_template(
            [{"role": "user", "content": record["prompt"]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        if adds_bos and text.startswith(hf_tokenizer.bos_token):
            text = text[len(hf_tokenizer.bos_token) :]
        texts.append(text)
    return texts


def check_prompt_ids(
    hf_tokenizer, texts: list[str], expected: list[list[int]], first_batch: int
) -> dict:
    """TRL's ids for every prompt fed (`processing_class(text=...)`, as _tokenize_prompts calls it)
    against tunix_lite's; a mismatch stops the run (the two would not train on the same inputs)."""
    got = hf_tokenizer(text=texts)["input_ids"]
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if list(g) != list(e)]
    if bad:
        i = bad[0]
        raise SystemExit(
            f"prompt ids differ for {len(bad)} of {len(texts)} prompts; first, prompt {i}:\n"
            f"  TRL        {list(got[i])}\n  tunix_lite {list(expected[i])}"
        )
    check = {
        "passed": True,
        "prompts_checked": len(texts),
        "first_batch": first_batch,
        "first_batch_ids_equal": True,
        "bos_id": hf_tokenizer.bos_token_id,
        "first_prompt_ids": list(expected[0]),
    }
    print(
        f"prompt ids: identical for all {len(texts)} prompts fed (first batch of {first_batch} "
        f"included; each starts with one BOS {hf_tokenizer.bos_token_id})"
    )
    return check


def trl_reward_functions(rewards, records: list[dict]) -> list:
    """tunix_lite's reward functions in TRL's calling convention. TRL passes the dataset's columns;
    ours is `record_index`, through which each function sees the record's own columns (answer,
    entry, ...) and its raw user prompt, exactly as tunix_lite's sample_groups gives them."""
    from tunix_lite.rl.rewards import Rewards

    def wrap(name, fn):
        single = Rewards({name: fn})  # its column filtering: a function gets the columns it names

        def reward(prompts, completions, record_index, completion_ids=None, **_trl_extras):
            rows = [records[i] for i in record_index]
            columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
            _, parts = single(
                [r["prompt"] for r in rows], completions, completion_ids=completion_ids, **columns
            )
            return [float(v) for v in parts[name]]

        reward.__name__ = name  # TRL logs rewards/<__name__>/mean
        return reward

    return [wrap(name, fn) for name, fn in rewards.functions.items()]


def trl_settings(config, out: Path, save_every: int = 0) -> dict:
    """GRPOConfig keyword arguments reproducing the tunix_lite config (and TRL's checkpointing)."""
    rows = config.batch_size * config.group_size
    return {
        "output_dir": str(out / "trl_run"),
        "max_steps": config.steps,
        "seed": config.seed,
        "data_seed": config.seed,
        "per_device_train_batch_size": rows // config.mini_batches,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": config.mini_batches,
        "num_iterations": config.inner_iterations,
        "num_generations": config.group_size,
        "max_completion_length": config.max_new_tokens,
        "temperature": config.temperature,
        "top_k": config.top_k or 0,
        "top_p": config.top_p or 1.0,
        "beta": config.beta,
        "epsilon": config.epsilon_low,
        "epsilon_high": config.epsilon_high,
        "importance_sampling_level": config.ratio_level,
        "loss_type": LOSS_TYPES[config.aggregation],
        "scale_rewards": SCALE_REWARDS[config.advantage],
        "multi_objective_aggregation": {
            "sum": "sum_then_normalize",
            "normalize_each": "normalize_then_sum",
        }[config.reward_aggregation],
        "reward_weights": list(config.reward_functions().weights.values()),
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": MIN_LR_RATE},
        # optax's warmup reaches the peak after max(warmup_steps, 1) steps, from 0 at the first step
        "warmup_steps": max(config.warmup_steps, 1),
        "adam_beta1": ADAM_B1,
        "adam_beta2": ADAM_B2,
        "adam_epsilon": ADAM_EPS,
        "optim": "adamw_torch",
        "weight_decay": config.weight_decay,
        "max_grad_norm": config.clip_norm or 0.0,
        "shuffle_dataset": False,
        "mask_truncated_completions": False,
        "disable_dropout": not config.lora_dropout,  # tunix_lite's models have no other dropout
        # TRL recomputes activations by default; tunix_lite only with remat (the same numbers)
        "gradient_checkpointing": config.remat,
        "logging_steps": 1,
        "save_strategy": "steps" if save_every else "no",
        "save_steps": save_every or 500,
        "save_total_limit": 1,
        "report_to": [],
        "bf16": False,
        "fp16": False,
        "dataloader_num_workers": 0,
        "log_completions": False,
    }


def settings_table(config, trl: dict) -> list[tuple[str, str, str]]:
    """(what, tunix_lite, TRL) for every hyperparameter both runs depend on."""
    c = config
    trl_prompts = trl["per_device_train_batch_size"] * trl["steps_per_generation"] // c.group_size
    lora = (
        f"r={c.lora_rank} alpha={c.lora_alpha:g} dropout={c.lora_dropout:g}"
        if c.lora_rank
        else "off"
    )
    return [
        ("model", str(c.model), "start_model/hf (exported, merged)"),
        ("steps", str(c.steps), f"max_steps={trl['max_steps']}"),
        (
            "prompts per rollout",
            str(c.batch_size),
            f"generation batch / num_generations = {trl_prompts}",
        ),
        (
            "completions per prompt",
            f"group_size={c.group_size}",
            f"num_generations={trl['num_generations']}",
        ),
        (
            "optimizer steps per rollout",
            f"mini_batches={c.mini_batches}",
            f"steps_per_generation={trl['steps_per_generation']}",
        ),
        (
            "passes per rollout",
            f"inner_iterations={c.inner_iterations}",
            f"num_iterations={trl['num_iterations']}",
        ),
        (
            "completions per step",
            str(c.batch_size * c.group_size // c.mini_batches),
            f"per_device_train_batch_size={trl['per_device_train_batch_size']} x grad_accum 1",
        ),
        (
            "max completion tokens",
            f"max_new_tokens={c.max_new_tokens} (and row end seq_len={c.seq_len})",
            f"max_completion_length={trl['max_completion_length']}",
        ),
        (
            "longest prompt",
            f"prompt_budget={c.prompt_budget} truncation={c.truncation}",
            "(prompts given as is)",
        ),
        (
            "sampling",
            f"temperature={c.temperature} top_k={c.top_k} top_p={c.top_p}",
            f"temperature={trl['temperature']} top_k={trl['top_k']} top_p={trl['top_p']}",
        ),
        ("rollout dtype", c.rollout_dtype, "float32 (model dtype)"),
        (
            "rewards",
            " + ".join(f"{w:g} x {n}" for n, w in c.reward_functions().weights.items()),
            f"same functions, reward_weights={trl['reward_weights']}",
        ),
        (
            "reward aggregation",
            c.reward_aggregation,
            f"multi_objective_aggregation={trl['multi_objective_aggregation']}",
        ),
        ("advantage", c.advantage, f"scale_rewards={trl['scale_rewards']}"),
        ("loss aggregation", c.aggregation, f"loss_type={trl['loss_type']}"),
        ("ratio", c.ratio_level, f"importance_sampling_level={trl['importance_sampling_level']}"),
        (
            "clip",
            f"eps_low={c.epsilon_low} eps_high={c.epsilon_high}",
            f"epsilon={trl['epsilon']} epsilon_high={trl['epsilon_high']}",
        ),
        ("KL", f"beta={c.beta} {c.kl_estimator}", f"beta={trl['beta']} k3"),
        (
            "learning rate",
            f"{c.learning_rate:g}, warmup {c.warmup_steps}, cosine to 10%",
            (
                f"{trl['learning_rate']:g}, {trl['lr_scheduler_type']} min_lr_rate={MIN_LR_RATE}, "
                f"warmup_steps={trl['warmup_steps']}"
            ),
        ),
        (
            "AdamW",
            f"b1={ADAM_B1} b2={ADAM_B2} eps={ADAM_EPS:g} wd={c.weight_decay}",
            (
                f"adam_beta1={trl['adam_beta1']} adam_beta2={trl['adam_beta2']} "
                f"eps={trl['adam_epsilon']:g} weight_decay={trl['weight_decay']}"
            ),
        ),
        ("grad clip", str(c.clip_norm), f"max_grad_norm={trl['max_grad_norm']}"),
        (
            "recompute activations",
            f"remat={c.remat}",
            f"gradient_checkpointing={trl['gradient_checkpointing']}",
        ),
        (
            "LoRA",
            lora,
            (
                f"torch LoRA r={c.lora_rank} alpha={c.lora_alpha:g} on the same layers, A copied, "
                "B = 0"
                if c.lora_rank
                else "off (full fine-tuning)"
            ),
        ),
        (
            "data order",
            f"Batches(seed={c.seed}, drop_last)",
            "dataset in that order, shuffle_dataset=False",
        ),
        ("seed", str(c.seed), f"seed={trl['seed']} (sampling RNG differs)"),
    ]


def print_table(rows: list[tuple[str, str, str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in (0, 1)]
    print(f"{'setting':<{widths[0]}}  {'tunix_lite':<{widths[1]}}  TRL 1.16")
    for what, ours, theirs in rows:
        print(f"{what:<{widths[0]}}  {ours:<{widths[1]}}  {theirs}")


def lora_model(model, config, adapters: dict[str, np.ndarray]):
    """The HF model with tunix_lite's LoRA (same layers, same initial A, B = 0) in plain torch: peft
    is not a dependency, and tunix_lite's layout (A [in, r], B [r, out]) is kept.
    Only A and B train."""
    import torch

    class LoRALinear(torch.nn.Module):
        """base(x) + (alpha / r) * dropout(x) @ A @ B, as tunix_lite.lora.LoRALinear."""

        def __init__(self, base: torch.nn.Linear, a: np.ndarray):
            super().__init__()
            self.base, self.scale = base, config.lora_alpha / config.lora_rank
            self.lora_a = torch.nn.Parameter(torch.from_numpy(a.copy()))
            self.lora_b = torch.nn.Parameter(torch.zeros(config.lora_rank, base.out_features))
            self.dropout = torch.nn.Dropout(config.lora_dropout)

        def forward(self, x):
            return self.base(x) + self.scale * (self.dropout(x) @ self.lora_a) @ self.lora_b

        def merged(self) -> torch.nn.Linear:
            with torch.no_grad():  # nn.Linear's weight is [out, in]: W^T + scale * (A @ B)^T
                self.base.weight += self.scale * (self.lora_a @ self.lora_b).T
            return self.base

    model.requires_grad_(False)
    for name, a in adapters.items():
        parent, _, child = name.rpartition(".")
        holder = model.get_submodule(parent)
        setattr(holder, child, LoRALinear(getattr(holder, child), a))
    return model


def merge_lora_layers(model):
    """Fold every LoRA layer of `lora_model` into its base Linear, in place; returns the model."""
    for name, module in list(model.named_modules()):
        if hasattr(module, "merged"):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.merged())
    return model


def history_callback(path: Path):
    """A TrainerCallback writing one line per optimizer step, named as tunix_lite's metrics.jsonl
    names them. TRL logs a rollout's statistics only at the step that sampled it; tunix_lite repeats
    them on every step the rollout feeds, and so does this."""
    from transformers import TrainerCallback

    step_keys = {
        "loss": "loss",
        "kl": "kl",
        "learning_rate": "learning_rate",
        "grad_norm": "grad_norm",
        "entropy": "entropy",
    }
    rollout_keys = {
        "reward": "reward",
        "reward_std": "reward_std",
        "completions/mean_length": "length",
    }

    class History(TrainerCallback):
        def __init__(self):
            self.rollout = {}  # the latest rollout's statistics

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs or "train_runtime" in logs:  # not a step's log
                return
            if "reward" in logs:
                self.rollout = {new: logs[old] for old, new in rollout_keys.items() if old in logs}
                self.rollout |= {
                    f"reward/{m.group(1)}": v
                    for k, v in logs.items()
                    if (m := re.fullmatch(r"rewards/(.+)/mean", k))
                }
            entry = {"step": state.global_step} | self.rollout
            entry |= {new: logs[old] for old, new in step_keys.items() if old in logs}
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    return History()


def stop_callback(step: int):
    """A TrainerCallback ending training after optimizer step `step`; the schedule is untouched."""
    from transformers import TrainerCallback

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= step:
                control.should_training_stop = True

    return StopAt()


def newest_checkpoint(out: Path) -> tuple[Path, int] | None:
    """(folder, step) of the newest checkpoint TRL's Trainer left in out/trl_run, if any."""
    found = [
        (path, int(path.name.rpartition("-")[2]))
        for path in (out / "trl_run").glob("checkpoint-*")
        if path.name.rpartition("-")[2].isdigit()
    ]
    return max(found, key=lambda found: found[1]) if found else None


def trained_lora(model) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{HF module name: (A, B)} of the LoRA layers of `lora_model` as trained."""
    return {
        name: (module.lora_a.detach().numpy().copy(), module.lora_b.detach().numpy().copy())
        for name, module in model.named_modules()
        if hasattr(module, "merged")
    }


def checkpoint_lora(checkpoint: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{HF module name: (A, B)} of the LoRA layers in a TRL checkpoint folder's weights."""
    from safetensors import safe_open

    with safe_open(checkpoint / "model.safetensors", "np") as weights:
        names = [k.removesuffix(".lora_a") for k in weights.keys() if k.endswith(".lora_a")]
        return {
            n: (weights.get_tensor(n + ".lora_a"), weights.get_tensor(n + ".lora_b")) for n in names
        }


def save_trl_adapters(config, start, lora: dict, directory: Path) -> Path:
    """TRL's trained LoRA ({HF module name: (A, B)}) as a tunix_lite LoRA run folder: the start
    model with LoRA layers holding TRL's A and B, saved by tunix_lite's own save_adapters, and a
    config.yaml naming the start model, as a run's output_dir has them."""
    import yaml

    from tunix_lite.lora import lora_layers, save_adapters

    copy = lora_copy(config, start)
    for path, layer in lora_layers(copy):
        layer.lora_a.value, layer.lora_b.value = lora[hf_module_name(path)]
    directory.mkdir(parents=True, exist_ok=True)
    save_adapters(copy, directory / "adapters.safetensors")
    values = config.to_dict() | {"output_dir": str(directory)}
    (directory / "config.yaml").write_text(yaml.safe_dump(values, sort_keys=False), "utf-8")
    return directory


def export_trained(trainer, start_hf: Path, out: Path) -> Path:
    """TRL's model (LoRA merged) as an HF directory with the start model's tokenizer files."""
    model = merge_lora_layers(trainer.model)
    directory = out / "model"
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(directory, safe_serialization=True)
    for name in (
        "tokenizer.model",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        if (
            start_hf / name
        ).is_file():  # tunix_lite's own files: its loader reads these, stop ids included
            shutil.copy(start_hf / name, directory / name)
    return directory


# ----------------------------------------------------------------------------- the run


def run(
    config_path: str,
    stage: str | None,
    out: Path,
    steps: int | None,
    stop_at: int | None = None,
    save_every: int = 0,
    resume: bool = False,
) -> dict:
    config = load_grpo_config(config_path, stage, steps)
    if stop_at is not None and not 1 <= stop_at <= config.steps:
        raise Refused(f"--stop-at {stop_at}: must be a step from 1 to the run's {config.steps}")
    checkpoint = newest_checkpoint(out) if resume else None
    if resume and checkpoint is None:
        raise Refused(f"--resume: no checkpoint in {out / 'trl_run'}; run with --save-every first")
    problems = refusals(config)
    if problems:
        raise Refused(
            f"TRL cannot match {config_path}{f' --stage {stage}' if stage else ''}: "
            + "; ".join(problems)
        )

    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from tunix_lite.export import export_model
    from tunix_lite.rl.rollouts import Prompts
    from tunix_lite.training.inputs import load_data, synthetic_tasks

    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = start_model(config)
    start_hf = export_model(model, tokenizer, out / "start_model", orbax=False) / "hf"
    adapters = initial_adapters(config, model) if config.lora_rank else {}
    train, _ = load_data(config, synthetic_tasks)
    prompts = Prompts.from_config(config, train, tokenizer)
    order = prompt_order(config, len(prompts))
    print(f"{prompts.report()}; {len(order)} fed in tunix_lite's order")

    hf_tokenizer = AutoTokenizer.from_pretrained(start_hf)
    texts = chat_texts(hf_tokenizer, [prompts.records[i] for i in order])
    check = check_prompt_ids(
        hf_tokenizer, texts, [prompts.ids[i] for i in order], config.batch_size
    )

    trl_kwargs = trl_settings(config, out, save_every)
    table = settings_table(config, trl_kwargs)
    print_table(table)
    settings = {
        "config": config_path,
        "stage": stage,
        "stop_at": stop_at,
        "tunix_lite": config.to_dict(),
        "trl": trl_kwargs,
        "table": table,
        "prompt_ids_check": check,
        "trl_version": __import__("trl").__version__,
    }
    (out / "settings.json").write_text(
        json.dumps(settings, indent=1, default=str) + "\n", encoding="utf-8"
    )

    torch.manual_seed(config.seed)
    hf_model = AutoModelForCausalLM.from_pretrained(start_hf, dtype=torch.float32)
    if config.lora_rank:
        hf_model = lora_model(hf_model, config, adapters)
    history = out / "trl_history.jsonl"
    kept = []  # the history up to the checkpoint; the steps after it are taken again
    if checkpoint and history.is_file():
        lines = history.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if json.loads(line)["step"] <= checkpoint[1]]
    history.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    dataset = datasets.Dataset.from_dict({"prompt": texts, "record_index": order})
    trainer = GRPOTrainer(
        model=hf_model,
        reward_funcs=trl_reward_functions(config.reward_functions(), prompts.records),
        args=TRLConfig(**trl_kwargs),
        train_dataset=dataset,
        processing_class=hf_tokenizer,
        callbacks=[history_callback(history)] + ([stop_callback(stop_at)] if stop_at else []),
    )
    if checkpoint:
        print(f"resuming TRL from {checkpoint[0]} (step {checkpoint[1]})")
    trainer.train(resume_from_checkpoint=str(checkpoint[0]) if checkpoint else None)
    if config.lora_rank:  # before export_trained folds the adapters into the weights
        lora = trained_lora(trainer.model)
        print(f"TRL adapters: {save_trl_adapters(config, model, lora, out / 'adapters')}")
    print(
        f"TRL history ({history}):\n{history.read_text(encoding='utf-8')}"
        f"TRL model: {export_trained(trainer, start_hf, out)}"
    )
    return settings


def checkpoint_adapters(
    config_path: str, stage: str | None, steps: int | None, checkpoint: Path, out: Path
) -> Path:
    """DIR/adapters-S: the LoRA adapters of TRL's checkpoint S (DIR/trl_run/checkpoint-S) alone,
    as DIR/adapters has them, to score a step before the run's end."""
    config = load_grpo_config(config_path, stage, steps)
    if not config.lora_rank:
        raise Refused(
            f"--adapters-of: {config_path} trains no LoRA (lora_rank: 0); "
            f"score a full fine-tune from DIR/model"
        )
    if not (checkpoint / "model.safetensors").is_file():
        raise Refused(
            f"--adapters-of {checkpoint}: no model.safetensors there; "
            f"give a TRL checkpoint folder, DIR/trl_run/checkpoint-S"
        )
    model, _ = start_model(config)
    step = checkpoint.name.rpartition("-")[2]
    return save_trl_adapters(config, model, checkpoint_lora(checkpoint), out / f"adapters-{step}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a GRPO training config, or a pipeline file with --stage")
    parser.add_argument("--stage", help="the pipeline's GRPO stage to reproduce")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument(
        "--steps", type=int, help="override the config's steps (the schedule spans them)"
    )
    parser.add_argument(
        "--stop-at", type=int, help="end after this optimizer step, keeping the schedule of all"
    )
    parser.add_argument(
        "--save-every", type=int, default=0, help="keep TRL's newest checkpoint every K steps"
    )
    parser.add_argument(
        "--resume", action="store_true", help="carry on from the newest checkpoint in DIR/trl_run"
    )
    parser.add_argument(
        "--adapters-of",
        type=Path,
        metavar="CHECKPOINT",
        help="only write the LoRA adapters of a TRL checkpoint folder into DIR/adapters-S",
    )
    args = parser.parse_args(argv)
    from tunix_lite.training.config import ConfigError

    try:
        if args.adapters_of:
            found = checkpoint_adapters(
                args.config, args.stage, args.steps, args.adapters_of, args.out
            )
            print(f"TRL adapters: {found}  (tunix-lite eval --model {found})")
            return
        run(
            args.config,
            args.stage,
            args.out,
            args.steps,
            args.stop_at,
            args.save_every,
            args.resume,
        )
    except Refused as refused:
        print(refused.message, file=sys.stderr)
        raise
    except ConfigError as e:  # the config's own checks, as `tunix-lite train` reports them
        raise SystemExit(f"{args.config}: {e}") from None


if __name__ == "__main__":
    main()
