# %% [markdown]
# # Phase 3 · Supervised fine-tuning: data, loss, trainer
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/03_supervised_fine_tuning.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - say what SFT teaches a model, and when it is the right tool (and when preference tuning or RL is);
# - turn a chat record into token ids and a **completion mask**, and see which tokens the loss trains on;
# - compute the masked next-token loss by hand and explain why it is a mean over tokens, not over rows;
# - pad or **pack** examples into fixed rows, with segment ids and restarted positions that keep packed
#   examples from seeing each other; choose a truncation policy;
# - shuffle deterministically, mix domains by weight, and accumulate gradients exactly over micro-batches;
# - fine-tune the tiny model with one compiled step, measure held-out accuracy before and after, save
#   checkpoints and resume exactly, and run the same thing from the command line.
#
# **Prerequisites:** [phase 2](02_gemma3_from_scratch.ipynb) (the model, positions as masks, chat tokens);
# [phase 1](01_core_concepts_jax_nnx.ipynb) (`jit` compiles once per shape, `wrt`).
# **Time:** about 2 hours to read and run (the `ci` profile executes it in about 2 minutes; the `cpu`
# profile trains ten times longer and also runs `run_sft`).
# **Notes:** [phase 3 mind map](../course/03_supervised_fine_tuning.md) ·
# **Exercises:** [phase 3 exercises](../exercises/03_sft_exercises.ipynb)

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
import tempfile
import time
from collections import Counter

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx

import tunix_lite
from tunix_lite.data.sft import SFTBatches, mix_domains, packed_rows, padded_rows, tokenize_sft
from tunix_lite.data.synthetic import DOMAINS, make_splits
from tunix_lite.evaluation import TaskEval
from tunix_lite.models import Transformer, get_config
from tunix_lite.models.transformer import attention_mask
from tunix_lite.chat import format_chat_with_mask
from tunix_lite.training.checkpoint import Checkpoints
from tunix_lite.training.losses import lm_loss, next_token_loss
from tunix_lite.training.evals import plot_history
from tunix_lite.training.trainer import Trainer, adamw_cosine, evaluate, pad_batch

# %% [markdown]
# ## 1. What SFT is, and when to use it
#
# A pretrained model continues text. **Supervised fine-tuning** shows it demonstrations, a prompt and the
# answer we want, and trains it to predict the answer's tokens. It is plain next-token prediction, with two
# changes: the text is wrapped in the model's **chat template**, and the loss counts only the answer.
#
# | you have | use | why |
# |---|---|---|
# | good answers to imitate (written, or from a stronger model) | SFT (this phase) | the cheapest, most stable signal: one label per token |
# | pairs: a better and a worse answer | DPO / ORPO (phase 5) | learns what to avoid, not only what to copy |
# | a checker that scores answers | RL, GRPO (phase 6) | learns from its own samples, can exceed the demonstrations |
#
# SFT can only be as good as its demonstrations, and it never sees its own mistakes. That is why it usually
# comes first: it teaches the format and the behaviour, and later phases refine it.
#
# The data: seven small task domains whose answers a program can check. Every example has a prompt, a worked
# reasoning and a tagged answer; train, validation and test never share a prompt.

# %%
# NBVAL_CHECK_OUTPUT
SEQ_LEN = 128  # every synthetic example fits in 129 tokens (section 4); the profile sets batch and steps
n_test = {"ci": 28, "cpu": 140, "tpu": 280}[profile.name]  # held-out prompts for accuracy, 4 / 20 / 40 per domain
splits = make_splits(10_000 if profile.name == "tpu" else 2000, 64, n_test, seed=0)
print({name: len(split) for name, split in splits.items()}, "domains:", DOMAINS)
for key, value in splits["train"][1].items():
    print(f"{key:<11}{value}")

# %%
# NBVAL_CHECK_OUTPUT
model, tokenizer = tunix_lite.load("tiny")  # Gemma 3's layout at toy size, pretrained on this world's text
print(f"{sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))):,} parameters, "
      f"{tokenizer.vocab_size:,}-piece vocabulary")

