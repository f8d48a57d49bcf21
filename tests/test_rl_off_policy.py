"""Off-policy rollouts: the sampler-trainer mismatch measured against a closed form, the rollout
correction's weights in every mode against hand-computed values (and exactly the uncorrected loss
when sampler and trainer agree), and asynchronous rollouts: the policy-version schedule, staleness 0
equal to the in-turn run bit for bit, staleness k logged as at most k updates old."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite.cli import main
from tunix_lite.data.synthetic import make_splits
from tunix_lite.loading import ASSETS
from tunix_lite.models import Transformer, get_config
from tunix_lite.rl.asynchronous import PolicyVersions, RolloutProducer
from tunix_lite.rl.engine import SamplerEngine
from tunix_lite.rl.grpo import GRPOConfig, grpo_rows, loss_from_config
from tunix_lite.rl.losses import CORRECTIONS, correction_weights, grpo_objective, mismatch_metrics
from tunix_lite.rewards.functions import Rewards
from tunix_lite.rl.rollouts import Prompts, old_log_probs, sample_groups
from tunix_lite.tokenizer import Tokenizer, padding_id

CAP = 1.5


def fixed_log_probs(seed=1, rows=4, tokens=6, spread=0.6):
    """Trainer and sampler log-probs that differ by up to +-spread per token, and a completion mask
    with rows of different lengths (the last row empty: the trainer's padding)."""
    rng = np.random.default_rng(seed)
    train = -rng.uniform(0.1, 3.0, (rows, tokens)).astype(np.float32)
    rollout = (train + rng.uniform(-spread, spread, (rows, tokens))).astype(np.float32)
    mask = (np.arange(tokens)[None, :] < np.array([6, 3, 1, 0][:rows])[:, None])
    return train, rollout, mask.astype(np.float32)


# ----------------------------------------------------------------------------- the mismatch


def mismatch_by_hand(train, rollout, mask, cap):
    """The metrics of `mismatch_metrics` (token-mean), each written out in numpy."""
    delta = (train - rollout)[mask > 0].astype(np.float64)
    rho = np.exp(delta)
    seq_delta = [np.sum((train - rollout)[i][mask[i] > 0]) for i in range(len(mask)) if mask[i].any()]
    seq_tokens = [mask[i].sum() for i in range(len(mask)) if mask[i].any()]
    return {"mismatch/kl_k1": np.mean(-delta), "mismatch/kl_k3": np.mean(rho - 1 - delta),
            "mismatch/chi2_token": np.mean(rho ** 2) - 1,
            "mismatch/outside_cap": np.mean((rho > cap) | (rho < 1 / cap)),
            "mismatch/ppl_ratio": np.mean(np.exp(-np.array(seq_delta) / np.array(seq_tokens))),
            "mismatch/chi2_sequence": np.mean(np.exp(2 * np.array(seq_delta))) - 1}


def test_mismatch_metrics_equal_their_closed_form_and_vanish_when_the_log_probs_agree():
    train, rollout, mask = fixed_log_probs()
    got = mismatch_metrics(train, rollout, mask, cap=CAP, aggregation="token-mean")
    expected = mismatch_by_hand(train, rollout, mask, CAP)
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(float(got[key]), value, rtol=1e-5, atol=1e-6, err_msg=key)
    assert 0 < expected["mismatch/outside_cap"] < 1  # the fixture crosses the cap, both ways
    same = mismatch_metrics(train, train, mask, cap=CAP)
    assert all(float(v) == (1.0 if k == "mismatch/ppl_ratio" else 0.0) for k, v in same.items())


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = Tokenizer.from_file(ASSETS / "tiny" / "tokenizer.model")
    tokenizer.chat_template = "gemma"
    return tokenizer


def micro_policy(tokenizer):
    config = get_config("tiny").replace(num_layers=1, embed_dim=64, num_heads=2, head_dim=16,
                                        mlp_dim=128)
    return Transformer(config, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_step_measures_the_mismatch_of_the_rollouts_dtype(tokenizer, dtype):
    """float32 rollouts: the sampler's log-probs are the trainer's up to rounding (KL < 1e-5, ratio
    1); bfloat16 rollouts: a positive mismatch, which the loss's metrics report as the closed form
    computes it from the stored sampler log-probs and the trainer's recomputed ones."""
    model = micro_policy(tokenizer)
    config = GRPOConfig(model="unused", batch_size=2, group_size=4, max_new_tokens=8,
                        aggregation="token-mean", rollout_correction_cap=CAP, beta=0.0)
    records = list(make_splits(8, 0, 0, seed=1)["train"])
    prompts = Prompts.build(records[:2], tokenizer, max_tokens=96)
    engine = SamplerEngine(model, tokenizer, prompt_len=prompts.length, weights_dtype=dtype)
    row_len = prompts.length + config.max_new_tokens - 1
    groups = sample_groups(engine, prompts, [0, 1], Rewards({"zero": lambda p, c, **k: [0.0] * len(c)}),
                           group_size=4, max_new_tokens=8, row_len=row_len, seed=3)
    rows = grpo_rows(config, model, padding_id(tokenizer), {"zero": 1.0})(groups)
    _, metrics = loss_from_config(config)(model, rows, None)
    trainer_logp, mask = old_log_probs(model, rows), rows["weights"]
    expected = mismatch_by_hand(trainer_logp, rows["rollout_logprobs"], mask, CAP)
    for key, value in expected.items():
        np.testing.assert_allclose(float(metrics[key]), value, rtol=1e-3, atol=1e-5, err_msg=key)
    if dtype == "float32":
        assert abs(float(metrics["mismatch/kl_k1"])) < 1e-5 and float(metrics["mismatch/kl_k3"]) < 1e-5
        np.testing.assert_allclose(float(metrics["mismatch/ppl_ratio"]), 1.0, atol=1e-5)
    else:
        # k3 is >= 0 token by token; chi^2's estimate on a handful of tokens may fall either side
        assert float(metrics["mismatch/kl_k3"]) > 1e-5 and abs(float(metrics["mismatch/chi2_token"])) > 1e-5
        assert abs(float(metrics["mismatch/ppl_ratio"]) - 1.0) > 1e-5


# ----------------------------------------------------------------------------- the correction


def test_correction_weights_equal_their_closed_form_in_every_mode():
    train, rollout, mask = fixed_log_probs()
    rho = np.exp((train - rollout) * mask)
    rho_seq = np.exp(np.sum((train - rollout) * mask, axis=-1, keepdims=True)) * np.ones_like(rho)
    expected = {"none": np.ones_like(rho),
                "token_truncate": np.minimum(rho, CAP),
                "token_mask": np.where(rho <= CAP, rho, 0.0),
                "sequence_truncate": np.minimum(rho_seq, CAP),
                "sequence_mask": np.where(rho_seq <= CAP, rho_seq, 0.0)}
    assert set(expected) == set(CORRECTIONS)
    for mode, weights in expected.items():
        got = np.asarray(correction_weights(train, rollout, mask, mode=mode, cap=CAP))
        np.testing.assert_allclose(got * mask, weights * mask, rtol=1e-6, err_msg=mode)
        if mode.endswith("mask"):  # the fixture has weights on both sides of the cap
            assert 0 < np.sum((got == 0) & (mask > 0)) < mask.sum(), mode


def objective(logp, old, rollout, advantages, mask, **options):
    return grpo_objective(logp, old, None, advantages, mask, epsilon_low=0.2, epsilon_high=0.2,
                          aggregation="token-mean", rollout_logp=rollout, **options)


def test_none_is_todays_loss_and_every_mode_is_it_when_sampler_and_trainer_agree():
    """With the sampler's log-probs equal to the trainer's (one float32 model, nothing stale) every
    weight is exactly 1: every mode gives the uncorrected loss and gradient bit for bit; "none"
    gives them whatever the sampler's log-probs are. With a mismatch, token_truncate's loss is the
    surrogate weighted by min(rho, C), by hand."""
    train, rollout, mask = fixed_log_probs()
    logp = train + 0.05 * np.sin(np.arange(train.size)).reshape(train.shape).astype(np.float32)
    advantages = np.array([1.0, -0.5, 2.0, 0.0], np.float32)

    def loss_and_grad(rollout_logp, **options):
        return jax.value_and_grad(lambda lp: objective(lp, train, rollout_logp, advantages, mask,
                                                       **options)[0])(jnp.asarray(logp))

    today = jax.value_and_grad(lambda lp: grpo_objective(
        lp, train, None, advantages, mask, aggregation="token-mean")[0])(jnp.asarray(logp))
    for mode in CORRECTIONS:
        loss, grad = loss_and_grad(train, rollout_correction=mode, rollout_correction_cap=CAP)
        assert float(loss) == float(today[0]) and np.array_equal(grad, today[1]), mode
    loss, grad = loss_and_grad(rollout, rollout_correction="none")
    assert float(loss) == float(today[0]) and np.array_equal(grad, today[1])

    ratio = np.exp(logp - train)
    surrogate = -np.minimum(ratio * advantages[:, None],
                            np.clip(ratio, 0.8, 1.2) * advantages[:, None])
    weights = np.minimum(np.exp(train - rollout), CAP)
    expected = np.sum(weights * surrogate * mask) / mask.sum()
    loss, _ = loss_and_grad(rollout, rollout_correction="token_truncate", rollout_correction_cap=CAP)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_cli_reports_bad_correction_settings_in_one_line(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    for text, message in [
        ("rollout_correction: clip\n", "rollout_correction: 'clip' is not supported; choose one of 'none'"),
        ("rollout_correction_cap: 1.0\n", "rollout_correction_cap: must be > 1, got 1.0"),
        ("max_staleness: -1\n", "max_staleness: must be >= 0, got -1"),
    ]:
        path.write_text("algorithm: grpo\n" + text)
        assert main(["train", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


# ----------------------------------------------------------------------------- asynchronous rollouts


def test_policy_versions_follow_the_schedule():
    """Rollout k (steps kS+1 ... (k+1)S) is sampled from the weights max(start, kS - M) updates in:
    M = 0 alternates, M = 2 lets the sampler run two updates ahead, and no step's weights trail by
    more than M + S - 1 (S - 1: the inner steps' own lag, which old log-probs correct)."""
    in_turn, ahead = PolicyVersions(2, 0), PolicyVersions(2, 2)
    assert [in_turn.version(k) for k in range(5)] == [0, 2, 4, 6, 8]
    assert [ahead.version(k) for k in range(5)] == [0, 0, 2, 4, 6]
    assert [in_turn.staleness(s) for s in range(1, 7)] == [0, 1, 0, 1, 0, 1]
    assert [ahead.staleness(s) for s in range(1, 7)] == [0, 1, 2, 3, 2, 3]
    assert PolicyVersions(1, 3, start=5).version(6) == 5  # resumed: older weights are gone
    with pytest.raises(ValueError, match="max_staleness: -1 updates"):
        PolicyVersions(1, -1)


def test_the_producer_hands_back_rollouts_in_order_and_raises_its_errors():
    def sample(rollout, job):
        if job == "bad":
            raise RuntimeError("the engine failed")
        return rollout * 10

    for threaded in (False, True):
        producer = RolloutProducer(sample, threaded=threaded)
        producer.submit(0, "ok")
        producer.submit(1, "ok")
        assert [producer.result(0), producer.result(1)] == [0, 10]
        producer.submit(2, "bad")
        with pytest.raises(RuntimeError, match="the engine failed"):
            producer.result(2)
        producer.close()


def parity(prompts, completions, completion_ids, **columns):
    return [float(ids[0] % 2) for ids in completion_ids]


def run_parity(micro_model, **options):
    """A GRPO run of the micro model on the first-token parity reward (what tests/test_rl_grpo.py's
    estimators climb); `options` override the small defaults."""
    from tunix_lite.rl.grpo import run_grpo

    config = dict(model=str(micro_model), n_train=32, n_validation=8, n_accuracy=0, seq_len=120,
                  max_new_tokens=4, batch_size=2, group_size=4, steps=6, warmup_steps=1,
                  learning_rate=3e-2, beta=0.0, eval_every=0, log_every=1) | options
    return run_grpo(GRPOConfig(**config), rewards=Rewards({"parity": parity}), verbose=False)


def run_history(micro_model, **options):
    return run_parity(micro_model, **options).history


def test_asynchronous_rollouts_at_staleness_0_are_the_in_turn_run_and_log_their_lag(micro_model):
    """max_staleness 0 (sampled on the producer's thread) gives the in-turn run's numbers bit for
    bit; max_staleness 2 samples from weights at most 2 updates old (inner_iterations 2: at most
    3 at the second inner step), logs each rollout's policy version, and still trains."""
    options = dict(inner_iterations=2, rollout_correction="token_truncate")
    in_turn = run_history(micro_model, **options)
    at_zero = run_history(micro_model, max_staleness=0, **options)
    keys = ("loss", "reward", "mismatch/kl_k3", "correction/weight", "staleness", "policy_version")
    assert [[h[k] for k in keys] for h in at_zero] == [[h[k] for k in keys] for h in in_turn]
    assert [h["staleness"] for h in in_turn] == [0, 1] * 3
    stale = run_history(micro_model, max_staleness=2, **options)
    assert [h["policy_version"] for h in stale] == [0, 0, 0, 0, 2, 2]
    assert [h["staleness"] for h in stale] == [0, 1, 2, 3, 2, 3]
    assert all(h["staleness"] <= 2 + 1 for h in stale)
    # rollout 1 comes from weights 2 updates before its first step: measurably off-policy
    assert stale[2]["mismatch/kl_k3"] > 1e-6 and in_turn[2]["mismatch/kl_k3"] < 1e-5
    assert all(np.isfinite(h["loss"]) for h in stale)


@pytest.mark.slow
def test_on_a_split_mesh_rollouts_follow_the_staleness_schedule(tmp_path, run_mesh_checks):
    """8 fake devices, training on 0-3 and sampling on 4-7 (tests/mesh_checks.py's check_grpo_async),
    max_staleness 1: rollout k comes from the weights after max(0, k - 1) updates, one WeightSync per
    rollout sends every parameter of exactly those weights (the snapshot, not the live model) to
    devices 4-7, and each step logs its policy version and staleness."""
    r = run_mesh_checks(tmp_path / "results.json", "check_grpo_async")["grpo/async"]
    assert r["policy_version"] == [0, 0, 1, 2] and r["staleness"] == [0, 1, 1, 1], r
    assert len(r["syncs"]) == 4, r["syncs"]
    for sync in r["syncs"]:
        assert sync["error"] == 0 and sync["devices"] == [4, 5, 6, 7] and sync["bytes"] == r["param_bytes"]
    assert r["kl_k3"][0] < 1e-5 < max(r["kl_k3"][1:]) and all(np.isfinite(r["loss"]))


# ----------------------------------------------------------------------------- learning off-policy


def parity_probability(result, records) -> float:
    """The trained policy's own expected parity reward, exactly: P(first completion token odd) at
    temperature 1, averaged over the prompts of `records` (no sampling noise)."""
    ids = Prompts.build(records, result.tokenizer, max_tokens=96).ids
    lengths = np.array([len(row) for row in ids])
    # right-padded: a causal model's prediction after a row's last token ignores the padding
    tokens = np.zeros((len(ids), lengths.max()), np.int32)
    for row, prompt in zip(tokens, ids):
        row[:len(prompt)] = prompt
    return float(odd_mass(result.model, tokens, lengths))


@nnx.jit
def odd_mass(model, tokens, lengths):
    features = model.features(tokens, jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape))
    last = jnp.take_along_axis(features, (lengths - 1)[:, None, None], axis=1)[:, 0]
    return jnp.mean(jnp.sum(jax.nn.softmax(model.logits(last))[:, 1::2], axis=-1))


def test_a_perturbed_sampler_learns_worse_uncorrected_and_like_on_policy_corrected(micro_model):
    """The sampler perturbed: rollouts drawn at temperature 1.5 while the loss scores the policy at
    1 (the sampler's log-probs, log q, are those of the tempered distribution). 14 steps of 8 prompts
    x 8 completions on the first-token parity reward, seeds 0, 2, 3 (their prompts pad to one
    length: the 9 runs make 2 distinct train steps, which XLA's persistent cache compiles once).
    Measured (the policy's exact parity probability at temperature 1 after training, per seed;
    mean mismatch/kl_k3 over the steps):

        on-policy (temperature 1)           0.995 0.994 1.000   kl_k3 0
        temperature 1.5, no correction      0.976 0.942 0.986   kl_k3 0.21-0.28
        temperature 1.5, token_truncate     0.993 0.988 0.985   kl_k3 0.35

    Uncorrected, the update weighs each token by q instead of pi and wastes its push on tokens the
    policy rarely samples: it trails the on-policy run in every seed (misses 3.2% of the mass
    vs 0.4%); weighted by min(pi / q, 2), it lands within 0.015 of on-policy in every seed."""
    held_out = list(make_splits(8, 0, 0, seed=99)["train"])
    arms = {"on_policy": {}, "uncorrected": dict(temperature=1.5),
            "corrected": dict(temperature=1.5, rollout_correction="token_truncate")}
    reward, kl = {arm: [] for arm in arms}, {arm: [] for arm in arms}
    for seed in (0, 2, 3):
        for arm, options in arms.items():
            result = run_parity(micro_model, n_train=64, batch_size=8, group_size=8, steps=14,
                                seed=seed, **options)
            reward[arm].append(parity_probability(result, held_out))
            kl[arm].append(np.mean([h["mismatch/kl_k3"] for h in result.history]))
    on, uncorrected, corrected = (np.array(reward[arm]) for arm in arms)
    assert max(abs(k) for k in kl["on_policy"]) < 1e-5, kl
    assert min(kl["uncorrected"] + kl["corrected"]) > 0.15, kl  # a measurable mismatch
    assert np.all(uncorrected < on) and uncorrected.mean() < on.mean() - 0.015, reward
    assert np.all(corrected > on - 0.02) and corrected.mean() > uncorrected.mean(), reward
