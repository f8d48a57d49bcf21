"""Graded tests for phase 1 (solutions/01_jax_nnx_exercises.ipynb): JAX and Flax NNX fundamentals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tunix_lite.course.graded import graded

__all__ = [
    "test_masked_mean_matches_numpy", "test_masked_mean_under_jit", "test_masked_mean_empty_mask_is_zero",
    "test_masked_mean_gradient", "test_global_norm_matches_numpy", "test_global_norm_scales",
    "test_global_norm_nnx_state", "test_pad_to_bucket_values", "test_pad_to_bucket_few_shapes",
    "test_pad_to_bucket_too_long", "test_train_step_matches_closed_form", "test_train_step_reduces_loss",
]

HINTS = {
    "masked_mean": "Under jit the mask is a tracer, so x[mask] cannot work (its shape would depend on data). "
                   "Multiply by the mask and divide by its sum, guarding the sum with jnp.maximum(..., 1).",
    "global_norm": "jax.tree.leaves(tree) lists every array in any pytree; sum each leaf's squares, then sqrt.",
    "pad_to_bucket": "Pick the smallest bucket >= the longest sequence, start from np.full((B, L), pad_id) and "
                     "copy each sequence into the left of its row; the mask is True exactly where you copied.",
    "train_step": "Write loss_fn(model) -> mean squared error, get (loss, grads) from nnx.value_and_grad(loss_fn)"
                  "(model), then optimizer.update(model, grads) and return the loss from before the update.",
}


def _ragged_mask(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    lengths = rng.integers(1, length + 1, size=batch)
    return np.arange(length)[None, :] < lengths[:, None]


def _masked_mean_ref(x: np.ndarray, mask: np.ndarray) -> float:
    mask = mask.astype(bool)
    return float(x[mask].mean()) if mask.any() else 0.0


@graded("masked_mean")
def test_masked_mean_matches_numpy(impl):
    """matches x[mask].mean() on random ragged masks (bool and 0/1 float)"""
    rng = np.random.default_rng(0)
    for shape in [(4, 7), (3, 5, 6)]:
        x = rng.normal(size=shape).astype(np.float32)
        mask = _ragged_mask(rng, int(np.prod(shape[:-1])), shape[-1]).reshape(shape)
        for m in (mask, mask.astype(np.float32)):
            got = float(impl.masked_mean(jnp.asarray(x), jnp.asarray(m)))
            np.testing.assert_allclose(got, _masked_mean_ref(x, mask), rtol=1e-5, atol=1e-6)


@graded("masked_mean")
def test_masked_mean_under_jit(impl):
    """works inside jax.jit with a mask that changes between calls"""
    fn = jax.jit(impl.masked_mean)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 9)).astype(np.float32)
    for _ in range(3):
        mask = _ragged_mask(rng, 6, 9)
        np.testing.assert_allclose(float(fn(x, mask)), _masked_mean_ref(x, mask), rtol=1e-5, atol=1e-6)


@graded("masked_mean")
def test_masked_mean_empty_mask_is_zero(impl):
    """returns 0.0 (not NaN) when nothing is selected"""
    x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 3)), jnp.float32)
    got = float(jax.jit(impl.masked_mean)(x, jnp.zeros((2, 3), bool)))
    assert got == 0.0, f"expected 0.0 for an all-False mask, got {got}"


@graded("masked_mean")
def test_masked_mean_gradient(impl):
    """its gradient is mask / mask.sum(): zero on masked-out positions"""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 8)).astype(np.float32)
    mask = _ragged_mask(rng, 3, 8)
    grad = jax.grad(lambda x: impl.masked_mean(x, mask))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(grad), mask / mask.sum(), rtol=1e-5, atol=1e-7)


def _random_tree(rng: np.random.Generator):
    def arr(*shape):
        return jnp.asarray(rng.normal(size=shape).astype(np.float32))

    return {"w": arr(3, 4), "layers": [arr(5), (arr(2, 2), arr(1))], "head": {"b": arr(7)}}


@graded("global_norm")
def test_global_norm_matches_numpy(impl):
    """matches sqrt(sum of squares) over every leaf of a nested dict/list/tuple"""
    rng = np.random.default_rng(10)
    for _ in range(2):
        tree = _random_tree(rng)
        expected = np.sqrt(sum(np.sum(np.asarray(leaf) ** 2) for leaf in jax.tree.leaves(tree)))
        np.testing.assert_allclose(float(impl.global_norm(tree)), expected, rtol=1e-5)


@graded("global_norm")
def test_global_norm_scales(impl):
    """global_norm(c * tree) == |c| * global_norm(tree), also under jit"""
    tree = _random_tree(np.random.default_rng(11))
    base = float(jax.jit(impl.global_norm)(tree))
    for c in (-3.0, 0.5):
        scaled = jax.tree.map(lambda a: c * a, tree)
        np.testing.assert_allclose(float(jax.jit(impl.global_norm)(scaled)), abs(c) * base, rtol=1e-5)


@graded("global_norm")
def test_global_norm_nnx_state(impl):
    """works on the parameter state of an NNX module"""
    model = nnx.Linear(4, 3, rngs=nnx.Rngs(12))
    state = nnx.state(model, nnx.Param)
    expected = np.sqrt(sum(np.sum(np.asarray(leaf) ** 2) for leaf in jax.tree.leaves(state)))
    np.testing.assert_allclose(float(impl.global_norm(state)), expected, rtol=1e-5)


BUCKETS = (8, 16, 32, 64)


def _random_batch(rng: np.random.Generator, max_len: int) -> list[list[int]]:
    lengths = rng.integers(1, max_len + 1, size=rng.integers(2, 6))
    lengths[0] = max_len
    return [rng.integers(1, 100, size=n).tolist() for n in lengths]


@graded("pad_to_bucket")
def test_pad_to_bucket_values(impl):
    """right-pads to the smallest bucket that fits, with a matching mask"""
    rng = np.random.default_rng(20)
    for max_len in (3, 8, 9, 33):
        seqs = _random_batch(rng, max_len)
        tokens, mask = (np.asarray(a) for a in impl.pad_to_bucket(seqs, buckets=BUCKETS, pad_id=-7))
        width = min(b for b in BUCKETS if b >= max_len)
        assert tokens.shape == mask.shape == (len(seqs), width), f"shape {tokens.shape}, expected {(len(seqs), width)}"
        for row, seq in enumerate(seqs):
            np.testing.assert_array_equal(tokens[row, :len(seq)], seq)
            np.testing.assert_array_equal(tokens[row, len(seq):], -7)
            np.testing.assert_array_equal(mask[row].astype(bool), np.arange(width) < len(seq))


@graded("pad_to_bucket")
def test_pad_to_bucket_few_shapes(impl):
    """fifty ragged batches produce at most len(buckets) distinct shapes per batch size"""
    rng = np.random.default_rng(21)
    widths = {np.asarray(impl.pad_to_bucket(_random_batch(rng, int(rng.integers(1, 65))),
                                            buckets=BUCKETS)[0]).shape[1] for _ in range(50)}
    assert widths <= set(BUCKETS), f"widths {sorted(widths)} are not all buckets {BUCKETS}"


@graded("pad_to_bucket")
def test_pad_to_bucket_too_long(impl):
    """raises ValueError for a sequence longer than the largest bucket"""
    try:
        impl.pad_to_bucket([[1] * 65], buckets=BUCKETS)
    except ValueError:
        return
    raise AssertionError("expected ValueError for a 65-token sequence with buckets up to 64")


def _regression(seed: int, n: int = 16, din: int = 3, dout: int = 2):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, din)).astype(np.float32)
    y = rng.normal(size=(n, dout)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y)


@graded("train_step")
def test_train_step_matches_closed_form(impl):
    """one SGD step equals the closed-form MSE gradient step, and returns the pre-update loss"""
    x, y = _regression(30)
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(30))
    w, b = np.asarray(model.kernel[...]), np.asarray(model.bias[...])
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    loss = float(impl.train_step(model, optimizer, x, y))
    err = np.asarray(x) @ w + b - np.asarray(y)  # [N, O]
    scale = 2.0 / err.size  # d/dpred of mean((pred - y)^2)
    np.testing.assert_allclose(loss, np.mean(err ** 2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(model.kernel[...]), w - 0.1 * scale * np.asarray(x).T @ err, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(model.bias[...]), b - 0.1 * scale * err.sum(0), rtol=1e-5, atol=1e-6)


@graded("train_step")
def test_train_step_reduces_loss(impl):
    """twenty Adam steps on a two-layer MLP lower the loss and update every parameter"""
    x, y = _regression(31, din=4, dout=1)
    rngs = nnx.Rngs(31)
    model = nnx.Sequential(nnx.Linear(4, 8, rngs=rngs), nnx.relu, nnx.Linear(8, 1, rngs=rngs))
    before = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    losses = [float(impl.train_step(model, optimizer, x, y)) for _ in range(20)]
    assert losses[-1] < 0.9 * losses[0], f"loss went {losses[0]:.4f} -> {losses[-1]:.4f}"
    after = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    pairs = zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(after))
    unchanged = [jax.tree_util.keystr(path) for (path, a), b in pairs if np.array_equal(a, b)]
    assert not unchanged, f"parameters not updated: {unchanged}"
