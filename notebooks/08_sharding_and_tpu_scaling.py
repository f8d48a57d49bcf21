# %% [markdown]
# # Phase 8 · Sharding and TPU scaling: one training step on many devices
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/08_sharding_and_tpu_scaling.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - lay devices out as a **mesh** with named axes (`data`, `fsdp`, `tensor`) and draw how an array is split on it;
# - read a model's **logical axes** and the one **rules table** that maps them onto the mesh, and predict each
#   weight's layout, including Gemma's single key/value head under tensor parallelism;
# - train the same model with **data parallelism, FSDP, tensor parallelism and FSDP + TP** and check that every
#   one gives the loss and the weights one device gives;
# - count the **collectives** (all-reduce, all-gather, reduce-scatter) in each compiled step and say which
#   strategy moves weights, gradients or activations;
# - compare the **planner's** memory per device with XLA's own plan, and use it to decide what fits on a TPU
#   v5e-8 and how fast it could run (the roofline, MFU);
# - say what changes on a real TPU: bfloat16, the interconnect, several hosts.
#
# **Prerequisites:** [phase 3](03_supervised_fine_tuning.ipynb) (the trainer, the masked loss);
# [phase 2](02_gemma3_from_scratch.ipynb) (attention heads, the MLP). **Time:** about 3 h with the exercises.
#
# **Where it runs.** On a laptop, Colab's CPU runtime and in CI, the setup cell asks XLA for **8 fake CPU
# devices** (`XLA_FLAGS=--xla_force_host_platform_device_count=8`), which only works *before* jax is imported:
# that is why it is the first cell. They share your CPU cores, so they show what sharding *does* (layouts,
# collectives, equal results, memory per device), never a speed-up. On a Kaggle TPU v5e-8 or a v3-8 the same
# cells use the 8 real TPU devices; on a runtime with one accelerator chip they fall back to the fake CPU devices.

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
profile = setup(fake_devices=8)  # meshes of 8 devices: fake CPU ones where there is no 8-chip accelerator

# %%
import itertools
import os
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from tqdm.auto import tqdm

import tunix_lite
from tunix_lite import planner, sharding
from tunix_lite.data.sft import SFTBatches, tokenize_sft
from tunix_lite.data.synthetic import make_splits
from tunix_lite.models import Transformer, get_config
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer

devices = jax.devices()
if len(devices) < 8:  # one chip (Colab's v5e-1, a single GPU): the lesson runs on the 8 fake CPU devices
    devices = jax.devices("cpu")
devices = devices[:8]
print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
print(f"the lesson's devices: {len(devices)} x {devices[0].device_kind} ({devices[0].platform})")

# %% [markdown]
# ## 1. A mesh: devices on a grid with named axes
#
# A **mesh** arranges the devices in an n-dimensional grid and names each axis. tunix_lite always uses three:
#
# | mesh axis | what is split over it | the strategy it gives |
# |---|---|---|
# | `data` | the batch's rows; every device holds all the weights | data parallelism (DP) |
# | `fsdp` | the batch's rows **and** every weight (gathered layer by layer when needed) | fully sharded data parallelism (FSDP, ZeRO-3) |
# | `tensor` | heads, MLP columns and the vocabulary, inside each matmul | tensor parallelism (TP, Megatron) |
#
# A strategy only chooses the axis sizes; an axis of size 1 splits nothing. 8 devices as each strategy:

# %%
# NBVAL_CHECK_OUTPUT
meshes = {name: sharding.make_mesh(**sharding.strategy_shape(name, len(devices)), devices=devices)
          for name in sharding.STRATEGIES}
for name, mesh in meshes.items():
    print(f"{name:8} {dict(mesh.shape)}  {sharding.STRATEGIES[name]}")

# %% [markdown]
# Arrays are placed on a mesh with a `PartitionSpec`: one entry per array dimension naming the mesh axis (or axes)
# it is split over, `None` for "whole on every device". Take a `[256, 768]` MLP weight whose dimensions are
# `embed` (the model dimension) and `mlp`.
#
# **Predict, then run.** Under each strategy, which devices hold which block of it? How many copies of each
# element exist on the 8 devices?

