"""Graded tests for phase 4 (solutions/04_lora_exercises.ipynb): LoRA and QLoRA, each a step past the lesson.

LoRA with dropout on the adapter path (never forming A B), merging several weighted adapters at once, the
memory of full / LoRA / QLoRA in three storage formats, asymmetric int8 with a zero point, and NF4 with QLoRA's
double quantization of the block scales. References are numpy in float64; every input comes from `rng`.
Shapes: W [in, out], A [in, r], B [r, out], x [..., in]; the LoRA scale is alpha / r.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.course.calls import equations
from tunix_lite.course.graded import graded

__all__ = [
    "test_lora_forward_matches_numpy", "test_lora_forward_b_zero_is_the_base", "test_lora_forward_gradients",
    "test_lora_forward_never_forms_a_b", "test_lora_forward_dropout", "test_merge_lora_matches_numpy",
    "test_merge_lora_equals_the_adapters", "test_merge_lora_update_rank", "test_lora_memory_closed_form",
    "test_lora_memory_matches_the_library", "test_lora_memory_ordering", "test_quantize_int8_matches_numpy",
    "test_quantize_int8_error_bound_and_exact_zero", "test_quantize_int8_uses_the_whole_range",
    "test_quantize_int8_zero_column_under_jit", "test_quantize_nf4_dq_matches_numpy",
    "test_quantize_nf4_dq_scale_error", "test_quantize_nf4_dq_costs_little_accuracy",
]

HINTS = {
    "lora_forward": [
        "The base path x W is never dropped; dropout acts on the adapter's input only, and the update goes through "
        "the narrow r-wide middle: (x A) B costs r (in + out) per token, A B would cost in * out.",
        "Inverted dropout: keep each entry of x with probability 1 - p (jax.random.bernoulli(key, 1 - p, x.shape)), "
        "divide the kept ones by 1 - p, zero the rest; skip it when p = 0 or key is None. Scale alpha / r, "
        "r = a.shape[1].",
        "xd = x if key is None or dropout == 0 else jnp.where(jax.random.bernoulli(key, 1 - dropout, x.shape), "
        "x / (1 - dropout), 0.0); return x @ w + (alpha / a.shape[1]) * ((xd @ a) @ b)",
    ],
    "merge_lora": [
        "Each adapter adds its own low-rank update, scaled by its alpha / r and by its weight in the mix; merged "
        "updates simply add up.",
        "For every adapter: delta = weight * (alpha / r) * a @ b with r = a.shape[1] (ranks may differ); the merged "
        "kernel is w plus the sum of the deltas.",
        "return w + sum(ad['weight'] * (ad['alpha'] / ad['a'].shape[1]) * (ad['a'] @ ad['b']) for ad in adapters)",
    ],
    "lora_memory": [
        "Count bytes per stored number: a trained float32 weight costs itself, its gradient and two Adam moments; "
        "a frozen one only its storage, in whatever format it is stored.",
        "Trained: 16 bytes per number (4 + 4 + 8). Frozen float32: 4 per weight. int8: 1 per weight plus a float32 "
        "scale per output column. NF4: half a byte per weight plus a float32 scale per block of 64; with double "
        "quantization one byte per block, a float32 per 256 blocks and one float32 offset. Count blocks per matrix.",
        "blocks = ceil(i * o / 64); nf4 = 36 * blocks; nf4_dq = 33 * blocks + 4 * ceil(blocks / 256) + 4; "
        "int8 = i * o + 4 * o; adapters = rank * (i + o); each method adds 16 * sum(adapters)",
    ],
    "quantize_int8": [
        "Asymmetric quantization maps the column's range [min, max] (stretched to include 0) onto the 256 codes "
        "0..255; the zero point is the code that stands for 0.0, so zero stays exact.",
        "lo = min(w.min(axis=0), 0), hi = max(w.max(axis=0), 0), scale = (hi - lo) / 255, zero = round(-lo / scale), "
        "codes = clip(round(w / scale) + zero, 0, 255) as uint8. Guard a column of zeros (scale 0).",
        "safe = jnp.where(scale > 0, scale, 1.0); zero = jnp.clip(jnp.round(-lo / safe), 0, 255); codes = "
        "jnp.clip(jnp.round(w / safe) + zero, 0, 255).astype(jnp.uint8)",
    ],
    "quantize_nf4_dq": [
        "First quantization as before: each block of 64 weights gets an absmax and NF4 indices computed with it. "
        "Second: the absmaxes themselves are quantized to int8, after subtracting their mean, one scale per group "
        "of 256 blocks.",
        "offset = mean(absmax); centered = absmax - offset, zero-padded to a multiple of `group`, reshaped "
        "[n_groups, group]; group_scale = max|centered| per group / 127; codes = round(centered / group_scale) "
        "as int8 (guard a zero scale), cut back to n_blocks.",
        "c = jnp.pad(absmax - offset, (0, -n % group)).reshape(-1, group); gs = jnp.max(jnp.abs(c), 1) / 127; "
        "codes = jnp.round(c / jnp.where(gs > 0, gs, 1.0)[:, None]).astype(jnp.int8).reshape(-1)[:n]",
    ],
}

FORBIDDEN = {
    "lora_forward": ("tunix_lite.lora", "flax.nnx.Dropout", "flax.nnx.LoRA", "flax.nnx.LoRALinear"),
    "merge_lora": ("tunix_lite.lora",),
    "lora_memory": ("tunix_lite.quantize.memory_report", "tunix_lite.lora"),
    "quantize_int8": ("tunix_lite.quantize.quantize", "tunix_lite.quantize._quantize", "tunix_lite.quantize.dequantize",
                      "tunix_lite.quantize._dequantize"),
    "quantize_nf4_dq": ("tunix_lite.quantize.quantize", "tunix_lite.quantize._quantize",
                        "tunix_lite.quantize.dequantize", "tunix_lite.quantize._dequantize"),
}

NF4 = np.array([  # the 16 NF4 values (QLoRA, Appendix E), the same as tunix_lite.quantize.NF4
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
])


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31))


def _lora_inputs(rng, lead=(2, 5), din: int = 16, dout: int = 12, rank: int = 4):
    x = rng.normal(size=(*lead, din))
    w = rng.normal(size=(din, dout)) * din ** -0.5
    a = rng.normal(size=(din, rank)) * din ** -0.5
    b = rng.normal(size=(rank, dout))
    return [arr.astype(np.float32).astype(np.float64) for arr in (x, w, a, b)]  # float32-representable


def _lora_ref(x, w, a, b, alpha):
    return x @ w + (alpha / a.shape[1]) * (x @ a) @ b


def _forward(impl, x, w, a, b, alpha, **kwargs):
    return impl.lora_forward(_f32(x), _f32(w), _f32(a), _f32(b), alpha, **kwargs)


# ----------------------------------------------------------------------------- the forward pass, with dropout


@graded("lora_forward", reference=True)
def test_lora_forward_matches_numpy(impl, rng):
    """without dropout: x W + (alpha / r) x A B for several ranks, alphas and batch shapes, under jit"""
    for lead, rank in [((2, 5), int(rng.integers(2, 8))), ((7,), 1), ((3, 2, 4), 8)]:
        alpha = float(rng.choice([1.0, 8.0, 16.0, 32.0]))
        x, w, a, b = _lora_inputs(rng, lead=lead, rank=rank)
        got = jax.jit(impl.lora_forward)(_f32(x), _f32(w), _f32(a), _f32(b), alpha)
        assert got.shape == (*lead, w.shape[1]), f"shape {got.shape}, expected {(*lead, w.shape[1])}"
        np.testing.assert_allclose(np.asarray(got), _lora_ref(x, w, a, b, alpha), rtol=1e-5, atol=1e-5)
        no_key = _forward(impl, x, w, a, b, alpha, dropout=0.5, key=None)
        np.testing.assert_allclose(np.asarray(no_key), _lora_ref(x, w, a, b, alpha), rtol=1e-5, atol=1e-5,
                                   err_msg="without a key there is no dropout (evaluation)")


@graded("lora_forward")
def test_lora_forward_b_zero_is_the_base(impl, rng):
    """with B = 0 (how LoRA starts) the layer is exactly x W, whatever A, alpha and dropout are"""
    x, w, a, b = _lora_inputs(rng, rank=6)
    for alpha, kwargs in [(1.0, {}), (32.0, dict(dropout=0.3, key=jax.random.key(_seed(rng))))]:
        got = _forward(impl, x, w, a, np.zeros_like(b), alpha, **kwargs)
        np.testing.assert_allclose(np.asarray(got), np.asarray(_f32(x) @ _f32(w)), rtol=1e-6, atol=1e-6,
                                   err_msg="dropout acts on the adapter path only")


@graded("lora_forward")
def test_lora_forward_gradients(impl, rng):
    """at B = 0, dL/dA = 0 but dL/dB = (alpha / r) (x A)^T dL/dy: training starts through B"""
    x, w, a, b = _lora_inputs(rng, lead=(6,), rank=3)
    upstream = rng.normal(size=(6, w.shape[1]))  # dL/dy for L = sum(y * upstream)
    alpha = float(rng.uniform(1.0, 16.0))

    def loss(a, b):
        return jnp.sum(impl.lora_forward(_f32(x), _f32(w), a, b, alpha) * _f32(upstream))

    grad_a, grad_b = jax.jit(jax.grad(loss, argnums=(0, 1)))(_f32(a), jnp.zeros_like(_f32(b)))
    np.testing.assert_allclose(np.asarray(grad_a), 0.0, atol=1e-6, err_msg="dL/dA must be 0 while B = 0")
    np.testing.assert_allclose(np.asarray(grad_b), (alpha / 3) * (x @ a).T @ upstream, rtol=1e-4, atol=1e-5)


@graded("lora_forward")
def test_lora_forward_never_forms_a_b(impl, rng):
    """the update goes through the r-wide middle: no intermediate of shape [in, out] (that is A B)"""
    din, dout = 13, 11  # sizes no other axis has
    x, w, a, b = _lora_inputs(rng, lead=(2, 5), din=din, dout=dout, rank=3)
    for kwargs in ({}, dict(dropout=0.1, key=jax.random.key(_seed(rng)))):
        program = equations(impl.lora_forward, _f32(x), _f32(w), _f32(a), _f32(b), 4.0, **kwargs)
        formed = [s for _, shapes in program for s in shapes if din in s and dout in s]
        assert not formed, f"an intermediate of shape {formed[0]} is A B (or W + A B): compute (x A) B instead"


@graded("lora_forward")
def test_lora_forward_dropout(impl, rng):
    """inverted dropout on x: each entry kept with probability 1 - p and scaled by 1 / (1 - p); fixed by the key"""
    d, p = 64, float(rng.choice([0.1, 0.25, 0.5]))
    x = rng.uniform(0.5, 2.0, size=(32, d))  # no zeros, so a dropped entry is visible
    eye = np.eye(d)
    key = jax.random.key(_seed(rng))
    # W = 0, A = B = I, alpha = r: the output is exactly dropout(x)
    out = np.asarray(_forward(impl, x, np.zeros((d, d)), eye, eye, float(d), dropout=p, key=key), np.float64)
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / (1 - p), rtol=1e-5, err_msg="kept entries are x / (1 - p)")
    n, dropped = out.size, (~kept).sum()
    assert abs(dropped - p * n) < 5 * math.sqrt(n * p * (1 - p)), f"{dropped} of {n} dropped, expected {p * n:.0f}"
    again = np.asarray(_forward(impl, x, np.zeros((d, d)), eye, eye, float(d), dropout=p, key=key))
    other = np.asarray(_forward(impl, x, np.zeros((d, d)), eye, eye, float(d), dropout=p,
                                key=jax.random.key(_seed(rng) + 1)))
    assert np.array_equal(out, again) and not np.array_equal(out, other), "the key alone decides what is dropped"


# ----------------------------------------------------------------------------- merging several adapters


def _adapters(rng, din, dout, count):
    out = []
    for _ in range(count):
        rank = int(rng.integers(1, 5))
        _, _, a, b = _lora_inputs(rng, lead=(1,), din=din, dout=dout, rank=rank)
        alpha, weight = float(rng.choice([4.0, 8.0, 16.0])), float(rng.uniform(-1, 1.5))
        out.append({"a": a, "b": b, "alpha": alpha, "weight": weight})
    return out


def _merge_ref(w, adapters):
    return w + sum(ad["weight"] * (ad["alpha"] / ad["a"].shape[1]) * ad["a"] @ ad["b"] for ad in adapters)


def _merge(impl, w, adapters, fn=None):
    as_jax = [{"a": _f32(ad["a"]), "b": _f32(ad["b"]), "alpha": ad["alpha"], "weight": ad["weight"]} for ad in adapters]
    return np.asarray((fn or impl.merge_lora)(_f32(w), as_jax), np.float64)


@graded("merge_lora", reference=True)
def test_merge_lora_matches_numpy(impl, rng):
    """W + sum of weight * (alpha / r) A B over adapters of different ranks, also under jit"""
    din, dout = int(rng.integers(8, 20)), int(rng.integers(6, 15))
    _, w, _, _ = _lora_inputs(rng, din=din, dout=dout)
    for count, fn in [(1, None), (3, jax.jit(impl.merge_lora))]:
        adapters = _adapters(rng, din, dout, count)
        got = _merge(impl, w, adapters, fn)
        assert got.shape == w.shape, f"shape {got.shape}, expected W's {w.shape}"
        np.testing.assert_allclose(got, _merge_ref(w, adapters), rtol=1e-4, atol=1e-5)


@graded("merge_lora")
def test_merge_lora_equals_the_adapters(impl, rng):
    """x @ merged equals the base plus each adapter's weighted LoRA update; merging in two steps is the same"""
    x, w, _, _ = _lora_inputs(rng, lead=(9,))
    adapters = _adapters(rng, 16, 12, 3)
    want = x @ w + sum(ad["weight"] * (_lora_ref(x, 0 * w, ad["a"], ad["b"], ad["alpha"])) for ad in adapters)
    np.testing.assert_allclose(x @ _merge(impl, w, adapters), want, rtol=1e-4, atol=1e-4)
    stepwise = _merge(impl, _merge(impl, w, adapters[:1]), adapters[1:])
    np.testing.assert_allclose(stepwise, _merge(impl, w, adapters), rtol=1e-5, atol=1e-5)


