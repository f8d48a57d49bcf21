"""tunix_lite/configs/capstone_gemma3_1b_tpu.yaml: its model is a local HF directory (a Kaggle Models mount),
which a tiny Gemma 3 checkpoint made here with transformers stands in for; `--check` runs on it
without the 1B weights, and the header carries the planner's sizes for both TPUs it names.

transformers + torch are a test-only reference (the [test] extra); the tests that need them skip
without.
"""

import re
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from tunix_lite import configs
from tunix_lite.cli import main
from tunix_lite.loading import ASSETS, load

CONFIG = configs.path("capstone_gemma3_1b_tpu")


@pytest.fixture(scope="module")
def tiny_gemma3_dir(tmp_path_factory):
    """A Gemma 3 HF checkpoint where Kaggle mounts gemma-3-1b-it (config.json, model.safetensors,
    tokenizer.model): 2 layers, one sliding-window and one global, the embedded tiny tokenizer's
    vocabulary. Returns (directory, the transformers model it was saved from)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
        vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=6,
        query_pre_attn_scalar=16, max_position_embeddings=1024,
        layer_types=["sliding_attention", "full_attention"])).eval()
    # transformers initialises norms to 0/1: perturb every tensor so each mapping is exercised
    with torch.no_grad():
        for p in hf_model.parameters():
            p.add_(torch.randn(p.shape) * 0.05)
    directory = tmp_path_factory.mktemp("input") / "gemma-3/transformers/gemma-3-1b-it/1"
    hf_model.save_pretrained(directory)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", directory)
    return directory, hf_model


def test_the_config_model_loads_with_transformers_logits(tiny_gemma3_dir):
    """What `model:` names (a local directory; here DIR of --set model=DIR) loads to transformers'
    logits, past the sliding window."""
    import torch

    directory, hf_model = tiny_gemma3_dir
    values = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert values["model"].startswith("/kaggle/input/")  # a mounted directory, not the hub
    model, tokenizer = load(str(directory))
    assert model.config.family == "gemma3"
    ids = tokenizer.encode("The capital of France is Paris. " * 3)
    assert len(ids) > 6  # beyond the window of 6
    tokens = np.asarray([ids[:40]])
    with torch.no_grad():
        expected = hf_model(torch.tensor(tokens)).logits.numpy()
    got = np.asarray(model(jnp.asarray(tokens)))
    assert np.abs(got - expected).max() <= 1e-4


def test_check_on_a_local_directory_prints_stages_and_devices(tiny_gemma3_dir, tmp_path, capsys):
    directory, _ = tiny_gemma3_dir
    code = main(["run", str(CONFIG), "--check", "--set", f"model={directory}",
                 "--output-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0
    assert f"base model {directory}" in out
    for stage in ("sft: sft from base, 100 steps", "dpo: dpo from sft", "grpo: grpo from dpo"):
        assert stage in out
    assert "devices: " in out


def test_check_without_the_weights(tmp_path, capsys):
    """Off the TPU session the mount is not there: --check names the missing directory, and the
    preset (what the header suggests) checks the same sizes without a download."""
    missing = tmp_path / "gemma-3-1b-it"
    check = ["run", str(CONFIG), "--check", "--output-dir", str(tmp_path / "run"), "--set"]
    assert main([*check, f"model={missing}"]) == 2
    assert f"no checkpoint directory {missing}" in capsys.readouterr().err
    assert main([*check, "model=gemma3-1b"]) == 0
    assert "base model gemma3-1b" in capsys.readouterr().out


def test_header_has_the_plan_for_both_tpus():
    lines = CONFIG.read_text(encoding="utf-8").splitlines(keepends=True)
    header = "".join(line for line in lines if line.startswith("#"))
    assert "--max-minutes 500" in header
    assert "tunix-lite plan --model gemma3-1b --devices v5e-8" in header
    assert "--devices v3-8" in header
    assert "v5e-8: GiB, ms, min" in header and "v3-8: GiB, ms, min" in header
    for stage in ("sft", "dpo", "grpo"):  # memory, roofline and minutes on each TPU
        row = re.search(rf"^#   {stage} \(\d+\) .*?((?:\s+[\d.]+){{6}})$", header, re.MULTILINE)
        assert row, f"no plan row for {stage}"
        memory_v5e, _, _, memory_v3, _, _ = map(float, row.group(1).split())
        assert memory_v5e < 16 * 0.75 and memory_v3 < 16 * 0.75  # margin on 16 GiB chips
