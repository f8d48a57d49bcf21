"""Graded tests for phase 6 (solutions/06_rl_exercises.ipynb): the arithmetic of policy-gradient RL, one step past
the lesson each time: ragged groups, dual clipping, an off-policy KL estimate, GAE over several episodes per row,
and loss aggregation over packed rows. Then a skill: a verifiable reward that the hacks a policy finds do not
fool, graded on behaviour (honest completions against a reference, then each hack, which must score 0). Last, a
judgment: which candidate tasks of an evaluation report have room for RL, and why not the others, graded on
reports drawn per run (the instructor's hidden tests draw others: course/instructor/hidden/phase06.py).

References are numpy in float64 (or a closed form); the learner's float32 results must match to ~1e-5 relative.
Shapes: R completions, B rows, T positions.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.graded import graded
from tunix_lite.evaluation import wilson

__all__ = [
    "test_group_advantages_match_numpy", "test_group_advantages_zero_mean_and_equal_groups",
    "test_group_advantages_order_free_and_jit", "test_dual_clip_matches_numpy",
    "test_dual_clip_gradient_vanishes_past_every_bound", "test_kl_off_policy_is_k3_on_policy",
    "test_kl_off_policy_expectation_is_the_exact_kl", "test_gae_with_dones_matches_numpy",
    "test_gae_with_dones_keeps_episodes_apart", "test_gae_with_dones_limits",
    "test_packed_aggregate_matches_numpy", "test_packed_aggregate_equals_the_unpacked_rows",
    "test_packed_aggregate_counts_make_micro_batches_exact", "test_reward_answer_matches_reference",
    "test_reward_answer_rejects_extra_and_broken_tags",
    "test_reward_answer_rejects_answers_outside_one_exact_tag",
    "test_reward_answer_compares_text_not_numbers", "test_reward_answer_one_float_per_completion",
    "test_choose_rl_tasks_gives_each_task_its_verdict", "test_choose_rl_tasks_judges_each_task_alone",
    "test_choose_rl_tasks_weighs_the_evidence", "test_choose_rl_tasks_needs_sampled_answers",
]

HINTS = {
    "group_advantages": [
        "Each completion is compared with its own group only, so you need per-group statistics (size, mean, "
        "spread) carried back to every completion, whatever order the rows come in. A group of one has nothing "
        "to compare with. No Python `if` on array values: it must trace under jit.",
        "jax.ops.segment_sum(x, group_ids, num_segments=num_groups) sums x per group; index the result with "
        "group_ids to give every row its group's sum. From sums of 1, r and (r - mean)² get n, the mean and the "
        "sample variance (divide by n - 1). rloo: the mean of the others is (sum - r) / (n - 1). Put 0 where n = 1 "
        "with jnp.where, guarding the divisions with jnp.maximum(n - 1, 1).",
        "gs = lambda x: jax.ops.segment_sum(x, group_ids, num_segments=num_groups)[group_ids]; n = gs(ones); "
        "mean = gs(r) / n; std = jnp.sqrt(gs((r - mean) ** 2) / jnp.maximum(n - 1, 1)); grpo: (r - mean) / "
        "(std + 1e-6); rloo: r - (gs(r) - r) / jnp.maximum(n - 1, 1); return jnp.where(n > 1, adv, 0.0)",
    ],
    "dual_clip_surrogate": [
        "Start from PPO's clipped loss. Dual clipping only touches negative advantages: there the objective gets a "
        "floor, clip_c * A, so the loss (its negative) gets a ceiling. Positive advantages are left as PPO has them.",
        "ratio = exp(logp - old_logp); PPO loss = -min(ratio A, clip(ratio, 1 - eps_low, 1 + eps_high) A) with A "
        "broadcast from [B] to [B, 1]; where A < 0, take the smaller of that loss and -clip_c A (jnp.where).",
        "a = advantages[:, None]; loss = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - eps_low, 1 + eps_high) * a); "
        "return jnp.where(a < 0, jnp.minimum(loss, -clip_c * a), loss)",
    ],
    "kl_k3_off_policy": [
        "k3 is unbiased only for tokens sampled from the policy itself. These were sampled from pi_old: importance "
        "sampling reweights each token's estimate by how much more (or less) likely it is under pi than under "
        "pi_old.",
        "d = ref_logp - logp; k3 = exp(d) - d - 1; the importance weight is pi / pi_old = exp(logp - old_logp), "
        "multiplied into each token's k3 (it carries a gradient through logp).",
        "d = ref_logp - logp; return jnp.exp(logp - old_logp) * (jnp.exp(d) - d - 1.0)",
    ],
    "gae_with_dones": [
        "GAE runs backwards in time. An episode end means there is no next state: nothing to bootstrap from, and "
        "no advantage flows back across it into the previous episode. Each row is independent.",
        "Walk t from T-1 down to 0 carrying (next value, next advantage) per row, both 0 at the start. With "
        "keep = 1 - done_t: delta = r_t + gamma V_{t+1} keep - V_t; A_t = delta + gamma lam keep A_{t+1}. "
        "returns = A + V. jax.lax.scan(..., reverse=True) over the transposed [T, B] arrays does it under jit.",
        "def back(c, x): nv, na = c; r, v, d = x; k = 1 - d; a = r + gamma * nv * k - v + gamma * lam * k * na; "
        "return (v, a), a; _, adv = jax.lax.scan(back, (zeros_B, zeros_B), (rewards.T, values.T, dones.T), "
        "reverse=True); return adv.T, adv.T + values",
    ],
    "packed_aggregate": [
        "A packed row holds several sequences: the sequence, not the row, is the unit of the sequence modes. Per "
        "sequence you need its token sum and its length; padding belongs to no sequence. The count is what the "
        "loss is a mean over (tokens or sequences), so micro-batches can be combined exactly.",
        "Flatten; send padding (id < 0) to an extra segment num_sequences that you drop afterwards; "
        "jax.ops.segment_sum gives each sequence's sum and length. token-mean: total / tokens, count tokens. "
        "The sequence modes: mean over the sequences with length > 0 of sum / length (or sum / max_tokens), count "
        "the sequences present. Guard empty batches with jnp.maximum(count, 1).",
        "seg = jnp.where(ids >= 0, ids, num_sequences); sums = jax.ops.segment_sum(values * real, seg, "
        "num_segments=num_sequences + 1)[:-1]; lengths likewise from real; present = lengths > 0; per = sums / "
        "jnp.maximum(lengths, 1) (or / max_tokens); return jnp.sum(jnp.where(present, per, 0)) / "
        "jnp.maximum(present.sum(), 1), present.sum()",
    ],
    "reward_answer": [
        "Pay only for what you can verify: one answer, clearly marked, equal to the reference as "
        "text. Every way a completion can hedge (several tags, several answers in one tag, more "
        "text after the tag) or look right without being right (a number that parses to the "
        "reference) must earn nothing.",
        "Per completion: str.count('<answer>') and str.count('</answer>') must both be 1; "
        "str.partition on '<answer>', then on '</answer>', gives the inside and what follows; the "
        "closing tag must be found, what follows must strip to '', and inside.strip() must equal "
        "reference.strip() as a string (no int() or float(): int('４') is 4).",
        "def score(text, ref): if text.count(OPEN) != 1 or text.count(CLOSE) != 1: return 0.0; "
        "inside, closed, after = text.partition(OPEN)[2].partition(CLOSE); return "
        "float(bool(closed) and not after.strip() and inside.strip() == ref.strip()); "
        "return [score(c, r) for c, r in zip(completions, answer, strict=True)]",
    ],
    "choose_rl_tasks": [
        "RL makes likelier what the model already samples, so the most it can add to greedy accuracy is "
        "what sampling finds beyond greedy, and only the part that guessing from the answers' prior "
        "does not explain. A difference measured on a handful of prompts may be noise: compare it with "
        "its 95% interval before you act on it.",
        "Per task: K = report['samples']; the row's 'accuracy' (greedy), f'pass@{K}', "
        "f'guess_pass@{K}' and 'n'. The room is pass@K - max(greedy, guess_pass@K); the notes keep a "
        "task when it is 0.2 or more. A difference of two rates over n prompts has a 95% half-width "
        "of about 1.96 sqrt((p (1 - p) + g (1 - g)) / n): when the bar lies inside gap +- that, say "
        "too_few. Then: no right sample at all, pass@K hardly above greedy, pass@K hardly above "
        "guessing, room.",
        "half = 1.96 * math.sqrt((p * (1 - p) + g * (1 - g)) / n); gap = p - max(g, q); "
        "if gap - half < 0.2 <= gap + half: 'too_few'; elif p == 0: 'too_hard'; elif p - g < 0.2: "
        "'no_room'; elif p - q < 0.2: 'guessing'; else 'room'",
    ],
}

FORBIDDEN = {  # the library's estimators, surrogates and aggregations (and its evaluation report)
    "group_advantages": ("tunix_lite.rl",),
    "dual_clip_surrogate": ("tunix_lite.rl",),
    "kl_k3_off_policy": ("tunix_lite.rl",),
    "gae_with_dones": ("tunix_lite.rl",),
    "packed_aggregate": ("tunix_lite.rl",),
    "reward_answer": ("tunix_lite.rl", "tunix_lite.rewards", "tunix_lite.verifiers", "tunix_lite.preference.evaluation",
                      "tunix_lite.data.synthetic.answer_of",
                      "tunix_lite.data.synthetic.reward_exact_match",
                      "tunix_lite.data.synthetic.reward_format",
                      "tunix_lite.data.synthetic.reward_reasoning_format"),
    "choose_rl_tasks": ("tunix_lite.evaluation.model_eval", "tunix_lite.model_eval"),
}


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


# ----------------------------------------------------------------------------- 1. group advantages, ragged


def _ragged_groups(rng, num_groups=5, lo=1, hi=6):
    """Rewards [R] and group ids [R] for groups of random sizes in shuffled order; one group all equal."""
    sizes = rng.integers(lo, hi, size=num_groups)
    ids = np.repeat(np.arange(num_groups), sizes)
    # Rewards on a grid of quarters, exact in float32: with continuous noise a group could hold two rewards a few
    # ulps apart, whose float32 advantages no implementation gets right to 1e-4 (std + 1e-6 is then mostly 1e-6).
    rewards = rng.integers(0, 3, size=ids.size) + rng.integers(0, 4, size=ids.size) / 4
    rewards[ids == 0] = 0.5  # an all-equal group
    order = rng.permutation(ids.size)
    return rewards[order], ids[order], num_groups


def _advantages_ref(rewards, ids, num_groups, kind):
    out = np.zeros_like(rewards)
    for g in range(num_groups):
        r = rewards[ids == g]
        n = r.size
        if n < 2:
            continue
        if kind == "grpo":
            a = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
        elif kind == "drgrpo":
            a = r - r.mean()
        else:
            a = r - (r.sum() - r) / (n - 1)
        out[ids == g] = a
    return out


def _advantages(impl, rewards, ids, num_groups, kind):
    out = impl.group_advantages(_f32(rewards), jnp.asarray(ids, jnp.int32), num_groups, kind)
    return np.asarray(out, np.float64)


@graded("group_advantages", reference=True)
def test_group_advantages_match_numpy(impl, rng):
    """matches a numpy reference for grpo (sample std), drgrpo and rloo on groups of sizes 1-5 in any order"""
    for _ in range(3):
        rewards, ids, num_groups = _ragged_groups(rng)
        for kind in ("grpo", "drgrpo", "rloo"):
            np.testing.assert_allclose(_advantages(impl, rewards, ids, num_groups, kind),
                                       _advantages_ref(rewards, ids, num_groups, kind), rtol=1e-4, atol=1e-5,
                                       err_msg=f"kind={kind!r}")


@graded("group_advantages")
def test_group_advantages_zero_mean_and_equal_groups(impl, rng):
    """every group's advantages sum to 0; a group with equal rewards, or of one completion, gets exactly 0"""
    rewards, ids, num_groups = _ragged_groups(rng, lo=1, hi=5)
    ids = np.where(np.arange(ids.size) == ids.size - 1, num_groups, ids)  # the last row: a group of its own
    for kind in ("grpo", "drgrpo", "rloo"):
        a = _advantages(impl, rewards, ids, num_groups + 1, kind)
        for g in range(num_groups + 1):
            assert abs(a[ids == g].sum()) < 1e-4, f"{kind}: group {g}'s advantages sum to {a[ids == g].sum()}"
        assert np.all(a[ids == 0] == 0.0), f"{kind}: equal rewards must give exactly 0, got {a[ids == 0]}"
        assert a[-1] == 0.0, f"{kind}: a group of one completion has no baseline to compare with: expected 0"


