# %% [markdown]
# # Phase 6 · Reinforcement learning: the GRPO family and PPO
#
# **Colab / Kaggle:** tunix-lite 0.1.0 is not published yet: upload `notebooks/06_reinforcement_learning.ipynb` to Colab or Kaggle, attach the wheel (`pip wheel --no-deps -w dist .` in a checkout) as a Kaggle dataset or in Colab's Files pane, and run the first code cell.
#
# **You will learn to**
# - say what RL adds after SFT and preference tuning: learning from the model's *own* samples, scored by a program;
# - write reward functions in TRL's convention, weight several, and read each one's curve;
# - go from REINFORCE to a baseline, to PPO's clipped ratio, to GRPO, where a **group** of samples of the same
#   prompt replaces the critic; compute group advantages (GRPO, Dr. GRPO, RLOO) by hand;
# - build the GRPO loss from its parts: the clipped surrogate (with DAPO's clip-higher), the k1/k3 KL estimators
#   to a frozen reference, and the three ways of turning per-token losses into one number;
# - sample rollouts with the KV-cache sampler, read them as text with their rewards, and train GRPO with curves of
#   reward, KL and completion length;
# - compare GRPO, Dr. GRPO, RLOO and PPO (GAE, a value head) on one budget, and recognise reward hacking;
# - explain the rollout-engine seam: where vLLM or SGLang-JAX would sample, on a mesh of their own.
#
# **Prerequisites:** [phase 3](03_supervised_fine_tuning.ipynb) (completion masks, the trainer, exact means);
# [phase 5](05_preference_tuning.ipynb) (a frozen reference model, β, the KL-regularised objective).
# **Time:** about 4 hours to read, run and do the exercises (the `ci` profile executes it in about a minute with
# a few steps of SFT and GRPO; the `cpu` profile trains both for real).
# **Notes:** [phase 6 mind map](../course/06_reinforcement_learning.md) ·
# **Exercises:** [phase 6 exercises](../exercises/06_rl_exercises.ipynb)

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

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import tunix_lite
from tunix_lite.data.synthetic import DOMAINS, make_splits
from tunix_lite.rewards.functions import RewardError, Rewards, overlong_penalty
from tunix_lite.rewards.tags import reward_exact_match, reward_format
from tunix_lite.rl import advantages, losses
from tunix_lite.rl.engine import RolloutEngine, SamplerEngine
from tunix_lite.rl.grpo import GRPOConfig, run_grpo
from tunix_lite.rl.rollouts import Prompts, sample_groups
from tunix_lite.training.evals import plot_history

# %% [markdown]
# ## 1. Why RL after SFT
#
# SFT (phase 3) imitates demonstrations; DPO (phase 5) learns from pairs someone else wrote. Neither ever trains on
# what the model itself would say. When a **program can check an answer** (a math result, a passing test, a format),
# we can do better: sample answers from the model, score them, and make the better ones more likely. The data now
# comes from the policy, and changes as it learns.
#
# | you have | use | learns from |
# |---|---|---|
# | good answers to imitate | SFT | the teacher's tokens |
# | pairs: better and worse | DPO family | someone else's samples |
# | a checker that scores any answer | RL: GRPO, PPO (this phase) | its **own** samples, beyond the data |
#
# The loop, once per step: **rollout** (sample G completions of each of B prompts from the current policy) →
# **reward** (score each) → **advantage** (how much better than expected) → **update** (raise the log-probability
# of tokens in better-than-expected completions, lower the others) → repeat with the new weights.

# %%
# NBVAL_CHECK_OUTPUT
S = {  # ci keeps to short prompts and a few steps
    "ci": dict(domains=("compare", "count", "facts", "instruction", "sequence"), n_train=256,
               n_test=15, prompts=4, group=4, max_new_tokens=40, seq_len=96, steps=4, lr=1e-4),
    "cpu": dict(domains=DOMAINS, n_train=2000, n_test=140, prompts=8, group=8, max_new_tokens=96,
                seq_len=128, steps=100, lr=1e-4),
    "tpu": dict(domains=DOMAINS, n_train=4000, n_test=280, prompts=32, group=8, max_new_tokens=96,
                seq_len=128, steps=200, lr=1e-4),
}[profile.name]
splits = make_splits(S["n_train"], 0, S["n_test"], domains=S["domains"], seed=1)
record = splits["train"][0]
print({k: record[k] for k in ("domain", "prompt", "answer")})

# %% [markdown]
# ## 2. Rewards are plain functions
#
# A reward function takes the prompts, the completions and any other dataset column, and returns one number per
# completion: `reward(prompts, completions, **columns) -> list[float]`. That is TRL's convention, so a function
# written for TRL's `GRPOTrainer` works here unchanged. The course's tasks come with two:
#
# - `reward_exact_match`: 1 when the last `<answer>…</answer>` equals the reference (`answer` is a dataset column);
# - `reward_format`: 1 when the completion has exactly one non-empty answer tag, and ends with it.
#
# **Predict, then run.** Score four completions of the prompt above: the reference, a wrong answer, no tag, and the
# right answer followed by more text. What does each function give each one?

# %%
# NBVAL_CHECK_OUTPUT
right = record["completion"]
candidates = {"reference": right, "wrong answer": right.replace(record["answer"], "0"),
              "no tag": record["answer"], "answer, then more": right + " Done."}
texts = list(candidates.values())
exact = reward_exact_match(None, texts, answer=[record["answer"]] * 4)
form = reward_format(None, texts)
for name, e, f in zip(candidates, exact, form):
    print(f"{name:<18} exact_match {e}  format {f}")

# %% [markdown]
# "Answer, then more" is still correct but badly formed: the format reward teaches the model to **stop** once it has
# answered. Several rewards are combined with weights, `total = Σ w_k r_k`, and each one is kept and logged on its
# own (`reward/exact_match`, `reward/format`), so you can see which one moves. A reward that raises, or returns the
# wrong number of values, stops the run with its name: a silent `None` or a list one short would otherwise shift
# every reward by one completion.

