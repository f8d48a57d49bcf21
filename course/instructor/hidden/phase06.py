"""Hidden tests for phase 6: every public check (tunix_lite/course/graded/phase06.py), then each
exercise again on inputs the public tests never draw (twenty ragged groups, one-row batches, other
clip bounds, a two-token vocabulary, episodes of one step, a single long packed row, references
with spaces and accents, and for the choice of RL tasks: other K, other n, and the real candidate
tasks of the lesson at a size that settles them), so code fitted to the public inputs fails here.
Rotate the second part per cohort.

    tunix-lite grade solutions/06_rl_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.graded import graded, include, phase06
from tunix_lite.course.graded.phase06 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    CLOSE,
    FORBIDDEN,
    HINTS,
    MODES,
    OPEN,
    VERDICTS,
    _advantages,
    _advantages_ref,
    _agree,
    _aggregate,
    _aggregate_ref,
    _dual_clip_ref,
    _f32,
    _gae,
    _gae_ref,
    _packed,
    _ragged_groups,
    _report,
    _reward_ref,
    _rewards,
    _task_row,
    _verdicts,
)
from tunix_lite.evaluation import wilson

include(phase06, globals())


@graded("group_advantages")
def test_hidden_group_advantages_twenty_groups(impl, rng):
    """twenty groups of 1 to 12 completions, shuffled"""
    rewards, ids, num_groups = _ragged_groups(rng, num_groups=20, lo=1, hi=13)
    for kind in ("grpo", "drgrpo", "rloo"):
        np.testing.assert_allclose(_advantages(impl, rewards, ids, num_groups, kind),
                                   _advantages_ref(rewards, ids, num_groups, kind), rtol=1e-4,
                                   atol=1e-5, err_msg=f"kind={kind!r}, twenty groups")


@graded("dual_clip_surrogate")
def test_hidden_dual_clip_one_row_other_bounds(impl, rng):
    """one row with a negative advantage, asymmetric bounds and a dual clip of 1.5"""
    old = rng.normal(size=(1, 9)) - 2.0
    logp = old + rng.normal(size=(1, 9)) * 1.5
    adv = np.array([-float(rng.uniform(0.5, 3.0))])
    got = impl.dual_clip_surrogate(_f32(logp), _f32(old), _f32(adv), eps_low=0.05, eps_high=0.5,
                                   clip_c=1.5)
    np.testing.assert_allclose(np.asarray(got), _dual_clip_ref(logp, old, adv, 0.05, 0.5, 1.5),
                               rtol=1e-5, atol=1e-6, err_msg="eps 0.05 / 0.5, clip_c 1.5")


@graded("kl_k3_off_policy")
def test_hidden_kl_off_policy_two_and_fifty_tokens(impl, rng):
    """the exact expectation over a vocabulary of two tokens and of fifty is KL(pi || pi_ref)"""
    for vocab in (2, 50):
        z, ref_z, old_z = (rng.normal(size=vocab) for _ in range(3))
        ref, old = jax.nn.log_softmax(_f32(ref_z)), jax.nn.log_softmax(_f32(old_z))
        logp = jax.nn.log_softmax(_f32(z))
        expected = float(jnp.sum(jnp.exp(old) * impl.kl_k3_off_policy(logp, ref, old)))
        exact = float(jnp.sum(jnp.exp(logp) * (logp - ref)))
        np.testing.assert_allclose(expected, exact, rtol=1e-4, atol=1e-6,
                                   err_msg=f"V = {vocab}: E_old[estimate] = KL(pi || pi_ref)")


@graded("gae_with_dones")
def test_hidden_gae_every_step_ends_an_episode(impl, rng):
    """episodes of one step each (every done is 1): the advantage is r - V, whatever gamma and
    lam"""
    rewards, values = rng.normal(size=(2, 7)), rng.normal(size=(2, 7))
    dones = np.ones((2, 7))
    for gamma, lam in [(0.99, 0.95), (0.5, 1.0)]:
        adv, ret = _gae(impl, rewards, values, dones, gamma, lam)
        want_adv, want_ret = _gae_ref(rewards, values, dones, gamma, lam)
        np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-6, err_msg="advantages")
        np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-6, err_msg="returns")


@graded("packed_aggregate")
def test_hidden_packed_aggregate_one_long_row(impl, rng):
    """a single row of 40 positions holding a dozen sequences"""
    per_token, ids, num_sequences = _packed(rng, B=1, T=40, num_sequences=12)
    for mode in MODES:
        loss, count = _aggregate(impl, per_token, ids, num_sequences, mode, max_tokens=40)
        want_loss, want_count = _aggregate_ref(per_token, ids, 40, mode)
        assert count == want_count, f"{mode}: count {count}, expected {want_count}"
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6, err_msg=mode)


@graded("reward_answer")
def test_hidden_reward_answer_spaces_accents_and_line_ends(impl, rng):
    """references with inner spaces and accents, tags followed by Windows line ends"""
    references = ["New York", "café au lait", str(int(rng.integers(1000, 10**6)))]
    texts, refs = [], []
    for ref in references:
        texts += [f"so {OPEN} {ref} {CLOSE}\r\n", f"{OPEN}{ref.upper()}{CLOSE}",
                  f"{OPEN}{ref}{CLOSE} {ref}"]
        refs += [ref] * 3
    got = _rewards(impl, texts, refs)
    want = [_reward_ref(t, r) for t, r in zip(texts, refs)]
    assert got == want, f"expected {want}, got {got}"


def _fixed(n: int, greedy: float, sampled: float, guess: float, samples: int = 8) -> dict:
    """A task's row from its rates, on n prompts."""
    right = (np.arange(n) < round(greedy * n)).astype(int)
    return {"accuracy": float(right.mean()), "ci95": list(wilson(float(right.sum()), n)), "n": n,
            "right": right.tolist(), "constant": min(guess, greedy), f"pass@{samples}": sampled,
            f"guess_pass@{samples}": guess, f"maj@{samples}": greedy}


