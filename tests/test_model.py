"""The decoder's pieces against closed forms, and its invariants (padding, packing, KV cache)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite.models import KVCache, ModelConfig, RopeScaling, Transformer, get_config
from tunix_lite.models import transformer as T


def small_config(**changes) -> ModelConfig:
    """Gemma 3 layout at toy size: 6 layers = 5 local + 1 global, window 4, MQA."""
    base = dict(vocab_size=97, embed_dim=32, num_layers=6, num_heads=4, num_kv_heads=1, head_dim=8, mlp_dim=48,
                sliding_window=4, query_pre_attn_scalar=8)
    return get_config("tiny").replace(**(base | changes))


def random_model(config: ModelConfig, seed: int = 0) -> Transformer:
    model = Transformer(config, rngs=nnx.Rngs(seed))
    # Perturb the norms too, so the (1 + w) convention is exercised, not just w = 0.
    rng = np.random.default_rng(seed)
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    for path, var in flat:
        if path[-1] == "scale":
            var.set_value(jnp.asarray(rng.normal(size=var.shape) * 0.3 + (0.0 if config.norm_plus_one else 1.0),
                                      jnp.float32))
    nnx.update(model, nnx.from_flat_state(flat))
    return model


# Eager calls compile every primitive separately; one jit per test keeps the suite fast.
forward = nnx.jit(lambda model, tokens, positions=None, segment_ids=None: model(tokens, positions,
                                                                                segment_ids=segment_ids))
decode = nnx.jit(lambda model, tokens, positions, cache: model.decode(tokens, positions, cache))


def test_rms_norm_closed_form():
    x = np.random.default_rng(0).normal(size=(3, 5, 16)).astype(np.float32)
    scale = np.random.default_rng(1).normal(size=16).astype(np.float32)
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(T.rms_norm(jnp.asarray(x), jnp.asarray(scale)), expected, rtol=1e-5, atol=1e-6)


def test_rope_is_a_rotation_with_relative_dot_products():
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32) for _ in range(2))

    def rotated_dot(m, n):
        qm = T.apply_rope(q, jnp.array([[m]]), 10_000.0)
        kn = T.apply_rope(k, jnp.array([[n]]), 10_000.0)
        return float(jnp.sum(qm * kn))

    assert jnp.linalg.norm(T.apply_rope(q, jnp.array([[37]]))) == pytest.approx(float(jnp.linalg.norm(q)), rel=1e-5)
    assert rotated_dot(10, 3) == pytest.approx(rotated_dot(107, 100), rel=1e-4, abs=1e-5)
    assert T.apply_rope(q, jnp.array([[0]])) == pytest.approx(np.asarray(q))


def test_rope_pairs_i_with_i_plus_half():
    x = jnp.zeros((1, 1, 1, 4)).at[..., 0].set(1.0)  # unit vector in the first pair's first slot
    out = T.apply_rope(x, jnp.array([[1]]), base=10_000.0)  # frequency of pair 0 is 1: angle 1 rad
    np.testing.assert_allclose(out[0, 0, 0], [math.cos(1), 0, math.sin(1), 0], atol=1e-6)


def test_llama3_rope_scaling_against_formula():
    s = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=64)
    inv = np.asarray(T.rope_inverse_frequencies(32, 500_000.0, s))
    base = 1.0 / 500_000.0 ** (np.arange(0, 32, 2) / 32)
    wavelen = 2 * np.pi / base
    for got, f, w in zip(inv, base, wavelen):
        if w < 64 / 4:
            assert got == pytest.approx(f, rel=1e-6)  # high frequency: untouched
        elif w > 64 / 1:
            assert got == pytest.approx(f / 8, rel=1e-6)  # low frequency: divided by factor
        else:
            smooth = (64 / w - 1) / (4 - 1)
            assert got == pytest.approx((1 - smooth) * f / 8 + smooth * f, rel=1e-5)


def test_attention_mask_causal_window_padding_segments():
    q_pos = jnp.array([[-1, 0, 1, 2, 3]])  # a left-padded row
    mask = np.asarray(T.attention_mask(q_pos, q_pos, sliding_window=2))[0]
    expected = np.array([
        [0, 0, 0, 0, 0],  # a padding query sees nothing
        [0, 1, 0, 0, 0],
        [0, 1, 1, 0, 0],
        [0, 0, 1, 1, 0],  # window 2: itself and one back
        [0, 0, 0, 1, 1],
    ], bool)
    np.testing.assert_array_equal(mask, expected)
    seg = jnp.array([[0, 0, 0, 1, 1]])
    pos = jnp.array([[0, 1, 2, 0, 1]])
    packed = np.asarray(T.attention_mask(pos, pos, q_segment=seg, k_segment=seg))[0]
    assert packed[3, :3].sum() == 0 and packed[4, 3:].all()
    seg = jnp.array([[T.SHARED_PREFIX, T.SHARED_PREFIX, 1, 1, 2]])  # a prompt, then two continuations of it
    pos = jnp.array([[0, 1, 2, 3, 2]])
    shared = np.asarray(T.attention_mask(pos, pos, q_segment=seg, k_segment=seg))[0]
    np.testing.assert_array_equal(shared[4], [1, 1, 0, 0, 1])  # the second continuation skips the first
    assert shared[:2, 2:].sum() == 0 and shared[3, :4].all()


def test_gqa_equals_repeated_kv_multihead():
    rng = np.random.default_rng(0)
    B, Tq, N, K, H = 2, 5, 6, 2, 4
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in [(B, Tq, N, H), (B, Tq, K, H), (B, Tq, K, H)])
    pos = jnp.broadcast_to(jnp.arange(Tq), (B, Tq))
    mask = np.asarray(T.attention_mask(pos, pos))
    out = np.asarray(T.attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask), 0.5))
    kr, vr = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)  # head n uses kv head n // (N/K)
    scores = np.einsum("btnh,bsnh->bnts", q, kr) * 0.5
    scores = np.where(mask[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, np.einsum("bnts,bsnh->btnh", probs, vr), rtol=1e-5, atol=1e-6)


def test_layer_pattern_and_config_errors():
    c = get_config("gemma3-270m")
    assert [i for i in range(c.num_layers) if c.is_global(i)] == [5, 11, 17]
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        c.replace(num_heads=3, num_kv_heads=2)
    with pytest.raises(KeyError, match="choose one of: tiny, gemma3-270m"):
        get_config("gpt5")


@pytest.mark.parametrize("family", ["gemma3", "llama3", "qwen3"])
def test_left_padding_does_not_change_logits(family):
    overrides = {"llama3": dict(family="llama3", activation="silu", norm_plus_one=False, qk_norm=False,
                                sandwich_norm=False, scale_embeddings=False, sliding_window=None,
                                sliding_window_pattern=None, query_pre_attn_scalar=None),
                 "qwen3": dict(family="qwen3", activation="silu", norm_plus_one=False, qk_norm=True,
                               sandwich_norm=False, scale_embeddings=False, sliding_window=None,
                               sliding_window_pattern=None)}.get(family, {})
    model = random_model(small_config(**overrides))
    tokens = jax.random.randint(jax.random.key(1), (1, 9), 0, 97)
    plain = forward(model, tokens)
    padded = jnp.concatenate([jnp.zeros((1, 3), tokens.dtype), tokens], axis=1)
    positions = jnp.concatenate([jnp.full((1, 3), -1), jnp.arange(9)[None]], axis=1)
    np.testing.assert_allclose(forward(model, padded, positions)[:, 3:], plain, rtol=1e-5, atol=1e-4)


def test_packed_sequences_equal_separate_runs():
    model = random_model(small_config())
    a, b = jax.random.randint(jax.random.key(2), (1, 7), 0, 97), jax.random.randint(jax.random.key(3), (1, 5), 0, 97)
    packed = jnp.concatenate([a, b], axis=1)
    positions = jnp.concatenate([jnp.arange(7), jnp.arange(5)])[None]
    segments = jnp.array([[0] * 7 + [1] * 5])
    out = forward(model, packed, positions, segments)
    np.testing.assert_allclose(out[:, :7], forward(model, a), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out[:, 7:], forward(model, b), rtol=1e-5, atol=1e-4)


def test_jax_fused_attention_equals_einsum_attention_with_padding_segments_and_window():
    """set_training_options(attention="xla") runs jax.nn.dot_product_attention under the same mask (the route
    "cudnn" takes on a GPU): logits and gradients equal this file's attention on left padding, packed
    segments and a sliding window."""
    model = random_model(small_config())
    tokens = jax.random.randint(jax.random.key(4), (2, 12), 0, 97)
    positions = jnp.array([[-1, -1] + list(range(10)), list(range(7)) + list(range(5))])
    segments = jnp.array([[0] * 12, [0] * 7 + [1] * 5])

    def loss(model):
        logits = model(tokens, positions, segment_ids=segments)
        return jnp.sum(jnp.where((positions >= 0)[..., None], logits, 0.0) ** 2)

    reference, reference_grads = nnx.jit(nnx.value_and_grad(loss))(model)
    T.set_training_options(model, attention="xla")
    value, grads = nnx.jit(nnx.value_and_grad(loss))(model)
    np.testing.assert_allclose(value, reference, rtol=1e-5)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(reference_grads)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))
    with pytest.raises(ValueError, match="attention must be one of"):
        T.set_training_options(model, attention="flash")


def test_kv_cache_decode_equals_full_recompute_past_the_window():
    """Prefill 6 tokens then decode 14 one by one (window 4): every step's logits match a full pass."""
    config = small_config()
    model = random_model(config)
    B, L, P = 2, 20, 6
    tokens = jax.random.randint(jax.random.key(4), (B, L), 0, config.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(L), (B, L))
    full = forward(model, tokens, positions)
    cache = KVCache.init(config, B, 24)
    logits, cache = decode(model, tokens[:, :P], positions[:, :P], cache)
    steps = [logits]
    for t in range(P, L):
        logits, cache = decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
        steps.append(logits)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-4)
    assert int(cache.end) == L


