"""Sampler: filters against hand-computed values, cache vs recompute, batching, stopping, compile-once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite.loading import ASSETS
from tunix_lite.models import Transformer
from tunix_lite.sampler import (Sampler, _generate_jit, first_argmax, left_pad, sample_token, top_k_filter,
                                top_p_filter)
from tunix_lite.tokenizer import Tokenizer

from test_model import random_model, small_config


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(ASSETS / "tiny" / "tokenizer.model")


@pytest.fixture(scope="module")
def sampler(tokenizer):
    """A random model over the tiny vocabulary; window 4 so generation runs past the sliding window."""
    model = random_model(small_config(vocab_size=tokenizer.vocab_size))
    return Sampler(model, tokenizer, bucket=8)


def test_sampling_draws_what_jax_random_categorical_draws():
    """sample_token takes the Gumbel-max argmax as a max then a min (first_argmax): the first index of the maximum,
    as jnp.argmax, so the same key draws the same tokens as jax.random.categorical, with -inf (filtered) logits
    and exact ties included."""
    logits = jax.random.normal(jax.random.key(0), (64, 300)) * 3
    logits = logits.at[:, 7:40].set(-jnp.inf)  # as top-k / top-p leave them
    ours = jax.jit(lambda rng: sample_token(rng, logits, 1.0, greedy=False))
    for seed in range(5):
        rng = jax.random.key(seed)
        np.testing.assert_array_equal(ours(rng), jax.random.categorical(rng, logits))
    ties = jnp.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0], [0.0, -1.0, 0.0, 4.0]])
    np.testing.assert_array_equal(first_argmax(ties), jnp.argmax(ties, axis=-1))


def test_top_k_and_top_p_filters():
    logits = jnp.log(jnp.array([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    assert np.isfinite(top_k_filter(logits, 2)).tolist() == [[True, True, False, False, False]]
    # mass before each sorted token: 0, .5, .7, .85, .95 -> p=0.7 keeps the first two, p=0.71 three
    assert np.isfinite(top_p_filter(logits, 0.7)).sum() == 2
    assert np.isfinite(top_p_filter(logits, 0.71)).sum() == 3
    assert np.isfinite(top_p_filter(logits, 1e-6)).sum() == 1  # the top token always survives


def test_sampling_follows_the_distribution():
    probs = np.array([0.6, 0.3, 0.1])
    logits = jnp.log(jnp.tile(probs, (4000, 1)))
    draws = np.asarray(sample_token(jax.random.key(0), logits, 1.0, greedy=False))
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / 4000, probs, atol=0.03)
    cold = np.asarray(sample_token(jax.random.key(0), logits, 0.05, greedy=False))
    assert (cold == 0).mean() > 0.99  # low temperature approaches greedy


def test_left_pad_positions():
    tokens, positions = left_pad([[5, 6, 7], [8]], pad_id=0, multiple=4)
    assert tokens.tolist() == [[0, 5, 6, 7], [0, 0, 0, 8]]
    assert positions.tolist() == [[-1, 0, 1, 2], [-1, -1, -1, 0]]


def test_cached_generation_equals_recompute(sampler):
    prompts = [[2, 10, 11, 12, 13, 14, 15], [2, 20, 21]]
    cached = sampler.generate(prompts, 12)
    recomputed = sampler.generate(prompts, 12, use_cache=False)
    np.testing.assert_array_equal(cached.tokens, recomputed.tokens)
    np.testing.assert_allclose(cached.logprobs, recomputed.logprobs, atol=1e-4)


def test_batch_rows_match_single_prompts(sampler):
    prompts = [[2, 10, 11, 12, 13, 14, 15], [2, 20, 21]]
    batch = sampler.generate(prompts, 10)
    for row, prompt in enumerate(prompts):
        alone = sampler.generate([prompt], 10)
        np.testing.assert_array_equal(batch.tokens[row], alone.tokens[0])


def test_logprobs_match_a_teacher_forced_pass(sampler):
    prompt = [2, 30, 31, 32]
    out = sampler.generate([prompt], 6)
    full = jnp.asarray([prompt + out.tokens[0].tolist()])
    logp = jax.nn.log_softmax(sampler.model(full), axis=-1)[0]
    expected = [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(out.tokens[0])]
    np.testing.assert_allclose(out.logprobs[0], expected, atol=1e-4)


def test_rows_stop_independently(sampler):
    prompts = [[2, 10, 11], [2, 40, 41, 42, 43]]
    free = sampler.generate(prompts, 8)
    stop = int(free.tokens[0, 2])  # make row 0's third token a stop token
    stopping = Sampler(sampler.model, sampler.tokenizer, stop_ids=[stop], bucket=8).generate(prompts, 8)
    assert stopping.lengths[0] == 3 and (stopping.tokens[0, 3:] == 0).all()
    first_stop = np.flatnonzero(free.tokens[1] == stop)
    assert stopping.lengths[1] == (first_stop[0] + 1 if first_stop.size else 8)


def test_sampling_is_seeded(sampler):
    a = sampler.generate([[2, 10]], 8, temperature=1.0, top_p=0.9, seed=1)
    b = sampler.generate([[2, 10]], 8, temperature=1.0, top_p=0.9, seed=1)
    c = sampler.generate([[2, 10]], 8, temperature=1.0, top_p=0.9, seed=2)
    assert a.tokens.tolist() == b.tokens.tolist() != c.tokens.tolist()


def test_compiles_once_per_shape(tokenizer):
    model = Transformer(small_config(vocab_size=tokenizer.vocab_size, num_layers=3), rngs=nnx.Rngs(0))  # a new shape
    sampler = Sampler(model, tokenizer, bucket=8)
    before = _generate_jit._cache_size()
    for prompt in (["a"], ["bb cc"], ["dd ee ff"]):  # different lengths, same bucket
        sampler.generate(prompt, 4)
    assert _generate_jit._cache_size() - before == 1


def test_text_prompts_and_errors(sampler):
    out = sampler.generate(["Question: 1 + 1"], 3)
    prompt = out.prompt_tokens[0]
    assert len(out.texts) == 1 and isinstance(out.texts[0], str)
    assert prompt[prompt != 0][0] == sampler.tokenizer.bos_id  # text prompts get a BOS
    with pytest.raises(ValueError, match="exceeds the model's context"):
        sampler.generate(["x"], sampler.model.config.max_seq_len)
    with pytest.raises(ValueError, match="at least one token"):
        sampler.generate([[]], 2)


@pytest.mark.parametrize("kwargs, named", [
    (dict(max_new_tokens=0), "max_new_tokens=0"), (dict(temperature=float("nan")), "temperature=nan"),
    (dict(temperature=-1.0), "temperature=-1.0"), (dict(top_p=1.5), "top_p=1.5"), (dict(top_p=float("nan")), "top_p=nan"),
    (dict(top_k=0), "top_k=0"), (dict(num_samples=0), "num_samples=0")])
def test_bad_sampling_settings_are_named(sampler, kwargs, named):
    with pytest.raises(ValueError, match="invalid sampling settings: " + named.replace("(", r"\(")):
        sampler.generate(["x"], **({"max_new_tokens": 2} | kwargs))


def test_num_samples_share_one_prefill_and_match_repeated_prompts(sampler):
    """G samples of each prompt (one prefill, its cache copied to G rows) are the rows that sampling the
    repeated prompt list gives: same tokens, same log-probs; greedy samples of a prompt are all equal."""
    prompts = [[2, 10, 11, 12, 13, 14, 15], [2, 20, 21]]
    grouped = sampler.generate(prompts, 8, num_samples=3, temperature=1.0, seed=3)
    repeated = sampler.generate([p for p in prompts for _ in range(3)], 8, temperature=1.0, seed=3)
    np.testing.assert_array_equal(grouped.tokens, repeated.tokens)
    np.testing.assert_allclose(grouped.logprobs, repeated.logprobs, atol=1e-5)
    assert grouped.tokens.shape == (6, 8) and len(set(map(tuple, grouped.tokens[:3].tolist()))) > 1
    assert [p.tolist() for p in grouped.prompts] == [p for p in prompts for _ in range(3)]
    np.testing.assert_array_equal(grouped.mask.sum(1), grouped.lengths)
    greedy = sampler.generate(prompts, 6, num_samples=2)
    np.testing.assert_array_equal(greedy.tokens[0], greedy.tokens[1])



def test_bfloat16_weights_follow_float32_and_cast_once_per_update():
    """weights_dtype="bfloat16": one cast per change of the weights (none per call), one compile across calls; on
    the trained tiny model each greedy token is, on >= 90% of positions, the float32 model's argmax after the same
    prefix, and its log-prob is within 0.1 of the float32 model's (teacher-forced)."""
    from tunix_lite.loading import load

    model, tokenizer = load("tiny")
    prompts = ["Question: what is 12 + 7?", "Sort: 5 3 9 1", "The capital of France is", "Repeat: abc abc"]
    bf16 = Sampler(model, tokenizer, stop_ids=[-1], weights_dtype="bfloat16")
    before = _generate_jit._cache_size()
    out = bf16.generate(prompts, 24)
    bf16.generate(prompts[::-1], 24)
    assert bf16.casts == 1 and _generate_jit._cache_size() - before == 1
    rows = np.concatenate([out.prompt_tokens, out.tokens], axis=1)
    P = out.prompt_tokens.shape[1]
    index = np.arange(rows.shape[1]) - (P - out.prompt_lengths[:, None])  # 0 at each row's first prompt token
    logp = jax.nn.log_softmax(model(jnp.asarray(rows), jnp.asarray(np.where(index >= 0, index, -1))), axis=-1)
    logp = np.asarray(logp[:, P - 1:-1])  # [R, N]: the float32 model's prediction of each generated token
    assert (logp.argmax(-1) == out.tokens).mean() >= 0.9  # measured: 0.99 (95 of 96)
    expected = np.take_along_axis(logp, out.tokens[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(out.logprobs, expected, atol=0.1)  # measured: 0.04
    state = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda x: x + 0.0, state))  # a training update replaces every array
    bf16.generate(prompts, 24)
    assert bf16.casts == 2 and _generate_jit._cache_size() - before == 1
    with pytest.raises(ValueError, match="weights_dtype='int8': need a floating dtype"):
        Sampler(model, tokenizer, weights_dtype="int8")


def test_top_p_one_keeps_every_token():
    """p = 1 is no filter. These logits (found by a graded test's random draw) make the float32 cumulative mass reach
    1 before the last sorted token, which a plain `mass_before < p` dropped."""
    logits = jnp.asarray([[3.44, -3.89, -5.81, -3.15, 3.20, 1.00, -2.41, -0.39, -0.89, -1.03, -7.52, -2.57, -0.57,
                           4.55, 0.48, 4.20, -1.18, -0.76, -11.70, 1.39]], jnp.float32)
    np.testing.assert_array_equal(np.asarray(top_p_filter(logits, 1.0)), np.asarray(logits))
