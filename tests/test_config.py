"""The one config schema: typed values checked before any compute, the shared parts, the generated docs."""


import pytest
import yaml

from tunix_lite import configs
from tunix_lite.pipeline import load_pipeline
from tunix_lite.training import algorithms
from tunix_lite.training.config import ConfigError
from tunix_lite.training.sft import SFTConfig


def test_the_schema_document_is_generated_from_the_code():
    assert algorithms.main(["--check"]) == 0, "run: python -m tunix_lite.training.algorithms --schema"


@pytest.mark.parametrize("values, message", [
    ({"steps": "ten"}, "steps: expected an integer, got 'ten' (str)"),
    ({"learning_rate": "fast"}, "learning_rate: expected a number, got 'fast' (str)"),
    ({"learning_rate": -1e-3}, "learning_rate: must be > 0, got -0.001"),
    ({"micro_batches": 0}, "micro_batches: must be >= 1, got 0"),
    ({"lora_rank": 0}, "lora_rank: must be >= 1, got 0"),
    ({"compute_dtype": "fp16"}, "compute_dtype: 'fp16' is not supported; choose one of 'float32', 'bfloat16'"),
    ({"eval_every": -1}, "eval_every: must be >= 0, got -1"),
    ({"model": ""}, "model: expected a model name or checkpoint directory, got an empty string"),
    ({"packing": "yes"}, "packing: expected true or false, got 'yes' (str)"),
    ({"domains": "sort"}, "domains: expected a list of a string or null, got 'sort' (str)"),
    ({"template": "chatml"}, "template: 'chatml' is not supported; choose one of gemma, llama3, qwen3 (or null: the model family's)"),
    ({"learning_rate": float("nan")}, "learning_rate: expected a finite number, got nan"),
])
def test_bad_values_name_the_key_the_value_and_what_is_expected(values, message):
    with pytest.raises(ConfigError) as error:
        SFTConfig.from_dict(values)
    assert str(error.value) == message


def test_a_shipped_config_is_read_by_name_from_any_directory_and_a_file_wins(tmp_path, monkeypatch):
    """What a Kaggle or Colab session has: the package, no repository. A name finds the config
    shipped with it; a file of that name in the working directory is read instead."""
    monkeypatch.chdir(tmp_path)
    assert configs.path("sft_tiny") == configs.FOLDER / "sft_tiny.yaml"
    shipped = algorithms.load_config("sft_tiny")
    assert shipped.steps == yaml.safe_load(configs.path("sft_tiny").read_text())["steps"]
    assert load_pipeline("capstone_tiny").stages
    (tmp_path / "sft_tiny.yaml").write_text("steps: 3\nwarmup_steps: 1\n")
    assert algorithms.load_config("sft_tiny.yaml").steps == 3
    assert algorithms.load_config("sft_tiny").steps == shipped.steps  # no file named sft_tiny


@pytest.mark.parametrize("command", [["train", "--config", "sft_tiyn"], ["run", "capstone_tiyn", "--check"],
                                     ["sft", "--config", "runs/sft_tiny.yaml"]])
def test_a_wrong_config_name_fails_in_one_line_listing_the_shipped_names(command, capsys, tmp_path, monkeypatch):
    from tunix_lite.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"no config file at {command[-1] if command[0] != 'run' else command[1]}" in err
    assert ", ".join(configs.names()) in err and "capstone_gemma3_270m_tpu" in err


def test_numbers_yaml_reads_as_strings_are_converted_and_resume_rules_hold():
    config = SFTConfig.from_dict({"learning_rate": "1e-4", "steps": "300", "weight_decay": 0})
    assert (config.learning_rate, config.steps, config.weight_decay) == (1e-4, 300, 0.0)
    saved = config.to_dict()
    assert SFTConfig.from_dict(saved | {"steps": 400, "eval_every": 5}).resume_conflict(saved) is None
    assert "steps: 100 is less than the 300" in SFTConfig.from_dict(saved | {"steps": 100}).resume_conflict(saved)
    assert SFTConfig.from_dict(saved | {"seed": 1}).resume_conflict(saved) == \
        "seed: the checkpointed run used 0, this config says 1"


SHIPPED = sorted(configs.FOLDER.glob("*.yaml"))
# a Kaggle Models mount a config names -> the preset of the same sizes (no weights needed)
KAGGLE_PRESETS = {"/gemma-3-1b-it/": "gemma3-1b", "/gemma-2-2b-it/": "gemma2-2b"}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_config_is_valid(path):
    """Each file in tunix_lite/configs/ builds (a pipeline: every stage's config) without loading a model: a key renamed in the
    code, or a stage edited by hand, fails here instead of in a learner's run."""
    if "stages" in yaml.safe_load(path.read_text()):
        # a profile that loads its model from a Kaggle input folder: the preset of the same sizes here
        model = yaml.safe_load(path.read_text())["model"]
        kaggle = [f"model={preset}" for mount, preset in KAGGLE_PRESETS.items() if mount in model]
        assert kaggle or not model.startswith("/kaggle/"), f"{path.name}: which preset is {model}?"
        assert load_pipeline(path, settings=kaggle).stages
    else:
        assert algorithms.load_config(path).steps >= 1
