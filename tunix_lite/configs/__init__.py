"""The run configs of the course and the README, shipped inside the package: a name works wherever
tunix_lite is installed (a clone, a Colab upload, a Kaggle session with no repository beside it).

    tunix-lite train --config sft_tiny             # or --config path/to/any_file.yaml
    tunix-lite run capstone_gemma3_270m_tpu --check
    tunix_lite.configs.path("sft_tiny")            # the file itself, to read or to copy and edit
    tunix_lite.configs.names()                     # every shipped name

A file path always wins: a name is looked up here only when no file of that name exists. Every key
is documented in README.md beside the files (`python -m tunix_lite.training.algorithms --schema`
writes it). Paths inside a config (`output_dir: runs/sft_tiny`, `model: runs/sft_tiny/model`) are
relative to the directory the command runs in, not to this folder.
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def names() -> list[str]:
    """The shipped configs' names: the file names without .yaml."""
    return sorted(p.stem for p in FOLDER.glob("*.yaml"))


def path(name: str) -> Path:
    """The shipped config `name` (with or without .yaml); one line listing the names when there is
    none."""
    stem = name.removesuffix(".yaml")
    file = FOLDER / f"{stem}.yaml"
    if "/" in stem or "\\" in stem or not file.is_file():
        raise FileNotFoundError(f"tunix_lite ships no config named {name!r}; the names: "
                                f"{', '.join(names())}")
    return file


def find(spec: str | Path) -> Path:
    """A config file: `spec` when it is a file, else the shipped config of that name; a missing
    file or unknown name is one line naming it and listing the shipped names."""
    file = Path(spec)
    if file.is_file():
        return file
    if file.parent != Path(".") or file.suffix not in ("", ".yaml"):
        raise FileNotFoundError(f"no config file at {spec} (or pass the name of a shipped config: "
                                f"{', '.join(names())})")
    try:
        return path(file.name)
    except FileNotFoundError:
        raise FileNotFoundError(f"no config file at {spec}, and tunix_lite ships no config named "
                                f"{file.stem!r}; the names: {', '.join(names())}") from None