@graded("merge_lora")
def test_merge_lora_update_rank(impl, rng):
    """merged - W has the sum of the adapters' ranks; weight 0 removes an adapter; no adapters returns W"""
    _, w, _, _ = _lora_inputs(rng, din=24, dout=20)
    adapters = _adapters(rng, 24, 20, 2)
    delta = _merge(impl, w, adapters) - w
    want = sum(ad["a"].shape[1] for ad in adapters)
    found = np.linalg.matrix_rank(delta, tol=1e-4 * np.abs(delta).max())
    assert found == want, f"merged - W has rank {found}, expected {want}"
    muted = [dict(ad, weight=0.0) for ad in adapters]
    np.testing.assert_array_equal(_merge(impl, w, muted), np.asarray(_f32(w), np.float64))
    np.testing.assert_array_equal(_merge(impl, w, []), np.asarray(_f32(w), np.float64))


# ----------------------------------------------------------------------------- memory

MEMORY_KEYS = ("full", "lora", "qlora_int8", "qlora_nf4", "qlora_nf4_dq")


def _memory_ref(shapes, rank):
    base = sum(i * o for i, o in shapes)
    trained = 16 * sum(rank * (i + o) for i, o in shapes)
    blocks = [math.ceil(i * o / 64) for i, o in shapes]
    return {"full": 16 * base, "lora": 4 * base + trained,
            "qlora_int8": sum(i * o + 4 * o for i, o in shapes) + trained,
            "qlora_nf4": sum(36 * n for n in blocks) + trained,
            "qlora_nf4_dq": sum(33 * n + 4 * math.ceil(n / 256) + 4 for n in blocks) + trained}


