"""The stage runner (`tunix-lite run`): bad pipeline files get one line before any compute; a run stopped by its
time budget or killed mid-stage continues from its last checkpoint to the same weights as an uninterrupted run;
each stage starts from the previous stage's output (full model, or a LoRA stage's adapters on its start model).

The stages train a one-layer cut of the tiny model (its first block, embedding and tokenizer), so a stage
compiles in seconds."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tunix_lite.cli import main
from tunix_lite.loading import load
from tunix_lite.lora import merge_lora, without_adapters
from tunix_lite.course.setup import SMALL_PROGRAM_XLA_FLAGS
from tunix_lite.pipeline import load_pipeline, run_pipeline
from tunix_lite.weights.hf import model_to_tensors


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> str:
    """The tiny model cut to its first layer, saved as a checkpoint directory."""
    from tunix_lite.loading import ASSETS
    from tunix_lite.models import get_config
    from tunix_lite.tokenizer import load_tokenizer
    from tunix_lite.weights.hf import model_from_tensors, read_tensors, save_hf_model

    tensors = {k: v for k, v in read_tensors(ASSETS / "tiny").items()
               if not k.startswith("model.layers.") or k.startswith("model.layers.0.")}
    model = model_from_tensors(get_config("tiny").replace(num_layers=1, sliding_window_pattern=None,
                                                          sliding_window=None), tensors)
    directory = tmp_path_factory.mktemp("one_layer")
    save_hf_model(model, directory)
    load_tokenizer(ASSETS / "tiny").save(directory / "tokenizer.model")
    return str(directory)


# full fine-tuning, then LoRA from its model
STAGES = [{"name": "sft", "algorithm": "sft", "steps": 6, "checkpoint_every": 2},
          {"name": "lora", "algorithm": "sft", "steps": 2, "lora_rank": 4, "checkpoint_every": 1}]


def pipeline_file(tmp_path: Path, model: str, **changes) -> Path:
    values = {
        "output_dir": str(tmp_path / "run"), "model": model,
        "data": {"n_train": 48, "n_validation": 8, "n_test": 8},
        "defaults": {"seq_len": 192, "batch_size": 4, "warmup_steps": 1, "eval_every": 0, "n_accuracy": 0,
                     "log_every": 1, "packing": True, "learning_rate": 3e-3},
        "stages": STAGES,
        "evaluation": None,
    } | changes
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def exported(run: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(run / "export" / "hf" / "model.safetensors")


@pytest.mark.parametrize("change, message", [
    ({"stages": [{"name": "grpo", "algorithm": "sft", "from": "sfft"}]},
     "stages[0] (grpo): from: 'sfft' is not an earlier stage; a stage can start from 'base'"),
    ({"stages": [{"name": "a", "algorithm": "sft", "from": "b"}, {"name": "b", "algorithm": "sft"}]},
     "stages[0] (a): from: 'b' is not an earlier stage"),
    ({"stages": [{"algorithm": "grpoo"}]}, "stages[0] (grpoo): algorithm: 'grpoo' is not supported"),
    ({"stages": [{"algorithm": "sft", "rewards": ["exact_match"]}]}, "stages[0] (sft): rewards: not a sft config key"),
    ({"stages": [{"algorithm": "sft", "lerning_rate": 1e-3}]}, "(did you mean 'learning_rate'?)"),
    ({"stages": [{"algorithm": "sft", "model": "tiny"}]}, "stages[0] (sft): model: set by the pipeline"),
    ({"stages": [{"algorithm": "sft"}, {"algorithm": "sft"}]}, "stages[1] (sft): name: 'sft' is used twice"),
    ({"stages": []}, "stages: a pipeline needs at least one stage"),
    ({"max_minutes": 1e-6}, "max_minutes: 1e-06 (6e-05 s) is too short for one step of stage 'sft'"),
    ({"max_minutes": -1}, "max_minutes: must be > 0, got -1"),
    ({"export_dtype": "float16"}, "export_dtype: 'float16' is not supported; choose one of 'float32', 'bfloat16'"),
    ({"evaluation": {"samples": 4, "scaling": [1, 8]}}, "evaluation.scaling: [8] must each be between 1 and"),
    ({"data": {"weights": {"facts": 1}}}, "data.weights: {'facts': 1.0} must give the domains in data.domains"),
    ({"data": {"train": "/no/such.jsonl"}}, "data.train: no file or directory at /no/such.jsonl"),
    ({"stagez": []}, "stagez: not a key here (did you mean 'stages'?)"),
])
def test_bad_pipeline_files_get_one_line_before_any_compute(tmp_path, capsys, change, message):
    path = pipeline_file(tmp_path, "tiny", **change)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tunix-lite run: error: {path}: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_stages_rewards_are_checked_by_the_stage_itself(tmp_path, capsys):
    """The pipeline accepts what an RL stage accepts, `reward_model:PATH` included, and refuses what it
    refuses with the stage's own one line."""
    from tunix_lite.preference.reward_model import HEAD_FILE

    saved = tmp_path / "rm"  # what check_reward_model looks for; the weights load at the first call
    saved.mkdir()
    (saved / HEAD_FILE).write_text("")
    (saved / "config.json").write_text("{}")

    def grpo(rewards):
        return pipeline_file(tmp_path, "tiny", defaults={"seq_len": 128, "batch_size": 2},
                             stages=[{"name": "grpo", "algorithm": "grpo", "steps": 2, "warmup_steps": 1,
                                      "group_size": 2, "max_new_tokens": 8, "rewards": rewards}])

    assert main(["run", str(grpo(["exact_match", f"reward_model:{saved}"])), "--check"]) == 0
    capsys.readouterr()
    assert main(["run", str(grpo(["exact_match", "fromat"])), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "stages[0] (grpo): rewards: unknown reward 'fromat'; choose from" in err and "\n" not in err, err
    assert main(["run", str(grpo([f"reward_model:{tmp_path}"])), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no reward model" in err and "\n" not in err, err


def test_a_stage_that_draws_its_own_synthetic_prompts_keeps_to_the_pipelines_domains(tmp_path):
    """`train_data: synthetic` in a stage draws fresh prompts (its own seed) from data.domains, not from
    every synthetic domain; a stage that names its own domains keeps them."""
    grpo = {"algorithm": "grpo", "steps": 2, "warmup_steps": 1, "group_size": 2, "max_new_tokens": 8,
            "rewards": ["exact_match"], "train_data": "synthetic", "seed": 1}
    path = pipeline_file(tmp_path, "tiny", data={"domains": ["arithmetic", "sort"], "n_test": 8},
                         defaults={"seq_len": 128, "batch_size": 2},
                         stages=[grpo | {"name": "fresh"},
                                 grpo | {"name": "sorting", "domains": ["sort"]}])
    fresh, sorting = load_pipeline(path).stages
    assert fresh.config.domains == ["arithmetic", "sort"] and fresh.config.seed == 1
    assert sorting.config.domains == ["sort"]


def test_the_agent_recipe_checks_as_a_pipeline(tmp_path):
    """Notebook 09's agent recipe (SFT on tool-use demonstrations, then `algorithm: agent`) passes the checks."""
    path = pipeline_file(tmp_path, "tiny", data={"tasks": "calculator", "n_train": 16}, defaults={"seq_len": 128, "warmup_steps": 0},
                         stages=[{"name": "sft", "algorithm": "sft", "steps": 2},
                                 {"name": "rl", "algorithm": "agent", "steps": 2, "group_size": 2, "n_eval": 0}])
    stages = load_pipeline(path).stages
    assert [type(s.config).__name__ for s in stages] == ["SFTConfig", "AgentConfig"] and stages[1].source == "sft"


SFT_ONLY = STAGES[:1]


def trained(run: Path, stage: str = "sft") -> dict:
    from safetensors.numpy import load_file

    return load_file(run / stage / "model" / "model.safetensors")


@pytest.mark.slow
def test_stages_chain_and_a_budget_pause_or_a_kill_resume_to_the_uninterrupted_weights(tmp_path, small_model,
                                                                                        capsys):
    """A two-stage pipeline uninterrupted (the LoRA stage starts from the SFT stage's model); then its first stage
    stopped by max_minutes and rerun, and killed (SIGKILL) mid-stage and rerun: the same weights, bit for bit."""
    lora_from_lora = {"name": "more", "algorithm": "sft", "steps": 2, "lora_rank": 4, "checkpoint_every": 1}
    straight = pipeline_file(tmp_path / "a", small_model, stages=[*STAGES, lora_from_lora])
    result = run_pipeline(load_pipeline(straight), verbose=False)
    assert result.finished
    run = tmp_path / "a" / "run"
    assert yaml.safe_load((run / "lora" / "config.yaml").read_text())["model"] == str(run / "sft" / "model")
    assert yaml.safe_load((run / "more" / "config.yaml").read_text())["model"] == str(run / "lora")
    # a LoRA stage keeps its adapters only (no merged copy of the model) and loads as the model it started from
    # with them on: `more`'s base (its reference policy) is `lora`'s model, and the export is `more`'s, merged
    for stage in ("lora", "more"):
        assert not any(p.suffix == ".safetensors" and p.name != "adapters.safetensors"
                       for p in (run / stage).rglob("*") if "checkpoints" not in p.parts)
        assert json.loads((run / stage / "stage.json").read_text())["model_dir"] == str(run / stage)
    more, _ = load(run / "more")
    ids = np.asarray([[2, 10, 20, 30, 40]])
    np.testing.assert_allclose(without_adapters(more)(ids), merge_lora(load(run / "lora")[0])(ids), atol=1e-5)
    merged = model_to_tensors(merge_lora(more))
    assert set(merged) == set(exported(run))
    for name, value in exported(run).items():
        np.testing.assert_allclose(merged[name], value, atol=1e-6, err_msg=name)
    assert any(not np.array_equal(merged[k], v) for k, v in trained(run).items())  # the LoRA stage changed it
    reference = trained(run)
    # a rerun with another export_dtype trains nothing and writes the export again, rounded
    assert run_pipeline(load_pipeline(straight, settings=["export_dtype=bfloat16"]), verbose=False).finished
    assert json.loads((run / "export" / "hf" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    for name, value in exported(run).items():
        np.testing.assert_array_equal(value.astype(np.float32), merged[name].astype(value.dtype).astype(np.float32))

    # 1. a budget that ends after the first step: the session stops cleanly, the rerun continues
    paused = pipeline_file(tmp_path / "b", small_model, stages=SFT_ONLY)
    first = run_pipeline(load_pipeline(paused, max_minutes=0.001), verbose=False)
    assert not first.finished and not (tmp_path / "b" / "run" / "export").exists()
    assert sorted(os.listdir(tmp_path / "b" / "run" / "sft" / "checkpoints")) == ["1"]
    assert run_pipeline(load_pipeline(paused), verbose=False).finished
    for name, value in trained(tmp_path / "b" / "run").items():
        np.testing.assert_array_equal(value, reference[name], err_msg=name)

    # 2. killed while the stage trains: a rerun loses at most the steps since its last checkpoint
    killed = pipeline_file(tmp_path / "c", small_model, stages=SFT_ONLY)
    # the XLA flags this process compiles with (tests/conftest.py): the rerun below continues the
    # killed run in this process, and must compute the same steps to the bit
    flags = f"{os.environ.get('XLA_FLAGS', '')} {SMALL_PROGRAM_XLA_FLAGS}".strip()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]), JAX_PLATFORMS="cpu",
               XLA_FLAGS=flags)
    process = subprocess.Popen([sys.executable, "-m", "tunix_lite.cli", "run", str(killed)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    checkpoints = tmp_path / "c" / "run" / "sft" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (checkpoints / "2").is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()[-2000:]
    assert not (tmp_path / "c" / "run" / "sft" / "stage.json").exists()  # it died inside the stage
    capsys.readouterr()
    assert main(["run", str(killed)]) == 0
    assert "resumed" in capsys.readouterr().out
    for name, value in trained(tmp_path / "c" / "run").items():
        np.testing.assert_array_equal(value, reference[name], err_msg=name)


def test_a_changed_earlier_stage_refuses_the_stale_later_one(tmp_path):
    """`more` was trained from an earlier `sft` run than the one on disk now: refused before any training."""
    import json

    stages = [{"name": "sft", "algorithm": "sft", "steps": 2}, {"name": "more", "algorithm": "sft", "steps": 1,
                                                                "warmup_steps": 0}]
    path = pipeline_file(tmp_path, "tiny", stages=stages, export=False)
    run = tmp_path / "run"
    for stage, marker in (("sft", {"id": "new", "from": "base", "steps": 2}),
                          ("more", {"id": "m", "from": "old", "steps": 1})):
        (run / stage).mkdir(parents=True)
        (run / stage / "stage.json").write_text(json.dumps(marker | {"model_dir": str(run / stage / "model")}))
    with pytest.raises(ValueError, match=r"stage 'more' was trained from an earlier run of 'sft', which has changed "
                                         r"since; delete .*more to train it again"):
        run_pipeline(load_pipeline(path), verbose=False)
