"""Running a checked pipeline: the data files once, per stage its training (resumed where a
checkpoint is), its held-out evaluation and the report, then the export. Every piece is written
atomically and skipped on a rerun once done."""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tunix_lite.pipeline.spec import (DataSpec, Pipeline, Stage, on_policy_folder, prompt_sources,
                                      stage_values)
from tunix_lite.pipeline.state import (Budget, read_json, read_state, source_marker, stage_done,
                                       stage_marker, steps_done, write_json, write_jsonl)
from tunix_lite.training.config import ConfigError


@dataclasses.dataclass
class PipelineResult:
    finished: bool  # False: the session's budget ran out; rerun the same command to continue
    reports: dict  # stage -> ReasoningReport, in order ("base" first)
    table: str  # the per-stage held-out table (markdown)
    output_dir: Path
    seconds: float


def run_pipeline(pipeline: Pipeline, *, verbose: bool = True) -> PipelineResult:
    """Run (or continue) every stage, its evaluation, the report and the export; see
    tunix_lite.pipeline's docstring."""
    from tunix_lite.evaluation.reports import stage_table, write_report

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
        say(f"time budget of {pipeline.spec.max_minutes:g} min used; rerun the same command to "
            f"continue (everything so far is saved in {root})")
        return PipelineResult(False, reports, stage_table(reports)[0], root,
                              time.monotonic() - start)

    if pipeline.evaluation is not None:
        unseen = _unseen_test_prompts(pipeline, say)
        base = {"id": "base", "model_dir": pipeline.spec.model}
        reports["base"] = _evaluate(pipeline, "base", base, unseen, say)
        report()
    # a session always trains at least one step (Trainer.fit's deadline), so it makes progress
    trained = False
    for stage in pipeline.stages:
        marker, source = stage_marker(pipeline, stage), source_marker(pipeline, stage)
        if marker is not None and marker["from"] != (source or {}).get("id"):
            raise ConfigError(f"stage {stage.name!r} was trained from an earlier run of "
                              f"{stage.source!r}, which has changed since; delete "
                              f"{pipeline.stage_dir(stage.name)} to train it again from the new "
                              "one")
        if not stage_done(pipeline, stage):
            if trained and budget.spent():
                return paused()
            trained = True
            if not _train_stage(pipeline, stage, budget, say):
                return paused()
        if pipeline.evaluation is not None:
            if budget.spent():
                return paused()
            reports[stage.name] = _evaluate(pipeline, stage.name, stage_marker(pipeline, stage),
                                            unseen, say)
            say(report())
    if pipeline.spec.export:
        _export(pipeline, say)
    table = stage_table(reports)[0]
    say(f"done: {root} (report/{', export/' if pipeline.spec.export else ''})")
    return PipelineResult(True, reports, table, root, time.monotonic() - start)


# ----------------------------------------------------------------------------- data


def prepare_data(pipeline: Pipeline, say=print) -> None:
    """Write the synthetic data files once (data/*.jsonl): the rebalanced mixture for training,
    validation and test splits, and preference pairs once a stage needs them (a stage added later
    gets its files then, the others stay as they are). Your own files (data.train) are used as they
    are."""
    data = pipeline.data
    if data.train is not None:
        return
    folder = pipeline.root / "data"
    wanted = dataclasses.asdict(data)
    names = ["train", "validation", "test"]
    if any(s.uses_data_pairs for s in pipeline.stages):
        names += ["pairs_train", "pairs_validation"]
    if (folder / "spec.json").is_file() and read_json(folder / "spec.json") != wanted:
        raise ConfigError(f"data: the file's data section changed since {folder} was written; "
                          f"delete {folder} (and the stages trained on it) to start over, or "
                          "restore the section")
    missing = [name for name in names if not (folder / f"{name}.jsonl").is_file()]
    if not missing:
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name in missing:
        rows = _synthetic_split(data, name)
        write_jsonl(folder / f"{name}.jsonl", rows)
        say(f"data: wrote {name} ({len(rows)}) to {folder}")
    write_json(folder / "spec.json", wanted)


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
        from tunix_lite.rl.agent import calculator_problems

        return calculator_problems(n, seed=data.seed, split=name)
    if name != "train":
        sizes = (0, n, 0) if name == "validation" else (0, 0, n)
        return make_splits(*sizes, domains=data.domains, seed=data.seed, style=data.style)[name]
    # a pool with enough of every domain for its share, then the weighted mixture drawn from it
    # without repeats
    weights = data.weights or {d: 1.0 for d in data.domains}
    largest = max(weights.values()) / sum(weights.values())
    pool = make_splits(math.ceil(data.n_train * largest) * len(data.domains), 0, 0,
                       domains=data.domains, seed=data.seed, style=data.style)["train"]
    return mix_domains(pool, weights, data.n_train, seed=data.seed)


