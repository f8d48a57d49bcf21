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
YAML, a dict or in Python), with one line naming the key, the value and what is expected; numbers
PyYAML reads as strings (`1e-3`: YAML 1.1 wants a dot) are converted. Each field also says whether a
resumed run may change it (`resume`: "same", "free" or "grow"). The sections of a pipeline file
(tunix_lite.pipeline) are `Checked` dataclasses too.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin

import yaml

from tunix_lite.data import reasoning_gym
from tunix_lite.training.metrics_log import Tracker, missing_package

RESUME_RULES = ("same", "free", "grow")  # must not change | may change | may only grow


# keys that older configs use, and what replaced them: named in the one-line error
RENAMED = {"tensorboard": "report_to: [tensorboard]"}


class ConfigError(ValueError):
    """A config value that is missing, unknown, of the wrong type or out of range."""


def option(default, help: str, *, ge=None, gt=None, le=None, lt=None, resume: str = "same"):
    """A config field: its default (a Checked class: that section with its own defaults), a one-line
    help, an allowed range, and what a resumed run may do with it."""
    assert resume in RESUME_RULES, resume
    metadata = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "resume": resume}
    if isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=metadata)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# ------------------------------------------------------------------------- checked dataclasses


class Checked:
    """A dataclass whose every value is converted to its field's type and range-checked however
    it is built (YAML, a dict, or Python: `SFTConfig(lora_rank=0)` is refused as `lora_rank: 0` in
    a file is), then checked by each class's own `check()`, the bases' first: every part checks
    only its own fields and may rely on its bases' rules holding. A field typed as another Checked
    class is a section of its own, built from a nested mapping."""

    @classmethod
    def fields(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}

    @classmethod
    def key_kind(cls) -> str:
        """What an unknown key is not, in its error."""
        return "a key here"

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = ""):
        """Build and check one from a mapping. `where`: the key the mapping sits under in its file
        (e.g. "data"), which every error then names (data.n_train: ...)."""
        prefix = f"{where}." if where else ""
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: expected a mapping of keys, got {type(values).__name__}")
        fields = cls.fields()
        unknown = [k for k in values if k not in fields]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = (f" (did you mean {close[0]!r}?)" if close
                    else f"; valid keys: {', '.join(fields)}")
            if key in RENAMED:
                hint = f"; it became {RENAMED[key]}"
            raise ConfigError(f"{prefix}{key}: not {cls.key_kind()}{hint}")
        try:
            return cls(**values)  # __post_init__ checks every value
        except ConfigError as e:
            raise ConfigError(f"{prefix}{e}") from None

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for name, f in self.fields().items():
            value = _coerce(name, getattr(self, name), hints[name])
            _check_range(name, value, f.metadata)
            setattr(self, name, value)
        self.validate()

    def validate(self) -> None:
        """Each class's own check() in turn, from the first base to this class."""
        for cls in reversed(type(self).__mro__):
            check = vars(cls).get("check")
            if check is not None:
                check(self)


def _is_section(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, Checked)


def _type_name(hint) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin is list:
        return f"a list of {_type_name(args[0])}"
    if origin is dict:
        return f"a mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    if _is_section(hint):
        return f"a mapping of {hint.__name__} keys"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "null", Any: "anything"}.get(hint, str(hint))


