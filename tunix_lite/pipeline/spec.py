"""A pipeline file, checked: its sections as Checked dataclasses (tunix_lite.training.config), its
stages as their algorithms' own configs, the session's time budget, the plan `--check` prints, and
the small state each stage leaves on disk.

Every problem is found before any compute and reported in one line naming the file, the stage and
the key (`load_pipeline`)."""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any, Literal

from tunix_lite.data import reasoning_gym
from tunix_lite.data.records import split_source
from tunix_lite.pipeline.state import check_budget, stage_done
from tunix_lite.training.checked import Checked, ConfigError, apply_settings, option, read_yaml

REASONING_DOMAINS = ("arithmetic", "compare", "sort", "count", "sequence", "instruction")
# stages that train on preference pairs (prompt, chosen, rejected)
PREFERENCE_ALGORITHMS = ("dpo", "reward_model")
CHECKPOINT_EVERY = 25  # a stage's checkpoint cadence unless the file sets checkpoint_every


# ----------------------------------------------------------------------------- the file's sections


@dataclasses.dataclass
class DataSpec(Checked):
    """Where every stage's examples come from: the synthetic tasks (default) or your own files."""

    train: str | None = option(
        None, "your prompt/completion records (JSONL, a datasets directory, parquet, csv) or "
              "reasoning_gym:TASK[,TASK...][?size=N&seed=S] (tunix_lite.data.reasoning_gym); null: "
              "the synthetic tasks")
    validation: str | None = option(
        None, "your validation records (same columns as train), or a reasoning_gym spec (another "
              "seed than train's; null with a train spec: n_validation items of its tasks)")
    test: str | None = option(
        None, "your held-out records for evaluation: prompt, answer[, domain]; or a reasoning_gym "
              "spec")
    pairs_train: str | None = option(
        None, "your preference pairs (prompt, chosen, rejected) for a dpo stage")
    pairs_validation: str | None = option(None, "your validation preference pairs")
    tasks: Literal["reasoning", "calculator"] = option(
        "reasoning", "the built-in tasks: the synthetic reasoning domains, or calculator problems "
                     "for the tool-using agent (tunix_lite.rl.agent; evaluated with and without "
                     "the tool)")
    style: Literal["plain", "reasoning"] = option(
        "reasoning", "synthetic completions: plain, or "
                     "<reasoning>...</reasoning><answer>...</answer>")
    domains: list[str] = option(list(REASONING_DOMAINS), "synthetic domains")
    weights: dict[str, float] | None = option(
        None, "synthetic training mixture: domain -> weight (null: equal)")
    n_train: int = option(2000, "synthetic training examples", ge=1)
    n_validation: int = option(64, "synthetic validation examples (and preference pairs)", ge=1)
    n_test: int = option(128, "synthetic held-out test examples", ge=1)
    n_pairs: int = option(1000, "synthetic preference pairs for dpo stages", ge=1)
    seed: int = option(0, "seed of the synthetic data")

    def check(self) -> None:
        from tunix_lite.data.synthetic import DOMAINS

        specs = [key for key in ("train", "validation", "test")
                 if reasoning_gym.is_spec(getattr(self, key))]
        for key in specs:
            try:
                reasoning_gym.parse_spec(getattr(self, key))
            except (ValueError, ImportError) as e:
                raise ConfigError(f"{key}: {e}") from None
        if self.train is None:
            unknown = sorted(set(self.domains) - set(DOMAINS))
            if unknown or not self.domains:
                raise ConfigError(f"domains: {unknown or '[]'} are not synthetic domains; choose "
                                  f"from {', '.join(DOMAINS)}")
            if self.weights is not None:
                outside = sorted(set(self.weights) - set(self.domains))
                if (outside or any(w < 0 for w in self.weights.values())
                        or sum(self.weights.values()) <= 0):
                    raise ConfigError(f"weights: {self.weights} must give the domains in "
                                      "data.domains non-negative weights with a positive sum"
                                      + (f" ({outside} are not in it)" if outside else ""))
            return
        for key in ("train", "validation", "test", "pairs_train", "pairs_validation"):
            value = getattr(self, key)
            if value is None or key in specs:
                continue
            try:
                file = split_source(value)[0]
            except ValueError as e:
                raise ConfigError(f"{key}: {e}") from None
            if not Path(file).expanduser().exists():
                raise ConfigError(f"{key}: no file or directory at {file}")
        if self.validation is None and "train" not in specs:  # a spec draws one from its tasks
            raise ConfigError("validation: with your own data.train, give data.validation too")


