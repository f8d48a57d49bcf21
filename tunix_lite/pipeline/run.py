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
    prepare_data(pipeline, say)  # writes only the data files that are missing
    # a test set its training data asks is refused here, before anything is overwritten
    seen = _decontaminate(pipeline, say) if pipeline.evaluation is not None else None
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline.values, sort_keys=False),
                                        encoding="utf-8")
    reports = {}
    starts = {stage.name: stage.source for stage in pipeline.stages}  # the row each compares with

    def report():
        write_report(reports, root / "report", starts)
        return stage_table(reports, starts)[0]

    def paused() -> PipelineResult:
        say(f"time budget of {pipeline.spec.max_minutes:g} min used; rerun the same command to "
            f"continue (everything so far is saved in {root})")
        return PipelineResult(False, reports, stage_table(reports, starts)[0], root,
                              time.monotonic() - start)

    if pipeline.evaluation is not None:
        base = {"id": "base", "model_dir": pipeline.spec.model}
        reports["base"] = _evaluate(pipeline, "base", base, seen, say)
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
                                            seen, say)
            say(report())
    if pipeline.spec.export:
        _export(pipeline, say)
    table = stage_table(reports, starts)[0]
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


def _test_source(pipeline: Pipeline) -> str:
    return pipeline.data.test or str(pipeline.root / "data" / "test.jsonl")


def _test_records(pipeline: Pipeline) -> list[dict]:
    """The first evaluation.n_prompts distinct test prompts (each scored once, as `tunix-lite eval`
    scores them: a repeated prompt would count one greedy answer several times)."""
    from tunix_lite.data import reasoning_gym
    from tunix_lite.data.records import load_records
    from tunix_lite.evaluation.accuracy import distinct_prompts

    source = _test_source(pipeline)
    records = (reasoning_gym.make_records(source) if reasoning_gym.is_spec(source)
               else load_records(source))
    return distinct_prompts(records, pipeline.evaluation.n_prompts)


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
    # A LoRA stage's folder is a LoRA run (adapters.safetensors, config.yaml naming the model it
    # started from), which tunix_lite.load reads as that model with the adapters on: a merged copy
    # would cost the whole model's size on disk per stage (10 GB in float32 for Gemma 2 2B)
    model_dir = directory if config.lora_rank else directory / "model"
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


# ----------------------------------------------------------------------------- evaluation, export


def _decontaminate(pipeline: Pipeline, say) -> np.ndarray:
    """[n] bool: which test prompts some training data of the run asks (`seen`): every stage's,
    and its base model's where that is a run whose config names its data
    (`tunix_lite.evaluation.decontamination`). Writes report/decontamination.json (its fields: the
    package docstring). A seen prompt is refused in one line unless evaluation.allow_overlap
    is true; the table then scores the seen and unseen prompts apart."""
    from tunix_lite.evaluation.decontamination import (config_records, keys_of, run_records,
                                                       seen_mask)

    test = _test_records(pipeline)
    base_sources = run_records(pipeline.spec.model)
    lineage = {"base": seen_mask(test, keys_of(base_sources))}
    stages = {}
    for stage in pipeline.stages:
        values = stage_values(pipeline.spec, stage, pipeline.spec.model)
        data = (str(prompt_sources(pipeline.spec)[0]) if stage.on_policy_pairs is not None
                else values["train_data"])  # sampled pairs ask the training prompts
        config = dataclasses.asdict(stage.config) | {"train_data": data,
                                                     "algorithm": stage.algorithm}
        label, records = config_records(pipeline.stage_dir(stage.name), config)
        own = seen_mask(test, keys_of([(label, records)]))
        lineage[stage.name] = own | lineage[stage.source]
        stages[stage.name] = {"from": stage.source, "data": label, "n_records": len(records),
                              "n_seen": int(own.sum()),
                              "n_seen_through": int(lineage[stage.name].sum())}
    seen = np.logical_or.reduce(list(lineage.values()))
    allowed = pipeline.evaluation.allow_overlap
    if seen.any():
        counts = {"base model": int(lineage["base"].sum())} | {
            name: row["n_seen"] for name, row in stages.items()}
        where = ", ".join(f"{name}'s {n}" for name, n in counts.items() if n)
        if not allowed:
            raise ConfigError(
                f"{pipeline.path}: data.test: {int(seen.sum())} of the {seen.size} test prompts "
                f"occur in the training data ({where}); hold them out by construction (split=test "
                "in a reasoning_gym spec, PATH?split=test for a records file, the synthetic test "
                "split) or set evaluation.allow_overlap: true to score them apart as seen")
        say(f"evaluation: {int(seen.sum())} of the {seen.size} test prompts are training prompts "
            f"({where}); the table scores them apart (seen) from the other "
            f"{int((~seen).sum())} (unseen)")
    write_json(pipeline.root / "report" / "decontamination.json", {
        "test": _test_source(pipeline), "n_test": len(test), "n_seen": int(seen.sum()),
        "n_unseen": int((~seen).sum()), "seen": np.flatnonzero(seen).tolist(),
        "allow_overlap": allowed,
        "base": {"model": pipeline.spec.model, "data": [label for label, _ in base_sources],
                 "n_seen": int(lineage["base"].sum())},
        "stages": stages})
    return seen