def _check_memory(got, want, where, keys=MEMORY_KEYS):
    assert isinstance(got, dict) and set(keys) <= set(got), f"{where}: return a dict with keys {list(MEMORY_KEYS)}"
    for key in keys:
        assert int(got[key]) == want[key], f"{where}: {key} = {got[key]}, expected {want[key]} bytes"


@graded("lora_memory", reference=True)
def test_lora_memory_closed_form(impl, rng):
    """bytes of weights + gradients + Adam moments in every format, for lists of random matrices and for Gemma"""
    for _ in range(4):
        shapes = [tuple(int(d) for d in rng.integers(1, 300, size=2)) for _ in range(rng.integers(2, 7))]
        rank = int(rng.integers(1, 33))
        _check_memory(impl.lora_memory(shapes, rank), _memory_ref(shapes, rank), f"shapes={shapes}, rank={rank}")
    gemma_layer = [(640, 1024), (640, 256), (640, 256), (1024, 640), (640, 2048), (640, 2048), (2048, 640)]
    _check_memory(impl.lora_memory(gemma_layer * 18, 16), _memory_ref(gemma_layer * 18, 16), "Gemma 3 270M")


@graded("lora_memory")
def test_lora_memory_matches_the_library(impl, rng):
    """full, LoRA, int8 and NF4 bytes equal what tunix_lite's LoRA layers store for a module of several matrices"""
    from tunix_lite.lora import apply_lora
    from tunix_lite.quantize import memory_report

    shapes = [tuple(int(d) for d in rng.integers(3, 90, size=2)) for _ in range(int(rng.integers(2, 5)))]
    rank = int(rng.integers(1, 9))

    class Stack(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(i, o, use_bias=False, rngs=rngs) for i, o in shapes])

    seed = _seed(rng)

    def build(fmt):  # shapes and dtypes only: nothing is computed
        def make():
            module = Stack(nnx.Rngs(seed))
            return module if fmt == "full" else apply_lora(module, rank=rank, alpha=2.0 * rank, targets=(r".",),
                                                           quantize=fmt, rngs=nnx.Rngs(seed + 1))
        return nnx.eval_shape(make)

    got = impl.lora_memory(shapes, rank)
    where = f"matrices {shapes} at rank {rank}"
    full = memory_report(build("full"), wrt=nnx.Param)
    assert int(got["full"]) == 4 * full["base_float"], f"{where}: full = {got['full']}, 16 bytes per trained weight"
    for key, fmt in [("lora", None), ("qlora_int8", "int8"), ("qlora_nf4", "nf4")]:
        report = memory_report(build(fmt))
        stored = report["base_float"] + report["base_quantized"] + 4 * report["adapters"]  # + grads + 2 moments
        assert int(got[key]) == stored, f"{where}: {key} = {got[key]}, the library's layers hold {stored} bytes"


