"""A decoder-only transformer in Flax NNX: Gemma 2, Gemma 3, Llama 3 and Qwen 3 from one config.

Read top to bottom: pure functions (norm, RoPE, masks, attention), then modules (RMSNorm, Attention,
MLP, Block, Transformer). Shapes use B=batch, T=query length, S=key length, D=embed, N=query heads,
K=kv heads, H=head dim, F=mlp dim, V=vocab.

Positions carry padding: a position < 0 marks a padded token (queries) or an empty cache slot
(keys), so one int array replaces a separate attention mask.

Every parameter carries `logical_axes` metadata (vocab / embed / heads / kv_heads / mlp) that
`tunix_lite.sharding` maps onto a device mesh; activations are constrained to their logical axes at
block boundaries (`constrain`, which does nothing unless a mesh is set).
"""

from __future__ import annotations

import dataclasses

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.models.config import ModelConfig, RopeScaling
from tunix_lite.sharding import ACT_BTD, ACT_BTKH, ACT_BTNH, constrain

# A finite "minus infinity": a fully masked row (a padding query) softmaxes to uniform, not NaN.
_MASKED = -2.3819763e38
# The segment id of a prefix that every segment of its row attends to (see attention_mask).
SHARED_PREFIX = -1


# ----------------------------------------------------------------------------- pure functions


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
    """x [..., D] / rms(x) * scale [D], computed in float32 and returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * scale.astype(jnp.float32)).astype(x.dtype)


def soft_cap(x: jax.Array, cap: float | None) -> jax.Array:
    """cap * tanh(x / cap), elementwise: Gemma 2 keeps attention scores and logits within
    (-cap, cap). cap None: x unchanged."""
    return x if cap is None else jnp.tanh(x / cap) * cap


def rope_inverse_frequencies(head_dim: int, base: float,
                             scaling: RopeScaling | None = None) -> jax.Array:
    """[H/2] rotation speeds base**(-2i/H), optionally rescaled (Llama 3.1+ 'llama3', or 'linear').

    Computed on the host in NumPy, as the float32 reciprocal of the float32-rounded power, which is
    what the reference implementations compute. Under jit, XLA would rewrite 1 / base**x into
    base**(-x), moving about a third of the entries by one ulp; at position p that shifts the
    angle by ~p * 6e-8 * freq, and Gemma 3's outsized activations amplify such shifts into ~1e-2
    logit differences past a few hundred tokens."""
    exponents = np.arange(0, head_dim, 2) / head_dim
    inv_freq = np.float32(1.0) / (base ** exponents).astype(np.float32)  # NumPy keeps float32 below
    if scaling is None:
        return jnp.asarray(inv_freq)
    if scaling.kind == "linear":
        return jnp.asarray(inv_freq / scaling.factor)
    # llama3: keep high frequencies, divide low ones by `factor`, interpolate smoothly in between.
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = scaling.original_max_position / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position / scaling.high_freq_factor
    smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    interpolated = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    return jnp.asarray(np.where(wavelen > low_wavelen, inv_freq / scaling.factor,
                                np.where(wavelen < high_wavelen, inv_freq, interpolated)))


def apply_rope(x: jax.Array, positions: jax.Array, base: float = 10_000.0,
               scaling: RopeScaling | None = None) -> jax.Array:
    """Rotate x [B, T, heads, H] by angle position * frequency, 'rotate-half' pairing
    (i, i + H/2)."""
    inv_freq = rope_inverse_frequencies(x.shape[-1], base, scaling)
    angles = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, H/2]
    sin, cos = jnp.sin(angles)[:, :, None, :], jnp.cos(angles)[:, :, None, :]  # [B, T, 1, H/2]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention_mask(q_pos: jax.Array, k_pos: jax.Array, *, sliding_window: int | None = None,
                   q_segment: jax.Array | None = None,
                   k_segment: jax.Array | None = None) -> jax.Array:
    """bool [B, T, S]: query t may attend key s (causal, key present, within the window,
    same segment).

    Keys of segment SHARED_PREFIX (-1) are seen by every segment of their row: a prompt that two
    completions packed into one row both continue
    (`tunix_lite.preference.scoring.shared_prompt_features`)."""
    q, k = q_pos[:, :, None], k_pos[:, None, :]
    mask = (k >= 0) & (k <= q)
    if sliding_window is not None:
        mask &= q - k < sliding_window
    if q_segment is not None:
        k_segment = k_segment[:, None, :]
        mask &= (q_segment[:, :, None] == k_segment) | (k_segment == SHARED_PREFIX)
    return mask


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float,
              softcap: float | None = None) -> jax.Array:
    """Grouped-query attention: q [B,T,N,H], k/v [B,S,K,H], mask [B,T,S] -> [B,T,N,H].
    softcap: soft-cap the scaled scores before masking (Gemma 2; see soft_cap)."""
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    return kv_major_attention(q, k, v, mask, scale, softcap)


def kv_major_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float,
                       softcap: float | None = None) -> jax.Array:
    """`attention` with k/v laid out [B,K,S,H], the KV cache's layout, so decoding reads the cache
    as it is.

    Each of the K kv heads serves G = N/K query heads; the query heads are grouped, not k/v
    repeated: a kv head's G query heads are stacked into one [G*T, H] block, so both products are
    plain batched matmuls over (B, K) with the head dimension last. Contracting the [B, T, K, G, H]
    layout directly made XLA:CPU transpose around every product.
    Measured: benchmarks/RESULTS.md, "Where tunix_lite does not win, and why".
    """
    B, T, N, H = q.shape
    K = k.shape[1]
    G = N // K
    q = q.reshape(B, T, K, G, H).transpose(0, 2, 3, 1, 4).reshape(B, K, G * T, H)  # row g*T + t
    scores = jnp.einsum("bkqh,bksh->bkqs", q, k, preferred_element_type=jnp.float32) * scale
    scores = soft_cap(scores, softcap)
    scores = jnp.where(jnp.tile(mask, (1, G, 1))[:, None], scores, _MASKED)  # [B, K, G*T, S]
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkqs,bksh->bkqh", probs, v).reshape(B, K, G, T, H)
    return out.transpose(0, 3, 1, 2, 4).reshape(B, T, N, H)


def attention_weights(q: jax.Array, k: jax.Array, mask: jax.Array, scale: float,
                      softcap: float | None = None) -> jax.Array:
    """The probabilities `attention` weighs the values by, per query head: q [B,T,N,H], k [B,S,K,H],
    mask [B,T,S] -> [B,N,T,S] (float32; each row sums to 1). Laid out for reading (attention maps,
    attention transfer), not for speed: the forward pass never materialises them this way."""
    N, K = q.shape[2], k.shape[2]
    k = jnp.repeat(k, N // K, axis=2)  # query head n reads kv head n // G
    scores = jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32) * scale
    scores = soft_cap(scores, softcap)
    return jax.nn.softmax(jnp.where(mask[:, None], scores, _MASKED), axis=-1)


# ----------------------------------------------------------------------------- KV cache


class KVCache(NamedTuple):
    """Fixed-size cache, a pytree passed in and returned. Slot j of row b holds the token written at
    step j; `positions` [B, S] is its position (-1: empty or padding). `end` is the next free slot,
    shared by all rows because prompts are left-padded to a common length."""

    # per layer [B, K, S, H]: kv-head major, as attention's matmuls read it
    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    positions: jax.Array  # [B, S] int32
    end: jax.Array  # int32 scalar

    @classmethod
    def init(cls, config: ModelConfig, batch: int, size: int) -> "KVCache":
        shape = (batch, config.num_kv_heads, size, config.head_dim)
        zeros = tuple(jnp.zeros(shape, config.dtype) for _ in range(config.num_layers))
        return cls(zeros, zeros, jnp.full((batch, size), -1, jnp.int32), jnp.zeros((), jnp.int32))

    @property
    def size(self) -> int:
        return self.positions.shape[1]


# ----------------------------------------------------------------------------- modules

ACTIVATIONS = {"gelu_tanh": partial(jax.nn.gelu, approximate=True), "silu": jax.nn.silu}


# o_proj, the MLP and the lm head take x as [B*T, D], not [B, T, D]: for the weight gradient of a
# 3-D x @ W, XLA:CPU first copies the output gradient into a transposed layout; a 2-D x @ W needs
# no copy, and the reshapes move no data. q/k/v stay 3-D: flattening them changed Gemma 3's float32
# rounding (tests/test_weights.py) for no measurable gain.
# Measured: benchmarks/RESULTS.md, "Where tunix_lite does not win, and why".
def _dense(din: int, dout: int, axes: tuple, config: ModelConfig, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(din, dout, use_bias=False, dtype=config.dtype, rngs=rngs,
                      kernel_init=nnx.initializers.normal(din ** -0.5),
                      kernel_metadata={"logical_axes": axes})


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, config: ModelConfig):
        # Gemma stores w and multiplies by (1 + w), so its neutral init is 0; Llama/Qwen store
        # the scale.
        init = jnp.zeros if config.norm_plus_one else jnp.ones
        self.scale = nnx.Param(init((dim,), jnp.float32), logical_axes=(None,))
        self.plus_one, self.eps = config.norm_plus_one, config.norm_eps

    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.scale[...] + 1.0 if self.plus_one else self.scale[...]
        return rms_norm(x, scale, self.eps)


class Attention(nnx.Module):
    def __init__(self, config: ModelConfig, layer: int, *, rngs: nnx.Rngs):
        c = config
        self.config = c
        self.is_global = c.is_global(layer)
        self.q_proj = _dense(c.embed_dim, c.num_heads * c.head_dim, ("embed", "heads"), c, rngs)
        self.k_proj = _dense(c.embed_dim, c.num_kv_heads * c.head_dim, ("embed", "kv_heads"),
                             c, rngs)
        self.v_proj = _dense(c.embed_dim, c.num_kv_heads * c.head_dim, ("embed", "kv_heads"),
                             c, rngs)
        self.o_proj = _dense(c.num_heads * c.head_dim, c.embed_dim, ("heads", "embed"), c, rngs)
        if c.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(c.head_dim, c), RMSNorm(c.head_dim, c)
        self.implementation = "einsum"  # see ATTENTION_IMPLEMENTATIONS (set_training_options)

    def project(self, x, positions):
        """x [B,T,D], positions [B,T] -> q [B,T,N,H], k, v [B,T,K,H]: projected, q/k-normed
        and rotated."""
        c = self.config
        B, T, _ = x.shape
        q = constrain(self.q_proj(x).reshape(B, T, c.num_heads, c.head_dim), ACT_BTNH)
        k = constrain(self.k_proj(x).reshape(B, T, c.num_kv_heads, c.head_dim), ACT_BTKH)
        v = constrain(self.v_proj(x).reshape(B, T, c.num_kv_heads, c.head_dim), ACT_BTKH)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.is_global:
            base, scaling = c.rope_base, c.rope_scaling
        else:
            base, scaling = c.rope_local_base or c.rope_base, None
        return apply_rope(q, positions, base, scaling), apply_rope(k, positions, base, scaling), v

    def __call__(self, x, positions, *, segment_ids=None, kv_cache=None, cache_positions=None,
                 cache_end=None):
        """x [B,T,D], positions [B,T]. With kv_cache=(k [B,K,S,H], v) the new keys are written at
        slot `cache_end` and attention runs over the whole cache; returns (out [B,T,D], (k, v))."""
        c = self.config
        B, T, _ = x.shape
        q, k, v = self.project(x, positions)
        window = None if self.is_global else c.sliding_window
        if kv_cache is None:
            mask = attention_mask(positions, positions, sliding_window=window,
                                  q_segment=segment_ids, k_segment=segment_ids)
            # jax.nn.dot_product_attention cannot soft-cap scores: Gemma 2 always uses einsum
            if self.implementation == "einsum" or c.attn_logit_softcap is not None:
                out = attention(q, k, v, mask, c.attn_scale, c.attn_logit_softcap)
            else:  # jax's fused attention (cuDNN's flash attention on NVIDIA GPUs), same mask
                q, k = q.astype(v.dtype), k.astype(v.dtype)
                out = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], scale=c.attn_scale,
                                                   implementation=self.implementation)
        else:
            # The cache is stored [B,K,S,H]: the T new entries are transposed once, never the cache
            # (decoding a [B,S,K,H] cache copied the whole of it into this layout at every layer of
            # every step).
            k, v = (jax.lax.dynamic_update_slice(cache, new.swapaxes(1, 2).astype(cache.dtype),
                                                 (0, 0, cache_end, 0))
                    for cache, new in zip(kv_cache, (k, v)))
            mask = attention_mask(positions, cache_positions, sliding_window=window)
            out = kv_major_attention(q, k, v, mask, c.attn_scale, c.attn_logit_softcap)
        return self.o_proj(out.reshape(B * T, c.num_heads * c.head_dim)).reshape(B, T, -1), (k, v)

    def weights(self, x, positions, *, segment_ids=None) -> jax.Array:
        """The attention probabilities [B,N,T,T] this layer gives its input x [B,T,D] (no cache):
        an attention map computed from a hidden state, with this layer's own projections, norms,
        RoPE and mask."""
        q, k, _ = self.project(x, positions)
        window = None if self.is_global else self.config.sliding_window
        mask = attention_mask(positions, positions, sliding_window=window, q_segment=segment_ids,
                              k_segment=segment_ids)
        return attention_weights(q, k, mask, self.config.attn_scale, self.config.attn_logit_softcap)


class MLP(nnx.Module):
    """Gated MLP: down(act(gate(x)) * up(x)); GeGLU-tanh for Gemma, SwiGLU for Llama/Qwen."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        self.gate_proj = _dense(c.embed_dim, c.mlp_dim, ("embed", "mlp"), c, rngs)
        self.up_proj = _dense(c.embed_dim, c.mlp_dim, ("embed", "mlp"), c, rngs)
        self.down_proj = _dense(c.mlp_dim, c.embed_dim, ("mlp", "embed"), c, rngs)
        self.activation = c.activation  # a name, not a function: equal configs give equal graphdefs

    def __call__(self, x: jax.Array) -> jax.Array:
        h = x.reshape(-1, x.shape[-1])  # [B*T, D]
        return self.down_proj(ACTIVATIONS[self.activation](self.gate_proj(h))
                              * self.up_proj(h)).reshape(x.shape)


