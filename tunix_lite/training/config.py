"""Run configs: one typed schema, checked before any compute.

Every algorithm's config is a `TrainConfig` (which model, the optimizer, the data, the run) that the
algorithm extends with its own fields and, where they constrain each other, a `check()`:

    @dataclasses.dataclass
    class DPOConfig(PairConfig):      # PairConfig: a TrainConfig plus how pairs are cut to seq_len
        algorithm: ClassVar[str] = "dpo"
        beta: float = option(0.1, "strength of the KL anchor to the reference", gt=0)

        def check(self) -> None:      # only DPO's own rules: each part checks its own fields
            ...

TrainConfig holds four parts, each a dataclass with its fields and the check() of their rules:
- ModelOptions: which model, adapters (LoRA / QLoRA), precision and memory options.
- OptimOptions: optimizer, schedule, batching, seed.
- DataOptions: where the examples come from and how long a row is.
- RunOptions: outputs, checkpoints, evaluation and logging cadence.

YAML files hold the fields flat (`learning_rate: 1.0e-4`), with `algorithm:` naming the config
class. Every value is checked against its field's type and range when the config is built (from
YAML, a dict or in Python), with one line naming the key, the value and what is expected: the
checked-config engine (`Checked`, `option`, `read_yaml`, `apply_settings`) is
tunix_lite.training.checked, which the sections of a pipeline file (tunix_lite.pipeline) use too.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from tunix_lite.data import reasoning_gym
# the engine's names an algorithm's config uses come with TrainConfig (apply_settings: re-exported)
from tunix_lite.training.checked import (RANGES, Checked, ConfigError, apply_settings,  # noqa: F401
                                         option, read_yaml, type_name)
from tunix_lite.training.metrics_log import Tracker, missing_package


# ---------------------------------------------------------------------------- the shared parts


@dataclasses.dataclass
class ModelOptions:
    """Which model, its adapters (LoRA / QLoRA), precision and memory options."""

    model: str = option(
        "tiny", "tiny | gemma3-270m | a preset name | a checkpoint directory | a hub id")
    lora_rank: int | None = option(
        None, "LoRA rank r: train only low-rank adapters; null: full fine-tuning", ge=1)
    lora_alpha: float = option(
        16.0, "LoRA scale numerator: the update is (alpha / r) x A @ B", gt=0)
    lora_dropout: float = option(0.0, "dropout on the adapters' input while training", ge=0, lt=1)
    quantize: Literal["int8", "nf4"] | None = option(
        None, "store the frozen base quantized (QLoRA; needs lora_rank)")
    compute_dtype: Literal["float32", "bfloat16"] = option(
        "float32", "matmul and activation dtype; parameters and the optimizer stay float32")
    remat: bool = option(
        False, "recompute block activations in the backward pass (less memory, ~1/3 more compute)",
        resume="free")
    logits_chunk: int = option(
        0, "score this many tokens at a time so the [B, T, V] logits never exist at once "
           "(0: all at once; worth it for large vocabularies)", ge=0, resume="free")

    def check(self) -> None:
        if not self.model.strip():
            raise ConfigError("model: expected a model name or checkpoint directory, got an empty "
                              "string")
        if self.quantize and not self.lora_rank:
            raise ConfigError(f"quantize: {self.quantize!r} needs lora_rank (QLoRA trains adapters "
                              "on a quantized base; a quantized base cannot be trained directly)")


@dataclasses.dataclass
class OptimOptions:
    """AdamW with warmup and cosine decay, batching and gradient accumulation, the seed."""

    steps: int = option(
        200, "optimizer steps (a resumed run may ask for more)", ge=1, resume="grow")
    batch_size: int = option(16, "rows per optimizer step (pairs for DPO)", ge=1)
    micro_batches: int = option(
        1, "split each batch into this many pieces, accumulated exactly in one step", ge=1)
    mesh: str | dict[str, int] | None = option(
        None, "devices to train on: null (one device), auto (from the device count and kind), "
              "a strategy (dp, fsdp, tp, fsdp_tp) over every device, or axis sizes {data: D, "
              "fsdp: F, tensor: T} (one may be -1: the rest)", resume="free")
    learning_rate: float = option(
        1e-3, "peak learning rate (linear warmup, then cosine decay to 10%)", gt=0)
    warmup_steps: int = option(20, "steps of linear warmup; fewer than steps", ge=0)
    weight_decay: float = option(0.0, "AdamW decoupled weight decay", ge=0)
    clip_norm: float | None = option(
        1.0, "clip the gradient's global norm to this (null: no clipping)", gt=0)
    seed: int = option(0, "seeds data order, adapter init and dropout")

    def check(self) -> None:
        if self.batch_size % self.micro_batches:
            raise ConfigError(f"micro_batches: batch_size={self.batch_size} is not a multiple of "
                              f"micro_batches={self.micro_batches}")
        if self.mesh is not None:
            check_mesh(self.mesh, self.batch_size, self.micro_batches)
        if self.warmup_steps >= self.steps:
            raise ConfigError(f"warmup_steps: {self.warmup_steps} must be less than "
                              f"steps={self.steps}")


@dataclasses.dataclass
class DataOptions:
    """Where the examples come from and how long a row is."""

    train_data: str = option(
        "synthetic",
        "synthetic (the course's generated tasks), a .json/.jsonl file, a datasets directory "
        "(save_to_disk), a .parquet/.csv file, or reasoning_gym:TASK[,TASK...][?size=N&seed=S"
        "&TASK.KEY=VALUE] (real tasks generated offline: tunix_lite.data.reasoning_gym)")
    validation_data: str | None = option(
        None,
        "the same kinds as train_data; null: with synthetic data its validation split, with a "
        "reasoning_gym spec n_validation more items of its tasks (another seed)")
    n_train: int = option(2000, "synthetic training examples", ge=1)
    n_validation: int = option(128, "synthetic validation examples", ge=1)
    domains: list[str] | None = option(None, "synthetic domains to use (null: all)")
    seq_len: int = option(128, "tokens per row (at most the model's context)", ge=2)
    template: str | None = option(None, "chat template (null: the model family's)")
    truncation: Literal["error", "drop", "truncate"] = option(
        "error", "what to do with an example longer than a row: stop, drop it, or cut its end")

    def check(self) -> None:
        """A reasoning_gym data spec is parsed here, so a bad one stops before any compute."""
        for key in ("train_data", "validation_data"):
            if reasoning_gym.is_spec(getattr(self, key)):
                try:
                    reasoning_gym.parse_spec(getattr(self, key))
                except (ValueError, ImportError) as e:
                    raise ConfigError(f"{key}: {e}") from None
        if self.template is not None:
            from tunix_lite.chat import TEMPLATES

            if self.template not in TEMPLATES:
                raise ConfigError(f"template: {self.template!r} is not supported; choose one of "
                                  f"{', '.join(TEMPLATES)} (or null: the model family's)")


@dataclasses.dataclass
class RunOptions:
    """Outputs, checkpoints and resume, evaluation and logging cadence."""

    output_dir: str | None = option(
        None, "where config.yaml, metrics.jsonl, checkpoints/, scores.json and the trained model "
              "go (null: nothing is written)", resume="free")
    overwrite: bool = option(
        False, "start over in an output_dir that holds an earlier run without checkpoints",
        resume="free")
    checkpoint_every: int = option(
        0, "save a checkpoint every N steps and at the end (0: none); rerunning the same command "
           "resumes from the latest", ge=0, resume="free")
    keep_checkpoints: int = option(
        2, "checkpoints kept on disk (the oldest are deleted)", ge=1, resume="free")
    resume_from_intact: bool = option(
        False, "when the latest checkpoint does not read (corrupt, truncated), resume from the "
               "newest one that does and delete those after it", resume="free")
    eval_every: int = option(
        50, "evaluate every N steps (0: only before and after training)", ge=0, resume="free")
    log_every: int = option(
        10, "bring metrics to the host (progress bar, metrics.jsonl) every N steps", ge=1,
        resume="free")
    report_to: list[Tracker] = option(
        [], "experiment trackers that also get each step's metrics (metrics.jsonl always "
            "does): tensorboard (output_dir/tensorboard), trackio (local, offline; `trackio "
            "show`), wandb (WANDB_MODE=offline to stay local); each needs the extra of its name",
        resume="free")
    max_minutes: float | None = option(
        None, "wall-clock budget: then checkpoint and stop cleanly; rerunning the same command "
              "continues (null: no limit)", gt=0, resume="free")

    def check(self) -> None:
        if self.max_minutes is not None and not (self.checkpoint_every and self.output_dir):
            raise ConfigError(f"max_minutes: {self.max_minutes:g} needs checkpoints to continue "
                              "from; set checkpoint_every > 0 and an output_dir (or max_minutes: "
                              "null)")
        # each tracker once, its package installed: a missing one stops here, before any compute,
        # rather than when the run opens its loggers
        for i, tracker in enumerate(self.report_to):
            if tracker in self.report_to[:i]:
                raise ConfigError(f"report_to: {tracker!r} is listed twice")
            problem = missing_package(tracker)
            if problem:
                raise ConfigError(f"report_to: {problem}")


SHARED_PARTS = (ModelOptions, OptimOptions, DataOptions, RunOptions)


# ---------------------------------------------------------------------- one base for every run


@dataclasses.dataclass
class TrainConfig(Checked, RunOptions, DataOptions, OptimOptions, ModelOptions):
    """What every algorithm's run is configured by: the four parts above (listed last to first, as
    a dataclass collects fields from its last base), checked. An algorithm subclasses it with its
    `algorithm` name, its own fields and their check()."""

    algorithm: ClassVar[str]

    @classmethod
    def key_kind(cls) -> str:
        return f"a {cls.algorithm} config key"

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = ""):
        """Build and check a config; `values` may repeat the class's own `algorithm`."""
        values = dict(values)
        algorithm = values.pop("algorithm", cls.algorithm)
        if algorithm != cls.algorithm:
            raise ConfigError(f"algorithm: this is a {cls.algorithm} config, got {algorithm!r}")
        return super().from_dict(values, where)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides):
        return cls.from_dict(read_yaml(path) | overrides)

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm} | dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def resume_conflict(self, saved: dict[str, Any]) -> str | None:
        """Why a run with this config may not resume checkpoints written under `saved` (None: it
        may)."""
        for name, f in self.fields().items():
            rule, now = f.metadata["resume"], getattr(self, name)
            if name not in saved or rule == "free":
                continue
            before = saved[name]
            if rule == "grow" and now < before:
                return (f"{name}: {now} is less than the {before} the checkpointed run was "
                        "started with")
            if rule == "same" and now != before:
                return f"{name}: the checkpointed run used {before!r}, this config says {now!r}"
        return None

    @classmethod
    def own_fields(cls) -> list[str]:
        """The fields this algorithm adds to TrainConfig's."""
        return [name for name in cls.fields() if name not in TrainConfig.fields()]

    @classmethod
    def schema_markdown(cls, names: list[str] | None = None) -> str:
        """The fields (all, or `names`) as a markdown table: type, default, allowed range, what a
        resumed run may do with it, and what it means."""
        hints = typing.get_type_hints(cls)
        lines = ["| key | type | default | range | on resume | meaning |",
                 "|---|---|---|---|---|---|"]
        for name, f in cls.fields().items():
            if names is not None and name not in names:
                continue
            m = f.metadata
            ranges = ", ".join(f"{words} {m[k]}" for k, words, _ in RANGES if m[k] is not None)
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            shown = yaml.safe_dump(default, default_flow_style=True).strip().removesuffix("...")
            cells = [f"`{name}`", type_name(hints[name]), f"`{shown.strip()}`", ranges,
                     m["resume"], m["help"]]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        return "\n".join(lines)


