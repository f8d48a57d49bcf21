"""Distillation losses: invariants (teacher == student gives 0, T^2 keeps the gradient's scale, masked tokens do
nothing, top-k with k = V is full KD), a float64 reference for each divergence, the chunked path equal to the
plain one, attention maps from hidden states equal to what the forward pass uses."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite.distill import losses
from tunix_lite.distill.objective import DistillLoss
from tunix_lite.distill.student import WithProjection, blocks_kept, keep_layers, prune_blocks, uniform_layer_map
from tunix_lite.models import Transformer, set_training_options
from tunix_lite.models.transformer import attention, attention_mask

from test_model import small_config

KINDS = ("forward", "reverse", "jsd")


def logits_pair(seed=0, shape=(3, 7, 13), scale=2.0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.normal(size=shape) * scale, jnp.float32),
            jnp.asarray(rng.normal(size=shape) * scale, jnp.float32))


def ragged_weights(seed, B, T):
    rng = np.random.default_rng(seed)
    start, end = rng.integers(0, T // 2, B), rng.integers(T // 2, T + 1, B)
    t = np.arange(T)[None]
    return jnp.asarray(((t >= start[:, None]) & (t < end[:, None])).astype(np.float32))


def reference_divergence(zt, zs, T, kind, beta=0.5):
    """T^2 * D in float64 numpy; the jsd follows TRL's generalized_jsd_loss (mixture beta * teacher)."""
    def log_softmax(z):
        z = np.asarray(z, np.float64) / T
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    lt, ls = log_softmax(zt), log_softmax(zs)
    kl = lambda a, b: (np.exp(a) * (a - b)).sum(-1)
    if kind == "forward":
        d = kl(lt, ls)
    elif kind == "reverse":
        d = kl(ls, lt)
    else:
        lm = np.log(beta * np.exp(lt) + (1 - beta) * np.exp(ls))
        d = beta * kl(lt, lm) + (1 - beta) * kl(ls, lm)
    return T ** 2 * d


@pytest.mark.parametrize("kind", KINDS)
def test_each_divergence_matches_a_float64_reference(kind):
    zs, zt = logits_pair(1)
    for T in (1.0, 2.5):
        got = jax.jit(partial(losses.kd_per_token, temperature=T, kind=kind, beta=0.3))(zs, zt)
        want = reference_divergence(zt, zs, T, kind, beta=0.3)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_teacher_equal_to_student_gives_zero_loss_and_zero_gradient(kind):
    z, _ = logits_pair(2, scale=4.0)
    term = lambda s: losses.kd_per_token(s, z, temperature=2.0, kind=kind).sum()
    value, grad = jax.jit(jax.value_and_grad(term))(z)
    assert float(value) == pytest.approx(0.0, abs=1e-5)
    assert float(jnp.max(jnp.abs(grad))) < 1e-6


def test_t_squared_keeps_the_gradient_scale_across_temperatures():
    """|d(T^2 KL)/dz_s| settles to a constant as T grows; without T^2 it falls like 1/T^2 (Hinton et al.)."""
    zs, zt = logits_pair(3, shape=(64, 50), scale=1.0)

    def grad_norm(T, scaled):
        f = lambda s: jnp.mean(losses.kd_per_token(s, zt, temperature=T) / (1.0 if scaled else T ** 2))
        return float(jnp.linalg.norm(jax.jit(jax.grad(f))(zs)))

    temperatures = (2.0, 4.0, 8.0, 16.0)
    scaled = [grad_norm(T, True) for T in temperatures]
    unscaled = [grad_norm(T, False) for T in temperatures]
    assert max(scaled) / min(scaled) < 1.3, scaled
    assert unscaled[0] / unscaled[-1] > 40, unscaled  # 1/T^2: (16/2)^2 = 64 in the limit