# %% [markdown]
# ## 2. A record becomes ids and a completion mask
#
# `format_chat_with_mask` writes the conversation in Gemma's template, with the turn markers as single
# special ids, and returns a 0/1 **completion mask**: 1 on the model's reply and on the `<end_of_turn>` that
# closes it (so the model learns to stop), 0 on everything else.

# %%
# NBVAL_CHECK_OUTPUT
record = splits["train"][1]
messages = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
ids, mask = format_chat_with_mask(tokenizer, messages)
print(repr(tokenizer.decode(ids, skip_special=False)))
print(f"{len(ids)} tokens, {sum(mask)} trained on")

# %%
SHORT = {"<start_of_turn>": "<sot>", "<end_of_turn>": "<eot>"}


def show_tokens(ids, colours, title, width=96):
    """Draw tokens as boxes, one colour per token, wrapping at `width` characters."""
    pieces = [SHORT.get(p, p).replace("▁", "·").replace("\n", "\\n") for p in map(tokenizer.id_to_piece, ids)]
    x, y, places = 0, 0, []
    for piece in pieces:
        if x + len(piece) > width:
            x, y = 0, y + 1
        places.append((x + len(piece) / 2, y))
        x += len(piece) + 1.2
    fig, ax = plt.subplots(figsize=(width * 0.085, 0.42 * (y + 1) + 0.5))
    for piece, (px, py), colour in zip(pieces, places, colours):
        ax.text(px, -py, piece, ha="center", va="center", fontsize=8, family="monospace",
                bbox=dict(boxstyle="round,pad=0.2", facecolor=colour, edgecolor="none"))
    ax.set(xlim=(-1, width + 1), ylim=(-y - 0.6, 0.6), title=title)
    ax.axis("off")
    plt.show()


show_tokens(ids, ["#9fd8a4" if m else "#e4e4e4" for m in mask],
            "green: trained on (completion mask 1) · grey: context only (mask 0)")

# %% [markdown]
# Two details matter. The reply is encoded on its own, as it will be at inference time, where the prompt
# ends with `<start_of_turn>model\n` and the model writes from there. And the template must be the one the
# model will be prompted with: a model fine-tuned on one template and prompted in another sees tokens it
# never learned to follow.

# %% [markdown]
# ## 3. The masked next-token loss
#
# Position `t` of the model's output predicts token `t + 1`. A training row therefore holds
# `inputs = ids[:-1]`, `targets = ids[1:]`, and `weights = mask[1:]`: the mask shifts with the targets, since a
# position trains when its *target* is a reply token. Padding gets weight 0 and position -1 (phase 2's
# convention). `padded_rows` builds such rows, one example each, right-padded to `SEQ_LEN`.

# %%
# NBVAL_CHECK_OUTPUT
some = tokenize_sft(splits["train"].select(range(8)), tokenizer, seq_len=SEQ_LEN)
rows = padded_rows(some, range(8))
print({key: value.shape for key, value in rows.items()})
start = int(np.argmax(rows["weights"][1])) - 3  # a few positions before the reply starts in row 1
print(f"{'t':>3} {'input':>10} {'target':>10} weight position")
for t in range(start, start + 6):
    i, o = (tokenizer.id_to_piece(rows[k][1, t]) for k in ("inputs", "targets"))
    print(f"{t:>3} {SHORT.get(i, i)!r:>10} {SHORT.get(o, o)!r:>10} {rows['weights'][1, t]:>6.0f} {rows['positions'][1, t]:>8}")

# %% [markdown]
# The loss is the cross-entropy averaged over **all weighted tokens of the batch**, `Σ nll·w / Σ w`
# (`next_token_loss`). Averaging each row first and then the rows would give a 12-token answer as much say as
# a 90-token one, and make the result depend on how the examples were grouped into rows and batches.
# Below: the library's loss, the same sum by hand, the mean of row means, and the loss if we also trained on
# the prompt (`train_on_prompt=True`).

