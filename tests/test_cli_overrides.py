"""`--set KEY=VALUE` on `tunix-lite train` and `tunix-lite run`: any key of the file, typed and
checked as the file's values are, recorded in the run's saved config; a bad one stops in one line
(exit 2)."""

import pytest
import yaml

from tunix_lite import configs
from tunix_lite.cli import main

TINY_SFT = """\
algorithm: sft
model: tiny
train_data: synthetic
n_train: 16
n_validation: 4
seq_len: 128
truncation: drop
batch_size: 2
steps: 50
warmup_steps: 0
eval_every: 0
n_accuracy: 0
log_every: 1
"""
CAPSTONE = "capstone_tiny"  # a shipped config, by name


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text(TINY_SFT + f"output_dir: {tmp_path / 'run'}\n")
    return path


class Stop(Exception):
    """Raised in place of the compute a test does not need, once what it checks has happened."""


def stop_with(*args):
    raise Stop(*args)


def cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what the test's own setup printed
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def only_error(err: str, command: str) -> str:
    """The error line, after checking it is the only line (no traceback, no progress bar)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tunix-lite {command}: error: "), err
    return lines[0].removeprefix(f"tunix-lite {command}: error: ")


def test_settings_are_typed_and_saved_in_the_runs_config(config, tmp_path, capsys, micro_model):
    # 3e-4 is a string to YAML 1.1 (no dot): the config's checks make it the number, as in a file
    code, _, err = cli(capsys, "train", "--config", config, "--set", "learning_rate=3e-4",
                       "--set", "steps=1", "--set", f"model={micro_model}")
    assert code == 0, err
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (saved["learning_rate"], saved["steps"], saved["model"]) == (0.0003, 1, str(micro_model))


@pytest.mark.parametrize("setting, message", [
    ("stepz=1", "{config}: stepz: not a sft config key (did you mean 'steps'?)"),
    ("steps=abc", "{config}: steps: expected an integer, got 'abc' (str)"),
    ("learning_rate", ("--set learning_rate: expected KEY=VALUE, e.g. --set learning_rate=3e-4 "
                       "or --set stages.2.steps=50")),
    ("=3", ("--set =3: the key is empty; expected KEY=VALUE, e.g. --set learning_rate=3e-4 or "
            "--set stages.2.steps=50")),
    ("model.name=x", ("--set model.name=x: model is 'tiny', not a mapping or a list; "
                      "set it whole (--set model=VALUE)")),
])
def test_bad_settings_stop_train_in_one_line(config, capsys, setting, message):
    code, _, err = cli(capsys, "train", "--config", config, "--set", setting)
    assert code == 2 and only_error(err, "train") == message.format(config=config)


def test_the_same_bad_value_in_the_file_gives_the_same_line(config, capsys):
    code, _, from_setting = cli(capsys, "train", "--config", config, "--set", "steps=abc")
    config.write_text(config.read_text().replace("steps: 50", "steps: abc"))
    code, _, from_file = cli(capsys, "train", "--config", config)
    assert code == 2 and from_file == from_setting


def test_the_steps_flag_still_works_and_wins_over_a_setting(config, monkeypatch):
    from tunix_lite.training import algorithms

    monkeypatch.setattr(algorithms, "run", stop_with)
    with pytest.raises(Stop) as stopped:
        main(["sft", "--config", str(config), "--set", "steps=5", "--steps", "3",
              "--set", "learning_rate=1e-5"])
    config = stopped.value.args[0]
    assert config.steps == 3 and config.learning_rate == 1e-5


def test_run_check_shows_a_stages_setting(capsys):
    code, out, err = cli(capsys, "run", CAPSTONE, "--check", "--set", "stages.0.steps=7",
                         "--set", "defaults.lora_rank=16", "--set", "evaluation.n_prompts=20")
    assert code == 0, err
    assert "  sft: sft from base, 7 steps x 8, LoRA r16" in out.splitlines()
    assert "  evaluation: 20 held-out prompts x 8 samples after every stage" in out.splitlines()


@pytest.mark.parametrize("setting, message", [
    ("stages.9.steps=1",
     "--set stages.9.steps=1: stages has 3 items, index 9 is out of range (0 to 2)"),
    ("stages.sft.steps=1",
     "--set stages.sft.steps=1: stages is a list; index it with a number (0 to 2)"),
    ("stages.0.stepz=1", (f"{CAPSTONE}: stages[0] (sft): stepz: not a sft config key "
                          "(did you mean 'steps'?)")),
    ("evaluation.n_prompts=many", (f"{CAPSTONE}: evaluation.n_prompts: expected an integer, "
                                   "got 'many' (str)")),
    ("data..n_train=1", ("--set data..n_train=1: 'data..n_train' has an empty part between "
                         "dots; e.g. --set learning_rate=3e-4 or --set stages.2.steps=50")),
])
def test_bad_settings_stop_run_in_one_line(capsys, setting, message):
    code, _, err = cli(capsys, "run", CAPSTONE, "--check", "--set", setting)
    assert code == 2 and only_error(err, "run") == message


def test_a_pipelines_settings_are_saved_in_its_pipeline_yaml(tmp_path, monkeypatch):
    from tunix_lite import pipeline as pipelines

    loaded = pipelines.load_pipeline(CAPSTONE, settings=["stages.2.steps=50"],
                                     output_dir=str(tmp_path / "run"))
    # pipeline.yaml is written once the data is ready and decontaminated, before any evaluation
    # or training
    monkeypatch.setattr(pipelines.run, "_evaluate", stop_with)
    monkeypatch.setattr(pipelines.run, "_train_stage", stop_with)
    with pytest.raises(Stop):
        pipelines.run_pipeline(loaded, verbose=False)
    saved = yaml.safe_load((tmp_path / "run" / "pipeline.yaml").read_text())
    assert saved["stages"][2]["steps"] == 50 and saved["output_dir"] == str(tmp_path / "run")
    with open(configs.path(CAPSTONE)) as file:
        assert yaml.safe_load(file)["stages"][2]["steps"] == 120  # the file itself is untouched