@graded("choose_rl_tasks")
def test_hidden_choose_rl_tasks_other_samples_and_sizes(impl, rng):
    """reports sampled twice or 32 times per prompt, on 500 to 2000 prompts a task"""
    for samples in (2, 32):
        names = [f"task_{i}" for i in range(len(VERDICTS) + 2)]
        verdicts = [*VERDICTS, *(str(v) for v in rng.choice(VERDICTS, size=2))]
        rows = {}
        for name, verdict in zip(names, verdicts):
            n = None if verdict == "too_few" else int(rng.integers(500, 2001))
            rows[name] = _task_row(rng, verdict, samples, n=n)
        report = _report(rng, rows, samples)
        _agree(_verdicts(impl, report), dict(zip(names, verdicts)), report, f"K = {samples}")


@graded("choose_rl_tasks")
def test_hidden_choose_rl_tasks_the_lessons_candidates(impl, rng):
    """the lesson's real candidates (Gemma 3 270M after a format warm-up) at a size that settles
    them: letter counting, gcd and lcm are guessing, spell_backward has no right sample, products
    has room"""
    rows = {"letter_counting": _fixed(300, 0.62, 0.92, 0.91), "gcd": _fixed(300, 0.26, 0.68, 0.70),
            "lcm": _fixed(300, 0.03, 0.33, 0.35), "spell_backward": _fixed(300, 0.0, 0.0, 0.0),
            "products": _fixed(1000, 0.30, 0.57, 0.26)}
    order = [list(rows)[i] for i in rng.permutation(len(rows))]
    report = _report(rng, {name: rows[name] for name in order}, 8)
    want = {"letter_counting": "guessing", "gcd": "guessing", "lcm": "guessing",
            "spell_backward": "too_hard", "products": "room"}
    _agree(_verdicts(impl, report), want, report, "the lesson's candidates")