# %%
# NBVAL_CHECK_OUTPUT
rewards = Rewards({"exact_match": reward_exact_match, "format": reward_format}, weights=[1.0, 0.5])
total, parts = rewards(["p"] * 4, texts, answer=[record["answer"]] * 4)
print("total", total, "parts", {k: v.tolist() for k, v in parts.items()})


def too_short(prompts, completions, **columns):
    return [1.0] * (len(completions) - 1)


try:
    Rewards({"too_short": too_short})(["p"] * 4, texts)
except RewardError as e:
    print("RewardError:", e)

# %% [markdown]
# DAPO's **overlong penalty** is a reward too: 0 until the last `buffer` tokens of the budget, then linear down to
# −1, counted in **tokens** (`completion_ids` is passed to every reward; counting characters instead would punish
# digits and short words unevenly).

# %%
penalty = overlong_penalty(max_tokens=96, buffer=32)
lengths = np.arange(0, 110)
plt.figure(figsize=(5, 2.6))
plt.plot(lengths, penalty(None, None, completion_ids=[[0] * n for n in lengths]))
plt.xlabel("completion length (tokens)")
plt.title("overlong penalty, budget 96, buffer 32")
plt.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## 3. From REINFORCE to group advantages
#
# **REINFORCE.** The gradient of the expected reward is `E[ R · ∇ log π(y|x) ]`: sample, and push every token of a
# completion up in proportion to its reward. Unbiased, but very noisy: with rewards in [0, 2], *every* sample gets
# pushed up, the good ones only a little more.
#
# **A baseline.** Subtracting anything `b` that does not depend on the sample keeps the estimate unbiased and can cut
# its variance a lot: `E[ (R − b) ∇ log π ]`. `R − b` is the **advantage**: positive for better than expected.
#
# **Where the baseline comes from.** PPO learns one: a value network (a **critic**) predicts the reward from the
# state. GRPO samples **G completions of the same prompt** and uses their mean reward: no second network to train,
# no value error to chase; the price is G samples per prompt. Three estimators (`tunix_lite/rl/advantages.py`):
#
# | | advantage of sample i | note |
# |---|---|---|
# | GRPO | `(r_i − mean) / std` | published; the std weighs nearly-solved and hopeless prompts up |
# | Dr. GRPO | `r_i − mean` | "GRPO Done Right": drop the std (and the length bias, section 5) |
# | RLOO | `r_i − mean of the others` | `= G/(G−1) ×` Dr. GRPO's |
#
# **Predict, then run.** Two prompts, G = 4 each. The first group's rewards are `[2, 1, 1, 0]`; the second's are all
# `1`. What advantages does each estimator give the second group?

