"""Held out by construction, and counted: the content split of every data source (reasoning-gym
specs, record files, the synthetic generator), `tunix-lite eval --exclude` and its count of a run's
own data, and the pipeline refusing a test set that its training data asks (or, with
allow_overlap, scoring those prompts apart as "seen"). Through the CLI, on the micro model; the
answers are scripted where only the counting is under test."""

import json
import shutil
import types

import numpy as np
import pytest
import yaml

from tunix_lite.cli import main
from tunix_lite.data import synthetic
from tunix_lite.data.questions import normalise, question_key, unordered_key
from tunix_lite.data.reasoning_gym import make_records
from tunix_lite.data.records import load_records
from tunix_lite.sampler import Sampler

PRODUCTS = "reasoning_gym:products?products.max_digits=1"


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def questions(n, start=0):
    return [{"prompt": f"What is {i} plus {i}?", "answer": str(2 * i), "domain": "sum"}
            for i in range(start, start + n)]


@pytest.fixture
def asked(monkeypatch):
    """The texts the sampler is asked (chat-formatted prompts, a batch padded with its last one);
    every answer is "<answer>0</answer>"."""
    prompts = []

    def generate(self, batch, max_new_tokens=64, *, num_samples=1, **settings):
        prompts.extend(self.tokenizer.decode(list(ids)) for ids in batch)
        texts = ["<answer>0</answer>"] * (len(batch) * num_samples)
        return types.SimpleNamespace(texts=texts, lengths=np.ones(len(texts), np.int32))

    monkeypatch.setattr(Sampler, "generate", generate)
    return prompts