class Block(nnx.Module):
    def __init__(self, config: ModelConfig, layer: int, *, rngs: nnx.Rngs):
        d = config.embed_dim
        self.input_norm = RMSNorm(d, config)
        self.attn = Attention(config, layer, rngs=rngs)
        self.pre_mlp_norm = RMSNorm(d, config)
        self.mlp = MLP(config, rngs=rngs)
        # Gemma 2 and 3 also normalise each sublayer's output before the residual add
        if config.sandwich_norm:
            self.post_attn_norm, self.post_mlp_norm = RMSNorm(d, config), RMSNorm(d, config)
        self.sandwich = config.sandwich_norm

    def attention_weights(self, x, positions, *, segment_ids=None) -> jax.Array:
        """[B,N,T,T]: the attention probabilities of this block given its input x [B,T,D], e.g.
        hidden[i] of `Transformer.features(..., return_hidden=True)` for block i."""
        return self.attn.weights(self.input_norm(x), positions, segment_ids=segment_ids)

    def __call__(self, x, positions, **attn_kwargs):
        # On a mesh the residual stream enters and leaves every block as [B, T, D] with rows split
        # and D whole (a no-op without one): left alone, XLA may split D like the FSDP weights and
        # all-reduce every norm.
        x = constrain(x, ACT_BTD)
        h, kv = self.attn(self.input_norm(x), positions, **attn_kwargs)
        x = x + (self.post_attn_norm(h) if self.sandwich else h)
        h = self.mlp(self.pre_mlp_norm(x))
        x = x + (self.post_mlp_norm(h) if self.sandwich else h)
        return constrain(x, ACT_BTD), kv


