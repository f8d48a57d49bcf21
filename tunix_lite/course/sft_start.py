"""The model phases 5-7 start from: the SFT stage, `tunix_lite/configs/sft_tiny.yaml`, trained once.

    from tunix_lite.course.sft_start import sft_model
    teacher, tokenizer = tunix_lite.load(sft_model(profile))   # runs/sft_tiny/model

The first call trains it in this folder, as `tunix-lite train --config sft_tiny` would, and later calls
(this notebook's next session, or another lesson in the same folder) load what it saved. A profile that
cuts the run (ci: `Profile.run_steps`) writes to a folder of its own, so a short run never stands in for
the full one.
"""

from __future__ import annotations

from pathlib import Path

from tunix_lite import configs

CONFIG = "sft_tiny"


def sft_model(profile, runs: str | Path = "runs") -> Path:
    """The folder of the SFT model (a Hugging Face checkpoint) for `profile`, trained here if absent."""
    from tunix_lite.training.sft import SFTConfig, run_sft  # imports jax: after setup()

    written = SFTConfig.from_yaml(configs.path(CONFIG))
    config = profile.sized(written)
    name = CONFIG if config.steps == written.steps else f"{CONFIG}_{config.steps}_steps"
    config.output_dir = str(Path(runs) / name)
    model = Path(config.output_dir) / "model"
    if not model.is_dir():
        run_sft(config)
    return model
