"""The trainer core's invariants: exact means over any unit, frozen models as step arguments, one compilation,
metrics read in windows, exact resume, and the hooks around them.

Most tests train `TinyLM` (embed -> dropout -> linear), which compiles in about a second; the accumulation
test uses the real decoder at a 1-layer `small_config`.
"""

import asyncio
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lite.models import Transformer
from tunix_lite.training.checkpoint import Checkpoints
from tunix_lite.training.losses import lm_loss, masked_mean, sequence_log_probs
from tunix_lite.training.evals import plot_history
from tunix_lite.training.trainer import Trainer, adamw_cosine, evaluate, pad_batch

from test_model import small_config

VOCAB, T = 97, 16


class TinyLM(nnx.Module):
    """Just enough of a language model for lm_loss, with dropout so that RNG state must be carried and saved."""

    def __init__(self, *, rngs: nnx.Rngs, dropout: float = 0.1, dtype="float32"):
        self.embed = nnx.Embed(VOCAB, 16, dtype=dtype, rngs=rngs)  # dtype: compute; parameters stay float32
        self.drop = nnx.Dropout(dropout, rngs=rngs)
        self.out = nnx.Linear(16, VOCAB, dtype=dtype, rngs=rngs)

    def features(self, tokens, positions=None, *, segment_ids=None):
        return self.drop(self.embed(tokens))

    def logits(self, features):
        return self.out(features)

    def __call__(self, tokens, positions=None, *, segment_ids=None):
        return self.logits(self.features(tokens))


def lm_batch(rows: int, seed: int) -> dict:
    """Random tokens with ragged lengths, so micro-batches hold very different token counts."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (rows, T + 1)).astype(np.int32)
    lengths = rng.integers(1, T + 1, rows)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
            "weights": (np.arange(T) < lengths[:, None]).astype(np.float32),
            "positions": np.tile(np.arange(T, dtype=np.int32), (rows, 1))}


def params(model, wrt=nnx.Param) -> list[np.ndarray]:
    unkey = lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    return [np.asarray(unkey(x)) for x in jax.tree.leaves(nnx.state(model, wrt))]


TX = adamw_cosine(1e-2, 6, warmup_steps=2)  # one object: Trainers built on the same structure share one compile


def tiny_trainer(seed=0, tx=TX, **kwargs) -> Trainer:
    # an "rbg" dropout key compiles in a fraction of the time of the default threefry key on CPU
    rngs = nnx.Rngs(seed, dropout=jax.random.key(seed + 1, impl="rbg"))
    return Trainer(TinyLM(rngs=rngs), tx, lm_loss, **kwargs)


def keep_gradient() -> optax.GradientTransformation:
    """An "optimizer" that stores the step's gradient in its state and leaves the parameters alone."""
    return optax.GradientTransformation(lambda params: jax.tree.map(jnp.zeros_like, params),
                                        lambda grads, state, params=None: (jax.tree.map(jnp.zeros_like, grads), grads))


@pytest.mark.slow  # two compilations of the decoder
def test_accumulating_micro_batches_equals_one_big_batch():
    batch = lm_batch(8, seed=0)
    steps = {}
    for k in (1, 4):
        trainer = Trainer(Transformer(small_config(num_layers=1), rngs=nnx.Rngs(0)), keep_gradient(), lm_loss,
                          micro_batches=k)
        metrics = trainer.step(batch)
        steps[k] = metrics, np.concatenate([np.ravel(g) for g in jax.tree.leaves(trainer.optimizer.opt_state)])
    (big, grad_big), (acc, grad_acc) = steps[1], steps[4]
    assert float(acc["count"]) == float(big["count"]) == batch["weights"].sum()
    assert float(acc["loss"]) == pytest.approx(float(big["loss"]), rel=1e-6)
    assert np.linalg.norm(grad_acc - grad_big) <= 1e-6 * np.linalg.norm(grad_big)
    # the micro-batches' token counts differ, so an unweighted mean of their losses would not match
    counts = batch["weights"].reshape(2, 4, T).sum(axis=(0, 2))
    assert counts.max() > 1.5 * counts.min()


def test_one_compilation_for_a_run_ending_in_a_short_batch(caplog):
    batches = [lm_batch(8, seed=i) for i in range(3)] + [lm_batch(5, seed=3)]  # 5 rows: padded to 8
    trainer = tiny_trainer(tx=adamw_cosine(1e-2, 4), micro_batches=2)  # a new optimizer: not compiled before
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        history = trainer.fit(batches, 4)
    compiles = [r for r in caplog.records if "Compiling jit(train_step)" in r.getMessage()]
    assert len(compiles) == 1, [r.getMessage()[:80] for r in compiles]
    assert len(history) == 4 and history[-1]["count"] == batches[-1]["weights"].sum()  # padding counts 0


