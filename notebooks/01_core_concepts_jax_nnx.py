# %% [markdown]
# # Phase 1 · Core concepts, JAX and Flax NNX
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/01_core_concepts_jax_nnx.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - tell apart the four families of post-training (SFT, preference tuning, RL, distillation) by where their
#   training signal comes from, and compute each loss on a toy example;
# - estimate training and inference memory for a real model from its config;
# - use JAX's `jit`, `grad`, `vmap` and pytrees, and predict when `jit` traces and compiles again;
# - spot and fix two recompile traps: strings passed to `jit`, and ragged batches;
# - build, inspect, split/merge and train a Flax NNX module, choosing what trains with `wrt`.
#
# **Prerequisites:** Python and numpy; what a gradient and a softmax are. No GPU or TPU needed.
# **Time:** about 90 minutes to read and run (the `ci` profile executes it in well under 2 minutes).
# **Notes:** [phase 1 mind map](../course/01_core_concepts_jax_nnx.md) ·
# **Exercises:** [phase 1 exercises](../exercises/01_jax_nnx_exercises.ipynb)

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
profile = setup()

# %%
import functools
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

# %% [markdown]
# ## 1. Why post-training
#
# A pretrained ("base") model has read a lot of text and continues any prompt plausibly; it does not yet
# follow instructions, prefer helpful answers or reason reliably. Post-training adjusts it with far less data
# and compute than pretraining took. The methods differ in **where the target comes from**:
#
# | family | learns from | signal | this course |
# |---|---|---|---|
# | SFT (supervised fine-tuning) | demonstrations: prompt → good answer | cross-entropy on the answer tokens | phase 3 (+ LoRA, phase 4) |
# | preference tuning (DPO, ORPO) | pairs: a chosen and a rejected answer | raise the chosen one *relative to a frozen reference* | phase 5 |
# | RL (GRPO, PPO) | a reward on the model's own samples | push up samples that beat their group | phase 6 |
# | distillation | a teacher model's full distribution | match the teacher's probabilities | phase 7 |
#
# All four end up as a loss on the model's log-probabilities. Below, one 5-token vocabulary and one next-token
# distribution stand in for a model, and each family gets its loss and its gradient.

# %%
logits = jnp.array([2.0, 1.0, 0.5, -1.0, -2.0])  # the model's scores for tokens 0..4
ref_logits = jnp.array([1.5, 1.5, 0.0, -1.0, -2.0])  # a frozen copy taken before training
teacher_logits = jnp.array([3.0, 0.5, 0.0, -1.0, -3.0])  # a larger model's scores
ref_logp = jax.nn.log_softmax(ref_logits)


def sft_loss(logits):  # a demonstration says the answer is token 1
    return -jax.nn.log_softmax(logits)[1]


def dpo_loss(logits, beta=0.1):  # a person preferred token 1 (chosen) over token 0 (rejected)
    logp = jax.nn.log_softmax(logits)
    margin = (logp[1] - ref_logp[1]) - (logp[0] - ref_logp[0])
    return -jax.nn.log_sigmoid(beta * margin)


def rl_loss(logits):  # the model sampled 4 answers; a checker rewarded only token 2
    samples, rewards = jnp.array([0, 2, 1, 0]), jnp.array([0.0, 1.0, 0.0, 0.0])
    advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)  # GRPO: better than the group?
    return -jnp.mean(advantages * jax.nn.log_softmax(logits)[samples])


def kd_loss(logits, t=2.0):  # match the teacher's softened distribution: KL(teacher || student)
    p_teacher = jax.nn.softmax(teacher_logits / t)
    return t**2 * jnp.sum(p_teacher * (jnp.log(p_teacher) - jax.nn.log_softmax(logits / t)))


# %%
# NBVAL_CHECK_OUTPUT
print(f"{'loss':<6}{'value':>8}   update direction on tokens 0..4 (-gradient)")
for name, fn in [("SFT", sft_loss), ("DPO", dpo_loss), ("RL", rl_loss), ("KD", kd_loss)]:
    value, grad = jax.value_and_grad(fn)(logits)
    print(f"{name:<6}{float(value):>8.4f}   " + " ".join(f"{round(float(g), 3) + 0.0:+.3f}" for g in -grad))