# %%
w = jnp.arange(256 * 768, dtype=jnp.float32).reshape(256, 768)
for name, mesh in meshes.items():
    spec = sharding.logical_to_spec(("embed", "mlp"), w.shape, mesh)
    placed = jax.device_put(w, NamedSharding(mesh, spec))
    copies = sum(s.data.size for s in placed.addressable_shards) // w.size
    print(f"{name}: {spec}, each device holds {placed.addressable_shards[0].data.shape}, {copies} cop"
          f"{'y' if copies == 1 else 'ies'} in all")
    jax.debug.visualize_array_sharding(placed)

# %% [markdown]
# Data parallelism keeps 8 copies (every device holds everything); FSDP and TP each keep one copy, split by rows
# or by columns; FSDP + TP splits both ways on a 4 x 2 grid.
#
# ## 2. Logical axes and the one rules table
#
# Nobody writes a `PartitionSpec` per weight. Every parameter of a tunix_lite model carries **logical axes** in
# its metadata (`("embed", "heads")` for a query projection), and one table maps logical axes to mesh axes. The
# activations get the same treatment at block boundaries (`batch`, `sequence`, `act_embed`).

# %%
# NBVAL_CHECK_OUTPUT
for logical, mesh_axes in sharding.RULES.items():
    print(f"{logical:10} -> {mesh_axes}")

# %% [markdown]
# Two rules keep every model runnable on every mesh: a dimension is split only when its mesh axes divide it, and
# a fused `heads x head_dim` dimension only along **whole heads**.
#
# The lesson's model is the course's tiny Gemma with 8 query heads and, as in every Gemma 3, **one** key/value
# head (multi-query attention). **Predict, then run:** under `tp` (8-way tensor parallelism), how are the query
# projection `q_proj` `[256, 8 x 32]` and the key projection `k_proj` `[256, 1 x 32]` split?

# %%
# NBVAL_CHECK_OUTPUT
CI = profile.name == "ci"
CONFIG = get_config("tiny").replace(num_layers=1 if CI else 2, num_heads=8, head_dim=32)
model = Transformer(CONFIG, rngs=nnx.Rngs(0))
layouts = {name: sharding.param_shardings(model, mesh) for name, mesh in meshes.items()}
print(f"{'parameter':32} {'logical axes':24}" + "".join(f"{name:24}" for name in meshes))
for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    key = ".".join(map(str, path))
    if key.startswith("layers.") and not key.startswith("layers.0."):
        continue
    axes = str(var.get_metadata().get("logical_axes"))
    print(f"{key:32} {axes:24}" + "".join(f"{str(layouts[name][key].spec):24}" for name in meshes))

# %% [markdown]
# `k_proj` holds one head: it cannot be split 8 ways (or even 2), so it stays whole on every tensor shard while
# `q_proj` splits its 8 heads. The norms have no logical axes: they are tiny, and replicated.
#
# ## 3. The same training step on every strategy
#
# `Trainer(model, tx, loss_fn, mesh=mesh)` is the only change from phase 3. It places the model by the rules
# *before* building the optimizer (so the Adam moments are created already sharded, like the parameters they
# follow), splits every batch's rows over `data x fsdp`, and runs the step under the mesh; XLA inserts the
# communication. DPO's reference, GRPO's KL anchor and a distillation teacher (`frozen=`) are placed by the same
# rules, and a YAML config says it with one line: `mesh: fsdp`.
#
# We train 5 copies of the model from the same initialisation on the same batches of the synthetic tasks: one
# device, then each strategy on 8 devices.

# %%
# NBVAL_CHECK_OUTPUT
_, tokenizer = tunix_lite.load("tiny")
STEPS, BATCH, SEQ = (3, 8, 64) if CI else (20, 16, 128)
records = make_splits(8 * STEPS * BATCH, 16, 16, seed=0)["train"]
data = tokenize_sft(records, tokenizer, seq_len=SEQ, truncation="drop")
batches = list(itertools.islice(SFTBatches(data, BATCH, seed=0, packing=True).stream(), STEPS))
print(f"{STEPS} batches of {BATCH} rows x {SEQ} tokens")