@graded("lora_memory")
def test_lora_memory_ordering(impl, rng):
    """for big matrices: NF4 with double quantization < NF4 < int8 < LoRA < full"""
    shapes = [(int(rng.integers(512, 2048)), int(rng.integers(512, 2048))) for _ in range(3)]
    got = impl.lora_memory(shapes, int(rng.integers(4, 33)))
    values = [int(got[k]) for k in reversed(MEMORY_KEYS)]
    assert values == sorted(values) and len(set(values)) == len(values), f"{dict(zip(reversed(MEMORY_KEYS), values))}"


# ----------------------------------------------------------------------------- asymmetric int8


def _int8_ref(w):
    w = np.asarray(w, np.float64)
    lo, hi = np.minimum(w.min(0), 0.0), np.maximum(w.max(0), 0.0)
    scale = (hi - lo) / 255
    safe = np.where(scale > 0, scale, 1.0)
    zero = np.clip(np.round(-lo / safe), 0, 255)
    return np.clip(np.round(w / safe) + zero, 0, 255), scale, zero


def _check_int8(got, w, where):
    assert isinstance(got, tuple) and len(got) == 3, f"{where}: return (codes, scale, zero_point)"
    codes, scale, zero = (np.asarray(g) for g in got)
    want_codes, want_scale, want_zero = _int8_ref(w)
    assert codes.dtype == np.uint8, f"{where}: codes must be uint8, got {codes.dtype}"
    assert codes.shape == w.shape and scale.shape == zero.shape == (w.shape[1],), \
        f"{where}: codes {codes.shape} (expected {w.shape}), scale and zero_point {scale.shape}, {zero.shape}"
    np.testing.assert_allclose(scale, want_scale, rtol=1e-5, err_msg=f"{where}: scale = (max - min) / 255, 0 in range")
    assert np.all(np.abs(zero.astype(np.float64) - want_zero) <= 1), f"{where}: zero_point = round(-min / scale)"
    deq = (codes.astype(np.float64) - zero.astype(np.float64)) * scale.astype(np.float64)
    return codes, scale, zero, deq


