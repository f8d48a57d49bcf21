"""Graded tests for phase 7 (solutions/07_distillation_exercises.ipynb): the losses of knowledge distillation.

References are numpy in float64; the learner's float32 results must match to ~1e-5 relative, under jit. Shapes:
B batch, T tokens, V vocabulary, k cached ids, N heads, S keys.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.graded import graded

__all__ = [
    "test_softened_kl_matches_numpy", "test_softened_kl_is_zero_for_the_teacher_itself",
    "test_softened_kl_with_a_padded_vocabulary", "test_masked_kd_loss_matches_numpy",
    "test_masked_kd_loss_ignores_masked_tokens", "test_masked_kd_loss_no_ce_on_unlabelled_rows",
    "test_masked_kd_loss_no_tokens", "test_top_k_kd_matches_numpy", "test_top_k_kd_with_every_id_is_full_kd",
    "test_top_k_kd_is_a_lower_bound", "test_attention_transfer_matches_numpy",
    "test_attention_transfer_zero_for_matching_maps", "test_attention_transfer_masked_rows_and_keys",
]

HINTS = {
    "softened_kl": [
        "Soften both distributions with the same temperature, compare the teacher's to the student's with KL "
        "(teacher first), and scale by T² so the gradient keeps its size as T grows. An id both models rule out "
        "contributes nothing, but naive arithmetic there gives 0 · (-inf - -inf) = NaN.",
        "log p = jax.nn.log_softmax(z / T, axis=-1) for both models; KL = sum over V of p_t (log p_t - log p_s), "
        "times T². Where p_t == 0, the term must be exactly 0: select it with jnp.where, and replace log p_s by 0 "
        "there too (a jnp.where inside a jnp.where), so neither the value nor the gradient sees -inf.",
        "lp, lq = log_softmax(zt / T), log_softmax(zs / T); p = jnp.exp(lp); on = p > 0; "
        "return T ** 2 * jnp.sum(p * jnp.where(on, lp - jnp.where(on, lq, 0.0), 0.0), -1)",
    ],
    "masked_kd_loss": [
        "Two per-token terms, KD (every trained token) and CE (only tokens of rows that are ground truth), each "
        "averaged over the same weighted tokens of the whole batch and mixed by α. The token count is returned so "
        "batches combine; no tokens means a zero loss and a zero gradient.",
        "kd = softened_kl(student, teacher, T) [B, T]; ce = -log_softmax(student)[target] [B, T] "
        "(jnp.take_along_axis), multiplied by labelled[:, None]. n = sum(weights); each term is sum(x * w) / n, "
        "with n replaced by 1 where it is 0. Loss = α kd_mean + (1 - α) ce_mean; return (loss, n).",
        "n = weights.sum(); d = jnp.where(n > 0, n, 1.0); ce = -jnp.take_along_axis(jax.nn.log_softmax(zs, -1), "
        "targets[..., None], -1)[..., 0] * labelled[:, None]; return (alpha * (kd * weights).sum() / d + "
        "(1 - alpha) * (ce * weights).sum() / d, n)",
    ],
    "top_k_kd": [
        "Both models become distributions over k + 1 buckets: the k cached ids and one bucket for everything else "
        "(1 minus the cached mass). The teacher's cached probabilities come from its raw logits and log_z; the "
        "student's from its full softened distribution at the same ids. Float32 makes the tail noisy: floor it.",
        "Teacher: log p_i = z_i / T - log_z. Student: jax.nn.log_softmax(z_s / T) at ids (jnp.take_along_axis). "
        "For each, append log(max(1 - sum exp(log p_i), TAIL_FLOOR)) as bucket k + 1 (jnp.concatenate), then "
        "T² · sum over the k + 1 buckets of p (log p - log q).",
        "tail = lambda lp: jnp.concatenate([lp, jnp.log(jnp.maximum(1 - jnp.exp(lp).sum(-1, keepdims=True), "
        "TAIL_FLOOR))], -1); t, s = tail(tv / T - log_z[..., None]), tail(take(log_softmax(zs / T), ids)); "
        "return T ** 2 * jnp.sum(jnp.exp(t) * (t - s), -1)",
    ],
    "attention_transfer_loss": [
        "Group the teacher's heads g = Nt / Ns at a time (consecutive heads, as grouped-query attention groups "
        "them) and average each group; then every student head has one teacher map. Each query row is a "
        "distribution over keys: compare rows with KL(teacher ‖ student), skipping keys the teacher gives 0.",
        "Reshape the teacher [B, Nt, T, S] to [B, Ns, Nt // Ns, T, S] and average axis 2. KL per row over S, with "
        "terms where p == 0 set to 0 and logs taken of jnp.where(x > 0, x, 1) so masked keys stay finite; mean over "
        "the student heads -> [B, T]; then sum(kl * w) / sum(w) (guarded), and return sum(w) too.",
        "p = teacher.reshape(B, Ns, Nt // Ns, T, S).mean(2); on = p > 0; kl = jnp.sum(jnp.where(on, p * "
        "(jnp.log(jnp.where(on, p, 1)) - jnp.log(jnp.where(on & (q > 0), q, 1))), 0), -1).mean(1); "
        "n = w.sum(); return (kl * w).sum() / jnp.where(n > 0, n, 1.0), n",
    ],
}

FORBIDDEN = {  # the library's distillation losses and its KL
    "softened_kl": ("tunix_lite.distill", "optax.kl_divergence", "optax.losses"),
    "masked_kd_loss": ("tunix_lite.distill", "tunix_lite.training", "optax.softmax_cross_entropy_with_integer_labels",
                       "optax.kl_divergence", "optax.losses"),
    "top_k_kd": ("tunix_lite.distill", "optax.kl_divergence", "optax.losses"),
    "attention_transfer_loss": ("tunix_lite.distill", "optax.kl_divergence", "optax.losses"),
}


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _log_softmax(z, T=1.0):
    z = np.asarray(z, np.float64) / T
    top = np.max(np.where(np.isfinite(z), z, -np.inf), axis=-1, keepdims=True)
    e = np.where(np.isfinite(z), np.exp(z - top), 0.0)
    return z - top - np.log(e.sum(-1, keepdims=True))


def _kl_ref(log_p, log_q):
    p = np.exp(log_p)
    return np.where(p > 0, p * (np.where(p > 0, log_p, 0) - np.where(p > 0, log_q, 0)), 0.0).sum(-1)


def _softened_kl_ref(zs, zt, T):
    return T ** 2 * _kl_ref(_log_softmax(zt, T), _log_softmax(zs, T))


def _logits(rng, shape, scale=2.0):
    return (rng.normal(size=shape) * scale).astype(np.float32)


def _ragged_weights(rng, B, T):
    start, end = rng.integers(0, T // 2, size=B), rng.integers(T // 2, T + 1, size=B)
    t = np.arange(T)[None, :]
    return ((t >= start[:, None]) & (t < end[:, None])).astype(np.float32)


# ----------------------------------------------------------------------------- 1. softened KL with T^2


@graded("softened_kl", reference=True)
def test_softened_kl_matches_numpy(impl, rng):
    """T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) per position matches numpy, for several T, under jit"""
    for shape, T in [((2, 5, 11), 1.0), ((3, 4, 17), 2.5), ((6, 9), 4.0)]:
        zs, zt = _logits(rng, shape), _logits(rng, shape)
        got = jax.jit(impl.softened_kl, static_argnums=2)(_f32(zs), _f32(zt), T)
        assert np.shape(got) == shape[:-1], f"return one value per position: shape {shape[:-1]}, got {np.shape(got)}"
        np.testing.assert_allclose(np.asarray(got), _softened_kl_ref(zs, zt, T), rtol=2e-5, atol=1e-6,
                                   err_msg=f"T = {T}: is the T**2 factor there, and the KL teacher-first?")


@graded("softened_kl")
def test_softened_kl_is_zero_for_the_teacher_itself(impl, rng):
    """a student equal to the teacher gets 0 and a zero gradient; a different one a positive value"""
    z = _f32(_logits(rng, (3, 6, 13), scale=4.0))
    value, grad = jax.jit(jax.value_and_grad(lambda s: impl.softened_kl(s, z, 2.0).sum()))(z)
    assert abs(float(value)) < 1e-4, f"KL of a distribution with itself is 0, got {float(value)}"
    assert float(jnp.max(jnp.abs(grad))) < 1e-5, "the gradient at the teacher's own logits must vanish"
    other = jax.jit(impl.softened_kl, static_argnums=2)(z + _f32(_logits(rng, (3, 6, 13))), z, 2.0)
    assert float(jnp.min(other)) > 0, "KL between different distributions is positive"


@graded("softened_kl")
def test_softened_kl_with_a_padded_vocabulary(impl, rng):
    """ids beyond the tokenizer (logits -inf in both models) add nothing and make no NaN, value or gradient"""
    zs, zt = _logits(rng, (2, 5, 20)), _logits(rng, (2, 5, 20))
    pad = np.zeros(20, bool)
    pad[rng.choice(20, size=6, replace=False)] = True
    zs_pad, zt_pad = np.where(pad, -np.inf, zs).astype(np.float32), np.where(pad, -np.inf, zt).astype(np.float32)
    value, grad = jax.jit(jax.value_and_grad(lambda s: impl.softened_kl(s, _f32(zt_pad), 2.0).sum()))(_f32(zs_pad))
    want = _softened_kl_ref(zs[..., ~pad], zt[..., ~pad], 2.0).sum()
    assert np.isfinite(float(value)), f"the loss must be finite with -inf logits, got {float(value)}"
    np.testing.assert_allclose(float(value), want, rtol=2e-5, err_msg="the padded ids must contribute nothing")
    assert np.all(np.isfinite(np.asarray(grad))), "the gradient has NaN: guard the p_t = 0 terms with jnp.where"


# ----------------------------------------------------------------------------- 2. masked KD


def _kd_loss_ref(zs, zt, targets, weights, labelled, alpha, T):
    kd = _softened_kl_ref(zs, zt, T)
    ce = -np.take_along_axis(_log_softmax(zs), targets[..., None], -1)[..., 0] * labelled[:, None]
    w = weights.astype(np.float64)
    count = w.sum()
    if count == 0:
        return 0.0, 0.0
    return float(alpha * (kd * w).sum() / count + (1 - alpha) * (ce * w).sum() / count), float(count)


def _kd_inputs(rng, B=4, T=7, V=12):
    zs, zt = _logits(rng, (B, T, V)), _logits(rng, (B, T, V))
    targets = rng.integers(0, V, size=(B, T)).astype(np.int32)
    labelled = (rng.random(B) < 0.5).astype(np.float32)
    labelled[0] = 1.0
    return zs, zt, targets, _ragged_weights(rng, B, T), labelled


def _masked_kd(impl, alpha, T):
    return jax.jit(partial(impl.masked_kd_loss, alpha=alpha, temperature=T))


@graded("masked_kd_loss", reference=True)
def test_masked_kd_loss_matches_numpy(impl, rng):
    """alpha * mean T^2 KL + (1 - alpha) * mean CE over the weighted tokens, CE on labelled rows only, under jit"""
    for alpha, T in [(0.5, 2.0), (0.2, 1.0), (1.0, 3.0)]:
        zs, zt, targets, weights, labelled = _kd_inputs(rng)
        out = _masked_kd(impl, alpha, T)(_f32(zs), _f32(zt), jnp.asarray(targets), jnp.asarray(weights),
                                         jnp.asarray(labelled))
        assert isinstance(out, tuple) and len(out) == 2, "return a tuple (loss, token_count)"
        want_loss, want_count = _kd_loss_ref(zs, zt, targets, weights, labelled, alpha, T)
        np.testing.assert_allclose(float(out[1]), want_count, err_msg="token_count is the sum of the weights")
        np.testing.assert_allclose(float(out[0]), want_loss, rtol=2e-5,
                                   err_msg=f"alpha={alpha}, T={T}: both terms are means over the weighted tokens")


@graded("masked_kd_loss")
def test_masked_kd_loss_ignores_masked_tokens(impl, rng):
    """changing the logits or targets at weight-0 positions changes neither the loss nor any gradient there"""
    zs, zt, targets, weights, labelled = _kd_inputs(rng, B=3, T=9)
    fn = _masked_kd(impl, 0.5, 2.0)
    args = lambda s, t, y: (_f32(s), _f32(t), jnp.asarray(y), jnp.asarray(weights), jnp.asarray(labelled))
    masked = (weights == 0)[..., None]
    noisy_s = np.where(masked, _logits(rng, zs.shape, 30.0), zs)
    noisy_t = np.where(masked, _logits(rng, zt.shape, 30.0), zt)
    noisy_y = np.where(weights == 0, rng.integers(0, zs.shape[-1], size=targets.shape), targets).astype(np.int32)
    np.testing.assert_allclose(float(fn(*args(noisy_s, noisy_t, noisy_y))[0]), float(fn(*args(zs, zt, targets))[0]),
                               rtol=1e-6, err_msg="padding and prompt positions must not change the loss")
    grad = jax.jit(jax.grad(lambda s: impl.masked_kd_loss(s, *args(zs, zt, targets)[1:], alpha=0.5,
                                                          temperature=2.0)[0]))(_f32(zs))
    assert float(jnp.max(jnp.abs(jnp.where(masked, grad, 0.0)))) == 0.0, "weight-0 positions must get no gradient"


@graded("masked_kd_loss")
def test_masked_kd_loss_no_ce_on_unlabelled_rows(impl, rng):
    """with alpha = 0 an unlabelled row (the student's own sample) gets no gradient; labelled rows get plain CE"""
    zs, zt, targets, weights, _ = _kd_inputs(rng, B=4, T=6)
    labelled = np.array([1, 0, 1, 0], np.float32)
    weights[:, 0] = 1.0  # every row has a token to train
    grad = jax.jit(jax.grad(lambda s: impl.masked_kd_loss(s, _f32(zt), jnp.asarray(targets), jnp.asarray(weights),
                                                          jnp.asarray(labelled), alpha=0.0, temperature=2.0)[0]))(_f32(zs))
    assert float(jnp.max(jnp.abs(grad[labelled == 0]))) == 0.0, "no CE on rows whose tokens are not ground truth"
    assert float(jnp.max(jnp.abs(grad[labelled == 1]))) > 0.0, "labelled rows train on the CE term"


@graded("masked_kd_loss")
def test_masked_kd_loss_no_tokens(impl, rng):
    """all-zero weights give loss 0.0, count 0 and a zero (not NaN) gradient"""
    zs, zt, targets, weights, labelled = _kd_inputs(rng)
    zeros = jnp.zeros(weights.shape, jnp.float32)
    loss, count = _masked_kd(impl, 0.5, 2.0)(_f32(zs), _f32(zt), jnp.asarray(targets), zeros, jnp.asarray(labelled))
    assert float(loss) == 0.0 and float(count) == 0.0, f"expected (0.0, 0.0), got ({float(loss)}, {float(count)})"
    grad = jax.jit(jax.grad(lambda s: impl.masked_kd_loss(s, _f32(zt), jnp.asarray(targets), zeros,
                                                          jnp.asarray(labelled), alpha=0.5, temperature=2.0)[0]))(_f32(zs))
    assert np.all(np.asarray(grad) == 0.0), "the gradient of an empty batch must be exactly zero (no NaN)"


# ----------------------------------------------------------------------------- 3. top-k KD with the tail mass


def _top_k_cache(zt, k, T):
    """(ids, raw teacher logits at ids, log Z_T = logsumexp(z_t / T)) as the cache of the exercise stores them."""
    zt64 = np.asarray(zt, np.float64)
    ids = np.argsort(-zt64, axis=-1, kind="stable")[..., :k].astype(np.int32)
    values = np.take_along_axis(zt, ids, -1).astype(np.float32)
    scaled = zt64 / T
    top = scaled.max(-1, keepdims=True)
    log_z = (top + np.log(np.exp(scaled - top).sum(-1, keepdims=True)))[..., 0].astype(np.float32)
    return ids, values, log_z


def _top_k_kd_ref(zs, ids, values, log_z, T, floor=1e-12):
    def with_tail(log_probs):
        tail = np.maximum(1.0 - np.exp(log_probs).sum(-1, keepdims=True), floor)
        return np.concatenate([log_probs, np.log(tail)], -1)

    teacher = with_tail(np.asarray(values, np.float64) / T - np.asarray(log_z, np.float64)[..., None])
    student = with_tail(np.take_along_axis(_log_softmax(zs, T), ids, -1))
    return T ** 2 * _kl_ref(teacher, student)


def _top_k_jit(impl, T):
    return jax.jit(partial(impl.top_k_kd, temperature=T))


@graded("top_k_kd", reference=True)
def test_top_k_kd_matches_numpy(impl, rng):
    """T^2 * KL over the k cached ids plus one bucket for the rest, matches numpy for several k and T, under jit"""
    for shape, k, T in [((2, 5, 16), 4, 2.0), ((3, 3, 29), 7, 1.0), ((4, 12), 1, 3.0)]:
        zs, zt = _logits(rng, shape), _logits(rng, shape)
        ids, values, log_z = _top_k_cache(zt, k, T)
        got = _top_k_jit(impl, T)(_f32(zs), jnp.asarray(ids), _f32(values), _f32(log_z))
        assert np.shape(got) == shape[:-1], f"one value per position: shape {shape[:-1]}, got {np.shape(got)}"
        np.testing.assert_allclose(np.asarray(got), _top_k_kd_ref(zs, ids, values, log_z, T), rtol=1e-4, atol=1e-5,
                                   err_msg=f"k={k}, T={T}: is the rest bucket there, for both models?")


@graded("top_k_kd")
def test_top_k_kd_with_every_id_is_full_kd(impl, rng):
    """with k = V the rest bucket is empty and the loss (and its gradient) equals full softened KL, no NaN"""
    zs, zt = _logits(rng, (3, 4, 10)), _logits(rng, (3, 4, 10))
    ids, values, log_z = _top_k_cache(zt, 10, 2.0)
    value, grad = jax.jit(jax.value_and_grad(lambda s: impl.top_k_kd(s, jnp.asarray(ids), _f32(values), _f32(log_z),
                                                                     temperature=2.0).sum()))(_f32(zs))
    np.testing.assert_allclose(float(value), _softened_kl_ref(zs, zt, 2.0).sum(), rtol=1e-4,
                               err_msg="k = V must give exactly full KD")
    assert np.all(np.isfinite(np.asarray(grad))), "the gradient has NaN: an empty rest bucket must be skipped"
    full = jax.grad(lambda s: (2.0 ** 2 * jnp.sum(jax.nn.softmax(_f32(zt) / 2) * (
        jax.nn.log_softmax(_f32(zt) / 2) - jax.nn.log_softmax(s / 2)))))(_f32(zs))
    np.testing.assert_allclose(np.asarray(grad), np.asarray(full), rtol=1e-3, atol=1e-5)


@graded("top_k_kd")
def test_top_k_kd_is_a_lower_bound(impl, rng):
    """merging the tail into one bucket never increases the divergence: top-k KD <= full KD, and grows with k"""
    zs, zt = _logits(rng, (5, 24)), _logits(rng, (5, 24))
    full = _softened_kl_ref(zs, zt, 2.0)
    previous = np.zeros(5)
    for k in (2, 6, 12):
        ids, values, log_z = _top_k_cache(zt, k, 2.0)
        got = np.asarray(_top_k_jit(impl, 2.0)(_f32(zs), jnp.asarray(ids), _f32(values), _f32(log_z)))
        assert np.all(got <= full + 1e-4), f"k={k}: top-k KD must not exceed full KD"
        assert np.all(got >= previous - 1e-4), f"k={k}: more cached ids must not lower the divergence"
        previous = got


# ----------------------------------------------------------------------------- 4. attention transfer


def _attention_maps(rng, B, N, T, scale=1.5):
    """Causal attention probabilities [B, N, T, T] (zeros above the diagonal)."""
    scores = rng.normal(size=(B, N, T, T)) * scale
    causal = np.tril(np.ones((T, T), bool))
    scores = np.where(causal, scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


def _attention_ref(teacher, student, weights):
    B, Nt, T, S = teacher.shape
    Ns = student.shape[1]
    grouped = np.asarray(teacher, np.float64).reshape(B, Ns, Nt // Ns, T, S).mean(2)
    q = np.asarray(student, np.float64)
    kl = np.where(grouped > 0, grouped * (np.log(np.where(grouped > 0, grouped, 1.0))
                                          - np.log(np.where(grouped > 0, q, 1.0))), 0.0).sum(-1).mean(1)  # [B, T]
    w = weights.astype(np.float64)
    return float((kl * w).sum() / max(w.sum(), 1.0)), float(w.sum())


def _attention_jit(impl):
    return jax.jit(impl.attention_transfer_loss)


@graded("attention_transfer_loss", reference=True)
def test_attention_transfer_matches_numpy(impl, rng):
    """grouped teacher heads vs each student head, KL per query row, weighted mean over rows; several head counts"""
    for B, Nt, Ns, T in [(2, 4, 2, 6), (3, 3, 3, 5), (2, 8, 2, 7), (1, 4, 1, 4)]:
        teacher, student = _attention_maps(rng, B, Nt, T), _attention_maps(rng, B, Ns, T)
        weights = _ragged_weights(rng, B, T)
        out = _attention_jit(impl)(_f32(teacher), _f32(student), jnp.asarray(weights))
        assert isinstance(out, tuple) and len(out) == 2, "return a tuple (loss, row_count)"
        want, count = _attention_ref(teacher, student, weights)
        np.testing.assert_allclose(float(out[1]), count, err_msg="row_count is the sum of the weights")
        np.testing.assert_allclose(float(out[0]), want, rtol=2e-5, atol=1e-6,
                                   err_msg=f"{Nt} teacher heads -> {Ns} student heads: average each group of "
                                           f"{Nt // Ns} teacher heads, KL(teacher || student) per row")


@graded("attention_transfer_loss")
def test_attention_transfer_zero_for_matching_maps(impl, rng):
    """0 when each student head equals the mean of its teacher group (the teacher's heads need not be equal)"""
    teacher = _attention_maps(rng, 2, 6, 5)
    student = teacher.reshape(2, 3, 2, 5, 5).mean(2)
    weights = np.ones((2, 5), np.float32)
    loss, _ = _attention_jit(impl)(_f32(teacher), _f32(student), jnp.asarray(weights))
    assert abs(float(loss)) < 1e-6, f"matching grouped maps must give 0, got {float(loss)}"
    other, _ = _attention_jit(impl)(_f32(teacher), _f32(_attention_maps(rng, 2, 3, 5)), jnp.asarray(weights))
    assert float(other) > 1e-3, "different maps must give a positive loss"


@graded("attention_transfer_loss")
def test_attention_transfer_masked_rows_and_keys(impl, rng):
    """masked keys (probability 0) and weight-0 rows give a finite loss, finite gradients, none on masked rows"""
    teacher, student = _attention_maps(rng, 2, 4, 6), _attention_maps(rng, 2, 2, 6)
    weights = _ragged_weights(rng, 2, 6)
    grad = jax.jit(jax.grad(lambda s: impl.attention_transfer_loss(_f32(teacher), s, jnp.asarray(weights))[0]))(
        _f32(student))
    grad = np.asarray(grad)
    assert np.all(np.isfinite(grad)), "NaN in the gradient: keep log() away from the zero (masked) probabilities"
    assert np.all(grad[np.broadcast_to((weights == 0)[:, None, :, None], grad.shape)] == 0.0), \
        "weight-0 query rows must get no gradient"
