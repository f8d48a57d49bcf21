"""Hidden tests for phase 2: every public check (tunix_lite/course/graded/phase02.py), then each
exercise again on inputs the public tests never draw (a single vector, one rotary pair, a window of
one, plain multi-head attention at a decode step, a two-token vocabulary), so code fitted to the
public inputs fails here. Rotate the second part per cohort.

    tunix-lite grade solutions/02_gemma3_block_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

import numpy as np

from tunix_lite.course.graded import graded, include, phase02
from tunix_lite.course.graded.phase02 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    _attention_inputs,
    _attention_ref,
    _check_filter,
    _f32,
    _gqa,
    _mask,
    _mask_ref,
    _packed_positions,
    _rms_norm_ref,
    _rope,
    _rope_ref,
)

include(phase02, globals())


@graded("rms_norm")
def test_hidden_rms_norm_one_vector_and_rank_five(impl, rng):
    """a single vector [H], and a rank-5 input of large values"""
    for shape, scale in [((int(rng.integers(3, 40)),), 1.0), ((2, 1, 2, 3, 6), 1e3)]:
        x, w = rng.normal(size=shape) * scale, rng.normal(size=shape[-1]) * 0.3
        got = np.asarray(impl.rms_norm(_f32(x), _f32(w), eps=1e-6))
        np.testing.assert_allclose(got, _rms_norm_ref(x, w, 1e-6), rtol=1e-5, atol=1e-5,
                                   err_msg=f"shape {shape}")


@graded("rope_interleaved")
def test_hidden_rope_one_pair_one_head(impl, rng):
    """one rotary pair (H = 2), one head, one row of positions out of order"""
    x = rng.normal(size=(1, 6, 1, 2))
    positions = rng.permutation(500)[:6][None]
    for base in (100.0, 10_000.0):
        np.testing.assert_allclose(_rope(impl, x, positions, base), _rope_ref(x, positions, base),
                                   rtol=1e-4, atol=1e-4, err_msg=f"H = 2, base {base:g}")


@graded("attention_mask")
def test_hidden_attention_mask_window_of_one(impl, rng):
    """a sliding window of 1 leaves each token only itself; four packed rows at once"""
    pos, seg = _packed_positions(rng, 4, int(rng.integers(20, 40)))
    for window in (1, None):
        np.testing.assert_array_equal(_mask(impl, pos, pos, seg, seg, window),
                                      _mask_ref(pos, pos, seg, seg, window),
                                      err_msg=f"sliding_window={window}")


@graded("gqa_attention")
def test_hidden_gqa_attention_plain_heads_at_a_decode_step(impl, rng):
    """plain multi-head attention (K = N) and 12 query heads over 4 kv heads, one new query
    against a longer cache"""
    H = int(rng.integers(3, 9))
    for N, K in [(3, 3), (12, 4)]:
        q, k, v, mask = _attention_inputs(rng, B=3, T=1, S=int(rng.integers(4, 12)), N=N, K=K, H=H)
        got = _gqa(impl, q, k, v, mask, H ** -0.5)
        np.testing.assert_allclose(got, _attention_ref(q, k, v, mask, H ** -0.5), rtol=1e-4,
                                   atol=1e-5, err_msg=f"N={N}, K={K}, one query")


@graded("filter_logits")
def test_hidden_filter_logits_tiny_vocabulary(impl, rng):
    """a vocabulary of two or three tokens, as one row [V]: top-k of all of them, and a top-p
    that keeps only the argmax"""
    for vocab in (2, 3):
        logits = (rng.normal(size=vocab) * 3.0).astype(np.float32)
        logits[int(rng.integers(vocab))] += 10.0  # one clear favourite, far above the others
        for kwargs in (dict(top_k=vocab), dict(top_p=0.5), dict(top_k=1, min_p=0.5)):
            got = np.asarray(impl.filter_logits(_f32(logits), **kwargs))
            _check_filter(got[None], logits[None], f"V = {vocab}, {kwargs}", **kwargs)
