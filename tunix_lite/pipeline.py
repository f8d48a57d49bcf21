"""Multi-stage post-training from one YAML file: a base model through SFT, DPO and GRPO stages to a measured,
exported model, resumable across sessions.

    tunix-lite run configs/capstone_tiny.yaml [--max-minutes 500] [--check]
    result = run_pipeline(load_pipeline("configs/capstone_tiny.yaml"))

The file (every key: `tunix-lite run --help-keys`, or the dataclasses below):

    output_dir: runs/capstone_tiny
    model: tiny                      # the base model of the first stage
    max_minutes: null                # this session's wall-clock budget (e.g. a Kaggle session): then stop cleanly
    data: {style: reasoning, weights: {arithmetic: 2, sequence: 2, ...}, n_train: 1200}    # DataSpec
    defaults: {seq_len: 128, checkpoint_every: 20}        # keys every stage gets unless it sets them itself
    stages:
      - {name: sft, algorithm: sft, steps: 60}            # a config of a registered algorithm (algorithms.py)
      - {name: grpo, algorithm: grpo, steps: 40}          # starts from the previous stage's output
    evaluation: {n_prompts: 64, samples: 16}              # EvalSpec; null: no evaluation
    export: true                                          # export/ = the last stage's model (HF + Orbax)

Each stage is one algorithm run in `output_dir/<name>` with the shared run harness, so it logs, checkpoints and
resumes as `tunix-lite train` does. A stage starts from the model another stage wrote (`from:`, by default the
stage before it; `from: base` is the base model): full fine-tuning's `model/`, or for LoRA the adapters merged into
that stage's base (`merged/`), so the next stage's LoRA reference policy is the previous stage's model.

Before any compute every stage's config is built and checked (its algorithm's own checks, a `from:` that names no
earlier stage, a reward that does not exist, a budget too short for one step), each problem in one line naming the
stage and key. Then, in order: the data files, the held-out evaluation of the base model, and per stage its
training, its held-out evaluation (`tunix_lite.reasoning_eval`) and the report (`report/`: table and plots of
every stage so far); finally the export. Every piece is written atomically and skipped on a rerun once done, so:

- with `max_minutes`, the stage in training stops at the budget with a checkpoint and the command exits cleanly;
  rerunning it continues that stage from its checkpoint (a Kaggle or Colab session at a time);
- killed at any moment, a rerun loses at most the steps since the stage's last checkpoint (`checkpoint_every`,
  25 unless set).
A stage whose inputs changed after it ran (an earlier stage retrained) is refused with the folder to delete.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import time
import typing
import uuid
from pathlib import Path
from typing import Any, Literal

import yaml

from tunix_lite.training.config import (ConfigError, _check_range, _coerce, apply_settings, option,
                                        read_yaml)

REASONING_DOMAINS = ("arithmetic", "compare", "sort", "count", "sequence", "instruction")
PREFERENCE_ALGORITHMS = ("dpo", "reward_model")  # stages that train on preference pairs (prompt, chosen, rejected)
CHECKPOINT_EVERY = 25  # a stage's checkpoint cadence unless the file sets checkpoint_every
CPU_FLOPS = 1e12  # FLOP/s no 2-8 core CPU exceeds in float32: the lower bound of a step's time before any timing
ACCELERATOR_FLOPS = 1e15  # likewise for one accelerator chip (a TPU v5p or an H100 in bf16 is below this)


# ----------------------------------------------------------------------------- the file's sections


@dataclasses.dataclass
class DataSpec:
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
    pairs_train: str | None = option(None, "your preference pairs (prompt, chosen, rejected) for a dpo stage")
    pairs_validation: str | None = option(None, "your validation preference pairs")
    tasks: Literal["reasoning", "calculator"] = option(
        "reasoning", "the built-in tasks: the synthetic reasoning domains, or calculator problems for the tool-using "
                     "agent (tunix_lite.agent; evaluated with and without the tool)")
    style: Literal["plain", "reasoning"] = option("reasoning", "synthetic completions: plain, or "
                                                              "<reasoning>...</reasoning><answer>...</answer>")
    domains: list[str] = option(list(REASONING_DOMAINS), "synthetic domains")
    weights: dict[str, float] | None = option(None, "synthetic training mixture: domain -> weight (null: equal)")
    n_train: int = option(2000, "synthetic training examples", ge=1)
    n_validation: int = option(64, "synthetic validation examples (and preference pairs)", ge=1)
    n_test: int = option(128, "synthetic held-out test examples", ge=1)
    n_pairs: int = option(1000, "synthetic preference pairs for dpo stages", ge=1)
    seed: int = option(0, "seed of the synthetic data")


@dataclasses.dataclass
class EvalSpec:
    """The held-out evaluation after every stage (tunix_lite.reasoning_eval)."""

    n_prompts: int = option(64, "held-out test prompts", ge=1)
    samples: int = option(8, "sampled answers per prompt (pass@k, maj@k, best-of-N use them)", ge=1)
    scaling: list[int] = option([1, 2, 4, 8], "test-time scaling: N samples per prompt (each <= samples)")
    temperature: float = option(1.0, "sampling temperature", gt=0)
    top_p: float | None = option(None, "nucleus sampling (null: off)", gt=0, le=1)
    max_new_tokens: int | None = option(None, "answer budget (null: from the longest reference completion)", ge=1)
    batch_size: int = option(16, "prompts per sampler call", ge=1)
    seed: int = option(1234, "sampling seed")


@dataclasses.dataclass
class PipelineSpec:
    """The top level of a pipeline file."""

    output_dir: str = option("", "where every stage, the report and the export go")
    model: str = option("tiny", "the base model of the first stage")
    max_minutes: float | None = option(None, "this session's wall-clock budget; then checkpoint and exit cleanly "
                                             "(rerun to continue)", gt=0)
    description: str = option("", "free text")
    # sections checked on their own (DataSpec, the stage's algorithm config, EvalSpec): only their kind here
    data: dict = option({}, "DataSpec keys")
    defaults: dict = option({}, "config keys every stage gets unless it sets them")
    stages: list = option([], "one mapping per stage: name, algorithm, from, and its config keys")
    evaluation: dict | None = option({}, "EvalSpec keys; null: no evaluation")
    export: bool = option(True, "export the last stage's model to output_dir/export (HF layout + Orbax)")


def _build(cls, values: dict, where: str):
    """A section dataclass from a mapping, each value type- and range-checked; ConfigError names `where`.key."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping of keys, got {type(values).__name__}")
    fields, hints = {f.name: f for f in dataclasses.fields(cls)}, typing.get_type_hints(cls)
    checked = {}
    for key, value in values.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; valid keys: {', '.join(fields)}"
            raise ConfigError(f"{where}{key}: not a key here{hint}")
        kinds = tuple(t for t in typing.get_args(hints[key]) or (hints[key],) if t in (dict, list, type(None)))
        if dict in kinds or list in kinds:  # a section: its own checks come later
            if not isinstance(value, kinds):
                wanted = " or ".join("null" if k is type(None) else f"a {'mapping' if k is dict else 'list'}"
                                     for k in kinds)
                raise ConfigError(f"{where}{key}: expected {wanted}, got {type(value).__name__}")
            checked[key] = value
            continue
        checked[key] = _coerce(f"{where}{key}", value, hints[key])
        _check_range(f"{where}{key}", checked[key], fields[key].metadata)
    return cls(**checked)


