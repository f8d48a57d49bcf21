# %% [markdown]
# # Phase 5 · Preference tuning: DPO, its variants, ORPO and a reward model
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/05_preference_tuning.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - say what a preference pair teaches that a demonstration cannot, and when to use DPO instead of SFT or RL;
# - write the Bradley–Terry model and derive DPO from the KL-regularised RL objective in four lines, and read
#   the *implicit reward* β log π/π_ref that it trains;
# - turn TRL-style `prompt` / `chosen` / `rejected` records into fixed `[pairs, 2, T]` rows with completion masks;
# - compute sequence log-probabilities with a mask, the DPO loss by hand, and the metrics TRL logs
#   (`rewards/margins`, `rewards/accuracies`, `logps/chosen`, ...);
# - train DPO with a frozen reference (precomputed once, or run in the step), measure held-out pair accuracy and
#   the model's own answers before and after, and see what β changes;
# - compare the variants (cDPO, IPO, hinge, robust DPO) on one plot, recognise over-optimisation, and use the
#   reference-free losses (ORPO, SimPO) and unpaired data (KTO);
# - train a Bradley–Terry reward model, the scorer that phase 6's RL can use.
#
# **Prerequisites:** [phase 3](03_supervised_fine_tuning.ipynb) (completion masks, the token-weighted loss, the
# trainer); [phase 4](04_lora_qlora.ipynb) helps (LoRA's free reference model).
# **Time:** about 2.5 hours to read and run (the `ci` profile executes it in about two minutes on a short-domain
# subset of the data; the `cpu` profile starts from the SFT-tuned model and trains for real).
# **Notes:** [phase 5 mind map](../course/05_preference_tuning.md) ·
# **Exercises:** [phase 5 exercises](../exercises/05_preference_exercises.ipynb)

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
from collections import Counter

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx

import tunix_lite
from tunix_lite.data.synthetic import DOMAINS, preference_pairs
from tunix_lite.preference import losses
from tunix_lite.preference.data import PreferenceBatches, tokenize_pairs
from tunix_lite.preference.data import unpair
from tunix_lite.preference.dpo import PreferenceLoss
from tunix_lite.preference.scoring import completion_sums, reference_log_probs
from tunix_lite.training.inputs import reference_policy
from tunix_lite.preference.evaluation import answer_flaw, generation_eval
from tunix_lite.preference.reward_model import RewardFunction, bradley_terry_loss, reward_head
from tunix_lite.training.trainer import Trainer, adamw_cosine, evaluate

# %% [markdown]
# ## 1. Why preferences
#
# SFT (phase 3) shows the model good answers and trains it to imitate them. It never sees what a *bad* answer looks
# like, so it cannot learn what to avoid, and it can only be as good as its demonstrations. A **preference pair**
# is a prompt with two completions and a label saying which is better. That is often easier to get than a perfect
# demonstration (a person, a judge model or a program compares two answers), and it carries the information SFT
# misses: *this, not that*.
#
# | you have | use | learns |
# |---|---|---|
# | good answers to imitate | SFT (phase 3) | the format and the behaviour, one token at a time |
# | pairs: a better and a worse answer | DPO and its family (this phase) | what to prefer, relative to where it started |
# | a checker that scores any answer | RL, GRPO (phase 6) | from its own samples, beyond the data |
#
# The course's pairs come from the same verifiable tasks as SFT. The chosen completion is the reference answer; the
# rejected one keeps the reasoning but makes one of three mistakes: a wrong tagged answer (half the pairs), no
# answer tag at all, or a tag that is never closed. `answer_flaw` names the mistake of any text, so later we can
# count the same mistakes in the model's own answers.

