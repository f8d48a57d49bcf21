"""Bad input and faults through the public entry points (`tunix-lite train/generate`, `run_sft`, the loaders): each
case stops with one line naming the file / row / key, the value and the fix, and nothing saved earlier is lost or
overwritten (issue 11).

Most cases fail before any compute. The resume cases share one 3-step LoRA run (with dropout) of a 1-layer model
built here (same tokenizer as `tiny`, compiles in seconds); later tests copy its output directory.
"""

import contextlib
import errno
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import yaml
from flax import nnx
from safetensors.numpy import load_file

from tunix_lite.cli import main
from tunix_lite.data.records import load_records
from tunix_lite.loading import ASSETS
from tunix_lite.training.inputs import load_data, synthetic_tasks
from tunix_lite.training.sft import SFTConfig


def cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what the test's own setup printed
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def only_error(err: str, command: str = "train") -> str:
    """The error line, after checking it is the only line: no traceback, no progress bar, no log noise."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tunix-lite {command}: error: "), err
    return lines[0].removeprefix(f"tunix-lite {command}: error: ")


def last_error(err: str, command: str = "train") -> str:
    """The error line of a run that got as far as training (progress bars above it), with no traceback or
    orbax noise anywhere."""
    assert "Traceback" not in err and "Event loop is closed" not in err and "ERROR:absl" not in err, err
    errors = [line for line in err.splitlines() if line.startswith(f"tunix-lite {command}: error: ")]
    assert len(errors) == 1 and err.strip().endswith(errors[0]), err
    return errors[0].removeprefix(f"tunix-lite {command}: error: ")


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root by relative name -> sha256: to check nothing was lost or overwritten."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def write_yaml(path: Path, text: str = "", **values) -> Path:
    path.write_text(text + (yaml.safe_dump(values) if values else ""))
    return path


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize("text, message", [
    ('steps: "ten"\n', "steps: expected an integer, got 'ten' (str)"),
    ("learning_rate: fast\n", "learning_rate: expected a number, got 'fast' (str)"),
    ("micro_batches: 0\n", "micro_batches: must be >= 1, got 0"),
    ("lora_rank: 0\n", "lora_rank: must be >= 1, got 0"),
    ("lora_rank: -1\n", "lora_rank: must be >= 1, got -1"),
    ("compute_dtype: fp16\n", "compute_dtype: 'fp16' is not supported; choose one of 'float32', 'bfloat16'"),
    ("learning_rate: -1e-3\n", "learning_rate: must be > 0, got -0.001"),
    ("model: ''\n", "model: expected a model name or checkpoint directory, got an empty string"),
    ("eval_every: -1\n", "eval_every: must be >= 0, got -1"),
    ("learning_rate: .nan\n", "learning_rate: expected a finite number, got nan"),
])
def test_bad_config_values_stop_the_cli_in_one_line(tmp_path, capsys, text, message):
    path = write_yaml(tmp_path / "c.yaml", text)
    code, _, err = cli(capsys, "train", "--config", path)
    assert code == 2 and only_error(err) == f"{path}: {message}"


@pytest.mark.parametrize("values, message", [
    ({"lora_rank": 0}, "lora_rank: must be >= 1, got 0"),
    ({"micro_batches": 0}, "micro_batches: must be >= 1, got 0"),
    ({"learning_rate": "1e-3x"}, "learning_rate: expected a number, got '1e-3x' (str)"),
    ({"compute_dtype": "fp16"}, "compute_dtype: 'fp16' is not supported; choose one of 'float32', 'bfloat16'"),
])
def test_configs_built_in_python_are_checked_as_yaml_ones_are(values, message):
    """run_sft(SFTConfig(...)) is a public entry point too: the dataclass checks its values when built."""
    from tunix_lite.training.config import ConfigError

    with pytest.raises(ConfigError) as error:
        SFTConfig(**values)
    assert str(error.value) == message
    assert SFTConfig(learning_rate="1e-3").learning_rate == 1e-3


def test_seq_len_beyond_the_models_context_is_refused_before_loading(tmp_path, capsys):
    code, _, err = cli(capsys, "train", "--config", write_yaml(tmp_path / "c.yaml", seq_len=4096))
    assert code == 2 and only_error(err) == "seq_len: 4096 is longer than tiny's context of 1024 tokens"


def test_output_dir_under_a_file_or_unwritable_is_refused_before_compute(tmp_path, capsys, monkeypatch):
    (tmp_path / "a_file").write_text("keep me")
    config = write_yaml(tmp_path / "c.yaml", output_dir=str(tmp_path / "a_file/run"))
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2
    assert only_error(err) == f"output_dir: {tmp_path}/a_file/run cannot be created: {tmp_path}/a_file is a file"
    assert (tmp_path / "a_file").read_text() == "keep me"
    # tests run as root here, where every directory is writable: stand in for a read-only one
    monkeypatch.setattr("os.access", lambda path, mode: Path(path) != tmp_path / "ro")
    (tmp_path / "ro").mkdir()
    config = write_yaml(tmp_path / "c.yaml", output_dir=str(tmp_path / "ro/run"))
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err) == f"output_dir: {tmp_path}/ro is not writable; choose another output_dir"


# ----------------------------------------------------------------------------- data


GOOD = {"prompt": "What is 2 + 2?", "completion": "<answer>4</answer>"}
CHAT = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"}]}\n'


@pytest.mark.parametrize("name, content, message", [
    ("broken.jsonl", b'{"prompt": "a", "completion": "b"}\n\n{"prompt": "a" "completion": "b"}\n',
     "broken.jsonl line 3: not valid JSON (Expecting ',' delimiter, column 16)"),
    ("empty.jsonl", b"", "empty.jsonl: no records (the file is empty)"),
    ("blank.jsonl", b"\n  \n", "blank.jsonl: no records (the file is empty)"),
    ("latin1.jsonl", b'{"prompt": "a", "completion": "b"}\n{"prompt": "caf\xe9", "completion": "b"}\n',
     "latin1.jsonl line 2: bytes b'\\xe9' at column 16 are not UTF-8; save the file as UTF-8"),
    ("list.jsonl", b'{"prompt": "a", "completion": "b"}\n["a", "b"]\n',
     "list.jsonl line 2: expected a JSON object per line, got list"),
    ("mixed.jsonl", b'{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": 4}\n',
     "mixed.jsonl line 2: 'completion' is a number, but a string at line 1; a column holds one type"),
    ("array.json", b'[{"prompt": "a", "completion": "b"},\n {"prompt": "a", "completion": "b"}\n',
     "array.json line 3: not valid JSON (Expecting ',' delimiter, column 1)"),
    ("short.csv", b"prompt,completion\nWhat is 2 + 2?,4\nWhat is 3 + 3?\n",
     "short.csv line 3: 1 fields, the header has 2 (prompt, completion)"),
    ("chat_int.jsonl", CHAT + b'{"messages": [{"role": "user", "content": 4}]}\n',
     ("chat_int.jsonl line 2: 'messages' message 0: 'content' is a number (4), not a string; "
      "write the message's text as a string")),
    ("chat_parts.jsonl",
     CHAT + b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}\n',
     ("chat_parts.jsonl line 2: 'messages' message 0: 'content' is a list ([{'type': 'text', "
      "'text': 'hi'}]), not a string; join the text parts into one string")),
    ("chat_role.jsonl", CHAT + b'{"messages": [{"role": 1, "content": "hi"}]}\n',
     ("chat_role.jsonl line 2: 'messages[].role' is a number, but a string at line 1; a column "
      "holds one type")),
    ("notes.txt", b"hello\n", "notes.txt: expected a .jsonl, .json, .csv, .parquet file or a datasets directory "
                              "(save_to_disk)"),
    ("missing.jsonl", None, "missing.jsonl: no such file or directory"),
])
def test_bad_data_files_name_the_file_and_line(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    (tmp_path / "val.jsonl").write_text(json.dumps(GOOD) + "\n")
    config = write_yaml(tmp_path / "c.yaml", train_data=str(path), validation_data=str(tmp_path / "val.jsonl"))
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err) == f"train_data: {tmp_path}/{message}"


def test_a_record_the_model_cannot_train_on_names_the_key_the_row_and_the_fix(tmp_path, capsys):
    (tmp_path / "train.jsonl").write_text(json.dumps(GOOD) + "\n" + json.dumps({"prompt": "word " * 80, "completion": "x"}))
    (tmp_path / "val.jsonl").write_text(json.dumps({"prompt": "hi"}) + "\n")
    config = write_yaml(tmp_path / "c.yaml", train_data=str(tmp_path / "train.jsonl"),
                        validation_data=str(tmp_path / "val.jsonl"), seq_len=64)
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err) == (
        f"train_data ({tmp_path}/train.jsonl): row 1: 93 tokens, more than seq_len + 1 = 65; raise seq_len or set "
        "truncation to 'drop' or 'truncate'")
    config = write_yaml(tmp_path / "c.yaml", train_data=str(tmp_path / "train.jsonl"),
                        validation_data=str(tmp_path / "val.jsonl"), truncation="drop")
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err).startswith(f"validation_data ({tmp_path}/val.jsonl): row 0: needs a "
                                                    "'messages' list or string 'prompt' and 'completion' columns")


def test_a_datasets_dict_directory_names_its_splits(tmp_path, capsys):
    datasets.DatasetDict({"train": datasets.Dataset.from_list([GOOD]),
                          "test": datasets.Dataset.from_list([GOOD])}).save_to_disk(str(tmp_path / "dd"))
    (tmp_path / "plain").mkdir()
    config = write_yaml(tmp_path / "c.yaml", train_data=str(tmp_path / "dd"), validation_data=str(tmp_path / "dd"))
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err) == f"train_data: {tmp_path}/dd: holds the splits train, test; name one of " \
                                            f"them, e.g. {tmp_path}/dd/train"
    config = write_yaml(tmp_path / "c.yaml", train_data=str(tmp_path / "plain"), validation_data=str(tmp_path / "dd"))
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and "plain: a directory, but not one written by datasets' save_to_disk" in only_error(err)


def test_every_promised_format_loads_the_same_records(tmp_path):
    """What the README promises for train_data / validation_data: JSON lines, a JSON list, CSV, parquet and a
    datasets directory, all read by load_data (the CLI's path) into the same records; CSV values stay strings."""
    rows = [{"prompt": f"What is {i} + {i}?", "completion": str(2 * i)} for i in range(5)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d.json").write_text(json.dumps(rows, indent=1))
    csv_rows = "".join(f'"{r["prompt"]}",{r["completion"]}\n' for r in rows)
    (tmp_path / "d.csv").write_text("prompt,completion\n" + csv_rows)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    for a, b in [("d.jsonl", "d.json"), ("d.csv", "d.parquet"), ("saved", "d.jsonl")]:
        config = SFTConfig(train_data=str(tmp_path / a), validation_data=str(tmp_path / b))
        train, validation = load_data(config, synthetic_tasks)
        assert train.to_list() == rows and validation.to_list() == rows, (a, b)


def test_empty_assistant_replies_are_counted_in_the_data_report():
    from tunix_lite.data.sft import tokenize_sft
    from tunix_lite.loading import load

    rows = [GOOD, {"prompt": "Say nothing.", "completion": ""},
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}]}]
    report = tokenize_sft(rows, load("tiny")[1], seq_len=64).report
    assert report.empty_replies == 2 and report.first_empty_row == 1
    assert "2 with an empty assistant reply (first: row 1), which trains the model to stop at once" in str(report)


