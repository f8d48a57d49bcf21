# %% [markdown]
# # Phase 7 · Knowledge distillation: a small student learns from a big teacher
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/07_distillation.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - say what a teacher's full distribution carries that its answer alone does not ("dark knowledge"), and see it
#   by softening the distribution with a temperature;
# - explain why the softened KL is multiplied by **T²**, and check it numerically;
# - write the KD loss `α·T²·KL(p_t^T ‖ p_s^T) + (1 − α)·CE`, masked to the trained tokens, and choose between
#   forward KL, reverse KL and the generalized JSD;
# - cut a 2-layer student from a 6-layer teacher, distil it and compare it with a CE-only student on held-out data;
# - cache the teacher's top-k distribution once, keep the tail mass, and measure the memory it saves;
# - compute attention maps from hidden states, compare teacher and student, and add attention transfer and
#   feature matching; let the student learn on its own samples (on-policy distillation, GKD).
#
# **Prerequisites:** [phase 3](03_supervised_fine_tuning.ipynb) (the masked loss, the trainer, held-out accuracy);
# [phase 2](02_gemma3_from_scratch.ipynb) (attention, the tiny model).
# **Time:** about 2 hours to read and run (the `ci` profile executes it in about a minute; the `cpu` profile
# trains longer and also runs `run_distill`).
# **Notes:** [phase 7 mind map](../course/07_distillation.md) ·
# **Exercises:** [phase 7 exercises](../exercises/07_distillation_exercises.ipynb)

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
import pathlib
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx

import tunix_lite
from tunix_lite.chat import format_chat_with_mask
from tunix_lite.data.sft import SFTBatches, padded_rows, tokenize_sft
from tunix_lite.data.synthetic import make_splits
from tunix_lite.distill import losses
from tunix_lite.distill.cache import build_cache
from tunix_lite.distill.objective import DistillLoss
from tunix_lite.distill.student import keep_layers
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer, adamw_cosine, evaluate

# %% [markdown]
# ## 1. What distillation is
#
# A big model (the **teacher**) is good but slow to serve; a small one (the **student**) is fast but worse.
# Distillation trains the student on the teacher's **whole next-token distribution** at every position instead of
# only the one correct token of the data (Hinton, Vinyals & Dean 2015). The distribution says much more than the
# answer: which wrong answers are nearly right, how sure the teacher is, what else could follow.
#
# | variant | the student learns from | costs | use when |
# |---|---|---|---|
# | logit KD, online teacher | teacher logits on the data, every step | a teacher forward per step | the teacher fits beside the student |
# | logit KD, top-k cache | the teacher's top-k ids + tail mass, computed once | one teacher pass, disk | a huge vocabulary, many epochs, or no room for the teacher |
# | on-policy (GKD) | teacher scores on the student's own samples | sampling each on-policy step | the student's mistakes lead it where the data never goes |
# | attention transfer / feature matching | teacher attention maps / hidden states | the teacher online, a projection | the student should also *compute* like the teacher |
#
# The setting of this lesson: the teacher is the tiny model fine-tuned on the synthetic tasks (phase 3's
# `tunix_lite/configs/sft_tiny.yaml`), the student a 2-layer cut of it. Both share one tokenizer, which logit distillation
# requires: two distributions over ids compare only if every id means the same thing.

# %%
# NBVAL_CHECK_OUTPUT
SEQ_LEN, BATCH = 128, 8 if profile.name == "ci" else 16
splits = make_splits({"ci": 400, "cpu": 2000, "tpu": 2000}[profile.name], 64, 28, seed=0)
print({name: len(split) for name, split in splits.items()})

# %%
from tunix_lite.course.sft_start import sft_model

TEACHER_DIR = sft_model(profile)  # phase 3's SFT run, sft_tiny.yaml: trained here the first time, then loaded
teacher, tokenizer = tunix_lite.load(TEACHER_DIR)
print(f"teacher: {TEACHER_DIR}")
teacher.eval()

