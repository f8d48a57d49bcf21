"""Supervised fine-tuning, end to end: one config in, a trained model, its history and before/after scores out.

    config = SFTConfig.from_yaml("configs/sft_tiny.yaml")     # or SFTConfig(model="tiny", steps=200, ...)
    result = run_sft(config)
    result.before, result.after                               # validation loss and task accuracy

`tunix-lite train --config FILE.yaml` (or `tunix-lite sft`) runs the same function. Full fine-tuning by default;
`lora_rank` adds LoRA adapters and trains only them, `quantize` ("int8" / "nf4") stores the frozen base
quantized (QLoRA). The shared options (model, optimizer, data, outputs) are documented in
tunix_lite.training.config; SFT adds the few fields below.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tunix_lite.data import reasoning_gym
from tunix_lite.data.sft import SFTBatches, SFTData, mix_domains, tokenize_sft
from tunix_lite.training.config import (ConfigBase, ConfigError, DataOptions, ModelOptions, OptimOptions,
                                        RunOptions, option)
from tunix_lite.training.harness import Run, RunResult, build_model
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import evaluate


@dataclasses.dataclass
class SFTConfig(ConfigBase, RunOptions, DataOptions, OptimOptions, ModelOptions):
    algorithm: ClassVar[str] = "sft"
    train_on_prompt: bool = option(False, "train on every token, not only the assistant replies")
    packing: bool = option(False, "place several examples in one row (fewer padding tokens and steps)")
    domain_weights: dict[str, float] | None = option(None, "stratified mix of the train split by its domain column")
    n_accuracy: int = option(64, "validation prompts answered greedily for exact-match accuracy (0: none)", ge=0,
                             resume="free")
    max_new_tokens: int | None = option(None, "answer budget of the accuracy check (null: from the longest "
                                              "reference completion)", ge=1, resume="free")

    def validate(self) -> None:
        super().validate()
        if self.domain_weights is not None and (any(w < 0 for w in self.domain_weights.values())
                                                or sum(self.domain_weights.values()) <= 0):
            raise ConfigError(f"domain_weights: need non-negative weights with a positive sum, got {self.domain_weights}")


def load_data(config):
    """(train records, validation records) as `datasets.Dataset`s, for any config with DataOptions."""
    if config.train_data == "synthetic":
        from tunix_lite.data.synthetic import DOMAINS, make_splits

        unknown = sorted(set(config.domains or ()) - set(DOMAINS))
        if unknown:
            raise ConfigError(f"domains: {unknown} are not synthetic domains; choose from {', '.join(DOMAINS)}")
        splits = make_splits(config.n_train, config.n_validation, 0, domains=config.domains or DOMAINS,
                             seed=config.seed)
        train, validation = splits["train"], splits["validation"]
    else:
        source = config.validation_data
        if source is None:
            if not reasoning_gym.is_spec(config.train_data):
                raise ConfigError("validation_data: with train_data from a file, set "
                                  "validation_data too")
            spec = reasoning_gym.parse_spec(config.train_data)
            source = dataclasses.replace(spec, size=config.n_validation, seed=spec.seed + 1)
        train = _load_records(config.train_data, "train_data")
        validation = _load_records(source, "validation_data")
        if isinstance(source, reasoning_gym.TaskSpec) or reasoning_gym.is_spec(source):
            # a task with few distinct questions repeats some under any seed: keep validation unseen
            seen = set(train["prompt"])
            validation = validation.select([i for i, prompt in enumerate(validation["prompt"])
                                            if prompt not in seen])
            if not len(validation):
                raise ConfigError("validation_data: every generated prompt is also a training "
                                  "prompt; choose tasks or configs with more distinct questions")
    if getattr(config, "domain_weights", None):
        train = mix_domains(train, config.domain_weights, config.n_train, seed=config.seed)
    return train, validation


def _load_records(source, key: str):
    """A file's records, or a reasoning_gym spec's generated ones, as a `datasets.Dataset`."""
    import datasets

    from tunix_lite.data.records import load_records

    if isinstance(source, reasoning_gym.TaskSpec) or reasoning_gym.is_spec(source):
        try:
            return datasets.Dataset.from_list(reasoning_gym.make_records(source))
        except (ValueError, ImportError) as e:
            raise ConfigError(f"{key}: {e}") from None
    return load_records(source, key=key)


def validation_loss_fn(data: SFTData, batch_size: int):
    batches = SFTBatches(data, batch_size, shuffle=False).epoch(0)
    return lambda model: {k: v for k, v in evaluate(model, lm_loss, batches).items() if k != "count"}


def task_eval_fn(config, model, tokenizer, validation):
    """Exact-match accuracy of greedy answers on the first n_accuracy validation records (None if the data has
    no answers or n_accuracy is 0)."""
    from tunix_lite.evaluation import TaskEval

    if not config.n_accuracy or "answer" not in validation.column_names:
        return None
    records = validation.select(range(min(config.n_accuracy, len(validation))))
    return TaskEval(model, tokenizer, records, template=config.template, max_new_tokens=config.max_new_tokens)


def tokenize_split(config, records, key: str, tokenizer) -> SFTData:
    """tokenize_sft with the config's options; an error names the config key the records came from."""
    try:
        return tokenize_sft(records, tokenizer, seq_len=config.seq_len, template=config.template,
                            train_on_prompt=config.train_on_prompt, truncation=config.truncation)
    except ValueError as e:
        raise ValueError(f"{key} ({getattr(config, key) or config.train_data}): {e}") from None


def run_sft(config: SFTConfig, *, verbose: bool = True) -> RunResult:
    run = Run(config, verbose=verbose)  # checks output_dir (and a resume) before any compute
    train, validation = load_data(config)  # bad data stops here, before the model is read
    model, tokenizer = build_model(config)
    train_data = tokenize_split(config, train, "train_data", tokenizer)
    val_data = tokenize_split(config, validation, "validation_data", tokenizer)
    batches = SFTBatches(train_data, config.batch_size, seed=config.seed, packing=config.packing)
    stats = batches.stats()
    report = (f"train: {train_data.report}; {stats['rows']} rows/epoch, {stats['fill']:.0%} of row tokens real, "
              f"{stats['trained']:.0%} trained on")
    run.say(report)
    loss_eval = validation_loss_fn(val_data, config.batch_size)
    task_eval = task_eval_fn(config, model, tokenizer, validation)

    def eval_fn(model):
        return loss_eval(model) | (task_eval(model) if task_eval else {})

    return run.train(model, tokenizer, lm_loss, batches.stream, eval_fn, report=report,
                     desc="lora" if config.lora_rank else "sft")
