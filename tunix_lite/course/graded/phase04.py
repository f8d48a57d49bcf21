"""Graded tests for phase 4 (solutions/04_lora_exercises.ipynb): LoRA adapters, merging, memory and quantization.

References are numpy in float64; the learner's float32 results must match to ~1e-5 relative. Shapes: W [in, out],
A [in, r], B [r, out], x [..., in]; r is the rank, the LoRA scale is alpha / r.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.course.graded import graded

__all__ = [
    "test_lora_forward_matches_numpy", "test_lora_forward_b_zero_is_the_base", "test_lora_forward_gradients",
    "test_merge_lora_equals_unmerged", "test_merge_lora_update_is_low_rank", "test_lora_memory_closed_form",
    "test_lora_memory_matches_the_library", "test_quantize_int8_matches_numpy", "test_quantize_int8_error_bound",
    "test_quantize_int8_zero_column_under_jit", "test_quantize_nf4_matches_numpy", "test_quantize_nf4_error_bound",
]

HINTS = {
    "lora_forward": "The rank is a.shape[1] and the scale alpha / rank. Compute (x @ a) @ b, never a @ b: the "
                    "small [.., r] intermediate is the point of LoRA. y = x @ w + scale * (x @ a) @ b.",
    "merge_lora": "Fold the update into the weight once: w + (alpha / r) * a @ b, with r = a.shape[1]. Then "
                  "x @ merged equals the LoRA forward for every x.",
    "lora_memory": "P = sum(in * out), L = rank * sum(in + out). full = 16 P; lora = 4 P + 16 L; qlora = "
                   "36 * sum(ceil(in * out / 64)) + 16 L (each 64-weight block: 32 bytes of 4-bit codes + a "
                   "4-byte scale). Use math.ceil per matrix, not on the total.",
    "quantize_int8": "scale = max(|w|, axis=0) / 127 (one per output column); codes = round(w / scale) clipped "
                     "to [-127, 127] as int8. Divide by jnp.where(scale > 0, scale, 1.0) so a zero column "
                     "gives codes 0 instead of NaN.",
    "quantize_nf4": "Flatten w (row-major), jnp.pad with zeros to a multiple of `block`, reshape to [n_blocks, "
                    "block]; absmax = max |.| per block; divide (guarding 0) and take the nearest NF4 value: "
                    "jnp.argmin(jnp.abs(normed[..., None] - NF4), axis=-1).",
}

NF4 = np.array([  # the 16 NF4 values (QLoRA, Appendix E), the same as tunix_lite.quantize.NF4
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
])


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _lora_inputs(seed: int, lead=(2, 5), din: int = 16, dout: int = 12, rank: int = 4):
    rng = _rng(seed)
    x = rng.normal(size=(*lead, din))
    w = rng.normal(size=(din, dout)) * din ** -0.5
    a = rng.normal(size=(din, rank)) * din ** -0.5
    b = rng.normal(size=(rank, dout))
    return [arr.astype(np.float32).astype(np.float64) for arr in (x, w, a, b)]  # float32-representable


def _lora_ref(x, w, a, b, alpha):
    return x @ w + (alpha / a.shape[1]) * (x @ a) @ b


# ----------------------------------------------------------------------------- the forward pass


@graded("lora_forward")
def test_lora_forward_matches_numpy(impl):
    """matches x W + (alpha / r) x A B for several ranks, alphas and batch shapes, under jit"""
    for seed, (lead, rank, alpha) in enumerate([((2, 5), 4, 8.0), ((7,), 1, 16.0), ((3, 2, 4), 8, 8.0)]):
        x, w, a, b = _lora_inputs(1000 + seed, lead=lead, rank=rank)
        got = jax.jit(impl.lora_forward)(_f32(x), _f32(w), _f32(a), _f32(b), alpha)
        assert got.shape == (*lead, w.shape[1]), f"shape {got.shape}, expected {(*lead, w.shape[1])}"
        np.testing.assert_allclose(np.asarray(got), _lora_ref(x, w, a, b, alpha), rtol=1e-5, atol=1e-5)


@graded("lora_forward")
def test_lora_forward_b_zero_is_the_base(impl):
    """with B = 0 (how LoRA starts) the layer is exactly the base layer x W, whatever A and alpha are"""
    x, w, a, b = _lora_inputs(1010, rank=6)
    for alpha in (1.0, 32.0):
        got = impl.lora_forward(_f32(x), _f32(w), _f32(a), jnp.zeros_like(_f32(b)), alpha)
        np.testing.assert_allclose(np.asarray(got), np.asarray(_f32(x) @ _f32(w)), rtol=1e-6, atol=1e-6)


@graded("lora_forward")
def test_lora_forward_gradients(impl):
    """at B = 0, dL/dA = 0 but dL/dB = (alpha / r) (x A)^T dL/dy: training starts through B"""
    x, w, a, b = _lora_inputs(1020, lead=(6,), rank=3)
    upstream = _rng(1021).normal(size=(6, w.shape[1]))  # dL/dy for L = sum(y * upstream)
    alpha, zero_b = 6.0, np.zeros_like(b)

    def loss(a, b):
        return jnp.sum(impl.lora_forward(_f32(x), _f32(w), a, b, alpha) * _f32(upstream))

    grad_a, grad_b = jax.jit(jax.grad(loss, argnums=(0, 1)))(_f32(a), _f32(zero_b))
    np.testing.assert_allclose(np.asarray(grad_a), 0.0, atol=1e-6, err_msg="dL/dA must be 0 while B = 0")
    np.testing.assert_allclose(np.asarray(grad_b), (alpha / 3) * (x @ a).T @ upstream, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- merging


@graded("merge_lora")
def test_merge_lora_equals_unmerged(impl):
    """x @ merge_lora(W, A, B, alpha) equals the LoRA forward, under jit too"""
    for seed, (rank, alpha, fn) in enumerate([(4, 8.0, impl.merge_lora), (2, 32.0, jax.jit(impl.merge_lora))]):
        x, w, a, b = _lora_inputs(1100 + seed, lead=(9,), rank=rank)
        merged = np.asarray(fn(_f32(w), _f32(a), _f32(b), alpha))
        assert merged.shape == w.shape, f"shape {merged.shape}, expected W's {w.shape}"
        np.testing.assert_allclose(x @ merged, _lora_ref(x, w, a, b, alpha), rtol=1e-4, atol=1e-4)


@graded("merge_lora")
def test_merge_lora_update_is_low_rank(impl):
    """merged - W has rank r (the adapters' rank); with B = 0 the merge returns W unchanged"""
    for rank in (1, 3):
        _, w, a, b = _lora_inputs(1110 + rank, din=20, dout=15, rank=rank)
        delta = np.asarray(impl.merge_lora(_f32(w), _f32(a), _f32(b), 4.0), np.float64) - w
        found = np.linalg.matrix_rank(delta, tol=1e-4 * np.abs(delta).max())
        assert found == rank, f"merged - W has rank {found}, expected {rank}"
    same = impl.merge_lora(_f32(w), _f32(a), jnp.zeros_like(_f32(b)), 4.0)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(_f32(w)))


