"""Hugging Face checkpoints <-> tunix_lite models.

A checkpoint directory holds `config.json`, `model.safetensors` (or shards listed in
`model.safetensors.index.json`) and a tokenizer. Loading is a mapping table: our parameter path ->
(HF tensor name, transform), with a shape check on every tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.models.config import ModelConfig, RopeScaling
from tunix_lite.models.transformer import Transformer

_MODEL_TYPES = {"gemma3_text": "gemma3", "gemma3": "gemma3", "llama": "llama3", "qwen3": "qwen3"}
_ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh", "silu": "silu"}


# ----------------------------------------------------------------------------- config.json


def _rope_settings(hf: dict, layer_kind: str) -> dict:
    """The rope dict for one layer kind, from either transformers-5 `rope_parameters` (per layer kind
    for Gemma 3) or the older flat `rope_theta` / `rope_scaling` / `rope_local_base_freq` keys."""
    params = hf.get("rope_parameters")
    if params:
        if "full_attention" in params or "sliding_attention" in params:  # per layer kind (Gemma 3)
            return params.get(layer_kind, params.get("full_attention"))
        return params
    if layer_kind == "sliding_attention" and "rope_local_base_freq" in hf:
        return {"rope_type": "default", "rope_theta": hf["rope_local_base_freq"]}
    return {"rope_type": "default", "rope_theta": hf.get("rope_theta", 10_000.0)} | (hf.get("rope_scaling") or {})


def _rope_scaling(rope: dict) -> RopeScaling | None:
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return None
    if kind == "linear":
        return RopeScaling("linear", factor=float(rope["factor"]))
    if kind == "llama3":
        return RopeScaling("llama3", factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
                           high_freq_factor=float(rope["high_freq_factor"]),
                           original_max_position=int(rope["original_max_position_embeddings"]))
    raise ValueError(f"config.json: rope type {kind!r} is not supported (supported: default, linear, llama3)")


def _window_pattern(hf: dict, num_layers: int) -> int | None:
    types = hf.get("layer_types")
    if types is None:
        return hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern")
    if all(t == "full_attention" for t in types):
        return None
    pattern = types.index("full_attention") + 1 if "full_attention" in types else num_layers + 1
    expected = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)]
    if list(types) != expected:
        raise ValueError(f"config.json: layer_types {types} are not a periodic local/global pattern")
    return pattern


def family_of(hf: dict) -> str:
    """The model family ("gemma3", "llama3", "qwen3") of a parsed HF config.json."""
    model_type = "gemma3_text" if "text_config" in hf else hf.get("model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported; "
                         f"supported: {', '.join(sorted(_MODEL_TYPES))}")
    return _MODEL_TYPES[model_type]


def config_from_hf(hf: dict) -> ModelConfig:
    """ModelConfig from a parsed HF config.json (Gemma 3 text, Llama 3, Qwen 3)."""
    if "text_config" in hf:  # a multimodal Gemma 3 checkpoint: use its language model
        hf = hf["text_config"] | {"model_type": "gemma3_text"}
    family = family_of(hf)
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise ValueError(f"config.json: {flag}=true is not supported")
    for cap in ("final_logit_softcapping", "attn_logit_softcapping"):
        if hf.get(cap) is not None:
            raise ValueError(f"config.json: {cap}={hf[cap]} is not supported (Gemma 2 style softcapping)")
    num_layers = hf["num_hidden_layers"]
    is_gemma = family == "gemma3"
    pattern = _window_pattern(hf, num_layers) if is_gemma or hf.get("use_sliding_window") else None
    if family == "qwen3" and hf.get("use_sliding_window"):
        raise ValueError("config.json: Qwen 3 use_sliding_window=true is not supported")
    global_rope = _rope_settings(hf, "full_attention")
    local_rope = _rope_settings(hf, "sliding_attention")
    act = hf.get("hidden_activation") or hf.get("hidden_act")
    if act not in _ACTIVATIONS:
        raise ValueError(f"config.json: activation {act!r} is not supported")
    eos = hf.get("eos_token_id", 1)
    return ModelConfig(
        family=family,
        vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"],
        num_layers=num_layers,
        num_heads=hf["num_attention_heads"],
        num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        mlp_dim=hf["intermediate_size"],
        activation=_ACTIVATIONS[act],
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_plus_one=is_gemma,
        qk_norm=family in ("gemma3", "qwen3"),
        sandwich_norm=is_gemma,
        scale_embeddings=is_gemma,
        tie_embeddings=hf.get("tie_word_embeddings", is_gemma),
        rope_base=float(global_rope.get("rope_theta", 10_000.0)),
        rope_local_base=float(local_rope["rope_theta"]) if pattern else None,
        rope_scaling=_rope_scaling(global_rope),
        sliding_window=hf.get("sliding_window") if pattern else None,
        sliding_window_pattern=pattern,
        query_pre_attn_scalar=hf.get("query_pre_attn_scalar"),
        max_seq_len=hf.get("max_position_embeddings", 8192),
        bos_id=hf.get("bos_token_id") if hf.get("bos_token_id") is not None else 2,
        eos_id=eos[0] if isinstance(eos, list) else eos,
        pad_id=hf.get("pad_token_id") if hf.get("pad_token_id") is not None else 0,
    )


def config_to_hf(c: ModelConfig) -> dict:
    """HF config.json for `c` (what transformers needs to load our exported checkpoints)."""
    rope = {"rope_type": "default", "rope_theta": c.rope_base}
    if c.rope_scaling:
        s = c.rope_scaling
        rope = {"rope_theta": c.rope_base, "rope_type": s.kind, "factor": s.factor}
        if s.kind == "llama3":
            rope |= {"low_freq_factor": s.low_freq_factor, "high_freq_factor": s.high_freq_factor,
                     "original_max_position_embeddings": s.original_max_position}
    hf = {
        "vocab_size": c.vocab_size, "hidden_size": c.embed_dim, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim,
        "intermediate_size": c.mlp_dim, "rms_norm_eps": c.norm_eps, "tie_word_embeddings": c.tie_embeddings,
        "max_position_embeddings": c.max_seq_len, "bos_token_id": c.bos_id, "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id, "attention_bias": False, "torch_dtype": "float32",
    }
    if c.family == "gemma3":
        layer_types = ["full_attention" if c.is_global(i) else "sliding_attention" for i in range(c.num_layers)]
        return hf | {
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": c.query_pre_attn_scalar,
            "sliding_window": c.sliding_window, "layer_types": layer_types,
            "rope_parameters": {"full_attention": rope, "sliding_attention":
                                {"rope_type": "default", "rope_theta": c.rope_local_base or c.rope_base}},
            "final_logit_softcapping": None, "attn_logit_softcapping": None,
        }
    arch = {"llama3": ("LlamaForCausalLM", "llama"), "qwen3": ("Qwen3ForCausalLM", "qwen3")}[c.family]
    return hf | {"architectures": [arch[0]], "model_type": arch[1], "hidden_act": c.activation,
                 "rope_parameters": rope, "mlp_bias": False}


# ----------------------------------------------------------------------------- weight mapping


def _transpose(w):
    return w.T


def _keep(w):
    return w


def weight_map(c: ModelConfig) -> dict[tuple, tuple[str, Callable]]:
    """Our parameter path -> (HF tensor name, HF->ours transform). HF linears are [out, in]; ours [in, out]."""
    # Llama/Qwen call the pre-MLP norm `post_attention_layernorm`; Gemma 3 uses that name for the
    # sandwich norm after attention and calls the pre-MLP one `pre_feedforward_layernorm`.
    norms = {"input_norm": "input_layernorm"}
    if c.sandwich_norm:
        norms |= {"post_attn_norm": "post_attention_layernorm", "pre_mlp_norm": "pre_feedforward_layernorm",
                  "post_mlp_norm": "post_feedforward_layernorm"}
    else:
        norms |= {"pre_mlp_norm": "post_attention_layernorm"}
    table = {("embedder", "embedding"): ("model.embed_tokens.weight", _keep),
             ("final_norm", "scale"): ("model.norm.weight", _keep)}
    if not c.tie_embeddings:
        table[("lm_head", "kernel")] = ("lm_head.weight", _transpose)
    for i in range(c.num_layers):
        hf = f"model.layers.{i}"
        for ours, theirs in norms.items():
            table[("layers", i, ours, "scale")] = (f"{hf}.{theirs}.weight", _keep)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            table[("layers", i, "attn", proj, "kernel")] = (f"{hf}.self_attn.{proj}.weight", _transpose)
        if c.qk_norm:
            for norm in ("q_norm", "k_norm"):
                table[("layers", i, "attn", norm, "scale")] = (f"{hf}.self_attn.{norm}.weight", _keep)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            table[("layers", i, "mlp", proj, "kernel")] = (f"{hf}.mlp.{proj}.weight", _transpose)
    return table


_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.")


def _canonical(name: str) -> str:
    """Multimodal Gemma 3 checkpoints nest the text model under a prefix; strip it."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return "model." + name[len(prefix):]
    return name