# %%
# NBVAL_CHECK_OUTPUT
student = keep_layers(nnx.clone(teacher), [0, 1])  # DistilBERT's recipe: initialise from some teacher layers
count = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
print(f"teacher: {teacher.config.num_layers} layers, {count(teacher):,} parameters")
print(f"student: {student.config.num_layers} layers, {count(student):,} parameters "
      f"(the 1,024 x 256 embedding, shared with the output layer, is most of both)")

# %% [markdown]
# **Which blocks should a student keep?** Every other layer (DistilBERT) or the first and the last are guesses that
# treat all blocks as equal. Measure instead: remove one block at a time and read the held-out loss
# (`blocks_kept(model, layers)` cuts the model for the length of a `with` block and gives every block back after).
#
# **Predict, then run:** which of the six blocks can the teacher best do without? The first? The last? One in the
# middle?

# %%
from tunix_lite.distill.student import blocks_kept, prune_blocks

val_batches = SFTBatches(tokenize_sft(splits["validation"], tokenizer, seq_len=SEQ_LEN), 16, shuffle=False).epoch(0)


def val_loss(model):  # validation CE on the answers: a choice of blocks is a setting, so never the test split
    return {"loss": evaluate(model, lm_loss, val_batches)["loss"]}


blocks = range(teacher.config.num_layers)
without = []
for block in blocks:
    with blocks_kept(teacher, [i for i in blocks if i != block]):
        without.append(val_loss(teacher)["loss"])
fig, ax = plt.subplots(figsize=(6.5, 3))
ax.bar(blocks, without, color="tab:orange")
ax.axhline(val_loss(teacher)["loss"], color="grey", ls=":", label="all blocks")
ax.set(xlabel="block removed", ylabel="validation CE (answers)", yscale="log", title="what each block is worth")
ax.legend()
plt.show()
pruning = prune_blocks(teacher, lambda m: val_loss(m)["loss"], keep=4)  # greedy: drop the least missed, measure again
print("  ->  ".join(f"{kept} {loss:.2f}" for kept, loss in pruning))

# %% [markdown]
# The blocks are far from equal. The output above is the full teacher (`runs/sft_tiny/model`) on this notebook's 64
# validation examples. On the validation split's 203 distinct prompts (`course/results/scripts/distill_gap.py`'s), loss 0.12 with
# all six blocks, removing block 5 costs least (0.16), then blocks 3 and 4 (0.22, 0.25), while without block 0, 1 or
# 2 the loss reaches 1.1–1.9. `prune_blocks` removes the least-missed block, measures
# again, and repeats: 4 blocks [0, 1, 2, 4] start at 0.28, where the evenly spaced [0, 2, 3, 5] start at 1.36 and the
# first-and-last [0, 5] at 6.6. Large models show the same (ShortGPT, Men et al. 2024; Minitron, Muralidharan et al.
# 2024): late middle blocks are the most redundant, the first ones the least. Section 10 shows what the better start
# is worth once the student is distilled.

# %% [markdown]
# ## 2. Dark knowledge: the teacher's softened distribution
#
# Ask the teacher where Ned lives and look at its distribution over the token right after "Ned lives in". At
# `T = 1` nearly all the mass sits on the answer. Dividing the logits by a temperature `T > 1` before the softmax
# flattens the distribution and shows the rest: how the teacher ranks the other candidates.
#
# **Predict, then run.** Which tokens will come second and third at `T = 4`: random ones, or other countries of
# the small world?

# %%
record = next(r for r in splits["test"] if r["prompt"] == "Where does Ned live?") if "Where does Ned live?" in \
    splits["test"]["prompt"] else splits["test"][4]
messages = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
ids, mask = format_chat_with_mask(tokenizer, messages)
answer_ids = tokenizer.encode(" " + record["answer"])[:1] or tokenizer.encode(record["answer"])[:1]
where = max(t for t in range(1, len(ids)) if mask[t] and ids[t] == answer_ids[0])  # the answer's first token
logits = teacher(jnp.asarray([ids[:where]]))[0, -1]  # the teacher's logits for that token


def piece(i):
    return tokenizer.id_to_piece(int(i)).replace("▁", " ")