@graded("group_advantages")
def test_group_advantages_order_free_and_jit(impl, rng):
    """shuffling the rows shuffles the advantages the same way, and the function runs under jax.jit"""
    rewards, ids, num_groups = _ragged_groups(rng)
    perm = rng.permutation(ids.size)
    fn = jax.jit(impl.group_advantages, static_argnums=(2, 3))
    for kind in ("grpo", "rloo"):
        a = np.asarray(fn(_f32(rewards), jnp.asarray(ids), num_groups, kind))
        b = np.asarray(fn(_f32(rewards[perm]), jnp.asarray(ids[perm]), num_groups, kind))
        np.testing.assert_allclose(b, a[perm], rtol=1e-5, atol=1e-6, err_msg=f"{kind}: rows are not order-free")


# ----------------------------------------------------------------------------- 2. dual clip


def _dual_clip_ref(logp, old, adv, eps_low, eps_high, c):
    ratio = np.exp(np.asarray(logp, np.float64) - old)
    a = np.asarray(adv, np.float64)[:, None]
    loss = -np.minimum(ratio * a, np.clip(ratio, 1 - eps_low, 1 + eps_high) * a)
    return np.where(a < 0, np.minimum(loss, -c * a), loss)


def _dual_clip_inputs(rng, B=5, T=6):
    old = rng.normal(size=(B, T)) - 2.0
    logp = old + rng.normal(size=(B, T)) * 1.2  # ratios from ~0.1 to ~10: every region is visited
    adv = rng.normal(size=B)
    adv[0], adv[1] = 0.0, -2.0
    return logp, old, adv