@dataclasses.dataclass
class EvalSpec(Checked):
    """The held-out evaluation after every stage (tunix_lite.evaluation.reasoning)."""

    n_prompts: int = option(64, "held-out test prompts", ge=1)
    samples: int = option(8, "sampled answers per prompt (pass@k, maj@k, best-of-N use them)", ge=1)
    scaling: list[int] = option(
        [1, 2, 4, 8], "test-time scaling: N samples per prompt (each <= samples)")
    temperature: float = option(1.0, "sampling temperature", gt=0)
    top_p: float | None = option(None, "nucleus sampling (null: off)", gt=0, le=1)
    max_new_tokens: int | None = option(
        None, "answer budget (null: from the longest reference completion)", ge=1)
    batch_size: int = option(16, "prompts per sampler call", ge=1)
    seed: int = option(1234, "sampling seed")
    allow_overlap: bool = option(
        False, "score test prompts that some stage (or the base model's run) trained on, apart "
               "as seen, instead of refusing them")

    def check(self) -> None:
        too_many = [n for n in self.scaling if not 1 <= n <= self.samples]
        if too_many:
            raise ConfigError(f"scaling: {too_many} must each be between 1 and "
                              f"evaluation.samples = {self.samples}; raise samples or drop them")


@dataclasses.dataclass
class OnPolicyPairs(Checked):
    """A preference stage's pairs sampled from the model it starts from and judged by the verifier
    (tunix_lite.preference.on_policy): chosen a right reply, rejected a wrong one."""

    prompts: int = option(512, "training prompts sampled (each gives at most one pair)", ge=1)
    samples: int = option(8, "replies sampled per prompt", ge=2)
    temperature: float = option(1.0, "sampling temperature", gt=0)
    max_new_tokens: int = option(96, "reply budget", ge=1)
    batch_size: int = option(16, "prompts per sampler call", ge=1)
    seed: int = option(0, "sampling seed")

    @classmethod
    def key_kind(cls) -> str:
        return "an on_policy_pairs key"


@dataclasses.dataclass
class PipelineSpec(Checked):
    """The top level of a pipeline file."""

    output_dir: str = option("", "where every stage, the report and the export go")
    model: str = option("tiny", "the base model of the first stage")
    max_minutes: float | None = option(
        None, "this session's wall-clock budget; then checkpoint and exit cleanly (rerun to "
              "continue)", gt=0)
    description: str = option("", "free text")
    data: DataSpec = option(DataSpec, "where the stages' examples come from")
    defaults: dict[str, Any] = option({}, "config keys every stage gets unless it sets them")
    # each stage is checked as its algorithm's config (load_pipeline): here only its kind
    stages: list[dict[str, Any]] = option(
        [], "one mapping per stage: name, algorithm, from, and its config keys")
    evaluation: EvalSpec | None = option(EvalSpec, "the held-out evaluation; null: none")
    export: bool = option(
        True, "export the last stage's model to output_dir/export (HF layout + Orbax)")
    export_dtype: Literal["float32", "bfloat16"] = option(
        "float32", "the export's weights: bfloat16 halves both copies (a Gemma 2 2B export: 10.5 "
                   "GB, not 21; Kaggle keeps 20 GB of /kaggle/working)")

    def check(self) -> None:
        if not self.output_dir.strip():
            raise ConfigError("output_dir: a pipeline needs an output_dir (every stage, the report "
                              "and the export go there)")
        if self.evaluation is not None and self.data.train is not None and self.data.test is None:
            raise ConfigError("data.test: the evaluation needs held-out records (prompt, answer); "
                              "set data.test or evaluation: null")
        if not self.stages:
            raise ConfigError("stages: a pipeline needs at least one stage, e.g. "
                              "[{name: sft, algorithm: sft}]")