# %%
# NBVAL_CHECK_OUTPUT
group_rewards = jnp.array([2.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
for name, estimator in advantages.ESTIMATORS.items():
    a = estimator(group_rewards, 4)
    print(f"{name:<7}", np.round(np.asarray(a), 3), " group means", np.round(np.asarray(a).reshape(2, 4).mean(1), 3) + 0.0)

# %% [markdown]
# A group whose completions all scored the same carries **no signal**: every estimator gives it exactly 0 (we set
# it to 0, not to `r − mean`, which can be an ulp off). A prompt the model always solves, or never does, teaches
# nothing. That is why the logs count `zero_signal_groups`, and why DAPO's **dynamic sampling** drops such groups and
# samples more prompts (`dynamic_sampling: true`). Within a group, advantages sum to zero: some completions are
# pushed up, the others down.
#
# ## 4. The clipped surrogate
#
# One rollout is expensive, so PPO reuses it for several optimizer steps (μ inner iterations, or mini-batches).
# After the first step the policy has moved and the samples come from an older policy π_old; importance weighting
# by the **ratio** `ρ_t = π(y_t) / π_old(y_t)` corrects for that. PPO then limits how far one rollout can move a
# token: it maximises
#
#     min(ρ_t A,  clip(ρ_t, 1 − ε_low, 1 + ε_high) A)
#
# so once a token's probability has risen by `ε_high` (A > 0) or fallen by `ε_low` (A < 0), its gradient stops.
# **DAPO's clip-higher** uses `ε_high = 0.28 > ε_low = 0.2`: rare tokens with a good advantage get more room to grow
# (a token at probability 0.01 may only reach 0.012 with ε = 0.2), which keeps exploration alive.

# %%
rho = jnp.linspace(0.5, 1.6, 221)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
for ax, adv in zip(axes, (1.0, -1.0)):
    for eps_high, style in ((0.2, "-"), (0.28, "--")):
        per_token, _, clipped = losses.clipped_surrogate(jnp.log(rho)[None], jnp.zeros((1, rho.size)),
                                                         jnp.array([adv]), jnp.ones((1, rho.size)),
                                                         eps_low=0.2, eps_high=eps_high)
        ax.plot(rho, -per_token[0], style, label=f"ε_low 0.2, ε_high {eps_high}")
    ax.axvline(1.0, color="k", lw=0.5)
    ax.set(title=f"objective per token, A = {adv:+}", xlabel="ratio ρ = π / π_old")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Where the curve is flat the gradient is zero: the clip has acted. **Predict, then run.** At the first optimizer
# step of a rollout, the policy *is* π_old. What is ρ for every token, and what fraction of tokens does the clip
# touch? (`grpo_objective` returns both as metrics: `ratio` and `clipped`.)

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite.rl.losses import grpo_objective

rng = np.random.default_rng(0)
logp = jnp.asarray(rng.normal(-2.0, 0.5, (4, 6)), jnp.float32)
mask = jnp.asarray([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]], jnp.float32)
adv = advantages.grpo_advantages(jnp.array([1.0, 0.0, 2.0, 1.0]), 4)
_, first = grpo_objective(logp, logp, None, adv, mask)
_, later = grpo_objective(logp + 0.3 * jnp.sign(adv)[:, None], logp, None, adv, mask)
print(f"first step: ratio {float(first['ratio']):.3f}, clipped {float(first['clipped']):.3f}")
print(f"policy moved by e^0.3 = {np.exp(0.3):.2f} on every token: ratio {float(later['ratio']):.3f}, "
      f"clipped {float(later['clipped']):.3f}")

# %% [markdown]
# With one optimizer step per rollout (μ = 1, one mini-batch: the default), π_old is the current policy under
# `stop_gradient`, ρ is exactly 1 and the clip never acts: GRPO is then plain REINFORCE with a group baseline.
# The clip matters with `inner_iterations > 1` or `mini_batches > 1`; the run then recomputes π_old's log-probs once
# per rollout (`rollouts.old_log_probs`), rather than trusting the sampler's, which may come from another kernel.
#
# ## 5. KL to the reference, and how tokens become one number
#
# GRPO adds `β · KL(π ‖ π_ref)` per token, with π_ref the model we started from, frozen: the same anchor as DPO's
# (phase 5). With `d = log π_ref − log π` on the sampled token:
#
# - **k1** `= −d`: unbiased, but a single sample can be negative;
# - **k3** `= e^d − d − 1`: also unbiased, never negative, and 0 exactly when π = π_ref (GRPO's choice).
#
# `beta: 0` builds no reference model at all (DAPO drops it): one forward pass and one model's memory saved. With
# LoRA the reference is the base with the adapters off, at no memory cost.

# %%
d = jnp.linspace(-2, 2, 201)  # log π_ref − log π on the sampled token
plt.figure(figsize=(5, 3))
plt.plot(d, losses.kl_k1(jnp.zeros_like(d), d), label="k1 = log π − log π_ref")
plt.plot(d, losses.kl_k3(jnp.zeros_like(d), d), label="k3 = e^d − d − 1")
plt.axhline(0, color="k", lw=0.5)
plt.xlabel("d = log π_ref − log π")
plt.title("per-token KL estimators")
plt.legend()
plt.grid(alpha=0.3)
plt.show()

# %% [markdown]
# **Aggregation.** The loss is per token; how it becomes one number decides how much each token weighs, and what the
# trainer's `count` (phase 3's exact means over micro-batches) counts:
#
# | mode | formula | who uses it | count |
# |---|---|---|---|
# | `sequence-mean-token-mean` | mean over completions of each one's token mean | GRPO as published; TRL `grpo` | sequences |
# | `token-mean` | sum over all tokens / number of tokens | DAPO; TRL `bnpo`, `dapo` | tokens |
# | `sequence-mean-token-sum-norm` | sum over all tokens / (completions × L_max) | Dr. GRPO; TRL `dr_grpo` | sequences |
#
# **Predict, then run.** Two completions with the same advantage: a short one (2 tokens, loss 1 each) and a long one
# (6 tokens, loss 1 each). Under the first mode, how much does one token of the short completion weigh compared
# with one of the long one?

# %%
# NBVAL_CHECK_OUTPUT
per_token = jnp.ones((2, 8))
mask = jnp.asarray([[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]], jnp.float32)
for mode in losses.AGGREGATIONS:
    weights = jax.grad(lambda x: losses.aggregate(x, mask, mode, max_tokens=8)[0])(per_token)
    value, count = losses.aggregate(per_token, mask, mode, max_tokens=8)
    print(f"{mode:<30} value {float(value):.3f}  count {float(count):.0f}  "
          f"weight of one token: short {float(weights[0, 0]):.4f}, long {float(weights[1, 0]):.4f}")

# %% [markdown]
# The published mean of means gives each token of a short completion 3× the weight of a long one's: short correct
# answers are reinforced harder, and long wrong ones are punished more gently, a **length bias** that can make wrong
# answers grow longer. Token-mean weighs every token the same; Dr. GRPO divides by a constant, so neither the
# completion's length nor the batch's changes a token's weight.
#
# ## 6. Rollouts: the model's own answers, scored
#
# The built-in rollout engine is the KV-cache sampler (phase 2) on the trainer's own model: one prefill per prompt,
# G samples of each, prompts left-padded to one length so the sampler compiles **once** per run. `sample_groups`
# samples, decodes, and calls every reward function. It starts from the **SFT-tuned** tiny model (the output of
# `tunix_lite/configs/sft_tiny.yaml`, trained here the first time, then loaded from `runs/`; the `ci` profile
# trains it for a few steps).

# %%
from tunix_lite.course.sft_start import sft_model

start = str(sft_model(profile))  # the SFT stage, as `tunix-lite train --config sft_tiny` saves it
model, tokenizer = tunix_lite.load(start)
prompts = Prompts.build(splits["train"], tokenizer, max_tokens=S["seq_len"] + 1 - S["max_new_tokens"], drop_long=True)
engine = SamplerEngine(model, tokenizer, prompt_len=prompts.length)
course_rewards = Rewards({"exact_match": reward_exact_match, "format": reward_format})
groups = sample_groups(engine, prompts, [0, 1], course_rewards, group_size=S["group"],
                       max_new_tokens=S["max_new_tokens"], row_len=S["seq_len"], temperature=1.0, seed=0)
adv = np.asarray(advantages.grpo_advantages(groups.rewards, S["group"]))
for i, text in enumerate(groups.texts):
    if i % S["group"] == 0:
        print(f"\n{groups.records[i]['prompt']}  (answer {groups.records[i]['answer']})")
    print(f"  reward {groups.rewards[i]:.0f}  advantage {adv[i]:+.2f}  {text[:90]!r}")

# %% [markdown]
# Each completion gets one reward, shared by all its tokens (an *outcome* reward), and the advantage says which of
# the group's answers to reinforce. Then `groups.rows(...)` lays the prompt + completion out as fixed-length training
# rows with a completion mask (`tunix_lite.data.rollouts.rollout_rows`): the train step compiles once whatever the
# prompts' lengths.
#
# ## 7. Training GRPO
#
# `run_grpo(config)` is the whole loop on the run harness: for each step, sample `batch_size` prompts × `group_size`
# completions from the live weights, score them, compute group advantages, and take `inner_iterations ×
# mini_batches` optimizer steps on the GRPO loss, with the frozen reference inside the step. The progress bar shows
# reward, KL and completion length; greedy exact match on held-out test-split prompts is measured before and after.
#
# **Predict, then run.** Which curve do you expect to move first: reward, KL or length? And what should KL be at the
# first step?

# %%
config = GRPOConfig(model=start, train_data="synthetic", domains=list(S["domains"]), n_train=S["n_train"],
                    n_validation=8, truncation="drop", seq_len=S["seq_len"], max_new_tokens=S["max_new_tokens"],
                    group_size=S["group"], batch_size=S["prompts"], steps=S["steps"], learning_rate=S["lr"],
                    warmup_steps=max(1, S["steps"] // 20), beta=0.01, rewards=["exact_match", "format"],
                    n_accuracy=0, n_test=S["n_test"], eval_every=0, log_every=1, output_dir=None, seed=1)
result = run_grpo(config)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(result.history)} steps of {config.batch_size} prompts x {config.group_size} completions; "
      f"held-out test prompts: {S['n_test']}")