@graded("dual_clip_surrogate", reference=True)
def test_dual_clip_matches_numpy(impl, rng):
    """matches a numpy reference per token, for several clip settings"""
    for eps_low, eps_high, c in [(0.2, 0.2, 3.0), (0.2, 0.28, 2.0), (0.1, 0.3, 5.0)]:
        logp, old, adv = _dual_clip_inputs(rng)
        got = impl.dual_clip_surrogate(_f32(logp), _f32(old), _f32(adv), eps_low=eps_low, eps_high=eps_high,
                                       clip_c=c)
        assert np.shape(got) == logp.shape, f"expected a per-token loss of shape {logp.shape}, got {np.shape(got)}"
        np.testing.assert_allclose(np.asarray(got), _dual_clip_ref(logp, old, adv, eps_low, eps_high, c),
                                   rtol=1e-5, atol=1e-6, err_msg=f"eps_low={eps_low}, eps_high={eps_high}, c={c}")


@graded("dual_clip_surrogate")
def test_dual_clip_gradient_vanishes_past_every_bound(impl, rng):
    """d loss / d logp is 0 past 1 + eps_high (A > 0), below 1 - eps_low (A < 0) and past clip_c (A < 0), and
    -A * rho everywhere else"""
    ratios = np.array([0.5, 0.85, 1.1, 1.5, 2.5, 4.0])
    adv = np.array([1.0, -1.0])
    logp = np.log(np.tile(ratios, (2, 1)))
    grad = jax.grad(lambda lp: jnp.sum(impl.dual_clip_surrogate(lp, jnp.zeros((2, 6)), _f32(adv), eps_low=0.2,
                                                                 eps_high=0.2, clip_c=3.0)))(_f32(logp))
    grad = np.asarray(grad)
    want_pos = np.where(ratios > 1.2, 0.0, -ratios)  # A = +1: the clip at 1.2 stops the push
    want_neg = np.where((ratios < 0.8) | (ratios > 3.0), 0.0, ratios)  # A = -1: stopped below 0.8 and past c = 3
    np.testing.assert_allclose(grad[0], want_pos, rtol=1e-5, atol=1e-7, err_msg="A > 0")
    np.testing.assert_allclose(grad[1], want_neg, rtol=1e-5, atol=1e-7, err_msg="A < 0")


# ----------------------------------------------------------------------------- 3. off-policy k3


