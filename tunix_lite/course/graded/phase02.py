"""Graded tests for phase 2 (solutions/02_gemma3_block_exercises.ipynb): the pieces of a Gemma 3 block.

References are numpy in float64; the learner's float32 results must match to ~1e-5 relative.
Shapes: B batch, T queries, S keys, N query heads, K kv heads, H head dim, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.graded import graded

__all__ = [
    "test_rms_norm_matches_numpy", "test_rms_norm_scale_invariant", "test_rms_norm_eps_inside_the_root",
    "test_apply_rope_matches_numpy", "test_apply_rope_position_zero_is_identity", "test_apply_rope_keeps_norms",
    "test_apply_rope_is_relative", "test_attention_mask_causal", "test_attention_mask_padding_and_window",
    "test_attention_mask_decode_step", "test_gqa_attention_matches_numpy", "test_gqa_attention_ignores_masked_keys",
    "test_top_p_filter_matches_numpy", "test_top_p_filter_edges", "test_top_p_filter_under_jit",
]

HINTS = {
    "rms_norm": "Divide by sqrt(mean(x**2 over the last axis) + eps), keepdims=True, then multiply by scale. "
                "No mean is subtracted (that would be LayerNorm).",
    "apply_rope": "Rotate-half pairs dimension i with i + H/2: split x into halves x1, x2 and return "
                  "concat([x1*cos - x2*sin, x2*cos + x1*sin]); angle = position * base**(-2i/H), i = 0..H/2-1.",
    "attention_mask": "Broadcast q_pos[:, :, None] against k_pos[:, None, :]: a key is allowed when k >= 0 and "
                      "k <= q, and with a window also when q - k < sliding_window.",
    "gqa_attention": "Query head n uses kv head n // (N // K): jnp.repeat(k, N // K, axis=2) (not tile). Scores "
                     "q.k * scale, masked positions set to a large negative number before the softmax over keys.",
    "top_p_filter": "Sort probabilities in descending order, take the cumulative sum, and keep a token when the "
                    "mass *before* it is < p (so the top token always stays). Set the rest to -inf with jnp.where.",
}


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


# ----------------------------------------------------------------------------- RMSNorm


def _rms_norm_ref(x, scale, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.asarray(scale, np.float64)


@graded("rms_norm")
def test_rms_norm_matches_numpy(impl):
    """matches x / sqrt(mean(x^2) + eps) * scale over the last axis"""
    rng = _rng(100)
    for shape in [(2, 5, 16), (3, 8)]:
        x, scale = rng.normal(size=shape), rng.normal(size=shape[-1])
        got = impl.rms_norm(_f32(x), _f32(scale), eps=1e-6)
        np.testing.assert_allclose(np.asarray(got), _rms_norm_ref(x, scale, 1e-6), rtol=1e-5, atol=1e-5)


@graded("rms_norm")
def test_rms_norm_scale_invariant(impl):
    """rms_norm(c * x) == rms_norm(x) for c > 0, also under jit"""
    rng = _rng(101)
    x, scale = _f32(rng.normal(size=(4, 32))), _f32(rng.normal(size=32))
    fn = jax.jit(impl.rms_norm)
    base = np.asarray(fn(x, scale))
    for c in (0.1, 7.0):
        np.testing.assert_allclose(np.asarray(fn(c * x, scale)), base, rtol=1e-4, atol=1e-5)


@graded("rms_norm")
def test_rms_norm_eps_inside_the_root(impl):
    """uses eps inside the square root (visible when x is tiny)"""
    x, scale = np.full((2, 4), 1e-3), np.ones(4)
    got = impl.rms_norm(_f32(x), _f32(scale), eps=1e-2)
    np.testing.assert_allclose(np.asarray(got), _rms_norm_ref(x, scale, 1e-2), rtol=1e-4)


# ----------------------------------------------------------------------------- RoPE


def _rope_ref(x, positions, base):
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    inv_freq = base ** (-np.arange(half) * 2.0 / x.shape[-1])
    angles = np.asarray(positions, np.float64)[..., None] * inv_freq  # [B, T, H/2]
    sin, cos = np.sin(angles)[:, :, None, :], np.cos(angles)[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@graded("apply_rope")
def test_apply_rope_matches_numpy(impl):
    """matches a rotate-half reference for ragged positions and two bases"""
    rng = _rng(200)
    x = rng.normal(size=(2, 5, 3, 8))
    positions = np.stack([np.arange(5), rng.integers(0, 300, size=5)])
    for base in (10_000.0, 1_000_000.0):
        got = impl.apply_rope(_f32(x), jnp.asarray(positions, jnp.int32), base)
        np.testing.assert_allclose(np.asarray(got), _rope_ref(x, positions, base), rtol=1e-4, atol=1e-4)


@graded("apply_rope")
def test_apply_rope_position_zero_is_identity(impl):
    """position 0 leaves the vector unchanged"""
    x = _f32(_rng(201).normal(size=(1, 3, 2, 16)))
    got = impl.apply_rope(x, jnp.zeros((1, 3), jnp.int32), 10_000.0)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x), rtol=1e-6, atol=1e-6)


@graded("apply_rope")
def test_apply_rope_keeps_norms(impl):
    """rotations keep every head vector's length"""
    rng = _rng(202)
    x = _f32(rng.normal(size=(2, 6, 4, 8)))
    got = impl.apply_rope(x, jnp.asarray(rng.integers(0, 1000, size=(2, 6)), jnp.int32), 10_000.0)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(got), axis=-1), np.linalg.norm(np.asarray(x), axis=-1),
                               rtol=1e-5)