# ----------------------------------------------------------------------------- memory


def _memory_ref(shapes, rank):
    base = sum(i * o for i, o in shapes)
    adapters = sum(rank * (i + o) for i, o in shapes)
    nf4 = sum(math.ceil(i * o / 64) * 36 for i, o in shapes)
    return {"full": 16 * base, "lora": 4 * base + 16 * adapters, "qlora": nf4 + 16 * adapters}


def _check_memory(got, want, where):
    assert isinstance(got, dict) and set(want) <= set(got), f"{where}: return a dict with keys {sorted(want)}"
    for key in want:
        assert int(got[key]) == want[key], f"{where}: {key} = {got[key]}, expected {want[key]} bytes"


@graded("lora_memory")
def test_lora_memory_closed_form(impl):
    """bytes for weights + gradients + Adam moments: full, LoRA and QLoRA, for random layer shapes"""
    rng = _rng(1200)
    for _ in range(4):
        shapes = [tuple(int(d) for d in rng.integers(1, 300, size=2)) for _ in range(rng.integers(1, 6))]
        rank = int(rng.integers(1, 33))
        _check_memory(impl.lora_memory(shapes, rank), _memory_ref(shapes, rank), f"shapes={shapes}, rank={rank}")
    gemma_layer = [(640, 1024), (640, 256), (640, 256), (1024, 640), (640, 2048), (640, 2048), (2048, 640)]
    _check_memory(impl.lora_memory(gemma_layer * 18, 16), _memory_ref(gemma_layer * 18, 16), "Gemma 3 270M")


