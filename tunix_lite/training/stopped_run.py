"""A training run stopped before it exported (its max_minutes ran out, the session ended, it
crashed) is still a model: the one its config.yaml builds, with a checkpoint of what it trains.

    found = stopped_run("runs/grpo")              # (runs/grpo, None): its newest checkpoint
    found = stopped_run("runs/grpo/checkpoints/50")  # (runs/grpo, 50)
    model, tokenizer = load_stopped_run(*found)
    model, tokenizer = load_model_or_run(name)    # either, or whatever tunix_lite.load reads

`tunix-lite eval` and `generate` read these, so a long run can be scored while it is unfinished.
"""

from __future__ import annotations

from pathlib import Path


def stopped_run(name: str) -> tuple[Path, int | None] | None:
    """(run directory, step) when `name` is a run's output_dir holding config.yaml and
    checkpoints/ but no exported model (step None: the newest checkpoint), or one of its step
    folders, RUN/checkpoints/STEP; None for anything else (a model name, a checkpoint directory,
    a finished run)."""
    from tunix_lite.loading import ADAPTERS

    path = Path(name).expanduser()
    if path.name.isdigit() and path.parent.name == "checkpoints" and path.is_dir():
        return (path.parent.parent, int(path.name)) if _is_run(path.parent.parent) else None
    exported = (path / "model").is_dir() or (path / ADAPTERS).is_file()
    return (path, None) if _is_run(path) and not exported else None


def _is_run(directory: Path) -> bool:
    return (directory / "config.yaml").is_file() and (directory / "checkpoints").is_dir()


def load_stopped_run(directory: str | Path, step: int | None = None, *, verbose: bool = False):
    """(model, tokenizer): the model `directory`/config.yaml builds (its base model, adapters and
    precision, as training built it), with checkpoint `step` (default: the newest) of the
    variables the run trains loaded into it."""
    import sys

    from tunix_lite.training.algorithms import load_config
    from tunix_lite.training.checkpoint import CheckpointError, Checkpoints, run_state
    from tunix_lite.training.inputs import build_model, trained_variables

    directory = Path(directory)
    config = load_config(directory / "config.yaml")
    model, tokenizer = build_model(config)
    checkpoints = Checkpoints(directory / "checkpoints",
                              state_filter=run_state(trained_variables(config)))
    try:
        step = checkpoints.restore(model, step=step)["step"]
    except CheckpointError as e:
        raise CheckpointError(f"{directory}: a {config.algorithm} run's checkpoints hold more "
                              f"than its model ({e}); rerun its command to finish and export "
                              "the model") from None
    finally:
        checkpoints.close()
    model.eval()
    if verbose:
        print(f"loaded {directory}: {config.model} with checkpoint {step} of {config.steps} steps "
              "(an unfinished run)", file=sys.stderr)
    return model, tokenizer


def load_model_or_run(name: str, *, verbose: bool = False):
    """(model, tokenizer) for a model name or folder: whatever tunix_lite.loading reads, or a
    training run stopped before its export (its newest checkpoint, or RUN/checkpoints/STEP)."""
    from tunix_lite.loading import load

    found = stopped_run(name)
    return load_stopped_run(*found, verbose=verbose) if found else load(name, verbose=verbose)