# %%
runs = {}
for name in tqdm(["one device", *meshes], desc="strategies"):
    mesh = meshes.get(name)  # None: one device
    trainer = Trainer(Transformer(CONFIG, rngs=nnx.Rngs(0)), optax.adamw(3e-3), lm_loss, mesh=mesh)
    start = time.perf_counter()
    compiled = trainer.lower(batches[0]).compile()  # compiled ahead of time to read it; the steps reuse it
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for batch in batches:
        trainer.step(batch)
    history = trainer.history  # waits for the last step
    runs[name] = {
        "losses": [h["loss"] for h in history], "compile_s": compile_s,
        "step_s": (time.perf_counter() - start) / STEPS,
        "collectives": planner.list_collectives(compiled.as_text()),
        "memory": compiled.memory_analysis(),
        "params": jax.tree.map(np.asarray, nnx.state(trainer.model, nnx.Param)),
        "layout": {".".join(map(str, p)): v.get_value().sharding for p, v in nnx.to_flat_state(nnx.state(trainer.model))},
    }


# %% [markdown]
# **Predict, then run.** The sharded programs add up the same numbers in a different order. Equal to the bit, equal
# to float32 noise, or visibly different? And the weights after three AdamW steps?

# %%
def max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


one = runs["one device"]
print(f"{'strategy':10} {'max |loss diff|':>16} {'max |param diff|':>17} {'compile (s)':>12} {'step (s)':>9}")
for name, run in runs.items():
    loss_diff = max(abs(a - b) for a, b in zip(run["losses"], one["losses"]))
    print(f"{name:10} {loss_diff:16.1e} {max_diff(run['params'], one['params']):17.1e} {run['compile_s']:12.1f} "
          f"{run['step_s']:9.2f}")

