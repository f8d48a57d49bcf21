"""Graded tests for phase 3 (solutions/03_sft_exercises.ipynb): the data and loss side of supervised fine-tuning.

References are numpy in float64 (or the batch-at-once gradient for accumulation); the learner's float32
results must match to ~1e-5 relative. Shapes: B batch, T tokens, V vocabulary, D model width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.graded import graded

__all__ = [
    "test_masked_next_token_loss_matches_numpy", "test_masked_next_token_loss_stable_for_large_logits",
    "test_masked_next_token_loss_no_tokens", "test_masked_next_token_loss_gradient",
    "test_sft_example_matches_reference", "test_sft_example_trains_on_completions_only",
    "test_sft_example_too_long", "test_pack_examples_matches_reference", "test_pack_examples_keeps_examples_apart",
    "test_pack_examples_too_long", "test_accumulate_grads_equals_the_big_batch",
    "test_accumulate_grads_empty_micro_batch", "test_accumulate_grads_single_micro_batch",
]

HINTS = {
    "masked_next_token_loss": "log p = jax.nn.log_softmax(logits) (never log(softmax(...)): it underflows to -inf); "
                              "pick each target's entry with jnp.take_along_axis, then sum(nll * w) / sum(w), "
                              "guarding a zero count with jnp.where(count > 0, count, 1.0). Return (loss, count).",
    "sft_example": "With n = len(ids) - 1 pairs: inputs = ids[:-1], targets = ids[1:], weights = mask[1:] (the mask "
                   "shifts with the targets), positions = 0..n-1; fill the rest with pad_id / 0 / -1. Raise "
                   "ValueError when n > seq_len instead of cutting the example.",
    "pack_examples": "For each example take its n = len(ids) - 1 pairs (sft_example(ids, mask, n) gives them); start "
                     "a new row when they would overflow the current one. Segment ids count 1, 2, ... within a "
                     "row (0 is padding); positions restart at 0 for every example.",
    "accumulate_grads": "jax.value_and_grad(loss_fn, has_aux=True)(params, batch) gives ((loss, tokens), grads). "
                        "Add tokens * grads (jax.tree.map) and tokens * loss over the micro-batches, then divide "
                        "both by the total tokens (guarded against 0). A plain mean of the gradients is wrong.",
}


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _ragged_weights(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """0/1 [B, T]: a prompt of zeros, a completion of ones, then padding, different per row."""
    start = rng.integers(0, length // 2, size=batch)
    end = rng.integers(length // 2, length + 1, size=batch)
    t = np.arange(length)[None, :]
    return ((t >= start[:, None]) & (t < end[:, None])).astype(np.float32)


# ----------------------------------------------------------------------------- the loss


def _loss_ref(logits, targets, weights) -> tuple[float, float]:
    logits = np.asarray(logits, np.float64)
    top = logits.max(-1, keepdims=True)
    log_z = (top + np.log(np.exp(logits - top).sum(-1, keepdims=True)))[..., 0]
    nll = log_z - np.take_along_axis(logits, np.asarray(targets)[..., None], -1)[..., 0]
    w = np.asarray(weights, np.float64)
    return float((nll * w).sum() / max(w.sum(), 1.0)), float(w.sum())


def _loss_inputs(seed: int, B: int = 3, T: int = 6, V: int = 11, scale: float = 2.0):
    rng = _rng(seed)
    logits = (rng.normal(size=(B, T, V)) * scale).astype(np.float32)
    targets = rng.integers(0, V, size=(B, T)).astype(np.int32)
    return logits, targets, _ragged_weights(rng, B, T)


def _check_loss(impl, logits, targets, weights, rtol=1e-5):
    fn = jax.jit(impl.masked_next_token_loss)
    out = fn(_f32(logits), jnp.asarray(targets), jnp.asarray(weights))
    assert isinstance(out, tuple) and len(out) == 2, "return a tuple (loss, token_count)"
    loss, tokens = (float(v) for v in out)
    want_loss, want_tokens = _loss_ref(logits, targets, weights)
    np.testing.assert_allclose(tokens, want_tokens, err_msg="token_count is the sum of the weights")
    np.testing.assert_allclose(loss, want_loss, rtol=rtol, atol=1e-6,
                               err_msg="the loss is sum(nll * weights) / sum(weights) over the whole batch")


@graded("masked_next_token_loss")
def test_masked_next_token_loss_matches_numpy(impl):
    """matches a token-weighted numpy reference on ragged weights (float and bool), under jit"""
    for seed, (B, T, V) in enumerate([(3, 6, 11), (2, 9, 5)]):
        logits, targets, weights = _loss_inputs(600 + seed, B, T, V)
        _check_loss(impl, logits, targets, weights)
        _check_loss(impl, logits, targets, weights.astype(bool))


@graded("masked_next_token_loss")
def test_masked_next_token_loss_stable_for_large_logits(impl):
    """stays finite and correct for logits in the hundreds and thousands, under jit"""
    logits, targets, weights = _loss_inputs(610, B=2, T=5, V=13, scale=300.0)
    logits += 5_000.0
    _check_loss(impl, logits, targets, weights, rtol=1e-4)


@graded("masked_next_token_loss")
def test_masked_next_token_loss_no_tokens(impl):
    """all-zero weights give loss 0.0, count 0 and a zero (not NaN) gradient, under jit"""
    logits, targets, _ = _loss_inputs(620)
    zeros = jnp.zeros(targets.shape, jnp.float32)
    loss, tokens = jax.jit(impl.masked_next_token_loss)(_f32(logits), jnp.asarray(targets), zeros)
    assert float(loss) == 0.0 and float(tokens) == 0.0, f"expected (0.0, 0.0), got ({float(loss)}, {float(tokens)})"
    grad = jax.jit(jax.grad(lambda x: impl.masked_next_token_loss(x, jnp.asarray(targets), zeros)[0]))(_f32(logits))
    assert np.all(np.asarray(grad) == 0.0), "the gradient of an empty batch must be exactly zero (no NaN)"


@graded("masked_next_token_loss")
def test_masked_next_token_loss_gradient(impl):
    """d loss / d logits = (softmax - one_hot(target)) * weight / tokens: zero on masked positions"""
    logits, targets, weights = _loss_inputs(630, B=2, T=7, V=9)
    grad = jax.jit(jax.grad(lambda x: impl.masked_next_token_loss(x, jnp.asarray(targets), jnp.asarray(weights))[0]))(
        _f32(logits))
    x = logits.astype(np.float64)
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = (probs - np.eye(x.shape[-1])[targets]) * weights[..., None] / weights.sum()
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- one example


def _sft_ref(ids, mask, seq_len, pad_id):
    n = len(ids) - 1
    out = {"inputs": np.full(seq_len, pad_id), "targets": np.full(seq_len, pad_id),
           "weights": np.zeros(seq_len), "positions": np.full(seq_len, -1)}
    out["inputs"][:n], out["targets"][:n] = ids[:-1], ids[1:]
    out["weights"][:n], out["positions"][:n] = mask[1:], np.arange(n)
    return out


def _chat(rng: np.random.Generator, turns: int = 1, lo: int = 1, hi: int = 8):
    """(ids, mask): turns of (prompt, reply); the reply tokens (ending with a stop token 1) are masked in."""
    ids, mask = [2], [0]  # BOS
    for _ in range(turns):
        prompt = rng.integers(10, 100, size=rng.integers(lo, hi)).tolist()
        reply = rng.integers(10, 100, size=rng.integers(lo, hi)).tolist() + [1]
        ids += prompt + reply
        mask += [0] * len(prompt) + [1] * len(reply)
    return ids, mask


def _check_arrays(got: dict, want: dict, keys, where: str):
    assert isinstance(got, dict) and set(keys) <= set(got), f"{where}: return a dict with keys {sorted(keys)}"
    for key in keys:
        array = np.asarray(got[key])
        assert array.shape == want[key].shape, f"{where}: {key} has shape {array.shape}, expected {want[key].shape}"
        if key != "weights":
            assert array.dtype.kind in "iu", f"{where}: {key} should be an integer array, got {array.dtype}"
        np.testing.assert_array_equal(array, want[key], err_msg=f"{where}: {key}")


@graded("sft_example")
def test_sft_example_matches_reference(impl):
    """shifts by one, pads with pad_id, weights = the mask shifted with the targets, positions -1 on padding"""
    rng = _rng(700)
    for turns, seq_len, pad_id in [(1, 24, 0), (2, 40, -3), (3, 64, 5)]:
        ids, mask = _chat(rng, turns)
        got = impl.sft_example(ids, mask, seq_len, pad_id=pad_id)
        _check_arrays(got, _sft_ref(ids, mask, seq_len, pad_id), ("inputs", "targets", "weights", "positions"),
                      f"{len(ids)} tokens into seq_len={seq_len}")
    ids, mask = _chat(rng)
    exact = impl.sft_example(ids, mask, len(ids) - 1)  # an exact fit: no padding at all
    _check_arrays(exact, _sft_ref(ids, mask, len(ids) - 1, 0), ("inputs", "targets", "weights", "positions"),
                  "an exact fit")


@graded("sft_example")
def test_sft_example_trains_on_completions_only(impl):
    """the weighted targets are exactly the reply tokens, stop tokens included; no prompt token is a target"""
    rng = _rng(710)
    for turns in (1, 3):
        ids, mask = _chat(rng, turns, lo=3, hi=10)
        got = impl.sft_example(ids, mask, 64)
        weights, targets = np.asarray(got["weights"]), np.asarray(got["targets"])
        replies = [t for t, m in zip(ids, mask) if m]
        np.testing.assert_array_equal(targets[weights > 0], replies,
                                      err_msg="weighted targets must be the reply tokens (the mask shifts too)")
        assert weights.sum() == sum(mask), f"{weights.sum()} weighted targets, expected {sum(mask)}"
        assert np.sum(targets[weights > 0] == 1) == turns, "every reply's stop token must be trained on"


@graded("sft_example")
def test_sft_example_too_long(impl):
    """raises ValueError when the example does not fit (no silent truncation)"""
    ids, mask = _chat(_rng(720), turns=2)
    impl.sft_example(ids, mask, len(ids) - 1)  # fits exactly: len(ids) tokens make len(ids) - 1 pairs
    try:
        impl.sft_example(ids, mask, len(ids) - 2)
    except ValueError:
        return
    raise AssertionError(f"expected ValueError: {len(ids)} tokens need seq_len >= {len(ids) - 1}, got {len(ids) - 2}")


# ----------------------------------------------------------------------------- packing


PACK_KEYS = ("inputs", "targets", "weights", "positions", "segment_ids")


def _pack_ref(examples, seq_len, pad_id):
    rows = []
    for ids, mask in examples:
        n = len(ids) - 1
        if not rows or len(rows[-1][0]) + n > seq_len:
            rows.append(([], [], [], [], []))
        row = rows[-1]
        segment = row[4][-1] + 1 if row[4] else 1
        for column, values in zip(row, (ids[:-1], ids[1:], mask[1:], range(n), [segment] * n)):
            column.extend(values)
    pads = (pad_id, pad_id, 0, -1, 0)
    return {key: np.array([r[i] + [pads[i]] * (seq_len - len(r[i])) for r in rows])
            for i, key in enumerate(PACK_KEYS)}


def _examples(rng: np.random.Generator, count: int, max_len: int):
    out = []
    for _ in range(count):
        n = int(rng.integers(2, max_len + 1))
        split = int(rng.integers(1, n))
        out.append((rng.integers(10, 100, size=n).tolist(), [0] * split + [1] * (n - split)))
    return out


@graded("pack_examples")
def test_pack_examples_matches_reference(impl):
    """fills rows greedily in order; segment ids 1, 2, ... per row; positions restart; padding 0 / -1"""
    rng = _rng(800)
    for count, seq_len, max_len, pad_id in [(7, 16, 9, 0), (20, 32, 33, -1), (5, 8, 9, 3)]:
        examples = _examples(rng, count, max_len)
        got = impl.pack_examples(examples, seq_len, pad_id=pad_id)
        _check_arrays(got, _pack_ref(examples, seq_len, pad_id), PACK_KEYS, f"{count} examples, seq_len={seq_len}")


@graded("pack_examples")
def test_pack_examples_keeps_examples_apart(impl):
    """each segment is one whole example at positions 0..n-1; fewer rows than examples; all targets kept"""
    rng = _rng(810)
    examples = _examples(rng, 30, 12)
    got = {k: np.asarray(v) for k, v in impl.pack_examples(examples, 48).items()}
    rows = got["inputs"].shape[0]
    assert rows < len(examples), f"{rows} rows for {len(examples)} short examples: pack several into a row"
    assert got["weights"].sum() == sum(sum(m[1:]) for _, m in examples), "every completion target must be kept"
    found = []
    for r in range(rows):
        for s in np.unique(got["segment_ids"][r]):
            where = got["segment_ids"][r] == s
            if s == 0:
                assert np.all(got["positions"][r][where] == -1) and np.all(got["weights"][r][where] == 0), \
                    "segment 0 is padding: position -1, weight 0"
                continue
            np.testing.assert_array_equal(got["positions"][r][where], np.arange(where.sum()),
                                          err_msg="positions restart at 0 in every example")
            found.append(got["inputs"][r][where].tolist() + [int(got["targets"][r][where][-1])])
    assert found == [ids for ids, _ in examples], "each segment must hold one whole example, in order"


@graded("pack_examples")
def test_pack_examples_too_long(impl):
    """raises ValueError for an example longer than a row"""
    examples = _examples(_rng(820), 3, 8) + [(list(range(10, 28)), [0] * 9 + [1] * 9)]  # 17 pairs
    try:
        impl.pack_examples(examples, 16)
    except ValueError:
        return
    raise AssertionError("expected ValueError for an example of 17 (input, target) pairs with seq_len=16")


# ----------------------------------------------------------------------------- gradient accumulation


def _token_loss(params, batch):
    """A one-layer language model: (token-mean cross-entropy, token count)."""
    h = jnp.tanh(params["embed"][batch["inputs"]])  # [B, T, D]
    logits = h @ params["head"]["w"] + params["head"]["b"]  # [B, T, V]
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, batch["targets"][..., None], -1)[..., 0]
    count = jnp.sum(batch["weights"])
    return jnp.sum(nll * batch["weights"]) / jnp.where(count > 0, count, 1.0), count


def _lm_setup(seed: int, token_counts, V: int = 13, D: int = 6, T: int = 8):
    """Params and one micro-batch per entry of token_counts (each 2 rows; that many tokens weighted)."""
    rng = _rng(seed)
    params = {"embed": _f32(rng.normal(size=(V, D))),
              "head": {"w": _f32(rng.normal(size=(D, V)) * 0.5), "b": _f32(rng.normal(size=V) * 0.1)}}
    batches = []
    for n in token_counts:
        weights = (np.arange(2 * T) < n).astype(np.float32)
        rng.shuffle(weights)
        batches.append({"inputs": jnp.asarray(rng.integers(0, V, size=(2, T)), jnp.int32),
                        "targets": jnp.asarray(rng.integers(0, V, size=(2, T)), jnp.int32),
                        "weights": jnp.asarray(weights.reshape(2, T))})
    return params, batches


_reference = jax.jit(jax.value_and_grad(_token_loss, has_aux=True))


def _big_batch(batches):
    return {k: jnp.concatenate([b[k] for b in batches]) for k in batches[0]}


def _accumulate_jit(impl, params, batches):
    """The learner's accumulate_grads under jit, as the trainer runs it (and one compile instead of many ops)."""
    return jax.jit(impl.accumulate_grads, static_argnums=0)(_token_loss, params, batches)


