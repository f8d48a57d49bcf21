"""The run harness every algorithm's driver shares: outputs, resume, evaluation before/after, export.

    run = Run(config)                                   # checks the config and output_dir before any compute
    model, tokenizer = build_model(config)              # the model, adapters and precision the config asks for
    ...                                                 # the algorithm's own data and loss
    result = run.train(model, tokenizer, loss_fn, batches.stream, eval_fn, report=report)

What `Run.train` does with an output_dir:
- config.yaml holds the config the run started with; metrics.jsonl one line per step; checkpoints/<step>/ the
  model's trained variables (+ RNG state), the optimizer state and the history; scores.json the evaluation before
  and after; model/ (full fine-tuning: a Hugging Face-layout checkpoint with the tokenizer) or adapters.safetensors
  (LoRA), each written under a temporary name and renamed, so an interrupted export never looks complete.
- `max_minutes` is a wall-clock budget: when it runs out, the step in flight finishes, a checkpoint is saved and
  `train` returns with `finished=False` (no final evaluation, no export); rerunning the same command continues
  from that checkpoint, so a long run can span several notebook sessions.
- Rerunning the same command resumes from the latest checkpoint. A config that would change the run's trajectory
  (model, data, batch size, seed, adapters...) is refused before anything is written, with the field and both
  values; `steps` may grow. A directory with an earlier run but no checkpoint is refused unless `overwrite`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from flax import nnx

from tunix_lite.training.config import ConfigError
from tunix_lite.training.trainer import LossFn, Trainer, adamw_cosine


@dataclasses.dataclass
class RunResult:
    model: nnx.Module
    tokenizer: Any
    history: list[dict]
    before: dict  # evaluation before training
    after: dict  # and after
    data_report: str
    seconds: float
    finished: bool = True  # False: the time budget ran out first; rerun to continue from the checkpoint


def build_model(config):
    """The model to train: loaded by name or path, with LoRA/QLoRA and the compute options applied.
    The model's context length is checked against seq_len before the weights are read."""
    from tunix_lite.loading import load, model_config
    from tunix_lite.lora import apply_lora
    from tunix_lite.models import set_training_options

    check_against_model(config, model_config(config.model))
    model, tokenizer = load(config.model)
    check_against_model(config, model.config)
    if config.lora_rank:
        apply_lora(model, rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout,
                   quantize=config.quantize, rngs=nnx.Rngs(config.seed))
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


def _checkpoint_steps(directory: Path) -> list[int]:
    """Steps with a checkpoint folder, read without starting Orbax."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def _writable(path: Path) -> None:
    """ConfigError unless `path` is (or can be created as) a writable directory."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"output_dir: {path} cannot be created: {probe} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"output_dir: {probe} is not writable; choose another output_dir")


