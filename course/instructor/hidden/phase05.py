"""Hidden tests for phase 5: every public check (tunix_lite/course/graded/phase05.py), then each
exercise again on inputs the public tests never draw (one row, one token, a single pair, huge
margins, one-token completions, near-certain completions, a batch of one pair, one prompt with many
samples), so code fitted to the public inputs fails here. Rotate the second part per cohort.

    tunix-lite grade solutions/05_preference_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

import numpy as np

from tunix_lite.course.graded import graded, include, phase05
from tunix_lite.course.graded.phase05 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    _accuracy_inputs,
    _accuracy_ref,
    _built_pairs,
    _close,
    _completion_inputs,
    _completion_ref,
    _dpo_ref,
    _f32,
    _ipo_ref,
    _log_odds_ref,
    _pairs,
    _pairs_from_scored_ref,
    _sample,
)

include(phase05, globals())


@graded("completion_log_probs")
def test_hidden_completion_log_probs_one_token(impl, rng):
    """one row whose completion is its last token only, over a vocabulary of 500"""
    logits, targets, mask = _completion_inputs(rng, B=1, T=4, V=500)
    mask[:] = 0.0
    mask[0, -1] = 1.0
    for normalize in (False, True):
        got = impl.completion_log_probs(_f32(logits), np.asarray(targets), np.asarray(mask),
                                        normalize=normalize)
        _close(got, _completion_ref(logits, targets, mask, normalize),
               f"one trained token, normalize={normalize}")


@graded("dpo_loss")
def test_hidden_dpo_loss_one_pair_huge_margins(impl, rng):
    """a batch of one pair, with margins of several hundred nats either way"""
    for sign in (1.0, -1.0):
        pc, pr, rc, rr = (a[:1] for a in _pairs(rng, B=1))
        pc = pc + sign * np.float32(rng.uniform(300.0, 600.0))
        eps = float(rng.uniform(0.0, 0.3))
        got = impl.dpo_loss(*map(_f32, (pc, pr, rc, rr)), beta=1.0, label_smoothing=eps)
        assert np.all(np.isfinite(np.asarray(got))), "use log-sigmoid, not log(sigmoid(x))"
        _close(got, _dpo_ref(pc, pr, rc, rr, 1.0, eps), f"margin of sign {sign:+.0f}", rtol=1e-4)


@graded("ipo_loss")
def test_hidden_ipo_loss_one_token_completions(impl, rng):
    """completions of one token each, and lengths that differ a hundredfold"""
    pc, pr, rc, rr = _pairs(rng, B=4)
    for nc, nr in [(np.ones(4), np.ones(4)), (np.full(4, 100.0), np.ones(4))]:
        tau = float(rng.uniform(0.05, 1.0))
        got = impl.ipo_loss(*map(_f32, (pc, pr, rc, rr, nc, nr)), tau=tau)
        _close(got, _ipo_ref(pc, pr, rc, rr, nc, nr, tau), f"lengths {nc[0]:.0f}, {nr[0]:.0f}",
               rtol=1e-4)


@graded("orpo_log_odds_ratio")
def test_hidden_orpo_log_odds_ratio_single_pair(impl, rng):
    """a single pair, as one-element arrays, from likely to unlikely completions"""
    for c, r in [(-rng.uniform(0.01, 0.05), -rng.uniform(3.0, 8.0)),
                 (-rng.uniform(3.0, 8.0), -rng.uniform(0.01, 0.05))]:
        c, r = np.float32([c]), np.float32([r])
        _close(impl.orpo_log_odds_ratio(_f32(c), _f32(r)), _log_odds_ref(c, r),
               f"chosen {c[0]:.3f}, rejected {r[0]:.3f}", rtol=1e-4)


@graded("preference_accuracy")
def test_hidden_preference_accuracy_one_pair(impl, rng):
    """a batch of a single real pair, won, tied or lost"""
    policy, reference, valid = _accuracy_inputs(rng, B=4)
    for row in (0, 3):  # row 0 ties (the policy did not move), row 3 is won or lost
        one = (policy[row:row + 1], reference[row:row + 1], np.ones(1, np.float32))
        out = impl.preference_accuracy(*map(_f32, one), beta=0.5)
        want, n = _accuracy_ref(*one)
        _close(out[0], want, f"one pair (row {row})")
        _close(out[1], n, "count of one real pair")


@graded("pairs_from_scored")
def test_hidden_pairs_from_scored_one_prompt_many_samples(impl, rng):
    """one prompt with twenty samples of continuous scores, and a margin no pair reaches"""
    samples = [_sample("the prompt", f"text {int(rng.integers(0, 8))}", float(rng.uniform(0, 1)))
               for _ in range(20)]
    for margin in (float(rng.uniform(0.05, 0.3)), 2.0):
        got, want = _built_pairs(impl, samples, margin), _pairs_from_scored_ref(samples, margin)
        assert got == want, f"margin {margin}: expected {want}, got {got}"