# %%
# NBVAL_CHECK_OUTPUT
S = {  # ci keeps to the five short domains so that every pair fits in 64 tokens; the other profiles use all seven
    "ci": dict(domains=("compare", "count", "facts", "instruction", "sequence"), seq_len=64, n_train=512, n_test=35,
               steps=24, batch=8, lr=1e-4, sweep_steps=6, rm_steps=12),
    "cpu": dict(domains=DOMAINS, seq_len=128, n_train=2000, n_test=140, steps=100, batch=8, lr=5e-5,
                sweep_steps=40, rm_steps=100),
    "tpu": dict(domains=DOMAINS, seq_len=128, n_train=4000, n_test=280, steps=200, batch=32, lr=5e-5,
                sweep_steps=100, rm_steps=200),
}[profile.name]
train_pairs = preference_pairs(S["n_train"], seed=1, domains=S["domains"], split="train")
test_pairs = preference_pairs(S["n_test"], seed=2024, domains=S["domains"], split="test")  # held-out prompts
for key, value in train_pairs[0].items():
    print(f"{key:<9}{value}")
print("\nflaws of the rejected completions:", dict(Counter(answer_flaw(p["rejected"], p["answer"]) for p in train_pairs)))

# %% [markdown]
# ## 2. The Bradley–Terry model
#
# How do we turn "A is better than B" into a loss? The **Bradley–Terry** model (1952) assumes each completion has a
# scalar reward `r` and that the probability of preferring one to the other depends only on the difference:
#
#     P(y_w ≻ y_l | x) = σ(r(x, y_w) − r(x, y_l)),      σ(z) = 1 / (1 + e^(−z))
#
# Equal rewards give a coin flip; a difference of 2 gives 88%. Fitting `r` to labelled pairs is logistic regression
# on the difference: minimise `−log σ(r_w − r_l)`. Only differences matter: adding a constant to every reward
# changes nothing. RLHF fits such a reward model (section 10 trains one), then runs RL against it; DPO skips both.

# %%
z = np.linspace(-6, 6, 200)
fig, axes = plt.subplots(1, 2, figsize=(10, 3))
axes[0].plot(z, 1 / (1 + np.exp(-z)))
axes[0].set(xlabel="r_w − r_l", ylabel="P(y_w ≻ y_l)", title="Bradley–Terry: preference from a reward difference")
axes[1].plot(z, np.log1p(np.exp(-z)))
axes[1].set(xlabel="r_w − r_l", ylabel="−log σ(r_w − r_l)", title="its negative log-likelihood: the loss")
for ax in axes:
    ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## 3. From the RL objective to DPO, in four lines
#
# RLHF maximises reward while staying close to a reference policy π_ref (the SFT model), with strength β:
#
# 1. **Objective:** `max_π  E_{y∼π}[r(x, y)] − β KL(π(·|x) ‖ π_ref(·|x))`.
# 2. **Its exact solution** (a Gibbs distribution): `π*(y|x) = π_ref(y|x) · exp(r(x, y) / β) / Z(x)`.
# 3. **Solve for the reward:** `r(x, y) = β log π*(y|x)/π_ref(y|x) + β log Z(x)`. Any policy defines an
#    **implicit reward** `β log π/π_ref`, up to a term that depends on the prompt only.
# 4. **Put it into Bradley–Terry:** `Z(x)` cancels in the difference, leaving a loss on the policy alone:
#
#        L_DPO = −log σ(β [log π(y_w|x)/π_ref(y_w|x) − log π(y_l|x)/π_ref(y_l|x)])
#
# No reward model, no sampling: a classification loss on pairs whose "logit" is the difference of two log-ratios
# (Rafailov et al. 2023). Check steps 2–3 numerically on a toy prompt with four possible answers:

# %%
# NBVAL_CHECK_OUTPUT
ref = np.array([0.4, 0.3, 0.2, 0.1])  # π_ref over four answers
reward = np.array([1.0, 2.0, 0.0, -1.0])
for beta in (0.25, 1.0, 4.0):
    optimal = ref * np.exp(reward / beta)
    optimal /= optimal.sum()  # π* = π_ref exp(r/β) / Z
    implicit = beta * np.log(optimal / ref)  # β log π*/π_ref = r − β log Z
    kl = float(np.sum(optimal * np.log(optimal / ref)))
    print(f"β={beta:<5} π*={np.round(optimal, 3)}  E[r]={optimal @ reward:.2f}  KL={kl:.2f}  "
          f"implicit − r = {np.round(implicit - reward, 3)}")