# %%
ROWS = 8  # every forward pass below gets 8 rows, so it compiles once


@nnx.jit
def forward(model, batch):
    return model(batch["inputs"], batch["positions"], segment_ids=batch["segment_ids"])


def logits_of(batch):
    n = len(batch["inputs"])
    return forward(model, pad_batch(batch, ROWS))[:n]  # zero rows added to reach ROWS are cut off again


logits = logits_of(rows)
nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), rows["targets"][..., None], axis=-1)[..., 0]  # [B, T]

# %%
# NBVAL_CHECK_OUTPUT
w = rows["weights"]
loss, metrics = next_token_loss(logits, rows["targets"], w)
by_hand = float((nll * w).sum() / w.sum())
row_means = float(np.mean([(nll[r] * w[r]).sum() / w[r].sum() for r in range(len(w))]))
real = (rows["positions"] >= 0).astype(np.float32)
everything = float((nll * real).sum() / real.sum())
print(f"next_token_loss         {float(loss):.3f} over {int(metrics['count'])} reply tokens")
print(f"by hand                 {by_hand:.3f}   same: {np.isclose(by_hand, float(loss))}")
print(f"mean of row means       {row_means:.3f}   (not the same: short replies weigh more)")
print(f"prompt tokens included  {everything:.3f}   (the prompts are much harder to predict)")

# %%
first = list(splits["train"].select(range(8))["domain"])
r = first.index("sequence") if "sequence" in first else 0  # e.g. "Each step adds 3. 23 + 3 = 26."
row_nll = np.asarray(nll[r, : len(some.ids[r]) - 1])  # position t's loss is about token t + 1
shade = plt.cm.Reds(0.05 + 0.9 * np.sqrt(row_nll / row_nll.max()))
show_tokens(some.ids[r][1:], [c if m else "#f4f4f4" for c, m in zip(shade, some.mask[r][1:])],
            "the pretrained model's loss on each reply token (darker = higher); pale: not trained on")

# %% [markdown]
# The pretrained model already predicts most of the reply. The loss concentrates on a few tokens: the first
# words, which choose how to answer, and the digits it has to compute. Training on the prompt would spend
# most of the gradient on learning to predict *questions*, which we never ask it to write.

# %% [markdown]
# ## 4. Padding versus packing
#
# All rows must have the same shape, or every step compiles again (phase 1). With **padding**, each row holds
# one example and the rest is filler. With **packing**, examples are placed one after another in a row until
# the next one does not fit. Each example keeps its own positions (restarting at 0) and gets a **segment id**
# (1, 2, … within the row); the attention mask allows a query to see a key only within its own segment, so
# the packed examples cannot see each other, and the token-weighted loss is unchanged.

# %%
# NBVAL_CHECK_OUTPUT
data = tokenize_sft(splits["train"], tokenizer, seq_len=SEQ_LEN)
print(data.report)
padded = SFTBatches(data, profile.batch, seed=0)
packed = SFTBatches(data, profile.batch, seed=0, packing=True)
for name, batches in [("padded", padded), ("packed", packed)]:
    s = batches.stats()
    print(f"{name}: {s['rows']} rows per epoch, {s['fill']:.0%} of row tokens are real, {s['trained']:.0%} trained on")

# %%
pad_rows, pack_rows = padded.epoch_rows(0), packed.epoch_rows(0)
fig, axes = plt.subplots(1, 3, figsize=(13, 3))
cmap = plt.get_cmap("tab10").with_extremes(bad="white")
for ax, (name, r) in zip(axes, [("padded", pad_rows), ("packed", pack_rows)]):
    ax.imshow(np.ma.masked_equal(r["segment_ids"][:16], 0), cmap=cmap, interpolation="nearest", aspect="auto",
              vmin=1, vmax=10)
    ax.set(title=f"{name}: 16 rows, colour = example", xlabel="token", ylabel="row")