@graded("kl_k3_off_policy")
def test_kl_off_policy_is_k3_on_policy(impl, rng):
    """with old_logp == logp it is k3 = exp(d) - d - 1 exactly; it is never negative; 0 where pi = pi_ref"""
    logp, ref = rng.normal(size=(3, 7)) - 2, rng.normal(size=(3, 7)) - 2
    d = ref - logp
    got = np.asarray(impl.kl_k3_off_policy(_f32(logp), _f32(ref), _f32(logp)))
    np.testing.assert_allclose(got, np.exp(d) - d - 1, rtol=1e-5, atol=1e-6)
    off = np.asarray(impl.kl_k3_off_policy(_f32(logp), _f32(ref), _f32(logp + rng.normal(size=(3, 7)))))
    assert off.min() >= 0, f"an importance-weighted k3 is never negative, got {off.min()}"
    same = np.asarray(impl.kl_k3_off_policy(_f32(logp), _f32(logp), _f32(ref)))
    assert np.all(same == 0.0), "pi == pi_ref must give exactly 0"


@graded("kl_k3_off_policy", reference=True)  # the closed form: plain k3 passes the other test
def test_kl_off_policy_expectation_is_the_exact_kl(impl, rng):
    """averaged over tokens drawn from pi_old (exact expectation over a small vocabulary) it is KL(pi || pi_ref),
    and so is its gradient with respect to pi's logits"""
    V = 6
    z, ref_z, old_z = (rng.normal(size=V) for _ in range(3))
    ref, old = jax.nn.log_softmax(_f32(ref_z)), jax.nn.log_softmax(_f32(old_z))

    def expected(z):
        logp = jax.nn.log_softmax(z)
        return jnp.sum(jnp.exp(old) * impl.kl_k3_off_policy(logp, ref, old))

    def exact(z):
        logp = jax.nn.log_softmax(z)
        return jnp.sum(jnp.exp(logp) * (logp - ref))

    np.testing.assert_allclose(float(expected(_f32(z))), float(exact(_f32(z))), rtol=1e-5, atol=1e-6,
                               err_msg="E_old[estimate] must equal KL(pi || pi_ref)")
    np.testing.assert_allclose(np.asarray(jax.grad(expected)(_f32(z))), np.asarray(jax.grad(exact)(_f32(z))),
                               rtol=1e-4, atol=1e-6, err_msg="and its gradient the KL's gradient")


# ----------------------------------------------------------------------------- 4. GAE with episode ends


def _gae_ref(rewards, values, dones, gamma, lam):
    B, T = rewards.shape
    adv = np.zeros((B, T))
    for b in range(B):
        next_value = next_adv = 0.0
        for t in reversed(range(T)):
            keep = 1.0 - dones[b, t]
            delta = rewards[b, t] + gamma * next_value * keep - values[b, t]
            adv[b, t] = delta + gamma * lam * keep * next_adv
            next_value, next_adv = values[b, t], adv[b, t]
    return adv, adv + values


def _episodes(rng, B=3, T=12):
    rewards = rng.normal(size=(B, T))
    values = rng.normal(size=(B, T))
    dones = (rng.random(size=(B, T)) < 0.25).astype(np.float64)
    dones[:, -1] = 1.0
    return rewards, values, dones


def _gae(impl, rewards, values, dones, gamma, lam):
    adv, ret = impl.gae_with_dones(_f32(rewards), _f32(values), _f32(dones), gamma, lam)
    return np.asarray(adv, np.float64), np.asarray(ret, np.float64)


@graded("gae_with_dones", reference=True)
def test_gae_with_dones_matches_numpy(impl, rng):
    """advantages and returns match a numpy loop for rows holding several episodes"""
    for gamma, lam in [(0.99, 0.95), (1.0, 0.9), (0.9, 0.5)]:
        rewards, values, dones = _episodes(rng)
        adv, ret = _gae(impl, rewards, values, dones, gamma, lam)
        want_adv, want_ret = _gae_ref(rewards, values, dones, gamma, lam)
        np.testing.assert_allclose(adv, want_adv, rtol=1e-4, atol=1e-5, err_msg=f"advantages, gamma={gamma}, lam={lam}")
        np.testing.assert_allclose(ret, want_ret, rtol=1e-4, atol=1e-5, err_msg="returns = advantages + values")


@graded("gae_with_dones")
def test_gae_with_dones_keeps_episodes_apart(impl, rng):
    """changing the rewards or values of a later episode leaves an earlier episode's advantages unchanged"""
    rewards, values, dones = _episodes(rng, B=1, T=10)
    dones[:] = 0.0
    dones[0, 4] = dones[0, 9] = 1.0  # episodes at t = 0..4 and 5..9
    adv, _ = _gae(impl, rewards, values, dones, 0.99, 0.95)
    rewards2, values2 = rewards.copy(), values.copy()
    rewards2[0, 5:] += 10.0
    values2[0, 5:] -= 3.0
    adv2, _ = _gae(impl, rewards2, values2, dones, 0.99, 0.95)
    np.testing.assert_allclose(adv2[0, :5], adv[0, :5], rtol=1e-6, atol=1e-6,
                               err_msg="the first episode's advantages changed when only the second one did")
    assert not np.allclose(adv2[0, 5:], adv[0, 5:]), "the second episode's advantages should change"


@graded("gae_with_dones")
def test_gae_with_dones_limits(impl, rng):
    """lam = 1 gives the discounted return to the episode's end minus V; lam = 0 the one-step TD error"""
    rewards, values, dones = _episodes(rng)
    gamma = 0.9
    adv1, _ = _gae(impl, rewards, values, dones, gamma, 1.0)
    returns = np.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        running = 0.0
        for t in reversed(range(rewards.shape[1])):
            running = rewards[b, t] + gamma * running * (1.0 - dones[b, t])
            returns[b, t] = running
    np.testing.assert_allclose(adv1, returns - values, rtol=1e-4, atol=1e-5, err_msg="lam = 1")
    adv0, _ = _gae(impl, rewards, values, dones, gamma, 0.0)
    next_values = np.concatenate([values[:, 1:], np.zeros((values.shape[0], 1))], axis=1) * (1.0 - dones)
    np.testing.assert_allclose(adv0, rewards + gamma * next_values - values, rtol=1e-4, atol=1e-5, err_msg="lam = 0")


