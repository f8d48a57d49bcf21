"""The algorithms `tunix-lite train --config FILE.yaml` runs, chosen by the file's `algorithm:` key.

Each entry names the module that holds the algorithm's config class and its `run_*` driver; modules
are imported only when used, so the command starts fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path

from tunix_lite import configs
from tunix_lite.training.checked import ConfigError, apply_settings, read_yaml
from tunix_lite.training.config import SHARED_PARTS

# algorithm -> (module, config class, driver)
ALGORITHMS = {
    "sft": ("tunix_lite.training.sft", "SFTConfig", "run_sft"),
    "dpo": ("tunix_lite.preference.dpo", "DPOConfig", "run_dpo"),
    "reward_model": ("tunix_lite.preference.reward_model", "RewardModelConfig", "run_reward_model"),
    "distill": ("tunix_lite.distill.distill", "DistillConfig", "run_distill"),
    "grpo": ("tunix_lite.rl.grpo", "GRPOConfig", "run_grpo"),
    "ppo": ("tunix_lite.rl.ppo", "PPOConfig", "run_ppo"),
    "agent": ("tunix_lite.rl.agent", "AgentConfig", "run_agent"),
}


def _entry(algorithm: str):
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm: {algorithm!r} is not supported; "
                          f"choose one of {', '.join(ALGORITHMS)}")
    module, config_name, run_name = ALGORITHMS[algorithm]
    module = importlib.import_module(module)
    return getattr(module, config_name), getattr(module, run_name)


def config_class(algorithm: str):
    return _entry(algorithm)[0]


def load_config(path: str | Path, *, algorithm: str | None = None, settings: list[str] = (),
                **overrides):
    """The config in a YAML file or a shipped config named so (tunix_lite.configs), with the
    command line's `--set KEY=VALUE` `settings` and then `overrides` applied; every value checked.
    Its `algorithm:` key picks the class ("sft" when absent); with `algorithm`, the file must be
    of that algorithm."""
    values = apply_settings(read_yaml(path), settings)
    name = values.get("algorithm", "sft")
    if algorithm is not None and name != algorithm:
        raise ConfigError(f"{path}: algorithm is {name!r}, expected {algorithm!r}")
    try:
        return config_class(name).from_dict(values | overrides)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def run(config):
    """Run the algorithm a config belongs to; returns its RunResult."""
    return _entry(config.algorithm)[1](config)


SCHEMA_FILE = configs.FOLDER / "README.md"


def schema_markdown() -> str:
    """tunix_lite/configs/README.md: every config key of every algorithm, generated from the config
    classes."""
    configs = [config_class(name) for name in ALGORITHMS]
    parts = []
    for part in SHARED_PARTS:
        names = [f.name for f in dataclasses.fields(part)]
        parts.append(f"### {part.__name__}\n\n{(part.__doc__ or '').strip()}\n\n"
                     f"{configs[0].schema_markdown(names)}")
    own = [f"### `algorithm: {c.algorithm}`\n\n{c.schema_markdown(c.own_fields())}"
           for c in configs]
    return "\n\n".join([
        "# Config files",
        "Every config file is one flat mapping of the keys below, read by "
        "`tunix-lite train --config FILE` (or `--config NAME` for a file of this folder, "
        "shipped with the package: `--config sft_tiny`); `algorithm:` picks the algorithm (default "
        "`sft`). Values are checked before any compute: a wrong type, an out-of-range value or "
        "an unknown key stops the run with one line naming the key. \"on resume\" says what a "
        "rerun into the same `output_dir` may change: `same` (refused if changed; a file or "
        "directory such a key names, e.g. `train_data` or a local `model`, must also still hold "
        "the same bytes), `free`, `grow` (may only grow).",
        "Generated from `tunix_lite/training/config.py` and each algorithm's config class by "
        "`python -m tunix_lite.training.algorithms --schema` (a test checks it is current).",
        "## Shared by every algorithm", *parts, "## Each algorithm's own keys", *own]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="write tunix_lite/configs/README.md, the config schema")
    parser.add_argument("--schema", action="store_true", help="write the schema file")
    parser.add_argument("--check", action="store_true", help="exit 1 if the schema file is stale")
    args = parser.parse_args(argv)
    text = schema_markdown()
    if args.check:
        current = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.is_file() else ""
        return 0 if current == text else 1
    SCHEMA_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