def check_mesh(mesh: str | dict, batch_size: int | None, micro_batches: int = 1,
               num_devices: int | None = None, *, key: str = "mesh",
               devices: str | None = None) -> None:
    """ConfigError unless `mesh` names a strategy or valid axis sizes that split batch_size into
    whole rows per data-parallel shard and micro-batch (batch_size None: no rows to split). With
    num_devices: also that the sizes use exactly that many devices, which `devices` describes in the
    error (default: "this machine has N"). `key` is the config key the errors name."""
    from tunix_lite.sharding import MESH_AXES, STRATEGIES, strategy_shape

    choices = ["auto", *STRATEGIES]
    if isinstance(mesh, str):
        if mesh not in choices:
            close = difflib.get_close_matches(mesh, choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{key}: {mesh!r} is not a strategy{hint}; choose one of "
                              f"{', '.join(choices)}, or axis sizes such as "
                              "{data: 1, fsdp: 4, tensor: 2}")
        if num_devices is None or mesh == "auto":
            return
        try:
            sizes = strategy_shape(mesh, num_devices)
        except ValueError as e:
            raise ConfigError(f"{key}: {e}") from None
    else:
        unknown = sorted(set(mesh) - set(MESH_AXES))
        if unknown:
            raise ConfigError(f"{key}: unknown axis {unknown[0]!r}; the axes are "
                              f"{', '.join(MESH_AXES)}")
        bad = {k: v for k, v in mesh.items() if v == 0 or v < -1}
        if bad or list(mesh.values()).count(-1) > 1:
            raise ConfigError(f"{key}: axis sizes must be >= 1, with at most one -1 (the remaining "
                              f"devices); got {mesh}")
        sizes = {"data": 1, "fsdp": 1, "tensor": 1} | mesh
        if num_devices is not None:
            known = math.prod(v for v in sizes.values() if v != -1)
            sizes = {k: (num_devices // known if v == -1 else v) for k, v in sizes.items()}
            if math.prod(sizes.values()) != num_devices:
                raise ConfigError(f"{key}: {mesh} needs {math.prod(sizes.values())} devices, "
                                  + (devices or f"this machine has {num_devices}"))
        elif -1 in sizes.values():
            return
    shards = sizes["data"] * sizes["fsdp"]
    if batch_size is not None and batch_size % (shards * micro_batches):
        raise ConfigError(f"batch_size: {batch_size} rows cannot be split into {micro_batches} "
                          f"micro-batch(es) of whole rows on each of the mesh's {shards} data x "
                          f"fsdp shards ({mesh}); use a multiple of {shards * micro_batches}")