# ----------------------------------------------------------------------------- 5. aggregation over packed rows

MODES = ("token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum-norm")


def _packed(rng, B=4, T=10, num_sequences=9):
    """per_token [B, T] and sequence ids [B, T] (-1 padding): each row holds a few sequences back to back.

    Every row starts with a sequence while ids remain, so a batch (and each micro-batch the tests cut from
    it) is never empty: the empty batch is tested on its own."""
    ids = np.full((B, T), -1)
    seq = 0
    for b in range(B):
        t = 0
        while seq < num_sequences and t < T - 1 and (t == 0 or rng.random() < 0.85):
            n = int(rng.integers(1, 4))
            ids[b, t:t + n] = seq
            seq, t = seq + 1, t + n
    return rng.normal(size=(B, T)), ids, num_sequences


def _aggregate_ref(per_token, ids, max_tokens, mode):
    keep = ids >= 0
    sequences = sorted(set(ids[keep].tolist()))
    if mode == "token-mean":
        return per_token[keep].sum() / max(keep.sum(), 1), float(keep.sum())
    means = [per_token[ids == s].sum() / ((ids == s).sum() if mode == "sequence-mean-token-mean" else max_tokens)
             for s in sequences]
    return (float(np.mean(means)) if means else 0.0), float(len(sequences))


def _aggregate(impl, per_token, ids, num_sequences, mode, max_tokens=12):
    out = impl.packed_aggregate(_f32(per_token), jnp.asarray(ids, jnp.int32), num_sequences, mode,
                                max_tokens=max_tokens)
    assert isinstance(out, tuple) and len(out) == 2, "return a tuple (loss, count)"
    return float(out[0]), float(out[1])


@graded("packed_aggregate", reference=True)
def test_packed_aggregate_matches_numpy(impl, rng):
    """(loss, count) match a numpy reference in each mode, padding (id -1) ignored, an empty batch gives (0, 0)"""
    for _ in range(3):
        per_token, ids, num_sequences = _packed(rng)
        per_token[ids < 0] = 1e3  # padding values must not leak in
        for mode in MODES:
            loss, count = _aggregate(impl, per_token, ids, num_sequences, mode)
            want_loss, want_count = _aggregate_ref(per_token, ids, 12, mode)
            assert count == want_count, f"{mode}: count {count}, expected {want_count}"
            np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6, err_msg=mode)
    for mode in MODES:
        assert _aggregate(impl, per_token, np.full_like(ids, -1), num_sequences, mode) == (0.0, 0.0), mode


@graded("packed_aggregate")
def test_packed_aggregate_equals_the_unpacked_rows(impl, rng):
    """packing sequences into shared rows does not change the loss: the same sequences one per row give it too"""
    per_token, ids, num_sequences = _packed(rng)
    present = sorted(set(ids[ids >= 0].tolist()))
    longest = max(int((ids == s).sum()) for s in present)
    rows = np.zeros((len(present), longest))
    row_ids = np.full((len(present), longest), -1)
    for r, s in enumerate(present):
        values = per_token[ids == s]
        rows[r, :values.size], row_ids[r, :values.size] = values, r
    for mode in MODES:
        packed = _aggregate(impl, per_token, ids, num_sequences, mode)
        unpacked = _aggregate(impl, rows, row_ids, len(present), mode)
        # a mean of values of both signs can sit near 0: float32 rounding is absolute there
        np.testing.assert_allclose(packed, unpacked, rtol=1e-5, atol=1e-6 * np.abs(per_token).max(),
                                   err_msg=mode)


@graded("packed_aggregate")
def test_packed_aggregate_counts_make_micro_batches_exact(impl, rng):
    """splitting the rows into two micro-batches and weighting each loss by its count gives the whole batch's loss"""
    per_token, ids, num_sequences = _packed(rng, B=6)
    for mode in MODES:
        whole, _ = _aggregate(impl, per_token, ids, num_sequences, mode)
        parts = [_aggregate(impl, per_token[s], ids[s], num_sequences, mode) for s in (slice(0, 2), slice(2, 6))]
        combined = sum(loss * count for loss, count in parts) / sum(count for _, count in parts)
        np.testing.assert_allclose(combined, whole, rtol=1e-5, atol=1e-6 * np.abs(per_token).max(),
                                   err_msg=f"{mode}: count-weighted halves")


# ------------------------------------------------------------------ 6. a reward that resists hacks

OPEN, CLOSE = "<answer>", "</answer>"
WORDS = ("blue", "woof", "Velo", "apples", "seven", "moo", "green", "Pika")
FILLER = ("so", "we", "add", "the", "two", "numbers", "and", "count", "then", "check", "it")


def _reward_ref(completion: str, reference: str) -> float:
    if completion.count(OPEN) != 1 or completion.count(CLOSE) != 1:
        return 0.0
    inside, closed, after = completion.partition(OPEN)[2].partition(CLOSE)
    return float(bool(closed) and not after.strip() and inside.strip() == reference.strip())


def _number(rng) -> str:
    return str(int(rng.integers(0, 1000)))


def _reference(rng) -> str:
    return _number(rng) if rng.random() < 0.6 else str(rng.choice(WORDS))


