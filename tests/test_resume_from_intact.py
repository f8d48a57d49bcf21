"""A corrupt latest checkpoint through `tunix-lite train`: one line naming the broken step, the intact
earlier one and --resume-from-intact, nothing on disk changed; with the flag, the run resumes from the
intact step, writes the broken step again and finishes."""

import hashlib
import json
from pathlib import Path

import pytest

from tunix_lite.cli import main

RUN_YAML = """\
algorithm: sft
model: {model}
train_data: {train}
validation_data: {validation}
seq_len: 32
batch_size: 2
steps: 4
warmup_steps: 1
eval_every: 0
n_accuracy: 0
checkpoint_every: 2
keep_checkpoints: 3
log_every: 1
output_dir: {out}
"""


def cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what came before
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def error_line(err: str) -> str:
    """The one error line after the progress bars; no traceback or orbax noise anywhere."""
    assert "Traceback" not in err and "ERROR:absl" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("tunix-lite train: error: ")]
    assert len(errors) == 1 and err.strip().endswith(errors[0]), err
    return errors[0].removeprefix("tunix-lite train: error: ")


@pytest.mark.slow  # three short training runs of a 1-layer model
def test_a_corrupt_latest_checkpoint_is_named_and_the_flag_resumes_from_the_intact_one(
        tmp_path, capsys, micro_model):
    rows = [{"prompt": f"What is {i} + {i}?", "completion": f"{2 * i}"} for i in range(8)]
    for name, part in (("train", rows), ("validation", rows[:2])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    out, config = tmp_path / "run", tmp_path / "run.yaml"
    config.write_text(RUN_YAML.format(model=micro_model, out=out,
                                      train=tmp_path / "train.jsonl",
                                      validation=tmp_path / "validation.jsonl"))
    assert cli(capsys, "train", "--config", config)[0] == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "4"]

    for data in (out / "checkpoints/4/model").rglob("d/*"):  # the arrays' bytes, cut short
        data.write_bytes(data.read_bytes()[:100])
    before = snapshot(out)
    code, _, err = cli(capsys, "train", "--config", config)
    message = error_line(err)
    assert code == 2 and message.startswith(f"could not read checkpoint {out}/checkpoints/4: ")
    assert message.endswith(
        "; it may be corrupt. Checkpoint 2 reads: rerun with --resume-from-intact (config key "
        f"resume_from_intact: true), or move {out}/checkpoints/4 out of {out}/checkpoints and rerun "
        "to resume from step 2")
    assert snapshot(out) == before

    code, printed, err = cli(capsys, "train", "--config", config, "--resume-from-intact")
    assert code == 0 and "Traceback" not in err, err
    assert f"resume_from_intact: skipping checkpoint {out}/checkpoints/4 (" in printed
    assert "resuming from step 2 and deleting step(s) 4\n" in printed
    assert f"resumed {out} at step 2" in printed
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3, 4]

    code, printed, _ = cli(capsys, "train", "--config", config)  # step 4 was written again, whole
    assert code == 0 and f"resumed {out} at step 4" in printed