def _check_grads(got, params, batches, where: str):
    assert isinstance(got, tuple) and len(got) == 2, f"{where}: return (loss, grads)"
    loss, grads = got
    (want_loss, _), want = _reference(params, _big_batch(batches))
    assert jax.tree.structure(grads) == jax.tree.structure(params), \
        f"{where}: grads must have the structure of params, got {jax.tree.structure(grads)}"
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5, err_msg=f"{where}: loss")
    for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6,
                                   err_msg=f"{where}: gradient of {jax.tree_util.keystr(path)}")


@graded("accumulate_grads")
def test_accumulate_grads_equals_the_big_batch(impl):
    """micro-batches with unequal token counts give exactly the one-big-batch loss and gradient, under jit"""
    params, batches = _lm_setup(900, token_counts=(3, 16, 7))  # their plain mean gradient is ~50% off
    _check_grads(_accumulate_jit(impl, params, batches), params, batches, "3 micro-batches")


@graded("accumulate_grads")
def test_accumulate_grads_empty_micro_batch(impl):
    """a micro-batch with no tokens changes nothing and makes no NaN"""
    params, batches = _lm_setup(910, token_counts=(5, 0, 11))
    _check_grads(_accumulate_jit(impl, params, batches), params, batches, "with an empty micro-batch")


@graded("accumulate_grads")
def test_accumulate_grads_single_micro_batch(impl):
    """one micro-batch is plain value_and_grad, for any params pytree"""
    params, batches = _lm_setup(920, token_counts=(9,))
    _check_grads(_accumulate_jit(impl, params, batches), params, batches, "1 micro-batch")
