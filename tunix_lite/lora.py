"""LoRA: keep each chosen linear's kernel W frozen and train a low-rank update beside it
(Hu et al. 2021).

    y = x @ W + (alpha / r) * dropout(x) @ A @ B        W [in, out], A [in, r], B [r, out]

`apply_lora` swaps matching `nnx.Linear` modules for `LoRALinear` in place. The adapters are
`nnx.LoRAParam` (a subclass of nnx.Param), so `Trainer(model, tx, loss, wrt=nnx.LoRAParam)` trains
only them while `wrt=nnx.Param` would train everything. The base kernel stays the same nnx.Param at
the same path (`layers.0.attn.q_proj.kernel`), logical axes included,
so sharding rules still apply to it.

QLoRA (`quantize="nf4"` or `"int8"`) stores W quantized instead (see tunix_lite.quantize) and
dequantizes it in every call; only the adapters are float.

Apply LoRA before building the Trainer: its optimizer state is made from the model it is given.
With dropout > 0, call `model.eval()` before evaluating or sampling, `model.train()` to train again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.quantize import FORMATS, QTensor, QuantizedWeight, dequantize, quantize

DEFAULT_TARGETS = (r"attn\.(q|k|v|o)_proj", r"mlp\.(gate|up|down)_proj")


class LoRALinear(nnx.Module):
    """x [..., in] -> x @ W + (alpha / r) * dropout(x) @ A @ B, [..., out].

    W [in, out] is the replaced nnx.Linear's kernel Param, moved over as is. A [in, r] starts random
    and B [r, out] at zero, so a fresh adapter leaves the layer's output exactly unchanged."""

    def __init__(self, linear: nnx.Linear, *, rank: int, alpha: float, dropout: float = 0.0,
                 rngs: nnx.Rngs):
        din, dout = linear.in_features, linear.out_features
        # (in_axis, out_axis)
        self.axes = linear.kernel.get_metadata().get("logical_axes", (None, None))
        self.dtype = linear.dtype
        self._keep_base(linear.kernel)
        # A ~ N(0, 1/in), like the base kernels, so x @ A has the scale of x.
        self.lora_a = nnx.LoRAParam(jax.random.normal(rngs.params(), (din, rank)) * din ** -0.5,
                                    logical_axes=(self.axes[0], None))
        self.lora_b = nnx.LoRAParam(jnp.zeros((rank, dout)), logical_axes=(None, self.axes[1]))
        self.scale = alpha / rank
        self.use_adapters = True  # False in `without_adapters` views: the layer is its frozen base
        # No rng stream when unused: it would be extra state carried through every jitted step.
        self.dropout = nnx.Dropout(dropout, rngs=rngs if dropout else None)

    def _keep_base(self, kernel: nnx.Param):
        self.kernel = kernel

    def base_kernel(self) -> jax.Array:
        """The frozen W [in, out] as a float array."""
        return self.kernel[...]

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.dtype or x.dtype
        x = x.astype(dtype)
        y = x @ self.base_kernel().astype(dtype)
        if not self.use_adapters:
            return y
        # (x @ A) @ B, never A @ B: r is small, so this is 2r(in + out) flops per token,
        # not in * out.
        update = (self.dropout(x) @ self.lora_a[...].astype(dtype)) @ self.lora_b[...].astype(dtype)
        return y + self.scale * update


class QLoRALinear(LoRALinear):
    """LoRALinear whose frozen W is stored quantized (codes + scales as QuantizedWeight,
    not Params)."""

    def __init__(self, linear: nnx.Linear, *, fmt: str, **lora_kwargs):
        self.fmt = fmt  # read by _keep_base, which the parent's __init__ calls
        super().__init__(linear, **lora_kwargs)

    def _keep_base(self, kernel: nnx.Param):
        q = quantize(kernel[...], self.fmt)
        # Logical axes so the quantized base shards like the kernel it replaces: int8 codes are [in,
        # out] with one scale per output column; nf4 blocks run row-major over [in, out], so block
        # rows follow the input axis.
        into, out = kernel.get_metadata().get("logical_axes", (None, None))
        codes_axes, scales_axes = (((into, out), (out,)) if self.fmt == "int8"
                                   else ((into, None), (into,)))
        self.codes = QuantizedWeight(q.codes, logical_axes=codes_axes)
        self.scales = QuantizedWeight(q.scales, logical_axes=scales_axes)
        self.shape = q.shape

    def base_kernel(self) -> jax.Array:
        return dequantize(QTensor(self.codes[...], self.scales[...], self.fmt, self.shape))