def _run_block(block: Block, x, positions, segment_ids):
    return block(x, positions, segment_ids=segment_ids)[0]


class Transformer(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c = config
        self.config = c
        self.embedder = nnx.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype, rngs=rngs,
                                  # std 1/sqrt(D): tied logits start at unit scale, and Gemma's
                                  # sqrt(D) input scaling brings the residual stream to unit scale
                                  embedding_init=nnx.initializers.normal(c.embed_dim ** -0.5),
                                  embedding_metadata={"logical_axes": ("vocab", "embed")})
        self.layers = nnx.List([Block(c, i, rngs=rngs) for i in range(c.num_layers)])
        self.final_norm = RMSNorm(c.embed_dim, c)
        # recompute each block's activations in the backward pass (set_training_options)
        self.remat = False
        # tokens per vocabulary-projection chunk in sequence_log_probs (None: all at once)
        self.logits_chunk = None
        if not c.tie_embeddings:
            self.lm_head = _dense(c.embed_dim, c.vocab_size, ("embed", "vocab"), c, rngs)

    def _embed(self, tokens):
        table = self.embedder.embedding[...]
        if self.embedder.dtype is not None:
            table = table.astype(self.embedder.dtype)
        # On a mesh, gather the table's model dimension first (FSDP's usual weight all-gather): a
        # lookup into a D-split table yields D-split rows, which XLA cannot cheaply turn into the
        # row-split [B, T, D] layout.
        x = jnp.take(constrain(table, ("vocab", None)), tokens, axis=0)
        if self.config.scale_embeddings:
            x = x * jnp.asarray(math.sqrt(self.config.embed_dim), x.dtype)
        return x

    def head_weight(self) -> jax.Array | None:
        """The output projection as [D, V] when it is a plain matrix (tied embedding or an untied
        nnx.Linear), else None (e.g. a LoRA-adapted lm head). `sequence_log_probs` chunks over it,
        soft-capping its products with config.final_logit_softcap as `logits` does; everything else
        calls `logits`."""
        if self.config.tie_embeddings:
            return self.embedder.embedding[...].T
        return self.lm_head.kernel[...] if type(self.lm_head) is nnx.Linear else None

    def logits(self, features: jax.Array) -> jax.Array:
        """features [..., D] (after the final norm) -> logits [..., V] in float32, soft-capped when
        config.final_logit_softcap is set (Gemma 2)."""
        *lead, D = features.shape
        x = features.reshape(-1, D)  # [B*T, D]: see the note above _dense
        logits = self.embedder.attend(x) if self.config.tie_embeddings else self.lm_head(x)
        logits = logits.reshape(*lead, -1).astype(jnp.float32)
        return soft_cap(logits, self.config.final_logit_softcap)

    def features(self, tokens: jax.Array, positions: jax.Array | None = None, *,
                 segment_ids: jax.Array | None = None, return_hidden: bool = False):
        """tokens [B,T] -> the final-normed residual stream [B,T,D], what the lm head reads: the
        input of a value head (PPO), of feature distillation and of chunked log-probs. With
        return_hidden, also the residual stream before the first block and after each block, [L+1]
        x [B,T,D]."""
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self._embed(tokens)
        hidden = [x]
        run = nnx.remat(_run_block) if self.remat else _run_block
        for block in self.layers:
            x = run(block, x, positions, segment_ids)
            hidden.append(x)
        x = self.final_norm(x)
        return (x, hidden) if return_hidden else x

    def __call__(self, tokens: jax.Array, positions: jax.Array | None = None, *,
                 segment_ids: jax.Array | None = None, return_hidden: bool = False):
        """tokens [B,T] -> logits [B,T,V] (float32). positions default to 0..T-1; a position <
        0 marks padding. segment_ids [B,T] keep packed sequences from attending to each other.
        With return_hidden, also returns the residual stream before the first block and after each
        block, [L+1] x [B,T,D] (hidden[0] is the scaled embedding, hidden[i] the output of
        block i)."""
        out = self.features(tokens, positions, segment_ids=segment_ids, return_hidden=return_hidden)
        if return_hidden:
            return self.logits(out[0]), out[1]
        return self.logits(out)

    def decode(self, tokens: jax.Array, positions: jax.Array, cache: KVCache, *,
               last_only: bool = False) -> tuple[jax.Array, KVCache]:
        """Run tokens [B,T] (a prefill chunk or one decode step) against the cache; returns the
        logits [B,T,V] and the cache with these T tokens written at slots end..end+T-1.
        last_only: logits of the last position only, [B,1,V] (a prefill needs no more, and with a
        262k vocabulary the full [B,T,V] projection would dominate its cost)."""
        cache_positions = jax.lax.dynamic_update_slice(cache.positions, positions.astype(jnp.int32),
                                                       (0, cache.end))
        x = self._embed(tokens)
        ks, vs = [], []
        for block, k, v in zip(self.layers, cache.k, cache.v):
            x, (k, v) = block(x, positions, kv_cache=(k, v), cache_positions=cache_positions,
                              cache_end=cache.end)
            ks.append(k)
            vs.append(v)
        new_cache = KVCache(tuple(ks), tuple(vs), cache_positions, cache.end + tokens.shape[1])
        return self.logits(self.final_norm(x[:, -1:] if last_only else x)), new_cache