def _other(rng, reference: str) -> str:
    """A wrong answer of the same kind as the reference."""
    while (wrong := _number(rng) if reference.isdigit() else str(rng.choice(WORDS))) == reference:
        pass
    return wrong


def _reasoning(rng) -> str:
    return " ".join(rng.choice(FILLER, size=int(rng.integers(3, 12))))


def _tagged(rng, content: str) -> str:
    """An honest completion: reasoning, one tag (maybe spaces inside), maybe whitespace after."""
    pad, after = (str(rng.choice(["", " ", "\n"])) for _ in range(2))
    return f"{_reasoning(rng)} {OPEN}{pad}{content}{pad}{CLOSE}{after}"


def _honest(rng, reference: str) -> list[str]:
    """Right, wrong and untagged completions for one reference."""
    return [_tagged(rng, reference), _tagged(rng, _other(rng, reference)),
            f"{_reasoning(rng)} so the answer is {reference}."]


def _rewards(impl, completions, references, **columns) -> list[float]:
    prompts = [f"question {i}" for i in range(len(completions))]
    out = impl.reward_answer(prompts, list(completions), list(references), **columns)
    size = len(out) if hasattr(out, "__len__") else "?"
    assert isinstance(out, list) and len(out) == len(completions), (
        f"return a list of one float per completion ({len(completions)}), got "
        f"{type(out).__name__} of length {size}")
    return out


def _assert_all_zero(impl, hacks: dict[str, str], reference: str):
    got = _rewards(impl, list(hacks.values()), [reference] * len(hacks))
    paid = [name for name, value in zip(hacks, got) if value != 0.0]
    assert not paid, f"reference {reference!r}: these hacks must score 0.0, yours paid for {paid}"


@graded("reward_answer", reference=True)
def test_reward_answer_matches_reference(impl, rng):
    """honest completions (right, wrong, untagged; spaces inside the tag, whitespace after it)
    score like a reference: 1.0 for the right tagged answer, 0.0 otherwise"""
    references = [_reference(rng) for _ in range(int(rng.integers(4, 9)))]
    rows = [(text, ref) for ref in references for text in _honest(rng, ref)]
    rows = [rows[i] for i in rng.permutation(len(rows))]
    texts, refs = [t for t, _ in rows], [r for _, r in rows]
    got = _rewards(impl, texts, refs, domain=["arithmetic"] * len(rows))
    for text, ref, value in zip(texts, refs, got):
        want = _reward_ref(text, ref)
        assert value == want, f"reference {ref!r}, {text!r}: expected {want}, got {value}"


@graded("reward_answer")
def test_reward_answer_rejects_extra_and_broken_tags(impl, rng):
    """0.0 for several answer tags (each candidate tagged, or the right one twice), nested,
    unclosed or reversed tags, and an empty tag"""
    ref = _reference(rng)
    candidates = [ref, *(_other(rng, ref) for _ in range(3))]
    listed = "".join(f"{OPEN}{c}{CLOSE}" for c in rng.permutation(candidates))
    _assert_all_zero(impl, {
        "every candidate tagged": f"{_reasoning(rng)} {listed}",
        "the right answer tagged twice": f"{OPEN}{ref}{CLOSE}{OPEN}{ref}{CLOSE}",
        "a nested tag": f"{OPEN}{OPEN}{ref}{CLOSE}",
        "an unclosed tag": f"{_reasoning(rng)} {OPEN}{ref}",
        "reversed tags": f"{CLOSE}{ref}{OPEN}",
        "an empty tag": f"{_reasoning(rng)} {OPEN}{CLOSE}",
        "a tag of spaces": f"{OPEN}   {CLOSE}"}, ref)


@graded("reward_answer")
def test_reward_answer_rejects_answers_outside_one_exact_tag(impl, rng):
    """0.0 for the right answer in the reasoning but a wrong one in the tag, several answers in one
    tag, text after the closing tag, and enormous completions (every number in one tag; the answer,
    then a flood of others)"""
    ref = _number(rng)
    wrong = _other(rng, ref)
    every_number = " ".join(map(str, rng.permutation(1000)))
    _assert_all_zero(impl, {
        "right in the reasoning, wrong in the tag": f"the answer is {ref}. {OPEN}{wrong}{CLOSE}",
        "two answers, comma": f"{OPEN}{ref}, {wrong}{CLOSE}",
        "two answers, 'or'": f"{OPEN}{wrong} or {ref}{CLOSE}",
        "the answer twice in one tag": f"{OPEN}{ref} {ref}{CLOSE}",
        "the answer twice, one per line": f"{OPEN}{ref}\n{ref}{CLOSE}",
        "text after the tag": f"{OPEN}{ref}{CLOSE} or maybe {wrong}",
        "every number in one tag": f"{OPEN}{every_number}{CLOSE}",
        "the answer, then a flood": f"{OPEN}{ref}{CLOSE}" + every_number * 200}, ref)


def _digits_from(zero: str, number: str) -> str:
    """`number` written with the ten digits that start at `zero` (another script's digits)."""
    return "".join(chr(ord(zero) + int(d)) for d in number)


