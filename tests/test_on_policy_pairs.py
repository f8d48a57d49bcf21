"""On-policy preference pairs: the model's own samples judged by the verifier (tunix_lite.preference.on_policy),
and a pipeline's dpo stage that samples them from the model it starts from (`on_policy_pairs:`)."""

import json

import numpy as np
import pytest
import yaml

from tunix_lite.cli import main
from tunix_lite.preference.on_policy import pairs_from_verdicts


def test_pairs_take_a_right_and_a_wrong_sample_of_the_same_prompt():
    records = [{"prompt": f"p{i}", "answer": "a"} for i in range(4)]
    completions = [f"p{i} s{s}" for i in range(4) for s in range(3)]
    right = np.array([[0, 1, 0],   # mixed: chosen s1, rejected s0
                      [1, 1, 1],   # all right: no pair
                      [0, 0, 0],   # all wrong: no pair
                      [1, 0, 1]])  # mixed: chosen s0, rejected s1
    pairs, counts = pairs_from_verdicts(records, completions, right)
    assert pairs == [{"prompt": "p0", "chosen": "p0 s1", "rejected": "p0 s0"},
                     {"prompt": "p3", "chosen": "p3 s0", "rejected": "p3 s1"}]
    assert counts == {"prompts": 4, "pairs": 2, "all_right": 1, "all_wrong": 1}
    with pytest.raises(ValueError, match=r"right \(4, 2\) must be \[records, samples\]"):
        pairs_from_verdicts(records, completions, right[:, :2])


def pipeline_file(tmp_path, dpo: dict, **changes):
    values = {
        "output_dir": str(tmp_path / "run"), "model": "tiny",
        "data": {"n_train": 32, "n_validation": 16, "n_test": 8},
        "defaults": {"seq_len": 160, "truncation": "drop", "batch_size": 4, "warmup_steps": 0, "eval_every": 0,
                     "n_accuracy": 0, "log_every": 1},
        "stages": [{"name": "dpo", "algorithm": "dpo", "steps": 2, "learning_rate": 1e-5} | dpo],
        "evaluation": None, "export": False,
    } | changes
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


@pytest.mark.parametrize("stage, message", [
    ({"algorithm": "sft", "on_policy_pairs": {"samples": 4}},
     "stages[0] (dpo): on_policy_pairs: only a stage that trains on pairs (dpo, reward_model) samples them"),
    ({"on_policy_pairs": {"samples": 1}}, "stages[0] (dpo): on_policy_pairs.samples: must be >= 2, got 1"),
    ({"on_policy_pairs": {"sample": 4}},
     "stages[0] (dpo): on_policy_pairs.sample: not an on_policy_pairs key (did you mean 'samples'?)"),
    ({"on_policy_pairs": True, "train_data": "pairs.jsonl"},
     "stages[0] (dpo): on_policy_pairs: the stage's pairs are sampled, so it takes no train_data"),
])
def test_bad_on_policy_pairs_get_one_line_before_any_compute(tmp_path, capsys, stage, message):
    path = pipeline_file(tmp_path, stage)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tunix-lite run: error: {path}: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_dpo_stage_trains_on_pairs_sampled_from_the_model_it_starts_from(tmp_path, capsys):
    """The tiny model answers some synthetic prompts right and others wrong: its dpo stage writes the pairs of its
    own samples (each chosen reply right, each rejected one wrong), trains on them, and a rerun samples nothing
    again. A source model with no right answer is refused in one line that says what to change."""
    from tunix_lite.data.synthetic import reward_exact_match

    settings = {"prompts": 32, "samples": 8, "max_new_tokens": 48, "batch_size": 16}
    path = pipeline_file(tmp_path, {"on_policy_pairs": settings})
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "run" / "pairs" / "dpo"
    counts = json.loads((folder / "counts.json").read_text())
    assert counts["train"]["prompts"] == 32 and counts["validation"]["prompts"] == 16
    pairs = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    assert len(pairs) == counts["train"]["pairs"] > 0 and "on-policy pairs: 32 train prompts x 8" in out
    answers = {json.loads(line)["prompt"]: json.loads(line)["answer"]
               for line in (tmp_path / "run" / "data" / "train.jsonl").read_text().splitlines()}
    for key, verdict in (("chosen", 1.0), ("rejected", 0.0)):
        scores = reward_exact_match([p["prompt"] for p in pairs], [p[key] for p in pairs],
                                    answer=[answers[p["prompt"]] for p in pairs])
        assert scores == [verdict] * len(pairs), key
    config = yaml.safe_load((tmp_path / "run" / "dpo" / "config.yaml").read_text())
    assert config["train_data"] == str(folder / "train.jsonl") and config["model"] == "tiny"

    (tmp_path / "run" / "dpo" / "stage.json").unlink()  # train the stage again: the pairs stay as they are
    written = (folder / "train.jsonl").stat().st_mtime_ns
    assert main(["run", str(path)]) == 0
    assert "on-policy pairs" not in capsys.readouterr().out and (folder / "train.jsonl").stat().st_mtime_ns == written

    hopeless = pipeline_file(tmp_path / "b", {"on_policy_pairs": settings | {"max_new_tokens": 1}})
    assert main(["run", str(hopeless)]) == 2
    err = capsys.readouterr().err.strip()
    assert ("stage 'dpo': on_policy_pairs: none of 32 train prompts had both a right and a wrong sample (0 all "
            "right, 32 all wrong); raise samples or prompts, or start the stage from another model") in err, err
    assert "\n" not in err