@graded("apply_rope")
def test_apply_rope_is_relative(impl):
    """q·k after RoPE depends only on the distance between positions"""
    rng = _rng(203)
    q, k = _f32(rng.normal(size=(1, 1, 1, 16))), _f32(rng.normal(size=(1, 1, 1, 16)))

    def score(m, n):
        rq = impl.apply_rope(q, jnp.array([[m]], jnp.int32), 10_000.0)
        rk = impl.apply_rope(k, jnp.array([[n]], jnp.int32), 10_000.0)
        return float(jnp.sum(rq * rk))

    for m, n, shift in [(5, 2, 40), (9, 9, 123)]:
        np.testing.assert_allclose(score(m + shift, n + shift), score(m, n), rtol=1e-4, atol=1e-4)
    assert abs(score(5, 2) - score(2, 5)) > 1e-3, "q·k should change when the distance changes sign"


# ----------------------------------------------------------------------------- masks


def _mask_ref(q_pos, k_pos, window=None):
    q, k = np.asarray(q_pos)[:, :, None], np.asarray(k_pos)[:, None, :]
    mask = (k >= 0) & (k <= q)
    if window is not None:
        mask &= q - k < window
    return mask


def _check_mask(impl, q_pos, k_pos, window=None):
    kwargs = {} if window is None else {"sliding_window": window}
    got = np.asarray(impl.attention_mask(jnp.asarray(q_pos, jnp.int32), jnp.asarray(k_pos, jnp.int32), **kwargs))
    want = _mask_ref(q_pos, k_pos, window)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape} = [B, T, S]"
    assert got.dtype == bool, f"dtype {got.dtype}, expected bool"
    np.testing.assert_array_equal(got, want)


@graded("attention_mask")
def test_attention_mask_causal(impl):
    """without a window it is the lower triangle (query t sees keys 0..t)"""
    pos = np.broadcast_to(np.arange(7), (2, 7))
    _check_mask(impl, pos, pos)


@graded("attention_mask")
def test_attention_mask_padding_and_window(impl):
    """left padding (position -1) is never attended; a window keeps the last w positions"""
    rng = _rng(300)
    pad = rng.integers(0, 6, size=3)
    pos = np.stack([np.concatenate([-np.ones(p, int), np.arange(12 - p)]) for p in pad])
    for window in (None, 1, 4):
        _check_mask(impl, pos, pos, window)


@graded("attention_mask")
def test_attention_mask_decode_step(impl):
    """works for one new query against a longer cache with empty slots"""
    k_pos = np.array([[-1, 0, 1, 2, 3, -1, -1], [0, 1, 2, 3, 4, -1, -1]])
    q_pos = np.array([[4], [5]])
    for window in (None, 3):
        _check_mask(impl, q_pos, np.where(k_pos > q_pos, -1, k_pos), window)


# ----------------------------------------------------------------------------- GQA


