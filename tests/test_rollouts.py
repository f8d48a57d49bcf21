"""The sampler as a rollout engine: live weights on every path an RL loop takes, rollouts turned into fixed-length
training rows scored exactly as the sampler scored them, and chunked log-probs equal to the plain ones."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lite.data.rollouts import rollout_rows
from tunix_lite.loading import ASSETS, load
from tunix_lite.lora import apply_lora, load_adapters, save_adapters
from tunix_lite.models import Transformer, set_training_options
from tunix_lite.sampler import Sampler
from tunix_lite.tokenizer import Tokenizer, padding_id
from tunix_lite.training.checkpoint import Checkpoints
from tunix_lite.training.losses import chunked_token_log_probs, lm_loss, sequence_log_probs, token_log_probs
from tunix_lite.training.trainer import Trainer

from test_model import small_config

PROMPTS = [[2, 10, 11, 12, 13, 14, 15], [2, 20, 21], [2, 30, 31, 32, 33]]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(ASSETS / "tiny" / "tokenizer.model")


def lm_batch(vocab, rows=4, T=16, seed=0):
    tokens = np.random.default_rng(seed).integers(3, vocab, (rows, T + 1)).astype(np.int32)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((rows, T), np.float32),
            "positions": np.tile(np.arange(T, dtype=np.int32), (rows, 1))}


def test_a_sampler_built_before_training_samples_the_current_weights(tokenizer, tmp_path):
    """After optimizer steps, a checkpoint restore, LoRA being applied and adapters being loaded, the one
    sampler made at the start generates what a sampler made now generates: nothing to refresh."""
    model = Transformer(small_config(vocab_size=tokenizer.vocab_size, num_layers=2), rngs=nnx.Rngs(0))
    sampler = Sampler(model, tokenizer, bucket=8)

    def fresh():
        return Sampler(model, tokenizer, bucket=8).generate(PROMPTS, 8).tokens

    start = sampler.generate(PROMPTS, 8).tokens
    trainer = Trainer(model, optax.adam(3e-2), lm_loss)
    checkpoints = Checkpoints(tmp_path / "ckpt", every=1)
    trainer.save(checkpoints, force=True)
    checkpoints.wait()
    for seed in range(3):
        trainer.step(lm_batch(tokenizer.vocab_size, seed=seed))
    trained = sampler.generate(PROMPTS, 8).tokens
    assert not np.array_equal(trained, start)
    np.testing.assert_array_equal(trained, fresh())
    trainer.restore(checkpoints, step=0)  # back to the start
    np.testing.assert_array_equal(sampler.generate(PROMPTS, 8).tokens, start)
    checkpoints.close()

    apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))  # the module tree itself changes
    lora_trainer = Trainer(model, optax.adam(3e-2), lm_loss, wrt=nnx.LoRAParam)
    for seed in range(3):
        lora_trainer.step(lm_batch(tokenizer.vocab_size, seed=seed))
    adapted = sampler.generate(PROMPTS, 8).tokens
    assert not np.array_equal(adapted, start)
    np.testing.assert_array_equal(adapted, fresh())
    save_adapters(model, tmp_path / "adapters.safetensors")
    other = Transformer(small_config(vocab_size=tokenizer.vocab_size, num_layers=2), rngs=nnx.Rngs(0))
    apply_lora(other, rank=4, alpha=8.0, rngs=nnx.Rngs(9))
    other_sampler = Sampler(other, tokenizer, bucket=8)
    load_adapters(other, tmp_path / "adapters.safetensors")
    np.testing.assert_array_equal(other_sampler.generate(PROMPTS, 8).tokens, adapted)


def test_rollout_rows_score_the_completions_as_the_sampler_did(tokenizer, caplog):
    """Rows of prompt + completion, scored by sequence_log_probs at their weights, reproduce the sampler's own
    log-probs (recompute == cache), and prompts of any length give one train-step shape."""
    model = Transformer(small_config(vocab_size=tokenizer.vocab_size, num_layers=2), rngs=nnx.Rngs(0))
    sampler = Sampler(model, tokenizer, bucket=8)
    out = sampler.generate(PROMPTS, 6, num_samples=2, temperature=1.0, seed=0)
    seq_len = 8 + 6  # the prompt bucket + max_new_tokens
    rows = rollout_rows(out, seq_len, padding_id(tokenizer), old_logprobs=out.logprobs)
    assert rows["inputs"].shape == (6, seq_len) and rows["weights"].sum() == out.lengths.sum()
    logp = np.asarray(nnx.jit(sequence_log_probs)(model, rows))  # one compile, not op by op
    w = rows["weights"] > 0
    np.testing.assert_allclose(logp[w], rows["old_logprobs"][w], atol=1e-4)
    np.testing.assert_allclose(rows["old_logprobs"][w], out.logprobs[out.mask > 0], atol=0)
    for r in range(6):  # targets under the weights are exactly the generated tokens
        assert rows["targets"][r][w[r]].tolist() == out.tokens[r, :out.lengths[r]].tolist()

    trainer = Trainer(model, optax.sgd(0.0), lm_loss)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        for prompts in ([[2, 5]], [[2, 5, 6, 7, 8, 9, 10]]):
            trainer.step(rollout_rows(sampler.generate(prompts, 6), seq_len, padding_id(tokenizer)))
    assert len([r for r in caplog.records if "Compiling jit(train_step)" in r.getMessage()]) == 1
    with pytest.raises(ValueError, match="need seq_len >= "):
        rollout_rows(out, 10, 0)


def test_chunked_log_probs_equal_the_plain_ones_with_gradients():
    """Chunks need not divide the token count; values and both gradients (features and a trained head) match."""
    rng = np.random.default_rng(0)
    x, head = jnp.asarray(rng.normal(size=(37, 16)), jnp.float32), jnp.asarray(rng.normal(size=(16, 50)), jnp.float32)
    targets, g = jnp.asarray(rng.integers(0, 50, 37)), jnp.asarray(rng.normal(size=37), jnp.float32)
    plain = lambda x, h: jnp.sum(g * token_log_probs(x @ h, targets))
    chunked = lambda x, h: jnp.sum(g * chunked_token_log_probs(x, h, targets, 8))
    np.testing.assert_allclose(chunked(x, head), plain(x, head), rtol=1e-6)
    for a, b in zip(jax.grad(chunked, argnums=(0, 1))(x, head), jax.grad(plain, argnums=(0, 1))(x, head)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lora", [False, True])
def test_a_chunked_lm_loss_trains_like_the_plain_one(lora):
    """The tiny model's loss and gradients are the same with the vocabulary projection in chunks (tied head:
    trained under full fine-tuning, frozen under LoRA)."""
    batch = lm_batch(1024, rows=2, T=24)
    grads = {}
    for chunk in (0, 10):
        model, _ = load("tiny")
        if lora:
            apply_lora(model, rank=2, alpha=4.0, rngs=nnx.Rngs(0))
        set_training_options(model, logits_chunk=chunk)
        wrt = nnx.LoRAParam if lora else nnx.Param
        value_and_grad = nnx.value_and_grad(lambda m: lm_loss(m, batch)[0], argnums=nnx.DiffState(0, wrt))
        loss, g = nnx.jit(value_and_grad)(model)  # one compile, not op by op
        grads[chunk] = loss, jax.tree.leaves(g)
    assert float(grads[10][0]) == pytest.approx(float(grads[0][0]), rel=1e-6)
    for a, b in zip(grads[10][1], grads[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
