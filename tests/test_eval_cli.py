"""`tunix-lite eval` through `tunix_lite.cli.main`: the report's schema on the shipped tiny model,
the scoring checked against closed-form values with a scripted sampler, training runs' output
directories (LoRA: adapters on the base) loaded, and each bad input as one line before any weights
load."""

import json
import types

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite import loading
from tunix_lite.cli import main
from tunix_lite.sampler import Sampler


def run_json(capsys, *args) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # one JSON object, the progress bar went to stderr
    return json.loads(out[0])


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def check_schema(report, n):
    assert report["n"] == n == sum(row["n"] for row in report["per_task"].values())
    for row in [report, *report["per_task"].values()]:
        lo, hi = row["ci95"]
        assert 0 <= lo <= row["accuracy"] <= hi <= 1 and hi - lo > 0
    assert 0 <= report["format"] <= 1 and 0 <= report["reward"] <= 1


def test_synthetic_json_report(capsys):
    report = run_json(capsys, "--data", "synthetic", "--n", "8", "--seed", "3")
    assert {"model", "data", "seed", "accuracy", "ci95", "format", "n", "per_task"} <= report.keys()
    assert (report["model"], report["data"], report["seed"]) == ("tiny", "synthetic", 3)
    check_schema(report, 8)
    assert "pass@1" not in report and "samples" not in report  # greedy only


def test_records_file_with_samples_adds_pass_and_majority(tmp_path, capsys):
    from tunix_lite.data.synthetic import make_splits

    # no reference completion to size the budget from: --max-new-tokens
    records = [{k: r[k] for k in ("prompt", "answer", "domain")}
               for r in make_splits(0, 0, 6, seed=1)["test"]]
    path = write_jsonl(tmp_path / "eval.jsonl", records)
    report = run_json(capsys, "--data", str(path), "--samples", "2", "--max-new-tokens", "24")
    check_schema(report, len({r["prompt"] for r in records}))
    assert report["samples"] == 2 and report["max_new_tokens"] == 24
    assert 0 <= report["maj@2"] <= report["pass@2"] <= 1  # a right majority needs a right sample


def scripted_sampler(monkeypatch, replies: dict[int, list[str]]):
    """Sampler.generate answers replies[num_samples], row after row (each test is one batch)."""
    def generate(self, prompts, max_new_tokens=64, *, num_samples=1, **settings):
        texts = replies[num_samples]
        assert len(texts) == len(prompts) * num_samples
        return types.SimpleNamespace(texts=texts, lengths=np.ones(len(texts), np.int32))

    monkeypatch.setattr(Sampler, "generate", generate)


def test_scores_and_intervals_match_closed_form(tmp_path, capsys, monkeypatch):
    records = [{"prompt": f"question {i}", "answer": f"a{i}", "domain": "x" if i < 4 else "y"}
               for i in range(10)]
    path = write_jsonl(tmp_path / "ten.jsonl", records)

    def right(i):
        return f"<answer>a{i}</answer>"

    wrong = "<answer>no</answer>"
    # greedy: right on 0-2 (x: 3 of 4) and 4-7 (y: 4 of 6); reply 0 runs on past its answer
    greedy = [right(0) + " and more"] + [right(i) if i in (1, 2, 4, 5, 6, 7) else wrong
                                         for i in range(1, 10)]
    # two samples: both right (0-2), right and wrong (3-5: a 1-1 tie), wrong and untagged (6-9)
    pairs = [[right(i)] * 2 if i < 3 else [right(i), wrong] if i < 6 else [wrong, "no tag"]
             for i in range(10)]
    sampled = [s for pair in pairs for s in pair]
    scripted_sampler(monkeypatch, {1: greedy, 2: sampled})
    report = run_json(capsys, "--data", str(path), "--samples", "2", "--max-new-tokens", "8")
    assert report["accuracy"] == pytest.approx(0.7) and report["format"] == pytest.approx(0.9)
    assert report["right"] == [1, 1, 1, 0, 1, 1, 1, 1, 0, 0]  # each prompt's verdict, in order
    assert report["per_task"]["x"]["right"] == [1, 1, 1, 0]
    # Wilson 95% intervals, golden values: 7/10, 3/4, 4/6
    assert report["ci95"] == pytest.approx([0.396773, 0.892211], abs=1e-6)
    x, y = report["per_task"]["x"], report["per_task"]["y"]
    assert (x["n"], x["accuracy"], y["n"], y["accuracy"]) == (4, 0.75, 6, pytest.approx(4 / 6))
    assert x["ci95"] == pytest.approx([0.300636, 0.954414], abs=1e-6)
    assert y["ci95"] == pytest.approx([0.299988, 0.903231], abs=1e-6)
    assert report["pass@2"] == pytest.approx(0.6)  # some right sample: prompts 0-5
    assert report["maj@2"] == pytest.approx((3 + 3 * 0.5) / 10)  # ties split the credit
    # guessing, from the reference answers (all distinct here): 1 of 4 and 1 of 6 always-the-same
    assert report["constant"] == pytest.approx(0.2) and x["constant"] == 0.25
    assert report["guess_pass@2"] == 0.0  # no prompt's answer is among the others' answers