@graded("reward_answer")
def test_reward_answer_compares_text_not_numbers(impl, rng):
    """0.0 for answers that only parse to the reference: look-alike digits (full-width,
    Arabic-Indic), a leading zero or plus sign, a decimal point; for a word in another case, and for
    the reference's words spaced differently"""
    ref = _number(rng)
    _assert_all_zero(impl, {
        "full-width digits": f"{OPEN}{_digits_from(chr(0xFF10), ref)}{CLOSE}",
        "Arabic-Indic digits": f"{OPEN}{_digits_from(chr(0x0660), ref)}{CLOSE}",
        "a leading zero": f"{OPEN}0{ref}{CLOSE}",
        "a plus sign": f"{OPEN}+{ref}{CLOSE}",
        "a decimal point": f"{OPEN}{ref}.0{CLOSE}"}, ref)
    word = str(rng.choice(WORDS))
    _assert_all_zero(impl, {"another case": f"{OPEN}{word.swapcase()}{CLOSE}"}, word)
    two_words = f"{word} {_other(rng, word)}"
    _assert_all_zero(impl, {"the words spaced apart": f"{OPEN}{two_words.replace(' ', '  ')}{CLOSE}",
                            "the words on two lines": f"{OPEN}{two_words.replace(' ', chr(10))}{CLOSE}"},
                     two_words)


@graded("reward_answer")
def test_reward_answer_one_float_per_completion(impl, rng):
    """a list of one Python float per completion, in order, for any batch size (0 and 1
    included); the dataset's other columns arrive as keyword arguments"""
    for size in (0, 1, int(rng.integers(2, 64))):
        references = [_reference(rng) for _ in range(size)]
        texts = [_honest(rng, ref)[int(rng.integers(0, 3))] for ref in references]
        ids = [[int(t) for t in rng.integers(0, 100, size=5)] for _ in range(size)]
        got = _rewards(impl, texts, references, completion_ids=ids, domain=["facts"] * size)
        assert all(type(v) is float for v in got), f"every reward must be a float, got {got[:5]}"
        want = [_reward_ref(t, r) for t, r in zip(texts, references)]
        assert got == want, f"batch of {size}: expected {want}, got {got}"
        backwards = _rewards(impl, texts[::-1], references[::-1])
        assert backwards == got[::-1], "reversing the batch must reverse the rewards"


# ------------------------------------------------------------------ 7. which tasks have room for RL

VERDICTS = ("room", "no_room", "guessing", "too_hard", "too_few")
TASKS = ("chain_sum", "products", "basic_arithmetic", "gcd", "lcm", "letter_counting",
         "leg_counting", "spell_backward", "word_sorting", "number_sequence", "simple_equations",
         "compare", "count", "sort", "sequence", "instruction", "arithmetic", "facts",
         "word_sequence_reversal")


def _few_prompts() -> list[tuple[int, int]]:
    """(n, greedy right) on 6-10 prompts where pass@K can show room beyond the bar (0.25 above
    greedy) while staying inside greedy's own Wilson interval: room no sound reading can confirm."""
    return [(n, k) for n in range(6, 11) for k in range(4)
            if math.ceil((k / n + 0.25) * n - 1e-9) <= math.floor(wilson(k, n)[1] * n + 1e-9)]


_FEW = _few_prompts()


def _rate(rng, n: int, lo: float, hi: float) -> float:
    """A rate in [lo, hi] that n prompts can show: a multiple of 1 / n."""
    first, last = math.ceil(max(lo, 0.0) * n - 1e-9), math.floor(min(hi, 1.0) * n + 1e-9)
    k = int(rng.integers(first, last + 1))
    return k / n


def _task_row(rng, verdict: str, samples: int, n: int | None = None) -> dict:
    """One task's row of a `tunix-lite eval --samples K --json` report, drawn so that `verdict` is
    the only sound reading: margins of 0.15 or more around the notes' bar of 0.2, or n too small to
    tell."""
    if verdict == "too_few":
        choices = [(size, right) for size, right in _FEW if n is None or size == n]
        n, right = choices[int(rng.integers(len(choices)))]
        greedy = right / n
        top = wilson(right, n)[1]
        sampled, guess = _rate(rng, n, greedy + 0.25, top), float(rng.uniform(0.0, greedy))
    else:
        n = n or int(rng.integers(200, 501))
        if verdict == "room":
            greedy = _rate(rng, n, 0.02, 0.5)
            guess = float(rng.uniform(0.0, greedy + 0.05))
            sampled = _rate(rng, n, max(greedy, guess) + 0.35, min(max(greedy, guess) + 0.5, 0.98))
        elif verdict == "no_room":
            greedy = _rate(rng, n, 0.1, 0.95)
            sampled = _rate(rng, n, greedy, greedy + 0.06)
            guess = float(rng.uniform(0.0, greedy - 0.05))
        elif verdict == "guessing":
            greedy = _rate(rng, n, 0.05, 0.55)
            sampled = _rate(rng, n, greedy + 0.3, greedy + 0.45)
            guess = float(np.clip(sampled + rng.uniform(-0.05, 0.05), 0.0, 1.0))
        elif verdict == "too_hard":
            greedy, sampled, guess = 0.0, 0.0, float(rng.uniform(0.0, 0.15))
        else:
            raise ValueError(f"unknown verdict {verdict!r}")
    right = (rng.permutation(n) < round(greedy * n)).astype(int)
    constant = float(min(rng.uniform(0.0, 1.0) * max(guess, 0.02), greedy if greedy else 0.1))
    return {"accuracy": float(right.mean()), "ci95": list(wilson(float(right.sum()), n)), "n": n,
            "right": right.tolist(), "constant": constant, f"pass@{samples}": sampled,
            f"guess_pass@{samples}": guess,
            f"maj@{samples}": float(rng.uniform(right.mean(), max(sampled, right.mean())))}