def test_masked_positions_change_nothing_and_are_not_counted():
    zs, zt = logits_pair(4)
    targets = jnp.asarray(np.random.default_rng(4).integers(0, 13, zs.shape[:2]), jnp.int32)
    weights = ragged_weights(4, *zs.shape[:2])
    kd_loss = jax.jit(partial(losses.kd_loss, alpha=0.3, temperature=2.0))
    loss, metrics = kd_loss(zs, zt, targets, weights)
    masked = weights[..., None] == 0
    noise = jnp.asarray(np.random.default_rng(5).normal(size=zs.shape) * 50, jnp.float32)
    loss2, _ = kd_loss(jnp.where(masked, noise, zs), jnp.where(masked, -noise, zt), jnp.where(weights == 0, 0, targets),
                       weights)
    assert float(loss2) == pytest.approx(float(loss), rel=1e-6)
    assert float(metrics["count"]) == float(weights.sum())
    grad = jax.jit(jax.grad(lambda s: kd_loss(s, zt, targets, weights)[0]))(zs)
    assert float(jnp.max(jnp.abs(jnp.where(masked, grad, 0.0)))) == 0.0


def test_alpha_mixes_the_soft_term_and_the_hard_term():
    zs, zt = logits_pair(6)
    targets = jnp.asarray(np.random.default_rng(6).integers(0, 13, zs.shape[:2]), jnp.int32)
    weights = ragged_weights(6, *zs.shape[:2])
    _, m = jax.jit(partial(losses.kd_loss, alpha=0.25, temperature=3.0))(zs, zt, targets, weights)
    assert float(m["loss"]) == pytest.approx(0.25 * float(m["kd"]) + 0.75 * float(m["ce"]), rel=1e-6)
    ce = -jax.nn.log_softmax(zs)[np.arange(3)[:, None], np.arange(7)[None], targets]
    assert float(m["ce"]) == pytest.approx(float((ce * weights).sum() / weights.sum()), rel=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_top_k_with_k_equal_to_the_vocabulary_is_full_kd(kind):
    zs, zt = logits_pair(7)
    ids, log_probs, rest = jax.jit(losses.top_k_distribution, static_argnums=(1, 2))(zt, zt.shape[-1], 2.0)
    assert float(jnp.max(rest)) == 0.0
    full = jax.jit(jax.value_and_grad(lambda s: losses.kd_per_token(s, zt, temperature=2.0, kind=kind).sum()))
    cached = jax.jit(jax.value_and_grad(lambda s: losses.top_k_kd_per_token(
        s, ids, log_probs, rest, temperature=2.0, kind=kind).sum()))
    (full_value, full_grad), (value, grad) = full(zs), cached(zs)
    assert float(value) == pytest.approx(float(full_value), rel=1e-5)
    np.testing.assert_allclose(grad, full_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_top_k_keeps_the_tail_mass_and_bounds_full_kd_from_below(kind):
    zs, zt = logits_pair(8)
    ids, log_probs, rest = jax.jit(losses.top_k_distribution, static_argnums=(1, 2))(zt, 4, 2.0)
    p = np.asarray(jax.nn.softmax(zt / 2.0))
    picked = np.take_along_axis(p, np.asarray(ids), -1)
    np.testing.assert_allclose(rest, 1.0 - picked.sum(-1), atol=1e-6)
    np.testing.assert_allclose(np.exp(log_probs), picked, rtol=1e-5)
    assert np.all(picked.min(-1) >= np.sort(p, -1)[..., -4] - 1e-7)  # the k most likely ids
    full = jax.jit(partial(losses.kd_per_token, temperature=2.0, kind=kind))(zs, zt)
    values, grad = jax.jit(lambda s: (losses.top_k_kd_per_token(s, ids, log_probs, rest, temperature=2.0, kind=kind),
                                      jax.grad(lambda x: losses.top_k_kd_per_token(
                                          x, ids, log_probs, rest, temperature=2.0, kind=kind).sum())(s)))(zs)
    assert np.all(np.asarray(values) <= np.asarray(full) + 1e-5)
    assert np.all(np.isfinite(grad))


def test_feature_distance_ignores_scale_and_sees_direction():
    rng = np.random.default_rng(9)
    h = jnp.asarray(rng.normal(size=(4, 16)), jnp.float32)
    for kind in ("mse", "cosine"):
        distance = jax.jit(partial(losses.feature_distance, kind=kind))
        assert float(jnp.max(distance(3.0 * h, h))) < 1e-5
        assert float(jnp.min(distance(-h, h))) > 1.0


# ----------------------------------------------------------------------------- on the models


def models(seed=0):
    config = small_config(num_layers=3, sliding_window=None, sliding_window_pattern=None)
    teacher = Transformer(config, rngs=nnx.Rngs(seed))
    student = keep_layers(Transformer(config, rngs=nnx.Rngs(seed + 1)), [0, 2])
    teacher.eval()
    return teacher, student


def token_batch(seed=0, B=3, T=12, vocab=97):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (B, T + 1)).astype(np.int32)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.asarray(ragged_weights(seed, B, T)),
            "positions": np.tile(np.arange(T, dtype=np.int32), (B, 1)), "segment_ids": np.ones((B, T), np.int32)}


