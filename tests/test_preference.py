"""Preference tuning on the trainer core: exact accumulation over pairs (k micro-batches == one batch, padded pairs
add nothing), one compilation per run, the reference both ways (precomputed == online; LoRA's reference is the base
view), and run_dpo through `tunix-lite train` with its outputs, config errors and bad rows named.

The invariants train `MiniLM` (embed -> tanh -> linear: every position depends on its own token only), which
compiles in about a second; they hold for any model `sequence_log_probs` can score.
"""

import json
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import yaml
from flax import nnx
from test_model import small_config

from tunix_lite.cli import main
from tunix_lite.data.sft import SFTData, TruncationReport
from tunix_lite.lora import apply_lora, without_adapters
from tunix_lite.preference.data import PreferenceBatches, PreferenceData
from tunix_lite.models import Transformer
from tunix_lite.preference.dpo import DPOConfig, PreferenceLoss
from tunix_lite.preference.scoring import completion_sums, reference_log_probs, scoring
from tunix_lite.training.inputs import reference_policy
from tunix_lite.training.trainer import Trainer, evaluate, pad_batch

T, VOCAB = 16, 97


class MiniLM(nnx.Module):
    def __init__(self, seed: int):
        rngs = nnx.Rngs(seed)
        self.embed = nnx.Embed(VOCAB, 16, rngs=rngs)
        self.out = nnx.Linear(16, VOCAB, use_bias=False, rngs=rngs)

    def features(self, tokens, positions=None, *, segment_ids=None):
        return jnp.tanh(self.embed(tokens))

    def logits(self, features):
        return self.out(features)


def random_pairs(n: int, seed: int = 0, labels: bool = False) -> PreferenceData:
    """n pairs of random ids: a shared prompt of 3-6 tokens, completions of 1-8 tokens (lengths differ a lot, so
    micro-batches hold very different token counts)."""
    rng = np.random.default_rng(seed)
    ids, masks = [], []
    for _ in range(n):
        prompt = rng.integers(3, VOCAB, rng.integers(3, 7))
        for _ in range(2):
            completion = rng.integers(3, VOCAB, rng.integers(1, 9))
            ids.append(np.concatenate([prompt, completion]).astype(np.int32))
            masks.append(np.concatenate([np.zeros(len(prompt)), np.ones(len(completion))]).astype(np.float32))
    report = TruncationReport("error", T + 1, rows=n)
    return PreferenceData(SFTData(ids, masks, T, 0, report), rng.integers(0, 2, n).astype(np.float32) if labels else None)


def model_pair(seed=0):
    """(policy, reference): two different random models, so the log-ratios are not zero."""
    return MiniLM(seed), MiniLM(seed + 1)


def sgd_update(loss_fn, batch, micro_batches=1, frozen=None, seed=0):
    """-gradient of one batch: the parameter change of one SGD step with learning rate 1."""
    model, _ = model_pair(seed)
    before = jax.tree.leaves(nnx.state(model, nnx.Param))
    trainer = Trainer(model, optax.sgd(1.0), loss_fn, micro_batches=micro_batches, frozen=frozen)
    metrics = jax.device_get(trainer.step(batch))
    return [a - b for a, b in zip(jax.tree.leaves(nnx.state(model, nnx.Param)), before)], metrics