# %%
# NBVAL_CHECK_OUTPUT
for name, run in runs.items():
    same_loss = max(abs(a - b) for a, b in zip(run["losses"], one["losses"])) < 1e-4
    same_params = max_diff(run["params"], one["params"]) < 1e-3
    laid_out = all(run["layout"][key].spec == s.spec for key, s in layouts.get(name, {}).items())
    print(f"{name:10} loss as one device (1e-4): {same_loss}  weights as one device (1e-3): {same_params}  "
          f"layout as the rules say: {laid_out}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
for name, run in runs.items():
    axes[0].plot(range(1, STEPS + 1), run["losses"], "o-" if name == "one device" else "--", label=name, alpha=0.8)
    if name != "one device":
        diff = np.abs(np.array(run["losses"]) - np.array(one["losses"])) + 1e-12
        axes[1].semilogy(range(1, STEPS + 1), diff, "o-", label=name)
axes[0].set(xlabel="step", ylabel="training loss", title="the same curve on every strategy")
axes[1].axhline(1e-4, color="gray", ls=":", label="float32 noise bound used above")
axes[1].set(xlabel="step", ylabel="|loss - one device's|", title="how far apart (log scale)")
for ax in axes:
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The losses differ by float32 rounding (around 1e-7 to 1e-6 of a loss near 7): the programs are the same
# mathematics. The weights differ more (about 1e-4), and that is AdamW, not sharding: Adam divides each gradient by
# its own running size, so for a weight whose gradient is nearly zero, rounding noise in that gradient becomes a
# full-size step of random sign. With plain SGD, where a step is proportional to the gradient, the test suite
# finds the sharded weights equal to one device's to 1e-6 after three steps (`tests/test_sharding.py`). The step times above are **not** a speed comparison: 8 fake devices share a couple of CPU cores,
# so the sharded steps only pay the communication overhead. On a TPU they are real.
#
# ## 4. What each strategy sends: the collectives in the compiled step
#
# XLA turns the layouts into communication. Reading the compiled program (`compiled.as_text()`, its HLO) and
# counting the arrays each kind of collective moves tells the strategies apart:
#
# - **all-reduce**: every device ends with the sum (data parallelism's gradients; TP's partial matmul outputs);
# - **all-gather**: every device ends with the whole array (FSDP gathering a weight before using it);
# - **reduce-scatter**: sum, then keep only your slice (FSDP's gradients, each device keeping its shard).
#
# **Predict, then run.** Which strategy never gathers a weight? Which one has no reduce-scatter? Which one's
# all-reduces carry `[rows x tokens, 256]` activations instead of weights?

# %%
kinds = ["all-reduce", "all-gather", "reduce-scatter"]
strategies = list(meshes)
counts = {name: {k: sum(kind == k for kind, _ in runs[name]["collectives"]) for k in kinds} for name in strategies}
fig, ax = plt.subplots(figsize=(8, 3.2))
for i, k in enumerate(kinds):
    ax.bar(np.arange(len(strategies)) + (i - 1) * 0.27, [counts[s][k] for s in strategies], 0.27, label=k)
ax.set_xticks(range(len(strategies)), strategies)
ax.set(ylabel="arrays moved per step", title=f"collectives in the compiled step ({CONFIG.num_layers} block(s))")
ax.legend()
plt.show()
for name in strategies:
    print(f"{name:8} {counts[name]}")

# %%
# NBVAL_CHECK_OUTPUT
tokens_per_shard = {name: BATCH // sharding.batch_shards(mesh) * SEQ for name, mesh in meshes.items()}


def activation_sums(name):
    """All-reduces / reduce-scatters of [tokens, D] arrays: the activations tensor parallelism adds up."""
    def dims(shape):
        return tuple(int(d) for d in shape[shape.index("[") + 1:shape.index("]")].split(",") if d)
    return sum(kind in ("all-reduce", "reduce-scatter") and dims(shape)[-1:] == (CONFIG.embed_dim,)
               and np.prod(dims(shape)[:-1]) == tokens_per_shard[name] for kind, shape in runs[name]["collectives"])


for name in strategies:
    print(f"{name:8} gathers weights: {counts[name]['all-gather'] > 0!s:5}  reduce-scatters gradients: "
          f"{counts[name]['reduce-scatter'] > 0!s:5}  sums activations: {activation_sums(name) > 0}")

# %% [markdown]
# DP all-reduces each gradient once per step and never touches the weights; FSDP gathers every weight matrix and
# reduce-scatters its gradient (more traffic than DP, an eighth of the memory); TP sums activations after the
# attention and MLP projections, forward and backward, so its traffic grows with the batch, not the model. The
# test suite (`tests/test_sharding.py`) counts these too, so a rule change that silently replicates everything
# fails a test.
#
# ## 5. Memory per device: the planner against XLA
#
# `tunix_lite.planner` predicts a step's memory per device without running it: parameters, gradients and the
# AdamW moments **exactly** (the model built from shapes alone, split by the same rules), activations and the
# `[B, T, V]` logits **estimated** from the block's structure. XLA's compiler reports what it actually
# allocated for the compiled step (`compiled.memory_analysis()`).
#
# **Predict, then run.** Which strategy needs the least memory per device here, and which the most?

# %%
one_device = {"data": 1, "fsdp": 1, "tensor": 1}
planned, measured = {}, {}
for name, run in runs.items():
    shape = dict(meshes[name].shape) if name in meshes else one_device
    planned[name] = planner.plan_memory(CONFIG, CONFIG, shape, batch=BATCH, seq=SEQ, compute_dtype="float32")
    m = run["memory"]
    measured[name] = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                      - m.alias_size_in_bytes)

MiB = 2**20
names = list(runs)
fig, ax = plt.subplots(figsize=(9, 3.8))
bottom = np.zeros(len(names))
for category in dict.fromkeys(k for n in names for k in planned[n]):  # FSDP adds two categories of its own
    values = np.array([planned[n].get(category, 0) for n in names]) / MiB
    ax.bar(names, values, bottom=bottom, label=category.split(" (")[0])
    bottom += values
ax.hlines([measured[n] / MiB for n in names], np.arange(len(names)) - 0.4, np.arange(len(names)) + 0.4, colors="k",
          linewidth=3, label="XLA's plan (measured)")
ax.set(ylabel="MiB per device", title="memory per device: planned (stacked) vs XLA (black)")
ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
fig.tight_layout()
plt.show()
for n in names:
    total = sum(planned[n].values())
    print(f"{n:10} planned {total / MiB:6.1f} MiB  XLA {measured[n] / MiB:6.1f} MiB  "
          f"error {(total - measured[n]) / measured[n]:+.0%}")

# %% [markdown]
# On one device most of the memory is the fixed part (weights, gradients, the two AdamW moments and the step's
# updated copies), and that is what FSDP divides by 8; TP divides it too but keeps more activations per device.
# FSDP has two costs of its own, which the planner counts: each weight is **gathered whole** for the forward and
# kept for the backward, and each gradient exists whole until it is reduce-scattered. With only a few rows per
# device (as here) XLA:CPU keeps less than the planner counts (on one device as under DP: +45% at 2 rows, +18% at 4),
# so the plan errs on the safe side. `benchmarks/scaling.py` and
# `tests/test_sharding_algorithms.py` check the planner within 15% of XLA at 8 rows per device under every strategy.
#
# ## 6. Real chips: will it fit, and how fast could it go?
#
# The same planner works for models you cannot build here, because it only needs their shapes. From a terminal:
#
#     tunix-lite plan --model gemma3-1b --devices v5e-8 --strategy fsdp --batch 32 --seq 1024 --remat --logits-chunk 1024
#
# **Predict, then run.** Gemma 3 1B (about a billion parameters), full fine-tuning with AdamW on a **TPU v5e-8**
# (16 GiB of HBM per chip), batch 32 x 1024 tokens. Does data parallelism fit? Which strategy needs the least
# memory per chip?

# %%
# NBVAL_CHECK_OUTPUT
plans = {name: planner.Plan.make("gemma3-1b", "v5e-8", name, batch=32, seq=1024, remat=True, logits_chunk=1024)
         for name in sharding.STRATEGIES}
print(plans["fsdp"].report())

# %%
GiB = planner.GiB
fig, axes = plt.subplots(1, 2, figsize=(13, 3.8))
bottom = np.zeros(len(plans))
for category in dict.fromkeys(k for p in plans.values() for k in p.memory):
    values = np.array([p.memory.get(category, 0) for p in plans.values()]) / GiB
    axes[0].bar(list(plans), values, bottom=bottom, label=category.split(" (")[0])
    bottom += values
axes[0].axhline(plans["fsdp"].chip.hbm_gib, color="red", ls="--", label="HBM per chip")
axes[0].set(ylabel="GiB per chip", title="Gemma 3 1B, full fine-tuning, v5e-8")
axes[0].legend(fontsize=7)
parts = ["compute", "memory", "collectives"]
for i, part in enumerate(parts):
    axes[1].bar(np.arange(len(plans)) + (i - 1) * 0.27, [p.times[part] * 1e3 for p in plans.values()], 0.27,
                label={"memory": "HBM traffic"}.get(part, part))
axes[1].set_xticks(range(len(plans)), list(plans))
axes[1].set(ylabel="ms per step (lower bound)", title="the roofline: the slowest part sets the step")
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()
for name, p in plans.items():
    print(f"{name:8} {p.total / GiB:5.1f} GiB/chip  fits: {p.fits[name]!s:5}  step >= {p.times['step'] * 1e3:.0f} ms "
          f"({p.times['bound']}-bound)  MFU at best {p.times['mfu']:.0%}")

# %% [markdown]
# Data parallelism keeps a whole copy of the weights, gradients and both Adam moments (16 bytes per parameter,
# plus the step's updated copies) on every chip: it does not fit. FSDP divides all of that by 8, but it also
# holds each weight gathered whole from the forward to the backward, and each gradient whole until it is
# reduce-scattered (the two top bars). XLA:CPU's plan keeps both; XLA on a TPU may gather again in the backward
# and keep less, so read those bars as an upper bound. FSDP + TP gathers only half of each weight (the other half
# is split over `tensor`), so it needs the least. Tensor parallelism divides the fixed part too, but its
# activations are split only along heads and MLP columns, and it sends the most. On these numbers the step is compute-bound for every strategy: the roofline's MFU is an upper bound,
# real runs reach maybe half to two thirds of it.
#
# ## 7. What changes on a real TPU
#
# - **bfloat16.** TPUs multiply in bfloat16: set `compute_dtype: bfloat16` (parameters and Adam moments stay
#   float32). The equality checks of section 3 then hold to bfloat16 noise, not float32's.
# - **Topology.** A v5e-8 is 8 chips on a 2 x 4 grid linked by the inter-chip interconnect (ICI, about
#   200 GB/s per chip one way in the planner); a v3-8 is 4 chips with 2 cores each, 8 JAX devices. FSDP over every
#   device is the default (`mesh: auto`), since the ICI makes gathering weights cheap.
# - **Several hosts.** A pod slice bigger than one host runs one Python process per host, each seeing its own
#   4 or 8 chips. `sharding.initialize_distributed()` calls `jax.distributed.initialize()` (it detects Cloud TPU,
#   SLURM and Open MPI, or reads `JAX_COORDINATOR_ADDRESS`); then `jax.devices()` lists every chip of the slice and
#   every process runs the same program on the global mesh. Each process loads only its own rows of the batch,
#   Orbax writes one checkpoint together from all processes, and only process 0 prints, logs and exports. The
#   test suite runs exactly this with 2 processes over gloo on one machine (`tests/multiprocess_checks.py`).
# - **Pathways.** Google's single-controller runtime drives a whole pod from one Python process: the same
#   `jax.sharding` code, without one process per host.
# - **From a config.** Every trainer (SFT, DPO, GRPO, distillation) reads the shared `mesh:` option:
#   `mesh: fsdp`, `mesh: auto`, or axis sizes such as `mesh: {data: 2, fsdp: 4}`.
#
# On a TPU runtime the cell below times the strategies on the real chips and sets the measured MFU beside the
# planner's ceiling; on CPU it says why it does not.

# %%
if devices[0].platform == "cpu":
    print("fake CPU devices share the same cores: a timed step here measures overhead, not speed "
          f"(one device {one['step_s']:.2f} s/step, fsdp {runs['fsdp']['step_s']:.2f} s/step). "
          "Run this notebook on a Kaggle TPU v5e-8 to time the real chips.")
else:
    kind = devices[0].device_kind.lower()
    chip = next((key for key, names in {"v5e": ("v5 lite", "v5e"), "v6e": ("v6 lite", "v6e"), "v5p": ("v5p",),
                                        "v4": ("v4",), "v3": ("v3",), "h100": ("h100",), "a100": ("a100",)}.items()
                 if any(n in kind for n in names)), None)
    flops = planner.step_flops(CONFIG, BATCH, SEQ)["model"]
    for name in strategies:
        mfu = flops / (runs[name]["step_s"] * len(devices) * planner.CHIPS[chip].tflops * 1e12) if chip else None
        print(f"{name:8} {runs[name]['step_s'] * 1e3:8.1f} ms/step" + (f"  MFU {mfu:.1%}" if chip else ""))
    print("a model this small leaves the chips mostly idle; try CONFIG = get_config('gemma3-1b') with "
          "compute_dtype bfloat16 and a larger batch")

# %% [markdown]
# ## Recap
#
# - A **mesh** names device axes; a **strategy** only chooses their sizes: DP `data=8`, FSDP `fsdp=8`,
#   TP `tensor=8`, FSDP + TP `fsdp=4, tensor=2`.
# - Parameters carry **logical axes**; one **rules table** maps them to mesh axes. Dimensions that do not divide
#   (one kv head) stay whole.
# - `Trainer(..., mesh=mesh)` (or `mesh:` in a config) is the whole change: same loss and weights as one device to
#   float32 noise, for every strategy.
# - The compiled step shows each strategy's cost: DP all-reduces gradients, FSDP all-gathers weights and
#   reduce-scatters gradients, TP all-reduces activations.
# - The **planner** gives memory per device (exact for weights and optimizer state), FLOPs and a roofline before
#   you rent the chips.
#
# **Quiz**
#
# 1. A weight `[embed, mlp]` on `fsdp=4, tensor=2`: what fraction of it does each device hold?
# 2. Why is the optimizer built *after* the model is placed on the mesh?
# 3. You double the batch. Which strategy's collective traffic doubles, and which stays the same?
# 4. Gemma 3 1B has 4 query heads and 1 kv head. What does `tensor=8` split in its attention?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
#
# **Next:** the [exercises](../exercises/08_scaling_exercises.ipynb) (bytes per chip, collective volume, the batch
# that fits, choosing a mesh, all on paper and checked numerically), then [phase 9](09_capstone_reasoning_model.ipynb)
# runs the capstone on a TPU with `mesh: auto`.
