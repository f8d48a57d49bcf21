"""Supervised fine-tuning, end to end: one config in, a trained model, its history and before/after
scores out.

    config = SFTConfig.from_yaml("sft_tiny")
                                          # or SFTConfig(model="tiny", steps=200, ...)
    result = run_sft(config)
    result.before, result.after           # validation loss and task accuracy

`tunix-lite train --config FILE.yaml` (or `tunix-lite sft`) runs the same function. Full fine-tuning
by default; `lora_rank` adds LoRA adapters and trains only them, `quantize` ("int8" / "nf4") stores
the frozen base quantized (QLoRA). The shared options (model, optimizer, data, outputs) are
documented in tunix_lite.training.config; SFT adds the few fields below.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tunix_lite.data.sft import SFTBatches, SFTData, mix_domains, tokenize_sft
from tunix_lite.training.config import ConfigError, TrainConfig, option
from tunix_lite.training.evals import task_eval_fn, validation_loss_fn
from tunix_lite.training.harness import Run, RunResult
from tunix_lite.training.inputs import build_model, load_data, synthetic_tasks
from tunix_lite.training.losses import lm_loss


@dataclasses.dataclass
class SFTConfig(TrainConfig):
    algorithm: ClassVar[str] = "sft"
    train_on_prompt: bool = option(False, "train on every token, not only the assistant replies")
    packing: bool = option(False, "place several examples in one row (fewer padding tokens and "
                                  "steps)")
    domain_weights: dict[str, float] | None = option(None, "stratified mix of the train split by "
                                                           "its domain column")
    n_accuracy: int = option(64, "validation prompts answered greedily for exact-match accuracy "
                                 "(0: none)", ge=0, resume="free")
    max_new_tokens: int | None = option(None, "answer budget of the accuracy check (null: from the "
                                              "longest reference completion)", ge=1, resume="free")

    def check(self) -> None:
        if self.domain_weights is not None and (any(w < 0 for w in self.domain_weights.values())
                                                or sum(self.domain_weights.values()) <= 0):
            raise ConfigError("domain_weights: need non-negative weights with a positive sum, "
                              f"got {self.domain_weights}")


def tokenize_split(config, records, key: str, tokenizer) -> SFTData:
    """tokenize_sft with the config's options; an error names the config key the records came
    from."""
    try:
        return tokenize_sft(records, tokenizer, seq_len=config.seq_len, template=config.template,
                            train_on_prompt=config.train_on_prompt, truncation=config.truncation)
    except ValueError as e:
        raise ValueError(f"{key} ({getattr(config, key) or config.train_data}): {e}") from None


def run_sft(config: SFTConfig, *, verbose: bool = True) -> RunResult:
    run = Run(config, verbose=verbose)  # checks output_dir (and a resume) before any compute
    # bad data stops here, before the model is read
    train, validation = load_data(config, synthetic_tasks)
    if config.domain_weights:
        train = mix_domains(train, config.domain_weights, config.n_train, seed=config.seed)
    model, tokenizer = build_model(config)
    train_data = tokenize_split(config, train, "train_data", tokenizer)
    val_data = tokenize_split(config, validation, "validation_data", tokenizer)
    batches = SFTBatches(train_data, config.batch_size, seed=config.seed, packing=config.packing)
    stats = batches.stats()
    report = (f"train: {train_data.report}; {stats['rows']} rows/epoch, "
              f"{stats['fill']:.0%} of row tokens real, {stats['trained']:.0%} trained on")
    run.say(report)
    loss_eval = validation_loss_fn(val_data, config.batch_size)
    task_eval = task_eval_fn(config, model, tokenizer, validation,
                             max_new_tokens=config.max_new_tokens)

    def eval_fn(model):
        return loss_eval(model) | (task_eval(model) if task_eval else {})

    return run.train(model, tokenizer, lm_loss, batches.stream, eval_fn, report=report,
                     desc="lora" if config.lora_rank else "sft")