fig, axes = plt.subplots(1, 3, figsize=(13, 3.2), sharey=True)
for ax, T in zip(axes, (1.0, 2.0, 4.0)):
    p = jax.nn.softmax(logits / T)
    top = jnp.argsort(-p)[:10]
    ax.bar(range(10), p[top], color=["#2a9d8f"] + ["#e9c46a"] * 9)
    ax.set_xticks(range(10), [piece(i) for i in top], rotation=60, fontsize=8)
    ax.set_title(f"T = {T:g}: top token {float(p[top[0]]):.2f}, the other 9 {float(p[top[1:]].sum()):.2f}")
axes[0].set_ylabel("probability")
fig.suptitle(f"teacher, next token after {tokenizer.decode(ids[where - 3:where])!r} ({record['prompt']!r})")
fig.tight_layout()
plt.show()

# %% [markdown]
# The runners-up are not noise: they are the words the teacher finds *nearly* right. A student trained on the
# one-hot answer learns nothing from them; a student trained to match the softened distribution learns the
# teacher's similarity structure too, which is why distillation generalises better than training on labels
# alone with the same data.
#
# ## 3. Why the softened KL is multiplied by T²
#
# The soft term is `KL(p_t^T ‖ p_s^T)` with `p^T = softmax(z / T)`. Its gradient with respect to the student's
# logits is `(p_s^T − p_t^T) / T`, and for large `T` both distributions approach uniform with
# `p^T ≈ (1 + z/T) / V`, so the difference shrinks like `1/T` as well: the gradient falls off like **1/T²**. Left
# alone, raising `T` would quietly turn the teacher down against the hard CE term. Multiplying by `T²` keeps the
# soft term's gradient on one scale for every `T`. Measured on the teacher's and student's real logits:

# %%
batch = padded_rows(tokenize_sft(splits["validation"].select(range(BATCH)), tokenizer, seq_len=SEQ_LEN), range(BATCH))
z_teacher = teacher(batch["inputs"], batch["positions"])
z_student = student(batch["inputs"], batch["positions"])
temperatures = [1, 2, 4, 8, 16, 32]


@jax.jit
def soft_gradient_norms(zs, zt, T):
    term = lambda z: jnp.mean(losses.kd_per_token(z, zt, temperature=T))  # T^2 * KL per token
    g = jax.grad(term)(zs)
    return jnp.linalg.norm(g), jnp.linalg.norm(g) / T**2  # with T^2, and without it


norms = np.array([soft_gradient_norms(z_student, z_teacher, float(T)) for T in temperatures])
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.loglog(temperatures, norms[:, 0], "o-", label="T² · KL (what KD uses)")
ax.loglog(temperatures, norms[:, 1], "s--", label="KL alone")
ax.set(xlabel="temperature T", ylabel="|gradient wrt student logits|", title="the soft term's gradient")
ax.legend()
plt.show()
print(f"from T = 2 to T = 32 the gradient changes {norms[1, 0] / norms[-1, 0]:.1f}x with T², "
      f"{norms[1, 1] / norms[-1, 1]:.0f}x without")

# %% [markdown]
# ## 4. The KD loss, masked to the trained tokens
#
# `losses.kd_loss(student_logits, teacher_logits, targets, weights, alpha=α, temperature=T)` is the whole loss,
# `α·T²·KL + (1 − α)·CE`, each a mean over the tokens with weight 1 (the reply), never over the prompt or the
# padding, and `metrics["count"]` says how many that was, so that gradient accumulation and evaluation stay
# exact (phase 3). google-tunix's logit strategy averages over every position, padding included: the padding
# then dilutes the loss, by a different amount in every batch.

# %%
# NBVAL_CHECK_OUTPUT
w = batch["weights"]
loss, metrics = losses.kd_loss(z_student, z_teacher, batch["targets"], w, alpha=0.5, temperature=2.0)
pad = w[..., None] == 0
noisy, _ = losses.kd_loss(jnp.where(pad, 100.0, z_student), jnp.where(pad, -100.0, z_teacher), batch["targets"], w,
                          alpha=0.5, temperature=2.0)
