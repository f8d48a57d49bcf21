"""The capstone configs for a Kaggle TPU session that read their model from a local HF directory (a
Kaggle Models mount): Gemma 3 1B and Gemma 2 2B. A tiny checkpoint of each family made here with
transformers stands in for the weights; `--check` runs on it without them, and each header carries
the planner's sizes for both TPUs it names.

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

# config -> (the family's transformers classes, where Kaggle mounts its weights, the preset of the
# same sizes, its stages' steps)
KAGGLE = {
    "capstone_gemma3_1b_tpu": (("Gemma3ForCausalLM", "Gemma3TextConfig"), "gemma-3/transformers/gemma-3-1b-it/1",
                               "gemma3-1b", (100, 25, 100)),
    "capstone_gemma2_2b_tpu": (("Gemma2ForCausalLM", "Gemma2Config"), "gemma-2/transformers/gemma-2-2b-it/2",
                               "gemma2-2b", (100, 25, 100)),
}


@pytest.fixture(scope="module", params=sorted(KAGGLE))
def mounted(request, tmp_path_factory):
    """(config name, a tiny checkpoint of its family where Kaggle mounts it (config.json,
    model.safetensors, tokenizer.model): 2 layers, one sliding-window and one global, the embedded
    tiny tokenizer's vocabulary; the transformers model it was saved from)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    (model_class, config_class), mount, _, _ = KAGGLE[request.param]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(
        vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=6,
        query_pre_attn_scalar=16, max_position_embeddings=1024,
        layer_types=["sliding_attention", "full_attention"])
    hf_model = getattr(transformers, model_class)(config).eval()
    # transformers initialises norms to 0/1: perturb every tensor so each mapping is exercised
    with torch.no_grad():
        for p in hf_model.parameters():
            p.add_(torch.randn(p.shape) * 0.05)
    directory = tmp_path_factory.mktemp("input") / mount
    hf_model.save_pretrained(directory)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", directory)
    return request.param, directory, hf_model


def test_the_config_model_loads_with_transformers_logits(mounted):
    """What `model:` names (a local directory; here DIR of --set model=DIR) loads to transformers'
    logits, past the sliding window."""
    import torch

    name, directory, hf_model = mounted
    values = yaml.safe_load(configs.path(name).read_text(encoding="utf-8"))
    assert values["model"] == f"/kaggle/input/{KAGGLE[name][1]}"  # a mounted directory, not the hub
    model, tokenizer = load(str(directory))
    assert model.config.family == KAGGLE[name][2].split("-")[0]
    ids = tokenizer.encode("The capital of France is Paris. " * 3)
    assert len(ids) > 6  # beyond the window of 6
    tokens = np.asarray([ids[:40]])
    with torch.no_grad():
        expected = hf_model(torch.tensor(tokens)).logits.numpy()
    got = np.asarray(model(jnp.asarray(tokens)))
    assert np.abs(got - expected).max() <= 1e-4


def test_check_on_a_local_directory_prints_stages_and_devices(mounted, tmp_path, capsys):
    name, directory, _ = mounted
    code = main(["run", name, "--check", "--set", f"model={directory}", "--output-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0
    assert f"base model {directory}" in out
    sft, dpo, grpo = KAGGLE[name][3]
    for stage in (f"sft: sft from base, {sft} steps", f"dpo: dpo from sft, {dpo} steps",
                  f"grpo: grpo from dpo, {grpo} steps"):
        assert stage in out
    assert "devices: " in out


@pytest.mark.parametrize("name", sorted(KAGGLE))
def test_check_without_the_weights(name, tmp_path, capsys):
    """Off the TPU session the mount is not there: --check names the missing directory, and the
    preset (what the header suggests) checks the same sizes without a download."""
    missing = tmp_path / "gemma-it"
    check = ["run", name, "--check", "--output-dir", str(tmp_path / "run"), "--set"]
    assert main([*check, f"model={missing}"]) == 2
    assert f"no checkpoint directory {missing}" in capsys.readouterr().err
    preset = KAGGLE[name][2]
    assert main([*check, f"model={preset}"]) == 0
    assert f"base model {preset}" in capsys.readouterr().out
    assert f"--set model={preset}" in configs.path(name).read_text(encoding="utf-8")  # as the header says


@pytest.mark.parametrize("name", sorted(KAGGLE))
def test_header_has_the_plan_for_both_tpus(name):
    lines = configs.path(name).read_text(encoding="utf-8").splitlines(keepends=True)
    header = "".join(line for line in lines if line.startswith("#"))
    assert "--max-minutes 500" in header
    assert f"tunix-lite plan --model {KAGGLE[name][2]} --devices v5e-8" in header
    assert "--devices v3-8" in header
    assert "v5e-8: GiB, ms, min" in header and "v3-8: GiB, ms, min" in header
    for stage in ("sft", "dpo", "grpo"):  # memory, roofline and minutes on each TPU
        row = re.search(rf"^#   {stage} \(\d+\) .*?((?:\s+[\d.]+){{6}})$", header, re.MULTILINE)
        assert row, f"no plan row for {stage}"
        memory_v5e, _, _, memory_v3, _, _ = map(float, row.group(1).split())
        assert memory_v5e < 16 * 0.75 and memory_v3 < 16 * 0.75  # margin on 16 GiB chips