# %% [markdown]
# Read the update directions: SFT pulls token 1 up and everything else down; DPO moves tokens 0 and 1
# against each other, scaled by how far they already moved from the reference; RL pushes up the
# rewarded sample (token 2) and down the ones that lost to it; distillation pulls every token toward the
# teacher's whole distribution, so it carries more information per example than a single label.

# %% [markdown]
# ## 2. Memory: training versus inference
#
# Count bytes per parameter. **Training** in float32 with Adam keeps the weights (4 B), their gradients (4 B)
# and two Adam moments (8 B): 16 bytes per parameter, before activations. **Inference** keeps the weights
# (2 B in bfloat16) plus the **KV cache**: for every layer, the keys and values of every token seen so far.
# LoRA (phase 4) freezes the weights, so only small adapters need gradients and optimizer state.
#
# The configs of the models this course knows give exact parameter counts.

# %%
from tunix_lite.models import get_config

GiB = 2**30


def count_params(c):
    attn = c.embed_dim * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads)  # q, o and k, v projections
    mlp = 3 * c.embed_dim * c.mlp_dim  # gate, up, down
    norms = (4 if c.sandwich_norm else 2) * c.embed_dim + (2 * c.head_dim if c.qk_norm else 0)
    head = 0 if c.tie_embeddings else c.vocab_size * c.embed_dim
    return c.vocab_size * c.embed_dim + c.num_layers * (attn + mlp + norms) + c.embed_dim + head


def kv_cache_bytes(c, batch, tokens, bytes_per_value=2):
    return 2 * c.num_layers * c.num_kv_heads * c.head_dim * bytes_per_value * batch * tokens  # 2: keys and values


def memory_gib(name, batch=8, tokens=4096, lora_fraction=0.01):
    c, n = get_config(name), count_params(get_config(name))
    return {"params": n, "train fp32+Adam": 16 * n / GiB, "LoRA (bf16 base)": (2 * n + 16 * lora_fraction * n) / GiB,
            "infer bf16": 2 * n / GiB, "KV 8x4096 bf16": kv_cache_bytes(c, batch, tokens) / GiB}


# %%
# NBVAL_CHECK_OUTPUT
models = ["gemma3-270m", "qwen3-0.6b", "gemma3-1b", "llama3.2-1b"]
columns = list(memory_gib(models[0]))
print(f"{'GiB':<13}" + "".join(f"{c:>18}" for c in columns))
for m in models:
    row = memory_gib(m)
    print(f"{m:<13}{row['params']:>18,}" + "".join(f"{row[c]:>18.2f}" for c in columns[1:]))

# %%
fig, ax = plt.subplots(figsize=(7, 3))
parts = {"weights": 4, "gradients": 4, "Adam moments": 8}
for i, m in enumerate(["gemma3-270m", "gemma3-1b"]):
    n, bottom = count_params(get_config(m)), 0.0
    for j, (label, nbytes) in enumerate(parts.items()):
        ax.bar(f"{m}\ntrain", nbytes * n / GiB, bottom=bottom, color=f"C{j}", label=label if i == 0 else None)
        bottom += nbytes * n / GiB
    ax.bar(f"{m}\ninfer", 2 * n / GiB, color="C0")
    ax.bar(f"{m}\ninfer", kv_cache_bytes(get_config(m), 8, 4096) / GiB, bottom=2 * n / GiB, color="C3",
           label="KV cache (8x4096)" if i == 0 else None)
ax.set_ylabel("GiB (activations not counted)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Two things to notice. Gemma 3 has a 262k-token vocabulary, so in the 270M model almost two thirds of the
# parameters are the embedding table. And its KV cache is small because it has a single KV head (grouped-query
# attention, phase 2); a model with 8 KV heads pays 8× more per token. Activations, which grow with
# batch × sequence length, come on top of the training column; phase 3 measures them.

# %% [markdown]
# ## 3. JAX: numpy that can be transformed
#
# `jax.numpy` looks like numpy, but arrays are immutable and every function can be transformed:
# `grad` differentiates it, `vmap` vectorises it, `jit` compiles it with XLA. These transformations compose.

# %%
# NBVAL_CHECK_OUTPUT
x = jnp.arange(5.0)
y = x.at[0].set(10.0)  # arrays are immutable: .at[...] returns a new array
print(x, y)


# %% [markdown]
# `jax.grad` turns a scalar function into its gradient function. Check it against the closed form.

# %%
# NBVAL_CHECK_OUTPUT
def loss(w, x, y):
    return jnp.mean((w * x - y) ** 2)


x, y = jnp.array([1.0, 2.0, 3.0]), jnp.array([2.0, 4.0, 7.0])
w = 1.5
print(f"jax.grad   : {float(jax.grad(loss)(w, x, y)):.5f}")
print(f"closed form: {float(jnp.mean(2 * (w * x - y) * x)):.5f}")

# %% [markdown]
# `jax.vmap` maps a function over a batch axis without a Python loop. Composed with `grad`, it gives one
# gradient **per example**, something plain backprop does not: useful to find the examples that dominate an update.

# %%
# NBVAL_CHECK_OUTPUT
per_example_grad = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))  # w shared, x and y batched
print(per_example_grad(w, x[:, None], y[:, None]))