def _test_records(pipeline: Pipeline) -> list[dict]:
    from tunix_lite.data import reasoning_gym
    from tunix_lite.data.records import load_records
    from tunix_lite.evaluation.accuracy import distinct_prompts

    source = pipeline.data.test or str(pipeline.root / "data" / "test.jsonl")
    if reasoning_gym.is_spec(source):  # each prompt once, as `tunix-lite eval` scores them
        records = distinct_prompts(reasoning_gym.make_records(source))
    else:
        records = load_records(source)
    n = min(pipeline.evaluation.n_prompts, len(records))
    return [dict(records[i]) for i in range(n)]


# ----------------------------------------------------------------------------- stages


def _train_stage(pipeline: Pipeline, stage: Stage, budget: Budget, say) -> bool:
    """Train one stage (or continue it); True when it finished. Writes <stage>/stage.json when
    done."""
    from tunix_lite.training.algorithms import config_class, run

    source = source_marker(pipeline, stage)
    directory = pipeline.stage_dir(stage.name)
    state = read_state(pipeline)
    before = steps_done(directory)
    started_from = state.get("started", {}).get(stage.name)
    if before and started_from is not None and started_from != source["id"]:
        raise ConfigError(f"stage {stage.name!r} has checkpoints from an earlier run of "
                          f"{stage.source!r}; delete {directory} to train it from the new one")
    if stage.on_policy_pairs is not None and not before:
        _sample_pairs(pipeline, stage, source, say)
    values = stage_values(pipeline.spec, stage, str(source["model_dir"]))
    if budget.max_minutes is not None:
        values["max_minutes"] = max(budget.left() / 60, 1e-3)
    config = config_class(stage.algorithm).from_dict(values)
    state.setdefault("started", {})[stage.name] = source["id"]
    write_json(pipeline.root / "pipeline.json", state)
    say(f"[{stage.name}] {stage.algorithm} from {stage.source} ({source['model_dir']}), "
        f"{config.steps} steps")
    start = time.monotonic()
    result = run(config)
    state.setdefault("timings", {})[stage.name] = {"seconds": time.monotonic() - start,
                                                   "steps": max(1, len(result.history) - before)}
    write_json(pipeline.root / "pipeline.json", state)
    if not result.finished:
        return False
    model_dir = _write_merged(directory, result) if config.lora_rank else directory / "model"
    write_json(directory / "stage.json", {"id": uuid.uuid4().hex, "from": source["id"],
                                          "steps": config.steps, "model_dir": str(model_dir),
                                          "after": result.after})
    return True


def _sample_pairs(pipeline: Pipeline, stage: Stage, source: dict, say) -> None:
    """pairs/<stage>/{train,validation}.jsonl: preference pairs sampled from the model the stage
    starts from, on the pipeline's training and validation prompts, judged by their verifier
    (tunix_lite.preference.on_policy). Written once per source model; counts.json says how many
    prompts gave a pair."""
    from tunix_lite.evaluation.accuracy import distinct_prompts
    from tunix_lite.loading import load
    from tunix_lite.preference.on_policy import on_policy_pairs
    from tunix_lite.training.inputs import load_prompt_records

    folder = on_policy_folder(pipeline.spec, stage)
    settings = stage.on_policy_pairs
    key = {"from": source["id"], "settings": dataclasses.asdict(settings)}
    if (read_json(folder / "counts.json") or {}).get("key") == key:
        return
    records = load_prompt_records(*prompt_sources(pipeline.spec), pipeline.data.n_validation)
    model, tokenizer = load(source["model_dir"])
    model.eval()
    counts = {}
    for split, rows in zip(("train", "validation"), records):
        rows = distinct_prompts(rows, settings.prompts if split == "train" else None)
        say(f"[{stage.name}] on-policy pairs: {len(rows)} {split} prompts x {settings.samples} "
            f"samples from {stage.source}")
        pairs, counts[split] = on_policy_pairs(
            model, tokenizer, rows, greedy=False, samples=settings.samples,
            temperature=settings.temperature,
            max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
            seed=settings.seed + (split == "validation"))
        if not pairs:
            c = counts[split]
            raise ConfigError(f"stage {stage.name!r}: on_policy_pairs: none of {c['prompts']} "
                              f"{split} prompts had both a right and a wrong sample "
                              f"({c['all_right']} all right, {c['all_wrong']} all wrong); raise "
                              "samples or prompts, or start the stage from another model")
        write_jsonl(folder / f"{split}.jsonl", pairs)
        say(f"[{stage.name}] {split}: {len(pairs)} pairs ({counts[split]['all_right']} prompts "
            f"all right, {counts[split]['all_wrong']} all wrong)")
    write_json(folder / "counts.json", counts | {"key": key})