def _with_seen(report, seen: np.ndarray):
    """The report with its prompts' `seen` mask, and n_seen, n_unseen and greedy accuracy on each
    part ("unseen"; "seen" where some prompts were trained on) in its summary."""
    right = np.asarray(report.greedy_right or [], float)
    if right.size == seen.size:
        report.seen_prompts = seen.astype(int).tolist()
        report.summary |= {"n_seen": int(seen.sum()), "n_unseen": int((~seen).sum())}
        if not seen.all():
            report.summary["unseen"] = float(right[~seen].mean())
        if seen.any():
            report.summary["seen"] = float(right[seen].mean())
    return report


def _evaluate(pipeline: Pipeline, name: str, marker: dict, seen: np.ndarray, say) -> Any:
    """The held-out evaluation of the model a stage marker names (cached in <name>/eval.json for
    that marker), with its accuracy on the unseen test prompts and on the `seen` ones."""
    from tunix_lite.loading import load
    from tunix_lite.evaluation.reasoning import ReasoningReport, evaluate_reasoning
    from tunix_lite.rewards.judge import reward_for

    path = pipeline.stage_dir(name) / "eval.json"
    cached = read_json(path)
    spec = pipeline.evaluation
    # allow_overlap changes what is refused, not what is measured; "distinct": each test prompt is
    # scored once (an evaluation from before, which counted repeats, is redone)
    settings = {k: v for k, v in dataclasses.asdict(spec).items() if k != "allow_overlap"}
    key = {"model": marker["id"], "evaluation": settings, "prompts": "distinct"}
    if cached is not None and cached.get("key") == key and "greedy_right" in cached:
        # (one without per-prompt verdicts is redone)
        return _with_seen(ReasoningReport.from_json(cached), seen)
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
    return _with_seen(report, seen)


def _export(pipeline: Pipeline, say) -> None:
    import jax.numpy as jnp

    from tunix_lite.export import export_model
    from tunix_lite.loading import load

    last = stage_marker(pipeline, pipeline.stages[-1])
    target = pipeline.root / "export"
    written = {"id": last["id"], "stage": pipeline.stages[-1].name,
               "dtype": pipeline.spec.export_dtype}
    if (read_json(target / "hf" / "exported_from.json") or {}) == written:
        return
    model, tokenizer = load(last["model_dir"])
    export_model(model, tokenizer, target, dtype=jnp.dtype(pipeline.spec.export_dtype))
    write_json(target / "hf" / "exported_from.json", written)
    say(f"export: {target}/hf (Hugging Face layout) and {target}/orbax")