def model_from_tensors(config: ModelConfig, tensors: dict[str, np.ndarray], *, where: str = "checkpoint") -> Transformer:
    """Build a Transformer from HF-named tensors without running a random init first."""
    tensors = {_canonical(k): v for k, v in tensors.items()}
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    table = weight_map(config)
    for path, var in flat:
        hf_name, transform = table[path]
        if hf_name not in tensors:
            raise KeyError(f"{where}: tensor {hf_name!r} is missing (needed for {'.'.join(map(str, path))})")
        value = transform(np.asarray(tensors[hf_name], dtype=np.float32))
        if value.shape != var.shape:
            raise ValueError(f"{where}: tensor {hf_name!r} has shape {tuple(tensors[hf_name].shape)}, "
                             f"the config expects {var.shape[::-1] if transform is _transpose else var.shape}")
        var.set_value(jnp.asarray(value, var.dtype))
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def model_to_tensors(model: Transformer, dtype=np.float32) -> dict[str, np.ndarray]:
    """The inverse of model_from_tensors: HF-named numpy arrays (float32 unless told otherwise)."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    table = weight_map(model.config)
    out = {}
    for path, var in flat:
        hf_name, transform = table[path]
        # transpose is its own inverse; copy so safetensors gets contiguous memory
        out[hf_name] = np.ascontiguousarray(transform(np.asarray(jax.device_get(var[...]), np.float32)), dtype)
    return out


# ----------------------------------------------------------------------------- directories


def read_tensors(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    index = directory / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (directory / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{directory}: no model.safetensors or model.safetensors.index.json")
    tensors = {}
    for name in files:
        # torch checkpoints may hold bf16; safetensors.numpy cannot, so go through the flax loader.
        try:
            tensors |= load_file(directory / name)
        except (TypeError, ValueError):
            from safetensors.flax import load_file as load_flax
            tensors |= {k: np.asarray(v, np.float32) for k, v in load_flax(directory / name).items()}
    return tensors


def load_hf_model(directory: str | Path) -> Transformer:
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{directory}: no config.json (expected a Hugging Face checkpoint directory)")
    config = config_from_hf(json.loads(config_path.read_text()))
    return model_from_tensors(config, read_tensors(directory), where=str(directory))


def save_hf_model(model: Transformer, directory: str | Path, dtype=np.float32) -> Path:
    """Write config.json + model.safetensors that both tunix_lite and transformers load.
    dtype=np.float16 halves the file (loading always computes in the config's dtype)."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config_to_hf(model.config), indent=2) + "\n")
    save_file(model_to_tensors(model, dtype), directory / "model.safetensors", metadata={"format": "pt"})
    return directory