# %%
fig = plot_history(result.history, ("reward/exact_match", "reward/format", "kl", "length"),
                   title=f"GRPO from the SFT model ({profile.name} profile)")
display(fig)
print(f"{'held out':<24}{'before':>8}{'after':>8}")
for key in sorted(k for k in result.before if k.startswith("test_")):
    print(f"{key:<24}{result.before[key]:>8.3f}{result.after[key]:>8.3f}")

# %% [markdown]
# KL starts at exactly 0 (the policy *is* the reference) and grows as the policy moves; β keeps it small. Reward
# moves first, and noisily: each point is one rollout of a few prompts. A short `ci` run mostly moves the format
# reward; the held-out accuracy of the `cpu` recipe is in section 9.
#
# How to read a run:
# - reward up, KL small, length stable: learning;
# - reward up, length falling fast, exact match flat: hacking a shaping term (section 10);
# - `zero_signal_groups` near 1: the prompts are too easy or too hard for G samples (raise G, use dynamic sampling,
#   change the data);
# - `clipped` above 0 only with several optimizer steps per rollout.
#
# ## 8. PPO: a learned baseline, per token
#
# PPO keeps a **value head** (`ScalarHead` on the policy's own features: one forward pass gives log-probs and values)
# and estimates a per-token advantage with **GAE**: `δ_t = r_t + γ V_{t+1} − V_t`, `A_t = δ_t + γ λ A_{t+1}`. The
# reward sits on the completion's last token. λ = 1 gives the Monte-Carlo return minus V (unbiased, noisy); λ = 0
# the one-step TD error (quiet, biased by V). Advantages are then **whitened** over the rollout's tokens, and the
# value head is trained with a clipped value loss beside the policy loss.
#
# **Predict, then run.** One completion of 4 tokens, reward 1 on the last one, a value head that predicts 0.5
# everywhere, γ = 1. What is the advantage of each token with λ = 1? With λ = 0?

# %%
# NBVAL_CHECK_OUTPUT
token_rewards = jnp.array([[0.0, 0.0, 0.0, 1.0, 0.0]])
values = jnp.full((1, 5), 0.5)
episode = jnp.array([[1.0, 1.0, 1.0, 1.0, 0.0]])  # 4 completion tokens, then padding
for lam in (1.0, 0.95, 0.0):
    adv, returns = advantages.gae(token_rewards, values, episode, gamma=1.0, lam=lam)
    print(f"λ={lam:<5} advantages {np.round(np.asarray(adv[0, :4]), 3)}  returns {np.round(np.asarray(returns[0, :4]), 3)}")

# %% [markdown]
# With λ = 1 every token gets the same `1 − 0.5`: the outcome minus the baseline, as in GRPO. With λ = 0 only the
# last token sees the reward; the others learn from the value head's own predictions, which are only as good as the
# critic. That critic is what GRPO's groups replace.
#
# ## 9. Results on held-out prompts (the `cpu` recipe)
#
# Every run below starts from the same SFT model and runs `tunix_lite/configs/grpo_tiny.yaml` with the changes listed: 150-250
# steps each, a few minutes on a laptop CPU. The table is exact match of greedy answers on the held-out test split
# (274 prompts, never trained on), with 95% intervals.
#
# **Predict, then run.** The training reward of these runs goes up a little. Will held-out accuracy follow? Which
# estimator (GRPO, Dr. GRPO, RLOO, PPO) do you expect to gain most?
#
# What the table shows: none of them. Every run ends within the SFT model's interval (0.52 [0.46, 0.58]), whichever
# estimator, learning rate, KL weight or temperature; PPO with GAE's λ = 0.95 even falls to 0.37 (section 8 says
# why: the reward sits on the last token, and 0.95^90 of it reaches the first). The code is not the cause: TRL's
# `GRPOTrainer` on exactly this setting ends at 0.50 too. This model's synthetic tasks leave RL nothing to find:
# in about half of the groups all eight samples score the same, so they carry no signal (section 3), and the rest
# is mostly luck. The next two sections move to a real model and to real tasks, where there is room. The whole
# investigation (diagnosis, focused runs, a stronger SFT model first) is in
# [tunix_lite/course/results/06_rl.md](../tunix_lite/course/results/06_rl.md).
#

# %%
from IPython.display import Image, Markdown

from tunix_lite.course import results  # the measured runs, shipped with the package

table = results.path("06_rl.md").read_text(encoding="utf-8")
display(Markdown(table.partition("<!-- below: written by")[2].partition("\n")[2]))
display(Image(str(results.path("06_rl.png"))))

# %% [markdown]
# ### The same algorithms on a real model: Gemma 3 270M with LoRA, on a CPU
#
# `tunix-lite run grpo_gemma3_270m` (about 45 minutes on 2 CPU cores). Base Gemma 3 270M is not
# instruction-tuned and scores 0 on every reward, so RL from it would have no signal: 30 LoRA SFT steps teach the
# answer tag first. Then GRPO, Dr. GRPO, RLOO and PPO each start from that SFT model and train 30 steps of 4 prompts
# x 4 completions on `compare` and `count`.
#
# **Predict, then run.** After SFT every *greedy* answer is well-formed (format 1.00), but rollouts are *sampled* at
# temperature 1. Which reward will GRPO move first, exact match or format? Will held-out greedy accuracy follow the
# training reward?

# %%
display(Markdown(results.path("06_rl_gemma.md").read_text(encoding="utf-8")))
display(Image(str(results.path("06_rl_gemma.png"))))

