"""The RL building blocks against hand-computed values and their defining invariants: advantages, the clipped
surrogate, the KL estimators, the aggregation modes, GAE and the value loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lite.rl.advantages import (ESTIMATORS, decoupled_advantages, drgrpo_advantages, gae,
                                      grpo_advantages, rloo_advantages, whiten)
from tunix_lite.rl.losses import (aggregate, clipped_surrogate, clipped_value_loss, kl_k1, kl_k3,
                                  sequence_mean_token_mean, sequence_mean_token_sum_norm, token_mean)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_advantages_are_zero_mean_per_group_and_zero_for_equal_rewards(name):
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=5 * 4).astype(np.float32)
    rewards[8:12] = 0.7  # group 2: every completion got the same reward
    a = np.asarray(ESTIMATORS[name](rewards, 4)).reshape(5, 4)
    np.testing.assert_allclose(a.mean(axis=1), 0.0, atol=1e-6)
    assert np.all(a[2] == 0.0)  # exactly zero, not eps-small
    order = np.argsort(rewards.reshape(5, 4)[0])
    assert np.all(np.diff(a[0][order]) > 0)  # a better completion always gets a larger advantage


def test_decoupled_advantages_match_gdpo_by_hand_and_give_each_reward_its_say():
    correct = np.array([1, 0, 0, 0, 0, 0, 0, 0], np.float32)  # two groups of 4
    length = np.array([0, 50, 100, 150, 7, 7, 7, 7], np.float32)  # wide spread; group 2 all equal
    parts, weights = {"correct": correct, "length": length}, {"correct": 1.0, "length": 0.5}

    def by_hand(r):  # GRPO's group advantage, sample std as TRL and the paper compute it
        g = r.reshape(-1, 4)
        std = g.std(axis=1, ddof=1, keepdims=True)
        return np.where(std > 0, (g - g.mean(axis=1, keepdims=True)) / np.where(std > 0, std, 1), 0)

    summed = (by_hand(correct) + 0.5 * by_hand(length)).reshape(-1)
    expected = (summed - summed.mean()) / summed.std()  # GDPO: then the batch's mean and std
    np.testing.assert_allclose(decoupled_advantages(parts, weights, 4, eps=0.0), expected, atol=1e-5)
    # scaling one reward changes nothing: no reward drowns another by its spread alone ...
    scaled = decoupled_advantages({"correct": correct, "length": 1000 * length}, weights, 4)
    np.testing.assert_allclose(scaled, decoupled_advantages(parts, weights, 4), atol=1e-5)
    # ... which the plain sum does not do: the correct answer ranks below two longer wrong ones there
    total = grpo_advantages(correct + 0.5 * length, 4)
    assert total[0] < total[2] and expected[0] > expected[2]
    assert np.all(np.asarray(decoupled_advantages(parts, weights, 4))[4:] == 0.0)  # no signal: 0



def test_advantage_estimators_against_hand_computed_values():
    r = np.array([1.0, 0.0, 0.0, 1.0, 3.0, 1.0], np.float32)  # two groups of 3
    # group 1: mean 1/3, sample std sqrt(1/3); group 2: mean 5/3, sample std sqrt(4/3)
    np.testing.assert_allclose(drgrpo_advantages(r, 3), [2 / 3, -1 / 3, -1 / 3, -2 / 3, 4 / 3, -2 / 3], rtol=1e-6)
    np.testing.assert_allclose(grpo_advantages(r, 3, eps=0.0),
                               np.array([2, -1, -1, -2, 4, -2]) / 3 / np.repeat([3 ** -0.5, (4 / 3) ** 0.5], 3),
                               rtol=1e-6)
    # leave-one-out: 1 - (0 + 0)/2 = 1, 0 - (1 + 0)/2 = -0.5, ...; equals G/(G-1) x Dr. GRPO's
    np.testing.assert_allclose(rloo_advantages(r, 3), [1.0, -0.5, -0.5, -1.0, 2.0, -1.0], rtol=1e-6)
    np.testing.assert_allclose(rloo_advantages(r, 3), 1.5 * np.asarray(drgrpo_advantages(r, 3)), rtol=1e-6)
    with pytest.raises(ValueError, match="group_size=4"):
        grpo_advantages(r, 4)


def _surrogate_grad(ratio, advantage, eps_low=0.2, eps_high=0.28):
    """d loss / d logp for one token at a given ratio (old_logp = 0, so logp = log ratio)."""
    def loss(logp):
        return clipped_surrogate(logp, jnp.zeros((1, 1)), jnp.array([advantage]), jnp.ones((1, 1)),
                                 eps_low=eps_low, eps_high=eps_high)[0].sum()
    return float(jax.grad(loss)(jnp.full((1, 1), np.log(ratio), jnp.float32))[0, 0])


def test_the_clip_acts_exactly_at_one_plus_or_minus_eps():
    """Inside [1 - eps_low, 1 + eps_high] the gradient is -A * rho; past the bound on the side the advantage
    pushes towards, it is exactly zero; on the other side the unclipped term keeps it (min picks it)."""
    for ratio in (0.81, 1.0, 1.27):
        assert _surrogate_grad(ratio, +1.0) == pytest.approx(-ratio, rel=1e-5)
        assert _surrogate_grad(ratio, -1.0) == pytest.approx(ratio, rel=1e-5)
    assert _surrogate_grad(1.29, +1.0) == 0.0  # above 1 + eps_high: a good token cannot be pushed further
    assert _surrogate_grad(0.79, -1.0) == 0.0  # below 1 - eps_low: a bad token cannot be pushed further down
    assert _surrogate_grad(1.29, -1.0) == pytest.approx(1.29, rel=1e-5)  # a bad token that grew is still pulled
    assert _surrogate_grad(0.79, +1.0) == pytest.approx(-0.79, rel=1e-5)
    logp = jnp.log(jnp.array([[0.79, 0.8, 1.28, 1.29]]))
    _, ratio, clipped = clipped_surrogate(logp, jnp.zeros((1, 4)), jnp.array([[-1.0, -1.0, 1.0, 1.0]]),
                                          jnp.ones((1, 4)), eps_low=0.2, eps_high=0.28)
    assert clipped.tolist() == [[True, False, False, True]]


def test_sequence_level_ratio_is_the_length_normalised_likelihood_ratio():
    logp, old = jnp.array([[-1.0, -2.0, -3.0, 0.0]]), jnp.array([[-1.5, -2.0, -2.0, 5.0]])
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0]])  # the last position is padding and must not count
    _, ratio, _ = clipped_surrogate(logp, old, jnp.array([1.0]), mask, level="sequence")
    np.testing.assert_allclose(ratio, np.full((1, 4), np.exp((0.5 + 0.0 - 1.0) / 3)), rtol=1e-6)


def test_kl_estimators():
    rng = np.random.default_rng(1)
    logp, ref = (jnp.asarray(rng.normal(size=(4, 7)) - 2, jnp.float32) for _ in range(2))
    assert float(jnp.min(kl_k3(logp, ref))) >= 0.0
    assert float(jnp.min(kl_k1(logp, ref))) < 0.0  # k1 is unbiased but single samples go negative
    assert np.all(np.asarray(kl_k3(logp, logp)) == 0.0) and np.all(np.asarray(kl_k1(logp, logp)) == 0.0)
    d = float(ref[0, 0] - logp[0, 0])
    assert float(kl_k3(logp, ref)[0, 0]) == pytest.approx(np.exp(d) - d - 1, rel=1e-5)
    # both estimate KL(p || q) from samples of p: check on a 3-token distribution
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.5, 0.3])
    exact = float(np.sum(p * np.log(p / q)))
    for kl in (kl_k1, kl_k3):
        assert float(np.sum(p * np.asarray(kl(jnp.log(p), jnp.log(q))))) == pytest.approx(exact, rel=1e-5)


def test_each_aggregation_mode_against_a_hand_computed_value():
    per_token = jnp.array([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # row 3: padding
    loss, count = token_mean(per_token, mask)
    assert (float(loss), float(count)) == (2.5, 4.0)  # (1 + 2 + 3 + 4) / 4 tokens
    loss, count = sequence_mean_token_mean(per_token, mask)
    assert (float(loss), float(count)) == (3.0, 2.0)  # (mean(1, 2, 3) + mean(4)) / 2 sequences
    loss, count = sequence_mean_token_sum_norm(per_token, mask, max_tokens=5)
    assert (float(loss), float(count)) == (1.0, 2.0)  # (6 + 4) / (2 sequences x 5)
    assert aggregate(per_token, mask, "token-mean")[0] == 2.5
    with pytest.raises(ValueError, match="needs max_tokens"):
        aggregate(per_token, mask, "sequence-mean-token-sum-norm")


@pytest.mark.parametrize("mode", ["token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum-norm"])
def test_aggregation_counts_make_micro_batch_means_exact(mode):
    """The count-weighted mean of two halves' losses is the whole batch's loss (trainer.py's contract)."""
    rng = np.random.default_rng(2)
    per_token = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    mask = jnp.asarray(np.arange(5)[None] < rng.integers(1, 6, size=(6, 1)), jnp.float32)
    whole, _ = aggregate(per_token, mask, mode, 5)
    parts = [aggregate(per_token[s], mask[s], mode, 5) for s in (slice(0, 2), slice(2, 6))]
    combined = sum(loss * count for loss, count in parts) / sum(count for _, count in parts)
    assert float(combined) == pytest.approx(float(whole), rel=1e-6)


def test_gae_against_a_hand_computed_trajectory():
    """One row: a prompt position, a 3-token completion (reward 1 on its last token), then padding."""
    gamma, lam = 0.9, 0.8
    rewards = np.array([[5.0, 0.0, 0.0, 1.0, 7.0]])  # outside the mask: ignored
    values = np.array([[3.0, 0.5, 0.6, 0.7, 2.0]])
    mask = np.array([[0.0, 1.0, 1.0, 1.0, 0.0]])
    # deltas (V after the last token = 0): d3 = 1 - 0.7 = 0.3; d2 = 0 + 0.9 * 0.7 - 0.6 = 0.03;
    # d1 = 0 + 0.9 * 0.6 - 0.5 = 0.04. A3 = 0.3; A2 = 0.03 + 0.72 * 0.3 = 0.246; A1 = 0.04 + 0.72 * 0.246 = 0.21712
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    np.testing.assert_allclose(advantages, [[0.0, 0.21712, 0.246, 0.3, 0.0]], atol=1e-6)
    np.testing.assert_allclose(returns, [[0.0, 0.71712, 0.846, 1.0, 0.0]], atol=1e-6)
    # lambda = 1: A_t = (discounted return) - V_t;  lambda = 0: A_t = one-step TD error
    a1, _ = gae(rewards, values, mask, 1.0, 1.0)
    np.testing.assert_allclose(a1, [[0.0, 0.5, 0.4, 0.3, 0.0]], atol=1e-6)
    a0, _ = gae(rewards, values, mask, gamma, 0.0)
    np.testing.assert_allclose(a0, [[0.0, 0.04, 0.03, 0.3, 0.0]], atol=1e-6)


def test_whiten_and_value_clip():
    x, mask = jnp.array([[1.0, 2.0, 3.0, 100.0]]), jnp.array([[1.0, 1.0, 1.0, 0.0]])
    w = np.asarray(whiten(x, mask))
    np.testing.assert_allclose(w, [[-1.2247449, 0.0, 1.2247449, 0.0]], rtol=1e-5)
    # the value moved from 0 to 1 toward a return of 2: clipped at 0.2, the clipped error (1.8^2) is larger
    assert float(clipped_value_loss(jnp.array(1.0), jnp.array(0.0), jnp.array(2.0), 0.2)) == pytest.approx(0.5 * 1.8 ** 2)
    # moving away from the return: the unclipped error is the larger one
    assert float(clipped_value_loss(jnp.array(-1.0), jnp.array(0.0), jnp.array(2.0), 0.2)) == pytest.approx(0.5 * 9.0)