# ----------------------------------------------------------------------------- stages and the plan


@dataclasses.dataclass
class Stage:
    name: str
    algorithm: str
    source: str  # "base" or an earlier stage's name
    values: dict  # the keys the file gives this stage (defaults merged in), before the pipeline fills in paths
    config: Any = None  # the algorithm's config, checked; its `model` is filled in when the stage starts

    @property
    def uses_pairs(self) -> bool:
        return self.algorithm in PREFERENCE_ALGORITHMS


@dataclasses.dataclass
class Pipeline:
    path: Path
    spec: PipelineSpec
    data: DataSpec
    evaluation: EvalSpec | None
    stages: list[Stage]
    values: dict  # the file's mapping with the command line's settings: what pipeline.yaml records

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
        return _check(path, values)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def _check(path: Path, values: dict) -> Pipeline:
    from tunix_lite.loading import model_config
    from tunix_lite.training.algorithms import ALGORITHMS, config_class
    from tunix_lite.training.harness import check_against_model

    spec = _build(PipelineSpec, values, "")
    if not spec.output_dir.strip():
        raise ConfigError("output_dir: a pipeline needs an output_dir (every stage, the report and the export go "
                          "there)")
    data = _build(DataSpec, spec.data, "data.")
    evaluation = None if spec.evaluation is None else _build(EvalSpec, spec.evaluation, "evaluation.")
    _check_data(data, evaluation)
    if evaluation is not None:
        too_many = [n for n in evaluation.scaling if not 1 <= n <= evaluation.samples]
        if too_many:
            raise ConfigError(f"evaluation.scaling: {too_many} must each be between 1 and evaluation.samples = "
                              f"{evaluation.samples}; raise samples or drop them")
    if not spec.stages:
        raise ConfigError("stages: a pipeline needs at least one stage, e.g. [{name: sft, algorithm: sft}]")
    base_config = model_config(spec.model)
    stages, names = [], ["base"]
    for i, raw in enumerate(spec.stages):
        if not isinstance(raw, dict):
            raise ConfigError(f"stages[{i}]: expected a mapping (name, algorithm, config keys), got "
                              f"{type(raw).__name__}")
        raw = dict(raw)
        algorithm = raw.pop("algorithm", None)
        name = str(raw.pop("name", algorithm))
        where = f"stages[{i}] ({name})"
        if algorithm is None:
            raise ConfigError(f"{where}: algorithm: missing; choose one of {', '.join(ALGORITHMS)}")
        if algorithm not in ALGORITHMS:
            close = difflib.get_close_matches(str(algorithm), ALGORITHMS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: algorithm: {algorithm!r} is not supported{hint}; choose one of "
                              f"{', '.join(ALGORITHMS)}")
        if name in names:
            raise ConfigError(f"{where}: name: {name!r} is used twice (or is 'base', the base model); give each "
                              "stage its own name")
        source = str(raw.pop("from", names[-1]))
        if source not in names:
            raise ConfigError(f"{where}: from: {source!r} is not an earlier stage; a stage can start from "
                              f"{', '.join(map(repr, names))}")
        for key in ("model", "output_dir"):
            if key in raw:
                raise ConfigError(f"{where}: {key}: set by the pipeline (the model from `from:`, the folder "
                                  f"output_dir/{name}); remove it from the stage")
        stage_values = {"checkpoint_every": CHECKPOINT_EVERY} | spec.defaults | raw
        stage = Stage(name, algorithm, source, stage_values)
        try:
            stage.config = config_class(algorithm).from_dict(_stage_values(spec, data, stage, spec.model, check=True))
            check_against_model(stage.config, base_config)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        stages.append(stage)
        names.append(name)
    pipeline = Pipeline(path, spec, data, evaluation, stages, values)
    check_budget(pipeline, spec.max_minutes)
    return pipeline