@graded("quantize_int8", reference=True)
def test_quantize_int8_matches_numpy(impl, rng):
    """uint8 codes with a per-column scale and zero point: w = (codes - zero) * scale, within half a step"""
    for shape in [(16, 12), (50, int(rng.integers(2, 8)))]:
        w = (rng.normal(size=shape) * rng.uniform(0.01, 3.0, size=shape[1]) + rng.normal(size=shape[1])).astype(
            np.float32)
        *_, deq = _check_int8(jax.jit(impl.quantize_int8)(jnp.asarray(w)), w, f"w {shape}")
        _, want_scale, _ = _int8_ref(w)
        assert np.all(np.abs(deq - w) <= want_scale / 2 * (1 + 1e-3) + 1e-6), "a weight is off by more than half a step"


@graded("quantize_int8")
def test_quantize_int8_error_bound_and_exact_zero(impl, rng):
    """|w - dequantized| <= scale / 2 on heavy-tailed weights, and a weight of exactly 0 comes back exactly 0"""
    w = (rng.standard_t(3, size=(64, 10)) * 0.02).astype(np.float32)
    w[rng.integers(64, size=5), rng.integers(10, size=5)] = 0.0
    codes, scale, zero, deq = _check_int8(jax.jit(impl.quantize_int8)(jnp.asarray(w)), w, "heavy-tailed w")
    assert np.all(np.abs(deq - w) <= scale / 2 * (1 + 1e-3) + 1e-9), "some weight is off by more than half a step"
    assert np.all(deq[w == 0] == 0), "zero must come back exactly (the zero point is an integer code)"