def _write_merged(stage_dir: Path, result) -> Path:
    """A LoRA stage's adapters merged into its base (merged/hf): the model the next stage starts
    from."""
    from tunix_lite.export import export_model

    return export_model(result.model, result.tokenizer, stage_dir / "merged", orbax=False) / "hf"


# ----------------------------------------------------------------------------- evaluation, export


def _unseen_test_prompts(pipeline: Pipeline, say) -> np.ndarray:
    """[n_prompts] bool: which test prompts no stage trains on. A task with few distinct questions
    (one-digit products: 100) repeats them under any seed, so a test seed alone does not hold a
    prompt out; the table then adds the accuracy on the unseen ones."""
    from tunix_lite.data import reasoning_gym
    from tunix_lite.data.records import load_records

    sources = set()
    for stage in pipeline.stages:
        if stage.on_policy_pairs is not None:  # its pairs' prompts come from the training prompts
            sources.add(str(prompt_sources(pipeline.spec)[0]))
        else:
            sources.add(stage_values(pipeline.spec, stage, pipeline.spec.model)["train_data"])
    trained = set()
    for source in sources:
        if reasoning_gym.is_spec(source):
            trained |= {r["prompt"] for r in reasoning_gym.make_records(source)}
        else:
            trained |= set(load_records(source)["prompt"])
    unseen = np.array([r["prompt"] not in trained for r in _test_records(pipeline)])
    if not unseen.all():
        say(f"evaluation: {int((~unseen).sum())} of the {unseen.size} test prompts are also "
            "training prompts (a task with few distinct questions repeats them); the table's "
            f"unseen column scores the other {int(unseen.sum())}")
    return unseen


def _with_unseen(report, unseen: np.ndarray):
    """The report with summary["unseen"] (greedy accuracy on the unseen prompts) and "n_unseen"."""
    right = np.asarray(report.greedy_right or [], float)
    if right.size == unseen.size and unseen.any():
        report.summary |= {"unseen": float(right[unseen].mean()), "n_unseen": int(unseen.sum())}
    return report


def _evaluate(pipeline: Pipeline, name: str, marker: dict, unseen: np.ndarray, say) -> Any:
    """The held-out evaluation of the model a stage marker names (cached in <name>/eval.json for
    that marker), with its accuracy on the `unseen` test prompts."""
    from tunix_lite.loading import load
    from tunix_lite.evaluation.reasoning import ReasoningReport, evaluate_reasoning
    from tunix_lite.rewards.judge import reward_for

    path = pipeline.stage_dir(name) / "eval.json"
    cached = read_json(path)
    spec = pipeline.evaluation
    key = {"model": marker["id"], "evaluation": dataclasses.asdict(spec)}
    if cached is not None and cached.get("key") == key and "greedy_right" in cached:
        # (one without per-prompt verdicts is redone)
        return _with_unseen(ReasoningReport.from_json(cached), unseen)
    model, tokenizer = load(marker["model_dir"])
    model.eval()
    records = _test_records(pipeline)
    start = time.perf_counter()
    if pipeline.data.tasks == "calculator":
        from tunix_lite.rl.agent import evaluate_agent

        say(f"[{name}] held-out evaluation: {spec.n_prompts} problems, with and without the "
            "calculator")
        summary = evaluate_agent(model, tokenizer, records, batch_size=spec.batch_size,
                                 max_new_tokens=spec.max_new_tokens or 24)
        report = ReasoningReport(summary, {}, [], time.perf_counter() - start)
    else:
        say(f"[{name}] held-out evaluation: {spec.n_prompts} prompts, {spec.samples} samples each")
        report = evaluate_reasoning(model, tokenizer, records, samples=spec.samples,
                                    temperature=spec.temperature, top_p=spec.top_p,
                                    max_new_tokens=spec.max_new_tokens,
                                    batch_size=spec.batch_size, scaling=spec.scaling,
                                    seed=spec.seed, reward_fn=reward_for(records))
    write_json(path, report.to_json() | {"key": key})
    return _with_unseen(report, unseen)


def _export(pipeline: Pipeline, say) -> None:
    from tunix_lite.export import export_model
    from tunix_lite.loading import load

    last = stage_marker(pipeline, pipeline.stages[-1])
    target = pipeline.root / "export"
    if (read_json(target / "hf" / "exported_from.json") or {}).get("id") == last["id"]:
        return
    model, tokenizer = load(last["model_dir"])
    export_model(model, tokenizer, target)
    write_json(target / "hf" / "exported_from.json",
               {"id": last["id"], "stage": pipeline.stages[-1].name})
    say(f"export: {target}/hf (Hugging Face layout) and {target}/orbax")