for name, r in [("padded", pad_rows), ("packed", pack_rows)]:
    axes[2].hist((r["segment_ids"] > 0).mean(1), bins=np.linspace(0, 1, 21), alpha=0.6, label=name)
axes[2].set(title="fill of each row", xlabel="fraction of real tokens", ylabel="rows")
axes[2].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Look inside one packed row: three short examples, one after another.

# %%
# NBVAL_CHECK_OUTPUT
members = [i for i in range(len(data)) if len(data.ids[i]) <= 40][:3]  # three short examples
row = packed_rows(data, members)  # they fit in one row
seg, pos = row["segment_ids"][0], row["positions"][0]
starts = [0, *(np.flatnonzero(np.diff(seg)) + 1).tolist()]
print(f"{len(row['inputs'])} row; segments start at tokens {starts}, padding from token {int((seg > 0).sum())}")
b = starts[1]
print("segment ids around the first boundary:", seg[b - 3:b + 3].tolist())
print("positions around the first boundary:  ", pos[b - 3:b + 3].tolist())

# %%
n_show = min(96, int((seg > 0).sum()))
packed_mask = attention_mask(row["positions"], row["positions"], q_segment=row["segment_ids"],
                             k_segment=row["segment_ids"])[0, :n_show, :n_show]
t = np.arange(SEQ_LEN)[None]
plain_mask = attention_mask(t, t)[0, :n_show, :n_show]
fig, axes = plt.subplots(1, 2, figsize=(8, 4))
for ax, (title, m) in zip(axes, [("causal only: examples see each other", plain_mask),
                                 ("causal + segments: block-diagonal", packed_mask)]):
    ax.imshow(m, cmap="Greens")
    ax.set(title=title, xlabel="key", ylabel="query")
plt.show()

# %% [markdown]
# The proof that packing changes nothing for the model: the logits of each example inside the packed row
# equal its logits when it has a row to itself.

# %%
# NBVAL_CHECK_OUTPUT
alone = padded_rows(data, members)  # the same examples, one per row
out = logits_of({k: np.concatenate([row[k], alone[k]]) for k in row})  # row 0: packed; rows 1-3: alone
diff = max(float(jnp.max(jnp.abs(out[0, s:s + len(data.ids[i]) - 1] - out[1 + j, : len(data.ids[i]) - 1])))
           for j, (s, i) in enumerate(zip(starts, members)))
print(f"{len(members)} packed examples; logits inside the packed row == alone: {diff < 1e-4}")

# %% [markdown]
# ## 5. Examples that do not fit: the truncation policy
#
# An example longer than `SEQ_LEN + 1` tokens cannot be a training row. `tokenize_sft` never cuts silently:
# `truncation="error"` (the default) stops with the row's index, `"drop"` skips the example, `"truncate"` keeps
# its beginning. With a 64-token limit:

# %%
# NBVAL_CHECK_OUTPUT
subset = splits["train"].select(range(700))
try:
    tokenize_sft(subset, tokenizer, seq_len=64)
except ValueError as e:
    print("error:   ", e)
for policy in ["drop", "truncate"]:
    print(f"{policy + ':':<10}", tokenize_sft(subset, tokenizer, seq_len=64, truncation=policy).report)
lengths = [len(x) for x in tokenize_sft(subset, tokenizer, seq_len=SEQ_LEN).ids]
too_long = Counter(d for d, n in zip(subset["domain"], lengths) if n > 65)
print("dropped per domain:", dict(sorted(too_long.items())))

# %% [markdown]
# Both fallbacks have a cost. **Truncate** cuts the end of the reply, its answer and its stop token, so the
# model learns to start answers it never finishes. **Drop** is silent bias: above, it removes most of the
# `sort` and `arithmetic` examples, so the model would never practise them. Prefer raising the sequence length;
# drop only rare outliers, and read the report.

