"""GRPO and PPO on the post-training core: rewards checked per function, the rollout stream (dynamic sampling,
mini-batches), ratio and KL invariants on a real model, one compile per run, and the command line end to end."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import yaml
from flax import nnx

from tunix_lite.cli import main
from tunix_lite.data.rollouts import rollout_rows
from tunix_lite.data.synthetic import make_splits, reward_exact_match, reward_format
from tunix_lite.loading import ASSETS
from tunix_lite.models import Transformer, set_training_options
from tunix_lite.rl.engine import SamplerEngine
from tunix_lite.rl.grpo import GRPOConfig, grpo_rows, loss_from_config
from tunix_lite.rl.losses import grpo_loss
from tunix_lite.rl.ppo import last_token_rewards, policy_and_values
from tunix_lite.rl.rewards import RewardError, Rewards, overlong_penalty
from tunix_lite.rl.rollouts import GroupSampler, Prompts, RolloutStream, old_log_probs, sample_groups
from tunix_lite.tokenizer import Tokenizer, padding_id
from tunix_lite.training.inputs import reference_policy
from tunix_lite.training.losses import sequence_log_probs
from tunix_lite.training.trainer import Trainer

from test_model import small_config


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = Tokenizer.from_file(ASSETS / "tiny" / "tokenizer.model")
    tokenizer.chat_template = "gemma"
    return tokenizer


@pytest.fixture(scope="module")
def records():
    return list(make_splits(24, 0, 0, seed=1)["train"])


def small_policy(tokenizer, seed=0):
    return Transformer(small_config(vocab_size=tokenizer.vocab_size, num_layers=2), rngs=nnx.Rngs(seed))


def first_token_parity(prompts, completions, completion_ids, **columns):
    """A reward that varies within most groups of random-model samples (and in some groups does not)."""
    return [float(ids[0] % 2) for ids in completion_ids]


# ----------------------------------------------------------------------------- rewards


def test_rewards_are_weighted_logged_separately_and_get_only_their_columns():
    seen = {}

    def answer_only(prompts, completions, answer):  # no **kwargs: gets only the column it names
        seen["answer"] = answer
        return [1.0] * len(completions)

    rewards = Rewards({"exact_match": reward_exact_match, "format": reward_format, "answer_only": answer_only},
                      weights=[1.0, 0.5, 2.0])
    completions = ["so <answer>4</answer>", "<answer>5</answer> more", "4"]
    total, parts = rewards(["q"] * 3, completions, answer=["4", "4", "4"], domain=["d"] * 3,
                           completion_ids=[[1], [2], [3]])
    np.testing.assert_allclose(parts["exact_match"], [1, 0, 0])
    np.testing.assert_allclose(parts["format"], [1, 0, 0])
    np.testing.assert_allclose(total, [1 + 0.5 + 2, 2, 2])
    assert seen == {"answer": ["4", "4", "4"]}


@pytest.mark.parametrize("bad, message", [
    (lambda p, c, **k: [1.0] * (len(c) - 1), "reward function 'bad' returned 2 values in shape \\(2,\\) for 3 completions"),
    (lambda p, c, **k: 1 / 0, "reward function 'bad' raised ZeroDivisionError: division by zero"),
    (lambda p, c, **k: [1.0, float("nan"), 0.0], "reward function 'bad' returned nan for completion 1"),
    (lambda p, c, **k: [1.0, None, 0.0], "reward function 'bad' returned nan for completion 1"),
    (lambda p, c, **k: ["a", "b", "c"], "reward function 'bad' returned 'a' \\(str\\), not a number"),
    (lambda p, c, **k: [1.0, "1.0", 0.0],  # not read as a number
     "reward function 'bad' returned '1.0' \\(str\\), not a number, for completion 1"),
])
def test_a_misbehaving_reward_is_named(bad, message):
    rewards = Rewards({"format": reward_format, "bad": bad})
    with pytest.raises(RewardError, match=message):
        rewards(["q"] * 3, ["a", "b", "c"], completion_ids=[[1]] * 3)


def test_overlong_penalty_counts_tokens():
    penalty = overlong_penalty(max_tokens=10, buffer=4)
    ids = [[0] * n for n in (3, 6, 7, 9, 10, 11)]
    np.testing.assert_allclose(penalty(None, ["x"] * 6, completion_ids=ids), [0, 0, -0.25, -0.75, -1.0, -1.0])


# ----------------------------------------------------------------------------- invariants on a real model


def test_ratio_is_one_at_the_first_inner_iteration_and_kl_is_zero_against_itself(tokenizer, records):
    policy = small_policy(tokenizer)
    prompts = Prompts.build(records[:4], tokenizer, max_tokens=96)
    engine = SamplerEngine(policy, tokenizer, prompt_len=prompts.length)
    groups = sample_groups(engine, prompts, range(4), Rewards({"parity": first_token_parity}), group_size=3,
                           max_new_tokens=8, row_len=prompts.length + 7, seed=0)
    rows = groups.rows(padding_id(tokenizer)) | {"advantages": groups.rewards - 0.5}
    reference = reference_policy(policy)
    options = dict(beta=0.1, kl_estimator="k3")
    _, metrics = grpo_loss(policy, rows, reference, **options)  # mu = 1: old = stop_gradient(current)
    assert float(metrics["ratio"]) == 1.0 and float(metrics["kl"]) == 0.0
    _, metrics = grpo_loss(policy, rows | {"old_logprobs": old_log_probs(policy, rows)}, reference,
                           **options | {"kl_estimator": "k1"})
    assert abs(float(metrics["ratio"]) - 1.0) < 1e-6 and float(metrics["kl"]) == 0.0
    # the sampler's own log-probs are the old policy's too (same weights, cache vs recompute)
    w = rows["weights"] > 0
    np.testing.assert_allclose(old_log_probs(policy, rows)[w], groups.output.logprobs[groups.output.mask > 0],
                               atol=1e-4)


@pytest.mark.parametrize("aggregation, logits_chunk", [("token-mean", None),
                                                       ("sequence-mean-token-mean", 16),
                                                       ("sequence-mean-token-sum-norm", None)])
def test_scoring_only_the_completions_changes_neither_loss_nor_gradient(tokenizer, records,
                                                                        aggregation, logits_chunk):
    """completion_tokens gathers each row's completion before the lm head: rows of prompts of
    different lengths, a ratio away from 1 (clipped in places) and a KL term give the same loss,
    metrics and gradient as scoring every position."""
    policy = small_policy(tokenizer)
    set_training_options(policy, logits_chunk=logits_chunk)
    prompts = Prompts.build(records[:4], tokenizer, max_tokens=96)
    engine = SamplerEngine(policy, tokenizer, prompt_len=prompts.length)
    groups = sample_groups(engine, prompts, range(4), Rewards({"parity": first_token_parity}),
                           group_size=3, max_new_tokens=8, row_len=prompts.length + 7, seed=0)
    assert len(set(groups.output.prompt_lengths.tolist())) > 1
    rows = groups.rows(padding_id(tokenizer)) | {"advantages": groups.rewards - 0.5}
    noise = np.random.default_rng(0).normal(0, 0.3, rows["weights"].shape).astype(np.float32)
    rows["old_logprobs"] = old_log_probs(policy, rows) + noise
    options = dict(beta=0.1, aggregation=aggregation, max_tokens=8)
    reference = reference_policy(policy)

    def loss_and_grad(completion_tokens):
        def loss(p):
            return grpo_loss(p, rows, reference, completion_tokens=completion_tokens, **options)
        return nnx.jit(nnx.value_and_grad(loss, has_aux=True))(policy)  # one compile, not op by op

    (loss_all, metrics_all), grad_all = loss_and_grad(None)
    (loss_span, metrics_span), grad_span = loss_and_grad(8)
    assert 0 < float(metrics_all["clipped"]) < 1
    np.testing.assert_allclose(loss_span, loss_all, rtol=1e-5, atol=1e-7)
    for key in metrics_all:
        np.testing.assert_allclose(metrics_span[key], metrics_all[key], rtol=1e-5, atol=1e-7)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7),
                 nnx.state(grad_span), nnx.state(grad_all))


def test_ppo_reads_log_probs_and_values_from_one_trunk_and_trains_only_the_head_on_values(tokenizer, records):
    from tunix_lite.models.heads import ScalarHead

    policy = small_policy(tokenizer)
    critic = ScalarHead(policy, rngs=nnx.Rngs(0))
    critic.head.kernel[...] = jax.random.normal(jax.random.key(0), critic.head.kernel.shape)
    prompts = Prompts.build(records[:2], tokenizer, max_tokens=96)
    groups = sample_groups(SamplerEngine(policy, tokenizer, prompt_len=prompts.length), prompts, range(2),
                           Rewards({"parity": first_token_parity}), group_size=2, max_new_tokens=6,
                           row_len=prompts.length + 5)
    rows = groups.rows(padding_id(tokenizer))
    logp, values = policy_and_values(critic, rows)
    np.testing.assert_allclose(logp, nnx.jit(sequence_log_probs)(policy, rows), atol=1e-6)
    np.testing.assert_allclose(values, critic(rows["inputs"], rows["positions"], segment_ids=rows["segment_ids"]),
                               atol=1e-6)
    # the values train the head alone: through the shared trunk the value loss wrecked a LoRA policy (ppo.py)
    grads = nnx.jit(nnx.grad(lambda c: policy_and_values(c, rows)[1].sum()))(critic)
    assert float(jnp.abs(grads["head"]["kernel"][...]).sum()) > 0
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads["backbone"])) == 0.0
    token_rewards = last_token_rewards(np.array([1.0, 2.0, 3.0, 4.0], np.float32), rows["weights"])
    assert token_rewards.sum(axis=1).tolist() == [1.0, 2.0, 3.0, 4.0]
    last = [int(np.flatnonzero(w)[-1]) for w in rows["weights"]]
    assert [int(np.flatnonzero(r)[0]) for r in token_rewards] == last


# ----------------------------------------------------------------------------- the stream and compiling once


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic_sampling"])
def test_rollouts_and_steps_compile_once_across_prompt_lengths(tokenizer, records, caplog, dynamic):
    """Three rollouts of prompts of different lengths, two inner iterations x two mini-batches each: one compiled
    rollout program, one compiled train step; every step trains on B x G / 2 rows."""
    config = GRPOConfig(model="unused", batch_size=4, group_size=3 if dynamic else 4, max_new_tokens=8,
                        seq_len=104, inner_iterations=2, mini_batches=2, beta=0.04, warmup_steps=0, steps=12,
                        dynamic_sampling=dynamic, max_refills=2,  # G differs: each variant compiles its own
                        reward_aggregation="normalize_each" if dynamic else "sum")
    policy = small_policy(tokenizer)
    prompts = Prompts.from_config(config, records, tokenizer)
    assert len({len(ids) for ids in prompts.ids}) > 3  # the prompts really differ in length
    # dynamic sampling also samples from a bfloat16 copy, remade after every update without recompiling
    engine = SamplerEngine(policy, tokenizer, prompt_len=prompts.length, weights_dtype="bfloat16" if dynamic else None)
    sampler = GroupSampler(config, policy, engine, prompts, Rewards({"parity": first_token_parity}))
    stream = RolloutStream(config, sampler, grpo_rows(config, policy, padding_id(tokenizer), {"parity": 1.0}),
                           dynamic_sampling=dynamic, max_refills=config.max_refills)
    trainer = Trainer(policy, optax.adam(1e-3), loss_from_config(config),
                      frozen=reference_policy(policy))
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        history = trainer.fit(stream.batches(0), 12, log_every=4, host_metrics=stream.metrics,
                              show=("reward", "kl"))
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert sum("jit(_generate)" in m for m in compiled) == 1, compiled
    assert sum("jit(train_step)" in m for m in compiled) == 1, compiled
    assert len(history) == 12 and all("reward" in h and "kl" in h and h["entropy"] > 0 for h in history)
    assert history[0]["count"] <= 8 and history[4]["reward"] == history[7]["reward"]  # steps 5-8: one rollout
    assert history[3]["reward"] != history[4]["reward"] or history[3]["length"] != history[4]["length"]
    if dynamic:
        assert all(h["kept_groups"] > 0 for h in history) and any(h["zero_signal_groups"] > 0 for h in history)
        assert engine.sampler.casts == 3  # one per rollout: refills between two updates reuse the copy


def test_dynamic_sampling_keeps_only_informative_groups(tokenizer, records):
    config = GRPOConfig(model="unused", batch_size=4, group_size=3, max_new_tokens=6, seq_len=104,
                        dynamic_sampling=True, max_refills=3)
    policy = small_policy(tokenizer, seed=3)
    prompts = Prompts.build(records, tokenizer, max_tokens=99)
    sampler = GroupSampler(config, policy, SamplerEngine(policy, tokenizer, prompt_len=prompts.length), prompts,
                           Rewards({"parity": first_token_parity}))
    stream = RolloutStream(config, sampler, None, dynamic_sampling=True, max_refills=3)
    groups, stats = stream.rollout(0, range(4))
    assert len(groups) <= 4 and np.all(groups.informative())
    assert stats["rollouts"] >= 1 and stats["kept_groups"] == len(groups) / 4


def test_a_run_mostly_without_signal_ends_with_a_note_unless_dynamic_sampling_filtered_it():
    """Groups with all-equal rewards add nothing to the gradient, but an Adam step is as long
    whatever share of the batch made it: a run where they were most groups says so at its end."""
    history = [{"step": 1, "zero_signal_groups": 0.75}, {"step": 2, "zero_signal_groups": 0.5}]
    note = RolloutStream(None, None, None).low_signal_note(history)
    assert note.startswith("62% of groups had all-equal rewards") and "dynamic_sampling: true" in note
    everything = [{"zero_signal_groups": 1.0}] * 2
    assert RolloutStream(None, None, None).low_signal_note(everything).startswith("no group had")
    assert RolloutStream(None, None, None).low_signal_note([{"zero_signal_groups": 0.25}]) is None
    assert RolloutStream(None, None, None, dynamic_sampling=True).low_signal_note(history) is None


def test_each_step_says_how_many_updates_its_rollout_lags_behind():
    """Rollout k is sampled from the live model just before step k*S + 1, so its i-th step trains
    on samples i updates old (S = inner_iterations x mini_batches = 4 here): the seam an
    asynchronous sampler widens by the updates it runs ahead (rollout_lag)."""
    config = GRPOConfig(model="unused", batch_size=4, group_size=4, inner_iterations=2, mini_batches=2,
                        warmup_steps=0, steps=12)
    stream = RolloutStream(config, None, None)
    assert [stream.lag(step) for step in range(1, 10)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert RolloutStream(config, None, None, rollout_lag=4).lag(5) == 4
    with pytest.raises(ValueError, match="rollout_lag: -1 updates"):
        RolloutStream(config, None, None, rollout_lag=-1)


def test_a_mix_of_tasks_logs_each_tasks_reward():
    """On reasoning_gym:a,b one task can fall while the mean holds: each gets its own curve."""
    from tunix_lite.rl.rollouts import Groups
    from tunix_lite.sampler import GenerateOutput

    rows = 4
    output = GenerateOutput(texts=["x"] * rows, tokens=np.ones((rows, 2), int), logprobs=-np.ones((rows, 2)),
                            lengths=np.full(rows, 2), prompt_tokens=np.ones((rows, 3), int),
                            prompt_lengths=np.full(rows, 3))
    rewards = np.array([1.0, 0.0, 0.0, 0.0])

    def stats(domains):
        return Groups(output, [{"domain": d} for d in domains], rewards, {"r": rewards}, group_size=2,
                      row_len=8, max_new_tokens=2).stats()

    mixed = stats(["gcd", "gcd", "letter_counting", "letter_counting"])
    assert mixed["reward"] == 0.25 and mixed["reward@gcd"] == 0.5 and mixed["reward@letter_counting"] == 0.0
    assert not any(k.startswith("reward@") for k in stats(["gcd"] * rows))  # one task: the mean says it all


def rolled_parity(prompts, completions, completion_ids, **columns):
    """first_token_parity scored on the next row's completion: rewards misaligned with their rows."""
    return first_token_parity(prompts, completions, completion_ids[1:] + completion_ids[:1])