# ----------------------------------------------------------------------------- one real run, then resume cases


RUN_YAML = """\
algorithm: sft
model: {model}
train_data: {train}
validation_data: {validation}
seq_len: 64
batch_size: 4
steps: 3
warmup_steps: 1
learning_rate: 1e-3        # PyYAML reads this as a string
lora_rank: 4
lora_dropout: 0.1
eval_every: 0              # evaluate before and after only
n_accuracy: 0
checkpoint_every: 2
keep_checkpoints: 3
log_every: 1
output_dir: {out}
"""


@pytest.fixture(scope="module")
def finished(micro_model, tmp_path_factory):
    """A finished 3-step LoRA run with dropout (checkpoints 2 and 3, adapters exported), trained through the CLI
    on a JSONL file (one empty reply in it) and validated on a datasets directory."""
    root = tmp_path_factory.mktemp("finished")
    rows = [{"prompt": f"What is {i} + {i}?", "completion": f"<answer>{2 * i}</answer>"} for i in range(15)]
    rows.insert(3, {"prompt": "Say nothing.", "completion": ""})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_list(rows[:8]).save_to_disk(str(root / "validation"))
    fields = dict(model=micro_model, train=root / "train.jsonl", validation=root / "validation")
    config = root / "run.yaml"
    config.write_text(RUN_YAML.format(out=root / "run", **fields))
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["train", "--config", str(config)]) == 0
    return {"dir": root / "run", "fields": fields, "printed": printed.getvalue()}


