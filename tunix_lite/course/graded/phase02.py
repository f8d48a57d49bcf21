"""Graded tests for phase 2 (solutions/02_gemma3_block_exercises.ipynb): variants of a Gemma 3 block's pieces.

Each exercise is a step past the lesson: Gemma's stored-scale RMSNorm in float32, interleaved RoPE with linear
position interpolation, a packing-aware (segment) mask, grouped-query attention with logit soft-capping that
never copies k and v, and top-k + top-p + min-p in one filter. References are numpy in float64; every input
comes from `rng`. Shapes: B batch, T queries, S keys, N query heads, K kv heads, H head dim, V vocabulary.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.calls import equations
from tunix_lite.course.graded import graded

__all__ = [
    "test_rms_norm_matches_numpy", "test_rms_norm_zero_weight_gives_unit_rms", "test_rms_norm_bfloat16_in_float32",
    "test_rms_norm_eps_inside_the_root", "test_rope_interleaved_matches_numpy",
    "test_rope_interleaved_position_zero_is_identity", "test_rope_interleaved_keeps_norms",
    "test_rope_interleaved_is_relative", "test_rope_interleaved_factor_divides_positions",
    "test_attention_mask_matches_numpy", "test_attention_mask_is_block_diagonal",
    "test_attention_mask_decode_step", "test_gqa_attention_matches_numpy", "test_gqa_attention_ignores_masked_keys",
    "test_gqa_attention_does_not_repeat_kv", "test_gqa_attention_softcap_limits", "test_filter_logits_matches_numpy",
    "test_filter_logits_edges", "test_filter_logits_under_jit",
]

HINTS = {
    "rms_norm": [
        "Two details differ from the lesson's rms_norm: Gemma stores the scale as w and multiplies by (1 + w), and "
        "the arithmetic runs in float32 even when x is bfloat16; the result comes back in x's dtype.",
        "Cast x to float32, divide by sqrt(mean(x^2 over the last axis) + eps), multiply by (1 + w) in float32, then "
        "cast back with .astype(x.dtype).",
        "x32 = x.astype(jnp.float32); out = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps) * "
        "(1.0 + w.astype(jnp.float32)); return out.astype(x.dtype)",
    ],
    "rope_interleaved": [
        "Same rotation as the lesson, other pairs: dimension 2i is paired with 2i + 1 (neighbours), not with "
        "i + H/2. Pair i still turns by position * base**(-2i/H); the factor stretches positions: p / factor.",
        "Take the even dimensions x[..., 0::2] and the odd ones x[..., 1::2]; rotate each pair (a, b) to "
        "(a cos - b sin, b cos + a sin), then put them back in alternating order (stack on a new last axis, reshape).",
        "angle = (positions[..., None] / factor) * base ** (-jnp.arange(0, H, 2) / H); a, b = x[..., 0::2], "
        "x[..., 1::2]; out = jnp.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(x.shape)",
    ],
    "attention_mask": [
        "Four conditions, all needed: the key exists (position >= 0), it is not in the future, it belongs to the "
        "same packed example (segment), and with a window it is among the last w positions.",
        "Broadcast queries against keys: q_pos[:, :, None] vs k_pos[:, None, :], and q_seg[:, :, None] == "
        "k_seg[:, None, :]. Positions restart in every segment, so compare positions only within a segment.",
        "mask = (k >= 0) & (k <= q) & (q_seg[:, :, None] == k_seg[:, None, :]); if sliding_window is not None: "
        "mask &= q - k < sliding_window",
    ],
    "gqa_attention": [
        "K kv heads serve N query heads, N / K each. Instead of copying k and v N / K times, regroup the queries: "
        "each kv head meets a block of G = N / K query heads. Soft-capping squashes scores smoothly into "
        "(-softcap, softcap) before the mask and the softmax.",
        "Reshape q [B, T, N, H] to [B, T, K, G, H] (query head n = k * G + g), and let einsum pair it with "
        "k [B, S, K, H]: scores [B, K, G, T, S]. With a softcap: scores = softcap * tanh(scores / softcap). Mask, "
        "softmax over S, multiply by v the same way, reshape back to [B, T, N, H].",
        "s = jnp.einsum('btkgh,bskh->bkgts', q.reshape(B, T, K, G, H), k) * scale; s = jnp.where(mask[:, None, None], "
        "s, -1e30); out = jnp.einsum('bkgts,bskh->btkgh', jax.nn.softmax(s, -1), v).reshape(B, T, N, H)",
    ],
    "filter_logits": [
        "Apply the three filters in order, each on what the previous left: top-k keeps the k largest logits, "
        "top-p the smallest top set whose (renormalised) probability reaches p, min-p every token whose "
        "probability is at least min_p times the largest. Removed tokens become -inf.",
        "After top-k, a softmax over the remaining logits renormalises by itself (-inf gives 0). For top-p sort "
        "descending, keep a token when the mass *before* it is < p. min-p compares probabilities (or logits: "
        "p_i >= min_p * p_max is logit_i >= logit_max + log(min_p)). No Python branching on traced p.",
        "kth = jax.lax.top_k(x, top_k)[0][..., -1:]; x = jnp.where(x >= kth, x, -jnp.inf); srt = jnp.sort(x, -1)"
        "[..., ::-1]; pr = jax.nn.softmax(srt, -1); cut = jnp.min(jnp.where(jnp.cumsum(pr, -1) - pr < top_p, srt, "
        "jnp.inf), -1, keepdims=True); x = jnp.where(x >= cut, x, -jnp.inf)",
    ],
}

FORBIDDEN = {
    "rms_norm": ("tunix_lite.models", "flax.nnx.RMSNorm", "flax.linen"),
    "rope_interleaved": ("tunix_lite.models",),
    "attention_mask": ("tunix_lite.models",),
    "gqa_attention": ("tunix_lite.models", "jax.nn.dot_product_attention"),
    "filter_logits": ("tunix_lite.sampler",),
}


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _dims(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


# ----------------------------------------------------------------------------- RMSNorm, Gemma's way


def _rms_norm_ref(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + np.asarray(w, np.float64))


@graded("rms_norm", reference=True)
def test_rms_norm_matches_numpy(impl, rng):
    """matches x / sqrt(mean(x^2) + eps) * (1 + w) over the last axis, per token and per head"""
    for shape in [(2, _dims(rng, 3, 7), _dims(rng, 8, 32)), (2, 3, 4, _dims(rng, 4, 16))]:
        x, w = rng.normal(size=shape) * rng.uniform(0.1, 10.0), rng.normal(size=shape[-1]) * 0.3
        eps = float(rng.choice([1e-6, 1e-5]))
        got = impl.rms_norm(_f32(x), _f32(w), eps=eps)
        np.testing.assert_allclose(np.asarray(got), _rms_norm_ref(x, w, eps), rtol=1e-5, atol=1e-5)


@graded("rms_norm")
def test_rms_norm_zero_weight_gives_unit_rms(impl, rng):
    """w = 0 (a fresh Gemma norm) leaves every vector with root mean square 1, also under jit"""
    x = _f32(rng.normal(size=(3, 5, 64)) * rng.uniform(0.5, 20.0))
    out = np.asarray(jax.jit(impl.rms_norm)(x, jnp.zeros(64)), np.float64)
    np.testing.assert_allclose(np.sqrt(np.mean(out ** 2, axis=-1)), 1.0, rtol=1e-4)


@graded("rms_norm")
def test_rms_norm_bfloat16_in_float32(impl, rng):
    """a bfloat16 input comes back bfloat16, within one bfloat16 rounding of the float32 result"""
    d = _dims(rng, 256, 1024)
    x = (rng.normal(size=(4, d)) * 3.0 + 1.0).astype(np.float32)
    x_bf16 = jnp.asarray(x, jnp.bfloat16)
    w = _f32(rng.normal(size=d) * 0.3)
    got = impl.rms_norm(x_bf16, w)
    assert got.dtype == jnp.bfloat16, f"dtype {got.dtype}: return the input's dtype (bfloat16)"
    want = _rms_norm_ref(np.asarray(x_bf16, np.float32), w, 1e-6)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2 ** -7, atol=2 ** -7,
                               err_msg="more than one bfloat16 rounding away: compute in float32")


@graded("rms_norm")
def test_rms_norm_eps_inside_the_root(impl, rng):
    """uses eps inside the square root (visible when x is tiny)"""
    eps = float(rng.choice([1e-2, 1e-3]))
    x, w = np.full((2, 4), 1e-3) * rng.choice([-1, 1], size=(2, 4)), np.zeros(4)
    np.testing.assert_allclose(np.asarray(impl.rms_norm(_f32(x), _f32(w), eps=eps)), _rms_norm_ref(x, w, eps),
                               rtol=1e-4)


# ----------------------------------------------------------------------------- interleaved RoPE


def _rope_ref(x, positions, base, factor=1.0):
    x = np.asarray(x, np.float64)
    H = x.shape[-1]
    inv_freq = base ** (-np.arange(0, H, 2) / H)
    angles = (np.asarray(positions, np.float64)[..., None] / factor) * inv_freq  # [B, T, H/2]
    sin, cos = np.sin(angles)[:, :, None, :], np.cos(angles)[:, :, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(x.shape)


def _rope(impl, x, positions, base=10_000.0, factor=None):
    kwargs = {} if factor is None else {"factor": factor}
    return np.asarray(impl.rope_interleaved(_f32(x), jnp.asarray(positions, jnp.int32), base, **kwargs), np.float64)


@graded("rope_interleaved", reference=True)
def test_rope_interleaved_matches_numpy(impl, rng):
    """matches an interleaved reference (pairs 2i, 2i+1) for ragged positions, two bases and a factor"""
    H = 2 * _dims(rng, 2, 8)
    x = rng.normal(size=(2, 5, 3, H))
    positions = np.stack([np.arange(5), rng.integers(0, 300, size=5)])
    for base, factor in [(10_000.0, None), (1_000_000.0, None), (10_000.0, float(rng.choice([2.0, 4.0, 8.0])))]:
        want = _rope_ref(x, positions, base, factor or 1.0)
        np.testing.assert_allclose(_rope(impl, x, positions, base, factor), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"base {base:g}, factor {factor}: pair dimension 2i with 2i + 1")


@graded("rope_interleaved")
def test_rope_interleaved_position_zero_is_identity(impl, rng):
    """position 0 leaves the vector unchanged"""
    x = rng.normal(size=(1, 3, 2, 2 * _dims(rng, 2, 8)))
    np.testing.assert_allclose(_rope(impl, x, np.zeros((1, 3))), x, rtol=1e-6, atol=1e-6)


@graded("rope_interleaved")
def test_rope_interleaved_keeps_norms(impl, rng):
    """rotations keep every head vector's length"""
    x = rng.normal(size=(2, 6, 4, 2 * _dims(rng, 2, 8)))
    got = _rope(impl, x, rng.integers(0, 1000, size=(2, 6)))
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