# %% [markdown]
# ## 6. Deterministic shuffling and domain mixing
#
# `SFTBatches` shuffles each epoch with a generator seeded by `(seed, epoch)`: the same seed gives the same
# batches on any machine, each epoch has a new order, and `stream(start=s)` skips exactly the first `s`
# batches, which is what resuming a run needs (section 9).

# %%
# NBVAL_CHECK_OUTPUT
again = SFTBatches(data, profile.batch, seed=0, packing=True)
same = all(np.array_equal(a["inputs"], b["inputs"]) for a, b in zip(packed.epoch(0), again.epoch(0)))
print("same seed, same batches:", same)
print("epoch 1 has a new order:", not np.array_equal(packed.epoch(0)[0]["inputs"], packed.epoch(1)[0]["inputs"]))
print("stream(start=5) begins at batch 5:", np.array_equal(next(packed.stream(start=5))["inputs"], packed.epoch(0)[5]["inputs"]))

# %% [markdown]
# A data set's mixture is a choice too. `mix_domains` draws `n` rows with each domain's share set by a weight
# (and cycles a domain's rows if it has too few), for example to practise the harder domains more:

# %%
# NBVAL_CHECK_OUTPUT
weights = {"arithmetic": 3, "sort": 2, "count": 2, "compare": 1, "facts": 1, "sequence": 1, "instruction": 1}
mixed = mix_domains(splits["train"], weights, n=1100, seed=0)
counts = {"make_splits (equal)": Counter(splits["train"]["domain"]), "mix_domains (weighted)": Counter(mixed["domain"])}
for name, c in counts.items():
    print(f"{name:<24}", {d: c[d] for d in DOMAINS})

# %%
fig, ax = plt.subplots(figsize=(8, 2.8))
for k, (name, c) in enumerate(counts.items()):
    ax.bar(np.arange(len(DOMAINS)) + 0.4 * k, [c[d] / sum(c.values()) for d in DOMAINS], 0.4, label=name)
ax.set_xticks(np.arange(len(DOMAINS)) + 0.2, DOMAINS)
ax.set_ylabel("share of rows")
ax.legend()
plt.show()

# %% [markdown]
# ## 7. Exact gradient accumulation
#
# When a batch does not fit in memory, split it into `k` micro-batches, add their gradients, and update once.
# With a token mean, the micro-batches must not count equally: they hold different numbers of trained tokens.
# The trainer weighs micro-batch `i` by its token count `n_i` (every loss reports how many units its mean is
# over as `metrics["count"]`: tokens here, pairs for DPO):
#
# `grad = Σ n_i · grad(loss_i) / Σ n_i`, exactly the gradient of the whole batch's token mean.
#
# Check it on one packed batch with a small random 2-layer model (the arithmetic does not need a trained one):
# one SGD step with learning rate 1 moves each parameter by minus its gradient.

# %%
small = get_config("tiny").replace(num_layers=2)
batch = packed.epoch(0)[0]
k = 4 if profile.batch % 4 == 0 else 2


def equal_weights(model, batch, frozen=None):  # the same loss, but each micro-batch counts as one unit
    loss, metrics = lm_loss(model, batch)
    return loss, {"loss": metrics["loss"], "count": 1.0}


def update(loss_fn, micro_batches):
    m = Transformer(small, rngs=nnx.Rngs(0))
    before = jax.tree.leaves(nnx.state(m, nnx.Param))
    Trainer(m, optax.sgd(1.0), loss_fn, micro_batches=micro_batches).step(batch)
    return [a - b for a, b in zip(jax.tree.leaves(nnx.state(m, nnx.Param)), before)]  # = -gradient


def max_diff(x, y):
    return max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(x, y))


one_batch = update(lm_loss, 1)
token_weighted = update(lm_loss, k)
equal = update(equal_weights, k)