def copy_run(finished, tmp_path, **changes) -> tuple[Path, Path]:
    """A copy of the finished run's directory and a config for it (with `changes` appended)."""
    out = tmp_path / "run"
    shutil.copytree(finished["dir"], out)
    config = tmp_path / "run.yaml"
    config.write_text(RUN_YAML.format(out=out, **finished["fields"]) + (yaml.safe_dump(changes) if changes else ""))
    return out, config


@pytest.mark.slow  # shares the module's one training run
def test_the_run_converted_the_string_learning_rate_reported_the_empty_reply_and_evaluated_at_the_end(finished):
    out = finished["dir"]
    assert "train: 16 examples, longest 26 tokens (limit 65); 1 with an empty assistant reply (first: row 3), which " \
           "trains the model to stop at once" in finished["printed"]
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["learning_rate"] == 1e-3 and saved["eval_every"] == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "3"]
    scores = json.loads((out / "scores.json").read_text())
    assert np.isfinite(scores["after"]["loss"])  # eval_every: 0 still evaluates after the last step
    assert json.loads((out / "inputs.json").read_text())["train_data"]["path"] == str(finished["fields"]["train"])


@pytest.mark.slow  # shares the module's one training run
def test_lora_with_dropout_resumes_bit_for_bit(finished, tmp_path, capsys):
    """An interrupted run (crashed after logging step 3, before its checkpoint, mid-way through a metrics line)
    resumes from step 2 and ends with the same adapters, to the bit, and each step logged once."""
    out, config = copy_run(finished, tmp_path)
    shutil.rmtree(out / "checkpoints" / "3")
    for name in ("adapters.safetensors", "scores.json"):
        (out / name).unlink()
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"count": 12.0, "grad_')
    capsys.readouterr()
    assert main(["train", "--config", str(config)]) == 0
    assert f"resumed {out} at step 2" in capsys.readouterr().out
    reference, resumed = load_file(finished["dir"] / "adapters.safetensors"), load_file(out / "adapters.safetensors")
    assert reference.keys() == resumed.keys()
    for name in reference:
        np.testing.assert_array_equal(reference[name], resumed[name], err_msg=name)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged == [json.loads(line) for line in (finished["dir"] / "metrics.jsonl").read_text().splitlines()]
    assert (out / "config.yaml").read_bytes() == (finished["dir"] / "config.yaml").read_bytes()