def _write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """write(tmp) then rename tmp -> path (a file or a directory), replacing what was there."""
    tmp = path.with_name(f".{path.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    write(tmp)
    if path.is_dir():
        shutil.rmtree(path)
    os.replace(tmp, path)


class Run:
    """One training run of any algorithm; see the module docstring."""

    def __init__(self, config, *, verbose: bool = True):
        self.config, self.verbose = config, verbose
        self.start = time.perf_counter()
        self.deadline = time.monotonic() + 60 * config.max_minutes if config.max_minutes is not None else None
        self.out = Path(config.output_dir).expanduser() if config.output_dir else None
        self.resume_from = 0
        if self.out is not None:
            self._check_output_dir()

    def say(self, *args) -> None:
        if self.verbose:
            print(*args, flush=True)

    def _check_output_dir(self) -> None:
        out, config = self.out, self.config
        _writable(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"output_dir: {out} is a file")
        steps = _checkpoint_steps(out / "checkpoints")
        if steps:
            saved_file = out / "config.yaml"
            if not saved_file.is_file():
                raise ConfigError(f"output_dir: {out} holds checkpoints but no config.yaml to check them against; "
                                  "choose another output_dir")
            saved = yaml.safe_load(saved_file.read_text(encoding="utf-8")) or {}
            conflict = config.resume_conflict(saved)
            if saved.get("algorithm", config.algorithm) != config.algorithm:
                conflict = f"algorithm: the checkpointed run is {saved['algorithm']!r}, this config is {config.algorithm!r}"
            if conflict:
                raise ConfigError(f"cannot resume {out}: {conflict}. Use another output_dir for a different run")
            if config.steps < steps[-1]:
                raise ConfigError(f"steps: {config.steps} is fewer than the {steps[-1]} steps already done in {out}; "
                                  f"ask for at least {steps[-1]}")
            self.resume_from = steps[-1]
        elif out.is_dir() and any(out.iterdir()):
            if not config.overwrite:
                found = ", ".join(sorted(p.name for p in out.iterdir())[:5])
                raise ConfigError(f"output_dir: {out} already holds an earlier run without checkpoints ({found}); "
                                  "nothing to resume from. Choose another output_dir, delete it, or set "
                                  "overwrite: true to start over")
            self.say(f"{out}: starting over (overwrite: true)")
            shutil.rmtree(out)

    def train(self, model: nnx.Module, tokenizer, loss_fn: LossFn, batches: Callable[[int], Iterable[dict]],
              eval_fn: Callable[[nnx.Module], dict] | None, *, frozen=None, wrt=None, report: str = "",
              export: bool = True, desc: str | None = None) -> RunResult:
        """Train `model` for config.steps steps on batches(start_step), evaluating before, every eval_every
        steps and after; with an output_dir, log, checkpoint, resume and export. Returns the RunResult."""
        config = self.config
        wrt = wrt if wrt is not None else trained_variables(config)
        tx = adamw_cosine(config.learning_rate, config.steps, warmup_steps=config.warmup_steps,
                          weight_decay=config.weight_decay, clip_norm=config.clip_norm)
        trainer = Trainer(model, tx, loss_fn, wrt=wrt, micro_batches=config.micro_batches, frozen=frozen)

        def evaluate(model):
            model.eval()  # dropout off while measuring
            try:
                return eval_fn(model)
            finally:
                model.train()

        checkpoints, loggers, before = None, [], None
        try:
            if self.out is not None:
                checkpoints, loggers = self._open_outputs(trainer, wrt)
                if self.resume_from:
                    meta = trainer.restore(checkpoints)
                    before = meta.get("before")
                    self.say(f"resumed {self.out} at step {meta['step']}")
            if before is None and eval_fn is not None:
                before = evaluate(model)
            self.say("before: " + _fmt(before or {}))
            trainer.fit(batches(trainer.steps_done), config.steps - trainer.steps_done, log_every=config.log_every,
                        desc=desc or config.algorithm, eval_fn=evaluate if eval_fn else None,
                        eval_every=config.eval_every, checkpoints=checkpoints, loggers=loggers,
                        meta=lambda: {"before": before}, deadline=self.deadline)
        finally:
            if checkpoints is not None:
                checkpoints.close()
        history = trainer.history
        if trainer.steps_done < config.steps and self.deadline is not None and time.monotonic() >= self.deadline:
            self.say(f"time budget of {config.max_minutes:g} min used at step {trainer.steps_done} of {config.steps}; "
                     f"checkpoint saved in {self.out}: rerun the same command to continue")
            model.eval()
            return RunResult(model, tokenizer, history, before or {}, {}, report, time.perf_counter() - self.start,
                             finished=False)
        last = history[-1] if history else {}
        after = {k.removeprefix("eval_"): v for k, v in last.items() if k.startswith("eval_")}
        if not after and eval_fn is not None:  # nothing trained in this call (a finished run resumed)
            after = evaluate(model)
        self.say("after:  " + _fmt(after))
        model.eval()
        if self.out is not None and export:
            self._export(model, tokenizer, before or {}, after)
        return RunResult(model, tokenizer, history, before or {}, after, report, time.perf_counter() - self.start)

    def _open_outputs(self, trainer: Trainer, wrt):
        from tunix_lite.training.metrics_log import JsonlLogger, TensorBoardLogger

        out, config = self.out, self.config
        out.mkdir(parents=True, exist_ok=True)
        if not self.resume_from:
            (out / "config.yaml").write_text(config.to_yaml(), encoding="utf-8")
        metrics = JsonlLogger(out / "metrics.jsonl", keep_through=self.resume_from)
        loggers = [metrics] + ([TensorBoardLogger(out / "tensorboard")] if config.tensorboard else [])
        checkpoints = None
        if config.checkpoint_every:
            from tunix_lite.training.checkpoint import Checkpoints

            # what trains plus RNG state (LoRA dropout), so a resumed run continues bit for bit
            checkpoints = Checkpoints(out / "checkpoints", every=config.checkpoint_every,
                                      keep=config.keep_checkpoints, state_filter=nnx.Any(wrt, nnx.RngState))
        elif self.resume_from:
            raise ConfigError(f"checkpoint_every: {out} holds checkpoints; keep checkpoint_every > 0 to resume them")
        return checkpoints, loggers

    def _export(self, model, tokenizer, before: dict, after: dict) -> None:
        out = self.out
        if self.config.lora_rank:
            from tunix_lite.lora import save_adapters

            _write_atomically(out / "adapters.safetensors", lambda tmp: save_adapters(model, tmp))
        else:
            from tunix_lite.weights.hf import save_hf_model

            def write_model(tmp: Path):
                save_hf_model(model, tmp)
                if hasattr(tokenizer, "save"):
                    tokenizer.save(tmp / "tokenizer.model")

            _write_atomically(out / "model", write_model)
        _write_atomically(out / "scores.json", lambda tmp: tmp.write_text(
            json.dumps({"before": before, "after": after}, indent=1) + "\n", encoding="utf-8"))
        self.say(f"wrote {out}")


def _fmt(metrics: dict) -> str:
    keys = [k for k in metrics if "/" not in k]
    return "  ".join(f"{k} {metrics[k]:.3f}" for k in keys) or "(no evaluation)"