def test_hidden_states_and_features():
    """hidden: the embedding output, then each block's output; features: the final-normed stream the lm head
    reads, so logits == model.logits(features)."""
    model = random_model(small_config())
    tokens = jnp.ones((1, 3), jnp.int32)
    logits, hidden = model(tokens, return_hidden=True)
    assert len(hidden) == 7 and hidden[0].shape == (1, 3, 32) and logits.shape == (1, 3, 97)
    np.testing.assert_allclose(hidden[0], model._embed(tokens))
    features = model.features(tokens)
    np.testing.assert_allclose(features, model.final_norm(hidden[-1]))
    np.testing.assert_array_equal(model.logits(features), logits)


def test_scalar_head_reads_the_features_and_picks_each_rows_last_token():
    from tunix_lite.models.heads import ScalarHead

    critic = ScalarHead(random_model(small_config(num_layers=1)), rngs=nnx.Rngs(0))
    tokens = jnp.array([[5, 6, 7, 0], [5, 6, 0, 0]])
    positions = jnp.array([[0, 1, 2, -1], [0, 1, -1, -1]])
    assert critic(tokens, positions).shape == (2, 4) and not jnp.any(critic(tokens, positions))  # zero init
    critic.head.bias[...] = jnp.ones(1)
    critic.head.kernel[...] = jax.random.normal(jax.random.key(0), (32, 1))
    values = critic(tokens, positions)
    np.testing.assert_allclose(critic.last(tokens, positions), [values[0, 2], values[1, 1]])
    grads = nnx.grad(lambda m: m.last(tokens, positions).sum(), argnums=nnx.DiffState(0, nnx.PathContains("head")))(critic)
    assert {path for path, _ in nnx.to_flat_state(grads)} == {("head", "bias"), ("head", "kernel")}