def _check_data(data: DataSpec, evaluation: EvalSpec | None) -> None:
    from tunix_lite.data import reasoning_gym
    from tunix_lite.data.synthetic import DOMAINS

    specs = [key for key in ("train", "validation", "test")
             if reasoning_gym.is_spec(getattr(data, key))]
    for key in specs:
        try:
            reasoning_gym.parse_spec(getattr(data, key))
        except (ValueError, ImportError) as e:
            raise ConfigError(f"data.{key}: {e}") from None
    if data.train is None:
        unknown = sorted(set(data.domains) - set(DOMAINS))
        if unknown or not data.domains:
            raise ConfigError(f"data.domains: {unknown or '[]'} are not synthetic domains; choose from "
                              f"{', '.join(DOMAINS)}")
        if data.weights is not None:
            outside = sorted(set(data.weights) - set(data.domains))
            if outside or any(w < 0 for w in data.weights.values()) or sum(data.weights.values()) <= 0:
                raise ConfigError(f"data.weights: {data.weights} must give the domains in data.domains "
                                  f"non-negative weights with a positive sum" + (f" ({outside} are not in it)"
                                                                                 if outside else ""))
        return
    for key in ("train", "validation", "test", "pairs_train", "pairs_validation"):
        value = getattr(data, key)
        if value is not None and key not in specs and not Path(value).expanduser().exists():
            raise ConfigError(f"data.{key}: no file or directory at {value}")
    if data.validation is None and "train" not in specs:  # a spec's stages draw one from its tasks
        raise ConfigError("data.validation: with your own data.train, give data.validation too")
    if evaluation is not None and data.test is None:
        raise ConfigError("data.test: the evaluation needs held-out records (prompt, answer); set data.test or "
                          "evaluation: null")