# %% [markdown]
# Format moved first: a group whose samples differ only in where they stop gives the stopping ones the higher
# reward, in every prompt, so that signal is everywhere. Held out, the *sampled* answers followed (pass@1 and sampled
# format up), the *greedy* ones did not: they already stopped after the tag. The same lesson as the tiny model's
# table above, from the other side: RL sharpens what the model samples; it turns into greedy accuracy only where the
# greedy answer was the one that was wrong.

# %% [markdown]
# ### Real tasks: where does RL have room?
#
# The tasks above were written for this course. [reasoning-gym](https://github.com/open-thought/reasoning-gym)
# generates about a hundred verifiable tasks offline (arithmetic, counting, GCDs, spelling, ...), each with its own
# scorer. In tunix_lite a task list is a data spec, `reasoning_gym:gcd,letter_counting?size=2000&seed=1`, accepted
# wherever data is; `rewards: [reasoning_gym]` rewards each completion with its task's own scorer; and
# `tunix-lite eval --data SPEC --samples 8` scores any model with that same scorer.
#
# RL sharpens what the model already samples, so before you train, measure the room: greedy accuracy against
# pass@8 per task. A right sample can also be a lucky guess, so beside each figure the tables show what guessing
# scores on the same prompts: always the task's commonest answer, and 8 guesses drawn from the other prompts'
# answers. Below, Gemma 3 270M after a 40-step format warm-up, then GRPO's held-out results.
#
# **Predict, then run.** `letter_counting` ("how many times does the letter "a" appear in ...") scores 0.62
# greedy and 0.92 pass@8. Is that room GRPO can turn into greedy accuracy? What would a model that always answers
# "1" score?
#

# %%
real_tasks = results.path("06_rl_reasoning_gym.md").read_text(encoding="utf-8")
display(Markdown(real_tasks.partition("\n## TRL beside us")[0]))  # TRL's part comes after its own question

# %% [markdown]
# Always answering "1" scores 0.62 on `letter_counting`: the greedy answers are the commonest answer, and 8
# guesses from the answers' prior hit 0.91 of the prompts. That pass@8 is the prior, not a skill. `gcd` is the
# same, and `spell_backward` has no right sample at all, so no group has a difference to learn from. Trained on
# those tasks, GRPO raised its sampled reward while held-out greedy accuracy fell from 0.34 to 0.25: where the
# right samples are guesses, making them likelier does not make the most likely answer right.
#
# One-digit products and sums of two numbers up to 99 have room beyond guessing. There, 50 GRPO steps took
# held-out greedy accuracy from 0.20 to 0.37 on 502 prompts of a fresh seed, beyond the intervals, almost all of
# it on the multiplication table (0.40 to 0.95), whose 100 questions the model had half learned.
#
# **Predict, then look.** Every one of those 100 products was also a training question. Will sums that no run
# ever trained on improve as well?
#
# A test prompt is *seen* when the same question (lower-cased, spaces collapsed; for reasoning-gym, the expression
# it asks) occurs in any data the model trained on, the runs it started from included, and *unseen* when it occurs
# in none. Only unseen prompts measure a skill rather than recall. On a fresh seed (99, 1,000 prompts, 495
# distinct), `--exclude course/results/rl_models/grpo` drops the 248 that GRPO's or its warm-up's data asks. On
# the 247 left, all sums, the warm-up scores 0.04 [0.02, 0.07] and GRPO 0.06 [0.03, 0.09]: a paired change of
# +0.02 [-0.02, +0.05], inside its interval. These 50 steps taught answers, not a skill that carries to new
# questions. To hold questions out by construction, add `split=train` to the spec you train on and `split=test`
# to the one you test on: a hash of each question fixes its side, so no seed of the test side asks a training
# question, and `tunix-lite run` refuses a test set that its training data asks.
#
# ```
# tunix-lite eval --model course/results/rl_models/grpo --max-new-tokens 32 \
#   --data 'reasoning_gym:products,chain_sum?size=1000&seed=99&products.max_digits=1&chain_sum.max_terms=2&chain_sum.max_digits=2' \
#   --exclude course/results/rl_models/grpo     # and --model course/results/rl_models/warmup
# ```
#
# Dr. GRPO and RLOO, from the same start on the same prompts, land in the same place (0.39 and 0.36): their
# intervals overlap GRPO's, so on this task no estimator is measurably better. The curves below show why the three
# move together: same prompts in the same order, same sampling seed. Where a block's reward dips in all three at
# once, the prompts were harder, not the policy worse.
#
# **Predict, then look.** Dr. GRPO does not divide advantages by the group's spread. Which run would you expect to
# keep the most entropy?
#

# %%
display(Image(str(results.path("06_rl_reasoning_gym.png"))))

# %% [markdown]
# Dr. GRPO keeps the most (0.35 nats a token over its last 10 steps, against 0.28 for GRPO). One reading: in a
# group where one sample of eight is right, GRPO divides by a small spread and gives that sample a large push
# (2.5 against 0.9 without the division), so the policy narrows faster onto it. One run of each cannot tell that
# from chance; the held-out accuracies, which can, do not differ. The notes under the table in
# `tunix_lite/course/results/06_rl_reasoning_gym.md` have the commands; `tunix_lite/configs/grpo_reasoning_gym_gemma3_270m.yaml` runs
# all three, and the trained adapters are in `course/results/rl_models/`, ready for `tunix-lite eval --model`.
#

# %% [markdown]
# ### The same run in TRL
#
# Is the gain GRPO's, or something particular to this library? TRL's `GRPOTrainer` ran the identical setting,
# stopped at the same step 50: the same start weights, the same prompt token ids in the same order, the same
# reward, schedule, LoRA and even its initial A matrices (`course/results/scripts/rl_trl_beside.py` checks every prompt fed).
# Only the random draws of the samples differ, so its completions are not ours.
#
# **Predict, then look.** How close should its held-out accuracy be to ours before you call it the same
# algorithm? Two logs also name an `entropy`: TRL's is the exact entropy of each next-token distribution, ours the
# mean −log p of the token that was sampled. Should those two numbers agree?
#

# %%
trl_part = real_tasks.partition("\n## TRL beside us")[2].partition("\n## Notes")[0]
display(Markdown("## TRL beside us" + trl_part))