def test_attention_weights_from_a_hidden_state_are_what_the_layer_uses():
    config = small_config(num_layers=1, num_kv_heads=2)
    model = Transformer(config, rngs=nnx.Rngs(0))
    batch = token_batch(1)

    @nnx.jit
    def both(model, inputs, positions):
        _, hidden = model.features(inputs, positions, return_hidden=True)
        block = model.layers[0]
        weights = block.attention_weights(hidden[0], positions)  # [B, N, T, T]
        q, k, v = block.attn.project(block.input_norm(hidden[0]), positions)
        mask = attention_mask(positions, positions, sliding_window=config.sliding_window)
        v_per_head = jnp.repeat(v, config.num_heads // config.num_kv_heads, axis=2)
        return weights, jnp.einsum("bnts,bsnh->btnh", weights, v_per_head), attention(q, k, v, mask, config.attn_scale)

    weights, got, want = both(model, batch["inputs"], batch["positions"])
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_identical_models_give_zero_kd_attention_and_feature_losses():
    teacher, _ = models()
    batch = token_batch(2)
    loss_fn = DistillLoss(alpha=1.0, attention_weight=1.0, feature_weight=1.0,
                          layer_map=tuple((i, i) for i in range(3)))
    same = WithProjection(nnx.clone(teacher), teacher_dim=teacher.config.embed_dim, pairs=3, rngs=nnx.Rngs(0))
    (loss, metrics), grads = nnx.jit(nnx.value_and_grad(lambda m, t: loss_fn(m, batch, t), has_aux=True))(same, teacher)
    assert float(metrics["kd"]) == pytest.approx(0.0, abs=1e-6)
    assert float(metrics["attention"]) == pytest.approx(0.0, abs=1e-6)
    assert float(metrics["feature"]) == pytest.approx(0.0, abs=1e-6)
    assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads)) < 1e-5
    _, student = models()
    _, other = nnx.jit(DistillLoss(attention_weight=1.0, layer_map=((0, 0), (1, 2))))(student, batch, teacher)
    assert float(other["attention"]) > 1e-3 and float(other["kd"]) > 1e-3


