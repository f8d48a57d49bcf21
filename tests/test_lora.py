"""LoRA / QLoRA invariants: a fresh adapter changes nothing, only adapters train, merging is exact,
adapter files and merged exports round-trip, and quantization stays within its format's error bound."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lite.lora import (LoRALinear, QLoRALinear, apply_lora, count_params, export_merged, load_adapters,
                             lora_layers, merge_lora, save_adapters, without_adapters)
from tunix_lite.models import Transformer, get_config
from tunix_lite.quantize import NF4, NF4_BLOCK, QuantizedWeight, dequantize, memory_report, quantize
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer
from tunix_lite.weights.hf import load_hf_model


def small_config(**changes):
    """Gemma 3 layout at toy size, one (global) layer: every compile counts on a shared 2-core machine."""
    base = dict(vocab_size=97, embed_dim=32, num_layers=1, num_heads=4, num_kv_heads=1, head_dim=8, mlp_dim=48,
                sliding_window=None, sliding_window_pattern=None, query_pre_attn_scalar=8)
    return get_config("tiny").replace(**(base | changes))


TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 97, (2, 12)), jnp.int32)
forward = nnx.jit(lambda model, tokens: model(tokens))


def randomize_b(model, seed=1):
    """Give every B a nonzero value, so the adapters actually change the output."""
    rng = np.random.default_rng(seed)
    for _, layer in lora_layers(model):
        layer.lora_b.set_value(jnp.asarray(rng.normal(size=layer.lora_b.shape) * 0.1, jnp.float32))
    return model


@functools.cache
def _base(qk_norm: bool) -> Transformer:
    return Transformer(small_config(qk_norm=qk_norm), rngs=nnx.Rngs(0))


def base_model(qk_norm: bool = True) -> Transformer:
    """A fresh copy of one base model. Copies, unlike new Transformers, share the MLP's activation lambda:
    a static attribute, so a new Transformer has a new graphdef and every nnx.jit would compile again."""
    return nnx.clone(_base(qk_norm))


def lora_model(seed=1, **kwargs):
    return apply_lora(base_model(), rank=4, alpha=8.0, rngs=nnx.Rngs(seed), **kwargs)


def test_fresh_lora_equals_the_base_model_bit_for_bit():
    # Without q/k norms: with them, XLA fuses each LoRA layer's (exactly zero) update into q_norm's
    # reduction, which then sums in another order, so Gemma's logits can move in the last bit (≤1e-6;
    # the QLoRA test below checks that layout to 1e-6).
    model = base_model(qk_norm=False)
    before, params = forward(model, TOKENS), count_params(model)
    apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    assert isinstance(model.layers[0].mlp.down_proj, LoRALinear)
    np.testing.assert_array_equal(forward(model, TOKENS), before)  # B = 0
    c = small_config()
    per_layer = sum(4 * (din + dout) for din, dout in [(32, 32), (32, 8), (32, 8), (32, 32), (32, 48), (32, 48),
                                                        (48, 32)])
    assert count_params(model, nnx.LoRAParam) == c.num_layers * per_layer
    assert count_params(model) == params + c.num_layers * per_layer  # LoRAParam is an nnx.Param


def test_only_adapters_train_and_the_loss_goes_down():
    model = lora_model(dropout=0.1)
    tokens = np.random.default_rng(0).integers(0, 97, (4, 17)).astype(np.int32)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((4, 16), np.float32),
             "positions": np.tile(np.arange(16, dtype=np.int32), (4, 1))}
    frozen = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))
    base_before = jax.tree.map(np.asarray, nnx.state(model, frozen))
    lora_before = jax.tree.map(np.asarray, nnx.state(model, nnx.LoRAParam))
    trainer = Trainer(model, optax.adam(1e-2), lm_loss, wrt=nnx.LoRAParam)
    trainer.step(batch)
    # Step 1: B moves; A does not, since dL/dA = x^T (dL/dy) B^T is zero while B = 0.
    jax.tree.map(np.testing.assert_array_equal, nnx.state(model, frozen), base_before)
    for path, layer in lora_layers(model):
        assert np.abs(np.asarray(layer.lora_b[...])).max() > 0, path
    history = trainer.fit(iter([batch] * 8), 8)
    jax.tree.map(np.testing.assert_array_equal, nnx.state(model, frozen), base_before)
    assert history[-1]["loss"] < history[0]["loss"] - 0.1
    a_after = nnx.state(model, nnx.LoRAParam)["layers"][0]["attn"]["q_proj"]["lora_a"][...]
    assert not np.array_equal(a_after, lora_before["layers"][0]["attn"]["q_proj"]["lora_a"])


def test_merged_equals_unmerged_and_the_lora_model_is_untouched():
    model = randomize_b(lora_model())
    out = forward(model, TOKENS)
    merged = merge_lora(model)
    assert type(merged.layers[0].attn.q_proj) is nnx.Linear and count_params(merged, nnx.LoRAParam) == 0
    assert merged.layers[0].attn.q_proj.kernel.get_metadata()["logical_axes"] == ("embed", "heads")
    np.testing.assert_allclose(forward(merged, TOKENS), out, atol=1e-5)
    np.testing.assert_array_equal(forward(model, TOKENS), out)  # "unmerge" is exact: the original is kept


def _live_bytes() -> int:
    """Bytes held by distinct live device buffers (an array shared by two Variables counts once)."""
    return sum(a.nbytes for a in {id(a): a for a in jax.live_arrays()}.values())


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_reference_without_adapters_is_the_base_and_costs_no_copy(quantize):
    """LoRA's free reference policy: a view with the adapters off equals the base model while the adapters
    train, and allocates no second copy of the weights (measured over the live device buffers)."""
    model = apply_lora(base_model(qk_norm=False), rank=4, alpha=8.0, rngs=nnx.Rngs(1), quantize=quantize)
    expected = forward(model, TOKENS)  # B = 0: the base (for QLoRA, on its dequantized weights)
    randomize_b(model)
    weights = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model)))
    before = _live_bytes()
    reference = without_adapters(model)
    assert _live_bytes() - before < 0.01 * weights  # no new buffers beyond bookkeeping
    np.testing.assert_allclose(forward(reference, TOKENS), expected, atol=1e-6)
    assert not np.allclose(forward(model, TOKENS), expected, atol=1e-3)  # the policy itself differs
    layer = lora_layers(model)[0][1]
    layer.lora_b.set_value(layer.lora_b[...] + 1.0)  # an optimizer step replaces the adapters' arrays
    np.testing.assert_allclose(forward(reference, TOKENS), expected, atol=1e-6)
    with pytest.raises(ValueError, match="no LoRA layers"):
        without_adapters(base_model())


def test_adapter_files_round_trip(tmp_path):
    model = randomize_b(lora_model())
    save_adapters(model, tmp_path / "adapters.safetensors")
    other = lora_model(seed=7)  # same base, fresh adapters
    load_adapters(other, tmp_path / "adapters.safetensors")
    np.testing.assert_array_equal(forward(other, TOKENS), forward(model, TOKENS))
    wrong_rank = apply_lora(base_model(), rank=2, alpha=4.0, rngs=nnx.Rngs(7))
    with pytest.raises(ValueError, match="a different rank"):
        load_adapters(wrong_rank, tmp_path / "adapters.safetensors")


def test_export_merged_loads_back_as_hf(tmp_path):
    model = randomize_b(lora_model())
    export_merged(model, tmp_path / "merged")
    loaded = load_hf_model(tmp_path / "merged")
    np.testing.assert_allclose(forward(loaded, TOKENS), forward(model, TOKENS), atol=1e-5)


@pytest.mark.parametrize("fmt", ["int8", "nf4"])
def test_quantization_error_within_the_format_bound(fmt):
    w = np.random.default_rng(0).normal(size=(100, 72)).astype(np.float32)  # 7200: not a multiple of 64
    w[:, 3] = 0.0  # an all-zero column (int8) and stretches of zeros (nf4) must not divide by zero
    q = quantize(w, fmt)
    err = np.abs(np.asarray(dequantize(q), np.float64) - w)
    if fmt == "int8":
        assert q.codes.dtype == jnp.int8 and q.codes.shape == (100, 72)
        bound = np.abs(w).max(axis=0) / 127 / 2  # half a step, per output channel
    else:
        n_blocks = -(-w.size // NF4_BLOCK)
        assert q.codes.dtype == jnp.uint8 and q.codes.shape == (n_blocks, NF4_BLOCK // 2)
        flat = np.pad(w.reshape(-1), (0, n_blocks * NF4_BLOCK - w.size)).reshape(n_blocks, NF4_BLOCK)
        half_gap = np.max(np.diff(np.asarray(NF4))) / 2  # 0.152, between -1 and -0.696
        bound = np.repeat(half_gap * np.abs(flat).max(axis=1), NF4_BLOCK)[: w.size].reshape(w.shape)
    assert np.all(err <= bound * (1 + 1e-4) + 1e-7)  # slack: float32 rounding in w / step and q * step
    assert err[:, 3].max() == 0.0
    assert err.mean() < 0.6 * bound.mean()  # rounds to the nearest code: about half the worst case on average


@pytest.mark.parametrize("fmt", ["int8", "nf4"])
def test_fresh_qlora_equals_the_base_on_dequantized_weights(fmt):
    reference = base_model()
    model = apply_lora(nnx.clone(reference), rank=4, alpha=8.0, quantize=fmt, rngs=nnx.Rngs(1))
    for path, layer in lora_layers(model):
        assert isinstance(layer, QLoRALinear) and isinstance(layer.codes, QuantizedWeight)
        linear = reference
        for key in path:
            linear = linear[key] if isinstance(key, int) else getattr(linear, key)
        linear.kernel.set_value(dequantize(quantize(linear.kernel[...], fmt)))
    np.testing.assert_allclose(forward(model, TOKENS), forward(reference, TOKENS), atol=1e-6)
    # The quantized kernels are not Params: the optimizer never sees them, even with wrt=nnx.Param.
    assert count_params(model) == count_params(reference) - sum(
        np.prod(layer.shape) for _, layer in lora_layers(model)) + count_params(model, nnx.LoRAParam)


def test_memory_report_nf4_below_int8_below_fp32():
    reports = {}
    for fmt in (None, "int8", "nf4"):
        model = apply_lora(base_model(), rank=4, alpha=8.0, quantize=fmt, rngs=nnx.Rngs(1))
        reports[fmt] = memory_report(model)
    base = {fmt: r["base_float"] + r["base_quantized"] for fmt, r in reports.items()}
    assert base["nf4"] < base["int8"] < base[None]
    assert reports[None]["base_quantized"] == 0
    assert reports["nf4"]["adapters"] == reports[None]["adapters"]
    assert reports["nf4"]["optimizer_estimate"] == 2 * reports["nf4"]["adapters"]


def test_no_matching_layer_is_a_clear_error():
    model = base_model()
    with pytest.raises(ValueError, match=r"no nnx.Linear path matches \['attention'\].*layers\.0\.attn\.q_proj"):
        apply_lora(model, rank=4, alpha=8.0, targets=(r"attention",), rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="unknown quantization format 'fp8'"):
        apply_lora(model, rank=4, alpha=8.0, quantize="fp8", rngs=nnx.Rngs(1))