# How training's attention (no KV cache) is computed: "einsum" is `attention` above; "xla" and
# "cudnn" are jax.nn.dot_product_attention's implementations ("cudnn": fused flash attention, NVIDIA
# GPUs only).
ATTENTION_IMPLEMENTATIONS = ("einsum", "xla", "cudnn")


def set_training_options(model: nnx.Module, *, compute_dtype: str | None = None,
                         remat: bool | None = None, logits_chunk: int | None = None,
                         attention: str | None = None):
    """Change how `model` computes, in place, without touching its parameters.

    compute_dtype: run matmuls and activations in e.g. "bfloat16" (mixed precision). Parameters stay
    float32, so the optimizer updates float32 masters; norms, softmax, logits and the loss stay
    float32.
    remat: recompute each block's activations during the backward pass instead of storing them: less
    memory for more compute (about one extra forward).
    logits_chunk: score tokens (`sequence_log_probs`) this many at a time, so the float32 [B, T, V]
    logits never exist at once: with Gemma's 262k vocabulary they are 1 GB per 1,024 tokens. 0 turns
    it off.
    attention: one of ATTENTION_IMPLEMENTATIONS, for the forward and backward passes without a KV
    cache.
    Returns the model.
    """
    if compute_dtype is not None:
        dtype = jnp.dtype(compute_dtype)
        for _, module in nnx.iter_modules(model):
            if hasattr(module, "dtype"):  # nnx.Linear, nnx.Embed, LoRALinear
                module.dtype = dtype
            if isinstance(getattr(module, "config", None), ModelConfig):  # the KV cache's dtype
                module.config = dataclasses.replace(module.config, dtype=dtype.name)
    if remat is not None:
        model.remat = remat
    if logits_chunk is not None:
        if logits_chunk < 0:
            raise ValueError(f"logits_chunk must be >= 0 (0: off), got {logits_chunk}")
        model.logits_chunk = logits_chunk or None
    if attention is not None:
        if attention not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLEMENTATIONS}, "
                             f"got {attention!r}")
        for _, module in nnx.iter_modules(model):
            if isinstance(module, Attention):
                module.implementation = attention
    return model
