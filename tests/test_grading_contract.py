"""The grading contract for every seed: each graded test passes on the reference solution and
fails on the stub with its NotImplementedError, over 200 seeds per test and direction (plus the
seed that once cost phase 6's reference a point), in this process (tunix_lite.course.contract).
A failure prints `tunix-lite grade NOTEBOOK --seed N`, which reproduces it through the grader.

A few tests compile a new program, or train, on every draw (new shapes, or a new closure under
jit): 0.1-1 s a seed where the others take milliseconds. FEWER sweeps them on fewer seeds, each
with the reason, so the whole sweep stays near a minute of CPU; the rest of their cases (their
generators and references) are the same code the cheap tests run 200 times. For all seeds of
every test: `python -m tunix_lite.course.contract` (about an hour of CPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tunix_lite.course import contract, graded

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ROOT / "course" / "instructor" / "hidden"
COMPILING = 12  # seeds for each test in FEWER
FEWER = {  # test name -> why it costs a compile (or a training run) per seed
    # phase 1
    "test_masked_mean_under_jit": "a new jit of a partial per draw",
    "test_per_example_grad_norms_match_a_loop": "random batch and width: a new vmap(grad) program",
    "test_per_example_grad_norms_one_trace": "a new loss closure under jit per draw",
    "test_train_step_matches_closed_form": "an NNX model and optimizer built and stepped per draw",
    "test_train_step_no_decay_is_plain_mse": "a new nnx.jit of the step per draw",
    "test_train_step_trains_only_wrt": "an NNX model and optimizer built and stepped per draw",
    "test_train_step_reduces_loss": "twenty jitted Adam steps on a fresh NNX model",
    # phase 2
    "test_rms_norm_matches_numpy": "random shapes in bf16 and f32",
    "test_rms_norm_bfloat16_in_float32": "random shapes in bf16",
    "test_attention_mask_matches_numpy": "random segment layouts and lengths",
    "test_filter_logits_matches_numpy": "random vocabulary size and k: new sort and top-k programs",
    "test_filter_logits_under_jit": "random vocabulary size under jit",
    # phase 3
    "test_masked_next_token_loss_matches_numpy": "a new jit of a closure per call",
    "test_masked_next_token_loss_stable_for_large_logits": "a new jit of a closure per call",
    "test_masked_next_token_loss_no_tokens": "a new jit of a gradient closure per call",
    "test_masked_next_token_loss_gradient": "a new jit of a gradient closure per call",
    "test_accumulate_grads_is_one_scan": "traces the learner's scan per draw",
    # phase 5
    "test_completion_log_probs_matches_numpy": "random shapes under jit",
    "test_completion_log_probs_empty_rows": "a new jit of a gradient closure per draw",
    "test_dpo_loss_matches_numpy": "a new jit of a gradient closure per draw",
    "test_dpo_loss_stable_for_large_margins": "a new jit of a closure per draw",
    "test_ipo_loss_matches_numpy": "random lengths under jit",
    "test_preference_accuracy_matches_reference": "random batch sizes under jit",
    # phase 6
    "test_group_advantages_match_numpy": "random group layouts: new segment-sum programs",
    "test_group_advantages_zero_mean_and_equal_groups": "random group layouts: new programs",
    "test_group_advantages_order_free_and_jit": "random group layouts under jit",
    "test_gae_with_dones_matches_numpy": "a scan traced per call",
    "test_gae_with_dones_keeps_episodes_apart": "a scan traced per call",
    "test_gae_with_dones_limits": "a scan traced per call",
    "test_packed_aggregate_equals_the_unpacked_rows": "random unpacked widths: new programs",
}


def seeds(test) -> list[int]:
    count = COMPILING if test.__name__ in FEWER else contract.SEEDS
    return [*contract.REGRESSIONS, *range(count)]


def hidden_seeds(test) -> list[int]:
    """A hidden module's own tests; the public ones it includes (graded.include) draw the same
    inputs per seed as in the public sweep, which runs them."""
    return [] if hasattr(test, "__wrapped__") else seeds(test)


def _hidden_phases() -> list[str]:
    return sorted(p.stem.removeprefix("phase") for p in HIDDEN.glob("phase[0-9][0-9].py"))


@pytest.mark.parametrize("phase", graded.phases())
def test_solutions_pass_and_stubs_fail_on_every_seed(phase):
    found = contract.sweep(phase, seeds, root=ROOT)
    assert not found.failures, "\n".join(map(str, found.failures))


@pytest.mark.parametrize("phase", _hidden_phases())
def test_the_hidden_tests_keep_the_contract_too(phase):
    found = contract.sweep(phase, hidden_seeds, root=ROOT, tests_dir=HIDDEN)
    assert not found.failures, "\n".join(map(str, found.failures))


def test_every_phase_has_hidden_tests_and_fewer_names_real_tests():
    assert _hidden_phases() == graded.phases()
    names = {t.__name__ for p in graded.phases() for ex in graded.exercises(p) for t in ex.tests}
    assert not set(FEWER) - names, f"FEWER names no test: {sorted(set(FEWER) - names)}"


def test_a_failing_seed_is_printed_as_the_command_that_reproduces_it(tmp_path, capsys):
    """A solution notebook whose function is wrong for some inputs: the sweep names each seed it
    failed on with `tunix-lite grade ... --seed N`, and that grading reproduces the failure."""
    import json
    import shutil

    from tunix_lite.course import grading

    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    name = "08_scaling_exercises.ipynb"
    shutil.copy(ROOT / "exercises" / name, tmp_path / "exercises" / name)
    nb = json.loads((ROOT / "solutions" / name).read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if src.startswith("def max_batch("):  # one row group too many for the largest models
            cell["source"] = src + (
                "\n\n_right = max_batch\n\n\ndef max_batch(hbm_bytes, params, mesh, row):\n"
                "    best = _right(hbm_bytes, params, mesh, row)\n"
                "    return best + mesh['data'] * mesh['fsdp'] if params > 9.5e8 else best\n")
    (tmp_path / "solutions" / name).write_text(json.dumps(nb))
    code = contract.main(["08", "--seeds", "20", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "test_max_batch_matches_a_search" in out, out
    command = next(line for line in out.splitlines() if "reproduce:" in line)
    seed = int(command.rsplit("--seed ", 1)[1].rstrip(")"))
    report = grading.grade(tmp_path / "solutions" / name, seed=seed)
    failed = {t["test"] for t in report["tests"] if t["outcome"] == "failed"}
    assert "test_max_batch_matches_a_search" in failed, report["tests"]