def _report(rng, rows: dict[str, dict], samples: int) -> dict:
    """The whole report around per-task rows, as `tunix-lite eval --json` writes it."""
    right = [v for row in rows.values() for v in row["right"]]
    n = len(right)
    mean = (lambda key: float(sum(row[key] * row["n"] for row in rows.values()) / max(n, 1)))
    return {"command": f"tunix-lite eval --samples {samples} --json", "model": "runs/warmup",
            "data": "reasoning_gym:" + ",".join(rows), "seed": int(rng.integers(0, 100)),
            "accuracy": sum(right) / max(n, 1), "ci95": list(wilson(sum(right), n)), "n": n,
            "right": right, "format": 1.0, "reward": sum(right) / max(n, 1), "max_new_tokens": 32,
            "per_task": rows, "constant": mean("constant"), "samples": samples,
            f"guess_pass@{samples}": mean(f"guess_pass@{samples}"), "temperature": 1.0,
            f"pass@{samples}": mean(f"pass@{samples}"), f"maj@{samples}": mean(f"maj@{samples}")}


def _candidates(rng, samples: int) -> tuple[dict, dict[str, str]]:
    """(a report of 6-10 candidate tasks, each task's verdict): every verdict at least once."""
    names = [str(t) for t in rng.choice(TASKS, size=int(rng.integers(6, 11)), replace=False)]
    verdicts = [*VERDICTS, *(str(v) for v in rng.choice(VERDICTS, size=len(names) - len(VERDICTS)))]
    verdicts = [verdicts[i] for i in rng.permutation(len(verdicts))]
    rows = {name: _task_row(rng, verdict, samples) for name, verdict in zip(names, verdicts)}
    return _report(rng, rows, samples), dict(zip(names, verdicts))


def _verdicts(impl, report: dict) -> dict:
    got = impl.choose_rl_tasks(report)
    assert isinstance(got, dict), f"return a dict {{task: verdict}}, got {type(got).__name__}"
    assert set(got) == set(report["per_task"]), (
        f"one verdict per task of report['per_task']: expected {sorted(report['per_task'])}, "
        f"got {sorted(got)}")
    return got


def _agree(got: dict, want: dict, report: dict, why: str) -> None:
    wrong = {task: f"{got[task]!r}, expected {want[task]!r}" for task in want
             if got[task] != want[task]}
    samples = report["samples"]
    keys = ("n", "accuracy", f"pass@{samples}", f"guess_pass@{samples}")
    figures = {task: {k: round(report["per_task"][task][k], 3) for k in keys} for task in wrong}
    assert not wrong, f"{why}: {wrong}; their figures: {figures}"


@graded("choose_rl_tasks", reference=True)
def test_choose_rl_tasks_gives_each_task_its_verdict(impl, rng):
    """gives every task of a report its verdict (room for RL, or why not), for reports of 6-10 tasks
    sampled 4, 8 or 16 times"""
    for samples in (4, 8, 16):
        report, want = _candidates(rng, samples)
        _agree(_verdicts(impl, report), want, report,
               f"a report of {len(want)} tasks, K = {samples}")


@graded("choose_rl_tasks")
def test_choose_rl_tasks_judges_each_task_alone(impl, rng):
    """a task's verdict comes from its own figures: the same with the tasks shuffled, renamed, or
    with half of the others left out"""
    report, want = _candidates(rng, int(rng.choice([4, 8, 16])))
    names = list(report["per_task"])
    order = rng.permutation(len(names))
    shuffled = {f"task_{i}": report["per_task"][names[j]] for i, j in enumerate(order)}
    renamed = {f"task_{i}": want[names[j]] for i, j in enumerate(order)}
    moved = _report(rng, shuffled, report["samples"])
    _agree(_verdicts(impl, moved), renamed, moved, "the same tasks, shuffled and renamed")
    kept = {name: report["per_task"][name] for name in names[: max(1, len(names) // 2)]}
    fewer = _report(rng, kept, report["samples"])
    _agree(_verdicts(impl, fewer), {k: want[k] for k in kept}, fewer, "half of the tasks")


@graded("choose_rl_tasks")
def test_choose_rl_tasks_weighs_the_evidence(impl, rng):
    """the same rates on 6-10 prompts cannot show room that 200-500 prompts show; a task's room
    goes when guessing scores as well as sampling does, and comes back when guessing falls"""
    samples = int(rng.choice([4, 8, 16]))
    many = _task_row(rng, "room", samples)
    few = _task_row(rng, "too_few", samples)
    n = few["n"]
    rows = {"many": many, "few": few}
    report = _report(rng, rows, samples)
    _agree(_verdicts(impl, report), {"many": "room", "few": "too_few"}, report,
           f"room on {many['n']} prompts, an apparent room of the same size on {n}")
    guessed = dict(many, **{f"guess_pass@{samples}": float(np.clip(
        many[f"pass@{samples}"] + rng.uniform(-0.03, 0.03), 0.0, 1.0))})
    report = _report(rng, {"many": guessed}, samples)
    _agree(_verdicts(impl, report), {"many": "guessing"}, report,
           f"the room task, with {samples} guesses from the answers' prior scoring like "
           f"pass@{samples}")


@graded("choose_rl_tasks")
def test_choose_rl_tasks_needs_sampled_answers(impl, rng):
    """a report without sampled answers (no --samples) cannot show room: a ValueError that names
    the samples"""
    report, want = _candidates(rng, 8)
    _agree(_verdicts(impl, report), want, report, "a report with 8 samples per prompt")
    greedy_only = {k: v for k, v in report.items()
                   if k not in ("samples", "temperature") and "@" not in k}
    greedy_only["per_task"] = {task: {k: v for k, v in row.items() if "@" not in k}
                               for task, row in report["per_task"].items()}
    try:
        impl.choose_rl_tasks(greedy_only)
    except ValueError as e:
        assert "sample" in str(e).lower(), f"the ValueError should name the missing samples: {e}"
    else:
        raise AssertionError("a report of greedy answers only has no pass@K: raise ValueError")
