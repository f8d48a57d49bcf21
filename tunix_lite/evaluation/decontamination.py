"""Which test prompts a model has trained on: a source's questions, counted or excluded.

A figure is held out only for questions that occur in no training data of the model, its start
model's included. This module reads what a source asks and compares questions, not strings
(`tunix_lite.data.questions.record_keys`: the normalised prompt, and a reasoning-gym entry's
question):

    sources = source_records("runs/grpo")        # [(label, records)]: every source it trained on
    seen = seen_mask(test_records, keys_of(sources))    # [n] bool
    kept, n_excluded = without(test_records, sources)   # `tunix-lite eval --exclude runs/grpo`

A source is a reasoning_gym spec, a records file (`PATH?split=train` too) or a saved dataset, a
training run's output_dir (its config.yaml's train_data, then its start model's, as far as that
is a run too), a model folder inside a run (`RUN/model`, `PIPELINE/export/hf`), or a pipeline's
output_dir (every stage's data and its base model's). A named model ("tiny", "gemma3-270m") or a
bare checkpoint lists no data here: the embedded tiny model was pretrained on the synthetic train
side only (`tunix_lite.data.synthetic.pretraining_corpus`), which no synthetic test prompt is on;
Gemma's pretraining data is not known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import yaml

from tunix_lite.data import reasoning_gym
from tunix_lite.data.questions import record_keys
from tunix_lite.data.records import load_records, split_source
from tunix_lite.data.synthetic import DOMAINS, make_splits

SOURCES = ("a reasoning_gym spec, a records file or saved dataset, a training run's output_dir "
           "(its config.yaml names its data), or a pipeline's output_dir")
RUN_CONFIG, PIPELINE_FILE = "config.yaml", "pipeline.yaml"

Records = Sequence[Mapping]
Labelled = list[tuple[str, Records]]  # (what the source is, in words; its records)


def source_records(source: str | Path) -> Labelled:
    """Every training source `source` stands for, with its records: itself for a spec or a file,
    the data a run or pipeline directory trained on (with its start model's). ValueError in one line
    naming the source and what it may be."""
    text = str(source)
    if reasoning_gym.is_spec(text):
        return [(text, reasoning_gym.make_records(text))]
    path = Path(split_source(text)[0]).expanduser()
    if path.is_dir() and run_directory(path) is not None:
        return run_records(path)
    if path.exists():
        return [(text, load_records(text))]
    raise ValueError(f"{text}: no such file or directory, and not a reasoning_gym spec; a source "
                     f"is {SOURCES}")


def run_directory(path: str | Path) -> Path | None:
    """The run or pipeline directory a model folder belongs to: the folder itself, its parent
    (RUN/model) or grandparent (PIPELINE/export/hf), the nearest that holds a
    config.yaml or pipeline.yaml; None for a named model or a bare checkpoint."""
    path = Path(path).expanduser()
    if not path.is_dir():
        return None
    for folder in (path, path.parent, path.parent.parent):
        if (folder / PIPELINE_FILE).is_file() or (folder / RUN_CONFIG).is_file():
            return folder
    return None


def run_records(model: str | Path) -> Labelled:
    """The training sources of the model at `model` and of every model it started from, as far as
    each is a run ([] for a named model or a bare checkpoint): a run's config.yaml train_data, a
    pipeline's stages' (each stage folder's config.yaml) and its base model's; each once."""
    found, visited = [], set()

    def visit(model):
        folder = run_directory(model) if model else None
        if folder is None or folder.resolve() in visited:
            return
        visited.add(folder.resolve())
        if (folder / PIPELINE_FILE).is_file():
            values = yaml.safe_load((folder / PIPELINE_FILE).read_text(encoding="utf-8")) or {}
            visit(values.get("model"))
            for stage in sorted(p for p in folder.iterdir() if (p / RUN_CONFIG).is_file()):
                visit(stage)
        else:
            config = yaml.safe_load((folder / RUN_CONFIG).read_text(encoding="utf-8")) or {}
            visit(config.get("model"))
            found.append(config_records(folder, config))

    visit(model)
    return found


def config_records(folder: Path, config: Mapping) -> tuple[str, Records]:
    """(label, records) of what one run's config trained on: its train_data, or for "synthetic"
    the synthetic train side drawn as the run drew it (the same prompts for tasks and pairs)."""
    data = config.get("train_data", "synthetic")
    if data != "synthetic":
        return f"{data} ({folder}'s train_data)", source_records(data)[0][1]
    if config.get("algorithm") == "agent":  # drawn by the agent (tunix_lite.rl), not listed here
        return f"synthetic calculator problems, not listed ({folder}'s train_data)", []
    n, seed = config.get("n_train", 2000), config.get("seed", 0)
    domains = config.get("domains") or DOMAINS
    label = f"synthetic train side, {n} examples, seed {seed} ({folder}'s train_data)"
    return label, make_splits(n, 0, 0, domains=domains, seed=seed)["train"]


def keys_of(sources: Labelled) -> set[str]:
    """Every question key (`record_keys`) the sources' records ask."""
    return {key for _, records in sources for record in records for key in record_keys(record)}


def seen_mask(records: Records, keys: set[str]) -> np.ndarray:
    """[n] bool: which records ask a question among `keys`."""
    return np.array([bool(record_keys(record) & keys) for record in records], bool)


def without(records: Records, sources: Iterable[str]) -> tuple[list[dict], int]:
    """(the records that ask no question of any source, how many were left out): what
    `tunix-lite eval --exclude SOURCE` scores."""
    keys = keys_of([labelled for source in sources for labelled in source_records(source)])
    seen = seen_mask(records, keys)
    return [dict(r) for r, s in zip(records, seen) if not s], int(seen.sum())