# %%
# NBVAL_CHECK_OUTPUT
print(f"trained tokens in the {k} micro-batches:", [int(batch["weights"][i::k].sum()) for i in range(k)])
scale = max(float(jnp.max(jnp.abs(g))) for g in one_batch)
print(f"{k} micro-batches, token-weighted: same update as one batch: {max_diff(one_batch, token_weighted) < 1e-6 * scale}")
print(f"{k} micro-batches, equal weights:  same update as one batch: {max_diff(one_batch, equal) < 1e-6 * scale}")

# %%
print(f"largest gradient entry {scale:.2e}; difference token-weighted {max_diff(one_batch, token_weighted):.1e}, "
      f"equal weights {max_diff(one_batch, equal):.1e}")

# %% [markdown]
# Micro-batches run inside the one jitted step as a `lax.scan`, so `k` changes memory, not compile time.
# The equal-weight mistake is common: it is what you get by averaging per-micro-batch mean losses.

# %% [markdown]
# ## 8. Fine-tuning the tiny model
#
# `Trainer(model, tx, loss_fn, wrt=nnx.Param)` is the whole trainer: one jitted step (gradient, then the
# optimizer), a history of metrics, optional evaluation, checkpoints and loggers. It compiles **once**: every
# batch has the same shape, and a short last batch is zero-padded. We count compilations with a JAX monitoring
# hook while it trains.
#
# Before training, measure the two things we care about on held-out data: the validation loss, and the
# **exact-match accuracy** of greedy answers to test prompts (`TaskEval` samples an answer for each prompt and
# checks its `<answer>` tag).

# %%
STEPS, BATCH = profile.steps, profile.batch
val_data = tokenize_sft(splits["validation"], tokenizer, seq_len=SEQ_LEN)
val_batches = SFTBatches(val_data, 16, shuffle=False, packing=True).epoch(0)
task_eval = TaskEval(model, tokenizer, splits["test"],  # answer budget: the longest reference reply + a margin
                     batch_size=n_test if profile.name == "ci" else n_test // 2)


def val_loss(model):
    return {"loss": evaluate(model, lm_loss, val_batches)["loss"]}


before = val_loss(model) | task_eval(model)
before_texts = task_eval.last_texts
print(f"before: validation loss {before['loss']:.3f}, accuracy {before['accuracy']:.3f}, format {before['format']:.3f}")

# %% [markdown]
# **Predict, then run.** Before the training cell: which domains will supervised fine-tuning help most, and
# which least? Write down a guess of the held-out accuracy after training for `compare` and for `arithmetic`. This
# profile's run answers first; the full run after it answers with error bars.

# %%
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiles.append(seconds) if event == "/jax/core/compile/backend_compile_duration" else None)