# ----------------------------------------------------------------------------- applying and merging


def _name(path: tuple) -> str:
    return ".".join(map(str, path))


def _set_submodule(root: nnx.Module, path: tuple, module: nnx.Module):
    """root.<path> = module, where an int key indexes an nnx.List (`layers.3`)."""
    *parents, last = path
    for key in parents:
        root = root[key] if isinstance(key, int) else getattr(root, key)
    if isinstance(last, int):
        root[last] = module
    else:
        setattr(root, last, module)


def apply_lora(model: nnx.Module, *, rank: int, alpha: float, targets=DEFAULT_TARGETS,
               dropout: float = 0.0, quantize: str | None = None, rngs: nnx.Rngs) -> nnx.Module:
    """Replace, in place, every nnx.Linear whose dotted path (e.g. `layers.0.attn.q_proj`) matches
    one of the `targets` regexes (re.search) by a LoRA layer; with `quantize` ("nf4" | "int8") a
    QLoRA layer. Returns model."""
    if quantize not in (None, *FORMATS):
        raise ValueError(f"unknown quantization format {quantize!r}; "
                         f"choose one of {FORMATS} or None")
    # Materialise the list first: the loop below edits the tree that iter_modules walks.
    linears = [(path, m) for path, m in nnx.iter_modules(model) if isinstance(m, nnx.Linear)]
    chosen = [(path, m) for path, m in linears if any(re.search(t, _name(path)) for t in targets)]
    if not chosen:
        seen = ", ".join(_name(path) for path, _ in linears[:8]) or "none"
        raise ValueError(f"apply_lora: no nnx.Linear path matches {list(targets)}; "
                         f"linear layers include: {seen}")
    for path, linear in chosen:
        if getattr(linear, "bias", None) is not None:
            raise ValueError(f"apply_lora: {_name(path)} has a bias, "
                             "which LoRALinear does not carry")
        kwargs = dict(rank=rank, alpha=alpha, dropout=dropout, rngs=rngs)
        layer = (LoRALinear(linear, **kwargs) if quantize is None
                 else QLoRALinear(linear, fmt=quantize, **kwargs))
        _set_submodule(model, path, layer)
    return model


def lora_layers(model: nnx.Module) -> list[tuple[tuple, LoRALinear]]:
    """(path, layer) for every LoRA / QLoRA layer in the model."""
    return [(path, m) for path, m in nnx.iter_modules(model) if isinstance(m, LoRALinear)]


def merge_lora(model: nnx.Module) -> nnx.Module:
    """A copy of `model` with every LoRA layer folded into a plain nnx.Linear: W' = W + (alpha / r)
    A @ B (a QLoRA base is dequantized first, so W' is float).

    The LoRA model itself is left untouched, so "unmerging" is keeping it: exact by construction,
    where subtracting A @ B back from W' would not restore W bit for bit. The copy shares every
    unchanged array with the original (nnx.clone copies Variables,
    not the immutable arrays inside them)."""
    merged = nnx.clone(model)
    for path, layer in lora_layers(merged):
        # Merge at full precision: on TPU/GPU the default matmul precision would round A @ B
        # to bf16.
        delta = jnp.matmul(layer.lora_a[...], layer.lora_b[...],
                           precision=jax.lax.Precision.HIGHEST)
        kernel = layer.base_kernel() + layer.scale * delta
        din, dout = kernel.shape
        linear = nnx.Linear(din, dout, use_bias=False, dtype=layer.dtype, rngs=nnx.Rngs(0),
                            kernel_init=lambda *_, k=kernel: k,
                            kernel_metadata={"logical_axes": layer.axes})
        _set_submodule(merged, path, linear)
    return merged


