"""Supervised fine-tuning, end to end: one config in, a trained model, its history and before/after scores out.

    config = SFTConfig.from_yaml("configs/sft_tiny.yaml")     # or SFTConfig(model="tiny", steps=200, ...)
    result = run_sft(config)
    result.before, result.after                               # validation loss and task accuracy

`tunix-lite sft --config FILE.yaml` runs the same function. Full fine-tuning by default; `lora_rank` adds
LoRA adapters and trains only them, `quantize` ("int8" / "nf4") stores the frozen base quantized (QLoRA).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import yaml
from flax import nnx

from tunix_lite.data.sft import SFTBatches, SFTData, load_records, mix_domains, tokenize_sft
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer, adamw_cosine, evaluate


@dataclasses.dataclass
class SFTConfig:
    # model: tiny | gemma3-270m | a checkpoint directory | a hub id
    model: str = "tiny"
    # data: "synthetic" (the course's generated tasks) or .jsonl paths with messages or prompt/completion
    train_data: str = "synthetic"
    validation_data: str | None = None  # .jsonl; with synthetic data, the synthetic validation split
    n_train: int = 2000
    n_validation: int = 128
    domains: list[str] | None = None  # synthetic domains (default: all)
    domain_weights: dict[str, float] | None = None  # stratified mix of the train split by its "domain" column
    template: str = "gemma"
    train_on_prompt: bool = False
    truncation: str = "error"  # error | drop | truncate
    seq_len: int = 128
    packing: bool = False
    # optimisation
    steps: int = 200
    batch_size: int = 16
    micro_batches: int = 1
    learning_rate: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    clip_norm: float | None = 1.0
    compute_dtype: str = "float32"  # bfloat16: mixed precision, float32 parameters
    remat: bool = False
    # LoRA / QLoRA (lora_rank None: full fine-tuning)
    lora_rank: int | None = None
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    quantize: str | None = None  # int8 | nf4, with lora_rank
    # evaluation: validation loss, and exact-match accuracy of greedy answers on n_accuracy validation prompts
    eval_every: int = 50
    n_accuracy: int = 64
    max_new_tokens: int = 48
    # outputs: checkpoints, metrics.jsonl, adapters or the merged model; none when output_dir is None
    output_dir: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    tensorboard: bool = False
    seed: int = 0

    @classmethod
    def from_dict(cls, values: dict) -> SFTConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown SFT config keys {unknown}; valid keys: {sorted(names)}")
        config = cls(**values)
        config.validate()
        return config

    @classmethod
    def from_yaml(cls, path: str | Path) -> SFTConfig:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no config file at {path}")
        values = yaml.safe_load(path.read_text()) or {}
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of config keys, got {type(values).__name__}")
        try:
            return cls.from_dict(values)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: {e}") from None

    def validate(self) -> None:
        if self.quantize not in (None, "int8", "nf4"):
            raise ValueError(f"quantize must be int8 or nf4, got {self.quantize!r}")
        if self.quantize and not self.lora_rank:
            raise ValueError("quantize (QLoRA) needs lora_rank: a quantized base cannot be trained directly")
        if self.batch_size % self.micro_batches:
            raise ValueError(f"batch_size={self.batch_size} is not a multiple of micro_batches={self.micro_batches}")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be less than steps={self.steps}")
        for key in ("steps", "batch_size", "seq_len", "n_train"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")


@dataclasses.dataclass
class SFTResult:
    model: nnx.Module
    tokenizer: object
    history: list[dict]
    before: dict  # validation metrics before training
    after: dict  # and after
    data_report: str
    seconds: float


def load_data(config: SFTConfig):
    """(train records, validation records) as `datasets.Dataset`s."""
    if config.train_data == "synthetic":
        from tunix_lite.data.synthetic import DOMAINS, make_splits

        splits = make_splits(config.n_train, config.n_validation, 0, domains=config.domains or DOMAINS,
                             seed=config.seed)
        train, validation = splits["train"], splits["validation"]
    else:
        if config.validation_data is None:
            raise ValueError("with train_data from a file, set validation_data too")
        train, validation = load_records(config.train_data), load_records(config.validation_data)
    if config.domain_weights:
        train = mix_domains(train, config.domain_weights, config.n_train, seed=config.seed)
    return train, validation


def build_model(config: SFTConfig):
    """The model to train, with LoRA/QLoRA and compute options applied."""
    from tunix_lite.loading import load
    from tunix_lite.lora import apply_lora
    from tunix_lite.models import set_training_options

    model, tokenizer = load(config.model)
    if config.lora_rank:
        apply_lora(model, rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout,
                   quantize=config.quantize, rngs=nnx.Rngs(config.seed))
    set_training_options(model, compute_dtype=config.compute_dtype, remat=config.remat)
    return model, tokenizer


def validation_loss_fn(data: SFTData, batch_size: int):
    batches = SFTBatches(data, batch_size, shuffle=False).epoch(0)
    return lambda model: {k: v for k, v in evaluate(model, lm_loss, batches).items() if k != "tokens"}


def run_sft(config: SFTConfig, *, verbose: bool = True) -> SFTResult:
    from tunix_lite.evaluation import TaskEval

    say = print if verbose else (lambda *a, **k: None)
    start = time.perf_counter()
    model, tokenizer = build_model(config)
    train, validation = load_data(config)
    tokenize = dict(tokenizer=tokenizer, seq_len=config.seq_len, template=config.template,
                    train_on_prompt=config.train_on_prompt, truncation=config.truncation)
    train_data, val_data = tokenize_sft(train, **tokenize), tokenize_sft(validation, **tokenize)
    batches = SFTBatches(train_data, config.batch_size, seed=config.seed, packing=config.packing)
    stats = batches.stats()
    report = (f"train: {train_data.report}; {stats['rows']} rows/epoch, {stats['fill']:.0%} of row tokens real, "
              f"{stats['trained']:.0%} trained on")
    say(report)

    loss_eval = validation_loss_fn(val_data, config.batch_size)
    task_eval = None
    if config.n_accuracy and "answer" in validation.column_names:
        task_eval = TaskEval(model, tokenizer, validation.select(range(min(config.n_accuracy, len(validation)))),
                             template=config.template, max_new_tokens=config.max_new_tokens)

    def eval_fn(model):
        model.eval()  # LoRA dropout off while measuring
        out = loss_eval(model) | (task_eval(model) if task_eval else {})
        model.train()
        return out

    before = eval_fn(model)
    say("before: " + _fmt(before))
    tx = adamw_cosine(config.learning_rate, config.steps, warmup_steps=config.warmup_steps,
                      weight_decay=config.weight_decay, clip_norm=config.clip_norm)
    trainer = Trainer(model, tx, lm_loss, wrt=nnx.LoRAParam if config.lora_rank else nnx.Param,
                      micro_batches=config.micro_batches)
    checkpoints, loggers, first_step = None, [], 0
    if config.output_dir:
        from tunix_lite.training.metrics_log import JsonlLogger, TensorBoardLogger

        out = Path(config.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
        loggers.append(JsonlLogger(out / "metrics.jsonl"))
        if config.tensorboard:
            loggers.append(TensorBoardLogger(out / "tensorboard"))
        if config.checkpoint_every:
            from tunix_lite.training.checkpoint import Checkpoints

            state_filter = nnx.LoRAParam if config.lora_rank else ...
            checkpoints = Checkpoints(out / "checkpoints", every=config.checkpoint_every,
                                      keep=config.keep_checkpoints, state_filter=state_filter)
            if checkpoints.steps:  # resume where an interrupted run stopped
                first_step = trainer.restore(checkpoints)
                say(f"resumed from step {first_step}")
    trainer.fit(batches.stream(start=first_step), config.steps - first_step, eval_fn=eval_fn,
                eval_every=config.eval_every, checkpoints=checkpoints, loggers=loggers,
                desc="lora" if config.lora_rank else "sft")
    model.eval()
    after = {k.removeprefix("eval_"): v for k, v in trainer.history[-1].items() if k.startswith("eval_")}
    say("after:  " + _fmt(after))
    if config.output_dir:
        _save_outputs(model, tokenizer, config, before, after)
    return SFTResult(model, tokenizer, trainer.history, before, after, report, time.perf_counter() - start)


def _save_outputs(model, tokenizer, config: SFTConfig, before: dict, after: dict) -> None:
    out = Path(config.output_dir)
    if config.lora_rank:
        from tunix_lite.lora import save_adapters

        save_adapters(model, out / "adapters")
    else:
        from tunix_lite.weights.hf import save_hf_model

        save_hf_model(model, out / "model")
        if hasattr(tokenizer, "save"):
            tokenizer.save(out / "model" / "tokenizer.model")
    (out / "scores.json").write_text(json.dumps({"before": before, "after": after}, indent=1))


def _fmt(metrics: dict) -> str:
    keys = [k for k in ("loss", "accuracy", "format") if k in metrics]
    return "  ".join(f"{k} {metrics[k]:.3f}" for k in keys)