print(f"{int(metrics['count'])} trained tokens of {w.size} positions ({w.mean():.0%})")
print("loss = 0.5 * kd + 0.5 * ce:", bool(np.isclose(loss, 0.5 * metrics["kd"] + 0.5 * metrics["ce"])))
print("garbage logits on prompt and padding change the loss:", not bool(np.isclose(noisy, loss)))
print("the teacher against itself:", float(losses.kd_loss(z_teacher, z_teacher, batch["targets"], w, alpha=1.0)[1]["kd"]))

# %% [markdown]
# ## 5. Which divergence: forward KL, reverse KL or JSD
#
# A student that is smaller than its teacher cannot match it everywhere, and the divergence decides where it
# gives up. Here a toy teacher has two modes over 40 outcomes and the "student" can only be one bump (a
# discretised Gaussian with a learned centre and width). Fitting it by gradient descent:
#
# - **forward** `KL(p_t ‖ p_s)` punishes the student for missing any teacher mass: it spreads over both modes
#   (mean-seeking), putting mass in the valley between them where the teacher puts none;
# - **reverse** `KL(p_s ‖ p_t)` punishes mass where the teacher has little: it picks one mode (mode-seeking), the
#   behaviour on-policy distillation wants on the student's own samples;
# - the **generalized JSD** with `β` interpolates between the two and stays bounded (`losses.divergence`).

# %%
x = jnp.arange(40.0)
teacher_toy = jnp.log(0.6 * jnp.exp(-0.5 * ((x - 10) / 2.5) ** 2) + 0.4 * jnp.exp(-0.5 * ((x - 29) / 3) ** 2))
teacher_toy = jax.nn.log_softmax(teacher_toy)


def bump(params):  # the student: log-probabilities of one discretised Gaussian
    centre, log_width = params
    return jax.nn.log_softmax(-0.5 * ((x - centre) / jnp.exp(log_width)) ** 2)


@jax.jit
def fit(kind_index, beta):
    def loss(params):
        s = bump(params)
        return jax.lax.switch(kind_index, [lambda: losses.divergence(teacher_toy, s, "forward"),
                                           lambda: losses.divergence(teacher_toy, s, "reverse"),
                                           lambda: losses.divergence(teacher_toy, s, "jsd", 0.5)])

    opt = optax.adam(0.1)
    params = jnp.array([16.0, jnp.log(4.0)])  # start between the modes, nearer the first
    state = opt.init(params)

    def step(carry, _):
        params, state = carry
        updates, state = opt.update(jax.grad(loss)(params), state)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, state), None, length=400)
    return params


fig, ax = plt.subplots(figsize=(8, 3))
ax.fill_between(x, jnp.exp(teacher_toy), color="#cccccc", label="teacher")
for i, kind in enumerate(["forward", "reverse", "jsd"]):
    ax.plot(x, jnp.exp(bump(fit(i, 0.5))), lw=2, label=f"student fit with {kind}")
ax.set(xlabel="outcome", ylabel="probability")
ax.legend()
plt.show()

# %% [markdown]
# ## 6. Distilling the student: KD against CE only
#
# Two copies of the same 2-layer student, the same batches, the same steps and learning rate; one learns from the
# data alone (`alpha=0`: plain fine-tuning), the other from the teacher too (`alpha=0.5, T=2`). The teacher is the
# trainer's `frozen` argument: an input of the one compiled step, never differentiated (phase 3's trainer core).
# The held-out curve to watch is the validation cross-entropy on the real answers.

# %%
train_data = tokenize_sft(splits["train"], tokenizer, seq_len=SEQ_LEN)
STEPS = {"ci": 15, "cpu": 150, "tpu": 300}[profile.name]