def _stage_values(spec: PipelineSpec, data: DataSpec, stage: Stage, model: str, *, check: bool = False) -> dict:
    """The stage's config keys with the pipeline's parts filled in: model, output_dir, data files (while checking,
    before the synthetic files exist, the synthetic source stands in for them)."""
    values = dict(stage.values)
    values |= {"model": model, "output_dir": str(Path(spec.output_dir).expanduser() / stage.name), "overwrite": True}
    if "train_data" not in values:
        train, validation = _data_files(spec, data, stage)
        if check and isinstance(train, Path) and not train.exists():
            train = validation = None
        values |= {"train_data": str(train or "synthetic"), "validation_data": validation and str(validation)}
    return values


def _data_files(spec: PipelineSpec, data: DataSpec, stage: Stage) -> tuple:
    """The stage's (train, validation) sources: Paths, or reasoning_gym specs as written (a None
    validation: drawn from the train spec's tasks)."""
    from tunix_lite.data.reasoning_gym import is_spec

    if data.train is not None:  # your own files, as given
        if stage.uses_pairs:
            if data.pairs_train is None or data.pairs_validation is None:
                raise ConfigError(f"data.pairs_train: stage {stage.name!r} ({stage.algorithm}) trains on preference "
                                  "pairs; set data.pairs_train and data.pairs_validation")
            return Path(data.pairs_train), Path(data.pairs_validation)
        return tuple(s if s is None or is_spec(s) else Path(s)
                     for s in (data.train, data.validation))
    folder = Path(spec.output_dir).expanduser() / "data"
    prefix = "pairs_" if stage.uses_pairs else ""
    return folder / f"{prefix}train.jsonl", folder / f"{prefix}validation.jsonl"


# ----------------------------------------------------------------------------- the session budget


class Budget:
    """The session's wall clock: `left()` seconds (inf without max_minutes)."""

    def __init__(self, max_minutes: float | None):
        self.max_minutes = max_minutes
        self.deadline = time.monotonic() + 60 * max_minutes if max_minutes is not None else math.inf

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def spent(self) -> bool:
        return self.left() <= 0


def step_seconds_lower_bound(config, model_config) -> float:
    """A bound no step can beat: 6 x parameters x the batch's tokens at a FLOP rate above any device of this kind."""
    import jax

    c = model_config
    attention = c.embed_dim * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads)
    params = c.vocab_size * c.embed_dim + c.num_layers * (attention + 3 * c.embed_dim * c.mlp_dim)
    flops = 6 * params * config.batch_size * config.seq_len
    return flops / (CPU_FLOPS if jax.default_backend() == "cpu" else ACCELERATOR_FLOPS)


def check_budget(pipeline: Pipeline, budget_minutes: float | None) -> None:
    """ConfigError when the session's budget cannot fit one step of the next stage to train: the time per step
    (loading and compiling included) measured in an earlier session of this run, else the FLOP bound."""
    if budget_minutes is None:
        return
    from tunix_lite.loading import model_config

    state = _read_state(pipeline)
    for stage in pipeline.stages:
        if _stage_done(pipeline, stage):
            continue
        timing = state.get("timings", {}).get(stage.name)
        if timing and timing.get("steps"):
            need, how = timing["seconds"] / timing["steps"], "measured in an earlier session, loading and " \
                                                             "compiling included"
        else:
            need = step_seconds_lower_bound(stage.config, model_config(pipeline.spec.model))
            how = "a lower bound from its FLOPs"
        if 60 * budget_minutes < need:
            raise ConfigError(f"max_minutes: {budget_minutes:g} ({60 * budget_minutes:.3g} s) is too short for one "
                              f"step of stage {stage.name!r} (at least {need:.3g} s, {how}); ask for at least "
                              f"{math.ceil(need / 60 * 1.5):g} min")
        return


