"""The run harness every algorithm's driver shares: outputs, resume, evaluation before/after,
export.

    run = Run(config)                       # checks the config and output_dir before any compute
    model, tokenizer = build_model(config)  # tunix_lite.training.inputs: model and data
    ...                                     # the algorithm's own data and loss
    result = run.train(model, tokenizer, loss_fn, batches.stream, eval_fn, report=report)

What `Run.train` does with an output_dir:
- config.yaml holds the config the run started with; metrics.jsonl one line per step;
  checkpoints/<step>/ the model's trained variables (+ RNG state), the optimizer state and the
  history; scores.json the evaluation before and after; model/ (full fine-tuning: a Hugging
  Face-layout checkpoint with the tokenizer) or adapters.safetensors (LoRA), each written under a
  temporary name and renamed, so an interrupted export never looks complete.
- `mesh:` places the model (and `frozen`) on a device mesh and splits every batch over it
  (tunix_lite.sharding); with several processes (`initialize_distributed`: TPU pods, SLURM,
  JAX_COORDINATOR_ADDRESS) every process runs the same command, process 0 alone prints, logs and
  exports, and every process writes its shards of each checkpoint. A run may resume on another mesh
  shape.
- `max_minutes` is a wall-clock budget: when it runs out, the step in flight finishes, a checkpoint
  is saved and `train` returns with `finished=False` (no final evaluation, no export); rerunning the
  same command continues from that checkpoint, so a long run can span several notebook sessions.
- Rerunning the same command resumes from the latest checkpoint. A config that would change the
  run's trajectory (model, data, batch size, seed, adapters...) is refused before anything is
  written, with the field and both values; `steps` may grow. The files a config names (a data file,
  a model directory) are fingerprinted in inputs.json, so a file changed under the same name is
  refused too. A directory with an earlier run but no checkpoint is refused unless `overwrite` (the
  earlier run is deleted only once training starts).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jax
import yaml
from flax import nnx

from tunix_lite import sharding
from tunix_lite.data.records import split_source
from tunix_lite.training.config import ConfigError, check_mesh
from tunix_lite.training.inputs import trained_variables
from tunix_lite.training.trainer import LossFn, Trainer, adamw_cosine

if typing.TYPE_CHECKING:  # orbax is a slow import; only checkpointing runs need it
    from tunix_lite.training.checkpoint import Checkpoints, UnreadableCheckpoint


@dataclasses.dataclass
class RunResult:
    model: nnx.Module
    tokenizer: Any
    history: list[dict]
    before: dict  # evaluation before training
    after: dict  # and after
    data_report: str
    seconds: float
    # False: the time budget ran out first; rerun to continue from the checkpoint
    finished: bool = True


def checkpoint_steps(directory: Path) -> list[int]:
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


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """write(tmp) then rename tmp -> path (a file or a directory), replacing what was there. An
    interruption leaves the old `path` (or none) and hidden .partial / .old names, never a
    half-written `path`."""
    tmp, old = path.with_name(f".{path.name}.partial"), path.with_name(f".{path.name}.old")
    _remove(tmp)
    write(tmp)
    # a directory cannot be renamed onto a non-empty one: move the old one aside first
    if path.is_dir():
        _remove(old)
        os.replace(path, old)
    os.replace(tmp, path)
    _remove(old)


INPUTS_FILE = "inputs.json"
RESUME_FROM_INTACT = "rerun with --resume-from-intact (config key resume_from_intact: true)"


def _sha256(path: Path) -> str:
    """Of a file's bytes, or of a directory's files (relative names and bytes, in sorted order)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def input_fingerprints(config) -> dict[str, dict]:
    """{key: {"path", "sha256"}} for each trajectory-setting config value that names a local file or
    directory (train_data, validation_data, a model directory, ...): what a resumed run checks its
    inputs against."""
    found, hints = {}, typing.get_type_hints(type(config))
    for name, f in config.fields().items():
        value = getattr(config, name)
        if f.metadata["resume"] != "same" or hints[name] not in (str, str | None) or not value:
            continue
        try:
            path = Path(split_source(value)[0]).expanduser()  # a file's side of the split: the file
            exists = path.exists()
        # no file can have this name (a long reasoning_gym spec), or it is no records file with a
        # side of the content split: the value says it all
        except (OSError, ValueError):
            continue
        if exists:
            found[name] = {"path": str(path.absolute()), "sha256": _sha256(path)}
    return found