# %% [markdown]
# A **pytree** is any nest of lists, tuples, dicts (and registered classes such as NNX state) with arrays at the
# leaves. Model parameters are pytrees, and `jax.tree.map` applies a function leaf by leaf, e.g. an SGD update.

# %%
# NBVAL_CHECK_OUTPUT
params = {"embed": jnp.ones((4, 2)), "layers": [{"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}]}
grads = jax.tree.map(jnp.ones_like, params)
new_params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
print(len(jax.tree.leaves(params)), "leaves:", jax.tree.map(jnp.shape, params))
print("updated b:", new_params["layers"][0]["b"])


# %% [markdown]
# `jax.jit` compiles a function for the shapes and dtypes it is called with. The first call pays for
# tracing and compiling; later calls with the same shapes reuse the compiled program.

# %%
def time_call(fn, *args, repeat=5):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))  # jax is asynchronous: wait for the result before stopping the clock
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeat):
        jax.block_until_ready(fn(*args))
    return first, (time.perf_counter() - start) / repeat


def wiggle(x):  # 30 small elementwise ops: eager runs 30 passes over memory, jit fuses them into one
    for _ in range(10):
        x = jnp.sin(x) * 1.01 + 0.1 * jnp.tanh(x)
    return x


xs = jnp.linspace(0, 1, 1_000_000)
first, later = time_call(jax.jit(wiggle), xs)
_, eager = time_call(wiggle, xs)
print(f"jit first call {first * 1e3:.1f} ms (trace + compile), later calls {later * 1e3:.2f} ms, "
      f"without jit {eager * 1e3:.2f} ms")


# %% [markdown]
# ## 4. Tracing and static shapes
#
# `jit` does not run your Python function on data. It runs it once on **tracers**, abstract values that know
# only a shape and a dtype, records the operations, and compiles them. Python side effects such as `print`
# therefore happen at trace time only, and a new shape means a new trace. The recorded program is a *jaxpr*.

# %% [markdown]
# **Predict, then run.** The cell below calls one jitted function four times, with 3, 3, 4 and 3 elements.
# The function prints a line each time Python runs its body. Write down how many `tracing for` lines you
# expect, and after which calls.

# %%
# NBVAL_CHECK_OUTPUT
@jax.jit
def double(x):
    print("  tracing for", x.shape, x.dtype)  # runs only while tracing
    return 2 * x


for n in [3, 3, 4, 3]:
    print("call with", n, "elements")
    double(jnp.ones(n))

# %%
print(jax.make_jaxpr(lambda x: jnp.sum(2 * x))(jnp.ones(3)).pretty_print(use_color=False))


# %% [markdown]
# ### Pitfall 1: a string argument to `jit`
#
# Configuration strings ("mean" or "max", a loss name) are not arrays, so `jit` cannot trace them:

# %%
def pool(x, how):
    return x.mean() if how == "mean" else x.max()


try:
    jax.jit(pool)(jnp.arange(4.0), "mean")
except TypeError as e:
    print("TypeError:", str(e).strip().splitlines()[0])

# %% [markdown]
# Marking the argument **static** makes it part of the compile key: it is fine for a handful of values, and
# each new value compiles again. Never pass per-example data (a label, a prompt) as a static argument: turn it
# into an array outside `jit` (e.g. map strings to integer ids).

# %%
# NBVAL_CHECK_OUTPUT
traces = []


@functools.partial(jax.jit, static_argnames="how")
def pool(x, how):
    traces.append(how)  # a Python side effect: runs once per trace
    return x.mean() if how == "mean" else x.max()


for how in ["mean", "max", "mean", "max", "mean"]:
    pool(jnp.arange(4.0), how)
print(f"5 calls, {len(traces)} traces: {traces}")