# ----------------------------------------------------------------------------- stages and the plan


@dataclasses.dataclass
class Stage:
    name: str
    algorithm: str
    source: str  # "base" or an earlier stage's name
    values: dict  # the file's keys for this stage (defaults merged in), before the pipeline's paths
    config: Any = None  # the algorithm's config, checked; its `model` is set when the stage starts
    on_policy_pairs: OnPolicyPairs | None = None  # pairs sampled from the model it starts from

    @property
    def uses_pairs(self) -> bool:
        return self.algorithm in PREFERENCE_ALGORITHMS

    @property
    def uses_data_pairs(self) -> bool:
        """Whether it trains on the data section's pairs (synthetic, or data.pairs_train)."""
        return self.uses_pairs and self.on_policy_pairs is None


@dataclasses.dataclass
class Pipeline:
    path: Path
    spec: PipelineSpec
    stages: list[Stage]
    values: dict  # the file's mapping with the command line's settings: what pipeline.yaml records

    @property
    def data(self) -> DataSpec:
        return self.spec.data

    @property
    def evaluation(self) -> EvalSpec | None:
        return self.spec.evaluation

    @property
    def root(self) -> Path:
        return Path(self.spec.output_dir).expanduser()

    def stage_dir(self, name: str) -> Path:
        return self.root / name


def load_pipeline(path: str | Path, *, settings: list[str] = (), **overrides) -> Pipeline:
    """Read and check a pipeline file, with the command line's `--set KEY=VALUE` `settings`
    (dotted paths: stages.2.steps), then `overrides` (top-level keys, e.g. max_minutes); no compute.
    Every problem is a ConfigError of one line naming the file, the stage and the key."""
    path = Path(path)
    values = apply_settings(read_yaml(path), settings)
    values |= {k: v for k, v in overrides.items() if v is not None}
    try:
        spec = PipelineSpec.from_dict(values)
        pipeline = Pipeline(path, spec, _check_stages(spec), values)
        check_budget(pipeline, spec.max_minutes)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return pipeline


