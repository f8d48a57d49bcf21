"""Gemma 2 against transformers on a tiny random checkpoint made here: logits (with padding), greedy
generation through the KV cache, the exported checkpoint, and soft-capping in every logits path.

transformers + torch are a test-only reference (the [test] extra); these tests skip without them.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite.models import Transformer, get_config, set_training_options
from tunix_lite.sampler import Sampler
from tunix_lite.training.losses import sequence_log_probs
from tunix_lite.weights.hf import config_from_hf, load_hf_model, save_hf_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.reference

VOCAB, WINDOW, LENGTH = 256, 8, 20  # 20-token inputs outrun the 8-token window of the local layers
forward = nnx.jit(lambda model, tokens, positions: model(tokens, positions))


def tiny_hf_gemma2():
    """A random 4-layer Gemma 2 (local, global, local, global). The caps are far below the real
    50 / 30, so that they bend these small random scores and logits (see test_the_caps_matter)."""
    config = transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=WINDOW,
        query_pre_attn_scalar=16, attn_logit_softcapping=1.0, final_logit_softcapping=2.0,
        max_position_embeddings=128, attn_implementation="eager")
    torch.manual_seed(0)
    hf_model = transformers.Gemma2ForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # transformers initialises the norms to 0 (scale 1): perturb every tensor
        for p in hf_model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return hf_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(transformers' model, its safetensors directory)."""
    hf_model = tiny_hf_gemma2()
    directory = tmp_path_factory.mktemp("gemma2")
    hf_model.save_pretrained(directory, safe_serialization=True)
    return hf_model, directory


@pytest.fixture(scope="module")
def model(checkpoint):
    return load_hf_model(checkpoint[1])


def hf_logits(hf_model, ids) -> np.ndarray:
    """[T, V] logits of one unpadded sequence."""
    with torch.no_grad():
        return hf_model(torch.tensor([list(ids)])).logits[0].numpy()


def left_padded(rows: list[np.ndarray]) -> tuple[jax.Array, jax.Array]:
    """Token rows -> (tokens, positions) [B, LENGTH], left-padded with position -1."""
    tokens = np.zeros((len(rows), LENGTH), np.int32)
    positions = np.full((len(rows), LENGTH), -1, np.int32)
    for b, row in enumerate(rows):
        tokens[b, LENGTH - len(row):], positions[b, LENGTH - len(row):] = row, np.arange(len(row))
    return jnp.asarray(tokens), jnp.asarray(positions)


def test_config_reads_the_family(checkpoint, model):
    c = model.config
    assert (c.family, c.qk_norm, c.sandwich_norm, c.norm_plus_one, c.scale_embeddings) == (
        "gemma2", False, True, True, True)
    assert [c.is_global(i) for i in range(4)] == [False, True, False, True]
    assert (c.sliding_window, c.attn_logit_softcap, c.final_logit_softcap, c.attn_scale) == (
        WINDOW, 1.0, 2.0, 0.25)
    # config.json files older than transformers' layer_types: every other layer is global
    old_style = json.loads((checkpoint[1] / "config.json").read_text())
    del old_style["layer_types"]
    assert config_from_hf(old_style) == c


def test_logits_equal_transformers_with_padding(checkpoint, model):
    hf_model = checkpoint[0]
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, VOCAB, LENGTH), rng.integers(0, VOCAB, LENGTH - 6)]
    got = np.asarray(forward(model, *left_padded(rows)))
    diff = max(np.abs(got[b, LENGTH - len(row):] - hf_logits(hf_model, row)).max()
               for b, row in enumerate(rows))
    print(f"max |dlogit| vs transformers: {diff:.2e}")
    assert diff <= 1e-4


def test_the_caps_matter(checkpoint, model):
    """Without either cap the logits move 100x beyond the parity tolerance: it sees both caps."""
    tokens, positions = left_padded([np.arange(LENGTH) * 7 % VOCAB])
    capped = np.asarray(forward(model, tokens, positions))
    for cap in ("attn_logit_softcap", "final_logit_softcap"):
        structure = Transformer(model.config.replace(**{cap: None}), rngs=nnx.Rngs(0))
        uncapped = nnx.merge(nnx.graphdef(structure), nnx.state(model))
        assert np.abs(np.asarray(forward(uncapped, tokens, positions)) - capped).max() > 1e-2, cap
    assert np.abs(capped).max() < 2.0  # the final cap bounds every logit