# %% [markdown]
# Small β lets π* move far from π_ref toward the best answer (high reward, high KL); large β keeps it near π_ref.
# And `β log π*/π_ref − r` is the same number for every answer (it is `−β log Z`): the implicit reward is the true
# reward up to a constant, which Bradley–Terry never sees.
#
# ## 4. Pairs become rows
#
# `tokenize_pairs` reads TRL's convention (`prompt`, `chosen`, `rejected`, as plain text or chat messages) and
# writes each pair as **two rows** sharing the prompt: `[pairs, 2, T]`, so that a pair never splits across
# micro-batches. The rows follow SFT's conventions (phase 3): inputs and targets shifted by one, padding at position
# −1, and `weights` is the **completion mask**, 1 on the reply and its `<end_of_turn>` only. Too-long pairs are never
# cut silently: the report says what happened (`truncation="error"` by default).

# %%
# NBVAL_CHECK_OUTPUT
model, tokenizer = tunix_lite.load("tiny")
train_data = tokenize_pairs(train_pairs, tokenizer, seq_len=S["seq_len"])
test_data = tokenize_pairs(test_pairs, tokenizer, seq_len=S["seq_len"])
print("train:", train_data.report)
batch = PreferenceBatches(train_data, S["batch"], shuffle=False).epoch(0)[0]
print({key: value.shape for key, value in batch.items()})
for j, name in enumerate(("chosen", "rejected")):
    trained = batch["targets"][0, j][batch["weights"][0, j] > 0]
    print(f"{name:<9} trained on: {tokenizer.decode(trained.tolist(), skip_special=False)!r}")

# %% [markdown]
# ## 5. Scoring a completion, and the loss by hand
#
# log π(y|x) is the sum of the log-probabilities of the completion's tokens: the model runs on both rows of each pair
# (as one `[2B, T]` batch), `sequence_log_probs` gives every token's log-probability, and the completion mask keeps
# the reply's. `completion_sums` returns those sums and the token counts, `[B, 2]` each.
#
# **Predict, then run.** Before any training, the policy *is* the reference. What is the DPO loss of every pair,
# whatever β? What accuracy does `rewards/accuracies` report?

# %%
# NBVAL_CHECK_OUTPUT
BETA = 0.1
scores = nnx.jit(completion_sums)
sums, counts = scores(model, batch)
h = (sums[:, 0] - sums[:, 0]) - (sums[:, 1] - sums[:, 1])  # policy == reference: every log-ratio is 0
by_hand = float(jnp.mean(-jax.nn.log_sigmoid(BETA * h)))
_, metrics = losses.sigmoid(sums[:, 0], sums[:, 1], sums[:, 0], sums[:, 1], jnp.ones(len(h)), beta=BETA)
print(f"summed log-probs of pair 0: chosen {float(sums[0, 0]):.2f}, rejected {float(sums[0, 1]):.2f} "
      f"({int(counts[0, 0])} and {int(counts[0, 1])} tokens)")
print(f"loss by hand {by_hand:.4f} = log 2 = {np.log(2):.4f};  library {float(metrics['loss']):.4f}, "
      f"rewards/accuracies {float(metrics['rewards/accuracies'])}, rewards/margins {float(metrics['rewards/margins'])}")

