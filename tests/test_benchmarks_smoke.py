"""The benchmark harness runs end to end: `benchmarks/run.py --smoke` on the small workloads."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("sft_full", "sft_lora", "generate_tiny")


@pytest.mark.slow
def test_benchmark_smoke(tmp_path, subprocess_env):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--workloads",
                           ",".join(WORKLOADS), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    rows = {row["workload"]: row for row in data["summary"] if row["impl"] == "tunix_lite"}
    assert set(rows) == set(WORKLOADS)
    for name, row in rows.items():
        assert row["status"] == "ok", (name, row.get("error"))
        tokens_per_s = row["tokens_per_s"]["median"]
        assert math.isfinite(tokens_per_s) and tokens_per_s > 0, (name, tokens_per_s)
    assert 0 < rows["sft_full"]["mfu"] < 5  # a fraction of the matmul peak (loose: the machine is shared)
    assert rows["generate_tiny"]["decode_tokens_per_s"] > 0
    assert (tmp_path / "results.md").exists() and "| sft_full | tunix_lite |" in proc.stdout


@pytest.mark.slow
def test_profile_step_lists_where_the_step_goes(subprocess_env):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_step.py"), "--workload", "sft_full",
                           "--steps", "1", "--top", "5"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    head, kinds, top = proc.stdout.strip().split("\n\n")
    assert float(head.split(": ")[1].split(" ms")[0]) > 0
    assert len(kinds.splitlines()) >= 3  # header + at least two kinds of op
    assert len(top.splitlines()) == 6 and "sft_full" in head


@pytest.mark.slow
def test_completion_scoring_times_both_heads_on_the_same_loss(subprocess_env):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "completion_scoring.py"), "--model",
                           "llama_half", "--rows", "4", "--prompt", "16", "--completion", "8", "--reps", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    every, only, speed = proc.stdout.strip().splitlines()[1:]
    assert every.split("loss ")[1] == only.split("loss ")[1]  # the same loss, either head
    assert float(speed.split("speed-up ")[1].rstrip("x")) > 0


@pytest.mark.slow
def test_compile_time_counts_the_kernels_each_unrolled_layer_adds(tmp_path, subprocess_env):
    records = tmp_path / "compile.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile_time.py"), "--layers", "1", "2",
                           "--steps", "1", "--json", str(records)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = json.loads(records.read_text())
    assert 0 < one["kernels"] < two["kernels"]  # a second layer is a second copy of its kernels
    assert all(r["compile_s"] > 0 and r["generate_first_s"] > r["generate_second_s"] for r in (one, two))
    assert "| 2 |" in proc.stdout


def test_compile_time_refuses_a_layer_count_below_one(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import compile_time

    with pytest.raises(SystemExit):
        compile_time.main(["--layers", "0", "2"])
    assert "--layers [0, 2] and --steps 3 must be >= 1" in capsys.readouterr().err.splitlines()[-1]


def test_scan_layers_compiles_each_way_to_the_unrolled_gradients():
    """benchmarks/scan_layers.py's three programs compute one gradient (its table would compare
    different work otherwise), and a scan holds fewer kernels than the unrolled layers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import scan_layers

    unrolled, *scans = scan_layers.measure("tiny", batch=1, seq=8)
    assert [r["way"] for r in scans] == ["scan, stacked in the step", "scan, stored stacked"]
    assert all(r["grad_error"] < 1e-6 and r["kernels"] < unrolled["kernels"] for r in scans), scans


def _common():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import common

    return common


