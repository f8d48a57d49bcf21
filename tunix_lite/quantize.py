"""Frozen weights stored in 8 or 4 bits for QLoRA (Dettmers et al. 2023), dequantized on the fly.

- int8: one scale per output channel, w ≈ q * absmax / 127 with q in [-127, 127]. Error ≤ half a
  step, absmax / 127 / 2. Bytes per weight: 1 + 4 / in_features.
- nf4: blocks of 64 consecutive weights (row-major over [in, out]), w ≈ NF4[i] * absmax_block, the
  4-bit indices packed two per byte. Error ≤ half the widest gap between adjacent codes (that
  between -1 and -0.696) times the block's absmax. Bytes per weight: 0.5 + 4 / 64.

Departures from the QLoRA paper: the block scales stay float32 (QLoRA quantizes them again to 8
bits, "double quantization", 0.127 instead of 0.5 bits per weight); no paged optimizer; the whole
kernel is dequantized inside each layer call, so the saving is in the stored weights, not in a
layer's peak.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

# The 16 NF4 values: quantiles of N(0, 1) rescaled to [-1, 1], with an exact 0 (QLoRA, Appendix E).
# NumPy, not jnp: a jnp array here would start the JAX backend at import (before fake-device flags).
NF4 = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
], np.float32)
NF4_BLOCK = 64
FORMATS = ("int8", "nf4")


class QTensor(NamedTuple):
    """A quantized 2-D weight. Pass its arrays through jit, not the tuple:
    fmt and shape are static."""

    codes: jax.Array  # int8: int8 [in, out]; nf4: uint8 [n_blocks, 32], two 4-bit indices per byte
    scales: jax.Array  # float32; int8: [out]; nf4: [n_blocks], the block absmax
    fmt: str
    shape: tuple[int, ...]  # the original weight's shape


class QuantizedWeight(nnx.Variable):
    """Codes or scales of a frozen quantized kernel. Not an nnx.Param, so `wrt` filters (gradients
    and the optimizer) never select it, under nnx.Param or nnx.LoRAParam alike."""


# Jitted with the format static: one compile per weight shape,
# instead of one per eager op and shape.
@partial(jax.jit, static_argnames="fmt")
def _quantize(w: jax.Array, fmt: str) -> tuple[jax.Array, jax.Array]:
    if fmt == "int8":
        step = jnp.max(jnp.abs(w), axis=0) / 127  # [out]
        # a zero column stays 0
        codes = jnp.clip(jnp.round(w / jnp.where(step == 0, 1.0, step)), -127, 127)
        return codes.astype(jnp.int8), step
    flat = jnp.pad(w.reshape(-1), (0, -w.size % NF4_BLOCK))  # zero-pad so every block is full
    blocks = flat.reshape(-1, NF4_BLOCK)  # [n_blocks, 64]
    absmax = jnp.max(jnp.abs(blocks), axis=1)  # [n_blocks]
    normed = blocks / jnp.where(absmax == 0, 1.0, absmax)[:, None]  # in [-1, 1]
    # The nearest code is the number of the 15 midpoints between codes that lie below the value.
    idx = jnp.searchsorted((NF4[1:] + NF4[:-1]) / 2, normed, method="compare_all").astype(jnp.uint8)
    return idx[:, 0::2] | (idx[:, 1::2] << 4), absmax  # two 4-bit indices per byte


@partial(jax.jit, static_argnames=("fmt", "shape", "dtype"))
def _dequantize(codes: jax.Array, scales: jax.Array, fmt: str, shape: tuple, dtype) -> jax.Array:
    if fmt == "int8":
        return (codes.astype(jnp.float32) * scales).astype(dtype)
    idx = jnp.stack([codes & 0xF, codes >> 4], axis=-1).reshape(codes.shape[0], NF4_BLOCK)  # unpack
    w = jnp.asarray(NF4)[idx] * scales[:, None]  # [n_blocks, 64]
    return w.reshape(-1)[: math.prod(shape)].reshape(shape).astype(dtype)


def quantize(w: jax.Array, fmt: str) -> QTensor:
    """w [in, out] float -> QTensor in `fmt` ("int8" or "nf4")."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown quantization format {fmt!r}; choose one of {FORMATS}")
    w = jnp.asarray(w, jnp.float32)
    return QTensor(*_quantize(w, fmt), fmt, w.shape)


def dequantize(q: QTensor, dtype=jnp.float32) -> jax.Array:
    """QTensor -> w [in, out] in `dtype`. Also traceable:
    QLoRALinear calls it in the jitted forward."""
    return _dequantize(q.codes, q.scales, q.fmt, tuple(q.shape), jnp.dtype(dtype))


def _nbytes(model: nnx.Module, *filters) -> int:
    # size * itemsize, not .nbytes: also works on nnx.eval_shape models (shapes only,
    # nothing allocated)
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model, *filters)))


def memory_report(model: nnx.Module, *, wrt=nnx.LoRAParam, moments: int = 2) -> dict[str, int]:
    """Bytes by category: float base weights (every nnx.Param that is not an adapter: embeddings,
    norms, unquantized kernels), quantized base weights, adapters, and an optimizer-state estimate
    of `moments` copies of the trained (`wrt`) variables (2 for Adam's m and v)."""
    report = {
        "base_float": _nbytes(model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))),
        "base_quantized": _nbytes(model, QuantizedWeight),
        "adapters": _nbytes(model, nnx.LoRAParam),
        "optimizer_estimate": moments * _nbytes(model, wrt),
    }
    return report | {"total": sum(report.values())}