def distil(loss_fn, frozen):
    model = keep_layers(nnx.clone(teacher), [0, 1])
    model.train()
    trainer = Trainer(model, adamw_cosine(1e-3, STEPS, warmup_steps=3), loss_fn, frozen=frozen)
    batches = SFTBatches(train_data, BATCH, seed=1).stream()  # one-example rows, the same for both students
    history = trainer.fit(batches, STEPS, eval_fn=val_loss, eval_every=max(1, STEPS // 6), desc=type(loss_fn).__name__)
    model.eval()
    return model, history


start = time.perf_counter()
ce_student, ce_history = distil(DistillLoss(alpha=0.0), None)
kd_student, kd_history = distil(DistillLoss(alpha=0.5, temperature=2.0), teacher)
print(f"two students trained in {time.perf_counter() - start:.0f} s")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.3))
for name, history in [("CE only", ce_history), ("KD (alpha 0.5, T 2)", kd_history)]:
    points = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h]
    ax.plot(*zip(*points), "o-", label=name)
ax.axhline(val_loss(teacher)["loss"], color="grey", ls=":", label="teacher")
ax.set(xlabel="step", ylabel="validation CE (answers)", title="the same 2-layer student, two losses")
ax.legend()
plt.show()

# %% [markdown]
# The `ci` profile trains for a few dozen steps, so read the curves for their shape. The measured result of
# the full runs is in section 10.
#
# ## 7. The top-k teacher cache and its memory
#
# An online teacher costs a forward pass in every step and the memory of its weights. The alternative is to run
# it once over the training set and keep, per position, its `k` most likely ids, their log-probabilities at the
# training temperature and the **remaining mass** of all other ids (`cache.build_cache`, `losses.top_k_distribution`).
# KD from the cache compares the two models on `k + 1` buckets: the `k` ids and "everything else"
# (`losses.top_k_kd_per_token`). Merging ids into one bucket can only lower a divergence, so this is a lower
# bound of full KD, and with `k = V` it **is** full KD.

# %%
# NBVAL_CHECK_OUTPUT
n_cache = 64 if profile.name == "ci" else len(train_data)
rows = padded_rows(train_data, range(n_cache))
cache = build_cache(teacher, rows, k=32, temperature=2.0, tokenizer=tokenizer, batch_size=16)
print(cache.ids.shape, cache.log_probs.shape, cache.rest.shape)
print(cache.memory_report().split(": ", 1)[1].split(" MiB;")[0].rsplit(" ", 1)[0], "-> see the report below")

# %%
print(cache.memory_report())
trained = rows["weights"] > 0
print(f"tail mass beyond the top 32 at trained positions: median {np.median(cache.rest[trained]):.1e}, "
      f"max {cache.rest[trained].max():.1e}")
for name, vocab in [("tiny", 1024), ("Gemma 3 (262,144 ids)", 262_144)]:
    full, top = vocab * 4, 32 * 8 + 4  # bytes per position: float32 logits vs (int32 id + float32 log-prob) x k + rest
    print(f"{name:>22}: {full / 2**10:8,.1f} KiB per position in full, {top} bytes as a top-32 cache ({full / top:,.0f}x)")

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite.distill.cache import CACHE_KEYS

first = {k: v[:BATCH] for k, v in rows.items()}
full_cache = build_cache(teacher, first, k=teacher.config.vocab_size, temperature=2.0, tokenizer=tokenizer, batch_size=BATCH)
online = DistillLoss(alpha=0.5, temperature=2.0)(student, first, teacher)[0]
cached = DistillLoss(alpha=0.5, temperature=2.0)(student, first | dict(zip(CACHE_KEYS, (full_cache.ids, full_cache.log_probs, full_cache.rest))), None)[0]
print("k = V: the cached loss equals the online one:", bool(np.isclose(online, cached, rtol=1e-5)))

# %% [markdown]
# `run_distill` with `top_k: 32` builds this cache before training (saved as `teacher_cache.npz`, with the
# tokenizer's fingerprint, the temperature, `k` and a digest of the token rows), frees the teacher and trains from
# the batches alone. Reusing a cache for other data, another tokenizer or another temperature stops with one line
# saying which one differs.
#
# ## 8. Attention maps from hidden states
#
# Attention transfer asks a student layer to attend where a teacher layer attends. The maps are not hooked out of
# the forward pass: `model.features(..., return_hidden=True)` returns the residual stream entering each block, and
# `block.attention_weights(hidden[i], positions)` recomputes that block's attention probabilities from it with the
# block's own norm, projections, RoPE and mask. With 2 student blocks and 6 teacher blocks, the uniform map pairs
# student block `i` with teacher block `(i + 1)·6/2 − 1`: 0 → 2 and 1 → 5.