# %% [markdown]
# ### Pitfall 2: ragged batches recompile
#
# Text batches have different lengths. If each batch is padded only to its own longest sequence, nearly every
# batch has a new shape and `jit` compiles again. Below, a small encoder runs on a few ragged batches,
# first as they come, then left-padded to multiples of 32 by the library's sampler helper `left_pad`
# (padding gets position -1; a mask keeps it out of the mean).

# %% [markdown]
# **Predict, then run.** There are `profile.steps // 2` batches (15 in the `ci` profile) of 4 sequences,
# each 5 to 99 tokens long. How many times will `encode` compile when every batch is padded to its own
# longest sequence? And when every batch is padded to a multiple of 32?

# %%
from tunix_lite.sampler import left_pad

rng = np.random.default_rng(0)
n_batches = profile.steps // 2  # 15 in the ci profile
batches = [[rng.integers(1, 100, size=n).tolist() for n in rng.integers(5, 100, size=4)] for _ in range(n_batches)]
table = jax.random.normal(jax.random.key(1), (100, 128))
weights = jax.random.normal(jax.random.key(2), (128, 128)) / 12
compiles = []


@jax.jit
def encode(tokens, mask):  # tokens [B, T] -> one vector per sequence [B, 128]
    compiles.append(tokens.shape)
    x = table[tokens]
    for _ in range(2):
        x = jnp.tanh(x @ weights)
    mask = mask[..., None].astype(x.dtype)
    return (x * mask).sum(1) / mask.sum(1)


def run(pad_fn):
    compiles.clear()
    start = time.perf_counter()
    for batch in tqdm(batches, leave=False):
        tokens, positions = pad_fn(batch)
        jax.block_until_ready(encode(tokens, positions >= 0))
    return time.perf_counter() - start, len(compiles)


ragged_time, ragged_compiles = run(lambda b: left_pad(b, pad_id=0, multiple=1))  # pad to the batch's own longest
bucket_time, bucket_compiles = run(lambda b: left_pad(b, pad_id=0, multiple=32))

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(batches)} batches: padded to their own length -> {ragged_compiles} compiles; "
      f"to multiples of 32 -> {bucket_compiles} compiles")

# %%
fig, ax = plt.subplots(figsize=(5, 2.5))
ax.barh(["own length", "buckets of 32"], [ragged_time, bucket_time], color=["C3", "C2"])
ax.set_xlabel(f"seconds for {len(batches)} batches (mostly compiling)")
plt.show()
print(f"own length {ragged_time:.2f} s, buckets {bucket_time:.2f} s")

# %% [markdown]
# Bucketing wastes a little compute on padding and saves a compile per batch. To find unexpected
# recompiles in your own code, set `jax.config.update("jax_log_compiles", True)`: every compile is logged
# with the function name.

# %% [markdown]
# ## 5. Flax NNX: modules that hold their state
#
# An NNX module is a plain Python object: layers are attributes, parameters are `nnx.Param` variables, and
# random keys come in through `nnx.Rngs`. Here is a character-level bigram language model: an embedding
# table and an output layer that predicts the next character from the current one.

# %%
text = ("post-training turns a model that continues text into one that follows instructions. "
        "we teach it with examples, preferences, rewards and teachers. ") * 4
vocab = sorted(set(text))
ids = jnp.array([vocab.index(ch) for ch in text])
inputs, targets = ids[:-1], ids[1:]


class Bigram(nnx.Module):
    def __init__(self, vocab_size, dim, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(vocab_size, dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab_size, rngs=rngs)

    def __call__(self, tokens):  # [T] -> logits [T, V]
        return self.head(nnx.gelu(self.embed(tokens)))


model = Bigram(len(vocab), 32, rngs=nnx.Rngs(0))

# %%
# NBVAL_CHECK_OUTPUT
for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    print("/".join(map(str, path)), var[...].shape)
print("parameters:", sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))))

# %% [markdown]
# `jax` transformations work on pytrees, not objects. `nnx.split` separates a module into a static
# **graphdef** (its structure) and **state** (its arrays, a pytree, filtered by variable type), and
# `nnx.merge` rebuilds it. `nnx.jit` and `nnx.grad` do this for you; doing it by hand shows what they do.

# %%
# NBVAL_CHECK_OUTPUT
graphdef, params, rest = nnx.split(model, nnx.Param, ...)  # `...` collects everything not matched before


