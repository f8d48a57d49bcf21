"""Hidden tests for phase 1: every public check (tunix_lite/course/graded/phase01.py), then each
exercise again on inputs the public tests never draw (other ranks, trees, buckets, batch sizes and
models), so code fitted to the public inputs fails here. Rotate the second part per cohort.

    tunix-lite grade solutions/01_jax_nnx_exercises.ipynb --tests course/instructor/hidden  # pass
    tunix-lite grade exercises/01_jax_nnx_exercises.ipynb --tests course/instructor/hidden  # fail

They run in the grader, never in the learner's worker, so they may import the public references.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tunix_lite.course.calls import inside
from tunix_lite.course.graded import graded, include, phase01
from tunix_lite.course.graded.phase01 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    _check_clip,
    _closed_form_step,
    _grad_norm_loop,
    _masked_mean_ref,
    _mlp_loss,
    _mlp_params,
    _model,
    _norm_ref,
    _params,
    _regression,
    _seed,
    train,
)

include(phase01, globals())


@graded("masked_mean")
def test_hidden_masked_mean_rank_four(impl, rng):
    """a rank-4 array along its third axis, and a mask that selects one position of the array"""
    shape = (2, int(rng.integers(2, 4)), int(rng.integers(5, 12)), 3)
    x = rng.normal(size=shape).astype(np.float32)
    mask = rng.random(shape) < 0.5
    got = np.asarray(impl.masked_mean(jnp.asarray(x), jnp.asarray(mask), axis=2))
    np.testing.assert_allclose(got, _masked_mean_ref(x.astype(np.float64), mask, 2), rtol=1e-5,
                               atol=1e-6, err_msg=f"shape {shape}, axis=2")
    one = np.zeros(shape, bool)
    one[tuple(int(rng.integers(s)) for s in shape)] = True
    got = float(impl.masked_mean(jnp.asarray(x), jnp.asarray(one)))
    np.testing.assert_allclose(got, float(x[one][0]), rtol=1e-6, err_msg="one selected position")


@graded("clip_by_global_norm")
def test_hidden_clip_by_global_norm_odd_trees(impl, rng):
    """a tree of one scalar, and a deep tree with a long leaf, each clipped and not clipped"""
    long = rng.normal(size=int(rng.integers(500, 2000))).astype(np.float32)
    trees = {"one scalar": {"s": jnp.float32(rng.uniform(1.0, 5.0))},
             "a deep tree": {"a": [{"b": (jnp.asarray(long),)}], "c": jnp.ones((2, 1, 3))}}
    for where, tree in trees.items():
        norm = _norm_ref(tree)
        for max_norm in (0.3 * norm, 3.0 * norm):
            _check_clip(impl.clip_by_global_norm(tree, max_norm), tree, max_norm,
                        f"{where}, max_norm {max_norm:.3g}")


@graded("pad_to_bucket")
def test_hidden_pad_to_bucket_other_buckets(impl, rng):
    """other, unsorted buckets (3, 100, 7) and a positive pad id: the smallest bucket that fits"""
    buckets, pad_id = (3, 100, 7), int(rng.integers(1, 50))
    for max_len in (1, 3, 4, int(rng.integers(8, 101))):
        lengths = [*rng.integers(1, max_len + 1, size=int(rng.integers(1, 4))).tolist(), max_len]
        seqs = [rng.integers(100, 200, size=n).tolist() for n in lengths]
        tokens, mask = (np.asarray(a) for a in impl.pad_to_bucket(seqs, buckets=buckets,
                                                                   pad_id=pad_id))
        width = min(b for b in buckets if b >= max_len)
        assert tokens.shape == (len(seqs), width), f"longest {max_len}: shape {tokens.shape}, " \
                                                   f"expected {(len(seqs), width)}"
        for row, seq in enumerate(seqs):
            np.testing.assert_array_equal(tokens[row, :len(seq)], seq)
            np.testing.assert_array_equal(tokens[row, len(seq):], pad_id)
            np.testing.assert_array_equal(mask[row], np.arange(width) < len(seq))


@graded("per_example_grad_norms")
def test_hidden_per_example_grad_norms_batch_sizes(impl, rng):
    """a batch of one example and a batch of 17, on a wide hidden layer"""
    din = int(rng.integers(2, 5))
    params = _mlp_params(rng, din, int(rng.integers(9, 17)))
    for batch in (1, 17):
        xs = jnp.asarray(rng.normal(size=(batch, din)), jnp.float32)
        ys = jnp.asarray(rng.normal(size=batch), jnp.float32)
        got = np.asarray(impl.per_example_grad_norms(_mlp_loss, params, xs, ys))
        assert got.shape == (batch,), f"shape {got.shape}, expected ({batch},)"
        np.testing.assert_allclose(got, _grad_norm_loop(_mlp_loss, params, xs, ys), rtol=1e-4,
                                   atol=1e-6, err_msg=f"batch {batch}")


@graded("train_step")
def test_hidden_train_step_other_model(impl, rng):
    """one SGD step of a [5, 4] layer on 9 examples equals its closed form, a strong weight decay
    included"""
    x, y = _regression(rng, n=9, din=5, dout=4)
    before = _params(_model([5, 4], _seed(rng)))
    w, b = np.asarray(before["kernel"], np.float64), np.asarray(before["bias"], np.float64)
    lr, decay = float(rng.uniform(0.01, 0.05)), float(rng.uniform(1.0, 3.0))
    (loss,), after = inside(impl, train)([5, 4], before, "sgd", lr, False, x, y, [decay], False)
    want_loss, want_w, want_b = _closed_form_step(x, y, w, b, lr, decay)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, err_msg="the loss before the step")
    np.testing.assert_allclose(np.asarray(after["kernel"]), want_w, rtol=1e-5, atol=1e-6,
                               err_msg=f"kernel, weight_decay {decay:.2f}")
    np.testing.assert_allclose(np.asarray(after["bias"]), want_b, rtol=1e-5, atol=1e-6,
                               err_msg="bias (not decayed)")