# %%
example = {k: v[:1] for k, v in first.items()}
n = int((example["positions"] >= 0).sum())


@nnx.jit(static_argnums=3)
def maps(model, inputs, positions, block):
    _, hidden = model.features(inputs, positions, return_hidden=True)
    return model.layers[block].attention_weights(hidden[block], positions).mean(axis=1)[0]  # heads averaged


pairs = [("teacher block 2", teacher, 2), ("teacher block 5", teacher, 5), ("CE student block 1", ce_student, 1),
         ("KD student block 1", kd_student, 1)]
fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
for ax, (title, model, block) in zip(axes, pairs):
    ax.imshow(np.asarray(maps(model, example["inputs"], example["positions"], block))[:n, :n] ** 0.5, cmap="magma")
    ax.set(title=title, xlabel="key", ylabel="query")
fig.suptitle("attention maps (square root of the head-averaged probabilities), one training example")
fig.tight_layout()
plt.show()

# %% [markdown]
# `losses.attention_transfer` compares such maps row by row with `KL(teacher row ‖ student row)` (MiniLM),
# averaging each model's heads first so that the head counts may differ. **Feature matching** does the same for
# hidden states: a learned projection from the student's width to the teacher's (`student.WithProjection`, an
# `nnx.Param` under `projection` that trains beside the student through the `wrt` filter and is dropped at export),
# then `losses.feature_distance` (MSE of RMS-normalised vectors, or cosine). In a config:
#
# ```yaml
# attention_weight: 1.0      # + attention transfer on the mapped layers
# feature_weight: 1.0        # + feature matching through a learned projection
# layer_map: {0: 2, 1: 5}    # student block -> teacher block (default: evenly spaced)
# ```
#
# ## 9. On-policy distillation: learning on its own samples
#
# Trained on the data, the student never sees the states its own mistakes lead to. **GKD** (Agarwal et al. 2024)
# mixes in steps where the student samples completions of training prompts and the teacher scores every sampled
# token: the loss is the divergence (reverse KL or JSD) on those tokens, and no CE term, since a sample is not
# ground truth. `OnPolicyBatches` makes those rows with the sampler (the rollout engine of phase 6) and
# `rollout_rows`, in the same shapes as the data's rows, so the step compiles once.

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite.distill.on_policy import OnPolicyBatches
from tunix_lite.chat import format_chat
from tunix_lite.sampler import Sampler

prompts = [format_chat(tokenizer, [{"role": "user", "content": p}]) for p in splits["train"]["prompt"][:64]]
on_policy = OnPolicyBatches(SFTBatches(train_data, 4, seed=0), Sampler(kd_student, tokenizer), prompts, ratio=0.5,
                            max_new_tokens=24, seq_len=SEQ_LEN, seed=0)
kinds = ["sampled" if on_policy.is_on_policy(s) else "data" for s in range(8)]
print("steps 0-7:", kinds)
sampled = on_policy.sampled(kinds.index("sampled"))
print({k: v.shape for k, v in sampled.items()})
print("labelled (CE allowed):", sampled["labelled"].tolist())

# %%
row = 0
trained_ids = sampled["targets"][row][sampled["weights"][row] > 0]
print("the student's sample, the tokens the teacher will score:", repr(tokenizer.decode(trained_ids)))