# %% [markdown]
# Same algorithm, same result: step by step the two training rewards differ by −0.003 ± 0.012 (correlation
# 0.98), and on the same 502 held-out prompts TRL scores +0.02 [−0.01, +0.04] against this library's run. The gap
# you should expect is the one between two runs that draw different samples: per task the two trade a few points
# in opposite directions.
#
# The entropies are a lesson of their own. Both logs estimate the same quantity: E[−log p(x)] over x sampled from
# p *is* the entropy of p. Computed both ways on the same samples (`course/results/scripts/rl_entropy.py`), they
# agree to 0.02 for every model. So the red curve in the last panel of the figure above is not a different
# statistic: TRL's policy kept more entropy mid-run (0.75 against 0.35) with the same reward and the same held-out
# accuracy, and ended at 0.42 against 0.32. One run of each cannot say whether that is the samples drawn or the
# implementation; a second seed of each run would. When two curves disagree, first make sure they measure the
# same thing, then find out how much two seeds of one run disagree.
#

# %% [markdown]
# ### Recall or skill? Train on 81 facts, test the other 19
#
# The multiplication table is small enough to split by hand. `unordered=true` in a spec keys the content split by
# the unordered pair, so a fact and its mirror (7 × 3 and 3 × 7) lie on the same side: 81 facts train and 19 are
# held out whole. GRPO runs from the same warm-up on the 81 (8 prompts × 8 completions a step, 40 steps), and the
# test set is all 100 facts: the 19 are every fact the run never saw, not a sample of them.
#
# ```
# reasoning_gym:products?products.max_digits=1&split=train&unordered=true   # the 81
# reasoning_gym:products?products.max_digits=1&split=test&unordered=true    # the 19
# ```
#
# Before training the warm-up answers 33 of the 81 trained facts and 8 of the 19 held-out ones right.
#
# **Predict, then look.** The training reward climbs from about 0.2 to above 0.9 in 20 steps. Where do the 81
# trained facts land? And the 19 held out: up with them, unchanged, or down? Which of the 19 would you bet on?

# %%
held_out_facts = results.path("06_rl_products_80_20.md").read_text(encoding="utf-8")
display(Markdown(held_out_facts.partition("\n## Notes")[0]))
display(Image(str(results.path("06_rl_products_80_20.png"))))

# %% [markdown]
# The 81 trained facts went from 33 to 77 right. The 19 held out went from 8 to 17, a paired +0.47 [+0.16, +0.69]:
# beyond its interval. Read the fact table before you call that a skill. Ten of the 19 have a factor 0 or 1, and
# those follow a rule (a × 0 = 0, a × 1 = a) that the trained rows and columns show too: seven of the ten were
# wrong before, all ten are right after. The nine that must be recalled (both factors 2 to 9) went from 5 to 7
# right, +0.22 [−0.20, +0.57]: nine facts are too few to tell.
#
# So the same run was made with half the table held out (the second table, and the lower row of the figure): 43
# facts trained, 57 held out, 40 of them to recall. Those 40 went from 0.45 to 0.82, a paired +0.38 [+0.19, +0.52],
# nearly as far as the trained ones (0.54 to 1.00). RL was not writing in the rewarded answers one by one: what it
# changed carried from fact to fact. It had something to carry, though. Before training the warm-up answered 0.41
# of the table greedily but 0.67 within 8 samples, so most facts were already within its reach; RL made the right
# answer the first one, on facts it was never rewarded on as well.
#
# Run it yourself with `tunix-lite run grpo_products_80_20_gemma3_270m` (about 25 minutes on 2 CPU cores), or
# score the committed adapters on the held-out facts:
#
# ```
# tunix-lite eval --model course/results/rl_models_80_20/grpo --max-new-tokens 16 \
#   --data 'reasoning_gym:products?size=400&seed=5&split=test&unordered=true&products.max_digits=1' \
#   --exclude course/results/rl_models_80_20/grpo     # and --model course/results/rl_models/warmup
# ```
#

# %% [markdown]
# ### A skill that carries to new questions
#
# Everything GRPO added on the fresh seed above was the multiplication table, 100 facts the model had half learned.
# To measure a skill that carries to new questions, the test questions must be ones no training data asks, by
# construction, on a task with far more questions than a run can memorise. Sums of two or three one-digit numbers
# ("7 - 2 + 5 =") have about 4,200. Train on `split=train` of the spec and test on `split=test`: a hash of each
# question fixes its side, so no seed of one side asks a question of the other. Each step of a sum is easy; the
# model has to chain them.
#
# Before training, on the 470 unseen prompts of the test set, the warm-up answers 0.11 greedily and 0.36 within 8
# samples. On another test-side sample its pass@8 beats 8 guesses from the answers' prior by 0.26 (the last table
# below): room that guessing does not explain.
#
# **Predict, then look.** GRPO, Dr. GRPO and RLOO each train from that model on the training side, 16 prompts × 8
# completions a step. Where will greedy accuracy on sums no run trained on land, against 0.11? And pass@8: up from
# 0.36, or down?

# %%
unseen_sums = results.path("06_rl_unseen.md").read_text(encoding="utf-8")
display(Markdown(unseen_sums.partition("\n## Notes")[0]))
display(Image(str(results.path("06_rl_unseen.png"))))

# %% [markdown]
# This time RL taught something that carries: on 304 unseen prompts of a fresh seed, GRPO takes greedy accuracy from
# 0.14 to 0.27, a paired +0.13 [+0.07, +0.18], and RLOO and Dr. GRPO gain as much, each beyond its interval. The
# difference from the multiplication table is the task: a procedure the model already ran sometimes, on questions
# too many to recall.
#
# pass@8 did not rise (0.36 before, 0.31 to 0.34 after). RL made the answers the model already sampled its most
# likely ones; it did not make right answers reachable that were not. Greedy accuracy after RL is still below the
# start model's pass@8, which is the ceiling the room measured.
#
# The entropy panel has a warning. Dr. GRPO's and RLOO's logged entropy climbed to 1.5 to 2.5 nats a token while
# GRPO's fell to 0.3: 5 to 13% of their samples ran to the 32-token budget without closing the answer. Greedy answers
# stayed well-formed, so the held-out table alone would not show it. Watch entropy and truncation beside the reward.
#
# One GPU runs all three in about six minutes (`tunix-lite run grpo_chain_sum_unseen_gemma3_270m`; on 2 CPU cores a
# step takes about 100 s). The trained adapters are in `course/results/rl_models_unseen/`; score one on a seed of
# your own, counting only the questions no training source asks:
#
# ```
# tunix-lite eval --model course/results/rl_models_unseen/grpo --max-new-tokens 32 \
#   --data 'reasoning_gym:chain_sum?size=700&seed=123&split=test&chain_sum.min_terms=2&chain_sum.max_terms=3&chain_sum.max_digits=1' \
#   --exclude course/results/rl_models_unseen/grpo     # and --model course/results/rl_models/warmup
# ```
#

