"""What every algorithm's driver starts from: the model to train, its frozen reference, the data.

    model, tokenizer = build_model(config)                  # the model, adapters and precision
    train, validation = load_data(config, synthetic_tasks)  # or synthetic_pairs, or any source
    reference = reference_policy(model)                     # pi_ref: LoRA's base, else a clone

A synthetic source is a callable source(n, *, split, seed, domains) -> n records of that split:
what `train_data: synthetic` means for the algorithm (the course's tasks, preference pairs,
calculator problems). Files and reasoning_gym specs load the same way for every algorithm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from flax import nnx

from tunix_lite.data import reasoning_gym
from tunix_lite.training.config import ConfigError

SyntheticSource = Callable[..., Sequence[Mapping]]  # (n, *, split, seed, domains) -> n records


def build_model(config):
    """The model to train: loaded by name or path, with LoRA/QLoRA and the compute options applied.
    The model's context length is checked against seq_len before the weights are read."""
    from tunix_lite.loading import load, model_config
    from tunix_lite.lora import apply_lora, lora_layers, merge_lora
    from tunix_lite.models import set_training_options

    check_against_model(config, model_config(config.model))
    model, tokenizer = load(config.model)
    if lora_layers(model):  # a LoRA run's output_dir: its adapters are part of the starting model
        model = merge_lora(model)
    check_against_model(config, model.config)
    if config.lora_rank:
        apply_lora(model, rank=config.lora_rank, alpha=config.lora_alpha,
                   dropout=config.lora_dropout, quantize=config.quantize,
                   rngs=nnx.Rngs(config.seed))
    set_training_options(model, compute_dtype=config.compute_dtype, remat=config.remat,
                         logits_chunk=config.logits_chunk)
    return model, tokenizer


def check_against_model(config, model_config) -> None:
    """Config values that depend on the model (None: not known yet)."""
    if model_config is not None and config.seq_len > model_config.max_seq_len:
        raise ConfigError(f"seq_len: {config.seq_len} is longer than {config.model}'s context of "
                          f"{model_config.max_seq_len} tokens")


def trained_variables(config):
    """The variables the optimizer updates: the adapters for LoRA, every parameter otherwise."""
    return nnx.LoRAParam if config.lora_rank else nnx.Param


def reference_policy(model: nnx.Module) -> nnx.Module:
    """The frozen reference pi_ref, in eval mode: for a model with LoRA adapters the same model
    with them off (no copy, `tunix_lite.lora.without_adapters`); otherwise a clone taken now,
    before any update (it shares the arrays until the first update replaces the trained ones)."""
    from tunix_lite.lora import lora_layers, without_adapters

    reference = without_adapters(model) if lora_layers(model) else nnx.clone(model)
    reference.eval()
    return reference


# ----------------------------------------------------------------------------- data


def load_data(config, synthetic: SyntheticSource, *, reads_validation: bool = True):
    """(train records, validation records), for any config with DataOptions. train_data
    "synthetic" draws n_train and n_validation records from `synthetic`; a file, a datasets
    directory or a reasoning_gym spec is read the same way for every algorithm (a spec without
    validation_data: n_validation more of its items, none seen in training).

    reads_validation=False: the run never reads the validation records (RL with n_accuracy: 0),
    so a spec whose every question is a training question (one-digit products' train side) is
    not refused for having none left to validate on."""
    if config.train_data != "synthetic":
        return load_prompt_records(config.train_data, config.validation_data, config.n_validation,
                                   reads_validation=reads_validation)
    return tuple(synthetic(n, split=split, seed=config.seed, domains=config.domains)
                 for split, n in (("train", config.n_train), ("validation", config.n_validation)))


def synthetic_tasks(n: int, *, split: str, seed: int, domains: Sequence[str] | None = None):
    """`n` records of one split of the course's verifiable tasks (`synthetic.make_splits`), as a
    `datasets.Dataset`."""
    from tunix_lite.data.synthetic import SPLITS, make_splits

    sizes = [n if name == split else 0 for name in SPLITS]
    return make_splits(*sizes, domains=_synthetic_domains(domains), seed=seed)[split]


def synthetic_pairs(n: int, *, split: str, seed: int,
                    domains: Sequence[str] | None = None) -> list[dict]:
    """`n` preference pairs of one split (`synthetic.preference_pairs`)."""
    from tunix_lite.data.synthetic import preference_pairs

    return preference_pairs(n, seed, domains=_synthetic_domains(domains), split=split)


def _synthetic_domains(domains: Sequence[str] | None) -> tuple[str, ...]:
    """The synthetic domains asked for (None: all); an unknown one is a ConfigError."""
    from tunix_lite.data.synthetic import DOMAINS

    unknown = sorted(set(domains or ()) - set(DOMAINS))
    if unknown:
        raise ConfigError(f"domains: {unknown} are not synthetic domains; choose from "
                          f"{', '.join(DOMAINS)}")
    return tuple(domains or DOMAINS)


def load_prompt_records(train_data, validation_data, n_validation: int, *,
                        reads_validation: bool = True):
    """(train, validation) `datasets.Dataset`s from a file, a datasets directory or a reasoning_gym
    spec each; a None validation_data with a train spec: n_validation more of its items, none seen
    in training (refused when none is left, unless `reads_validation` is False)."""
    source = validation_data
    if source is None:
        if not reasoning_gym.is_spec(train_data):
            raise ConfigError("validation_data: with train_data from a file, set "
                              "validation_data too")
        spec = reasoning_gym.parse_spec(train_data)
        source = dataclasses.replace(spec, size=n_validation, seed=spec.seed + 1)
    train = _load_records(train_data, "train_data")
    validation = _load_records(source, "validation_data")
    if isinstance(source, reasoning_gym.TaskSpec) or reasoning_gym.is_spec(source):
        # a task with few distinct questions repeats some under any seed: keep validation unseen
        seen = set(train["prompt"])
        validation = validation.select([i for i, prompt in enumerate(validation["prompt"])
                                        if prompt not in seen])
        if not len(validation) and reads_validation:
            raise ConfigError("validation_data: every generated prompt is also a training "
                              "prompt; choose tasks or configs with more distinct questions, or "
                              "set validation_data (an RL run with n_accuracy: 0 reads none)")
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