# %% [markdown]
# The run takes minutes to an hour on a CPU, so it was measured once and saved with the course; the table names the
# command that reproduces it.
#
# **Predict, then read the table.** The teacher was fine-tuned on this very training split. Its loss on those
# training prompts is 0.04–0.07, and 0.37 on the test split: it has memorised them. What does its softened
# distribution on a training example then tell the student that the one-hot label does not?
#
# What was measured (test split, 280 prompts, 100 steps, α 0.9 and T 1 chosen on the validation split): teacher
# 0.368 loss / 0.500 exact match, CE-only student 0.962 / 0.114, KD student 0.962 / 0.118. **KD closed 0% of the loss
# gap and 1% of the exact-match gap**, well inside the intervals. On inputs it has memorised the teacher's
# distribution *is* the label, so there is no dark knowledge to pass on. A higher T amplifies the leftover few
# percent and did worse on validation (T 4: −25%). GKD, with half the steps on the student's own samples, raised
# exact match to 0.150 (9% of the gap, still inside the intervals) but made the loss much worse (1.488). The freshly
# cut student's samples are noise at first, and on-policy steps carry no CE. KD needs a transfer set the teacher has
# not memorised, and GKD needs a student that already writes sensible answers.
#
# Both show in the later sections of the table. On 250 labelled examples the teacher never saw plus its answers to
# 1,000 more prompts, the evenly spaced 4-block student [0, 2, 3, 5] closes most of the loss gap but little of the
# exact-match gap. The 4 blocks the teacher misses least (section 1's `prune_blocks`: [0, 1, 2, 4]), trained the same
# way with the teacher's soft targets (seqkd), close **94% of the loss gap and 87% of the exact-match gap**: 0.460
# exact match against the teacher's 0.480 and the CE-only student's 0.330. Before reading the last section, predict:
# how much of that comes from the teacher's answers, and how much from its soft targets?

# %%
from tunix_lite.course.results import show

show("07_distill", "nice -n 10 python course/results/scripts/distill_gap.py --table tunix_lite/course/results/07_distill.md")

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite.distill.distill import DistillConfig, run_distill

from tunix_lite import configs

config = DistillConfig.from_yaml(configs.path("distill_tiny"))  # shipped with the package
print({k: getattr(config, k) for k in ["model", "student_layers", "teacher", "alpha", "temperature", "steps",
                                        "batch_size", "learning_rate", "top_k"]})

# %%
config = profile.sized(config)  # the ci profile: a few steps on a few prompts
config.model = config.teacher = str(TEACHER_DIR)  # the teacher above: the file's own under cpu and tpu
config.output_dir = None  # keep the result in memory
result = run_distill(config)
print(f"{config.steps} steps in {result.seconds:.0f} s; validation loss {result.before['loss']:.3f} -> "
      f"{result.after['loss']:.3f}, accuracy {result.after.get('accuracy', float('nan')):.3f}")

# %% [markdown]
# ## Recap
#
# - The teacher's distribution carries its similarity structure ("dark knowledge"); a temperature `T > 1` makes it
#   visible, and `T²` keeps the soft term's gradient on one scale for every `T`.
# - KD loss: `α·T²·D(p_t^T, p_s^T) + (1 − α)·CE`, each a mean over the trained tokens only; the count goes with it.
# - Forward KL covers every teacher mode, reverse KL picks one; the generalized JSD sits between and is bounded.
# - A top-k cache with the tail mass makes a 262k-vocabulary teacher affordable (bytes instead of a MiB per
#   position); with `k = V` it equals full KD, and it only fits the data, tokenizer and temperature it was built for.
# - Attention maps come from hidden states with the model's own attention functions; attention transfer and feature
#   matching (through a projection dropped at export) teach the student to compute like the teacher.
# - On-policy distillation trains on the student's own samples, scored token by token by the teacher.
# - A student cut from the teacher keeps the blocks it measures it cannot spare (`prune_blocks`: greedy removal by
#   validation loss); on the tiny teacher that choice, not the loss, decided whether distillation closed the gap.
#
# ## Quiz
#
# 1. Why does the soft term need `T²`, and what would happen to a run tuned at `T = 1` if you moved to `T = 4`
#    without it?
# 2. A batch is 70% padding and prompt. By how much would an unmasked KD loss understate the per-token loss, and
#    why does that hurt gradient accumulation?
# 3. Why is top-k KD a lower bound of full KD, and why does it become exact at `k = V`?
# 4. Which divergence would you use on the student's own samples, and why?
# 5. Why must teacher and student share a tokenizer for logit KD, but not for sequence-level KD on the teacher's
#    generated text?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
