"""The Bradley-Terry reward model: its loss on fixed scores, padded pairs, learning a preference on held-out pairs,
and the TRL-style reward function the RL trainer calls (one float per completion, order kept, any batch size)."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lite.data.sft import SFTData, TruncationReport
from tunix_lite.loading import ASSETS
from tunix_lite.models import Transformer
from tunix_lite.preference.data import PreferenceBatches, PreferenceData
from tunix_lite.preference.reward_model import (BradleyTerryLoss, RewardFunction, RewardModelConfig,
                                                bradley_terry_loss, last_token_scores, pair_scores, reward_head)
from tunix_lite.tokenizer import load_tokenizer
from tunix_lite.training.trainer import Trainer, evaluate, pad_batch

from test_model import small_config

T = 16


def marked_pairs(n: int, seed: int) -> PreferenceData:
    """Pairs whose chosen completion contains the token 7 and whose rejected one does not (never as the last token,
    which is only a target: the score reads the inputs)."""
    rng = np.random.default_rng(seed)
    ids, masks = [], []
    for _ in range(n):
        prompt = rng.integers(8, 97, rng.integers(2, 6))
        chosen = rng.integers(8, 97, rng.integers(2, 8))
        chosen[rng.integers(len(chosen) - 1)] = 7
        for completion in (chosen, rng.integers(8, 97, rng.integers(2, 8))):
            ids.append(np.concatenate([prompt, completion]).astype(np.int32))
            masks.append(np.concatenate([np.zeros(len(prompt)), np.ones(len(completion))]).astype(np.float32))
    return PreferenceData(SFTData(ids, masks, T, 0, TruncationReport("error", T + 1, rows=n)))


def head_model(seed=0, **config):
    return reward_head(Transformer(small_config(**({"num_layers": 1} | config)), rngs=nnx.Rngs(seed)), seed)


def test_loss_is_minus_log_sigmoid_of_the_margin_over_real_pairs():
    model, _ = head_model()
    model.head.kernel[...] = jax.random.normal(jax.random.key(0), model.head.kernel.shape)  # not the zero init
    batch = PreferenceBatches(marked_pairs(5, 0), 5, shuffle=False).epoch(0)[0]
    flat = {k: batch[k].reshape(10, T) for k in ("inputs", "positions", "segment_ids")}
    scores = nnx.jit(last_token_scores)(model, flat["inputs"], flat["positions"], flat["segment_ids"])
    margin = np.asarray(scores).reshape(5, 2) @ np.array([1.0, -1.0])
    loss_fn = nnx.jit(bradley_terry_loss)
    loss, metrics = loss_fn(model, batch)
    assert float(loss) == pytest.approx(np.mean(np.log1p(np.exp(-margin))), rel=1e-5)
    assert metrics["accuracy"] == pytest.approx(np.mean(margin > 0)) and metrics["count"] == 5
    padded = {k: np.concatenate([v, np.zeros((3, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
    loss_padded, metrics_padded = loss_fn(model, padded)
    assert float(loss_padded) == pytest.approx(float(loss), rel=1e-6) and metrics_padded["count"] == 5


def test_a_shared_prompt_scores_and_trains_as_the_separate_rows():
    """Each pair's prompt run once (the rejected completion appended as its own segment) gives the separate rows'
    scores, loss and gradient, on layers that attend within a sliding window of 4 or globally; a padded pair adds
    nothing."""
    data = marked_pairs(5, 3)
    assert data.prompts_shared
    batch = pad_batch(PreferenceBatches(data, 5, shuffle=False).epoch(0)[0], 6)
    model, _ = head_model(3, num_layers=6)  # 5 local layers (window 4), 1 global
    model.head.kernel[...] = jax.random.normal(jax.random.key(3), model.head.kernel.shape)
    window = data.longest_completion
    separate, shared = (nnx.jit(pair_scores, static_argnums=2)(model, batch, w) for w in (None, window))
    # atol: scores reach ~10, where float32 rounding alone is ~1e-6 (a near-zero score saw 2e-6 apart)
    np.testing.assert_allclose(np.asarray(shared)[:5], np.asarray(separate)[:5], rtol=1e-5, atol=1e-5)

    def loss_and_grad(shared_window):
        def loss(m):
            return BradleyTerryLoss(shared_window)(m, batch)[0]

        value, grads = nnx.jit(nnx.value_and_grad(loss))(model)
        return value, jax.tree.leaves(grads)

    (loss_a, grads_a), (loss_b, grads_b) = loss_and_grad(None), loss_and_grad(window)
    assert float(loss_b) == pytest.approx(float(loss_a), rel=1e-5)
    for a, b in zip(grads_a, grads_b):
        np.testing.assert_allclose(b, a, atol=1e-5 * float(np.abs(a).max()) + 1e-9)


def test_reward_model_learns_a_preference_on_held_out_pairs():
    model, wrt = head_model(1)
    held_out = PreferenceBatches(marked_pairs(32, 99), 16, shuffle=False).epoch(0)
    before = evaluate(model, bradley_terry_loss, held_out)
    assert before["accuracy"] == 0 and before["loss"] == pytest.approx(np.log(2))  # zero-init head: all ties
    trainer = Trainer(model, optax.adam(3e-3), bradley_terry_loss, wrt=wrt)
    trainer.fit(PreferenceBatches(marked_pairs(256, 1), 16, seed=0).stream(), 40, log_every=40)
    after = evaluate(model, bradley_terry_loss, held_out)
    assert after["accuracy"] >= 0.9 and after["margin"] > 1, after


def test_reward_function_scores_each_completion_in_order():
    tokenizer = load_tokenizer(ASSETS / "tiny")
    model, _ = head_model(2, vocab_size=tokenizer.vocab_size, max_seq_len=64)
    model.head.kernel[...] = jax.random.normal(jax.random.key(1), model.head.kernel.shape)
    reward = RewardFunction(model, tokenizer, seq_len=48, batch_size=4)
    prompts = [f"What is {a} + {b}?" for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (9, 1), (2, 2)]]
    completions = [f"<answer>{n}</answer>" for n in (3, 7, 11, 15, 10, 5)]
    scores = reward(prompts, completions, answer=["3", "7", "11", "15", "10", "4"])  # extra columns are ignored
    assert len(scores) == 6 and all(isinstance(s, float) for s in scores)
    one_by_one = [reward([p], [c])[0] for p, c in zip(prompts[::-1], completions[::-1])][::-1]
    np.testing.assert_allclose(scores, one_by_one, rtol=1e-5)
    assert len(set(np.round(scores, 5))) > 1  # the score depends on the text


def test_reward_model_config_has_the_pair_options():
    config = RewardModelConfig.from_dict({"algorithm": "reward_model", "truncation_mode": "keep_end"})
    assert config.truncation_mode == "keep_end" and RewardModelConfig.own_fields() == ["truncation_mode"]


# ----------------------------------------------------------------------------- saved reward models as RL rewards


def tagged_pairs(numbers) -> list[dict]:
    """Chosen: the answer in tags; rejected: the same answer untagged."""
    return [{"prompt": f"What is {a} + {b}?", "chosen": f"<answer>{a + b}</answer>", "rejected": f"{a + b}"}
            for a, b in numbers]


@pytest.fixture(scope="module")
def saved_reward_model(tmp_path_factory):
    """A small reward model trained on tagged_pairs, saved as run_reward_model saves it."""
    from tunix_lite.preference.data import tokenize_pairs
    from tunix_lite.preference.reward_model import save_reward_model

    tokenizer = load_tokenizer(ASSETS / "tiny")
    model, wrt = head_model(3, vocab_size=tokenizer.vocab_size, max_seq_len=128)
    rng = np.random.default_rng(0)
    data = tokenize_pairs(tagged_pairs(rng.integers(0, 50, (64, 2))), tokenizer, seq_len=32)
    trainer = Trainer(model, optax.adam(3e-3), bradley_terry_loss, wrt=wrt)
    trainer.fit(PreferenceBatches(data, 8, seed=0).stream(), 30, log_every=30)
    return save_reward_model(model, tokenizer, tmp_path_factory.mktemp("rm") / "reward_model", seq_len=32)


def test_a_saved_reward_model_ranks_held_out_pairs_through_the_reward_function(saved_reward_model):
    from tunix_lite.preference.reward_model import reward_model_reward

    reward = reward_model_reward(saved_reward_model, batch_size=4)
    assert reward.model is None  # checked, not loaded: a config naming it validates for free
    pairs = tagged_pairs([(60 + i, 7 * i) for i in range(6)])  # sums no training pair has
    prompts = [p["prompt"] for p in pairs]
    chosen, rejected = reward(prompts, [p["chosen"] for p in pairs]), reward(prompts, [p["rejected"] for p in pairs])
    assert reward.seq_len == 32 and all(c > r for c, r in zip(chosen, rejected)), (chosen, rejected)


@pytest.mark.slow
def test_grpo_config_rewards_with_a_saved_reward_model(saved_reward_model, tmp_path, capsys):
    from tunix_lite.cli import main
    from tunix_lite.rl.grpo import GRPOConfig, run_grpo

    name = f"reward_model:{saved_reward_model}"
    config = GRPOConfig(model=str(saved_reward_model), rewards=["format", name], n_train=8, n_validation=2,
                        n_accuracy=0, seq_len=96, max_new_tokens=8, batch_size=2, group_size=2, steps=1,
                        warmup_steps=0, beta=0.0, eval_every=0, log_every=1)  # the policy: the RM's own backbone
    history = run_grpo(config, verbose=False).history
    assert np.isfinite(history[-1]["loss"]) and f"reward/{name}" in history[-1]

    capsys.readouterr()
    path = tmp_path / "grpo.yaml"  # a directory without a reward model: one line, before any compute
    path.write_text(f"algorithm: grpo\nrewards: [exact_match, 'reward_model:{tmp_path}']\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"rewards: 'reward_model:{tmp_path}': {tmp_path} holds no reward model" in err and "\n" not in err, err


@pytest.mark.slow
def test_cli_reward_model_trains_and_exports_a_reward(tmp_path, micro_model):
    """`tunix-lite train` with algorithm: reward_model (each pair's prompt run once) logs the pair metrics, and its
    export is a reward function the RL configs can name."""
    import json

    import yaml

    from tunix_lite.cli import main
    from tunix_lite.preference.reward_model import REWARD_MODEL_DIR, reward_model_reward

    out = tmp_path / "run"
    path = tmp_path / "rm.yaml"
    path.write_text(yaml.safe_dump(dict(algorithm="reward_model", model=str(micro_model), n_train=16, n_validation=8,
                                        seq_len=128, batch_size=4, steps=3, warmup_steps=0, eval_every=3,
                                        log_every=1, output_dir=str(out))))
    assert main(["train", "--config", str(path)]) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) >= 3 and {"loss", "accuracy", "margin", "rewards/chosen"} <= set(lines[0])
    assert all(np.isfinite(line["loss"]) for line in lines)
    reward = reward_model_reward(out / REWARD_MODEL_DIR, batch_size=2)
    scores = reward(["Which is larger, 3 or 5?"] * 2, ["<answer>5</answer>", "<answer>3</answer>"])
    assert len(scores) == 2 and all(np.isfinite(scores))