def test_fused_attention_falls_back_to_the_capped_path(model):
    tokens, positions = left_padded([np.arange(LENGTH) * 5 % VOCAB])
    expected = np.asarray(forward(model, tokens, positions))
    fused = nnx.merge(*nnx.split(model))  # a copy: the module fixture stays on einsum
    set_training_options(fused, attention="xla")
    np.testing.assert_allclose(np.asarray(forward(fused, tokens, positions)), expected, atol=1e-6)


class _IdsOnly:
    """The tokenizer surface the Sampler touches, for token-id prompts."""

    pad_id, eos_id = 0, None

    def decode(self, ids):
        return ""


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_equals_transformers(checkpoint, model, use_cache):
    hf_model = checkpoint[0]
    rng = np.random.default_rng(1)
    # prompts of 12 (> the window) and 5 tokens: the sampler left-pads the second
    prompts = [rng.integers(3, VOCAB, 12).tolist(), rng.integers(3, VOCAB, 5).tolist()]
    sampler = Sampler(model, _IdsOnly(), stop_ids=[-1], bucket=8)
    out = sampler.generate(prompts, 10, use_cache=use_cache)
    for ids, ours in zip(prompts, out.tokens):
        with torch.no_grad():
            theirs = hf_model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False,
                                       eos_token_id=None, pad_token_id=0)[0, len(ids):]
        assert ours.tolist() == theirs.tolist()


def test_our_export_loads_in_transformers(model, tmp_path):
    save_hf_model(model, tmp_path)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    hf_model.eval()
    assert type(hf_model).__name__ == "Gemma2ForCausalLM"
    assert config_from_hf(json.loads((tmp_path / "config.json").read_text())) == model.config
    row = np.arange(LENGTH) * 3 % VOCAB
    got = np.asarray(forward(model, *left_padded([row])))[0]
    assert np.abs(got - hf_logits(hf_model, row)).max() <= 1e-4


def test_chunked_loss_equals_unchunked_with_capping(model):
    """The chunked lm-head path caps its logits like `logits` does: values and gradients."""
    rng = np.random.default_rng(2)
    tokens, positions = left_padded([rng.integers(0, VOCAB, LENGTH), rng.integers(0, VOCAB, 11)])
    batch = {"inputs": tokens, "positions": positions, "targets": jnp.roll(tokens, -1, axis=1)}

    def loss_and_grads(chunk):
        copy = set_training_options(nnx.merge(*nnx.split(model)), logits_chunk=chunk)
        loss = lambda m: jnp.sum(sequence_log_probs(m, batch) * (batch["positions"] >= 0))
        value, grads = nnx.jit(nnx.value_and_grad(loss))(copy)  # one compile, not op by op
        return value, nnx.to_flat_state(grads)

    (whole, whole_grads), (chunked, chunked_grads) = loss_and_grads(0), loss_and_grads(8)
    np.testing.assert_allclose(chunked, whole, rtol=1e-5)
    for (path, g), (_, h) in zip(whole_grads, chunked_grads):  # float32 sums in another order
        scale = float(np.abs(g[...]).max())
        np.testing.assert_allclose(h[...], g[...], rtol=1e-4, atol=1e-5 * scale, err_msg=str(path))


def test_gemma2_2b_preset_has_the_published_dimensions():
    c = get_config("gemma2-2b")
    dims = (c.family, c.num_layers, c.embed_dim, c.num_heads, c.num_kv_heads, c.head_dim, c.mlp_dim)
    assert dims == ("gemma2", 26, 2304, 8, 4, 256, 9216)
    attention = (c.vocab_size, c.sliding_window, c.attn_scale, c.attn_logit_softcap,
                 c.final_logit_softcap)
    assert attention == (256_000, 4096, 256 ** -0.5, 50.0, 30.0)
    assert (c.qk_norm, c.tie_embeddings, c.rope_base, c.rope_scaling) == (False, True, 1e4, None)
    assert [c.is_global(i) for i in range(4)] == [False, True, False, True]
    abstract = nnx.eval_shape(lambda: Transformer(c, rngs=nnx.Rngs(0)))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    assert 2.61e9 < params < 2.62e9  # Gemma 2 2B: 2,614,341,888 parameters