def without_adapters(model: nnx.Module) -> nnx.Module:
    """The base model under the adapters, as a view: a copy of the module tree whose LoRA layers
    skip their adapters, sharing every base array with `model` (nnx.clone copies Variables, not the
    arrays inside them).

    This is the free reference policy of LoRA preference tuning and RL: the frozen base never
    changes, so the view stays the base while the adapters train, and costs no second copy of the
    weights. Pass it as the trainer's `frozen`."""
    view = nnx.clone(model)
    layers = lora_layers(view)
    if not layers:
        raise ValueError("without_adapters: the model has no LoRA layers (apply_lora first, "
                         "or use nnx.clone(model) as the frozen reference of full fine-tuning)")
    for _, layer in layers:
        layer.use_adapters = False
    view.eval()
    return view


def count_params(model: nnx.Module, filter=nnx.Param) -> int:
    """Number of scalars in the variables `filter` selects. nnx.Param counts adapters too (LoRAParam
    is a Param); quantized kernels are QuantizedWeight, so neither filter counts them."""
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, filter)))


# ------------------------------------------------------------------------- adapter files and export


def lora_state(model: nnx.Module) -> nnx.State:
    """The adapters only (every nnx.LoRAParam), e.g. for an adapter-only checkpoint."""
    return nnx.state(model, nnx.LoRAParam)


def save_adapters(model: nnx.Module, path: str | Path) -> Path:
    """Write the adapter tensors (`layers.0.attn.q_proj.lora_a`, ...) to a safetensors file, with
    each layer's alpha / r in the metadata so a load into differently scaled layers is caught."""
    from safetensors.numpy import save_file

    tensors = {_name(p): np.asarray(jax.device_get(v[...]))
               for p, v in nnx.to_flat_state(lora_state(model))}
    scales = {_name(p): layer.scale for p, layer in lora_layers(model)}
    save_file(tensors, path, metadata={"format": "tunix_lite-lora", "scales": json.dumps(scales)})
    return Path(path)


def load_adapters(model: nnx.Module, path: str | Path) -> nnx.Module:
    """Load adapters written by save_adapters into a model that has the same LoRA layers
    (in place)."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    tensors = load_file(path)
    with safe_open(path, "np") as f:
        scales = json.loads((f.metadata() or {}).get("scales", "{}"))
    flat = nnx.to_flat_state(lora_state(model))
    expected = {_name(p) for p, _ in flat}
    missing, unexpected = sorted(expected - tensors.keys()), sorted(tensors.keys() - expected)
    if missing or unexpected:
        raise ValueError(f"{path}: adapters do not match the model's LoRA layers; "
                         f"missing {missing[:4]}, unexpected {unexpected[:4]}")
    for p, layer in lora_layers(model):
        if _name(p) in scales and not np.isclose(scales[_name(p)], layer.scale):
            raise ValueError(f"{path}: {_name(p)} was trained with alpha/r = {scales[_name(p)]}, "
                             f"the model's layer has {layer.scale}")
    for p, var in flat:
        value = tensors[_name(p)]
        if value.shape != var.shape:
            raise ValueError(f"{path}: {_name(p)} has shape {value.shape}, "
                             f"the model expects {var.shape} (a different rank?)")
        var.set_value(jnp.asarray(value, var.dtype))
    nnx.update(model, nnx.from_flat_state(flat))
    return model


def export_merged(model: nnx.Module, directory: str | Path, dtype=np.float32) -> Path:
    """Merge the adapters and write a Hugging Face checkpoint (config.json + model.safetensors):
    the weights alone. `tunix_lite.export.write_model` writes the same with the tokenizer beside
    them, which is what every run and export writes."""
    from tunix_lite.weights.hf import save_hf_model

    return save_hf_model(merge_lora(model), directory, dtype)