def test_guessing_scores_the_answers_prior():
    """A task whose answer is "1" three times in four is 0.75 right by always saying "1"."""
    from tunix_lite.model_eval import guessing

    records = [{"answer": a, "domain": "x"} for a in ("1", "1", " 1", "2")]
    records += [{"answer": a, "domain": "y"} for a in ("7", "8")]
    assert guessing(records) == {"constant": pytest.approx((3 + 1) / 6)}
    # 2 guesses drawn from the other prompts' answers: a "1" prompt sees two "1"s in three, the "2"
    # prompt and the y prompts never see their own answer
    assert guessing(records, 2)["guess_pass@2"] == pytest.approx(3 * (1 - (1 / 3) ** 2) / 6)


def test_training_run_directories_load(tmp_path, capsys, monkeypatch):
    from tunix_lite.lora import apply_lora, lora_layers, save_adapters
    from tunix_lite.training.sft import SFTConfig
    from tunix_lite.weights.hf import save_hf_model

    model, tokenizer = loading.load("tiny")
    tokens = jnp.arange(12, dtype=jnp.int32)[None]
    full = tmp_path / "full"  # what a full fine-tuning run's output_dir holds (harness.export)
    save_hf_model(model, full / "model")
    tokenizer.save(full / "model" / "tokenizer.model")
    np.testing.assert_array_equal(np.asarray(loading.load(full)[0](tokens)),
                                  np.asarray(model(tokens)))

    apply_lora(model, rank=4, alpha=8.0, targets=[r"attn\.(q|v)_proj"], rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    for _, layer in lora_layers(model):  # B = 0 would hide a wrong load
        layer.lora_b.set_value(jnp.asarray(rng.normal(size=layer.lora_b.shape) * 0.1, jnp.float32))
    run = tmp_path / "run"
    run.mkdir()
    save_adapters(model, run / "adapters.safetensors")  # and a LoRA run's
    (run / "config.yaml").write_text(SFTConfig(model="tiny", lora_rank=4, lora_alpha=8.0).to_yaml())

    loaded, _ = loading.load(run)
    assert len(lora_layers(loaded)) == len(lora_layers(model)) == 2 * model.config.num_layers
    np.testing.assert_array_equal(np.asarray(loaded(tokens)), np.asarray(model(tokens)))
    assert loading.model_config(run) == model.config

    scripted_sampler(monkeypatch, {1: ["<answer>x</answer>"] * 4})
    assert run_json(capsys, "--model", str(run), "--n", "4")["n"] == 4

    # a LoRA run that started from that LoRA run (RL after a LoRA warm-up): the chain merges
    from tunix_lite.lora import merge_lora

    second = merge_lora(model)
    apply_lora(second, rank=2, alpha=2.0, targets=[r"mlp\.up_proj"], rngs=nnx.Rngs(1))
    for _, layer in lora_layers(second):
        layer.lora_b.set_value(jnp.asarray(rng.normal(size=layer.lora_b.shape) * 0.1, jnp.float32))
    chained = tmp_path / "chained"
    chained.mkdir()
    save_adapters(second, chained / "adapters.safetensors")
    (chained / "config.yaml").write_text(SFTConfig(model=str(run), lora_rank=2, lora_alpha=2.0).to_yaml())
    np.testing.assert_allclose(np.asarray(loading.load(chained)[0](tokens)), np.asarray(second(tokens)),
                               rtol=1e-5, atol=1e-5)


def test_an_unfinished_run_is_scored_from_its_checkpoints(tmp_path, capsys, micro_model):
    """A run stopped before its export (max_minutes ran out, the session ended) is still a model:
    its newest checkpoint, or RUN/checkpoints/STEP, on the base its config.yaml names."""
    import yaml

    from tunix_lite.training.stopped_run import load_stopped_run, stopped_run

    out = tmp_path / "run"
    config = dict(model=str(micro_model), lora_rank=4, lora_alpha=8.0, n_train=32, n_validation=8,
                  n_accuracy=0, seq_len=128, batch_size=4, steps=4, warmup_steps=1, learning_rate=1e-2,
                  eval_every=0, checkpoint_every=2, output_dir=str(out))
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(tmp_path / "sft.yaml")]) == 0
    tokens = jnp.arange(12, dtype=jnp.int32)[None]
    exported = np.asarray(loading.load(out)[0](tokens))
    assert stopped_run(str(out)) is None  # finished: its export is the model
    # the last checkpoint holds what was exported; an earlier one, the model as it was then
    np.testing.assert_allclose(np.asarray(load_stopped_run(out, 4)[0](tokens)), exported, atol=1e-6)
    assert not np.allclose(np.asarray(load_stopped_run(out, 2)[0](tokens)), exported, atol=1e-3)

    (out / "adapters.safetensors").unlink()  # as if the run had stopped before its export
    assert stopped_run(str(out)) == (out, None)
    assert stopped_run(str(out / "checkpoints" / "2")) == (out, 2)
    capsys.readouterr()
    assert main(["eval", "--model", str(out), "--n", "4", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 4
    assert "with checkpoint 4 of 4 steps (an unfinished run)" in captured.err


@pytest.mark.parametrize("args, named", [
    (["--model", "./no_such_model"], "no_such_model"),
    (["--data", "nonsense"], "nonsense"),
    (["--data", "missing.jsonl"], "missing.jsonl"),
    (["--data", "{no_answer}"], "no answer column"),
    (["--data", "{no_prompt}"], "no prompt column"),
    (["--n", "0"], "--n 0"),
    (["--samples", "0"], "--samples 0"),
    (["--samples", "4", "--temperature", "0"], "--temperature 0.0"),
    (["--data", "reasoning_gym:leg_countin"], "did you mean leg_counting"),
    (["--data", "reasoning_gym:leg_counting?leg_counting.legs=4"], "no config key 'legs'"),
    (["--data", "reasoning_gym:simple_equations?simple_equations.operators=['+','-']"],  # 3 weights: at item time
     "simple_equations rejects its config {'operators': ['+', '-']} (ValueError: The number of weights"),
    (["--data", "reasoning_gym:game_of_life_halting"], "full marks, so it can neither"),
])
def test_bad_input_is_one_line_before_the_model_loads(args, named, tmp_path, capsys, monkeypatch):
    files = {"{no_answer}": write_jsonl(tmp_path / "a.jsonl", [{"prompt": "2 + 2", "solution": "4"}]),
             "{no_prompt}": write_jsonl(tmp_path / "p.jsonl", [{"question": "2", "answer": "4"}])}
    args = [str(files.get(a, a)) for a in args]

    def no_load(*_, **__):
        raise AssertionError("the model loaded before the bad input was caught")

    monkeypatch.setattr(loading, "load", no_load)
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tunix-lite eval: error: ") and named in err[0]


def test_reasoning_gym_is_scored_by_the_tasks_own_scorer(capsys, monkeypatch):
    from tunix_lite.data.reasoning_gym import make_records

    spec = "reasoning_gym:leg_counting,basic_arithmetic"
    records = make_records(spec, size=4, seed=5)  # what `eval --n 4 --seed 5` scores, in its order
    # the reference demonstration for the first three, a wrong answer for the last
    replies = [r["completion"] for r in records[:3]] + ["<answer>-1</answer>"]
    scripted_sampler(monkeypatch, {1: replies})
    report = run_json(capsys, "--data", spec, "--n", "4", "--seed", "5")
    assert report["accuracy"] == report["reward"] == 0.75 and report["format"] == 1.0
    assert report["per_task"].keys() == {"leg_counting", "basic_arithmetic"}
    assert sum(row["n"] for row in report["per_task"].values()) == 4


def test_a_task_with_few_questions_scores_each_prompt_once(capsys, monkeypatch):
    """One-digit products have 100 questions: 300 items repeat them, and counting a repeated greedy answer
    again would narrow the interval with no new evidence."""
    from tunix_lite.data.reasoning_gym import make_records

    spec = "reasoning_gym:products?products.max_digits=1"
    distinct = len({r["prompt"] for r in make_records(spec, size=300, seed=5)})
    assert distinct <= 100
    def generate(self, prompts, max_new_tokens=64, *, num_samples=1, **settings):
        return types.SimpleNamespace(texts=["<answer>0</answer>"] * len(prompts), lengths=np.ones(len(prompts)))

    monkeypatch.setattr(Sampler, "generate", generate)
    assert run_json(capsys, "--data", spec, "--n", "300", "--seed", "5")["n"] == distinct