@pytest.mark.parametrize("advantage", ["grpo", "drgrpo", "rloo"])
def test_each_estimator_climbs_the_reward_it_is_given(advantage, micro_model):
    """On-policy reward of a random model rises from chance to ~1 on fresh prompts each step; the
    same run with each reward given to the wrong row does not (a control: the test sees a
    misalignment between rewards and completions, which loss parity alone would miss)."""
    from tunix_lite.rl.grpo import run_grpo

    config = GRPOConfig(model=str(micro_model), n_train=64, n_validation=8, n_accuracy=0, seq_len=120,
                        max_new_tokens=4, batch_size=4, group_size=8, steps=16, warmup_steps=1,
                        learning_rate=3e-2, beta=0.0, eval_every=0, log_every=1, advantage=advantage)

    def curve(reward):
        history = run_grpo(config, rewards=Rewards({"parity": reward}), verbose=False).history
        return np.array([h["reward"] for h in history])

    climbed = curve(first_token_parity)
    assert climbed[:2].mean() < 0.6 and climbed[-4:].mean() >= 0.95, climbed
    if advantage == "grpo":
        assert curve(rolled_parity)[-4:].mean() < 0.7


# ----------------------------------------------------------------------------- the command line


def test_cli_reports_bad_rl_configs_in_one_line(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    for text, message in [
        ("algorithm: grpo\ngroup_size: 1\n", "group_size: GRPO compares the completions of a prompt"),
        ("algorithm: grpo\nrewards: [exact_match, style]\n", "rewards: unknown reward 'style'; choose from"),
        ("algorithm: grpo\nreward_weights: [1.0]\n", "reward_weights: 1 weights for 2 rewards"),
        ("algorithm: grpo\ninner_iterations: 2\ncheckpoint_every: 3\n", "checkpoint_every: 3 is not a multiple"),
        ("algorithm: ppo\nlam: 1.5\n", "lam: must be <= 1, got 1.5"),
        ("algorithm: grpo\naggregation: sum\n", "aggregation: 'sum' is not supported; choose one of 'token-mean'"),
        ("algorithm: grpo\nreward_aggregation: mean\n", "reward_aggregation: 'mean' is not supported; "
                                                         "choose one of 'sum', 'normalize_each'"),
        ("algorithm: ppo\nrollout_dtype: float16\n", "rollout_dtype: 'float16' is not supported; choose one of "
                                                      "'float32', 'bfloat16'"),
    ]:
        path.write_text(text)
        assert main(["train", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("algorithm", ["ppo", "agent"])
def test_every_rl_driver_splits_devices_for_a_rollout_mesh(tmp_path, capsys, algorithm):
    """PPO and the agent take `rollout_mesh:` as GRPO does (rl_setup's split_devices), checked before
    any model loads."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"algorithm": algorithm, "model": str(tmp_path / "no_model_here"),
                                    "rollout_mesh": {"fsdp": 2}}))
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "rollout_mesh: {'fsdp': 2} needs 2 device(s) and the trainer at least 1 more" in err, err
    assert len(err.splitlines()) == 1, err


RUN = dict(model="tiny", n_train=32, n_validation=8, n_accuracy=8, seq_len=120, max_new_tokens=24, batch_size=2,
           group_size=4, steps=4, warmup_steps=1, learning_rate=1e-5, beta=0.04, inner_iterations=2,
           checkpoint_every=2, log_every=2, eval_every=0)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_cli_rl_writes_curves_and_resumes(tmp_path, capsys, algorithm, micro_model):
    out = tmp_path / "run"
    path = tmp_path / "rl.yaml"
    dtype = "bfloat16" if algorithm == "ppo" else "float32"  # the rollout_dtype key, end to end
    path.write_text(yaml.safe_dump(RUN | {"algorithm": algorithm, "model": str(micro_model), "output_dir": str(out),
                                         "rollout_dtype": dtype}))
    assert main(["train", "--config", str(path), "--steps", "2"]) == 0
    lines = [yaml.safe_load(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert all(k in lines[0] for k in ("reward", "reward/exact_match", "reward/format", "kl", "length", "loss"))
    assert (out / "curves.png").is_file() and (out / "model").is_dir() and (out / "scores.json").is_file()
    capsys.readouterr()
    assert main(["train", "--config", str(path)]) == 0  # 4 steps: resumes after the first rollout's two
    assert f"resumed {out} at step 2" in capsys.readouterr().out
    assert [yaml.safe_load(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]


def test_max_total_tokens_fits_every_row_to_one_length(tokenizer, records):
    """Long prompts get fewer new tokens, short ones the whole budget: prompt + completion never exceeds the row."""
    policy = small_policy(tokenizer, seed=5)
    prompts = Prompts.build(records, tokenizer, max_tokens=96)
    engine = SamplerEngine(policy, tokenizer, prompt_len=prompts.length)
    index = np.argsort([len(ids) for ids in prompts.ids])[[0, -1]]  # the shortest and the longest prompt
    limit = len(prompts.ids[index[1]]) + 4  # the longest prompt gets at most 4 new tokens
    out = engine.generate([prompts.ids[i] for i in index], max_new_tokens=12, num_samples=2, temperature=1.0,
                          top_k=None, top_p=None, seed=0, max_total_tokens=limit)
    assert np.all(out.prompt_lengths + out.lengths <= limit) and np.all(out.lengths[2:] <= 4)
    stopped = [out.tokens[r, out.lengths[r] - 1] in engine.sampler.stop_ids for r in (0, 1)]
    assert all(n == 12 or s for n, s in zip(out.lengths[:2], stopped))  # the short prompt: the whole budget
    rows = rollout_rows(out, limit - 1, padding_id(tokenizer))
    assert rows["weights"].sum() == out.lengths.sum()


# A policy that has learned to attack its code verifier: each completion stands for one of these
# programs (cycled), graded against TESTS. Only the honest one may score.
TESTS = "assert add(2, 2) == 4\nassert add(1, 5) == 6"
ATTACKS = [
    "class Anything:\n    def __eq__(self, other): return True\ndef add(a, b): return Anything()",
    "import os\nos._exit(0)",  # ends its sandbox before any result: silent
    "while True:\n    pass",
    "import builtins\nbuiltins.compile = lambda *a, **k: None\ndef add(a, b): return a + b + 1",
    "def add(a, b):\n    return a + b",
]


def test_an_rl_run_whose_verifier_is_attacked_trains_on_and_counts_the_attacks(tmp_path, micro_model):
    from tunix_lite.rl.grpo import run_grpo
    from tunix_lite.verifiers import VerifierPool, check_code

    with VerifierPool(workers=2, timeout=1.0) as pool:
        def attacked_code(prompts, completions, **columns):
            programs = [ATTACKS[i % len(ATTACKS)] for i in range(len(completions))]
            return pool.map(check_code, [(program, TESTS) for program in programs])

        config = GRPOConfig(**RUN | {"model": str(micro_model), "steps": 2, "inner_iterations": 1,
                                     "log_every": 1, "n_accuracy": 0, "max_new_tokens": 8,
                                     "output_dir": str(tmp_path / "run")})
        history = run_grpo(config, rewards=Rewards({"code": attacked_code}), verbose=False).history
    assert [h["step"] for h in history] == [1, 2] and all(np.isfinite(h["loss"]) for h in history)
    assert [h["reward"] for h in history] == [1 / 8, 1 / 8]  # the honest program, once in 8

    def total(event):
        return sum(h[f"verifier/{event}"] for h in history)

    assert total("calls") == 16  # 2 steps x 2 prompts x 4 completions, each attack twice
    assert [total(e) for e in ("non_plain_values", "silent", "timeouts")] == [8, 4, 4]  # 2 probes
