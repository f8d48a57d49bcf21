"""course/results/scripts/rl_trl_beside.py: TRL's GRPOTrainer (trl 1.16, test-only) on a
tunix_lite GRPO config, 2 steps with LoRA of the micro model (tiny's architecture and tokenizer,
one layer: what is compared is plumbing, which depth does not change). The two runs train on the
same prompt ids (the script checks every one, BOS included), both write one history entry per step,
and TRL's model, exported with its adapters merged, loads in tunix_lite with the logits
transformers computes from that directory."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.reference, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "course" / "results" / "scripts" / "rl_trl_beside.py"
GRPO = {
    "algorithm": "grpo",
    "model": "tiny",
    "train_data": "synthetic",
    "n_train": 32,
    "n_validation": 8,
    "seq_len": 96,
    "max_prompt_tokens": 72,
    "max_new_tokens": 16,
    "group_size": 4,
    "batch_size": 2,
    "steps": 2,
    "learning_rate": 1.0e-4,
    "warmup_steps": 1,
    "beta": 0.01,
    "lora_rank": 4,
    "lora_alpha": 8,
    "rewards": ["exact_match", "format"],
    "eval_every": 0,
    "n_accuracy": 0,
    "log_every": 1,
}


def _script():
    spec = importlib.util.spec_from_file_location("rl_trl_beside", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs(tmp_path_factory, micro_model):
    """(settings, TRL's output folder, tunix_lite's history) of 2 steps on the same config."""
    from tunix_lite.rl.grpo import GRPOConfig, run_grpo

    tmp = tmp_path_factory.mktemp("beside")
    config = tmp / "grpo.yaml"
    config.write_text(
        yaml.safe_dump(GRPO | {"model": str(micro_model), "output_dir": str(tmp / "tunix")}),
        encoding="utf-8",
    )
    settings = _script().run(str(config), None, tmp / "trl", None)
    tunix = run_grpo(GRPOConfig.from_yaml(config), verbose=False)
    return settings, tmp / "trl", tunix.history


def test_trl_reads_the_prompt_ids_tunix_lite_samples_from(runs):
    settings, out, _ = runs
    check = settings["prompt_ids_check"]
    assert check["passed"] and check["first_batch_ids_equal"] and check["prompts_checked"] == 2 * 2
    assert (
        check["first_prompt_ids"][0] == check["bos_id"] != check["first_prompt_ids"][1]
    )  # one BOS, not two
    assert json.loads((out / "settings.json").read_text())["trl"]["loss_type"] == "grpo"


def test_both_histories_have_one_entry_per_step(runs):
    _, out, tunix_history = runs
    trl_history = [
        json.loads(line) for line in (out / "trl_history.jsonl").read_text().splitlines()
    ]
    assert [h["step"] for h in trl_history] == [h["step"] for h in tunix_history] == [1, 2]
    for entry in trl_history + tunix_history:
        assert {"reward", "reward/exact_match", "reward/format", "kl", "length"} <= set(entry)
    assert (
        trl_history[0]["learning_rate"] == 0.0
    )  # optax's warmup starts at 0, so does the matched schedule


def test_trl_model_loads_in_tunix_lite_with_transformers_logits(runs):
    import jax.numpy as jnp

    import tunix_lite

    _, out, _ = runs
    model, tokenizer = tunix_lite.load(out / "model")
    ids = tokenizer.encode("<reasoning>5 + 3 = 8.</reasoning><answer>8</answer>", add_bos=True)
    ours = np.asarray(model(jnp.asarray([ids])))
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        out / "model", dtype=torch.float32
    ).eval()
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids])).logits.numpy()
    assert np.isfinite(ours).all() and np.abs(ours - theirs).max() <= 1e-4


@pytest.fixture(scope="module")
def moved_runs(tmp_path_factory, micro_model):
    """TRL runs of 3 steps whose rewards vary (completion lengths), so every step moves the
    weights: "once" in one go, "twice" stopped after step 2 and resumed from its checkpoint."""
    script = _script()

    def length(prompts, completions, **_):
        return [len(c) / 100 for c in completions]

    def length_mod_7(prompts, completions, **_):
        return [len(c) % 7 / 7 for c in completions]

    tmp = tmp_path_factory.mktemp("moved")
    config = tmp / "grpo.yaml"
    config.write_text(yaml.safe_dump(GRPO | {"model": str(micro_model), "steps": 3,
                                            "output_dir": str(tmp / "t")}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(script, "trl_reward_functions", lambda *_: [length, length_mod_7])
        script.run(str(config), None, tmp / "once", None)
        script.run(str(config), None, tmp / "twice", None, stop_at=2, save_every=1)
        stopped = (tmp / "twice" / "trl_history.jsonl").read_text().splitlines()
        script.run(str(config), None, tmp / "twice", None, save_every=1, resume=True)
    script.main(
        [
            str(config),
            "--out",
            str(tmp / "twice"),
            "--adapters-of",
            str(tmp / "twice" / "trl_run" / "checkpoint-3"),
        ]
    )
    return tmp, [json.loads(line)["step"] for line in stopped]


def test_a_resumed_trl_run_is_the_uninterrupted_one(moved_runs):
    """--stop-at then --resume: the same history and the same weights as one run."""
    from safetensors.numpy import load_file

    tmp, stopped_steps = moved_runs
    assert stopped_steps == [1, 2]
    once, twice = (
        [json.loads(line) for line in (tmp / run / "trl_history.jsonl").read_text().splitlines()]
        for run in ("once", "twice")
    )
    assert [h["step"] for h in twice] == [1, 2, 3] and twice == once
    assert once[1]["grad_norm"] > 0 and once[1]["learning_rate"] > 0  # the weights moved
    weights = [load_file(tmp / run / "model" / "model.safetensors") for run in ("once", "twice")]
    assert all(np.array_equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_trl_adapters_load_as_a_tunix_lite_lora_run(moved_runs):
    """DIR/adapters (TRL's A and B on the start model) gives the merged DIR/model's logits."""
    import jax.numpy as jnp

    import tunix_lite

    tmp, _ = moved_runs
    merged, tokenizer = tunix_lite.load(tmp / "once" / "model")
    adapters, _ = tunix_lite.load(tmp / "once" / "adapters")
    start, _ = tunix_lite.load(tmp / "once" / "start_model" / "hf")
    ids = jnp.asarray([tokenizer.encode("<reasoning>5 + 3 = 8.</reasoning>", add_bos=True)])
    moved = np.abs(np.asarray(merged(ids)) - np.asarray(start(ids))).max()
    assert moved > 1e-4 and np.abs(np.asarray(adapters(ids)) - np.asarray(merged(ids))).max() < 1e-4


def test_a_checkpoints_adapters_are_the_ones_its_step_trained(moved_runs):
    """--adapters-of DIR/trl_run/checkpoint-3 writes DIR/adapters-3, the run's final adapters."""
    from safetensors.numpy import load_file

    tmp, _ = moved_runs
    final, saved = (
        load_file(tmp / "twice" / d / "adapters.safetensors") for d in ("adapters", "adapters-3")
    )
    assert final.keys() == saved.keys() and all(np.array_equal(final[k], saved[k]) for k in final)


@pytest.mark.parametrize(
    "flags, fault",
    [
        (["--stop-at", "9"], "--stop-at 9: must be a step from 1 to the run's 2"),
        (["--resume"], "--resume: no checkpoint in"),
        (["--adapters-of", "nowhere"], "--adapters-of nowhere: no model.safetensors there"),
    ],
)
def test_a_bad_stop_resume_or_checkpoint_is_one_line(tmp_path, capsys, flags, fault):
    """Refused before any model loads, naming the flag; nothing in DIR is written."""
    config = tmp_path / "grpo.yaml"
    config.write_text(yaml.safe_dump(GRPO | {"output_dir": str(tmp_path / "t")}))
    with pytest.raises(SystemExit) as stopped:
        _script().main([str(config), "--out", str(tmp_path / "trl"), *flags])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and err.startswith(fault) and "\n" not in err
    assert not (tmp_path / "trl").exists()