# %% [markdown]
# Every pair starts at `log 2` with a margin of exactly 0, so `rewards/accuracies` (the share of pairs with a
# positive implicit-reward margin) starts at **0**: ties do not count. `logps/accuracies` asks a different
# question: does the policy *itself* give the chosen completion the higher log-probability? The pretrained model
# already does for most pairs, since a wrong or unclosed answer is less likely text.
#
# The gradient explains what DPO does: with `h` the log-ratio difference,
# `∂L/∂θ = −β σ(−β h) [∇ log π(y_w) − ∇ log π(y_l)]`. It raises the chosen completion's log-probability, lowers
# the rejected one's, and weighs each pair by `σ(−β h)`: how wrong the implicit reward still ranks it.
#
# ## 6. Training DPO
#
# The reference is the model we start from, frozen. Its log-probs never change, so we compute them **once** for
# every pair and let them ride in the batches as `ref_logps` (`reference_log_probs`); the training step then runs
# the policy only. (The other way, `frozen=reference` in the trainer, runs the reference inside every step: needed
# when the data is generated on the fly, as in phase 6. With LoRA the reference is the base with the adapters off,
# `lora.without_adapters`, at no memory cost.)
#
# We start from the **SFT-tuned** tiny model, the output of `tunix_lite/configs/sft_tiny.yaml`: trained here the
# first time (a few minutes on a CPU; the `ci` profile trains it for a few steps), then loaded from `runs/`.

# %%
from tunix_lite.course.sft_start import sft_model

start, _ = tunix_lite.load(sft_model(profile))  # the SFT stage, as `tunix-lite train --config sft_tiny` saves it
reference = reference_policy(start)  # a frozen clone, in eval mode (with LoRA: the base view)
dpo = PreferenceLoss("sigmoid", beta=BETA)
train_extras = {"ref_logps": reference_log_probs(reference, train_data, S["batch"])}
test_batches = PreferenceBatches(test_data, S["batch"], shuffle=False,
                                 extras={"ref_logps": reference_log_probs(reference, test_data, S["batch"])}).epoch(0)
policy = nnx.clone(start)
records = [{"prompt": p["prompt"], "answer": p["answer"], "completion": p["chosen"], "domain": p["domain"]}
           for p in test_pairs]
answers = generation_eval(policy, tokenizer, records, batch_size=len(records))  # greedy, one compiled sampler
SHOWN = ("loss", "rewards/accuracies", "logps/accuracies", "rewards/margins", "logps/chosen", "logps/rejected", "kl")


def pair_metrics(policy):
    return {k: v for k, v in evaluate(policy, dpo, test_batches).items() if k in SHOWN}


before = pair_metrics(policy) | answers(policy)

