"""Graded tests for phase 3 (solutions/03_sft_exercises.ipynb): the data and loss side of supervised fine-tuning.

Each exercise goes a step past the lesson: label smoothing in the token-weighted loss, a truncation policy that
keeps the reply (cut the prompt's start instead), first-fit packing (fewer rows than the library's greedy
packing), and exact gradient accumulation as one `lax.scan` over stacked micro-batches. References are numpy
in float64 (or the one-big-batch gradient); every input comes from `rng`. Shapes: B batch, T tokens, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.calls import equations
from tunix_lite.course.graded import graded

__all__ = [
    "test_masked_next_token_loss_matches_numpy", "test_masked_next_token_loss_stable_for_large_logits",
    "test_masked_next_token_loss_no_tokens", "test_masked_next_token_loss_gradient",
    "test_sft_example_matches_reference", "test_sft_example_trains_on_completions_only",
    "test_sft_example_left_truncation_keeps_the_reply", "test_sft_example_too_long",
    "test_pack_examples_matches_first_fit", "test_pack_examples_keeps_examples_apart",
    "test_pack_examples_never_more_rows_than_greedy", "test_pack_examples_too_long",
    "test_accumulate_grads_equals_the_big_batch", "test_accumulate_grads_empty_micro_batch",
    "test_accumulate_grads_is_one_scan", "test_accumulate_grads_single_micro_batch",
]

HINTS = {
    "masked_next_token_loss": [
        "Label smoothing trains towards (1 - eps) on the target and eps spread evenly over the whole vocabulary, "
        "so each token's loss mixes the usual -log p(target) with the average -log p over all V tokens. The batch "
        "loss is still a mean over weighted tokens of the whole batch.",
        "log p = jax.nn.log_softmax(logits) (never log(softmax(...))); per token: (1 - eps) * nll + eps * "
        "(-mean of log p over V); then sum(loss * w) / sum(w), with a guarded division when sum(w) is 0.",
        "logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1); nll = -jnp.take_along_axis(logp, "
        "targets[..., None], -1)[..., 0]; tok = (1 - label_smoothing) * nll - label_smoothing * logp.mean(-1)",
    ],
    "sft_example": [
        "A chat of n + 1 tokens makes n (input, target) pairs, and the loss mask shifts with the targets. When it "
        "does not fit, 'left' drops tokens from the start of the prompt (keeping the first token, BOS), never a "
        "token the loss trains on.",
        "Build the full pairs first: inputs = ids[:-1], targets = ids[1:], weights = mask[1:], positions 0..n-1. "
        "For 'left' with n > seq_len, remove the d = n - seq_len tokens right after BOS from ids and mask before "
        "building the pairs; if any of them has mask 1, raise ValueError.",
        "if n > seq_len: if truncation != 'left' or any(mask[1:1 + d]): raise ValueError(...); ids = ids[:1] + "
        "ids[1 + d:]; mask = mask[:1] + mask[1 + d:]",
    ],
    "pack_examples": [
        "First-fit: each chat, in order, goes into the first row (lowest index) that still has room for its "
        "pairs; only when no row has room does it open a new row. Inside a row, chats keep the order they arrived "
        "in, each with its own segment id and positions from 0.",
        "Keep a list of rows (each a list of chats) and how many slots each has used; place chat i in the first "
        "row with used + n <= seq_len. Then write the rows out: segment ids 1, 2, ... in placement order; "
        "padding: pad_id, weight 0, position -1, segment 0.",
        "for ids, mask in examples: n = len(ids) - 1; r = next((r for r, u in enumerate(used) if u + n <= seq_len), "
        "None); if r is None: rows.append([]); used.append(0); r = len(rows) - 1; rows[r].append((ids, mask)); "
        "used[r] += n",
    ],
    "accumulate_grads": [
        "The big batch's loss is a mean over all its tokens, so a micro-batch with more tokens must count more: "
        "weigh each micro-batch's loss and gradient by its token count. Running the micro-batches in one "
        "jax.lax.scan keeps one compiled step and one micro-batch in memory at a time.",
        "jax.lax.scan(body, carry, micro_batches) hands body one micro-batch (a slice of the leading axis) at a "
        "time. Carry (sum of n * loss, sum of n * grads, sum of n); at the end divide by the total count, guarded "
        "against 0.",
        "def body(carry, batch): (loss, n), g = jax.value_and_grad(loss_fn, has_aux=True)(params, batch); "
        "return (carry[0] + n * loss, jax.tree.map(lambda s, x: s + n * x, carry[1], g), carry[2] + n), None",
    ],
}

FORBIDDEN = {
    "masked_next_token_loss": ("tunix_lite.training", "optax.softmax_cross_entropy",
                               "optax.softmax_cross_entropy_with_integer_labels", "optax.smooth_labels",
                               "optax.losses"),
    "sft_example": ("tunix_lite.data",),
    "pack_examples": ("tunix_lite.data",),
    "accumulate_grads": ("tunix_lite.training",),
}


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _ragged_weights(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """0/1 [B, T]: a prompt of zeros, a completion of ones, then padding, different per row."""
    start = rng.integers(0, length // 2, size=batch)
    end = rng.integers(length // 2, length + 1, size=batch)
    t = np.arange(length)[None, :]
    return ((t >= start[:, None]) & (t < end[:, None])).astype(np.float32)


# ----------------------------------------------------------------------------- the loss, with label smoothing


def _loss_ref(logits, targets, weights, eps) -> tuple[float, float]:
    logits = np.asarray(logits, np.float64)
    top = logits.max(-1, keepdims=True)
    logp = logits - (top + np.log(np.exp(logits - top).sum(-1, keepdims=True)))
    nll = -np.take_along_axis(logp, np.asarray(targets)[..., None], -1)[..., 0]
    per_token = (1 - eps) * nll - eps * logp.mean(-1)
    w = np.asarray(weights, np.float64)
    return float((per_token * w).sum() / max(w.sum(), 1.0)), float(w.sum())


def _loss_inputs(rng, B=3, T=6, V=11, scale=2.0):
    logits = (rng.normal(size=(B, T, V)) * scale).astype(np.float32)
    targets = rng.integers(0, V, size=(B, T)).astype(np.int32)
    return logits, targets, _ragged_weights(rng, B, T)


def _loss(impl, logits, targets, weights, eps=None):
    kwargs = {} if eps is None else {"label_smoothing": eps}
    return jax.jit(lambda x, t, w: impl.masked_next_token_loss(x, t, w, **kwargs))(
        _f32(logits), jnp.asarray(targets), jnp.asarray(weights))


def _check_loss(impl, logits, targets, weights, eps=None, rtol=1e-5):
    out = _loss(impl, logits, targets, weights, eps)
    assert isinstance(out, tuple) and len(out) == 2, "return a tuple (loss, token_count)"
    loss, tokens = (float(v) for v in out)
    want_loss, want_tokens = _loss_ref(logits, targets, weights, eps or 0.0)
    np.testing.assert_allclose(tokens, want_tokens, err_msg="token_count is the sum of the weights")
    np.testing.assert_allclose(loss, want_loss, rtol=rtol, atol=1e-6,
                               err_msg=f"label_smoothing={eps}: sum(per-token loss * weights) / sum(weights)")


@graded("masked_next_token_loss", reference=True)
def test_masked_next_token_loss_matches_numpy(impl, rng):
    """matches a token-weighted numpy reference with and without label smoothing (float and bool weights, jit)"""
    for B, T, V in [(3, 6, 11), (2, 9, int(rng.integers(5, 40)))]:
        logits, targets, weights = _loss_inputs(rng, B, T, V)
        _check_loss(impl, logits, targets, weights)
        _check_loss(impl, logits, targets, weights.astype(bool), eps=float(rng.uniform(0.05, 0.3)))


@graded("masked_next_token_loss")
def test_masked_next_token_loss_stable_for_large_logits(impl, rng):
    """stays finite and correct for logits in the hundreds and thousands, with smoothing too"""
    logits, targets, weights = _loss_inputs(rng, B=2, T=5, V=13, scale=300.0)
    logits += 5_000.0
    _check_loss(impl, logits, targets, weights, eps=0.1, rtol=1e-4)


@graded("masked_next_token_loss")
def test_masked_next_token_loss_no_tokens(impl, rng):
    """all-zero weights give loss 0.0, count 0 and a zero (not NaN) gradient"""
    logits, targets, _ = _loss_inputs(rng)
    zeros = jnp.zeros(targets.shape, jnp.float32)
    loss, tokens = _loss(impl, logits, targets, zeros, 0.1)
    assert float(loss) == 0.0 and float(tokens) == 0.0, f"expected (0.0, 0.0), got ({float(loss)}, {float(tokens)})"
    grad = jax.jit(jax.grad(lambda x: impl.masked_next_token_loss(x, jnp.asarray(targets), zeros, 0.1)[0]))(
        _f32(logits))
    assert np.all(np.asarray(grad) == 0.0), "the gradient of an empty batch must be exactly zero (no NaN)"


@graded("masked_next_token_loss")
def test_masked_next_token_loss_gradient(impl, rng):
    """d loss / d logits = (softmax - smoothed one-hot) * weight / tokens: zero on masked positions"""
    logits, targets, weights = _loss_inputs(rng, B=2, T=7, V=9)
    eps = float(rng.uniform(0.0, 0.3))
    grad = jax.jit(jax.grad(lambda x: impl.masked_next_token_loss(
        x, jnp.asarray(targets), jnp.asarray(weights), label_smoothing=eps)[0]))(_f32(logits))
    x = logits.astype(np.float64)
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    smoothed = (1 - eps) * np.eye(x.shape[-1])[targets] + eps / x.shape[-1]
    want = (probs - smoothed) * weights[..., None] / weights.sum()
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- one example, truncated from the left

ROW_KEYS = ("inputs", "targets", "weights", "positions")


def _sft_ref(ids, mask, seq_len, pad_id, truncation="error"):
    n = len(ids) - 1
    if n > seq_len:
        drop = n - seq_len
        if truncation != "left" or any(mask[1:1 + drop]):
            raise ValueError
        ids, mask, n = ids[:1] + ids[1 + drop:], mask[:1] + mask[1 + drop:], seq_len
    out = {"inputs": np.full(seq_len, pad_id), "targets": np.full(seq_len, pad_id),
           "weights": np.zeros(seq_len), "positions": np.full(seq_len, -1)}
    out["inputs"][:n], out["targets"][:n] = ids[:-1], ids[1:]
    out["weights"][:n], out["positions"][:n] = mask[1:], np.arange(n)
    return out


def _chat(rng: np.random.Generator, turns: int = 1, lo: int = 1, hi: int = 8, prompt_lo: int | None = None):
    """(ids, mask): BOS then turns of (prompt, reply); the reply tokens (ending with a stop token 1) are masked in."""
    ids, mask = [2], [0]
    for _ in range(turns):
        prompt_len = rng.integers(prompt_lo, prompt_lo + 8) if prompt_lo else rng.integers(lo, hi)
        prompt = rng.integers(10, 100, size=prompt_len).tolist()
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


@graded("sft_example", reference=True)
def test_sft_example_matches_reference(impl, rng):
    """shifts by one and pads; with truncation='left' a long prompt loses its start (after BOS), not its reply"""
    for turns, extra, pad_id in [(1, 5, 0), (2, 0, int(rng.integers(-5, 0)))]:
        ids, mask = _chat(rng, turns)
        seq_len = len(ids) - 1 + extra
        got = impl.sft_example(ids, mask, seq_len, pad_id=pad_id)
        _check_arrays(got, _sft_ref(ids, mask, seq_len, pad_id), ROW_KEYS, f"{len(ids)} tokens into {seq_len}")
    ids, mask = _chat(rng, 1, lo=2, hi=6, prompt_lo=12)
    seq_len = len(ids) - 1 - int(rng.integers(1, 8))  # cut only prompt tokens
    got = impl.sft_example(ids, mask, seq_len, truncation="left")
    _check_arrays(got, _sft_ref(ids, mask, seq_len, 0, "left"), ROW_KEYS, f"'left' from {len(ids)} into {seq_len}")


@graded("sft_example")
def test_sft_example_trains_on_completions_only(impl, rng):
    """the weighted targets are exactly the reply tokens, stop tokens included; no prompt token is a target"""
    for turns in (1, 3):
        ids, mask = _chat(rng, turns, lo=3, hi=10)
        got = impl.sft_example(ids, mask, 64)
        weights, targets = np.asarray(got["weights"]), np.asarray(got["targets"])
        replies = [t for t, m in zip(ids, mask) if m]
        np.testing.assert_array_equal(targets[weights > 0], replies,
                                      err_msg="weighted targets must be the reply tokens (the mask shifts too)")
        assert np.sum(targets[weights > 0] == 1) == turns, "every reply's stop token must be trained on"


@graded("sft_example")
def test_sft_example_left_truncation_keeps_the_reply(impl, rng):
    """a cut row starts with BOS at position 0, is full, and still trains on the whole reply and its stop token"""
    ids, mask = _chat(rng, 1, lo=3, hi=8, prompt_lo=20)
    seq_len = sum(mask) + int(rng.integers(2, 6))
    got = impl.sft_example(ids, mask, seq_len, truncation="left")
    inputs, weights, positions = (np.asarray(got[k]) for k in ("inputs", "weights", "positions"))
    assert inputs[0] == ids[0], "the first input is still BOS"
    np.testing.assert_array_equal(positions, np.arange(seq_len), err_msg="a full row, positions 0..seq_len-1")
    np.testing.assert_array_equal(np.asarray(got["targets"])[weights > 0], [t for t, m in zip(ids, mask) if m])


@graded("sft_example")
def test_sft_example_too_long(impl, rng):
    """fits exactly without truncation; one pair too many raises ValueError, and so does 'left' when the reply
    itself does not fit"""
    ids, mask = _chat(rng, turns=2)
    impl.sft_example(ids, mask, len(ids) - 1)  # len(ids) tokens make len(ids) - 1 pairs: an exact fit
    for kwargs, why in [({}, "the default is truncation='error'"),
                        ({"truncation": "left"}, "cutting the prompt is not enough: the first reply would be cut")]:
        try:
            impl.sft_example(ids, mask, sum(mask) - 1, **kwargs)
        except ValueError:
            continue
        raise AssertionError(f"expected ValueError for {len(ids)} tokens into {sum(mask) - 1} pairs: {why}")


# ----------------------------------------------------------------------------- first-fit packing

PACK_KEYS = ("inputs", "targets", "weights", "positions", "segment_ids")


def _first_fit(lengths, seq_len):
    rows, used = [], []
    for i, n in enumerate(lengths):
        r = next((r for r, u in enumerate(used) if u + n <= seq_len), None)
        if r is None:
            rows.append([])
            used.append(0)
            r = len(rows) - 1
        rows[r].append(i)
        used[r] += n
    return rows


def _pack_ref(examples, seq_len, pad_id):
    rows = _first_fit([len(ids) - 1 for ids, _ in examples], seq_len)
    out = {"inputs": np.full((len(rows), seq_len), pad_id), "targets": np.full((len(rows), seq_len), pad_id),
           "weights": np.zeros((len(rows), seq_len)), "positions": np.full((len(rows), seq_len), -1),
           "segment_ids": np.zeros((len(rows), seq_len), int)}
    for r, members in enumerate(rows):
        t = 0
        for segment, i in enumerate(members, start=1):
            ids, mask = examples[i]
            n = len(ids) - 1
            for key, values in zip(PACK_KEYS, (ids[:-1], ids[1:], mask[1:], range(n), [segment] * n)):
                out[key][r, t:t + n] = list(values)
            t += n
    return out


def _examples(rng: np.random.Generator, count: int, max_len: int):
    out = []
    for _ in range(count):
        n = int(rng.integers(2, max_len + 1))
        split = int(rng.integers(1, n))
        out.append((rng.integers(10, 100, size=n).tolist(), [0] * split + [1] * (n - split)))
    return out


@graded("pack_examples", reference=True)
def test_pack_examples_matches_first_fit(impl, rng):
    """each chat goes into the first row with room; segment ids 1, 2, ... in placement order; padding 0 / -1"""
    for count, seq_len, max_len, pad_id in [(9, 16, 12, 0), (25, 32, 33, -1), (6, 8, 9, int(rng.integers(1, 5)))]:
        examples = _examples(rng, count, max_len)
        got = impl.pack_examples(examples, seq_len, pad_id=pad_id)
        _check_arrays(got, _pack_ref(examples, seq_len, pad_id), PACK_KEYS, f"{count} chats, seq_len={seq_len}")


@graded("pack_examples")
def test_pack_examples_keeps_examples_apart(impl, rng):
    """each segment is one whole chat at positions 0..n-1; every chat appears exactly once; all targets kept"""
    examples = _examples(rng, 30, 12)
    got = {k: np.asarray(v) for k, v in impl.pack_examples(examples, 48).items()}
    assert got["weights"].sum() == sum(sum(m[1:]) for _, m in examples), "every completion target must be kept"
    found = []
    for r in range(got["inputs"].shape[0]):
        for s in np.unique(got["segment_ids"][r]):
            where = got["segment_ids"][r] == s
            if s == 0:
                assert np.all(got["positions"][r][where] == -1) and np.all(got["weights"][r][where] == 0), \
                    "segment 0 is padding: position -1, weight 0"
                continue
            np.testing.assert_array_equal(got["positions"][r][where], np.arange(where.sum()),
                                          err_msg="positions restart at 0 in every chat")
            found.append(got["inputs"][r][where].tolist() + [int(got["targets"][r][where][-1])])
    assert sorted(found) == sorted(ids for ids, _ in examples), "each segment must hold one whole chat, each once"


@graded("pack_examples")
def test_pack_examples_never_more_rows_than_greedy(impl, rng):
    """first-fit needs no more rows than greedy in-order packing, and here strictly fewer"""
    long, short = [(list(range(10, 22)), [0] * 6 + [1] * 6)], [([5, 6, 7], [0, 1, 1])]
    examples = long + long + short * int(rng.integers(3, 5))  # greedy in order leaves the first row's tail empty
    rows = np.asarray(impl.pack_examples(examples, 16)["inputs"]).shape[0]
    assert rows == 2, f"{rows} rows (greedy in order needs 3): the short chats fit after the long ones"
    examples = _examples(rng, 40, 20)
    greedy, used = 1, 0
    for ids, _ in examples:
        n = len(ids) - 1
        if used + n > 32:
            greedy, used = greedy + 1, 0
        used += n
    assert np.asarray(impl.pack_examples(examples, 32)["inputs"]).shape[0] <= greedy


@graded("pack_examples")
def test_pack_examples_too_long(impl, rng):
    """a chat of exactly seq_len pairs fits; one pair more raises ValueError"""
    fits = [(rng.integers(10, 99, size=17).tolist(), [0] * 8 + [1] * 9)]  # 16 pairs
    assert np.asarray(impl.pack_examples(fits, 16)["inputs"]).shape == (1, 16)
    too_long = _examples(rng, 3, 8) + [(rng.integers(10, 99, size=18).tolist(), [0] * 9 + [1] * 9)]  # 17 pairs
    try:
        impl.pack_examples(too_long, 16)
    except ValueError:
        return
    raise AssertionError("expected ValueError for a chat of 17 (input, target) pairs with seq_len=16")


# ----------------------------------------------------------------------------- gradient accumulation in one scan


def _token_loss(params, batch):
    """A one-layer language model: (token-mean cross-entropy, token count)."""
    h = jnp.tanh(params["embed"][batch["inputs"]])  # [B, T, D]
    logits = h @ params["head"]["w"] + params["head"]["b"]  # [B, T, V]
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, batch["targets"][..., None], -1)[..., 0]
    count = jnp.sum(batch["weights"])
    return jnp.sum(nll * batch["weights"]) / jnp.where(count > 0, count, 1.0), count


def _lm_setup(rng: np.random.Generator, token_counts, V: int = 13, D: int = 6, T: int = 8):
    """Params and the micro-batches stacked on a leading axis (each 2 rows; that many tokens weighted)."""
    params = {"embed": _f32(rng.normal(size=(V, D))),
              "head": {"w": _f32(rng.normal(size=(D, V)) * 0.5), "b": _f32(rng.normal(size=V) * 0.1)}}
    weights = []
    for n in token_counts:
        w = (np.arange(2 * T) < n).astype(np.float32)
        rng.shuffle(w)
        weights.append(w.reshape(2, T))
    k = len(token_counts)
    stacked = {"inputs": jnp.asarray(rng.integers(0, V, size=(k, 2, T)), jnp.int32),
               "targets": jnp.asarray(rng.integers(0, V, size=(k, 2, T)), jnp.int32),
               "weights": jnp.asarray(np.stack(weights))}
    return params, stacked


_reference = jax.jit(jax.value_and_grad(_token_loss, has_aux=True))


def _accumulate_jit(impl, loss_fn, params, stacked):
    return jax.jit(impl.accumulate_grads, static_argnums=0)(loss_fn, params, stacked)


def _check_grads(got, params, stacked, where: str):
    assert isinstance(got, tuple) and len(got) == 2, f"{where}: return (loss, grads)"
    loss, grads = got
    big = {k: v.reshape(-1, *v.shape[2:]) for k, v in stacked.items()}  # all micro-batches as one batch
    (want_loss, _), want = _reference(params, big)
    assert jax.tree.structure(grads) == jax.tree.structure(params), \
        f"{where}: grads must have the structure of params, got {jax.tree.structure(grads)}"
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5, err_msg=f"{where}: loss")
    for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6,
                                   err_msg=f"{where}: gradient of {jax.tree_util.keystr(path)}")


@graded("accumulate_grads", reference=True)
def test_accumulate_grads_equals_the_big_batch(impl, rng):
    """micro-batches with unequal token counts give exactly the one-big-batch loss and gradient, under jit"""
    counts = (int(rng.integers(1, 5)), 16, int(rng.integers(5, 10)))  # a plain mean of their gradients is far off
    params, stacked = _lm_setup(rng, counts)
    _check_grads(_accumulate_jit(impl, _token_loss, params, stacked), params, stacked, f"tokens {counts}")


@graded("accumulate_grads")
def test_accumulate_grads_empty_micro_batch(impl, rng):
    """a micro-batch with no tokens changes nothing and makes no NaN"""
    params, stacked = _lm_setup(rng, (int(rng.integers(1, 16)), 0, int(rng.integers(1, 16))))
    _check_grads(_accumulate_jit(impl, _token_loss, params, stacked), params, stacked, "with an empty micro-batch")


@graded("accumulate_grads")
def test_accumulate_grads_is_one_scan(impl, rng):
    """one loop in the compiled program (lax.scan or a while loop): the loss is traced once, whatever the count"""
    traces = []

    def counting_loss(params, batch):
        traces.append(1)
        return _token_loss(params, batch)

    for k in (2, 5):
        traces.clear()
        params, stacked = _lm_setup(rng, tuple(int(n) for n in rng.integers(1, 16, size=k)))
        program = equations(impl.accumulate_grads, counting_loss, params, stacked)
        loops = [name for name, _ in program if name in ("scan", "while")]
        assert loops, f"{k} micro-batches: no scan in the program; a Python loop unrolls into {k} copies of the step"
        assert len(traces) <= 2, f"{k} micro-batches traced the loss {len(traces)} times: scan traces it once"


@graded("accumulate_grads")
def test_accumulate_grads_single_micro_batch(impl, rng):
    """one micro-batch is plain value_and_grad, for any params pytree"""
    params, stacked = _lm_setup(rng, (int(rng.integers(1, 17)),))
    _check_grads(_accumulate_jit(impl, _token_loss, params, stacked), params, stacked, "1 micro-batch")