def eval_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["eval", *args, "--max-new-tokens", "4", "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def one_line_error(capsys, command, *args) -> str:
    capsys.readouterr()
    assert main([command, *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tunix-lite {command}: error: "), lines
    return lines[0].removeprefix(f"tunix-lite {command}: error: ")


def fake_run(folder, train_data, model, micro_model=None):
    """A training run's output_dir as the harness leaves it: config.yaml (its data and start
    model), and with `micro_model` the model it wrote (RUN/model)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"algorithm": "sft", "model": str(model),
                                                        "train_data": str(train_data)}))
    if micro_model is not None:
        shutil.copytree(micro_model, folder / "model")
    return folder


# ----------------------------------------------------------------------------- the content split


def test_a_files_sides_split_by_question_whatever_the_order_wording_or_other_records(tmp_path):
    records = questions(200)
    whole = write_jsonl(tmp_path / "all.jsonl", records)
    test = list(load_records(f"{whole}?split=test")["prompt"])
    train = list(load_records(f"{whole}?split=train")["prompt"])
    assert sorted(test + train) == sorted(r["prompt"] for r in records)
    assert not set(test) & set(train) and 20 < len(test) < 60  # test_fraction 0.2 of 200
    # another file: reversed, reworded in case and spacing, with other questions: the same sides
    other = [dict(r, prompt=r["prompt"].upper().replace(" ", "  ")) for r in records[::-1]]
    other_path = write_jsonl(tmp_path / "other.jsonl", other + questions(50, 500))
    other_test = {normalise(p) for p in load_records(f"{other_path}?split=test")["prompt"]}
    assert {normalise(p) for p in test} <= other_test
    assert not {normalise(p) for p in train} & other_test
    wider = set(load_records(f"{whole}?split=test&test_fraction=0.5")["prompt"])
    assert set(test) <= wider  # a larger test side holds the smaller one


def test_a_file_of_generated_records_splits_as_the_spec_that_generated_it(tmp_path):
    """basic_arithmetic words one expression several ways: each goes to its expression's side."""
    spec = "reasoning_gym:basic_arithmetic?size=60&seed=3&basic_arithmetic.max_terms=2"
    path = write_jsonl(tmp_path / "gym.jsonl", make_records(spec))
    for side in ("train", "test"):
        from_file = list(load_records(f"{path}?split={side}")["prompt"])
        from_spec = make_records(f"{spec}&split={side}", size=len(from_file))
        assert sorted(from_file) == sorted(r["prompt"] for r in from_spec)


def test_the_sides_of_a_spec_share_no_question_under_any_seed():
    """One-digit products have 100 questions: another seed asks the training questions again, the
    test side under no seed does."""
    def asks(spec):
        return {question_key(json.loads(r["entry"])) for r in make_records(spec)}

    train = set().union(*(asks(f"{PRODUCTS}&split=train&size=300&seed={s}") for s in (1, 2)))
    assert asks(f"{PRODUCTS}&size=40&seed=7") & train  # a seed alone holds nothing out
    for seed in (3, 4, 5):
        test = asks(f"{PRODUCTS}&split=test&size=40&seed={seed}")
        assert test and not test & train


def test_an_unordered_split_keeps_each_fact_and_its_mirror_on_one_side():
    """Split by question, 3 * 7 may train while 7 * 3 is tested; with unordered=true the test side
    holds whole pairs, and neither member of one ever trains."""
    def asks(spec):
        return {question_key(json.loads(r["entry"])) for r in make_records(spec)}

    def mirror(key):
        return " * ".join(reversed(key.split(" * ")))

    by_question = asks(f"{PRODUCTS}&split=test&size=200")
    assert any(mirror(key) not in by_question for key in by_question)
    train = asks(f"{PRODUCTS}&split=train&unordered=true&size=2000&seed=1")
    test = asks(f"{PRODUCTS}&split=test&unordered=true&size=400&seed=2")
    assert len(train) + len(test) == 100 and not train & test
    assert all(mirror(key) in test for key in test)
    assert [unordered_key(k) for k in ("7 * 3", "3 + 9 + 1", "5 - 2", "4 * 2 + 1", "x")] == [
        "3 * 7", "1 + 3 + 9", "5 - 2", "4 * 2 + 1", "x"]


def test_the_synthetic_generator_words_each_question_once():
    """split_of hashes a prompt as generated; that is a split by question because no two generated
    prompts normalise alike."""
    prompts = {r["prompt"] for domain in synthetic.DOMAINS for split in synthetic.SPLITS
               for r in synthetic.generate(domain, 300, seed=4, split=split)}
    assert len({normalise(p) for p in prompts}) == len(prompts)


@pytest.mark.parametrize("query, message", [
    ("split=tset", "'split=tset': split must be train or test"),
    ("split=test&test_fraction=1.5", "'test_fraction=1.5': test_fraction is the share"),
    ("side=test", "'side=test' is neither split=train|test nor test_fraction=F"),
    ("test_fraction=0.3", "the query names no side of the content split; add split=train or "
                          "split=test"),
])
def test_a_bad_split_of_a_file_is_one_line(tmp_path, capsys, query, message):
    path = write_jsonl(tmp_path / "all.jsonl", questions(10))
    err = one_line_error(capsys, "eval", "--data", f"{path}?{query}")
    assert err.startswith(f"--data: {path}?{query}: ") and message in err, err


# ----------------------------------------------------------------------------- tunix-lite eval


def test_exclude_scores_only_the_prompts_no_source_asks(tmp_path, capsys, micro_model, asked):
    data = write_jsonl(tmp_path / "test.jsonl", questions(12))
    # the same questions reworded in case and spacing are the same questions
    trained = write_jsonl(tmp_path / "train.jsonl",
                          [dict(r, prompt="  " + r["prompt"].lower()) for r in questions(5, 3)])
    report = eval_json(capsys, "--model", str(micro_model), "--data", str(data),
                       "--exclude", str(trained))
    assert (report["n_excluded"], report["n"], report["exclude"]) == (5, 7, [str(trained)])
    for r in questions(12):
        assert any(r["prompt"] in text for text in asked) == (not 3 <= int(r["answer"]) // 2 < 8)
    assert report["n_seen"] is None and report["model_data"] == []  # a checkpoint: not listed
    # a run directory stands for its data and its start model's; a spec that asks none of them
    warmup = fake_run(tmp_path / "warmup", write_jsonl(tmp_path / "a.jsonl", questions(2)), "tiny")
    rl = fake_run(tmp_path / "rl", trained, warmup)
    report = eval_json(capsys, "--model", str(micro_model), "--data", str(data),
                       "--exclude", str(rl), "--exclude", PRODUCTS + "&size=20")
    assert (report["n_excluded"], report["n"]) == (7, 5)
    capsys.readouterr()
    assert main(["eval", "--model", str(micro_model), "--data", str(data), "--exclude",
                 str(trained), "--max-new-tokens", "4"]) == 0
    assert f"excluded 5 prompts that {trained} ask; scored the other 7" in capsys.readouterr().out
    assert eval_json(capsys, "--model", str(micro_model), "--data", str(data))["n_excluded"] == 0


def test_evaluating_a_run_scores_the_prompts_it_trained_on_apart(tmp_path, capsys, micro_model,
                                                                 asked):
    """Its data and its start model's count as seen, the rest as unseen; unseen printed first."""
    data = write_jsonl(tmp_path / "test.jsonl", questions(12))
    warmup = fake_run(tmp_path / "warmup", write_jsonl(tmp_path / "a.jsonl", questions(2)), "tiny")
    rl = fake_run(tmp_path / "rl", write_jsonl(tmp_path / "b.jsonl", questions(3, 9)), warmup,
                  micro_model)
    report = eval_json(capsys, "--model", str(rl), "--data", str(data))
    assert report["n_seen"] == 5 and len(report["model_data"]) == 2
    assert (report["seen"]["n"], report["unseen"]["n"], report["n"]) == (5, 7, 12)
    capsys.readouterr()
    assert main(["eval", "--model", str(rl), "--data", str(data), "--max-new-tokens", "4"]) == 0
    text = capsys.readouterr().out
    assert text.index("unseen n=7: greedy") < text.index("seen   n=5: greedy")


def test_a_source_that_is_not_there_is_one_line_before_any_weights_load(tmp_path, capsys):
    data = write_jsonl(tmp_path / "test.jsonl", questions(4))
    err = one_line_error(capsys, "eval", "--data", str(data), "--exclude", str(tmp_path / "nope"))
    assert err == (f"{tmp_path / 'nope'}: no such file or directory, and not a reasoning_gym spec;"
                   " a source is a reasoning_gym spec, a records file or saved dataset, a training"
                   " run's output_dir (its config.yaml names its data), or a pipeline's output_dir")
    err = one_line_error(capsys, "eval", "--data", str(data), "--exclude", str(data))
    assert err.startswith(f"--exclude {data}: all 4 prompts occur there; nothing is left to score")


# ----------------------------------------------------------------------------- the pipeline


def pipeline_file(tmp_path, model, train, **evaluation):
    """A one-stage SFT pipeline on `train`'s questions, tested on 4 questions: 38 to 41."""
    train = write_jsonl(tmp_path / "train.jsonl",
                        [dict(r, completion=f"<answer>{r['answer']}</answer>") for r in train])
    test = write_jsonl(tmp_path / "test.jsonl", questions(4, 38))
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": str(model), "export": False,
        "data": {"train": str(train), "validation": str(train), "test": str(test)},
        "defaults": {"seq_len": 32, "batch_size": 2, "warmup_steps": 0, "eval_every": 0,
                     "n_accuracy": 0},
        "stages": [{"name": "sft", "algorithm": "sft", "steps": 1}],
        "evaluation": {"n_prompts": 4, "samples": 1, "scaling": [1], "max_new_tokens": 4}
        | evaluation}))
    return path


REFUSED = ("hold them out by construction (split=test in a reasoning_gym spec, PATH?split=test for "
           "a records file, the synthetic test split) or set evaluation.allow_overlap: true to "
           "score them apart as seen")


def test_a_test_set_its_start_models_data_asks_is_refused_before_any_training(tmp_path, capsys,
                                                                               micro_model):
    warmup = fake_run(tmp_path / "warmup", write_jsonl(tmp_path / "a.jsonl", questions(3, 40)),
                      "tiny", micro_model)
    path = pipeline_file(tmp_path, warmup / "model", questions(30))
    err = one_line_error(capsys, "run", str(path))
    assert err == (f"{path}: data.test: 2 of the 4 test prompts occur in the training data (base "
                   f"model's 2); {REFUSED}")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []  # nothing written


def test_allow_overlap_scores_the_seen_prompts_apart_and_a_rerun_without_is_refused(
        tmp_path, capsys, micro_model, asked):
    path = pipeline_file(tmp_path, micro_model, questions(40), allow_overlap=True)
    assert main(["run", str(path)]) == 0
    report = tmp_path / "run" / "report"
    header = (report / "table.md").read_text().splitlines()[0]
    assert header.startswith("| stage | unseen, n=2 [95% CI] | vs previous, unseen [95% CI] | "
                             "seen, n=2 [95% CI] | all, n=4 [95% CI] |"), header
    decontamination = json.loads((report / "decontamination.json").read_text())
    assert decontamination["seen"] == [0, 1] and decontamination["allow_overlap"] is True
    assert decontamination["stages"]["sft"] | {"data": None} == {
        "from": "base", "data": None, "n_records": 40, "n_seen": 2, "n_seen_through": 2}
    table = json.loads((report / "table.json").read_text())
    for stage in ("base", "sft"):  # what `tunix-lite grade-capstone` reads: n and n_unseen
        summary = table[stage]["summary"]
        assert (summary["n"], summary["n_seen"], summary["n_unseen"]) == (4, 2, 2)
        assert {"unseen", "unseen_ci95", "seen", "seen_ci95"} <= set(summary)
    assert "unseen_vs_previous" in table["sft"]["summary"]
    # the pipeline's output_dir stands for every stage's data
    report = eval_json(capsys, "--model", str(micro_model), "--data", str(tmp_path / "test.jsonl"),
                       "--exclude", str(tmp_path / "run"))
    assert (report["n_excluded"], report["n"]) == (2, 2)

    files = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    path.write_text(path.read_text().replace("allow_overlap: true", "allow_overlap: false"))
    err = one_line_error(capsys, "run", str(path))
    assert err == (f"{path}: data.test: 2 of the 4 test prompts occur in the training data (sft's "
                   f"2); {REFUSED}")
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == files