# %% [markdown]
# ## 10. Reward hacking, on purpose
#
# The policy optimises the reward you wrote, not the one you meant. The `format_only` run above is GRPO rewarded for
# the answer tag alone. The SFT model already tags its answers, so almost every group's rewards are all equal, the
# advantages are zero and the policy gradient vanishes; the training reward reads a perfect 1.0 from the first step.
# Yet the weights still moved, and held-out exact match with them, from 0.52 to 0.50 (inside its interval, so a
# drift, not a measured loss): what is left is the KL term and Adam, which rescales even tiny gradients to steps of
# the learning rate's size. A reward that can be satisfied without the task teaches
# nothing about the task, and a run that looks perfect on its training reward can still drift. The fix: reward what
# you want (exact match), keep format as a small shaping term, and judge a run by held-out accuracy, KL and length,
# never by its training reward alone. A learned reward model (phase 5, `RewardFunction`) is easier to hack still: its
# score is a smooth function the policy can climb without getting answers right.
#

# %%
# NBVAL_CHECK_OUTPUT
import inspect

for name in ("generate", "sync_weights"):
    print(f"{name}{inspect.signature(getattr(RolloutEngine, name))}")
    print("   ", inspect.getdoc(getattr(RolloutEngine, name)).splitlines()[0])

# %% [markdown]
# `generate` returns token ids and per-token log-probs as a `GenerateOutput`, and `sync_weights(model)` makes the next
# call sample the newest weights. The built-in `SamplerEngine` reads the trainer's own arrays, so syncing copies
# nothing. An external engine has to move the weights after every update: `jax.device_put(state,
# rollout_shardings)` between two meshes of one JAX program (google-tunix's `rl/reshard.py`), or a copy through host
# memory or a collective into vLLM's `load_weights`; with LoRA only the adapters move. If the engine samples while
# the trainer updates (asynchronous RL), its samples are one or more updates stale: exactly the off-policy case the
# ratio and the clip exist for. Neither vLLM nor SGLang-JAX is a dependency here, and nothing pretends to be one:
# `tunix_lite/rl/engine.py` documents the ~50-line class an engine needs.

# %% [markdown]
# ## 11. When the sampler is not the policy: measure the mismatch, then correct it
#
# The loss differentiates the trainer's policy π, but the tokens were drawn by the sampler μ. The two are the same
# distribution only when the sampler runs the trainer's exact weights, in float32, at temperature 1. Sample from a
# bfloat16 copy, from an external engine's kernels, or from weights a few updates old (`max_staleness: M`: the next
# rollout is sampled on a thread while the trainer still steps), and μ ≠ π: every token counts as if π had drawn it.
# The sampler returns log μ of each token it drew; the trainer recomputes log π of the same tokens. With
# δ = log π − log μ, every step logs `mismatch/kl_k3` = mean(e^δ − 1 − δ), exactly 0 when the two agree, beside
# `mismatch/kl_k1`, the perplexity ratio, χ² per token and per sequence, and `mismatch/outside_cap`.
# `rollout_correction: token_truncate` weighs each token's surrogate by ρ = π/μ, truncated at C
# (`rollout_correction_cap`, 2 by default): importance sampling that turns μ's samples back into π's, with the cap
# bounding the variance (`sequence_truncate` uses one ρ per completion; the `_mask` modes drop what passes C).
#
# The toy below can learn in a few steps: a random one-layer model, rewarded when the first token it writes is odd,
# so the reward starts at chance (0.5) and a policy that learns climbs towards 1.
#
# **Predict, then run.** bfloat16 rollouts without a correction, then with `token_truncate`: how large is the
# mismatch, and which curve climbs faster? Then rollouts sampled 0, 2 and 8 updates ahead (`max_staleness`,
# corrected): which curve climbs, and what happens to the mismatch as the sampler falls behind?

# %%
from flax import nnx

from tunix_lite.export import write_model
from tunix_lite.models import Transformer

toy = write_model(Transformer(model.config.replace(num_layers=1, embed_dim=64, num_heads=2, head_dim=16,
                                                   mlp_dim=128), rngs=nnx.Rngs(0)),
                  tokenizer, pathlib.Path("runs/toy_one_layer"))


def odd_first(prompts, completions, completion_ids, **columns):
    return [float(ids[0] % 2) for ids in completion_ids]


SETTINGS = {"bfloat16, uncorrected": dict(rollout_dtype="bfloat16"),
            "bfloat16, token_truncate": dict(rollout_dtype="bfloat16", rollout_correction="token_truncate")}
SETTINGS |= {f"{m} updates stale, token_truncate": dict(max_staleness=m, rollout_correction="token_truncate")
             for m in (0, 2, 8)}
# each setting compiles a train step of its own: ci runs one of them for 4 steps, cpu and tpu all of them
PLAN = (dict(steps=4, settings=["bfloat16, token_truncate"]) if profile.name == "ci"
        else dict(steps=14, settings=list(SETTINGS)))


def toy_run(**options):
    config = GRPOConfig(model=str(toy), n_train=64, n_validation=8, n_accuracy=0, seq_len=120, max_new_tokens=4,
                        batch_size=8, group_size=8, steps=PLAN["steps"], warmup_steps=1, learning_rate=3e-2, beta=0.0,
                        eval_every=0, log_every=1, output_dir=None, **options)
    return run_grpo(config, rewards=Rewards({"odd_first": odd_first}), verbose=False).history