@pytest.mark.slow  # shares the module's one training run
@pytest.mark.parametrize("change, message", [
    ({"seed": 1}, "seed: the checkpointed run used 0, this config says 1"),
    ({"batch_size": 8}, "batch_size: the checkpointed run used 4, this config says 8"),
    ({"lora_rank": 8}, "lora_rank: the checkpointed run used 4, this config says 8"),
    ({"quantize": "nf4"}, "quantize: the checkpointed run used None, this config says 'nf4'"),
    ({"model": "tiny"}, "model: the checkpointed run used '{model}', this config says 'tiny'"),
    ({"train_data": "synthetic"}, "train_data: the checkpointed run used '{train}', this config says 'synthetic'"),
    ({"steps": 2}, "steps: 2 is less than the 3 the checkpointed run was started with"),
    ({"checkpoint_every": 0}, None),
])
def test_a_resume_that_would_change_the_run_is_refused_before_anything_is_written(
        finished, tmp_path, capsys, change, message):
    out, config = copy_run(finished, tmp_path, **change)
    before = snapshot(out)
    code, _, err = cli(capsys, "train", "--config", config)
    expected = (f"cannot resume {out}: {message.format(**finished['fields'])}. Use another output_dir for a "
                "different run") if message else \
        f"checkpoint_every: {out} holds checkpoints; keep checkpoint_every > 0 to resume them"
    assert code == 2 and only_error(err) == expected
    assert snapshot(out) == before


@pytest.mark.slow  # shares the module's one training run
def test_a_data_file_changed_under_the_same_name_is_refused(finished, tmp_path, capsys):
    out, config = copy_run(finished, tmp_path, steps=4)
    before, train = snapshot(out), finished["fields"]["train"]
    original = train.read_bytes()
    try:
        train.write_bytes(original.replace(b"What is", b"What's"))
        code, _, err = cli(capsys, "train", "--config", config)
    finally:
        train.write_bytes(original)
    message = only_error(err)
    assert code == 2 and message.startswith(f"cannot resume {out}: train_data: {train} changed since the "
                                            "checkpointed run (sha256 ")
    assert snapshot(out) == before


