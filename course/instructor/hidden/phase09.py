"""Hidden tests for phase 9: every public check (tunix_lite/course/graded/phase09.py), then runs
the public tests never draw: five times longer, with shaping rewards under other names, the
held-out accuracy logged rarely, and the run the notebook's stretch task trains (every completion
cut at 6 tokens). A diagnosis tuned to the public runs (their lengths, their reward names, a fixed
window) fails here; a sound reading of the curves does not. Rotate per cohort: other lengths,
names, noise within the public margins, other fixed runs.

    tunix-lite grade solutions/09_capstone_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

from tunix_lite.course.graded import graded, include, phase09
from tunix_lite.course.graded.phase09 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    LABELS,
    _columns,
    _entries,
    _says,
)

include(phase09, globals())

OTHER_SHAPING = ("length_penalty", "tool_use", "answer_tag", "brevity", "cosine")


def _rotated(rng, label: str) -> list[dict]:
    """A run of 100-400 entries whose shaping reward has another name, evaluated every 10-40."""
    columns, needs = _columns(rng, label, int(rng.integers(100, 401)))
    old = next(k for k in columns if k.startswith("reward/") and k != "reward/exact_match")
    new = f"reward/{rng.choice(OTHER_SHAPING)}"
    columns[new] = columns.pop(old)
    needs = [new if k == old else k for k in needs]
    return _entries(rng, columns, needs, every_eval=int(rng.integers(10, 41)))


@graded("diagnose")
def test_hidden_diagnose_long_runs_other_reward_names(impl, rng):
    """each failure in runs of 100-400 steps with other shaping rewards, held out every 10-40"""
    for label in LABELS:
        for _ in range(2):
            _says(impl, _rotated(rng, label), label, f"a long run drawn as {label!r}")


@graded("diagnose")
def test_hidden_diagnose_the_stretch_run(impl, rng):
    """the notebook's stretch run: 6 new tokens, so every completion is cut, every reward 0, every
    gradient 0"""
    steps = int(rng.integers(6, 30))
    history = [{"step": i, "reward": 0.0, "reward/exact_match": 0.0, "reward/format": 0.0,
                "truncated": 1.0, "length": 6.0, "zero_signal_groups": 1.0, "kl": 0.0,
                "grad_norm": 0.0, "loss": 0.0, "entropy": float(rng.uniform(2.0, 3.0))}
               for i in range(1, steps + 1)]
    _says(impl, history, "truncated", "every completion cut at the budget")