runs = {name: toy_run(**SETTINGS[name]) for name in PLAN["settings"]}
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5), layout="constrained")
for name, history in runs.items():
    steps = [h["step"] for h in history]
    left.plot(steps, [h["reward"] for h in history], label=name)
    # from rounding (~1e-9, or a hair below 0) to samples whole updates old (~1): a log scale
    right.plot(steps, [max(h["mismatch/kl_k3"], 1e-10) for h in history], label=name)
left.set(xlabel="step", ylabel="reward (odd first token)")
right.set(xlabel="step", ylabel="mismatch/kl_k3", yscale="log")
left.legend(fontsize=8)
display(fig)
plt.close(fig)
for name, history in runs.items():
    print(f"{name:<34} reward {np.mean([h['reward'] for h in history[-4:]]):.2f} (last 4 steps)   "
          f"kl_k3 {np.mean([h['mismatch/kl_k3'] for h in history]):.1e} (mean)")

# %% [markdown]
# What the `cpu` profile's 14 steps show (the `ci` profile runs 4 steps of `bfloat16, token_truncate` only):
#
# | rollouts | reward, last 4 steps | mean `mismatch/kl_k3` |
# |---|---:|---:|
# | bfloat16, uncorrected | 1.00 | 2e-5 |
# | bfloat16, `token_truncate` | 1.00 | 3e-5 |
# | 0 updates stale | 1.00 | 1e-9 (rounding: the in-turn run) |
# | 2 updates stale | 0.93 | 0.17 |
# | 8 updates stale | 0.64 | 0.81 |
#
# bfloat16 keeps 8 significant bits, so its log-probs differ from float32's by a few thousandths per token: the
# mismatch is measurable but tiny, and both bfloat16 curves climb like a float32 run. On this toy the correction has
# nothing to pay back. Staleness is different. With a learning rate this large one update moves the policy a
# lot, so samples 2 updates old are already far from π (kl_k3 0.17, where bfloat16 gives 2e-5), and the curve
# climbs a few steps later. With 8, the first 9 rollouts all come from the starting weights: the policy trains for
# 9 steps on samples of a model that no longer exists, and the correction can only down-weight what it cannot
# replace. The lag that buys overlap (benchmarks/RESULTS.md measures how much of each step the rollout side then
# stops waiting) is paid here, in mismatch.
#
# A sampler that is off by design shows the correction at work. Draw the rollouts at temperature 1.5 while the loss
# scores π at 1: after 14 steps (three seeds), π's own chance of an odd first token is 0.994 on-policy, 0.968
# uncorrected and 0.989 with `token_truncate`. Uncorrected, the update pushes each sampled token in proportion to
# μ, not π, and spends itself on tokens the policy rarely samples.
#
# ## 12. The same run from the command line
#
# ```bash
# tunix-lite train --config sft_tiny     # stage 1: writes runs/sft_tiny/model
# tunix-lite train --config grpo_tiny    # stage 2: GRPO from it; curves.png beside the model
# ```
#
# Every key is in [tunix_lite/configs/README.md](../tunix_lite/configs/README.md): `advantage` (grpo, drgrpo, rloo), `aggregation`,
# `epsilon_low` / `epsilon_high`, `ratio_level: sequence` (GSPO), `beta`, `kl_estimator`, `inner_iterations`,
# `mini_batches`, `dynamic_sampling`, `overlong_buffer`, `rewards` and `reward_weights`; `algorithm: ppo` adds
# `gamma`, `lam`, `value_coef`, `value_clip`.

# %%
# NBVAL_CHECK_OUTPUT
from tunix_lite.training.algorithms import load_config

config = load_config("grpo_tiny")  # a config shipped with the package, by name (as `--config grpo_tiny`)
print({k: getattr(config, k) for k in ["algorithm", "model", "advantage", "aggregation", "group_size",
                                        "batch_size", "max_new_tokens", "beta", "rewards", "steps"]})

# %% [markdown]
# ## Recap
#
# - RL trains on the model's own samples, scored by reward functions `reward(prompts, completions, **columns)`;
#   weight several, log each.
# - The advantage is the reward minus a baseline. GRPO's baseline is the group of G samples of the same prompt
#   (Dr. GRPO drops the std, RLOO leaves each sample out); PPO learns one with a value head and GAE. Equal rewards in a
#   group give zero advantage: no signal.
# - The loss: the clipped surrogate (ρ = 1 and no clipping with one step per rollout; clip-higher leaves rare tokens
#   room), plus β × k3 KL to the frozen reference, aggregated per token or per sequence (the choice is a length
#   bias).
# - Rollouts: fixed shapes, so the sampler and the train step each compile once; the engine seam is where vLLM or
#   SGLang-JAX would plug in, with weights synced after every update.
# - The result is held-out accuracy, not training reward: a reward that can be satisfied without the task gets
#   hacked.
# - Held out means unseen: a test question no training data asks. On a finite task RL can teach the answers
#   (the multiplication table), and on half the table it also raised the other half (0.45 to 0.82 on 40 facts
#   it never asked), because the model already had them within 8 samples; on sums no run trained on, GRPO gained
#   13 points, and pass@8 did not move.
#
# ## Quiz
#
# 1. A group of 8 completions all got reward 1. What advantage does each get under GRPO, Dr. GRPO and RLOO, and what
#    does that group contribute to the gradient?
# 2. With `inner_iterations: 1` and `mini_batches: 1`, why does the clip never act? What changes with
#    `inner_iterations: 2`?
# 3. Why is k3 preferred to k1 as a per-token penalty, although both are unbiased?
# 4. Under `sequence-mean-token-mean`, a wrong answer grows from 10 to 40 tokens. What happens to the penalty each of
#    its tokens receives? Which mode removes the effect?
# 5. Reward rises to its maximum in 20 steps while held-out exact match falls. Name two curves you would look at and
#    two changes you would make.
# 6. An external engine samples in bf16 on its own mesh. Which log-probs should the ratio's π_old use, and why?
#
# Write your answers before you look anything up; your instructor has the answers (in a clone of the
# course, studying alone: `course/instructor/quiz_answers.md`, once yours are written).
