"""Hidden tests for phase 7: every public check (tunix_lite/course/graded/phase07.py), then each
exercise again on inputs the public tests never draw (rank-4 logits and a fractional temperature,
every row labelled or none, k = V - 1, twelve teacher heads onto three), so code fitted to the
public inputs fails here. Rotate the second part per cohort.

    tunix-lite grade solutions/07_distillation_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

import numpy as np

from tunix_lite.course.graded import graded, include, phase07
from tunix_lite.course.graded.phase07 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    _attention_maps,
    _attention_ref,
    _f32,
    _kd_inputs,
    _kd_loss_ref,
    _logits,
    _ragged_weights,
    _softened_kl_ref,
    _top_k_cache,
    _top_k_kd_ref,
)

include(phase07, globals())


@graded("softened_kl")
def test_hidden_softened_kl_rank_four_and_a_fractional_temperature(impl, rng):
    """rank-4 logits [B, H, T, V] and a temperature below 1"""
    shape = (2, 2, int(rng.integers(2, 5)), int(rng.integers(5, 30)))
    zs, zt = _logits(rng, shape), _logits(rng, shape)
    for T in (0.5, float(rng.uniform(1.5, 6.0))):
        got = np.asarray(impl.softened_kl(_f32(zs), _f32(zt), T))
        np.testing.assert_allclose(got, _softened_kl_ref(zs, zt, T), rtol=1e-4, atol=1e-6,
                                   err_msg=f"shape {shape}, T = {T:.2f}")


@graded("masked_kd_loss")
def test_hidden_masked_kd_loss_all_or_no_rows_labelled(impl, rng):
    """every row labelled, then none: the CE term covers exactly the labelled rows' weighted
    tokens"""
    zs, zt, targets, weights, labelled = _kd_inputs(rng, B=3, T=5, V=int(rng.integers(8, 40)))
    alpha, T = float(rng.uniform(0.1, 0.9)), float(rng.uniform(1.0, 4.0))
    for rows in (np.ones_like(labelled), np.zeros_like(labelled)):
        out = impl.masked_kd_loss(_f32(zs), _f32(zt), np.asarray(targets), np.asarray(weights),
                                  np.asarray(rows), alpha=alpha, temperature=T)
        want, count = _kd_loss_ref(zs, zt, targets, weights, rows, alpha, T)
        np.testing.assert_allclose(float(out[1]), count, err_msg="token_count")
        np.testing.assert_allclose(float(out[0]), want, rtol=1e-4,
                                   err_msg=f"labelled rows {rows.tolist()}, alpha {alpha:.2f}")


@graded("top_k_kd")
def test_hidden_top_k_kd_all_but_one_token(impl, rng):
    """k = V - 1: the rest bucket holds a single token's probability"""
    V = int(rng.integers(4, 20))
    zs, zt = _logits(rng, (2, 3, V)), _logits(rng, (2, 3, V))
    T = float(rng.uniform(1.0, 3.0))
    ids, values, log_z = _top_k_cache(zt, V - 1, T)
    got = np.asarray(impl.top_k_kd(_f32(zs), np.asarray(ids), _f32(values), _f32(log_z),
                                   temperature=T))
    np.testing.assert_allclose(got, _top_k_kd_ref(zs, ids, values, log_z, T), rtol=1e-4, atol=1e-5,
                               err_msg=f"k = V - 1 = {V - 1}, T = {T:.2f}")


@graded("attention_transfer_loss")
def test_hidden_attention_transfer_twelve_heads_onto_three(impl, rng):
    """twelve teacher heads averaged four by four onto three student heads, on one long row"""
    T = int(rng.integers(8, 16))
    teacher, student = _attention_maps(rng, 1, 12, T), _attention_maps(rng, 1, 3, T)
    weights = _ragged_weights(rng, 1, T)
    weights[0, 0] = 1.0
    out = impl.attention_transfer_loss(_f32(teacher), _f32(student), np.asarray(weights))
    want, count = _attention_ref(teacher, student, weights)
    np.testing.assert_allclose(float(out[1]), count, err_msg="row_count")
    np.testing.assert_allclose(float(out[0]), want, rtol=1e-4, atol=1e-6,
                               err_msg="12 teacher heads -> 3 student heads")