@pytest.mark.slow  # shares the module's one training run
def test_a_checkpoint_that_does_not_fit_the_model_is_one_line(finished, tmp_path, capsys):
    """Checkpoints written for another shape (here: config.yaml says rank 8, the arrays are rank 4) are refused
    before orbax reads them: no tree dump, no "Event loop is closed"."""
    out, config = copy_run(finished, tmp_path, lora_rank=8)
    saved = out / "config.yaml"
    saved.write_text(saved.read_text().replace("lora_rank: 4", "lora_rank: 8"))
    before = snapshot(out)
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and last_error(err) == (
        f"checkpoint {out}/checkpoints/3 does not fit this model: model/layers/0/attn/k_proj/lora_a is (64, 4) on "
        "disk, the model has (64, 8) (and 13 more differences). It was written for another model or config; use "
        "another output_dir")
    assert snapshot(out) == before


@pytest.mark.slow  # shares the module's one training run
def test_a_corrupt_latest_checkpoint_offers_the_intact_earlier_one(finished, tmp_path, capsys):
    """Checkpoint 3's model arrays truncated: one line with tensorstore's reason (not its spec),
    naming the intact checkpoint 2 and what to do; nothing is changed. Done as it says, the run
    resumes at step 2."""
    out, config = copy_run(finished, tmp_path)
    for data in (out / "checkpoints/3/model").rglob("d/*"):
        data.write_bytes(data.read_bytes()[:100])
    before = snapshot(out)
    code, _, err = cli(capsys, "train", "--config", config)
    message = last_error(err)
    assert code == 2
    assert message.startswith(f"could not read checkpoint {out}/checkpoints/3: ValueError: ")
    assert "OUT_OF_RANGE: Error " in message and "TensorStore" not in message and message.endswith(
        "; it may be corrupt. Checkpoint 2 reads: rerun with --resume-from-intact (config key "
        f"resume_from_intact: true), or move {out}/checkpoints/3 out of {out}/checkpoints and "
        "rerun to resume from step 2")
    assert snapshot(out) == before
    (out / "checkpoints/3").rename(tmp_path / "corrupt-3")
    code, printed, _ = cli(capsys, "train", "--config", config)
    assert code == 0 and f"resumed {out} at step 2" in printed