def test_pad_batch_zero_pads_rows():
    padded = pad_batch(lm_batch(3, seed=0), 5)
    assert padded["inputs"].shape == (5, T) and padded["weights"][3:].sum() == 0
    with pytest.raises(ValueError, match="more than the 2"):
        pad_batch(lm_batch(3, seed=0), 2)


def test_resume_from_a_checkpoint_is_exact(tmp_path):
    batches = [lm_batch(4, seed=i) for i in range(6)]
    reference = tiny_trainer()
    reference.fit(batches, 6)

    first = tiny_trainer()
    first.fit(batches, 3, checkpoints=Checkpoints(tmp_path, every=2, keep=3))
    resumed = tiny_trainer(seed=7)  # different weights and dropout key: everything must come from the checkpoint
    step = resumed.restore(Checkpoints(tmp_path))
    step = step["step"]
    assert step == 3 and [h["loss"] for h in resumed.history] == [h["loss"] for h in reference.history[:3]]
    resumed.fit(batches[step:], 3)

    for a, b in zip(params(reference.model, ...), params(resumed.model, ...)):  # dropout RNG state too
        np.testing.assert_array_equal(a, b)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in reference.history]


def test_a_restored_model_runs_the_programs_a_fresh_one_compiled(tmp_path, caplog):
    """Orbax commits what it reads to a device, and jit compiles committed and uncommitted arguments
    to different programs: restore places the arrays as the model's own were, so a resumed run
    reuses its compiled step and sampler (and the persistent cache) instead of compiling again."""
    tiny_trainer().fit([lm_batch(4, seed=0)], 1, checkpoints=Checkpoints(tmp_path, every=1))
    forward = nnx.jit(lambda model, tokens: model.logits(model.features(tokens)))
    tokens = lm_batch(4, seed=1)["inputs"]
    resumed = tiny_trainer(seed=7)
    forward(resumed.model, tokens)
    resumed.restore(Checkpoints(tmp_path))
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        forward(resumed.model, tokens)
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]
    state = (nnx.state(resumed.model), nnx.state(resumed.optimizer))
    assert not any(leaf.committed for leaf in jax.tree.leaves(state))


def test_a_passed_deadline_ends_fit_after_one_step_with_a_checkpoint(tmp_path):
    batches = [lm_batch(4, seed=i) for i in range(6)]
    checkpoints = Checkpoints(tmp_path, every=100, keep=2)
    trainer = tiny_trainer()
    assert len(trainer.fit(batches, 6, checkpoints=checkpoints, deadline=0.0)) == 1  # the past: one step, then stop
    assert checkpoints.steps == [1]  # the end-of-fit checkpoint, off the every-100 cadence
    trainer.fit(batches[1:], 5, checkpoints=checkpoints, deadline=float("inf"))
    assert checkpoints.steps == [1, 6]


def test_meta_is_saved_as_it_was_when_save_was_called(tmp_path, monkeypatch):
    """Orbax writes meta in the background after save returns; the trainer keeps appending to the
    history it passed. A slow writer (a busy machine) must still store the history of the saved
    step, or a resumed run numbers its steps from the wrong place."""
    from orbax.checkpoint._src.handlers import json_checkpoint_handler as handler

    write = handler.JsonCheckpointHandler._save_fn

    async def slow_write(self, x, directory):
        await asyncio.sleep(0.5)
        await write(self, x, directory)

    monkeypatch.setattr(handler.JsonCheckpointHandler, "_save_fn", slow_write)
    checkpoints, history = Checkpoints(tmp_path, every=1), [{"step": 1, "loss": 2.0}]
    checkpoints.save(1, TinyLM(rngs=nnx.Rngs(0)), meta={"history": history})
    history[0]["loss"] = 1.0
    history.append({"step": 2, "loss": 0.5})
    assert checkpoints.restore(TinyLM(rngs=nnx.Rngs(1)))["history"] == [{"step": 1, "loss": 2.0}]


def test_keeps_the_last_k_checkpoints(tmp_path):
    checkpoints = Checkpoints(tmp_path, every=2, keep=2)
    tiny_trainer().fit([lm_batch(4, seed=i) for i in range(7)], 7, checkpoints=checkpoints)
    assert checkpoints.steps == [6, 7]  # 2, 4, 6 on the cadence, 7 at the end; the oldest pruned
    assert sorted(p.name for p in tmp_path.iterdir()) == ["6", "7"]