@graded("lora_memory")
def test_lora_memory_matches_the_library(impl):
    """adapter and NF4 bytes equal what tunix_lite's LoRALinear and quantize(w, "nf4") really store"""
    from tunix_lite.lora import LoRALinear
    from tunix_lite.quantize import quantize

    def nbytes(arrays):
        return sum(math.prod(a.shape) * a.dtype.itemsize for a in arrays)

    for (din, dout), rank in [((40, 24), 3), ((33, 7), 2), ((64, 64), 8)]:
        # eval_shape: the shapes and dtypes the library would create, without computing (or compiling) them
        layer = nnx.eval_shape(lambda: LoRALinear(nnx.Linear(din, dout, use_bias=False, rngs=nnx.Rngs(0)),
                                                  rank=rank, alpha=2.0 * rank, rngs=nnx.Rngs(1)))
        adapters = sum(math.prod(v.shape) for v in jax.tree.leaves(nnx.state(layer, nnx.LoRAParam)))
        nf4 = nbytes(jax.eval_shape(lambda w: tuple(quantize(w, "nf4"))[:2],
                                    jax.ShapeDtypeStruct((din, dout), jnp.float32)))
        got = impl.lora_memory([(din, dout)], rank)
        where = f"a ({din}, {dout}) layer at rank {rank}"
        assert int(got["full"]) == 16 * din * dout, f"{where}: full = {got['full']}, expected 16 bytes per weight"
        assert int(got["lora"]) - 4 * din * dout == 16 * adapters, \
            f"{where}: LoRALinear has {adapters} adapter weights, each costs 16 bytes on top of the 4-byte base"
        assert int(got["qlora"]) - 16 * adapters == nf4, \
            f"{where}: the library's NF4 base stores {nf4} bytes (codes + block scales)"


# ----------------------------------------------------------------------------- int8


def _int8_ref(w):
    w = np.asarray(w, np.float64)
    scale = np.abs(w).max(0) / 127
    return np.clip(np.round(w / np.where(scale > 0, scale, 1.0)), -127, 127), scale


def _check_int8(got, w, where):
    assert isinstance(got, tuple) and len(got) == 2, f"{where}: return (codes, scale)"
    codes, scale = np.asarray(got[0]), np.asarray(got[1])
    want_codes, want_scale = _int8_ref(w)
    assert codes.dtype == np.int8, f"{where}: codes must be int8, got {codes.dtype}"
    assert codes.shape == w.shape and scale.shape == (w.shape[1],), \
        f"{where}: codes {codes.shape} (expected {w.shape}), scale {scale.shape} (expected {(w.shape[1],)})"
    np.testing.assert_allclose(scale, want_scale, rtol=1e-6, err_msg=f"{where}: scale = max |w| per column / 127")
    ratio = np.asarray(w, np.float64) / np.where(want_scale > 0, want_scale, 1.0)
    tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < 1e-3  # float32 rounding may go either way here
    off = (codes != want_codes) & ~(tie & (np.abs(codes - want_codes) <= 1))
    assert not off.any(), f"{where}: {int(off.sum())} codes differ from round(w / scale)"
    return codes, scale


@graded("quantize_int8")
def test_quantize_int8_matches_numpy(impl):
    """codes = round(w / scale), scale = max |w| / 127 per output column"""
    rng = _rng(1300)
    for shape in [(16, 12), (50, 3)]:
        w = (rng.normal(size=shape) * rng.uniform(0.01, 3.0, size=shape[1])).astype(np.float32)
        _check_int8(jax.jit(impl.quantize_int8)(jnp.asarray(w)), w, f"w {shape}")