@graded("quantize_int8")
def test_quantize_int8_uses_the_whole_range(impl, rng):
    """a column of positive weights (activations after ReLU) uses 256 levels: its step is max / 255, half of what a
    symmetric int8 scale (max / 127) would give"""
    w = rng.uniform(0.0, 4.0, size=(200, 3)).astype(np.float32)
    codes, scale, zero, deq = _check_int8(impl.quantize_int8(jnp.asarray(w)), w, "positive w")
    np.testing.assert_allclose(scale, w.max(0) / 255, rtol=1e-5)
    assert np.all(zero == 0) and codes.max() == 255, "the range starts at 0, so zero_point is 0 and max maps to 255"


@graded("quantize_int8")
def test_quantize_int8_zero_column_under_jit(impl, rng):
    """an all-zero column gives codes equal to its zero point (no NaN), under jit"""
    w = rng.normal(size=(8, 5)).astype(np.float32)
    w[:, int(rng.integers(5))] = 0.0
    *_, deq = _check_int8(jax.jit(impl.quantize_int8)(jnp.asarray(w)), w, "w with a zero column")
    assert np.all(np.isfinite(deq)) and np.all(deq[:, (w == 0).all(0)] == 0), "a zero column must dequantize to 0"


# ----------------------------------------------------------------------------- NF4 with double quantization


def _nf4_distances(w, block):
    """(|w / block absmax - code| for every weight and NF4 code [blocks, block, 16], the block absmaxes [blocks])."""
    flat = np.asarray(w, np.float64).reshape(-1)
    flat = np.concatenate([flat, np.zeros(-flat.size % block)]).reshape(-1, block)
    absmax = np.abs(flat).max(1)
    normed = flat / np.where(absmax > 0, absmax, 1.0)[:, None]
    return np.abs(normed[..., None] - NF4), absmax


def _nf4_dq_ref(w, block, group):
    distance, absmax = _nf4_distances(w, block)
    idx = np.argmin(distance, axis=-1)
    offset = absmax.mean()
    centered = np.concatenate([absmax - offset, np.zeros(-absmax.size % group)]).reshape(-1, group)
    group_scale = np.abs(centered).max(1) / 127
    codes = np.clip(np.round(centered / np.where(group_scale > 0, group_scale, 1.0)[:, None]), -127, 127)
    return idx, codes.reshape(-1)[:absmax.size], group_scale, offset, absmax


def _dequantize(idx, codes, group_scale, offset, group):
    absmax = np.asarray(codes, np.float64) * np.repeat(np.asarray(group_scale, np.float64), group)[:len(codes)] + offset
    return NF4[np.asarray(idx)] * absmax[:, None], absmax