def test_state_filter_saves_and_restores_only_the_chosen_variables(tmp_path):
    source, target = TinyLM(rngs=nnx.Rngs(0)), TinyLM(rngs=nnx.Rngs(1))
    kernel_before = np.asarray(target.out.kernel[...])
    checkpoints = Checkpoints(tmp_path, state_filter=nnx.PathContains("embed"))  # as nnx.LoRAParam for adapters
    checkpoints.save(1, source, force=True)
    checkpoints.restore(target)
    np.testing.assert_array_equal(target.embed.embedding[...], source.embed.embedding[...])
    np.testing.assert_array_equal(target.out.kernel[...], kernel_before)


def test_missing_checkpoint_directory_says_what_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no checkpoint in .*nowhere: looked for step folders"):
        Checkpoints(tmp_path / "nowhere").restore(TinyLM(rngs=nnx.Rngs(0)))
    assert not (tmp_path / "nowhere").exists()


def test_nan_stops_training_and_names_the_step():
    batches = [lm_batch(4, seed=i) for i in range(4)]
    batches[2]["weights"] = np.full_like(batches[2]["weights"], np.nan)
    trainer = tiny_trainer()
    with pytest.raises(FloatingPointError, match="loss became nan at step 3"):
        trainer.fit(batches, 4)
    assert len(trainer.history) == 2


def test_eval_hook_cadence_and_plot():
    calls, val = [], [lm_batch(4, seed=100), lm_batch(3, seed=101)]

    def eval_fn(model):
        calls.append(len(trainer.history))
        return evaluate(model, lm_loss, val)

    trainer = tiny_trainer()
    history = trainer.fit([lm_batch(4, seed=i) for i in range(5)], 5, eval_fn=eval_fn, eval_every=2)
    assert calls == [2, 4, 5]  # and after the last step, so a run always ends measured
    assert [h["step"] for h in history if "eval_loss" in h] == [2, 4, 5]
    assert history[1]["eval_count"] == sum(b["weights"].sum() for b in val)

    fig = plot_history(history, keys=[("loss", "eval_loss")])  # a tuple shares one panel
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["loss", "eval_loss"]
    fig = plot_history(history, keys=["loss", "eval_loss", "kl"])  # a panel each; "kl" left out
    panels = [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    assert panels == [["loss"], ["eval_loss"]]
    with pytest.raises(KeyError, match="no history entry has 'accuracy'"):
        plot_history(history, keys="accuracy")


def test_bf16_compute_keeps_float32_parameters():
    """The decoder's `ModelConfig.dtype` works the same way (nnx.Linear/Embed `dtype`): nothing in the trainer."""
    batch = lm_batch(4, seed=0)
    losses = {}
    for dtype in ("float32", "bfloat16"):
        model = TinyLM(rngs=nnx.Rngs(0), dropout=0.0, dtype=dtype)
        losses[dtype] = float(Trainer(model, TX, lm_loss).step(batch)["loss"])
        assert all(p.dtype == jnp.float32 for p in params(model))
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=1e-2) and losses["bfloat16"] != losses["float32"]


# ----------------------------------------------------------------------------- exact means over any unit


def sequence_loss(model, batch, frozen=None):
    """A per-sequence loss (as GRPO's sequence-mean or a DPO pair): the mean over real rows of each row's mean
    token NLL; rows whose weights are all zero (padding) count zero."""
    nll = -sequence_log_probs(model, batch)
    w = batch["weights"]
    per_row = jnp.sum(nll * w, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)
    loss, count = masked_mean(per_row, jnp.any(w > 0, axis=1))
    return loss, {"loss": loss, "count": count}


