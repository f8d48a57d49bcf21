"""Hidden tests for phase 3: every public check (tunix_lite/course/graded/phase03.py), then each
exercise again on inputs the public tests never draw (a one-row, one-token batch and a large
vocabulary, three-turn chats that fill their row exactly, many tiny chats, eight micro-batches), so
code fitted to the public inputs fails here. Rotate the second part per cohort.

    tunix-lite grade solutions/03_sft_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

from tunix_lite.course.graded import graded, include, phase03
from tunix_lite.course.graded.phase03 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    PACK_KEYS,
    ROW_KEYS,
    _accumulate_jit,
    _chat,
    _check_arrays,
    _check_grads,
    _check_loss,
    _examples,
    _lm_setup,
    _loss_inputs,
    _pack_ref,
    _sft_ref,
    _token_loss,
)

include(phase03, globals())


@graded("masked_next_token_loss")
def test_hidden_masked_next_token_loss_odd_shapes(impl, rng):
    """one row whose single weighted token is the last, and a 300-token vocabulary"""
    logits, targets, weights = _loss_inputs(rng, B=1, T=5, V=int(rng.integers(200, 400)))
    weights[:] = 0.0
    weights[0, -1] = 1.0
    _check_loss(impl, logits, targets, weights)
    _check_loss(impl, logits, targets, weights, eps=float(rng.uniform(0.05, 0.3)))


@graded("sft_example")
def test_hidden_sft_example_three_turns_exactly_full(impl, rng):
    """a three-turn chat whose length is exactly seq_len + 1: no padding, every reply trained on"""
    pad_id = int(rng.integers(-3, 3))
    ids, mask = _chat(rng, turns=3, lo=1, hi=4)
    seq_len = len(ids) - 1
    got = impl.sft_example(ids, mask, seq_len, pad_id=pad_id)
    _check_arrays(got, _sft_ref(ids, mask, seq_len, pad_id), ROW_KEYS,
                  f"three turns, {len(ids)} tokens into {seq_len}")


@graded("pack_examples")
def test_hidden_pack_examples_many_tiny_chats(impl, rng):
    """sixty chats of two or three tokens into rows of 5: first fit, segment ids in placement
    order"""
    examples = _examples(rng, 60, 3)
    pad_id = int(rng.integers(-2, 3))
    got = impl.pack_examples(examples, 5, pad_id=pad_id)
    _check_arrays(got, _pack_ref(examples, 5, pad_id), PACK_KEYS, "60 tiny chats, seq_len=5")


@graded("accumulate_grads")
def test_hidden_accumulate_grads_eight_micro_batches(impl, rng):
    """eight micro-batches, two of them without a weighted token, on a wider model"""
    counts = [int(c) for c in rng.integers(1, 17, size=8)]
    for i in rng.choice(8, size=2, replace=False):
        counts[int(i)] = 0
    params, stacked = _lm_setup(rng, counts, V=21, D=9)
    _check_grads(_accumulate_jit(impl, _token_loss, params, stacked), params, stacked,
                 f"tokens {counts}")