def _coerce(key: str, value, hint):
    """`value` as the type `hint` describes, or a ConfigError naming key, value and what is
    expected."""
    origin, args = get_origin(hint), get_args(hint)

    def wrong():
        shown = (type(value).__name__ if isinstance(value, (dict, list))
                 else f"{value!r} ({type(value).__name__})")
        return ConfigError(f"{key}: expected {_type_name(hint)}, got {shown}")

    if hint is Any:
        return value
    if _is_section(hint):
        return value if isinstance(value, hint) else hint.from_dict(value, where=key)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        section = next((a for a in args if _is_section(a)), None)
        if section is not None and isinstance(value, (dict, section)):  # its own errors, not ours
            return _coerce(key, value, section)
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                pass
        raise wrong()
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not supported; choose one of "
                              f"{', '.join(map(repr, args))}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise wrong()
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        raise wrong()
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:  # PyYAML reads 1e-3 (no dot) as a string
                number = float(value)
            except ValueError:
                raise wrong() from None
        else:
            raise wrong()
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise wrong()
    if origin is list:
        if not isinstance(value, list):
            raise wrong()
        return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise wrong()
        return {_coerce(f"{key} key", k, args[0]): _coerce(f"{key}[{k!r}]", v, args[1])
                for k, v in value.items()}
    raise TypeError(f"config field {key}: unsupported annotation {hint}")


RANGES = (("ge", ">=", lambda x, bound: x >= bound), ("gt", ">", lambda x, bound: x > bound),
          ("le", "<=", lambda x, bound: x <= bound), ("lt", "<", lambda x, bound: x < bound))


def _check_range(key: str, value, meta: dict) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    for name, words, holds in RANGES:
        if meta[name] is not None and not holds(value, meta[name]):
            raise ConfigError(f"{key}: must be {words} {meta[name]}, got {value}")


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
            cells = [f"`{name}`", _type_name(hints[name]), f"`{shown.strip()}`", ranges,
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


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping; one line naming the file when it is missing or not a YAML
    mapping."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no config file at {path}")
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(values).__name__}")
    return values


SET_EXAMPLE = "e.g. --set learning_rate=3e-4 or --set stages.2.steps=50"


def apply_settings(values: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """A copy of a file's mapping with each command-line `--set KEY=VALUE` applied, before the
    checks: so a setting is typed, checked and saved exactly as the same value in the file would be.
    KEY is a dotted path into nested mappings and lists (`stages.2.steps`); VALUE is read as YAML,
    like the file."""
    values = copy.deepcopy(values)
    for setting in settings:
        path, value = _parse_setting(setting)
        _assign(values, path, value, setting)
    return values


def _parse_setting(setting: str) -> tuple[list[str], Any]:
    key, equals, text = setting.partition("=")
    if not equals:
        raise ConfigError(f"--set {setting}: expected KEY=VALUE, {SET_EXAMPLE}")
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {setting}: the key is empty; expected KEY=VALUE, {SET_EXAMPLE}")
    path = key.split(".")
    if not all(path):
        raise ConfigError(f"--set {setting}: {key!r} has an empty part between dots; {SET_EXAMPLE}")
    try:
        return path, yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", e)
        raise ConfigError(f"--set {setting}: the value is not valid YAML ({problem}); write it as "
                          "in the file, e.g. --set 'domains=[sort, count]'") from None


def _assign(values: dict, path: list[str], value, setting: str) -> None:
    """Set values[path[0]][path[1]]... = value. A missing (or null) mapping on the way is created,
    so an unknown key reaches the checks, which name it as they do in a file."""
    container = values
    for depth, part in enumerate(path):
        where = ".".join(path[:depth])
        if isinstance(container, list):
            part = _list_index(container, part, where, setting)
        elif not isinstance(container, dict):
            raise ConfigError(f"--set {setting}: {where} is {container!r}, not a mapping or a "
                              f"list; set it whole (--set {where}=VALUE)")
        if depth == len(path) - 1:
            container[part] = value
            return
        if isinstance(container, dict) and container.get(part) is None:
            container[part] = {}
        container = container[part]


def _list_index(items: list, part: str, where: str, setting: str) -> int:
    indices = f"0 to {len(items) - 1}" if items else "none: it is empty"
    if not part.isdigit():
        raise ConfigError(f"--set {setting}: {where} is a list; index it with a number ({indices})")
    if int(part) >= len(items):
        raise ConfigError(f"--set {setting}: {where} has {len(items)} items, index {part} is out "
                          f"of range ({indices})")
    return int(part)
