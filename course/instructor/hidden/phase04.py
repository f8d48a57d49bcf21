"""Hidden tests for phase 4: every public check (tunix_lite/course/graded/phase04.py), then each
exercise again on inputs the public tests never draw (a rank as large as the layer, six adapters,
square and one-row matrices, a constant column, blocks and groups that divide nothing), so code
fitted to the public inputs fails here. Rotate the second part per cohort.

    tunix-lite grade solutions/04_lora_exercises.ipynb --tests course/instructor/hidden
"""

from __future__ import annotations

import numpy as np

from tunix_lite.course.graded import graded, include, phase04
from tunix_lite.course.graded.phase04 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    _adapters,
    _check_dq,
    _check_int8,
    _check_memory,
    _forward,
    _lora_inputs,
    _lora_ref,
    _memory_ref,
    _merge,
    _merge_ref,
)

include(phase04, globals())


@graded("lora_forward")
def test_hidden_lora_forward_full_rank(impl, rng):
    """a rank as large as the narrower side of the layer, on one token"""
    din, dout = int(rng.integers(3, 7)), int(rng.integers(3, 7))
    x, w, a, b = _lora_inputs(rng, lead=(1,), din=din, dout=dout, rank=min(din, dout))
    alpha = float(rng.uniform(0.5, 64.0))
    np.testing.assert_allclose(np.asarray(_forward(impl, x, w, a, b, alpha)),
                               _lora_ref(x, w, a, b, alpha), rtol=1e-5, atol=1e-5,
                               err_msg=f"rank {min(din, dout)} on a {din} x {dout} layer")


@graded("merge_lora")
def test_hidden_merge_lora_six_adapters(impl, rng):
    """six adapters on a square layer, some with a negative weight"""
    size = int(rng.integers(4, 24))
    _, w, _, _ = _lora_inputs(rng, din=size, dout=size)
    adapters = _adapters(rng, size, size, 6)
    np.testing.assert_allclose(_merge(impl, w, adapters), _merge_ref(w, adapters), rtol=1e-4,
                               atol=1e-5, err_msg="six adapters")


@graded("lora_memory")
def test_hidden_lora_memory_one_row_layers(impl, rng):
    """matrices with one row or one column, and a rank larger than either side"""
    shapes = [(1, int(rng.integers(1, 500))), (int(rng.integers(1, 500)), 1), (1, 1)]
    for rank in (1, int(rng.integers(40, 80))):
        _check_memory(impl.lora_memory(shapes, rank), _memory_ref(shapes, rank),
                      f"shapes={shapes}, rank={rank}")


@graded("quantize_int8")
def test_hidden_quantize_int8_constant_and_one_row(impl, rng):
    """a matrix of one row, and a column whose every entry is the same nonzero value"""
    one_row = rng.normal(size=(1, int(rng.integers(2, 9)))).astype(np.float32)
    _check_int8(impl.quantize_int8(one_row), one_row, "one row")
    w = rng.normal(size=(10, 4)).astype(np.float32)
    w[:, int(rng.integers(4))] = np.float32(rng.uniform(-3.0, 3.0))
    *_, deq = _check_int8(impl.quantize_int8(w), w, "a constant column")
    assert np.all(np.isfinite(deq)), "a constant column must not give NaN"


@graded("quantize_nf4_dq")
def test_hidden_quantize_nf4_dq_ragged_blocks(impl, rng):
    """a weight count that no block size divides, with a group size that divides no block count"""
    shape = (int(rng.integers(5, 12)) * 2 + 1, 13)
    w = (rng.normal(size=shape) * rng.uniform(0.01, 0.1)).astype(np.float32)
    _check_dq(impl.quantize_nf4_dq(w, block=32, group=3), w, 32, 3,
              f"w {shape}, block 32, group 3")