def _check_dq(got, w, block, group, where):
    assert isinstance(got, tuple) and len(got) == 4, f"{where}: return (indices, scale_codes, group_scales, offset)"
    idx, codes, group_scale, offset = (np.asarray(g) for g in got)
    want_idx, want_codes, want_gs, want_offset, absmax = _nf4_dq_ref(w, block, group)
    assert idx.shape == want_idx.shape and idx.dtype.kind in "iu", \
        f"{where}: indices {idx.shape} {idx.dtype}, expected integers {want_idx.shape}"
    assert codes.shape == want_codes.shape and codes.dtype == np.int8, \
        f"{where}: scale_codes {codes.shape} {codes.dtype}, expected int8 {want_codes.shape}"
    assert group_scale.shape == want_gs.shape, f"{where}: group_scales {group_scale.shape}, expected {want_gs.shape}"
    distance, _ = _nf4_distances(w, block)
    chosen = np.take_along_axis(distance, idx[..., None].astype(np.int64), -1)[..., 0]
    # a weight halfway between two codes may round either way in float32: any code as near as the nearest is right
    off = np.argwhere(chosen > distance.min(-1) + 1e-5)
    assert off.size == 0, (f"{where}: nearest NF4 code per weight: {len(off)} of {chosen.size} weights get a farther "
                           f"code, e.g. block {off[0][0]} weight {off[0][1]}: code {NF4[idx[tuple(off[0])]]:.4f}, "
                           f"nearest {NF4[want_idx[tuple(off[0])]]:.4f}" if off.size else "")
    np.testing.assert_allclose(float(offset), want_offset, rtol=1e-5, err_msg=f"{where}: offset = mean absmax")
    np.testing.assert_allclose(group_scale, want_gs, rtol=1e-4, atol=1e-9,
                               err_msg=f"{where}: group scale = max |absmax - offset| / 127")
    assert np.all(np.abs(codes.astype(int) - want_codes) <= 1), f"{where}: scale codes = round(centered / group scale)"
    return idx, codes, group_scale, offset, absmax


@graded("quantize_nf4_dq", reference=True)
def test_quantize_nf4_dq_matches_numpy(impl, rng):
    """NF4 indices from each block's absmax; the absmaxes, minus their mean, as int8 with a scale per group"""
    for shape, block, group in [((64, 48), 64, 256), ((20, 30), 16, 8), ((33, 7), 64, 4)]:
        w = (rng.normal(size=shape) * rng.uniform(0.01, 0.1)).astype(np.float32)
        fn = jax.jit(impl.quantize_nf4_dq, static_argnames=("block", "group"))
        where = f"w {shape}, block {block}, group {group}"
        _check_dq(fn(jnp.asarray(w), block=block, group=group), w, block, group, where)


@graded("quantize_nf4_dq")
def test_quantize_nf4_dq_scale_error(impl, rng):
    """each dequantized block scale is within half a group step of the true absmax"""
    w = rng.standard_t(4, size=(96, 64)).astype(np.float32) * 0.02
    idx, codes, gs, offset, absmax = _check_dq(impl.quantize_nf4_dq(jnp.asarray(w), block=64, group=16), w, 64, 16, "w")
    _, approx = _dequantize(idx, codes, gs, offset, 16)
    step = np.repeat(gs, 16)[:len(absmax)]
    assert np.all(np.abs(approx - absmax) <= step / 2 * (1 + 1e-3) + 1e-9), "a block scale is off by over half a step"


@graded("quantize_nf4_dq")
def test_quantize_nf4_dq_costs_little_accuracy(impl, rng):
    """dequantized weights are almost as close as with float32 block scales (under 1% more mean error), for 0.127
    instead of 0.5 bits of scale per weight"""
    w = (rng.normal(size=(128, 256)) * 0.02).astype(np.float32)
    idx, codes, gs, offset, absmax = _check_dq(jax.jit(impl.quantize_nf4_dq)(jnp.asarray(w)), w, 64, 256, "w")
    deq, _ = _dequantize(idx, codes, gs, offset, 256)
    plain = NF4[np.asarray(idx)] * absmax[:, None]
    err_dq = np.mean(np.abs(deq.reshape(-1)[: w.size] - w.reshape(-1)))
    err_plain = np.mean(np.abs(plain.reshape(-1)[: w.size] - w.reshape(-1)))
    assert err_dq <= 1.01 * err_plain, f"mean error {err_dq:.3g} with quantized scales vs {err_plain:.3g} without"