def _check_stages(spec: PipelineSpec) -> list[Stage]:
    """Each stage's place in the chain (its name, algorithm and `from:`), then its config, built and
    checked as its algorithm's own, against the base model."""
    from tunix_lite.loading import model_config
    from tunix_lite.training.algorithms import ALGORITHMS, config_class
    from tunix_lite.training.inputs import check_against_model

    base_config = model_config(spec.model)
    stages, names = [], ["base"]
    for i, raw in enumerate(spec.stages):
        raw = dict(raw)
        algorithm = raw.pop("algorithm", None)
        name = str(raw.pop("name", algorithm))
        where = f"stages[{i}] ({name})"
        if algorithm is None:
            raise ConfigError(f"{where}: algorithm: missing; choose one of {', '.join(ALGORITHMS)}")
        if algorithm not in ALGORITHMS:
            close = difflib.get_close_matches(str(algorithm), ALGORITHMS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: algorithm: {algorithm!r} is not supported{hint}; choose "
                              f"one of {', '.join(ALGORITHMS)}")
        if name in names:
            raise ConfigError(f"{where}: name: {name!r} is used twice (or is 'base', the base "
                              "model); give each stage its own name")
        source = str(raw.pop("from", names[-1]))
        if source not in names:
            raise ConfigError(f"{where}: from: {source!r} is not an earlier stage; a stage can "
                              f"start from {', '.join(map(repr, names))}")
        for key in ("model", "output_dir"):
            if key in raw:
                raise ConfigError(f"{where}: {key}: set by the pipeline (the model from `from:`, "
                                  f"the folder output_dir/{name}); remove it from the stage")
        on_policy = raw.pop("on_policy_pairs", None)
        if on_policy not in (None, False):
            if algorithm not in PREFERENCE_ALGORITHMS:
                raise ConfigError(f"{where}: on_policy_pairs: only a stage that trains on pairs "
                                  f"({', '.join(PREFERENCE_ALGORITHMS)}) samples them; remove it "
                                  f"from this {algorithm} stage")
            if any(key in raw for key in ("train_data", "validation_data")):
                raise ConfigError(f"{where}: on_policy_pairs: the stage's pairs are sampled, so "
                                  "it takes no train_data or validation_data; remove one of them")
            on_policy = OnPolicyPairs.from_dict({} if on_policy is True else on_policy,
                                                f"{where}: on_policy_pairs")
        else:
            on_policy = None
        stage = Stage(name, algorithm, source,
                      {"checkpoint_every": CHECKPOINT_EVERY} | spec.defaults | raw,
                      on_policy_pairs=on_policy)
        try:
            values = stage_values(spec, stage, spec.model, check=True)
            stage.config = config_class(algorithm).from_dict(values)
            check_against_model(stage.config, base_config)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        stages.append(stage)
        names.append(name)
    return stages


def stage_values(spec: PipelineSpec, stage: Stage, model: str, *, check: bool = False) -> dict:
    """The stage's config keys with the pipeline's parts filled in: model, output_dir, data files
    (while checking, before the synthetic files exist, the synthetic source stands in for them)."""
    values = dict(stage.values)
    values |= {"model": model, "output_dir": str(Path(spec.output_dir).expanduser() / stage.name),
               "overwrite": True}
    if "train_data" not in values:
        train, validation = _data_files(spec, stage)
        if check and isinstance(train, Path) and not train.exists():
            train = validation = None
        values |= {"train_data": str(train or "synthetic"),
                   "validation_data": validation and str(validation)}
    elif values["train_data"] == "synthetic" and values.get("domains") is None:
        # a stage's own draw of synthetic prompts keeps to the pipeline's domains, not every one
        values["domains"] = list(spec.data.domains)
    return values


def prompt_sources(spec: PipelineSpec) -> tuple:
    """The (train, validation) records a stage that trains on prompts reads: your own files as
    Paths, reasoning_gym specs as written (a None validation: drawn from the train spec's tasks),
    or the synthetic files in output_dir/data."""
    data = spec.data
    if data.train is not None:
        return tuple(s if s is None or reasoning_gym.is_spec(s) else Path(s)
                     for s in (data.train, data.validation))
    folder = Path(spec.output_dir).expanduser() / "data"
    return folder / "train.jsonl", folder / "validation.jsonl"


def on_policy_folder(spec: PipelineSpec, stage: Stage) -> Path:
    """Where a stage's sampled pairs go: outside its own folder, which training starts afresh."""
    return Path(spec.output_dir).expanduser() / "pairs" / stage.name


def _data_files(spec: PipelineSpec, stage: Stage) -> tuple:
    """The stage's (train, validation) sources: its prompts, or its preference pairs (sampled into
    output_dir/pairs/STAGE, your pair files, or the synthetic ones)."""
    if not stage.uses_pairs:
        return prompt_sources(spec)
    root, data = Path(spec.output_dir).expanduser(), spec.data
    if stage.on_policy_pairs is not None:  # sampled when the stage starts (pipeline.run)
        folder = on_policy_folder(spec, stage)
        return folder / "train.jsonl", folder / "validation.jsonl"
    if data.train is not None:  # your own files, as given
        if data.pairs_train is None or data.pairs_validation is None:
            raise ConfigError(f"data.pairs_train: stage {stage.name!r} ({stage.algorithm}) "
                              "trains on preference pairs; set data.pairs_train and "
                              "data.pairs_validation, or give the stage on_policy_pairs")
        return Path(data.pairs_train), Path(data.pairs_validation)
    return root / "data" / "pairs_train.jsonl", root / "data" / "pairs_validation.jsonl"