# ----------------------------------------------------------------------------- state on disk


def _write_json(path: Path, value) -> None:
    """Write then rename: a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _read_state(pipeline: Pipeline) -> dict:
    return _read_json(pipeline.root / "pipeline.json") or {}


def _stage_marker(pipeline: Pipeline, stage: Stage) -> dict | None:
    return _read_json(pipeline.stage_dir(stage.name) / "stage.json")


def _stage_done(pipeline: Pipeline, stage: Stage) -> bool:
    marker = _stage_marker(pipeline, stage)
    return marker is not None and marker["steps"] == stage.config.steps


def _source_marker(pipeline: Pipeline, stage: Stage) -> dict | None:
    if stage.source == "base":
        return {"id": "base", "model_dir": pipeline.spec.model}
    source = next(s for s in pipeline.stages if s.name == stage.source)
    return _stage_marker(pipeline, source)


# ----------------------------------------------------------------------------- running


@dataclasses.dataclass
class PipelineResult:
    finished: bool  # False: the session's budget ran out; rerun the same command to continue
    reports: dict  # stage -> ReasoningReport, in order ("base" first)
    table: str  # the per-stage held-out table (markdown)
    output_dir: Path
    seconds: float


def prepare_data(pipeline: Pipeline, say=print) -> None:
    """Write the synthetic data files once (data/*.jsonl): the rebalanced mixture for training, validation and
    test splits, and preference pairs once a stage needs them (a stage added later gets its files then, the others
    stay as they are). Your own files (data.train) are used as they are."""
    data = pipeline.data
    if data.train is not None:
        return
    folder = pipeline.root / "data"
    wanted = dataclasses.asdict(data)
    names = ["train", "validation", "test"]
    if any(s.uses_pairs for s in pipeline.stages):
        names += ["pairs_train", "pairs_validation"]
    if (folder / "spec.json").is_file() and _read_json(folder / "spec.json") != wanted:
        raise ConfigError(f"data: the file's data section changed since {folder} was written; delete {folder} "
                          "(and the stages trained on it) to start over, or restore the section")
    missing = [name for name in names if not (folder / f"{name}.jsonl").is_file()]
    if not missing:
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name in missing:
        rows = _synthetic_split(data, name)
        tmp = folder / f".{name}.jsonl.partial"
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(dict(row)) + "\n")
        os.replace(tmp, folder / f"{name}.jsonl")
        say(f"data: wrote {name} ({len(rows)}) to {folder}")
    _write_json(folder / "spec.json", wanted)


def _synthetic_split(data: DataSpec, name: str):
    """One data file's records, a pure function of the data section."""
    from tunix_lite.data.sft import mix_domains
    from tunix_lite.data.synthetic import make_splits, preference_pairs

    if name.startswith("pairs_"):
        split = name.removeprefix("pairs_")
        n = data.n_pairs if split == "train" else data.n_validation
        return preference_pairs(n, data.seed, domains=data.domains, split=split, style=data.style)
    n = {"train": data.n_train, "validation": data.n_validation, "test": data.n_test}[name]
    if data.tasks == "calculator":
        from tunix_lite.agent import calculator_problems

        return calculator_problems(n, seed=data.seed, split=name)
    if name != "train":
        sizes = (0, n, 0) if name == "validation" else (0, 0, n)
        return make_splits(*sizes, domains=data.domains, seed=data.seed, style=data.style)[name]
    # a pool with enough of every domain for its share, then the weighted mixture drawn from it without repeats
    weights = data.weights or {d: 1.0 for d in data.domains}
    largest = max(weights.values()) / sum(weights.values())
    pool = make_splits(math.ceil(data.n_train * largest) * len(data.domains), 0, 0, domains=data.domains,
                       seed=data.seed, style=data.style)["train"]
    return mix_domains(pool, weights, data.n_train, seed=data.seed)


def _test_records(pipeline: Pipeline) -> list[dict]:
    from tunix_lite.data import reasoning_gym
    from tunix_lite.data.sft import load_records

    source = pipeline.data.test or str(pipeline.root / "data" / "test.jsonl")
    if reasoning_gym.is_spec(source):
        records = reasoning_gym.make_records(source)
    else:
        records = load_records(source)
    n = min(pipeline.evaluation.n_prompts, len(records))
    return [dict(records[i]) for i in range(n)]


def _evaluate(pipeline: Pipeline, name: str, marker: dict, say) -> Any:
    """The held-out evaluation of the model a stage marker names (cached in <name>/eval.json for that marker)."""
    from tunix_lite.evaluation import reward_for
    from tunix_lite.loading import load
    from tunix_lite.reasoning_eval import ReasoningReport, evaluate_reasoning

    path = pipeline.stage_dir(name) / "eval.json"
    cached = _read_json(path)
    spec = pipeline.evaluation
    key = {"model": marker["id"], "evaluation": dataclasses.asdict(spec)}
    if cached is not None and cached.get("key") == key:
        return ReasoningReport.from_json(cached)
    model_dir = marker["model_dir"]
    model, tokenizer = load(model_dir)
    model.eval()
    if pipeline.data.tasks == "calculator":
        from tunix_lite.agent import evaluate_agent

        say(f"[{name}] held-out evaluation: {spec.n_prompts} problems, with and without the calculator")
        start = time.perf_counter()
        summary = evaluate_agent(model, tokenizer, _test_records(pipeline), batch_size=spec.batch_size,
                                 max_new_tokens=spec.max_new_tokens or 24)
        report = ReasoningReport(summary, {}, [], time.perf_counter() - start)
        _write_json(path, report.to_json() | {"key": key})
        return report
    say(f"[{name}] held-out evaluation: {spec.n_prompts} prompts, {spec.samples} samples each")
    records = _test_records(pipeline)
    report = evaluate_reasoning(model, tokenizer, records, samples=spec.samples,
                                temperature=spec.temperature, top_p=spec.top_p, max_new_tokens=spec.max_new_tokens,
                                batch_size=spec.batch_size, scaling=spec.scaling, seed=spec.seed,
                                reward_fn=reward_for(records))
    _write_json(path, report.to_json() | {"key": key})
    return report


def _write_merged(stage_dir: Path, result) -> Path:
    """A LoRA stage's adapters merged into its base (merged/hf): the model the next stage starts from."""
    from tunix_lite.export import export_model

    return export_model(result.model, result.tokenizer, stage_dir / "merged", orbax=False) / "hf"


def _train_stage(pipeline: Pipeline, stage: Stage, budget: Budget, say) -> bool:
    """Train one stage (or continue it); True when it finished. Writes <stage>/stage.json when done."""
    from tunix_lite.training.algorithms import config_class, run

    source = _source_marker(pipeline, stage)
    directory = pipeline.stage_dir(stage.name)
    state = _read_state(pipeline)
    before = _steps_done(directory)
    started_from = state.get("started", {}).get(stage.name)
    if before and started_from is not None and started_from != source["id"]:
        raise ConfigError(f"stage {stage.name!r} has checkpoints from an earlier run of {stage.source!r}; delete "
                          f"{directory} to train it from the new one")
    values = _stage_values(pipeline.spec, pipeline.data, stage, str(source["model_dir"]))
    if budget.max_minutes is not None:
        values["max_minutes"] = max(budget.left() / 60, 1e-3)
    config = config_class(stage.algorithm).from_dict(values)
    state.setdefault("started", {})[stage.name] = source["id"]
    _write_json(pipeline.root / "pipeline.json", state)
    say(f"[{stage.name}] {stage.algorithm} from {stage.source} ({source['model_dir']}), {config.steps} steps")
    start = time.monotonic()
    result = run(config)
    state.setdefault("timings", {})[stage.name] = {"seconds": time.monotonic() - start,
                                                   "steps": max(1, len(result.history) - before)}
    _write_json(pipeline.root / "pipeline.json", state)
    if not result.finished:
        return False
    model_dir = _write_merged(directory, result) if config.lora_rank else directory / "model"
    _write_json(directory / "stage.json", {"id": uuid.uuid4().hex, "from": source["id"], "steps": config.steps,
                                           "model_dir": str(model_dir), "after": result.after})
    return True


def _steps_done(directory: Path) -> int:
    from tunix_lite.training.harness import _checkpoint_steps

    steps = _checkpoint_steps(directory / "checkpoints")
    return steps[-1] if steps else 0


def run_pipeline(pipeline: Pipeline, *, verbose: bool = True) -> PipelineResult:
    """Run (or continue) every stage, its evaluation, the report and the export; see the module docstring."""
    from tunix_lite.reasoning_eval import stage_table, write_report

    def say(*args):
        if verbose:
            print(*args, flush=True)

    start = time.monotonic()
    budget = Budget(pipeline.spec.max_minutes)
    root = pipeline.root
    root.mkdir(parents=True, exist_ok=True)
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline.values, sort_keys=False),
                                        encoding="utf-8")
    prepare_data(pipeline, say)
    reports = {}

    def report():
        write_report(reports, root / "report")
        return stage_table(reports)[0]

    def paused() -> PipelineResult:
        say(f"time budget of {pipeline.spec.max_minutes:g} min used; rerun the same command to continue "
            f"(everything so far is saved in {root})")
        return PipelineResult(False, reports, stage_table(reports)[0], root, time.monotonic() - start)

    if pipeline.evaluation is not None:
        reports["base"] = _evaluate(pipeline, "base", {"id": "base", "model_dir": pipeline.spec.model}, say)
        report()
    trained = False  # a session always trains at least one step (Trainer.fit's deadline), so it makes progress
    for stage in pipeline.stages:
        marker, source = _stage_marker(pipeline, stage), _source_marker(pipeline, stage)
        if marker is not None and marker["from"] != (source or {}).get("id"):
            raise ConfigError(f"stage {stage.name!r} was trained from an earlier run of {stage.source!r}, which has "
                              f"changed since; delete {pipeline.stage_dir(stage.name)} to train it again from the "
                              "new one")
        if not _stage_done(pipeline, stage):
            if trained and budget.spent():
                return paused()
            trained = True
            if not _train_stage(pipeline, stage, budget, say):
                return paused()
        if pipeline.evaluation is not None:
            if budget.spent():
                return paused()
            reports[stage.name] = _evaluate(pipeline, stage.name, _stage_marker(pipeline, stage), say)
            say(report())
    if pipeline.spec.export:
        _export(pipeline, say)
    table = stage_table(reports)[0]
    say(f"done: {root} (report/, export/)")
    return PipelineResult(True, reports, table, root, time.monotonic() - start)


def _export(pipeline: Pipeline, say) -> None:
    from tunix_lite.export import export_model
    from tunix_lite.loading import load

    last = _stage_marker(pipeline, pipeline.stages[-1])
    target = pipeline.root / "export"
    if (_read_json(target / "hf" / "exported_from.json") or {}).get("id") == last["id"]:
        return
    model, tokenizer = load(last["model_dir"])
    export_model(model, tokenizer, target)
    _write_json(target / "hf" / "exported_from.json", {"id": last["id"], "stage": pipeline.stages[-1].name})
    say(f"export: {target}/hf (Hugging Face layout) and {target}/orbax")


def plan(pipeline: Pipeline) -> str:
    """The checked plan, one line per stage: what `tunix-lite run --check` prints."""
    lines = [f"{pipeline.path}: {len(pipeline.stages)} stages into {pipeline.root}, base model {pipeline.spec.model}"]
    for stage in pipeline.stages:
        c = stage.config
        done = " (done)" if _stage_done(pipeline, stage) else ""
        lines.append(f"  {stage.name}: {stage.algorithm} from {stage.source}, {c.steps} steps x {c.batch_size}"
                     f"{', LoRA r' + str(c.lora_rank) if c.lora_rank else ''}{done}")
    if pipeline.evaluation is not None:
        e = pipeline.evaluation
        lines.append(f"  evaluation: {e.n_prompts} held-out prompts x {e.samples} samples after every stage")
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
    if getattr(config, "rollout_mesh", None) is not None:  # GRPO sampling on devices of its own
        from tunix_lite.rl.grpo import split_devices

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