class Run:
    """One training run of any algorithm; see the module docstring."""

    def __init__(self, config, *, verbose: bool = True):
        # before anything touches a device; nothing happens on one machine
        sharding.initialize_distributed()
        self.config, self.verbose = config, verbose and sharding.is_main_process()
        self.start = time.perf_counter()
        self.deadline = (time.monotonic() + 60 * config.max_minutes
                         if config.max_minutes is not None else None)
        self.out = Path(config.output_dir).expanduser() if config.output_dir else None
        self.resume_from = 0
        # overwrite an earlier run: deleted when training starts, not before
        self.start_over = False
        # the devices `mesh:` spans (None: all; an RL run may keep some for its rollouts)
        self.devices = None
        self.inputs = input_fingerprints(config) if self.out is not None else {}
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
        steps = checkpoint_steps(out / "checkpoints")
        if steps:
            saved_file = out / "config.yaml"
            if not saved_file.is_file():
                raise ConfigError(f"output_dir: {out} holds checkpoints but no config.yaml to "
                                  "check them against; choose another output_dir")
            saved = yaml.safe_load(saved_file.read_text(encoding="utf-8")) or {}
            conflict = config.resume_conflict(saved)
            if saved.get("algorithm", config.algorithm) != config.algorithm:
                conflict = (f"algorithm: the checkpointed run is {saved['algorithm']!r}, this "
                            f"config is {config.algorithm!r}")
            conflict = conflict or self._changed_input(out / INPUTS_FILE)
            if conflict:
                raise ConfigError(f"cannot resume {out}: {conflict}. Use another output_dir for a "
                                  "different run")
            if not config.checkpoint_every:
                raise ConfigError(f"checkpoint_every: {out} holds checkpoints; keep "
                                  "checkpoint_every > 0 to resume them")
            if config.steps < steps[-1]:
                raise ConfigError(f"steps: {config.steps} is fewer than the {steps[-1]} steps "
                                  f"already done in {out}; ask for at least {steps[-1]}")
            self.resume_from = steps[-1]
        elif out.is_dir() and any(out.iterdir()):
            if not config.overwrite:
                found = ", ".join(sorted(p.name for p in out.iterdir())[:5])
                raise ConfigError(f"output_dir: {out} already holds an earlier run without "
                                  f"checkpoints ({found}); nothing to resume from. Choose another "
                                  "output_dir, delete it, or set overwrite: true to start over")
            self.say(f"{out}: starting over (overwrite: true); the earlier run is deleted when "
                     "training starts")
            self.start_over = True

    def _changed_input(self, saved_file: Path) -> str | None:
        """Which input file changed since the checkpointed run wrote `saved_file` (None: none did,
        or unknown)."""
        if not saved_file.is_file():
            return None
        saved = json.loads(saved_file.read_text(encoding="utf-8"))
        for name, before in saved.items():
            now = self.inputs.get(name)
            if now is None:
                return f"{name}: {before['path']} no longer exists"
            if now["sha256"] != before["sha256"]:
                return (f"{name}: {now['path']} changed since the checkpointed run (sha256 "
                        f"{before['sha256'][:12]} then, {now['sha256'][:12]} now)")
        return None

    def train(self, model: nnx.Module, tokenizer, loss_fn: LossFn,
              batches: Callable[[int], Iterable[dict]],
              eval_fn: Callable[[nnx.Module], dict] | None, *, frozen=None, wrt=None,
              report: str = "", export: bool = True, desc: str | None = None,
              host_metrics: Callable[[int], dict] | None = None,
              show: Sequence[str] = ("loss",),
              export_model: nnx.Module | None = None) -> RunResult:
        """Train `model` for config.steps steps on batches(start_step), evaluating before, every
        eval_every steps and after; with an output_dir, log, checkpoint, resume and export. Returns
        the RunResult. host_metrics and show go to Trainer.fit; export_model: what to export when it
        is not `model` itself (PPO trains the policy and its value head as one module and exports
        the policy)."""
        config = self.config
        wrt = wrt if wrt is not None else trained_variables(config)
        tx = adamw_cosine(config.learning_rate, config.steps, warmup_steps=config.warmup_steps,
                          weight_decay=config.weight_decay, clip_norm=config.clip_norm)
        trainer = Trainer(model, tx, loss_fn, wrt=wrt, micro_batches=config.micro_batches,
                          frozen=frozen, mesh=self.mesh())

        def evaluate(model):
            model.eval()  # dropout off while measuring
            try:
                return eval_fn(model)
            finally:
                model.train()

        checkpoints, loggers, before = None, [], None
        try:
            if self.out is not None:
                checkpoints = self._open_outputs(wrt)
                if self.resume_from:
                    before = self._resume(trainer, checkpoints).get("before")
                loggers = self._open_loggers()  # after the resume: its step may be an earlier one
            if before is None and eval_fn is not None:
                before = evaluate(model)
            self.say("before: " + _fmt(before or {}))
            trainer.fit(batches(trainer.steps_done), config.steps - trainer.steps_done,
                        log_every=config.log_every,
                        desc=desc or config.algorithm, eval_fn=evaluate if eval_fn else None,
                        eval_every=config.eval_every, checkpoints=checkpoints, loggers=loggers,
                        meta=lambda: {"before": before}, host_metrics=host_metrics, show=show,
                        deadline=self.deadline)
        finally:
            if checkpoints is not None:
                checkpoints.close()
            for log in loggers:
                log.close()
        history = trainer.history
        if (trainer.steps_done < config.steps and self.deadline is not None
                and time.monotonic() >= self.deadline):
            self.say(f"time budget (max_minutes) used up at step {trainer.steps_done} of "
                     f"{config.steps}; checkpoint saved in {self.out}: rerun the same command to "
                     "continue")
            model.eval()
            return RunResult(model, tokenizer, history, before or {}, {}, report,
                             time.perf_counter() - self.start, finished=False)
        last = history[-1] if history else {}
        after = {k.removeprefix("eval_"): v for k, v in last.items() if k.startswith("eval_")}
        # nothing trained in this call (a finished run resumed)
        if not after and eval_fn is not None:
            after = evaluate(model)
        self.say("after:  " + _fmt(after))
        model.eval()
        if self.out is not None and export:
            self.export(export_model if export_model is not None else model, tokenizer,
                        before or {}, after)
        return RunResult(model, tokenizer, history, before or {}, after, report,
                         time.perf_counter() - self.start)

    def mesh(self) -> jax.sharding.Mesh | None:
        """The config's `mesh:` on this machine's devices, or on `self.devices` when set
        (ConfigError when they do not fit it)."""
        config = self.config
        if config.mesh is None:
            return None
        devices = self.devices if self.devices is not None else jax.devices()
        check_mesh(config.mesh, config.batch_size, config.micro_batches, num_devices=len(devices))
        mesh = sharding.resolve_mesh(config.mesh, devices)
        shards = sharding.batch_shards(mesh)
        if config.batch_size % (shards * config.micro_batches):  # `auto` is only known here
            raise ConfigError(f"batch_size: {config.batch_size} rows cannot be split into "
                              f"{config.micro_batches} micro-batch(es) on each of the {shards} "
                              f"data x fsdp shards of mesh: {config.mesh} ({dict(mesh.shape)}); "
                              f"use a multiple of {shards * config.micro_batches}")
        self.say(f"mesh: {dict(mesh.shape)} over {mesh.devices.size} {sharding.device_kind()} "
                 "devices")
        return mesh

    def _resume(self, trainer: Trainer, checkpoints: Checkpoints) -> dict:
        """Restore the latest checkpoint (or, with resume_from_intact, the newest one that reads)
        into `trainer`; returns its meta."""
        from tunix_lite.training.checkpoint import UnreadableCheckpoint

        try:
            meta = trainer.restore(checkpoints)
        except UnreadableCheckpoint as e:
            meta = self._resume_from_intact(trainer, checkpoints, e)
        self.resume_from = meta["step"]
        self.say(f"resumed {self.out} at step {meta['step']}")
        return meta

    def _resume_from_intact(self, trainer: Trainer, checkpoints: Checkpoints,
                            unreadable: UnreadableCheckpoint) -> dict:
        """Resume from the newest checkpoint that reads if the config asks for that; else the error,
        offering the flag. The unreadable steps after it are deleted, as `save` skips a step that
        exists: the resumed run writes them again."""
        if unreadable.intact is None:
            raise unreadable
        if not self.config.resume_from_intact:
            raise unreadable.offering(RESUME_FROM_INTACT) from None
        meta = trainer.restore(checkpoints, step=unreadable.intact)
        skipped = [step for step in checkpoints.steps if step > unreadable.intact]
        broken = unreadable.directory / str(unreadable.step)
        self.say(f"resume_from_intact: skipping checkpoint {broken} ({unreadable.reason}); "
                 f"resuming from step {unreadable.intact} and deleting step(s) "
                 f"{', '.join(map(str, skipped))}")
        for step in skipped:
            checkpoints.delete(step)
        return meta

    def _open_outputs(self, wrt) -> Checkpoints | None:
        """output_dir ready to write into, and its Checkpoints (None without checkpoint_every)."""
        out, config = self.out, self.config
        # one process writes the run's files; every one writes checkpoint shards
        if sharding.is_main_process():
            if self.start_over:
                shutil.rmtree(out)
            out.mkdir(parents=True, exist_ok=True)
            if not self.resume_from:
                (out / "config.yaml").write_text(config.to_yaml(), encoding="utf-8")
                (out / INPUTS_FILE).write_text(json.dumps(self.inputs, indent=1) + "\n",
                                               encoding="utf-8")
        _all_processes_reach("outputs")
        checkpoints = None
        if config.checkpoint_every:
            from tunix_lite.training.checkpoint import Checkpoints, run_state

            checkpoints = Checkpoints(out / "checkpoints", every=config.checkpoint_every,
                                      keep=config.keep_checkpoints, state_filter=run_state(wrt))
        return checkpoints

    def _open_loggers(self) -> list:
        """metrics.jsonl (less the lines after the resumed step) and the trackers report_to names,
        on process 0."""
        from tunix_lite.training.metrics_log import JsonlLogger, open_tracker

        if not sharding.is_main_process():
            return []
        metrics = JsonlLogger(self.out / "metrics.jsonl", keep_through=self.resume_from)
        config = self.config.to_dict()
        return [metrics] + [open_tracker(tracker, self.out, config, resumed=bool(self.resume_from))
                            for tracker in self.config.report_to]

    def export(self, model, tokenizer, before: dict, after: dict) -> None:
        """Write the trained model (or its adapters) and scores.json into output_dir, each
        atomically. `train` calls it unless export=False, e.g. when what trained holds more than the
        model to ship (a distillation student's feature projection)."""
        out = self.out
        mesh = sharding.model_mesh(model)
        # every process joins the gather; process 0 writes
        if jax.process_count() > 1 and mesh is not None:
            model = nnx.merge(nnx.graphdef(model), sharding.replicated(nnx.state(model), mesh))
        if not sharding.is_main_process():
            return
        if self.config.lora_rank:
            from tunix_lite.lora import save_adapters

            write_atomically(out / "adapters.safetensors", lambda tmp: save_adapters(model, tmp))
        else:
            from tunix_lite.export import write_model

            write_atomically(out / "model", lambda tmp: write_model(model, tokenizer, tmp))
        write_atomically(out / "scores.json", lambda tmp: tmp.write_text(
            json.dumps({"before": before, "after": after}, indent=1) + "\n", encoding="utf-8"))
        self.say(f"wrote {out}")


def _all_processes_reach(name: str) -> None:
    """Wait until every process gets here (nothing to wait for with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _fmt(metrics: dict) -> str:
    keys = [k for k in metrics if "/" not in k]
    return "  ".join(f"{k} {metrics[k]:.3f}" for k in keys) or "(no evaluation)"