@jax.jit
def pure_forward(params, tokens):
    return nnx.merge(graphdef, params, rest)(tokens)


print("same logits:", bool(jnp.allclose(pure_forward(params, inputs[:8]), model(inputs[:8]))))


# %% [markdown]
# ### Training with `nnx.Optimizer`
#
# `nnx.Optimizer(model, tx, wrt=nnx.Param)` holds the optax state for the variables selected by `wrt`.
# Inside an `nnx.jit` step, `nnx.value_and_grad` differentiates a loss that takes the model, and
# `optimizer.update(model, grads)` updates the model in place.

# %%
@nnx.jit
def lm_step(model, optimizer, inputs, targets):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(inputs), targets).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


optimizer = nnx.Optimizer(model, optax.adam(3e-2), wrt=nnx.Param)
losses = [float(lm_step(model, optimizer, inputs, targets)) for _ in tqdm(range(10 * profile.steps))]  # ~1 ms/step

# %%
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.plot(losses, label="bigram model")
ax.axhline(np.log(len(vocab)), color="gray", ls="--", label=f"uniform guess, ln {len(vocab)}")
ax.set_xlabel("step")
ax.set_ylabel("cross-entropy (nats)")
ax.legend()
plt.show()
print(f"loss {losses[0]:.2f} -> {losses[-1]:.2f} nats per character")

# %% [markdown]
# Generation: sample the next character from the predicted distribution and feed it back in. (Always taking
# the most likely character would loop: a bigram model only sees one character of context.)

# %%
key, ch, out = jax.random.key(0), vocab.index("t"), "t"
for _ in range(60):
    key, sub = jax.random.split(key)
    ch = int(jax.random.categorical(sub, model(jnp.array([ch]))[0]))
    out += vocab[ch]
print(repr(out))

# %% [markdown]
# ### Choosing what trains: `wrt`
#
# The `wrt` filter decides which variables get gradients and optimizer state. Training only part of a model
# is the idea behind LoRA (phase 4). Here only the output layer trains; the embedding stays frozen.

# %%
# NBVAL_CHECK_OUTPUT
head_only = nnx.All(nnx.Param, nnx.PathContains("head"))
head_optimizer = nnx.Optimizer(model, optax.adam(3e-2), wrt=head_only)


@nnx.jit
def head_step(model, optimizer, inputs, targets):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(inputs), targets).mean()

    loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, head_only))(model)
    optimizer.update(model, grads)
    return loss


embed_before, head_before = model.embed.embedding[...], model.head.kernel[...]
head_step(model, head_optimizer, inputs, targets)
print("embedding changed:", not bool(jnp.array_equal(embed_before, model.embed.embedding[...])))
print("head changed:     ", not bool(jnp.array_equal(head_before, model.head.kernel[...])))
print("optimizer state holds", len(jax.tree.leaves(nnx.state(head_optimizer, nnx.OptState))), "arrays")

# %% [markdown]
# ## Recap
#
# - Post-training families differ in the source of the target: demonstrations (SFT), pairs (DPO/ORPO),
#   rewards on own samples (RL), a teacher's distribution (distillation). All are losses on log-probabilities.
# - Full fine-tuning in float32 with Adam costs about 16 bytes per parameter plus activations; inference costs
#   the weights plus a KV cache that grows with layers × KV heads × tokens.
# - `jit` traces once per distinct shape, dtype and static argument. Keep shapes few (pad to buckets, mask the
#   padding) and keep strings and per-example values out of static arguments.
# - NNX modules hold their variables; `split`/`merge` convert to and from pytrees; `nnx.Optimizer(..., wrt=...)`
#   and `nnx.DiffState` choose what trains.
#
# ## Quiz
#
# 1. DPO needs a frozen reference model; SFT does not. Why?
# 2. A 1B-parameter model, float32, Adam: roughly how much memory before activations?
# 3. You call a jitted function on batches of shape `[8, 37]`, `[8, 41]`, `[8, 37]`. How many compiles?
# 4. Why does `print` inside a jitted function print only sometimes?
# 5. What does `wrt=nnx.All(nnx.Param, nnx.PathContains("head"))` change about the optimizer's memory?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
#
# **Next:** the [phase 1 exercises](../exercises/01_jax_nnx_exercises.ipynb), then
# [phase 2: Gemma 3 from scratch](02_gemma3_from_scratch.ipynb). Course map: [syllabus](../course/SYLLABUS.md).