def test_chunked_vocabulary_projection_gives_the_same_loss_and_gradients():
    teacher, student = models()
    batch = token_batch(3)
    loss_fn = DistillLoss(alpha=0.7, temperature=3.0, divergence="jsd")
    value_and_grad = nnx.jit(nnx.value_and_grad(lambda m, t: loss_fn(m, batch, t)[0]))
    loss, grads = value_and_grad(student, teacher)
    set_training_options(student, logits_chunk=5)
    set_training_options(teacher, logits_chunk=5)
    jaxpr = str(jax.make_jaxpr(lambda: loss_fn(student, batch, teacher)[0])())
    assert "checkpoint" in jaxpr or "remat" in jaxpr
    chunked_loss, chunked_grads = value_and_grad(student, teacher)
    assert float(chunked_loss) == pytest.approx(float(loss), rel=1e-6)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(chunked_grads)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_a_cache_with_k_equal_to_the_vocabulary_trains_like_the_online_teacher():
    from tunix_lite.distill.cache import CACHE_KEYS

    teacher, student = models()
    batch = token_batch(4)
    loss_fn = DistillLoss(alpha=0.6, temperature=2.0)
    top_k = nnx.jit(lambda t, x, p: losses.top_k_distribution(t(x, p), t.config.vocab_size, 2.0))
    cached = batch | dict(zip(CACHE_KEYS, top_k(teacher, batch["inputs"], batch["positions"])))
    value_and_grad = nnx.jit(nnx.value_and_grad(lambda m, b, t: loss_fn(m, b, t)[0]))
    online, online_grads = value_and_grad(student, batch, teacher)
    offline, offline_grads = value_and_grad(student, cached, None)
    assert float(offline) == pytest.approx(float(online), rel=1e-5)
    for a, b in zip(jax.tree.leaves(online_grads), jax.tree.leaves(offline_grads)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6)


def test_keep_layers_and_the_uniform_layer_map():
    assert uniform_layer_map(2, 6) == {0: 2, 1: 5}
    assert uniform_layer_map(3, 3) == {0: 0, 1: 1, 2: 2}
    full = Transformer(small_config(num_layers=3), rngs=nnx.Rngs(0))
    block2 = nnx.state(full.layers[2], nnx.Param)
    cut = keep_layers(full, [0, 2])
    assert cut.config.num_layers == 2 and len(cut.layers) == 2
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), nnx.state(cut.layers[1], nnx.Param), block2))
    with pytest.raises(ValueError, match=r"distinct block indices in \[0, 2\)"):
        keep_layers(cut, [0, 2])


def test_prune_blocks_removes_the_blocks_the_model_does_not_need_and_leaves_the_model_whole():
    """Blocks 1 and 3 of a 5-block model are made the identity (zero output projections: the residual stream passes
    through), so a 4- and then a 3-block cut without them computes exactly what the whole model does (every block
    attends globally: a cut changes no block's window). Greedy pruning against "distance to the whole model's
    logits" must find them, and give the model back intact."""
    model = Transformer(small_config(num_layers=5, sliding_window=None, sliding_window_pattern=None),
                        rngs=nnx.Rngs(0))
    for block in (model.layers[1], model.layers[3]):
        block.attn.o_proj.kernel[...] = jnp.zeros_like(block.attn.o_proj.kernel[...])
        block.mlp.down_proj.kernel[...] = jnp.zeros_like(block.mlp.down_proj.kernel[...])
    tokens = token_batch(B=2, T=10)
    whole = model(tokens["inputs"], tokens["positions"])
    kinds = [block.attn.is_global for block in model.layers]
    distance = lambda m: float(jnp.abs(m(tokens["inputs"], tokens["positions"]) - whole).max())

    path = prune_blocks(model, distance, keep=2)

    assert [kept for kept, _ in path[:3]] == [[0, 1, 2, 3, 4], [0, 1, 2, 4], [0, 2, 4]]  # ties: the first in order
    assert [loss for _, loss in path[:3]] == [0.0, 0.0, 0.0]
    assert len(path) == 4 and len(path[-1][0]) == 2 and path[-1][1] > 0  # a real block had to go last
    assert model.config.num_layers == 5 and [block.attn.is_global for block in model.layers] == kinds
    np.testing.assert_array_equal(model(tokens["inputs"], tokens["positions"]), whole)
    with pytest.raises(ValueError, match=r"keep must be in \[1, 5\]"):
        prune_blocks(model, distance, keep=0)

    windowed = Transformer(small_config(num_layers=5, sliding_window_pattern=3), rngs=nnx.Rngs(1))
    kinds = [block.attn.is_global for block in windowed.layers]  # block 2 global
    with blocks_kept(windowed, [0, 2, 4]):
        assert [block.attn.is_global for block in windowed.layers] == [False, False, True]  # by the new index
    assert windowed.config.num_layers == 5 and [block.attn.is_global for block in windowed.layers] == kinds