def _attention_ref(q, k, v, mask, scale):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scores = np.einsum("btnh,bsnh->bnts", q, k) * scale
    scores = np.where(np.asarray(mask)[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", probs, v)


def _attention_inputs(seed, B=2, T=5, S=5, N=4, K=2, H=8):
    rng = _rng(seed)
    q, k, v = rng.normal(size=(B, T, N, H)), rng.normal(size=(B, S, K, H)), rng.normal(size=(B, S, K, H))
    pos = np.broadcast_to(np.arange(S), (B, S))
    mask = _mask_ref(pos[:, S - T:], pos)
    return q, k, v, mask


@graded("gqa_attention")
def test_gqa_attention_matches_numpy(impl):
    """matches a numpy reference for multi-head, grouped and multi-query layouts"""
    for seed, (N, K) in enumerate([(4, 4), (4, 2), (6, 1)]):
        q, k, v, mask = _attention_inputs(400 + seed, N=N, K=K)
        got = impl.gqa_attention(_f32(q), _f32(k), _f32(v), jnp.asarray(mask), 8 ** -0.5)
        assert got.shape == q.shape, f"shape {got.shape}, expected {q.shape} = [B, T, N, H]"
        np.testing.assert_allclose(np.asarray(got), _attention_ref(q, k, v, mask, 8 ** -0.5), rtol=1e-4, atol=1e-5)


@graded("gqa_attention")
def test_gqa_attention_ignores_masked_keys(impl):
    """changing masked-out keys and values does not change the output (under jit)"""
    q, k, v, mask = _attention_inputs(410, T=3, S=6, N=4, K=1)
    fn = jax.jit(impl.gqa_attention, static_argnums=4)
    base = np.asarray(fn(_f32(q), _f32(k), _f32(v), jnp.asarray(mask), 0.5))
    hidden = ~mask.any(axis=1)  # [B, S] keys no query may see
    k2, v2 = k.copy(), v.copy()
    k2[hidden], v2[hidden] = 100.0, -100.0
    np.testing.assert_allclose(np.asarray(fn(_f32(q), _f32(k2), _f32(v2), jnp.asarray(mask), 0.5)), base,
                               rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- top-p


def _top_p_keep(logits, p):
    logits = np.asarray(logits, np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    keep = np.zeros(logits.shape, bool)
    for row in np.ndindex(logits.shape[:-1]):
        order = np.argsort(-probs[row])
        before = np.cumsum(probs[row][order]) - probs[row][order]
        keep[row][order[before < p]] = True
    return keep


def _check_top_p(got, logits, p):
    got, logits = np.asarray(got), np.asarray(logits)
    keep = _top_p_keep(logits, p)
    assert got.shape == logits.shape, f"shape {got.shape}, expected {logits.shape}"
    np.testing.assert_allclose(got[keep], logits[keep], rtol=1e-6, err_msg="kept logits must be unchanged")
    dropped = got[~keep]
    assert np.all(dropped < logits.max() - 100), (
        f"p={p}: {int(np.sum(dropped >= logits.max() - 100))} tokens outside the nucleus were not removed "
        "(set them to -inf)")


@graded("top_p_filter")
def test_top_p_filter_matches_numpy(impl):
    """keeps exactly the smallest top set whose probability reaches p"""
    rng = _rng(500)
    logits = rng.normal(size=(3, 50)) * 2.0
    for p in (0.1, 0.5, 0.9):
        _check_top_p(impl.top_p_filter(_f32(logits), p), logits.astype(np.float32), p)


@graded("top_p_filter")
def test_top_p_filter_edges(impl):
    """a tiny p keeps only the argmax, p = 1 keeps everything"""
    logits = _f32(_rng(501).normal(size=(2, 20)))
    tiny = np.asarray(impl.top_p_filter(logits, 1e-6))
    survivors = tiny > np.asarray(logits).max(-1, keepdims=True) - 100
    assert np.array_equal(survivors, np.eye(20, dtype=bool)[np.argmax(logits, -1)]), \
        "with p close to 0 only the most likely token should survive"
    np.testing.assert_allclose(np.asarray(impl.top_p_filter(logits, 1.0)), np.asarray(logits), rtol=1e-6)


@graded("top_p_filter")
def test_top_p_filter_under_jit(impl):
    """works under jit with p as a traced value"""
    logits = (_rng(502).normal(size=(4, 30)) * 3.0).astype(np.float32)
    fn = jax.jit(impl.top_p_filter)
    for p in (0.3, 0.8):
        _check_top_p(fn(jnp.asarray(logits), jnp.float32(p)), logits, p)