# `tunix-lite` in a process whose files may not grow past 4 KiB: writes fail with EFBIG as on a full disk (ENOSPC)
SMALL_DISK_CLI = """import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
from tunix_lite.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a fresh process: the noise of a failed background write is process-wide (hooks, threads, logs)
def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_earlier_checkpoint(finished, tmp_path):
    """A run resumed at step 2 trains step 3, whose checkpoint write fails. The command's whole stderr is the
    progress bar and one line naming the step folder and the OS error: no orbax traceback or error log, no
    "Event loop is closed"; checkpoint 2 and the earlier export stay intact."""
    out, config = copy_run(finished, tmp_path)
    shutil.rmtree(out / "checkpoints" / "3")
    kept = snapshot(out / "checkpoints") | {"adapters": snapshot(out)["adapters.safetensors"]}
    result = subprocess.run([sys.executable, "-c", SMALL_DISK_CLI, "train", "--config", str(config)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr
    assert last_error(result.stderr) == f"could not write checkpoint {out}/checkpoints/3: [Errno 27] File too large"
    after = {k: v for k, v in snapshot(out / "checkpoints").items() if not k.startswith("3.orbax-checkpoint-tmp/")}
    assert after | {"adapters": snapshot(out)["adapters.safetensors"]} == kept  # the failed write stays a tmp folder


@pytest.mark.slow  # shares the module's one training run
def test_a_checkpoint_folder_without_permission_is_one_line(finished, tmp_path, capsys, monkeypatch):
    """Tests run as root here, for whom every folder is writable: the checkpoint folder's creation raises EACCES
    as it would for a user without write permission."""
    out, config = copy_run(finished, tmp_path)
    shutil.rmtree(out / "checkpoints" / "3")
    kept = snapshot(out)
    mkdir = Path.mkdir

    def denied(path, *args, **kwargs):
        if path == out / "checkpoints":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", denied)
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2
    assert last_error(err) == f"could not write checkpoint {out}/checkpoints/3: [Errno 13] Permission denied"
    assert {k: v for k, v in snapshot(out).items() if k != "metrics.jsonl"} == \
        {k: v for k, v in kept.items() if k != "metrics.jsonl"}  # metrics.jsonl logged step 3 again


@pytest.mark.slow  # shares the module's one training run
def test_an_interrupted_export_leaves_the_previous_file_whole(finished, tmp_path, capsys, monkeypatch):
    """A kill while adapters.safetensors is written leaves the earlier export as it was (the new bytes go to a
    hidden .partial name); the next run replaces it whole."""
    import tunix_lite.lora

    out, config = copy_run(finished, tmp_path)
    exported = (out / "adapters.safetensors").read_bytes()

    def killed_half_way(model, path):
        Path(path).write_bytes(exported[: len(exported) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(tunix_lite.lora, "save_adapters", killed_half_way)
    with pytest.raises(KeyboardInterrupt):
        main(["train", "--config", str(config)])
    assert (out / "adapters.safetensors").read_bytes() == exported
    assert (out / ".adapters.safetensors.partial").stat().st_size == len(exported) // 2
    monkeypatch.undo()
    assert main(["train", "--config", str(config)]) == 0  # the finished run: nothing to train, export again
    reference, again = load_file(finished["dir"] / "adapters.safetensors"), load_file(out / "adapters.safetensors")
    assert reference.keys() == again.keys() and all(np.array_equal(reference[k], again[k]) for k in reference)
    assert not (out / ".adapters.safetensors.partial").exists()


def test_an_earlier_run_without_checkpoints_is_refused_and_overwrite_deletes_it_only_when_training_starts(
        tmp_path, capsys):
    earlier = tmp_path / "run"
    (earlier / "model").mkdir(parents=True)
    (earlier / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    (earlier / "model" / "config.json").write_text("{}")
    before = snapshot(earlier)
    code, _, err = cli(capsys, "train", "--config", write_yaml(tmp_path / "c.yaml", output_dir=str(earlier)))
    assert code == 2 and only_error(err) == (
        f"output_dir: {earlier} already holds an earlier run without checkpoints (metrics.jsonl, model); nothing "
        "to resume from. Choose another output_dir, delete it, or set overwrite: true to start over")
    # overwrite: true, but the run fails before training (a mistyped model path): the earlier run is still there
    config = write_yaml(tmp_path / "c.yaml", output_dir=str(earlier), overwrite=True, model=str(tmp_path / "modle"))
    code, out, err = cli(capsys, "train", "--config", config)
    assert code == 2
    assert only_error(err) == f"no checkpoint directory {tmp_path}/modle: it does not exist ({tmp_path}/ exists)"
    assert "starting over (overwrite: true); the earlier run is deleted when training starts" in out
    assert snapshot(earlier) == before


# ----------------------------------------------------------------------------- loading and generation


def broken_checkpoint(tmp_path: Path, *, config=None, weights=None) -> Path:
    """A copy of the tiny checkpoint with config.json edited (a function of the dict, or raw text) and/or the
    safetensors bytes replaced."""
    path = tmp_path / "ckpt"
    shutil.copytree(ASSETS / "tiny", path)
    if callable(config):
        (path / "config.json").write_text(json.dumps(config(json.loads((path / "config.json").read_text()))))
    elif config is not None:
        (path / "config.json").write_text(config)
    if weights is not None:
        (path / "model.safetensors").write_bytes(weights((path / "model.safetensors").read_bytes()))
    return path


def without(key):
    return lambda c: {k: v for k, v in c.items() if k != key}


@pytest.mark.parametrize("edit, message", [
    (dict(weights=lambda b: b[:100_000]), "model.safetensors: not a readable safetensors file (Error while "
     "deserializing header: incomplete metadata, file not fully covered); it may be truncated or corrupt: export "
     "or download it again"),
    (dict(weights=lambda b: b"\0" * 64), "model.safetensors: not a readable safetensors file (Error while "
     "deserializing header: invalid JSON in header: EOF while parsing a value at line 1 column 0); it may be "
     "truncated or corrupt: export or download it again"),
    (dict(config='{"model_type": "gemma3_text",\n "hidden_size": 256,,}'),
     "config.json: not valid JSON (Expecting property name enclosed in double quotes at line 2 column 21)"),
    (dict(config=without("hidden_size")), "config.json: missing key 'hidden_size' (an integer)"),
    (dict(config=lambda c: c | {"num_attention_heads": "4"}),
     "config.json: num_attention_heads: expected an integer, got '4' (str)"),
    (dict(config=lambda c: c | {"rms_norm_eps": [1e-6]}),
     "config.json: rms_norm_eps: expected a number, got [1e-06] (list)"),
    (dict(config=lambda c: c | {"num_hidden_layers": 0}), "config.json: num_hidden_layers: must be >= 1, got 0"),
    (dict(config=lambda c: {**without("layer_types")(c), "num_hidden_layers": 4, "sliding_window_pattern": 6}),
     ": 26 tensors are not used by the config (num_layers=4): model.layers.4.* (13 tensors), model.layers.5.* "
     "(13 tensors); the config and the weights disagree"),
])
def test_broken_checkpoints_name_the_file_and_the_problem(tmp_path, capsys, edit, message):
    path = broken_checkpoint(tmp_path, **edit)
    code, _, err = cli(capsys, "generate", "--model", path, "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2 and only_error(err, "generate") == f"{path}{'' if message[0] == ':' else '/'}{message}"
    assert snapshot(path).keys() == snapshot(ASSETS / "tiny").keys()


def test_a_mistyped_local_path_is_not_looked_up_on_the_hub(tmp_path, capsys, monkeypatch):
    (tmp_path / "runs" / "sft_tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tunix_lite.loading.download", lambda repo: pytest.fail(f"asked the hub for {repo}"))
    code, _, err = cli(capsys, "generate", "--model", "runs/sft_tny", "--prompt", "hi")
    assert code == 2 and only_error(err, "generate") == \
        "no checkpoint directory runs/sft_tny: it does not exist; did you mean runs/sft_tiny?"
    # the same in a config, before any data or weights are read
    code, _, err = cli(capsys, "train", "--config", write_yaml(tmp_path / "c.yaml", model="runs/sft_tny"))
    assert code == 2
    assert only_error(err) == "no checkpoint directory runs/sft_tny: it does not exist; did you mean runs/sft_tiny?"


@pytest.mark.parametrize("args, message", [
    (["--max-new-tokens", "0"], "max_new_tokens=0 (need an integer >= 1)"),
    (["--temperature", "nan"], "temperature=nan (need a finite number >= 0; 0 is greedy)"),
    (["--temperature", "-1"], "temperature=-1.0 (need a finite number >= 0; 0 is greedy)"),
    (["--temperature", "1", "--top-p", "inf"], "top_p=inf (need 0 < top_p <= 1, or None)"),
    (["--temperature", "1", "--top-p", "nan"], "top_p=nan (need 0 < top_p <= 1, or None)"),
])
def test_bad_sampling_settings_stop_generate_before_the_model_loads(capsys, args, message):
    code, _, err = cli(capsys, "generate", "--prompt", "hi", *args)
    assert code == 2 and only_error(err, "generate") == f"invalid sampling settings: {message}"


def test_generate_refuses_a_prompt_that_is_not_utf8_and_an_empty_model_name(capsys):
    # bytes that are not UTF-8 reach Python's argv as lone surrogates (surrogateescape)
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    code, _, err = cli(capsys, "generate", "--prompt", "ok", "--prompt", bad)
    assert code == 2 and only_error(err, "generate") == (
        "--prompt 2: bytes b'\\xe9' at character 4 are not UTF-8; pass UTF-8 text (a UTF-8 "
        "terminal or file encoding)")
    for command, args in (("generate", ["--prompt", "hi"]), ("eval", [])):  # not the cwd
        code, _, err = cli(capsys, command, "--model", "", *args)
        assert code == 2 and only_error(err, command) == (
            "model: expected a model name or checkpoint directory, got ''; for the current "
            "directory, pass '.'")


@pytest.mark.slow  # compiles the sampler
def test_a_vocabulary_past_the_tokenizers_decodes(tmp_path, capsys):
    """A model with 2,048 embeddings and a 1,024-piece tokenizer (as Qwen 3 pads its vocabulary):
    the ids it samples past the tokenizer decode to nothing, rather than ending in a traceback."""
    from tunix_lite.models import Transformer, get_config
    from tunix_lite.sampler import Sampler
    from tunix_lite.tokenizer import load_tokenizer
    from tunix_lite.weights.hf import save_hf_model

    config = get_config("tiny").replace(num_layers=1, embed_dim=64, num_heads=2, head_dim=16,
                                        mlp_dim=128, vocab_size=2048)
    model = Transformer(config, rngs=nnx.Rngs(0))
    embedding = model.embedder.embedding
    embedding[...] = embedding[...].at[1024:].multiply(10.0)  # the tied logits favour the extra ids
    save_hf_model(model, tmp_path)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    assert (Sampler(model, tokenizer).generate(["hi"], 4).tokens >= 1024).any()
    code, out, _ = cli(capsys, "generate", "--model", tmp_path, "--prompt", "hi",
                       "--max-new-tokens", "4", "--json")
    assert code == 0 and json.loads(out)["tokens"] == 4
    assert tokenizer.decode([5, 1500, 6]) == tokenizer.decode([5, 6])


@pytest.mark.slow  # compiles the sampler
def test_generate_json_keeps_several_prompts_apart(micro_model, capsys):
    prompts = ["first line\nsecond line", "", 'a "quoted" prompt']
    code, out, _ = cli(capsys, "generate", "--model", micro_model, "--json", "--max-new-tokens", "4",
                       *[arg for p in prompts for arg in ("--prompt", p)])
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["prompt"] for line in lines] == prompts
    assert all(isinstance(line["completion"], str) and 1 <= line["tokens"] <= 4 for line in lines)


def test_records_pass_through_and_csv_values_stay_strings(tmp_path):
    rows = [GOOD]
    assert load_records(rows) is rows
    (tmp_path / "d.csv").write_text("prompt,completion\nWhat is 2 + 2?,4\n")
    assert load_records(str(tmp_path / "d.csv")).to_list() == [{"prompt": "What is 2 + 2?", "completion": "4"}]


# ------------------------------------------------------------------------------ RL prompts


def grpo_config(tmp_path: Path, model: Path, prompts: list[str], **values) -> Path:
    """A one-step GRPO run of `model` on these prompts (answer "4" each)."""
    rows = "".join(json.dumps({"prompt": p, "answer": "4"}) + "\n" for p in prompts)
    (tmp_path / "train.jsonl").write_text(rows)
    data = str(tmp_path / "train.jsonl")
    return write_yaml(tmp_path / "c.yaml", algorithm="grpo", model=str(model), train_data=data,
                      validation_data=data, seq_len=48, max_new_tokens=8, group_size=2,
                      batch_size=2, steps=1, warmup_steps=0, n_accuracy=0, beta=0.0,
                      checkpoint_every=0, output_dir=str(tmp_path / "run"), **values)


def test_grpo_prompts_too_long_name_the_file_and_a_drop_that_leaves_none_is_refused(
        micro_model, tmp_path, capsys):
    config = grpo_config(tmp_path, micro_model, ["What is 2 + 2?"] + ["word " * 60] * 2)
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err).startswith(
        f"train_data ({tmp_path}/train.jsonl): prompt 1 ('word word ")
    assert only_error(err).endswith("...) is 70 tokens; at most 41 fit before the completion budget. "
                                    "Raise seq_len, lower max_new_tokens, or set truncation: drop")
    config = grpo_config(tmp_path, micro_model, ["word " * 60] * 3, truncation="drop")
    code, _, err = cli(capsys, "train", "--config", config)
    assert code == 2 and only_error(err) == (
        f"train_data ({tmp_path}/train.jsonl): all 3 prompts are longer than 41 tokens, so "
        "truncation: drop left none; raise seq_len or max_prompt_tokens, or lower max_new_tokens")


@pytest.mark.slow  # one GRPO step
def test_grpo_says_how_many_prompts_truncation_drop_dropped(micro_model, tmp_path, capsys):
    prompts = ["What is 2 + 2?"] * 5 + ["word " * 60] * 2
    config = grpo_config(tmp_path, micro_model, prompts, truncation="drop")
    code, out, _ = cli(capsys, "train", "--config", config)
    assert code == 0
    assert "5 prompts (left-padded to 24 tokens; 2 of 7 dropped as longer than 41 tokens, by " \
           "truncation: drop) x 2 completions" in out