# ----------------------------------------------------------------------------- the plan


def plan(pipeline: Pipeline) -> str:
    """The checked plan, one line per stage: what `tunix-lite run --check` prints."""
    header = (f"{pipeline.path}: {len(pipeline.stages)} stages into {pipeline.root}, base model "
              f"{pipeline.spec.model}")
    lines = [header]
    for stage in pipeline.stages:
        c = stage.config
        done = " (done)" if stage_done(pipeline, stage) else ""
        lora = f", LoRA r{c.lora_rank}" if c.lora_rank else ""
        pairs = stage.on_policy_pairs
        sampled = (f", pairs from {pairs.prompts} prompts x {pairs.samples} samples"
                   if pairs is not None else "")
        lines.append(f"  {stage.name}: {stage.algorithm} from {stage.source}, {c.steps} steps x "
                     f"{c.batch_size}{lora}{sampled}{done}")
    if pipeline.evaluation is not None:
        e = pipeline.evaluation
        lines.append(f"  evaluation: {e.n_prompts} held-out prompts x {e.samples} samples after "
                     "every stage")
    lines += _device_lines(pipeline)
    return "\n".join(lines)


def _device_lines(pipeline: Pipeline) -> list[str]:
    """The devices the stages' meshes use on this machine; a warning when they leave some idle."""
    import jax

    from tunix_lite.sharding import device_kind

    devices = jax.devices()
    used = {}
    for i, stage in enumerate(pipeline.stages):
        try:
            used[stage.name] = _stage_devices(stage.config, devices)
        except ValueError as e:  # sizes that do not fit this machine fail here, not stages later
            raise ConfigError(f"{pipeline.path}: stages[{i}] ({stage.name}): {e}") from None
    meshes = {mesh for _, mesh in used.values()}
    most = max(count for count, _ in used.values())
    if len(meshes) == 1:
        line = f"devices: {most} x {devices[0].device_kind}, mesh {meshes.pop()}"
    else:
        line = (f"devices: up to {most} x {devices[0].device_kind}, mesh per stage: "
                + ", ".join(f"{name} {mesh}" for name, (_, mesh) in used.items()))
    fewest = min(count for count, _ in used.values())
    warning = unused_devices_warning(len(devices), fewest, device_kind(devices[0]))
    return [line] + ([warning] if warning else [])


def _stage_devices(config, devices: list) -> tuple[int, str]:
    """(how many of `devices` a stage trains and samples on, its mesh in words)."""
    from tunix_lite.sharding import resolve_mesh

    train_on, rollouts = devices, None
    if getattr(config, "rollout_mesh", None) is not None:  # RL sampling on devices of its own
        from tunix_lite.rl.setup import split_devices

        train_on, rollouts = split_devices(config, devices)
    mesh = resolve_mesh(config.mesh, train_on)
    if mesh is None:
        count, words = 1, "null (one device)"
    else:
        count, words = mesh.devices.size, str(dict(mesh.shape))
    if rollouts is not None:
        count, words = count + rollouts.devices.size, f"{words} + rollouts {dict(rollouts.shape)}"
    return count, words


def unused_devices_warning(available: int, used: int, platform: str) -> str | None:
    """The warning when a run uses fewer devices than the machine has (None when it uses them all).
    A CPU counts as one device unless XLA_FLAGS simulates several, which then count like chips."""
    if used >= available:
        return None
    return (f"warning: this machine has {available} {platform.upper()} devices; "
            f"the mesh uses {used}. Set mesh: auto to use all of them")