def assert_same_update(a, b):
    scale = max(float(np.abs(x).max()) for x in a[0])
    for x, y in zip(a[0], b[0]):
        np.testing.assert_allclose(x, y, atol=1e-5 * scale)
    for key in a[1]:
        if key not in ("step", "grad_norm"):
            assert a[1][key] == pytest.approx(b[1][key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("loss_type", ["sigmoid", "orpo"])
def test_micro_batches_and_padded_pairs_give_the_one_batch_update(loss_type):
    """8 rows of which 3 are padding (a short last batch): split in 1 or 4 micro-batches of uneven real-pair
    counts, the update and the metrics equal those of the 5 real pairs alone."""
    data = random_pairs(5)
    reference = model_pair()[1]
    extras = {"ref_logps": reference_log_probs(reference, data, 5)} if loss_type == "sigmoid" else None
    real = PreferenceBatches(data, 5, shuffle=False, extras=extras).epoch(0)[0]
    loss_fn = PreferenceLoss(loss_type, beta=0.5)
    padded = {k: np.concatenate([v, np.zeros((3, *v.shape[1:]), v.dtype)]) for k, v in real.items()}
    alone = sgd_update(loss_fn, real)
    assert alone[1]["count"] == 5
    for k in (1, 4):
        assert_same_update(sgd_update(loss_fn, padded, micro_batches=k), alone)


def test_online_reference_equals_precomputed_and_compiles_once():
    """The reference as `frozen` in every step gives the same metrics as its log-probs precomputed once; a run over
    batches of 4, 4 and a short 2 compiles its step once."""
    data = random_pairs(10, seed=1)
    policy, reference = model_pair(2)
    loss_fn = PreferenceLoss("sigmoid", beta=0.3)
    extras = {"ref_logps": reference_log_probs(reference, data, 4)}
    online = evaluate(policy, loss_fn, PreferenceBatches(data, 4, shuffle=False).epoch(0), frozen=reference)
    offline = evaluate(policy, loss_fn, PreferenceBatches(data, 4, shuffle=False, extras=extras).epoch(0))
    for key in online:
        assert online[key] == pytest.approx(offline[key], rel=1e-5, abs=1e-6), key
    assert online["count"] == 10 and online["loss"] > 0

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: compiles.append(event) if event == "/jax/core/compile/backend_compile_duration"
        else None)
    trainer = Trainer(policy, optax.adam(1e-3), loss_fn, frozen=reference)
    batches = PreferenceBatches(data, 4, seed=0).stream()
    trainer.step(next(batches))
    compiles.clear()
    for _ in range(5):  # the rest of epoch 0 (4, then 2 pairs), then epoch 1
        trainer.step(next(batches))
    trainer.flush()
    assert compiles == [] and [h["count"] for h in trainer.history] == [4, 4, 2, 4, 4, 2]


def test_the_completion_window_scores_exactly_the_full_rows():
    """Running the lm head only on each row's completion window gives the same sums, loss and update."""
    data = random_pairs(6, seed=7)
    batch = PreferenceBatches(data, 6, shuffle=False).epoch(0)[0]
    model = MiniLM(8)
    full, windowed = (nnx.jit(partial(completion_sums, window=w))(model, batch) for w in (None, data.longest_completion))
    assert data.longest_completion < T
    np.testing.assert_allclose(windowed[0], full[0], rtol=1e-6)
    np.testing.assert_array_equal(windowed[1], full[1])
    batch["ref_logps"] = np.asarray(full[0]) - 0.5
    assert_same_update(sgd_update(PreferenceLoss("sigmoid", completion_window=data.longest_completion), batch),
                       sgd_update(PreferenceLoss("sigmoid"), batch))


def test_a_shared_prompt_scores_and_trains_as_the_separate_rows():
    """Each pair's prompt run once (prompt + chosen, the rejected completion appended as its own segment) gives the
    separate rows' log-probs, loss and gradient, on a transformer whose layers attend within a sliding window of 4
    or globally; a padded pair scores 0. Data whose two rows differ before their completions is not shared."""
    data = random_pairs(5, seed=11)
    assert data.prompts_shared
    batch = pad_batch(PreferenceBatches(data, 5, shuffle=False).epoch(0)[0], 6)
    model = Transformer(small_config(vocab_size=VOCAB), rngs=nnx.Rngs(0))
    window = data.longest_completion
    separate, shared = (nnx.jit(partial(completion_sums, window=window, shared_prompt=s))(model, batch)
                        for s in (False, True))
    np.testing.assert_allclose(shared[0], separate[0], rtol=1e-5)
    assert np.all(np.asarray(shared[0])[5] == 0) and np.all(np.asarray(shared[0])[:5] < 0)
    batch["ref_logps"] = np.asarray(separate[0]) - 0.5

    def loss_and_grad(shared_prompt):
        loss_fn = PreferenceLoss("sigmoid", completion_window=window, shared_prompt=shared_prompt)
        loss, grads = nnx.jit(nnx.value_and_grad(lambda m: loss_fn(m, batch)[0]))(model)
        return loss, jax.tree.leaves(grads)

    (loss_a, grads_a), (loss_b, grads_b) = loss_and_grad(False), loss_and_grad(True)
    assert loss_b == pytest.approx(float(loss_a), rel=1e-5)
    for a, b in zip(grads_a, grads_b):
        np.testing.assert_allclose(b, a, atol=1e-5 * float(np.abs(a).max()) + 1e-9)

    ids, masks = list(data.sequences.ids), list(data.sequences.mask)
    ids[1] = ids[1].copy()
    ids[1][int(np.argmax(masks[1] > 0)) - 1] += 1  # the rejected row's last prompt token differs
    assert not PreferenceData(SFTData(ids, masks, T, 0, data.report)).prompts_shared
    assert scoring(data) == {"completion_window": window, "shared_prompt": True}


def test_lora_reference_is_the_base_view():
    """With LoRA, reference_policy is the base with adapters off: at the start policy == reference
    (loss log 2),
    and after the adapters move, the reference still scores exactly as the model without LoRA."""
    data = random_pairs(4, seed=3)
    batch = PreferenceBatches(data, 4, shuffle=False).epoch(0)[0]
    model = model_pair(4)[0]
    base_logps = reference_log_probs(nnx.clone(model), data, 4)
    apply_lora(model, rank=2, alpha=4.0, targets=("out",), rngs=nnx.Rngs(0))
    reference = reference_policy(model)
    loss_fn = PreferenceLoss("sigmoid")
    assert evaluate(model, loss_fn, [batch], frozen=reference)["loss"] == pytest.approx(np.log(2), rel=1e-6)
    trainer = Trainer(model, optax.adam(1e-2), loss_fn, wrt=nnx.LoRAParam, frozen=reference)
    for _ in range(3):
        trainer.step(batch)
    after = evaluate(model, loss_fn, [batch], frozen=reference)
    assert after["loss"] < np.log(2) and after["rewards/accuracies"] > 0
    np.testing.assert_allclose(reference_log_probs(reference, data, 4), base_logps, rtol=1e-6)
    np.testing.assert_allclose(reference_log_probs(without_adapters(model), data, 4), base_logps, rtol=1e-6)


def test_kto_trains_on_labelled_examples():
    data = random_pairs(6, seed=5, labels=True)
    policy, reference = model_pair(6)
    loss_fn = PreferenceLoss("kto", beta=0.5)
    batch = PreferenceBatches(data, 6, shuffle=False).epoch(0)[0]
    update, metrics = sgd_update(loss_fn, batch, frozen=reference, seed=6)
    assert metrics["count"] == 6 and metrics["kl"] >= 0 and any(np.abs(u).max() > 0 for u in update)


# ----------------------------------------------------------------------------- configs and the command line


def test_config_errors_say_what_and_how_to_fix(tmp_path, capsys):
    with pytest.raises(ValueError, match="label_smoothing: 0.1 has no effect with loss_type 'ipo'"):
        DPOConfig(loss_type="ipo", label_smoothing=0.1).validate()
    with pytest.raises(ValueError, match="label_smoothing: the robust loss needs the flip probability"):
        DPOConfig(loss_type="robust").validate()
    with pytest.raises(ValueError, match="reference: 'online' has no effect with loss_type 'orpo'"):
        DPOConfig(loss_type="orpo", reference="online").validate()
    with pytest.raises(ValueError, match="KTO's class weights have no effect with loss_type 'sigmoid'"):
        DPOConfig(undesirable_weight=1.33).validate()
    DPOConfig(loss_type="kto", undesirable_weight=1.33).validate()
    with pytest.raises(ValueError, match="dpop_lambda: 10.0 has no effect with loss_type 'sigmoid'"):
        DPOConfig(dpop_lambda=10.0).validate()
    DPOConfig(loss_type="dpop", dpop_lambda=10.0).validate()
    with pytest.raises(ValueError, match="on_policy_rejected: builds pairs; KTO's unpaired examples"):
        DPOConfig(loss_type="kto", on_policy_rejected=True).validate()
    with pytest.raises(ValueError, match="on_policy_samples: builds pairs; KTO's unpaired examples"):
        DPOConfig(loss_type="kto", on_policy_samples=4).validate()
    with pytest.raises(ValueError, match="on_policy_samples: 1 reply cannot be both accepted and refused"):
        DPOConfig(on_policy_samples=1).validate()
    with pytest.raises(ValueError, match=r"on_policy_domains: \['count'\] needs on_policy_rejected: true or "
                                         "on_policy_samples"):
        DPOConfig(on_policy_domains=["count"]).validate()
    DPOConfig(on_policy_samples=4, on_policy_domains=["count"]).validate()
    with pytest.raises(ValueError, match="loss_type: 'dpo' is not supported; choose one of 'sigmoid'"):
        DPOConfig.from_dict({"loss_type": "dpo"})
    path = tmp_path / "dpo.yaml"
    path.write_text("algorithm: dpo\nmodel: runs/sft_missing/model\nsteps: 2\nwarmup_steps: 0\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model: runs/sft_missing/model does not exist; train it first" in err
    path.write_text("algorithm: dpo\nmodel: tiny\non_policy_domains: [count]\nsteps: 2\nwarmup_steps: 0\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "on_policy_domains: ['count'] needs on_policy_rejected: true or" in err
    path.write_text("algorithm: dpo\nmodel: tiny\ndpop_lambda: 10\nsteps: 2\nwarmup_steps: 0\n")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dpop_lambda: 10.0 has no effect with loss_type 'sigmoid'" in err


def test_on_policy_pairs_reject_the_models_own_flawed_answers(monkeypatch):
    """Where the starting model's greedy answer is flawed it becomes the rejected side; a correct (or empty) answer
    leaves the record's own rejected completion. Generation is TaskEval's (tested with the sampler); here it is
    fixed so that the pairing itself is what is checked."""
    import tunix_lite
    from tunix_lite.evaluation import TaskEval
    from tunix_lite.preference.dpo import on_policy_pairs

    said = ["Two and two. <answer>4</answer>", "Three and three. <answer>7</answer>", "Ten. <answer>10", ""]
    monkeypatch.setattr(TaskEval, "completions", lambda self: said[:len(self.records)])
    rows = [{"prompt": f"What is {n} + {n}?", "chosen": f"<answer>{2 * n}</answer>", "rejected": "no tag",
             "answer": str(2 * n)} for n in (2, 3, 5, 6)]
    model, tokenizer = tunix_lite.load("tiny")
    pairs, made = on_policy_pairs(model, tokenizer, rows)
    assert (made["rejected"], made["sampled"], made["prompts"], made["pairs"]) == (2, 0, 4, 4)
    assert [p["rejected"] for p in pairs] == ["no tag", said[1], said[2], "no tag"]
    assert [p["chosen"] for p in pairs] == [r["chosen"] for r in rows]
    # on_policy_domains: only those pairs are answered (the fixed answers go to them, in order); the rest keep theirs
    for row, domain in zip(rows, ("count", "arithmetic", "count", "count")):
        row["domain"] = domain
    pairs, made = on_policy_pairs(model, tokenizer, rows, domains=["count"])
    assert made["rejected"] == 2 and [p["rejected"] for p in pairs] == ["no tag", "no tag", said[1], said[2]]
    with pytest.raises(ValueError, match=r"on_policy_domains: \['sort'\] matches no training pair; the pairs' "
                                         r"domains are \['arithmetic', 'count'\]"):
        on_policy_pairs(model, tokenizer, rows, domains=["sort"])
    with pytest.raises(ValueError, match="on_policy_samples: need records with a text prompt and an answer"):
        on_policy_pairs(model, tokenizer, [{k: v for k, v in r.items() if k != "answer"} for r in rows])


def test_task_eval_samples_k_replies_per_record_in_record_order():
    """completions(num_samples=k): record r's replies are rows r*k ... r*k+k-1, each batch of prompts
    one sampler call with its own seed (the last batch padded by repeating its last prompt)."""
    import tunix_lite
    from tunix_lite.evaluation import TaskEval

    model, tokenizer = tunix_lite.load("tiny")
    records = [{"prompt": f"What is {n} + {n}?", "answer": str(2 * n)} for n in (1, 2, 3)]
    task = TaskEval(model, tokenizer, records, max_new_tokens=8, batch_size=2)
    texts = task.completions(num_samples=2, temperature=1.0, seed=5)
    first = task.sampler.generate(task.prompts[:2], 8, num_samples=2, temperature=1.0, seed=5).texts
    last = task.sampler.generate(task.prompts[2:] * 2, 8, num_samples=2, temperature=1.0, seed=7).texts
    assert texts == first + last[:2] and len(set(texts)) > 1
    assert len(task.completions()) == 3


def test_on_policy_samples_pair_an_accepted_reply_with_a_refused_one(monkeypatch):
    """With samples, a prompt whose replies hold both a right and a flawed answer becomes (the first
    right, the first flawed reply), both the model's own, overriding the greedy rejection; a prompt
    whose samples are all right, all flawed or empty keeps its pair. Replies are fixed (the sampler is
    tested on its own) so that the pairing is what is checked."""
    import tunix_lite
    from tunix_lite.evaluation import TaskEval
    from tunix_lite.preference.dpo import on_policy_pairs

    greedy = ["<answer>5</answer>", "<answer>6</answer>", "<answer>9</answer>"]
    sampled = ["<answer>3</answer>", "a <answer>4</answer>", "b <answer>4</answer>",  # 2 + 2: wrong, right, right
               "<answer>7</answer>", "", "c <answer>6</answer>",                        # 3 + 3: wrong, empty, right
               "<answer>9</answer>", "<answer>11</answer>", "<answer>12</answer>"]       # 5 + 5: none right
    calls = []

    def completions(self, progress=None, *, num_samples=1, temperature=0.0, seed=0):
        calls.append((num_samples, temperature))
        return greedy if num_samples == 1 else sampled

    monkeypatch.setattr(TaskEval, "completions", completions)
    rows = [{"prompt": f"What is {n} + {n}?", "chosen": f"<answer>{2 * n}</answer>", "rejected": "no tag",
             "answer": str(2 * n)} for n in (2, 3, 5)]
    model, tokenizer = tunix_lite.load("tiny")
    pairs, made = on_policy_pairs(model, tokenizer, rows, samples=3, seed=4)
    assert calls == [(1, 0.0), (3, 1.0)] and (made["rejected"], made["sampled"]) == (1, 2)
    assert (made["all_right"], made["all_wrong"]) == (0, 1)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [
        ("a <answer>4</answer>", "<answer>3</answer>"), ("c <answer>6</answer>", "<answer>7</answer>"),
        ("<answer>10</answer>", "<answer>9</answer>")]
    calls.clear()
    pairs, made = on_policy_pairs(model, tokenizer, rows, greedy=False, samples=3)
    assert calls == [(3, 1.0)] and (made["rejected"], made["sampled"]) == (0, 2) and pairs[2] == rows[2]


SMALL_RUN = dict(algorithm="dpo", model="tiny", n_train=12, n_validation=4, n_accuracy=4, max_new_tokens=24,
                 seq_len=128, batch_size=4, steps=2, warmup_steps=0, learning_rate=1e-5, eval_every=0, log_every=1)


@pytest.mark.slow
def test_cli_dpo_writes_outputs_and_names_bad_rows(tmp_path, capsys, micro_model):
    out = tmp_path / "run"
    path = tmp_path / "dpo.yaml"
    # on-policy pairs too: the starting model answers each training prompt greedily and twice at temperature 1
    on_policy = {"on_policy_rejected": True, "on_policy_samples": 2}
    path.write_text(yaml.safe_dump(SMALL_RUN | on_policy | {"model": str(micro_model), "output_dir": str(out)}))
    assert main(["train", "--config", str(path)]) == 0
    said = capsys.readouterr().out
    assert " of 12 pairs are now two of the model's own replies (accepted, refused) from 2 samples" in said, said
    assert " of 12 pairs now reject the model's own flawed greedy answer" in said, said
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and {"rewards/margins", "rewards/accuracies", "logps/chosen", "kl"} <= set(lines[0])
    scores = json.loads((out / "scores.json").read_text())
    assert scores["before"]["rewards/margins"] == 0 and scores["before"]["loss"] == pytest.approx(np.log(2), rel=1e-5)
    assert {"accuracy", "format", "flaw/wrong", "flaw/untagged", "flaw/unclosed"} <= set(scores["after"])
    assert (out / "model" / "config.json").is_file()
    capsys.readouterr()

    # a JSONL file with a bad row: one line naming the file, the row and the column; nothing is written
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"prompt": "Which is larger, 3 or 5?", "chosen": "<answer>5</answer>", "rejected": "<answer>3</answer>"}] * 3
    rows[2] = rows[2] | {"rejected": "  "}  # (a column of another type is the record reader's error, by line)
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(SMALL_RUN | {"train_data": str(pairs), "validation_data": str(pairs),
                                               "output_dir": str(tmp_path / "bad_run")}))
    assert main(["train", "--config", str(bad)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after `datasets`' progress lines
    assert last == f"tunix-lite train: error: {pairs}: row 2, column 'rejected': empty completion; give it text or drop the row"
    assert not (tmp_path / "bad_run").exists()


def test_heldout_report_of_the_reference_itself_ties_every_pair():
    """The held-out scale of course/results/scripts/preference.py: before training (policy ==
    reference) every margin is exactly 0, so rewards/accuracies is 0 and the loss log 2 (no float
    noise counted as a win)."""
    import importlib.util

    import tunix_lite
    from tunix_lite.data.synthetic import preference_pairs

    path = Path(__file__).resolve().parents[1] / "course" / "results" / "scripts" / "preference.py"
    spec = importlib.util.spec_from_file_location("preference_results", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    model, tokenizer = tunix_lite.load("tiny")
    pairs = preference_pairs(6, seed=3, split="test")
    scores = script.heldout_report(model, model, tokenizer, pairs, batch_size=8, generate=False)
    assert scores["rewards/margins"] == 0 and scores["rewards/accuracies"] == 0 and scores["count"] == 6
    assert scores["loss"] == pytest.approx(np.log(2), rel=1e-6)


def test_held_out_answers_count_each_distinct_prompt_once():
    """Held-out pairs repeat prompts (few facts questions exist), and a greedy answer to a repeated prompt is the same
    answer: prompt_records keeps the first pair of each prompt, in order, up to a limit."""
    from tunix_lite.data.synthetic import preference_pairs
    from tunix_lite.preference.evaluation import prompt_records

    pairs = preference_pairs(40, seed=2024, split="test", domains=["facts"])
    records = prompt_records(pairs)
    distinct = list(dict.fromkeys(p["prompt"] for p in pairs))
    assert len(distinct) < len(pairs) and [r["prompt"] for r in records] == distinct
    first = {p["prompt"]: p for p in reversed(pairs)}  # the first pair of each prompt
    assert all(r["completion"] == first[r["prompt"]]["chosen"] and r["answer"] == first[r["prompt"]]["answer"]
               and r["domain"] == "facts" for r in records)
    assert [r["prompt"] for r in prompt_records(pairs, limit=3)] == distinct[:3]