@graded("quantize_int8")
def test_quantize_int8_error_bound(impl):
    """|w - codes * scale| <= scale / 2, and each column's largest |w| becomes +-127"""
    w = (_rng(1310).standard_t(3, size=(64, 10)) * 0.02).astype(np.float32)  # heavy tails, like real weights
    codes, scale = _check_int8(jax.jit(impl.quantize_int8)(jnp.asarray(w)), w, "heavy-tailed w")
    err = np.abs(w.astype(np.float64) - codes * scale.astype(np.float64))
    assert np.all(err <= scale / 2 * (1 + 1e-4) + 1e-12), f"max error {err.max():.3g} exceeds half a step"
    np.testing.assert_array_equal(np.abs(codes).max(0), 127)


@graded("quantize_int8")
def test_quantize_int8_zero_column_under_jit(impl):
    """an all-zero column gives codes 0 (no NaN), under jit"""
    w = _rng(1320).normal(size=(8, 5)).astype(np.float32)
    w[:, 2] = 0.0
    codes, scale = _check_int8(jax.jit(impl.quantize_int8)(jnp.asarray(w)), w, "w with a zero column")
    assert np.all(codes[:, 2] == 0) and np.all(np.isfinite(codes * scale)), "a zero column must dequantize to 0"


# ----------------------------------------------------------------------------- NF4


def _nf4_ref(w, block):
    flat = np.asarray(w, np.float64).reshape(-1)
    flat = np.concatenate([flat, np.zeros(-flat.size % block)]).reshape(-1, block)
    absmax = np.abs(flat).max(1)
    normed = flat / np.where(absmax > 0, absmax, 1.0)[:, None]
    return np.argmin(np.abs(normed[..., None] - NF4), axis=-1), absmax


def _check_nf4(got, w, block, where):
    assert isinstance(got, tuple) and len(got) == 2, f"{where}: return (indices, absmax)"
    idx, absmax = np.asarray(got[0]), np.asarray(got[1])
    want_idx, want_absmax = _nf4_ref(w, block)
    assert idx.shape == want_idx.shape and absmax.shape == want_absmax.shape, \
        f"{where}: indices {idx.shape} (expected {want_idx.shape}), absmax {absmax.shape} (expected {want_absmax.shape})"
    assert idx.dtype.kind in "iu", f"{where}: indices must be integers, got {idx.dtype}"
    np.testing.assert_allclose(absmax, want_absmax, rtol=1e-6, err_msg=f"{where}: absmax per block")
    # compare the chosen values, so an exact tie between two codes cannot fail the test
    np.testing.assert_allclose(NF4[idx], NF4[want_idx], atol=1e-6, err_msg=f"{where}: nearest NF4 code")
    return idx, absmax


@graded("quantize_nf4")
def test_quantize_nf4_matches_numpy(impl):
    """nearest NF4 code per weight, blocks of `block` row-major weights zero-padded at the end"""
    rng = _rng(1400)
    for shape, block in [((16, 8), 64), ((10, 7), 64), ((5, 9), 16)]:
        w = rng.normal(size=shape).astype(np.float32)
        got = jax.jit(impl.quantize_nf4, static_argnames="block")(jnp.asarray(w), block=block)
        _check_nf4(got, w, block, f"w {shape}, block {block}")


@graded("quantize_nf4")
def test_quantize_nf4_error_bound(impl):
    """error <= absmax * (widest NF4 gap) / 2; zeros stay exactly 0 and each block's largest |w| is exact, under jit"""
    w = _rng(1410).normal(size=(32, 12)).astype(np.float32)
    w[0, :5] = 0.0
    idx, absmax = _check_nf4(jax.jit(impl.quantize_nf4)(jnp.asarray(w)), w, 64, "jit")
    deq = (NF4[idx] * absmax[:, None]).reshape(-1)[: w.size].reshape(w.shape)
    bound = np.repeat(absmax, 64)[: w.size].reshape(w.shape) * np.max(np.diff(NF4)) / 2
    assert np.all(np.abs(deq - w) <= bound * (1 + 1e-5)), "some weight is farther than half a gap from its code"
    assert np.all(deq[0, :5] == 0.0), "zero must be represented exactly (NF4 has an exact 0)"
    blocks = np.abs(np.concatenate([w.reshape(-1), np.zeros(-w.size % 64)]).reshape(-1, 64))
    np.testing.assert_allclose(np.abs(NF4[idx][np.arange(len(idx)), blocks.argmax(1)]), 1.0,
                               err_msg="each block's largest |w| maps to +-1")