def test_micro_batches_equal_one_big_batch_for_a_per_sequence_loss():
    """Real rows fall unevenly into micro-batches (micro-batch 1 gets one real row, micro-batch 0 three): the
    count-weighted accumulation still gives the big batch's mean and gradient."""
    batch = lm_batch(8, seed=3)
    batch["weights"][[1, 3, 5, 6]] = 0.0  # padded rows; with k=2, rows 0,2,4,6 and 1,3,5,7 form the micro-batches
    out = {}
    for k in (1, 2):
        trainer = Trainer(TinyLM(rngs=nnx.Rngs(0), dropout=0.0), keep_gradient(), sequence_loss, micro_batches=k)
        metrics = trainer.step(batch)
        out[k] = float(metrics["loss"]), float(metrics["count"]), jax.tree.leaves(trainer.optimizer.opt_state)
    assert out[1][1] == out[2][1] == 4
    assert out[2][0] == pytest.approx(out[1][0], rel=1e-6)
    for a, b in zip(out[1][2], out[2][2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def pair_loss(model, batch, frozen=None):
    """-log sigmoid(margin) per pair, where margin = chosen minus rejected summed log-probs; a padded pair (all
    weights zero) would add -log sigmoid(0) = log 2 if it were counted."""
    logp = jnp.sum(sequence_log_probs(model, batch) * batch["weights"], axis=1).reshape(-1, 2)  # [pairs, 2]
    real = jnp.any(batch["weights"].reshape(-1, 2, batch["weights"].shape[1]) > 0, axis=(1, 2))
    loss, count = masked_mean(-jax.nn.log_sigmoid(logp[:, 0] - logp[:, 1]), real)
    return loss, {"loss": loss, "count": count}


def test_a_padded_pair_adds_nothing():
    pairs = lm_batch(4, seed=5)  # 2 pairs, rows (chosen, rejected) adjacent
    padded = pad_batch(pairs, 6)  # one padded pair
    model = TinyLM(rngs=nnx.Rngs(0), dropout=0.0)
    real = evaluate(model, pair_loss, [pairs])
    with_padding = evaluate(model, pair_loss, [padded])
    assert with_padding["count"] == real["count"] == 2
    assert with_padding["loss"] == pytest.approx(real["loss"], rel=1e-6)
    assert abs(real["loss"] - np.log(2)) > 1e-3  # so a counted padded pair would have moved the mean


def test_a_loss_without_a_count_is_refused():
    trainer = Trainer(TinyLM(rngs=nnx.Rngs(0), dropout=0.0), TX, lambda m, b, f: (jnp.zeros(()), {"loss": 0.0}))
    with pytest.raises(KeyError, match="must report metrics\\['count'\\]"):
        trainer.step(lm_batch(4, seed=0))


# ----------------------------------------------------------------------------- frozen models


def kl_to_frozen(model, batch, frozen):
    """Mean token log-ratio to a frozen reference (a stand-in for DPO's or GRPO's reference term)."""
    ratio = sequence_log_probs(model, batch) - jax.lax.stop_gradient(sequence_log_probs(frozen, batch))
    loss, count = masked_mean(ratio, batch["weights"])
    return loss, {"loss": loss, "count": count}


def test_frozen_model_is_an_argument_of_the_step_not_a_constant(caplog):
    """The reference's weights are inputs of the compiled step: changing them changes the loss without a
    recompile, and nothing of the reference is trained."""
    batch = lm_batch(4, seed=1)
    policy, reference = TinyLM(rngs=nnx.Rngs(0), dropout=0.0), TinyLM(rngs=nnx.Rngs(0), dropout=0.0)
    trainer = Trainer(policy, adamw_cosine(1e-2, 6, warmup_steps=1), kl_to_frozen, frozen=reference)
    before = params(reference)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        first = float(trainer.step(batch)["loss"])
        reference.out.kernel[...] = reference.out.kernel[...] * 2.0
        second = float(trainer.step(batch)["loss"])
    compiles = [r for r in caplog.records if "Compiling jit(train_step)" in r.getMessage()]
    assert len(compiles) == 1
    assert first == pytest.approx(0.0, abs=1e-6) and abs(second) > 1e-3  # policy == reference at step 1
    np.testing.assert_array_equal(params(reference)[0], before[0])  # the embedding: untouched by training


# ----------------------------------------------------------------------------- metrics read in windows


def test_metrics_stay_on_device_between_log_windows():
    trainer = tiny_trainer()
    seen = []
    trainer.fit([lm_batch(4, seed=i) for i in range(5)], 5, log_every=2, loggers=[seen.append])
    assert [h["step"] for h in seen] == [1, 2, 3, 4, 5] and all(isinstance(h["loss"], float) for h in seen)
    metrics = trainer.step(lm_batch(4, seed=9))
    assert isinstance(metrics["loss"], jax.Array) and len(trainer._pending) == 1  # not read yet
    assert len(trainer.history) == 6 and not trainer._pending


def test_nan_in_a_window_names_its_step():
    batches = [lm_batch(4, seed=i) for i in range(6)]
    batches[2]["weights"] = np.full_like(batches[2]["weights"], np.nan)
    trainer = tiny_trainer()
    with pytest.raises(FloatingPointError, match=r"loss became nan at step 3 \(noticed at step 5\)"):
        trainer.fit(batches, 6, log_every=5)
    assert len(trainer.history) == 2
