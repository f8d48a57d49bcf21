"""The judgment exercises grade judgment: a reading that uses one number where the lesson asks for
the whole picture fails, on the public tests (the learner's self-check) and on the instructor's
hidden tests alone (other report sizes and K, the lesson's real candidates; longer runs with other
reward names), while the reference passes both (tests/test_grading_contract.py, every seed).

Phase 6's shortcut keeps a task when pass@K beats greedy by the bar, ignoring guessing and how many
prompts measured it; phase 9's calls a run healthy when its total reward rose.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tunix_lite.course import graded
from tunix_lite.course.grading import run_test

HIDDEN = Path(__file__).resolve().parents[1] / "course" / "instructor" / "hidden"
SEEDS = range(10)

PASS_AT_K_ALONE = '''
def choose_rl_tasks(report):
    k = report.get("samples", 1)
    if k < 2 or f"pass@{k}" not in report:
        raise ValueError("no sampled answers")
    verdicts = {}
    for task, row in report["per_task"].items():
        sampled = row[f"pass@{k}"]
        if sampled == 0:
            verdicts[task] = "too_hard"
        elif sampled - row["accuracy"] >= 0.2:
            verdicts[task] = "room"
        else:
            verdicts[task] = "no_room"
    return verdicts
'''

TOTAL_REWARD_ALONE = '''
import math

def diagnose(history):
    entries = sorted(history, key=lambda entry: entry["step"])
    if any(not math.isfinite(v) for e in entries for k, v in e.items() if k in ("loss", "kl")):
        return "learning_rate_too_high"
    reward = [e["reward"] for e in entries if "reward" in e]
    k = max(1, len(reward) // 3)
    rise = sum(reward[-k:]) / k - sum(reward[:k]) / k
    return "healthy" if rise >= 0.05 else "no_signal"
'''


def _impl(source: str) -> types.ModuleType:
    module = types.ModuleType("shortcut")
    exec(compile(source, "<shortcut>", "exec"), module.__dict__)  # noqa: S102 - our own text
    return module


def _failed(phase: str, exercise: str, impl, hidden_only: bool) -> dict[int, list[str]]:
    """{seed: the exercise's tests that `impl` does not pass on that seed's draw}."""
    module = graded.module_for(phase, HIDDEN if hidden_only else None)
    tests = next(ex for ex in graded.exercises(phase, module) if ex.name == exercise).tests
    if hidden_only:  # the hidden module's own tests, not the public ones it includes
        tests = [t for t in tests if not hasattr(t, "__wrapped__")]
    assert tests, (phase, exercise, hidden_only)
    return {seed: [t.__name__ for t in tests
                   if run_test(t, impl, graded.test_rng(seed, t))[0] != "passed"] for seed in SEEDS}


@pytest.mark.parametrize("phase, exercise, shortcut", [
    ("06", "choose_rl_tasks", PASS_AT_K_ALONE),
    ("09", "diagnose", TOTAL_REWARD_ALONE),
], ids=["phase06-pass@K-alone", "phase09-total-reward-alone"])
@pytest.mark.parametrize("hidden_only", [False, True], ids=["public", "hidden"])
def test_a_one_number_reading_fails(phase, exercise, shortcut, hidden_only):
    """On every seed, some test of the exercise fails the shortcut: it loses points every time."""
    failed = _failed(phase, exercise, _impl(shortcut), hidden_only)
    passed = [seed for seed, tests in failed.items() if not tests]
    assert not passed, f"phase {phase}'s {exercise}: a one-number reading passed seeds {passed}"