@graded("rope_interleaved")
def test_rope_interleaved_is_relative(impl, rng):
    """q·k after RoPE depends only on the distance between positions"""
    H = 2 * _dims(rng, 4, 8)
    q, k = rng.normal(size=(1, 1, 1, H)), rng.normal(size=(1, 1, 1, H))

    def score(m, n):
        return float(np.sum(_rope(impl, q, [[m]]) * _rope(impl, k, [[n]])))

    m, n, shift = (int(v) for v in rng.integers(0, 200, size=3))
    np.testing.assert_allclose(score(m + shift, n + shift), score(m, n), rtol=1e-4, atol=1e-4)
    assert abs(score(m + 3, m) - score(m, m + 3)) > 1e-3, "q·k should change when the distance changes sign"


@graded("rope_interleaved")
def test_rope_interleaved_factor_divides_positions(impl, rng):
    """linear position interpolation: factor f at position f·p is the unscaled rotation at p"""
    x = rng.normal(size=(2, 4, 2, 2 * _dims(rng, 2, 8)))
    factor = int(rng.integers(2, 9))
    positions = rng.integers(0, 500, size=(2, 4))
    np.testing.assert_allclose(_rope(impl, x, factor * positions, factor=float(factor)), _rope(impl, x, positions),
                               rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- masks for packed rows


def _packed_positions(rng: np.random.Generator, batch: int, length: int):
    """(positions, segments) [B, L]: examples one after another, positions restarting, padding at the end."""
    pos, seg = np.full((batch, length), -1), np.zeros((batch, length), int)
    for row in range(batch):
        t, s = 0, 1
        while t < length - 2:
            n = int(rng.integers(1, max(2, length // 3)))
            n = min(n, length - t - int(rng.integers(0, 2)))
            pos[row, t:t + n], seg[row, t:t + n] = np.arange(n), s
            t, s = t + n, s + 1
    return pos, seg


def _mask_ref(q_pos, k_pos, q_seg, k_seg, window=None):
    q, k = np.asarray(q_pos)[:, :, None], np.asarray(k_pos)[:, None, :]
    mask = (k >= 0) & (k <= q) & (np.asarray(q_seg)[:, :, None] == np.asarray(k_seg)[:, None, :])
    if window is not None:
        mask &= q - k < window
    return mask


def _mask(impl, q_pos, k_pos, q_seg, k_seg, window=None):
    kwargs = {} if window is None else {"sliding_window": window}
    as_int = (jnp.asarray(a, jnp.int32) for a in (q_pos, k_pos, q_seg, k_seg))
    got = np.asarray(impl.attention_mask(*as_int, **kwargs))
    assert got.dtype == bool, f"dtype {got.dtype}, expected bool"
    return got


@graded("attention_mask", reference=True)
def test_attention_mask_matches_numpy(impl, rng):
    """packed rows: a key is visible when present, not in the future, in the same segment, within the window"""
    pos, seg = _packed_positions(rng, 3, _dims(rng, 12, 24))
    for window in (None, int(rng.integers(1, 4)), int(rng.integers(4, 9))):
        want = _mask_ref(pos, pos, seg, seg, window)
        got = _mask(impl, pos, pos, seg, seg, window)
        assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape} = [B, T, S]"
        np.testing.assert_array_equal(got, want, err_msg=f"sliding_window={window}")


@graded("attention_mask")
def test_attention_mask_is_block_diagonal(impl, rng):
    """no query sees another segment, and each segment's block is the plain causal mask of that example alone"""
    pos, seg = _packed_positions(rng, 1, _dims(rng, 16, 24))
    got = _mask(impl, pos, pos, seg, seg)[0]
    for s in np.unique(seg[0]):
        where = np.flatnonzero(seg[0] == s)
        outside = np.setdiff1d(np.arange(seg.shape[1]), where)
        assert not got[np.ix_(where, outside)].any(), f"segment {s} sees tokens of another segment"
        if s:
            np.testing.assert_array_equal(got[np.ix_(where, where)], np.tril(np.ones((len(where),) * 2, bool)))


@graded("attention_mask")
def test_attention_mask_decode_step(impl, rng):
    """one new query per row against a longer cache with empty slots (-1), with and without a window"""
    S = _dims(rng, 6, 10)
    k_pos = np.tile(np.arange(S), (2, 1))
    filled = rng.integers(2, S, size=2)
    k_pos = np.where(np.arange(S) < filled[:, None], k_pos, -1)
    q_pos = filled[:, None] - 1
    seg = np.ones((2, S), int)
    for window in (None, 2):
        np.testing.assert_array_equal(_mask(impl, q_pos, k_pos, seg[:, :1], seg, window),
                                      _mask_ref(q_pos, k_pos, seg[:, :1], seg, window))


# ----------------------------------------------------------------------------- GQA with soft-capping


def _attention_ref(q, k, v, mask, scale, softcap=None):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scores = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    scores = np.where(np.asarray(mask)[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", probs, v)


def _attention_inputs(rng, B=2, T=5, S=5, N=4, K=2, H=8):
    q, k, v = rng.normal(size=(B, T, N, H)), rng.normal(size=(B, S, K, H)), rng.normal(size=(B, S, K, H))
    pos = np.broadcast_to(np.arange(S), (B, S))
    mask = (pos[:, S - T:, None] >= pos[:, None, :])
    return q, k, v, mask


def _gqa(impl, q, k, v, mask, scale, softcap=None, fn=None):
    kwargs = {} if softcap is None else {"softcap": softcap}
    return np.asarray((fn or impl.gqa_attention)(_f32(q), _f32(k), _f32(v), jnp.asarray(mask), scale, **kwargs))


@graded("gqa_attention", reference=True)
def test_gqa_attention_matches_numpy(impl, rng):
    """matches a numpy reference for grouped (K = 2, 3) and multi-query layouts, with and without a softcap"""
    H = _dims(rng, 4, 8)
    for N, K, softcap in [(4, 2, None), (6, 3, float(rng.uniform(2.0, 10.0))), (6, 1, None), (8, 2, 5.0)]:
        q, k, v, mask = _attention_inputs(rng, T=4, S=6, N=N, K=K, H=H)
        q *= 3.0  # large scores, so the softcap matters
        got = _gqa(impl, q, k, v, mask, H ** -0.5, softcap)
        assert got.shape == q.shape, f"shape {got.shape}, expected {q.shape} = [B, T, N, H]"
        np.testing.assert_allclose(got, _attention_ref(q, k, v, mask, H ** -0.5, softcap), rtol=1e-4, atol=1e-5,
                                   err_msg=f"N={N}, K={K}, softcap={softcap}: query head n uses kv head n // (N // K)")


@graded("gqa_attention")
def test_gqa_attention_ignores_masked_keys(impl, rng):
    """changing masked-out keys and values does not change the output (K = 2, under jit)"""
    q, k, v, mask = _attention_inputs(rng, T=3, S=6, N=4, K=2)
    fn = jax.jit(impl.gqa_attention, static_argnums=4)
    base = _gqa(impl, q, k, v, mask, 0.5, fn=fn)
    hidden = ~mask.any(axis=1)  # [B, S] keys no query may see
    k2, v2 = k.copy(), v.copy()
    k2[hidden], v2[hidden] = 100.0, -100.0
    np.testing.assert_allclose(_gqa(impl, q, k2, v2, mask, 0.5, fn=fn), base, rtol=1e-5, atol=1e-5)


@graded("gqa_attention")
def test_gqa_attention_does_not_repeat_kv(impl, rng):
    """never builds k or v copied to every query head: no intermediate of B·S·N·H numbers with S and H in it"""
    B, T, S, N, K, H = 1, 3, 7, 6, 2, 5  # distinct sizes, so shapes say which axis is which
    q, k, v, mask = _attention_inputs(rng, B=B, T=T, S=S, N=N, K=K, H=H)
    program = equations(impl.gqa_attention, _f32(q), _f32(k), _f32(v), jnp.asarray(mask), 0.4)
    copied = [s for _, shapes in program for s in shapes if S in s and H in s and math.prod(s) >= B * S * N * H]
    assert not copied, f"an intermediate of shape {copied[0]} holds k or v once per query head: group the queries"


@graded("gqa_attention")
def test_gqa_attention_softcap_limits(impl, rng):
    """a huge softcap is no cap; a tiny one makes attention uniform over the visible keys"""
    q, k, v, mask = _attention_inputs(rng, T=4, S=6, N=4, K=2)
    plain = _gqa(impl, q, k, v, mask, 0.5)
    np.testing.assert_allclose(_gqa(impl, q, k, v, mask, 0.5, 1e6), plain, rtol=1e-4, atol=1e-5)
    flat = _gqa(impl, q, k, v, mask, 0.5, 1e-6)
    visible = mask / mask.sum(-1, keepdims=True)  # [B, T, S] uniform weights
    want = np.einsum("bts,bskh->btkh", visible, v).repeat(2, axis=2)  # the mean visible value per kv head
    np.testing.assert_allclose(flat, want, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- top-k, top-p and min-p together


def _keep_ref(logits, top_k=None, top_p=None, min_p=None):
    logits = np.asarray(logits, np.float64)
    keep = np.ones(logits.shape, bool)
    for row in np.ndindex(logits.shape[:-1]):
        x = logits[row]
        k = np.ones(x.shape, bool)
        if top_k is not None:
            k &= x >= np.sort(x)[::-1][top_k - 1]
        if top_p is not None:
            p = np.where(k, np.exp(x - x.max()), 0.0)
            p /= p.sum()
            order = np.argsort(-p, kind="stable")
            before = np.cumsum(p[order]) - p[order]
            nucleus = np.zeros_like(k)
            nucleus[order[before < top_p]] = True
            k &= nucleus
        if min_p is not None:
            p = np.where(k, np.exp(x - x.max()), 0.0)
            k &= p >= min_p * p.max()
        keep[row] = k
    return keep


def _check_filter(got, logits, where, **kwargs):
    got, logits = np.asarray(got), np.asarray(logits)
    keep = _keep_ref(logits, **kwargs)
    assert got.shape == logits.shape, f"{where}: shape {got.shape}, expected {logits.shape}"
    np.testing.assert_allclose(got[keep], logits[keep], rtol=1e-6, err_msg=f"{where}: kept logits must be unchanged")
    wrong_kept = int(np.sum(got[~keep] > logits.max() - 100))
    wrong_dropped = int(np.sum(~np.isfinite(got[keep])))
    assert not wrong_kept and not wrong_dropped, \
        f"{where}: {wrong_kept} token(s) kept that the filters remove, {wrong_dropped} removed that they keep"


def _logits(rng, rows=3, vocab=None, spread=None):
    vocab = vocab or _dims(rng, 30, 60)
    return (rng.normal(size=(rows, vocab)) * (spread or rng.uniform(1.0, 3.0))).astype(np.float32)


@graded("filter_logits", reference=True)
def test_filter_logits_matches_numpy(impl, rng):
    """each filter alone and all three in order: top-k, then top-p of what is left, then min-p"""
    logits = _logits(rng)
    cases = [dict(top_k=int(rng.integers(2, 10))), dict(top_p=float(rng.uniform(0.3, 0.9))),
             dict(min_p=float(rng.uniform(0.05, 0.3))),
             dict(top_k=int(rng.integers(5, 15)), top_p=float(rng.uniform(0.5, 0.9)), min_p=0.02),
             dict(top_k=3, top_p=0.6)]  # top-p after top-k keeps fewer than top-p alone would
    for kwargs in cases:
        _check_filter(impl.filter_logits(jnp.asarray(logits), **kwargs), logits, f"{kwargs}", **kwargs)


@graded("filter_logits")
def test_filter_logits_edges(impl, rng):
    """no filter changes nothing; a tiny p keeps only the argmax; p = 1, k = V and min_p = 0 keep everything"""
    logits = _logits(rng, rows=2, vocab=20)
    x = jnp.asarray(logits)
    np.testing.assert_allclose(np.asarray(impl.filter_logits(x)), logits, rtol=1e-6)
    tiny = np.asarray(impl.filter_logits(x, top_p=1e-6))
    assert np.array_equal(np.isfinite(tiny), np.eye(20, dtype=bool)[np.argmax(logits, -1)]), \
        "with p close to 0 only the most likely token survives"
    everything = np.asarray(impl.filter_logits(x, top_k=20, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(everything, logits, rtol=1e-6)


@graded("filter_logits")
def test_filter_logits_under_jit(impl, rng):
    """works under jit with top_p and min_p traced (top_k static), on [B, V] and [V]"""
    logits = _logits(rng, rows=4, spread=3.0)
    fn = jax.jit(impl.filter_logits, static_argnames="top_k")
    for top_p, min_p in [(0.3, 0.0), (0.8, 0.1)]:
        got = fn(jnp.asarray(logits), top_k=10, top_p=jnp.float32(top_p), min_p=jnp.float32(min_p))
        _check_filter(got, logits, f"jit, p={top_p}, min_p={min_p}", top_k=10, top_p=top_p, min_p=min_p)
    one_row = np.asarray(fn(jnp.asarray(logits[0]), top_p=jnp.float32(0.5)))
    _check_filter(one_row[None], logits[:1], "a single row [V]", top_p=0.5)
