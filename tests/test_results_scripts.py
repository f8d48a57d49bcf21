"""The scripts in course/results/scripts/ regenerate the course's measured results in hours, so CI never
runs them; it checks what can break them silently: a library name they import that moved, and a command
in the results, notebooks, configs or docs that names a script no longer there."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "course" / "results" / "scripts").glob("*.py"))
# where commands that made a result are written down
SHOWN = ROOT / "tunix_lite" / "course" / "results"  # the results the notebooks display
DOCUMENTS = sorted([*(ROOT / "course").rglob("*.md"), *(ROOT / "course" / "results").rglob("*.json"),
                    *SHOWN.glob("*.md"), *SHOWN.glob("*.json"), *(ROOT / "notebooks").glob("*.py"),
                    *(ROOT / "tunix_lite" / "configs").glob("*.yaml"), ROOT / "README.md"])
SCRIPT_PATH = re.compile(r"(?<![\w/.-])((?:course/results/)?scripts/\w+\.(?:py|sh))")


def imported_names(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for each `from module import name`, (module, None) for each `import module`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_results_script_imports_only_names_that_exist(path, monkeypatch):
    monkeypatch.syspath_prepend(str(path.parent))  # as when run: its own folder on sys.path (heldout)
    local = {p.stem for p in SCRIPTS}
    missing = []
    for module, name in imported_names(path):
        if module.split(".")[0] not in {"tunix_lite", *local}:
            continue
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports names that do not exist: {missing}"


def test_every_script_a_command_names_exists():
    missing = {}
    for path in DOCUMENTS:
        for script in SCRIPT_PATH.findall(path.read_text(encoding="utf-8")):
            if not (ROOT / script).is_file():
                missing.setdefault(script, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"scripts named but not found: {missing}"


@pytest.mark.parametrize("folder", ["rl_models", "rl_models_unseen", "rl_models_80_20"])
def test_committed_adapters_are_small_described_and_chained(folder):
    """course/results/FOLDER/: each folder is what `tunix-lite eval --model` reads (adapters + the
    config naming its base), at most 10 MB, with the command that made it and every training
    source it saw in manifest.json; the start model is one of them or a committed folder."""
    import json

    import yaml
    from safetensors import safe_open

    models = ROOT / "course" / "results" / folder
    manifest = json.loads((models / "manifest.json").read_text())
    folders = sorted(p for p in models.iterdir() if p.is_dir())
    assert {p.name for p in folders} == set(manifest["runs"])
    start = manifest["start"]
    assert start in manifest["runs"] or (ROOT / start / "adapters.safetensors").is_file()
    for folder in folders:
        adapters = folder / "adapters.safetensors"
        assert adapters.stat().st_size <= 10 * 2**20, folder
        with safe_open(adapters, "np") as f:
            assert all(k.endswith((".lora_a", ".lora_b")) for k in f.keys())
        config = yaml.safe_load((folder / "config.yaml").read_text())
        base = config["model"]
        assert base == "gemma3-270m" or (ROOT / base / "adapters.safetensors").is_file(), (folder, base)
        assert {"command", "seed", "data"} <= manifest["runs"][folder.name].keys()
        data = manifest["runs"][folder.name]["data"]
        assert config["train_data"] in ([data] if isinstance(data, str) else data), folder


def test_the_logged_entropy_estimates_the_exact_entropy(monkeypatch, micro_model):
    """rl_entropy.py on the micro model, 64 prompts x 8 samples: the mean -log p of the sampled
    tokens (the entropy GRPO's rollouts log) and the exact entropy (TRL's) agree within the
    interval, and the sampler's log-probs are the forward pass's. (The estimators' agreement does
    not depend on depth: the 1-layer model's 4,000+ tokens take 4 s here, tiny's 18 s.)"""
    monkeypatch.syspath_prepend(str(ROOT / "course" / "results" / "scripts"))
    rl_entropy = importlib.import_module("rl_entropy")
    measured = rl_entropy.measure(str(micro_model), prompts=64, samples=8, seed=0)
    lo, hi = measured["sampled_minus_exact_ci95"]
    assert measured["tokens"] > 4000 and lo < 0 < hi and hi - lo < 0.1
    assert measured["max_abs_logprob_gap_cache_vs_recompute"] < 1e-4


def test_the_drift_table_pairs_each_arms_verdicts_and_counts_trained_signal(monkeypatch):
    """grpo_drift.py's row: the change is the paired one (two prompts flip right -> wrong, none the
    other way, out of 4), and an arm without dynamic sampling trains on every group it drew, so
    its trained groups with signal are 1 - the all-equal share."""
    monkeypatch.syspath_prepend(str(ROOT / "course" / "results" / "scripts"))
    grpo_drift = importlib.import_module("grpo_drift")
    from tunix_lite.evaluation import paired_difference

    cell = {"accuracy": 0.5}
    plain = {"changes": {"learning_rate": 5e-5},
             "history": [{"zero_signal_groups": 0.75, "kl": 0.01, "entropy": 0.3}] * 4,
             "verdicts": {"before": [1, 1, 1, 0], "after": [1, 0, 0, 0]},
             "accuracy": {"before": {"all": {"accuracy": 0.75}, "count": {"accuracy": 0.75}},
                          "after": {"all": {"accuracy": 0.25}, "count": {"accuracy": 0.25}}}}
    dynamic = plain | {"changes": {"learning_rate": 5e-5, "dynamic_sampling": True},
                       "history": [{"zero_signal_groups": 0.75, "kept_groups": 1.0}] * 4,
                       "accuracy": {"before": {"all": cell, "count": cell},
                                    "after": {"all": cell, "count": cell}}}
    rows = grpo_drift.table({"plain": plain, "dynamic": dynamic}).splitlines()[-2:]
    change, low, high = paired_difference([1, 1, 1, 0], [1, 0, 0, 0])
    assert f"| {change:+.2f} [{low:+.2f}, {high:+.2f}] | count -0.50 |" in rows[0]
    assert rows[0].startswith("| plain | the 270M stage's settings | 0.75 | 0.25 | 0.010 |")
    assert rows[1].startswith("| dynamic | dynamic_sampling=True | 0.75 | 1.00 | - |")