# %%
trainer = Trainer(policy, adamw_cosine(S["lr"], S["steps"], warmup_steps=S["steps"] // 10), dpo)
history = trainer.fit(PreferenceBatches(train_data, S["batch"], seed=0, extras=train_extras).stream(), S["steps"],
                      eval_fn=pair_metrics,
                      eval_every=max(1, S["steps"] // 6), log_every=S["steps"] // 6, desc="dpo")
after = pair_metrics(policy) | answers(policy)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(history)} steps of {S['batch']} pairs x 2 rows x {S['seq_len']} tokens")

# %%
steps = [h["step"] for h in history]
fig, axes = plt.subplots(1, 3, figsize=(14, 3.2))
axes[0].plot(steps, [h["logps/chosen"] for h in history], label="logps/chosen")
axes[0].plot(steps, [h["logps/rejected"] for h in history], label="logps/rejected")
axes[0].set(title="training pairs: log π(y|x)", xlabel="step")
axes[1].plot(steps, [h["rewards/margins"] for h in history], label="rewards/margins (train)")
axes[1].plot(steps, [h["kl"] for h in history], label="kl (train)")
axes[1].set(title="implicit reward margin and drift", xlabel="step")
evals = [h for h in history if "eval_rewards/accuracies" in h]
axes[2].plot([h["step"] for h in evals], [h["eval_rewards/accuracies"] for h in evals], marker="o",
             label="rewards/accuracies")
axes[2].plot([h["step"] for h in evals], [h["eval_logps/accuracies"] for h in evals], marker="o",
             label="logps/accuracies")
axes[2].set(title="held-out pairs", xlabel="step", ylim=(0, 1.05))
for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend()
plt.show()
print(f"{'held out':<20}{'before':>8}{'after':>8}")
for key in ("rewards/accuracies", "logps/accuracies", "rewards/margins", "logps/chosen", "logps/rejected", "kl",
            "accuracy", "format", "flaw/wrong", "flaw/untagged", "flaw/unclosed"):
    print(f"{key:<20}{before[key]:>8.3f}{after[key]:>8.3f}")

# %% [markdown]
# Read the curves as TRL users do. `rewards/margins` (β h, averaged) grows and the held-out `rewards/accuracies`
# climbs; `logps/rejected` falls much faster than `logps/chosen` moves. Look at the `before` column: the margins
# are 0 only up to float32 rounding (`-0.000`). The reference's log-probs were computed once, by another compiled
# program than the one that scores the policy, so each tie lands a rounding error to one side or the other, and
# `rewards/accuracies` before training counts those signs: noise, not a preference. `kl` is the mean log-ratio
# `log π/π_ref` over both completions: on data the policy did not sample it is not a true KL, but it shows how far the
# policy has moved on the pairs (negative: both completions lost probability on average). The last rows are the
# model's own greedy answers to the held-out prompts: exact match and the three flaws the rejected completions
# carried. A short `ci` run moves the pair metrics far more than the answers.
#
# ## 7. What β does
#
# β is the price of moving away from the reference. A sweep, a few steps each from the same start (the `cpu`
# profile runs longer): the log-ratio difference `h` the policy reaches, its drift, and the held-out pair accuracy.

# %%
betas = (0.03, 0.3, 3.0) if profile.name == "ci" else (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
sweep = {}
for beta in betas:
    loss_fn = PreferenceLoss("sigmoid", beta=beta)
    run = Trainer(nnx.clone(start), adamw_cosine(S["lr"] * 3, S["sweep_steps"], warmup_steps=1), loss_fn)
    run.fit(PreferenceBatches(train_data, S["batch"], seed=1, extras=train_extras).stream(), S["sweep_steps"],
            log_every=S["sweep_steps"], desc=f"β={beta}")
    held = evaluate(run.model, loss_fn, test_batches)
    sweep[beta] = {"h": held["rewards/margins"] / beta, "kl": held["kl"], "accuracy": held["rewards/accuracies"]}
fig, axes = plt.subplots(1, 3, figsize=(13, 3))
for ax, key, title in zip(axes, ("h", "kl", "accuracy"), ("log-ratio difference h", "kl (drift)",
                                                          "held-out rewards/accuracies")):
    ax.plot(betas, [sweep[b][key] for b in betas], marker="o")
    ax.set(xscale="log", xlabel="β", title=title)
    ax.grid(alpha=0.3)
plt.show()


# %% [markdown]
# The gradient weight `σ(−β h)` explains the shape: with a small β a pair keeps pulling until `h` is large (the
# policy moves far from the reference, `|kl|` grows), while a large β satisfies the loss with a small `h`. β trades
# how much the policy may change against how much it must.
#
# ## 8. The variants, side by side
#
# Every member of the family is a different function of the same `h` (and each is a few lines in
# `tunix_lite/preference/losses.py`, with its paper's equation):
#
# | loss | per pair | idea |
# |---|---|---|
# | sigmoid (DPO) | `−log σ(βh)` | Bradley–Terry likelihood |
# | cDPO | `−(1−ε) log σ(βh) − ε log σ(−βh)` | labels flipped with probability ε: stop at a finite margin |
# | robust (rDPO) | `[−(1−ε) log σ(βh) + ε log σ(−βh)] / (1−2ε)` | an unbiased estimate of the clean-label loss |
# | hinge (SLiC) | `max(0, 1 − βh)` | no gradient once the margin reaches 1/β |
# | IPO | `(h − 1/(2τ))²` on per-token means | regress `h` to a target instead of pushing it to infinity |

# %%
def per_pair(loss, **settings):
    """The library's loss of one pair, as a function of its log-ratio difference h (vectorised over h)."""
    zero, one = jnp.zeros(1), jnp.ones(1)
    return jax.vmap(lambda h: loss(h[None], zero, zero, zero, one, **settings)[0])


variants = {
    "sigmoid": per_pair(losses.sigmoid, beta=0.2),
    "cDPO ε=0.1": per_pair(losses.sigmoid, beta=0.2, label_smoothing=0.1),
    "robust ε=0.1": per_pair(losses.robust, beta=0.2, label_smoothing=0.1),
    "hinge": per_pair(losses.hinge, beta=0.2),
    "IPO τ=0.05 (÷10)": lambda h: per_pair(losses.ipo, beta=0.05)(h / 20) / 10,  # h per token over 20 tokens
}
hs = jnp.linspace(-15, 40, 400)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
for name, fn in variants.items():
    axes[0].plot(hs, fn(hs), label=name)
    axes[1].plot(hs, -jax.vmap(jax.grad(lambda h, f=fn: f(h[None])[0]))(hs), label=name)
axes[0].set(title="per-pair loss, β = 0.2", xlabel="h = log-ratio(chosen) − log-ratio(rejected)", ylim=(-0.5, 4))
axes[1].set(title="push on h: −dL/dh", xlabel="h", ylim=(-0.25, 0.3))
for ax in axes:
    ax.axhline(0, color="k", lw=0.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Only the plain sigmoid and the hinge (until its margin) push every pair in the same direction forever; cDPO and
# robust DPO turn the push around past a margin (`βh = log((1−ε)/ε)` for cDPO), and IPO pulls `h` back to its
# target from both sides. On clean, deterministic preferences (ours: a checker wrote the labels) that matters less
# than on noisy human labels.
#
# ## 9. Over-optimisation: what it looks like
#
# The metric DPO optimises is the pair's margin, not the task. A policy can rank held-out pairs better and better
# while its own answers get worse: the rejected completions fall fast, the chosen ones fall too (a negative
# `logps/chosen` trend, `kl` far below 0), probability mass leaks to text that is in neither completion, and the
# generations drift. This course's first recipe did exactly that: sigmoid DPO (with an NLL term) ranked 0.94 of the
# validation pairs right, while its greedy answers to the 421 test prompts went from 206 right to 194, seven of them
# cut short against the SFT model's one (`course/results/05_preference_validation.md`); section 12's recipe is the
# remedy that held.
# The signs to watch: `logps/chosen` decreasing, `kl` growing in magnitude, answers getting worse at constant or
# rising pair accuracy. The remedies: a larger β, fewer steps or a lower learning rate, label smoothing, IPO's
# bounded target, or holding the chosen completion up with its NLL (RPO, `nll_weight`), which is what ORPO builds in.
#
# ## 10. Without a reference, and without pairs
#
# **ORPO** (Hong et al. 2024) needs no reference model at all: it adds to the chosen completion's NLL (SFT) a term
# preferring the chosen completion's **odds** `P/(1−P)` (P the per-token mean probability), so one stage does SFT
# and preference learning from the base model. **SimPO** (Meng et al. 2024) uses the per-token mean log-prob as the
# reward, `−log σ(β(log π(y_w)/|y_w| − log π(y_l)/|y_l|) − γ)`, with a target margin γ. Both save the reference's
# memory and compute. **KTO** (Ethayarajh et al. 2024) learns from *unpaired* examples, each labelled desirable or
# not (TRL's `prompt` / `completion` / `label`), against a reference point estimated from mismatched prompts.
# The same batch, three losses (the pretrained model as policy and reference):

# %%
# NBVAL_CHECK_OUTPUT
for loss_type in ("orpo", "simpo"):
    loss, metrics = nnx.jit(PreferenceLoss(loss_type, beta=0.1 if loss_type == "orpo" else 2.0))(model, batch)
    extra = f", nll_loss {float(metrics['nll_loss']):.3f}" if loss_type == "orpo" else ""
    print(f"{loss_type:<6} loss {float(loss):.3f}, rewards/accuracies {float(metrics['rewards/accuracies']):.3f}{extra}")
print("unpaired (KTO) examples from two pairs:", [(r["completion"][-22:], r["label"]) for r in unpair(train_pairs[:2])])

# %% [markdown]
# ## 11. A reward model
#
# RLHF's first stage, and a scorer for phase 6: a **Bradley–Terry reward model** is the language model with a
# scalar head (`ScalarHead` on the final features) trained on the same pairs with `−log σ(r(x, y_w) − r(x, y_l))`.
# Its held-out metric is pairwise accuracy. `RewardFunction` wraps it as a TRL-style reward function,
# `reward(prompts, completions) -> [float]`, which the RL trainer calls like any programmatic reward.

# %%
rm, trained = reward_head(nnx.clone(model), seed=0)  # the head starts at zero: every pair ties
rm_test = PreferenceBatches(test_data, S["batch"], shuffle=False).epoch(0)
rm_before = evaluate(rm, bradley_terry_loss, rm_test)
Trainer(rm, adamw_cosine(1e-4, S["rm_steps"], warmup_steps=1), bradley_terry_loss, wrt=trained).fit(
    PreferenceBatches(train_data, S["batch"], seed=2).stream(), S["rm_steps"], log_every=S["rm_steps"], desc="reward")
rm_after = evaluate(rm, bradley_terry_loss, rm_test)
print(f"held-out pairwise accuracy {rm_before['accuracy']:.3f} -> {rm_after['accuracy']:.3f}, "
      f"margin {rm_before['margin']:.3f} -> {rm_after['margin']:.3f}")
reward = RewardFunction(rm, tokenizer, seq_len=S["seq_len"])
pair = test_pairs[0]
print(f"{pair['prompt']}\n  chosen {reward([pair['prompt']], [pair['chosen']])[0]:+.3f}: {pair['chosen']}\n"
      f"  rejected {reward([pair['prompt']], [pair['rejected']])[0]:+.3f}: {pair['rejected']}")

# %% [markdown]
# ## 12. Results on held-out pairs (the `cpu` recipe)
#
# The `ci` run above trains for seconds. The full recipes (SFT → DPO, `tunix_lite/configs/dpo_tiny.yaml`, beside ORPO from the
# pretrained model, `tunix_lite/configs/orpo_tiny.yaml`) are measured once on held-out pairs and saved with the course; the
# table names the command that reproduces it and which model each column is.

# %%
from tunix_lite.course.results import show

show("05_preference", "nice -n 10 python course/results/scripts/preference.py --runs dpo,orpo --n-test 700 --out tunix_lite/course/results/05_preference")

# %% [markdown]
# **Read it critically.** DPO learns to rank held-out pairs (implicit-reward accuracy 0 → 0.94 on 700 test pairs,
# interval 0.92–0.95) mostly by pushing the rejected completions down: `log π(rejected)` falls by 3.4 nats, the chosen
# by 0.15. Greedy answers to the 421 distinct test prompts went from 0.489 to 0.504 exact match, 6 answers more
# (sort +3, arithmetic +2, count and sequence +1, facts −1 of its 12). Exact match did not fall; but read the
# interval: a gain of 6 is within what two runs on other training pairs differ by.
# The recipe is DPOP, not plain DPO, and section 9's over-optimisation is why. The plain sigmoid recipe tried first
# ranked pairs as well but taught the model to cut answers short. Unclosed-tag pairs made it close the tag one
# repetition early, and its own wrong answers as rejected sides made it copy numbers with a digit missing
# ("Smallest is 2" for 20). On these 421 test prompts it lost 12 answers net, with 7 cut short and 39 numbers copied short,
# against the SFT model's 1 and 13. DPOP's penalty forbids the chosen side to fall below the reference, and the DPOP
# model has 2 and 14 (`course/results/05_preference_validation.md`).
# ORPO from the *pretrained* model (no SFT stage) reaches pair accuracy 0.82 and lifts exact match from 0.08 to 0.36:
# one stage teaches the format (no missing tag remains) and part of the skill, but not as much as SFT does (0.49).

# %% [markdown]
# ## 13. The same run from the command line
#
# `run_dpo(config)` wraps all of the above (data, reference log-probs, the loss, before/after evaluation, outputs,
# checkpoints, resume), and `tunix-lite train` runs it from a YAML file. DPO starts from the SFT model, so it is two
# stages:
#
# ```bash
# tunix-lite train --config sft_tiny    # stage 1: writes runs/sft_tiny/model
# tunix-lite train --config dpo_tiny    # stage 2: DPO from it (loss_type, beta, reference, ...)
# tunix-lite train --config orpo_tiny   # or ORPO, from the pretrained model, in one stage
# tunix-lite train --config dpo_gemma3_270m   # LoRA-DPO of Gemma 3 270M (reference = base view)
# ```
#
# Every key is documented in [tunix_lite/configs/README.md](../tunix_lite/configs/README.md): `loss_type` (sigmoid, ipo, hinge, robust,
# orpo, simpo, kto), `beta`, `label_smoothing`, `nll_weight`, `on_policy_rejected`, `reference: precomputed | online`,
# `truncation_mode`.

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite.training.algorithms import load_config

config = load_config("dpo_tiny")  # a config shipped with the package, by name (as `--config dpo_tiny`)
print({k: getattr(config, k) for k in ["algorithm", "model", "loss_type", "dpop_lambda", "beta",
                                        "on_policy_rejected", "on_policy_domains", "reference", "n_train", "seq_len",
                                        "batch_size", "steps", "learning_rate"]})

# %% [markdown]
# ## Recap
#
# - A preference pair says *this, not that*; Bradley–Terry turns it into `−log σ(r_w − r_l)`.
# - DPO is that loss with the implicit reward `β log π/π_ref`: the KL-regularised RL objective solved in closed form,
#   no reward model and no sampling. At the start every pair costs `log 2` with a margin of 0.
# - Pairs are two rows sharing a prompt, `[pairs, 2, T]`, with completion masks; the loss is a mean over pairs, so
#   padded pairs count 0 and micro-batches combine exactly.
# - The reference is the starting model, frozen: precompute its log-probs once, or run it in the step (with LoRA,
#   the base view costs no memory).
# - β sets how far the policy may move; the variants change how the loss treats large margins (cDPO, robust, hinge,
#   IPO) or drop the reference (ORPO, SimPO) or the pairs (KTO).
# - Watch for over-optimisation: pair accuracy up, `logps/chosen` and answers down. A reward model trained on the same
#   pairs is the scorer RL needs.
#
# ## Quiz
#
# 1. Before training, what are the DPO loss, `rewards/margins` and `rewards/accuracies` of any batch, and why?
# 2. Why does `Z(x)` disappear from the DPO loss? What would go wrong if it did not?
# 3. A pair has `h = 20` and β = 0.1. How hard does sigmoid DPO still push on it, compared with a pair at `h = 0`?
#    And cDPO with ε = 0.1?
# 4. Why are the chosen and rejected rows of a pair kept in the same micro-batch?
# 5. Held-out `rewards/accuracies` is 0.95 but exact match fell. Name two metrics you would look at and two changes
#    you would try.
# 6. Why can ORPO start from the pretrained model while DPO usually starts from an SFT model?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
#
# **Next:** the [phase 5 exercises](../exercises/05_preference_exercises.ipynb), the
# [mind-map notes](../course/05_preference_tuning.md), then phase 6 (RL with GRPO). Course map:
# [syllabus](../course/SYLLABUS.md).