tx = adamw_cosine(1e-3, STEPS, warmup_steps=max(1, STEPS // 10))  # AdamW, warmup then cosine decay
trainer = Trainer(model, tx, lm_loss)  # wrt=nnx.Param: every weight trains (full fine-tuning)
compiles.clear()
start = time.perf_counter()
history = trainer.fit(packed.stream(), STEPS, eval_fn=val_loss, eval_every=max(1, STEPS // 5), desc="sft")
seconds = time.perf_counter() - start

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(history)} steps of {BATCH} x {SEQ_LEN} tokens, {len(compiles)} compilation(s)")

# %%
print(f"{seconds:.0f} s, of which compiling {sum(compiles):.0f} s; "
      f"{BATCH * SEQ_LEN * (len(history) - 1) / (seconds - sum(compiles)):.0f} tokens/s after that")
plot_history(history, [("loss", "eval_loss")], title="full SFT of the tiny model")

# %% [markdown]
# The training loss is noisy (each batch has other examples); the validation loss, measured every few steps on
# the same held-out rows, is the curve to trust. Now the held-out accuracy, overall and per domain:

# %%
after = val_loss(model) | task_eval(model)
after_texts = task_eval.last_texts
print(f"validation loss {before['loss']:.3f} -> {after['loss']:.3f}, accuracy {before['accuracy']:.3f} -> "
      f"{after['accuracy']:.3f}, format {before['format']:.3f} -> {after['format']:.3f}")
fig, ax = plt.subplots(figsize=(8, 2.8))
for k_, (name, scores) in enumerate([("before: tiny (pretrained)", before),
                                     (f"after: tiny + full SFT ({STEPS} steps)", after)]):
    ax.bar(np.arange(len(DOMAINS)) + 0.4 * k_, [scores[f"accuracy/{d}"] for d in DOMAINS], 0.4, label=name)
ax.set_xticks(np.arange(len(DOMAINS)) + 0.2, DOMAINS)
ax.set(ylabel="exact-match accuracy", ylim=(0, 1),
       title=f"{profile.name} profile: {n_test // len(DOMAINS)} held-out prompts per domain, greedy answers")
ax.legend()
plt.show()

# %%
for d in ["compare", "count", "facts", "arithmetic"]:
    i = splits["test"]["domain"].index(d)  # the first test prompt of each of these domains
    r = splits["test"][i]
    print(f"[{r['domain']}] {r['prompt']}\n   tiny (pretrained):                {before_texts[i]!r}\n"
          f"   tiny + full SFT ({STEPS} steps):      {after_texts[i]!r}\n   expected answer: {r['answer']}")

# %% [markdown]
# This profile's run is what your machine just measured. In the `ci` profile it is short and has 4 prompts per
# domain, so a bar can move by 0.25 on one answer: read it as a smoke test, not a result. The full `cpu`-profile
# run below was measured once and saved with the course: 300 steps, up to 60 held-out prompts per domain (each
# prompt counted once, so the domains with few distinct questions have a smaller n), 95% Wilson intervals, and the
# command that reproduces it. Arithmetic and sorting stay
# hard for a model this size: each answer depends on several computed steps, which is where RL (phase 6) and
# distillation (phase 7) come in.

# %%
from tunix_lite.course.results import show

show("03_sft", "nice -n 10 python course/results/scripts/sft_lora.py --only 03")  # shipped with the package


# %% [markdown]
# ## 9. Checkpoints and exact resume
#
# A long run will be interrupted. `Checkpoints` (Orbax) saves the model, the optimizer state (Adam's moments and
# the step count of the learning-rate schedule) and the history. Resuming exactly needs all three *and* the data
# position: the trainer takes one batch per step, so a run restored at step `s` continues with
# `stream(start=s)`. Below, a run of 3 steps is compared with one interrupted after 2 steps and resumed in a
# fresh model and trainer.

# %%
def fresh_trainer():
    m, _ = tunix_lite.load("tiny")
    return Trainer(m, tx, lm_loss)  # same model structure, optimizer and batch shape: the compiled step is reused


def fit_counting(trainer, *args, **kwargs):  # -> compilations during the fit
    compiles.clear()
    trainer.fit(*args, **kwargs)
    return len(compiles)


straight = fresh_trainer()
new_compiles = fit_counting(straight, packed.stream(), 3, desc="uninterrupted")
with tempfile.TemporaryDirectory() as directory:
    interrupted = fresh_trainer()
    new_compiles += fit_counting(interrupted, packed.stream(), 2, checkpoints=Checkpoints(directory, every=2),
                                 desc="until interrupted")
    resumed = fresh_trainer()
    step = resumed.restore(Checkpoints(directory))["step"]
    new_compiles += fit_counting(resumed, packed.stream(start=step), 1, desc="resumed")

# %%
# NBVAL_CHECK_OUTPUT
same_params = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(nnx.state(straight.model, nnx.Param)),
                                                        jax.tree.leaves(nnx.state(resumed.model, nnx.Param))))
print("restored at step", step, "| same losses:", [h["loss"] for h in straight.history] == [h["loss"] for h in resumed.history])
print("same parameters after 3 steps:", same_params)

# %%
print("train-step compilations while the three new trainers trained:", new_compiles)

# %% [markdown]
# The new trainers reuse the step compiled in section 8: same model structure, same optimizer object `tx`,
# same batch shape. The resumed one too, which takes care: Orbax reads arrays *committed* to a device, a freshly
# loaded model's are not, and `jit` compiles the two cases as different programs. `restore` therefore places
# what it read as the model's own arrays were, and a resumed run starts without compiling.

# %% [markdown]
# Restoring reads each array into the shape, dtype and sharding of the variable it replaces, so the target can
# be a freshly loaded model (or, in phase 8, one sharded over a mesh).

# %% [markdown]
# ## 10. The same run from the command line
#
# Everything above is wrapped in one function, `run_sft(config)`, and one command. A YAML file sets the fields
# of `SFTConfig`:
#
# ```bash
# tunix-lite sft --config sft_tiny            # full SFT of the tiny model, ~5 min on 2 CPU cores
# tunix-lite sft --config sft_tiny --steps 20 --output-dir runs/try
# ```
#
# It prints the truncation report and the scores before and after, and writes `runs/sft_tiny/` with the
# config, `metrics.jsonl` (one line per step), checkpoints (if `checkpoint_every` is set; an interrupted run
# resumes from the latest) and the fine-tuned model as a Hugging Face checkpoint.

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite import configs
from tunix_lite.training.sft import SFTConfig, run_sft

config = SFTConfig.from_yaml(configs.path("sft_tiny"))  # the file `--config sft_tiny` reads, in the package
print({k: getattr(config, k) for k in ["model", "n_train", "seq_len", "packing", "batch_size", "steps",
                                        "learning_rate", "lora_rank", "n_accuracy"]})

# %%
config = profile.sized(config)  # the file's run; the ci profile cuts it to a few steps on a few prompts
config.output_dir = None  # keep the run in memory
result = run_sft(config)
print(f"{config.steps} steps in {result.seconds:.0f} s; accuracy on {config.n_accuracy} validation prompts: "
      f"before {result.before['accuracy']:.3f}, after {result.after['accuracy']:.3f}")

# %% [markdown]
# ## Recap
#
# - SFT is next-token prediction on demonstrations, in the model's chat template, with the loss on the reply
#   tokens only (and the stop token, so the model learns to end its turn).
# - The loss is a mean over trained tokens of the whole batch, `Σ nll·w / Σ w`, so it does not depend on how
#   examples are grouped into rows, batches or micro-batches.
# - Packing fills rows with several examples; positions restart and segment ids make the attention mask
#   block-diagonal, so each example's logits are exactly what they would be alone.
# - Never truncate silently: the default stops; dropping biases the domain mix; truncating teaches the model
#   not to finish.
# - Seeded per-epoch shuffles and `stream(start=s)` make runs reproducible and resumable; gradient
#   accumulation is exact when micro-batches are weighted by their token counts.
# - One trainer, one compiled step, any loss: the next phases change only `loss_fn` (and `wrt`).
#
# ## Quiz
#
# 1. Why does the completion mask include `<end_of_turn>` but not the `<start_of_turn>model` header?
# 2. A batch has two rows: one with 10 reply tokens of loss 2.0, one with 90 reply tokens of loss 1.0. What is
#    the token-mean loss? And the mean of row means?
# 3. Two examples share a packed row. What would go wrong if their segment ids were equal? And if the second
#    example's positions did not restart at 0?
# 4. You set `truncation="drop"` and accuracy on `sort` does not improve. What would you check first?
# 5. A run is restored from a checkpoint at step 200 but the data stream restarts from batch 0. Is the result
#    the same as an uninterrupted run? Why or why not?
# 6. With `micro_batches=4`, why must the loss report its token count?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
#
# **Next:** the [phase 3 exercises](../exercises/03_sft_exercises.ipynb), the
# [mind-map notes](../course/03_supervised_fine_tuning.md), then
# [phase 4: LoRA and QLoRA](04_lora_qlora.ipynb). Course map: [syllabus](../course/SYLLABUS.md).