def test_post_training_workloads_share_one_definition_of_data_and_work():
    """The peers and tunix_lite read dpo/grpo data and FLOP counts from benchmarks/common.py: the data keep the
    documented layout (bos-led prompts, eos-ended completions, no special id elsewhere) and the FLOPs add up."""
    common = _common()
    vocab = common.SHAPES["llama"]["vocab"]
    dpo = common.WORKLOADS["dpo"]
    data = common.preference_batch(vocab, dpo["pairs"], dpo["prompt"], dpo["completion"])
    assert data == common.preference_batch(vocab, dpo["pairs"], dpo["prompt"], dpo["completion"])  # fixed
    special = {common.PAD, common.EOS, common.BOS}
    for prompt, chosen, rejected in zip(data["prompt"], data["chosen"], data["rejected"]):
        assert len(prompt) == dpo["prompt"] and prompt[0] == common.BOS and not special & set(prompt[1:])
        for completion in (chosen, rejected):
            assert len(completion) == dpo["completion"] and completion[-1] == common.EOS
            assert not special & set(completion[:-1]) and max(completion) < vocab
        assert chosen != rejected
    grpo = common.WORKLOADS["grpo"]
    prompts = common.grpo_prompts(vocab, grpo["prompts"], grpo["prompt"])
    assert [len(p) for p in prompts] == [grpo["prompt"]] * grpo["prompts"] and {p[0] for p in prompts} == {2}
    assert common.parity_reward([4, 7, 10, 3]) == 0.5 and common.parity_reward(["8", "6"]) == 1.0

    assert common.tokens_per_step("dpo") == 2 * 8 * 256 and common.tokens_per_step("grpo") == 16 * 128
    llama, half = common.SHAPES["llama"], common.SHAPES["llama_half"]
    flops = common.workload_flops("dpo")
    assert flops["step"] == pytest.approx(4 / 3 * common.train_flops_per_step(llama, 16, 256))
    assert common.workload_flops("orpo")["step"] == pytest.approx(flops["policy"])
    online, cached = common.workload_flops("distill_online"), common.workload_flops("distill_cached")
    assert online["step"] - cached["step"] == pytest.approx(common.forward_flops(llama, 8, 256))
    assert cached["step"] == pytest.approx(common.train_flops_per_step(half, 8, 256))


def test_peer_id_tokenizer_round_trips_every_id():
    """TRL's trainers see the benchmark ids as text: every id, special ones included, must come back exactly
    (a special token spelled "1" used to split "17" into 1, 7). Run apart: _torch_common sets torch threads."""
    pytest.importorskip("transformers")
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/peers']\n"
            "import _torch_common as tc\n"
            "tok = tc.id_tokenizer(1024); ids = list(range(1024)) + [17, 1, 2, 11, 0]\n"
            "assert tok(tc.id_text(ids))['input_ids'] == ids\n"
            "assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_gpu_benchmark_smoke_runs_both_sides_and_tabulates(tmp_path, subprocess_env):
    """benchmarks/gpu.py --smoke: each code path on the tiny shape (both sides' training and rollout, the
    compile cache), so the accelerator benchmark cannot rot between GPU sessions."""
    records = tmp_path / "records.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--smoke", "--steps", "1",
                           "--warmup", "1", "--json", str(records)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=subprocess_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    measured = [r for r in json.loads(records.read_text()) if "error" not in r]
    impls = {(r["row"], r.get("impl")) for r in measured}
    for row in ("sft_full_270m", "sft_lora_270m", "rollout"):
        assert (row, "tunix_lite") in impls, row
    assert ("sft_full_270m", "torch") in impls and ("rollout", "transformers.generate") in impls
    assert all(r["tokens_per_s"] > 0 for r in measured if r["row"] != "peak")
    assert "| sft_full_270m | tunix_lite |" in proc.stdout
    # the tables again from the saved records, as after a run cut short on the accelerator, with the
    # compile_cache row's two first steps (a cold and a warm process; the smoke leaves that row out)
    sft = next(r for r in measured if r["row"] == "sft_full_270m" and r.get("impl") == "tunix_lite")
    cache_runs = [sft | dict(row="compile_cache", first_step_s=s) for s in (7.5, 2.5)]
    records.write_text(json.dumps(json.loads(records.read_text()) + cache_runs))
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--from-json", str(records)],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "| sft_full_270m | tunix_lite |" in again.stdout
    assert "in a fresh process: 7.5 s with an empty persistent compilation cache, 2.5 s" in again.stdout
